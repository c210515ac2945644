//! Parts of the first format (format 1: operators by build position, no uids or type
//! tags), still read so that a job upgraded to this build restores its last checkpoint.
//! A checkpoint's manifest says its format ([`PART_FORMAT`]): format 1 wrote no metadata.
//! Format 2 is format 3's layout with in-flight records stored without the watermarks
//! before them ([`PART_FORMAT_2`]).

use rkyv::util::AlignedVec;

use super::{
    ChannelPart, GroupPart, OperatorKey, ReadOperator, ReadPart, RestoredChannel, RestoredGroup, SinkPart, SourcePart,
    StateError,
};

/// The manifest metadata of a checkpoint whose parts are of the current format (3: each
/// in-flight record stored with the watermark its channel had sent before it).
pub(crate) const PART_FORMAT: &[u8] = b"sluice-part-format 3";

/// Format 2: the same layout, in-flight records stored alone.
pub(crate) const PART_FORMAT_2: &[u8] = b"sluice-part-format 2";

/// The format of a checkpoint's parts, by its manifest's metadata: 3, 2, or 1 (no
/// metadata, or none this build knows).
pub(crate) fn part_format(metadata: &[u8]) -> u8 {
    match metadata {
        PART_FORMAT => 3,
        PART_FORMAT_2 => 2,
        _ => 1,
    }
}

/// Format 1's part body.
#[derive(Debug, Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct V1ShardPart {
    pub(crate) base: Option<u64>,
    pub(crate) shard: u32,
    pub(crate) shards: u32,
    pub(crate) key_groups: u32,
    pub(crate) operators: Vec<V1OperatorPart>,
    pub(crate) sources: Vec<V1SourcePart>,
    pub(crate) sinks: Vec<SinkPart>,
    pub(crate) channels: Vec<ChannelPart>,
}

/// Format 1's source positions: by build position only.
#[derive(Debug, Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct V1SourcePart {
    pub(crate) id: u32,
    pub(crate) positions: Vec<(u64, i64)>,
    pub(crate) bounds: Vec<(u64, i64)>,
}

/// Format 1's operator state: by build position only.
#[derive(Debug, Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct V1OperatorPart {
    pub(crate) id: u32,
    pub(crate) watermark: i64,
    pub(crate) delta: bool,
    pub(crate) groups: Vec<GroupPart>,
}

/// Decodes a format-1 part body: every operator keyed by its position, without type tags
/// (a restore cannot check them). The groups are copied out (legacy parts only).
pub(crate) fn decode_v1(body: &AlignedVec<16>) -> Result<ReadPart, StateError> {
    let part = rkyv::from_bytes::<V1ShardPart, rkyv::rancor::Error>(body).map_err(|e| StateError(e.to_string()))?;
    let groups = |groups: Vec<GroupPart>| -> Vec<RestoredGroup> {
        groups.into_iter().map(|g| RestoredGroup::owned(g.key_group, g.entries, &g.bytes)).collect()
    };
    Ok(ReadPart {
        shards: part.shards,
        key_groups: part.key_groups,
        operators: part
            .operators
            .into_iter()
            .map(|op| ReadOperator {
                key: OperatorKey::Position(op.id),
                types: None,
                watermark: op.watermark,
                delta: op.delta,
                groups: groups(op.groups),
            })
            .collect(),
        sources: part
            .sources
            .into_iter()
            .map(|s| SourcePart { id: s.id, uid: None, positions: s.positions, bounds: s.bounds })
            .collect(),
        sinks: part.sinks,
        channels: part
            .channels
            .into_iter()
            .map(|c| (c.id, RestoredChannel { floor: None, groups: groups(c.groups) }))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::checkpoint::Restored;

    #[test]
    fn uid_a_format_1_part_restores_by_position() {
        let part = V1ShardPart {
            shard: 0,
            shards: 1,
            key_groups: 4,
            operators: vec![V1OperatorPart {
                id: 2,
                watermark: 99,
                delta: false,
                groups: vec![GroupPart { key_group: 1, entries: 1, bytes: vec![1, 2, 3] }],
            }],
            ..V1ShardPart::default()
        };
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&part).unwrap();
        let mut body = AlignedVec::new();
        body.extend_from_slice(&bytes);
        let mut restored = Restored::default();
        restored.merge_chain(vec![decode_v1(&body).unwrap()]);
        let op = &restored.operators[&OperatorKey::Position(2)];
        assert_eq!(op.watermark, 99);
        assert!(op.types.is_none());
        assert_eq!(op.groups[0].bytes(), &[1, 2, 3]);
    }
}
