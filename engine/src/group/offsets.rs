//! Committed offsets of consumer groups, stored as records of the internal compacted
//! topic `__consumer_offsets` (as Kafka does): the key names the group, topic and
//! partition, the value is the offset (8 bytes, little-endian). A group's offsets live
//! in partition `murmur2(group) % partitions` of that topic, on the shard that owns it,
//! which is also the shard that coordinates the group.

use std::collections::{BTreeMap, HashMap};

use sluice_io::{Log, LogError, Offset, PartitionId, Storage, Timestamp};

use crate::record::OwnedRecord;

/// The internal topic's name.
pub const TOPIC: &str = "__consumer_offsets";

/// A group's committed offsets by (topic, partition).
pub type Committed = BTreeMap<(String, PartitionId), Offset>;

fn key(group: &str, topic: &str, partition: PartitionId) -> Vec<u8> {
    // Names cannot contain '/', so the key splits back unambiguously.
    format!("{group}/{topic}/{partition}").into_bytes()
}

fn parse_key(key: &[u8]) -> Option<(String, String, PartitionId)> {
    let s = std::str::from_utf8(key).ok()?;
    let mut it = s.splitn(3, '/');
    let (group, topic, p) = (it.next()?, it.next()?, it.next()?);
    Some((group.to_string(), topic.to_string(), PartitionId(p.parse().ok()?)))
}

/// The records that commit `offsets` for `group`.
pub(crate) fn records(group: &str, offsets: &[(String, PartitionId, Offset)]) -> Vec<OwnedRecord> {
    let now = Timestamp::now();
    offsets
        .iter()
        .map(|(topic, p, offset)| OwnedRecord::new(Some(key(group, topic, *p)), offset.0.to_le_bytes(), now))
        .collect()
}

/// Reads a partition of the offsets topic: the latest committed offset of every group,
/// topic and partition it holds.
pub(crate) async fn load<S: Storage>(log: &Log<S>) -> Result<HashMap<String, Committed>, LogError> {
    let mut out: HashMap<String, Committed> = HashMap::new();
    let mut reader = log.reader(log.start_offset(), 1 << 20);
    loop {
        let batches = reader.next().await?;
        if batches.is_empty() {
            return Ok(out);
        }
        for r in batches.records() {
            let r = r?;
            let (Some((group, topic, p)), Ok(bytes)) =
                (r.key().and_then(parse_key), <[u8; 8]>::try_from(r.value_bytes()))
            else {
                continue; // not a commit this version wrote: skip, never fail the shard
            };
            out.entry(group).or_default().insert((topic, p), Offset(u64::from_le_bytes(bytes)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        assert_eq!(
            parse_key(&key("g.1", "orders_v2", PartitionId(17))),
            Some(("g.1".into(), "orders_v2".into(), PartitionId(17)))
        );
        assert_eq!(parse_key(b"nonsense"), None);
        assert_eq!(parse_key(b"g/t/x"), None);
    }
}
