//! Committed offsets of consumer groups, stored as records of the internal compacted
//! topic `__consumer_offsets` (as Kafka does). A group's offsets live in partition
//! `murmur2(group) % partitions` of that topic, on the shard that owns it, which is also
//! the shard that coordinates the group.
//!
//! A group id is any string a client sends (Kafka's rule: `roundrobin,range`, `a/b`, `..`
//! and unicode are all group ids), so it is only ever bytes inside a record key, never
//! part of a path. The formats:
//!
//! - key, version 1: a zero byte, then the group, the topic (each a big-endian u16 length
//!   and UTF-8 bytes) and the partition (big-endian u32). Version 0, written before group
//!   ids could be any string, is `{group}/{topic}/{partition}` in text; such a key starts
//!   with a name character, never with a zero byte, so the two cannot be confused, and
//!   version 0 keys are still read.
//! - value, version 1: a one byte, the offset (u64), the leader epoch (i32, -1 for none),
//!   both little-endian, then the metadata string's UTF-8 bytes (the rest of the value).
//!   Version 0 is the offset alone (8 bytes: no leader epoch, empty metadata).
//! - an empty value deletes the key (a tombstone: DeleteGroups, OffsetDelete). Deleting a
//!   group whose id could have been written as a version 0 key also deletes that key.

use std::collections::{BTreeMap, HashMap};

use sluice_io::{Log, LogError, Offset, PartitionId, Storage, Timestamp};

use crate::record::OwnedRecord;
use crate::topic::names::validate_name;

/// The internal topic's name.
pub const TOPIC: &str = "__consumer_offsets";

/// The longest commit metadata accepted, in bytes (Kafka's `offset.metadata.max.bytes`).
pub const METADATA_MAX_BYTES: usize = 4096;

/// A group's committed offsets by (topic, partition).
pub type Committed = BTreeMap<(String, PartitionId), Offset>;

/// A group's committed offsets by (topic, partition), with what each commit carried.
pub type CommittedDetails = BTreeMap<(String, PartitionId), CommittedOffset>;

/// One committed position: the next offset to read, and what the committer stored with it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The next record the group reads.
    pub offset: Offset,
    /// The leader epoch of the record before it, as the client saw it (Kafka's
    /// `committed_leader_epoch`), if the client gave one.
    pub leader_epoch: Option<i32>,
    /// The client's string (Kafka's `committed_metadata`), at most [`METADATA_MAX_BYTES`].
    pub metadata: String,
}

impl CommittedOffset {
    /// A position with no leader epoch and no metadata.
    #[must_use]
    pub fn at(offset: Offset) -> CommittedOffset {
        CommittedOffset { offset, leader_epoch: None, metadata: String::new() }
    }
}

/// A commit of one partition.
pub type OffsetCommit = (String, PartitionId, CommittedOffset);

const KEY_V1: u8 = 0;
const VALUE_V1: u8 = 1;

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Group ids and topic names come in Kafka strings (at most i16::MAX bytes); the
    // handle's entry points refuse longer ones before anything is written.
    debug_assert!(s.len() <= usize::from(u16::MAX));
    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn key(group: &str, topic: &str, partition: PartitionId) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + 2 + group.len() + 2 + topic.len() + 4);
    k.push(KEY_V1);
    put_str(&mut k, group);
    put_str(&mut k, topic);
    k.extend_from_slice(&partition.get().to_be_bytes());
    k
}

/// The version 0 key, if `group` and `topic` are names that version could have held.
fn key_v0(group: &str, topic: &str, partition: PartitionId) -> Option<Vec<u8>> {
    (validate_name("group", group).is_ok() && validate_name("topic", topic).is_ok())
        .then(|| format!("{group}/{topic}/{partition}").into_bytes())
}

fn parse_key(key: &[u8]) -> Option<(String, String, PartitionId)> {
    match key.split_first()? {
        (&KEY_V1, mut rest) => {
            let mut take_str = || -> Option<String> {
                let (len, tail) = rest.split_first_chunk::<2>()?;
                let len = usize::from(u16::from_be_bytes(*len));
                let s = std::str::from_utf8(tail.get(..len)?).ok()?.to_string();
                rest = &tail[len..];
                Some(s)
            };
            let (group, topic) = (take_str()?, take_str()?);
            let p: [u8; 4] = rest.try_into().ok()?;
            Some((group, topic, PartitionId(u32::from_be_bytes(p))))
        }
        _ => {
            let s = std::str::from_utf8(key).ok()?;
            let mut it = s.splitn(3, '/');
            let (group, topic, p) = (it.next()?, it.next()?, it.next()?);
            Some((group.to_string(), topic.to_string(), PartitionId(p.parse().ok()?)))
        }
    }
}

fn value(c: &CommittedOffset) -> Vec<u8> {
    let mut v = Vec::with_capacity(13 + c.metadata.len());
    v.push(VALUE_V1);
    v.extend_from_slice(&c.offset.0.to_le_bytes());
    v.extend_from_slice(&c.leader_epoch.unwrap_or(-1).to_le_bytes());
    v.extend_from_slice(c.metadata.as_bytes());
    v
}

/// What a value says: a position, a deletion (`Some(None)`), or nothing this version
/// knows (`None`).
fn parse_value(v: &[u8]) -> Option<Option<CommittedOffset>> {
    if v.is_empty() {
        return Some(None);
    }
    if let Ok(old) = <[u8; 8]>::try_from(v) {
        return Some(Some(CommittedOffset::at(Offset(u64::from_le_bytes(old)))));
    }
    let (&VALUE_V1, rest) = v.split_first()? else { return None };
    let (offset, rest) = rest.split_first_chunk::<8>()?;
    let (epoch, metadata) = rest.split_first_chunk::<4>()?;
    let epoch = i32::from_le_bytes(*epoch);
    Some(Some(CommittedOffset {
        offset: Offset(u64::from_le_bytes(*offset)),
        leader_epoch: (epoch >= 0).then_some(epoch),
        metadata: std::str::from_utf8(metadata).ok()?.to_string(),
    }))
}

/// The records that commit `offsets` for `group`.
pub(crate) fn records(group: &str, offsets: &[OffsetCommit]) -> Vec<OwnedRecord> {
    let now = Timestamp::now();
    offsets.iter().map(|(topic, p, c)| OwnedRecord::new(Some(key(group, topic, *p)), value(c), now)).collect()
}

/// The tombstones that delete `group`'s offsets of `partitions` (in both key formats
/// where the old one could exist).
pub(crate) fn tombstones(group: &str, partitions: &[(String, PartitionId)]) -> Vec<OwnedRecord> {
    let now = Timestamp::now();
    partitions
        .iter()
        .flat_map(|(topic, p)| [Some(key(group, topic, *p)), key_v0(group, topic, *p)])
        .flatten()
        .map(|k| OwnedRecord::tombstone(k, now))
        .collect()
}

/// Reads a partition of the offsets topic: the latest committed offset of every group,
/// topic and partition it holds.
pub(crate) async fn load<S: Storage>(log: &Log<S>) -> Result<HashMap<String, CommittedDetails>, LogError> {
    let mut out: HashMap<String, CommittedDetails> = HashMap::new();
    let mut reader = log.reader(log.start_offset(), 1 << 20);
    loop {
        let batches = reader.next().await?;
        if batches.is_empty() {
            out.retain(|_, offsets| !offsets.is_empty());
            return Ok(out);
        }
        for r in batches.records() {
            let r = r?;
            let (Some((group, topic, p)), Some(change)) = (r.key().and_then(parse_key), parse_value(r.value_bytes()))
            else {
                continue; // not a commit this version wrote: skip, never fail the shard
            };
            match change {
                Some(c) => {
                    out.entry(group).or_default().insert((topic, p), c);
                }
                None => {
                    if let Some(offsets) = out.get_mut(&group) {
                        offsets.remove(&(topic, p));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_for_any_group_id() {
        for group in ["g.1", "roundrobin,range", "a/b", "..", "", "grüppe ✓", "x/y/z"] {
            assert_eq!(
                parse_key(&key(group, "orders_v2", PartitionId(17))),
                Some((group.into(), "orders_v2".into(), PartitionId(17))),
                "{group:?}"
            );
        }
        assert_eq!(parse_key(b"nonsense"), None);
        assert_eq!(parse_key(b"g/t/x"), None);
        assert_eq!(parse_key(&[0, 0, 5, b'a']), None, "a length past the end");
        let mut trailing = key("g", "t", PartitionId(1));
        trailing.push(0);
        assert_eq!(parse_key(&trailing), None);
    }

    #[test]
    fn version_0_keys_and_values_still_read() {
        assert_eq!(parse_key(b"g.1/orders_v2/17"), Some(("g.1".into(), "orders_v2".into(), PartitionId(17))));
        assert_eq!(parse_value(&42u64.to_le_bytes()), Some(Some(CommittedOffset::at(Offset(42)))));
        assert_eq!(key_v0("g.1", "orders_v2", PartitionId(17)).as_deref(), Some(&b"g.1/orders_v2/17"[..]));
        assert_eq!(key_v0("a/b", "t", PartitionId(0)), None, "no version 0 key could name it");
    }

    #[test]
    fn values_keep_metadata_and_leader_epoch() {
        for c in [
            CommittedOffset { offset: Offset(7), leader_epoch: Some(3), metadata: "from the test ✓".into() },
            CommittedOffset::at(Offset(0)),
            CommittedOffset { offset: Offset(u64::MAX), leader_epoch: None, metadata: "x".repeat(METADATA_MAX_BYTES) },
        ] {
            assert_eq!(parse_value(&value(&c)), Some(Some(c)));
        }
        assert_eq!(parse_value(&[]), Some(None), "a tombstone");
        assert_eq!(parse_value(&[1, 2, 3]), None);
        assert_eq!(parse_value(&[9; 20]), None, "an unknown version");
    }
}
