//! Changelog streams and tables: a stream of [`Change`]s (insert, update with its before
//! and after, delete) per key, the keyed [`Table`] materialized from one, aggregates over a
//! table that retract a row's old contribution when it changes ([`GroupedTable`]), and the
//! event-time temporal join of a stream with a table ([`Stream::temporal_join`](crate::dataflow::Stream::temporal_join)).
//!
//! The change type follows the two references: Flink's `RowKind` (`+I`, `-U`, `+U`, `-D`;
//! [`Change::row_kinds`]) and Kafka Streams' `Change<V>` (the old and the new value of a
//! key, either absent). A Debezium event maps onto it field for field: `op` `c` and `r` are
//! [`ChangeOp::Insert`] of `after`, `u` is [`ChangeOp::Update`] of `before` (absent unless
//! the table's replica identity is full) and `after`, `d` is [`ChangeOp::Delete`] of
//! `before` ([`Change::from_debezium`]). A record of a compacted topic is an upsert ([`Change::upsert`]): its value
//! replaces the key's, and a null value (a tombstone) deletes it.
//!
//! What each operator keeps, and where: every one is a keyed process function
//! ([`KeyedProcessFunction`](super::KeyedProcessFunction)), so its state lives in keyed
//! state on the shard owning its key, is part of every checkpoint (incrementally), and
//! moves between shard counts by key group like any other keyed state.
//!
//! - [`Stream::into_table`](crate::dataflow::Stream::into_table): the table keeps the latest value per key and *normalizes*
//!   the changelog: what it emits always carries the true before image (its own previous
//!   value), so an upsert or a delete without a before image becomes a full change, a
//!   delete of an absent key and an update that changes nothing emit nothing. It applies a
//!   key's changes in the order they arrive, which is the order of the source split that
//!   carries the key (a topic partition): a key's changes must come from one split, as a
//!   keyed topic and a database's log ensure.
//! - [`Table::group_by`]: each change of a row becomes a retraction of its before image
//!   from the old group and an addition of its after image to the new group, sent through
//!   a keyed exchange to each group's shard. A group applies the contributions of each
//!   event time once the watermark passes it, then emits one change of its result for
//!   that time; so its output depends only on the input, not on how the exchange
//!   interleaved the shards (which is what makes a restored run's output equal an
//!   uninterrupted one's). The price: results wait for the watermark.
//! - [`Stream::temporal_join`](crate::dataflow::Stream::temporal_join): each event is joined, once the watermark passes its time,
//!   with the table's row *as of the event's time* (Flink's event-time temporal join).
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::sync::{Arc, Mutex};
//! use sluice_engine::dataflow::changelog::Change;
//! use sluice_engine::dataflow::{Generator, Pipeline, PipelineConfig, WatermarkStrategy};
//! use sluice_io::EventTime;
//!
//! // Users (key) and their country (row); user 1 moves from "fr" to "de", user 2 leaves.
//! let log = [
//!     Change::insert(1u64, "fr".to_string()),
//!     Change::insert(2, "fr".to_string()),
//!     Change::insert(3, "de".to_string()),
//!     Change::update(1, None, "de".to_string()),
//!     Change::delete(2, None),
//! ];
//! let per_country = Arc::new(Mutex::new(BTreeMap::new()));
//! let sink = per_country.clone();
//! Pipeline::new(PipelineConfig::with_shards(2))
//!     .run(move |scope| {
//!         let log = log.clone();
//!         // One split holds every change (`Generator` splits by index residue), so each
//!         // user's changes stay in order.
//!         let count = if scope.shard() == 0 { log.len() as u64 } else { 0 };
//!         let users = scope
//!             .source(
//!                 Generator::new(0, 1, count, move |i| (i, log[i as usize].clone())),
//!                 WatermarkStrategy::monotonous(|(i, _): &(u64, Change<u64, String>)| {
//!                     EventTime::from_millis(*i as i64)
//!                 }),
//!             )
//!             .map(|(_, change)| change)
//!             .into_table();
//!         let sink = sink.clone();
//!         users.group_by(|_, country: &String| country.clone()).count().to_upsert_sink(move |country, n| {
//!             let mut counts = sink.lock().unwrap();
//!             match n {
//!                 Some(n) => counts.insert(country, n),
//!                 None => counts.remove(&country),
//!             };
//!             Ok(())
//!         });
//!     })
//!     .unwrap();
//! assert_eq!(*per_country.lock().unwrap(), BTreeMap::from([("de".to_string(), 2)]));
//! ```

mod aggregate;
mod join;
mod table;

pub use aggregate::{CountRows, GroupedTable, RetractingAggregate, SumBy};
pub use table::Table;

use super::checkpoint::{Data, StateError};
use super::topic::TopicRecord;

/// What happened to one key's row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ChangeOp<V> {
    /// The row was created (Debezium's `c`, and `r` for a snapshot read; Flink's `+I`).
    Insert(V),
    /// The row changed from `before` to `after`. `before` is `None` when the producer of
    /// the change did not know it (an upsert, or Debezium without a full replica
    /// identity); a [`Table`] fills it in.
    Update {
        /// The row before the change, if known.
        before: Option<V>,
        /// The row after the change.
        after: V,
    },
    /// The row was removed (Debezium's `d`; Flink's `-D`). `before` is `None` when it is
    /// not known (a tombstone); a [`Table`] fills it in.
    Delete {
        /// The row before it was removed, if known.
        before: Option<V>,
    },
}

/// A change to the row of `key`: one element of a changelog stream.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Change<K, V> {
    /// The row's primary key.
    pub key: K,
    /// What happened to it.
    pub op: ChangeOp<V>,
}

/// Flink's row kinds: how a change is written as a sequence of rows, each with its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowKind {
    /// `+I`: a new row.
    Insert,
    /// `-U`: the row as it was before an update.
    UpdateBefore,
    /// `+U`: the row as it is after an update.
    UpdateAfter,
    /// `-D`: a removed row.
    Delete,
}

impl RowKind {
    /// The short form Flink prints: `+I`, `-U`, `+U`, `-D`.
    #[must_use]
    pub fn short(self) -> &'static str {
        match self {
            RowKind::Insert => "+I",
            RowKind::UpdateBefore => "-U",
            RowKind::UpdateAfter => "+U",
            RowKind::Delete => "-D",
        }
    }
}

impl<K, V> Change<K, V> {
    /// A new row.
    pub fn insert(key: K, row: V) -> Self {
        Change { key, op: ChangeOp::Insert(row) }
    }

    /// A row changed from `before` (if known) to `after`.
    pub fn update(key: K, before: Option<V>, after: V) -> Self {
        Change { key, op: ChangeOp::Update { before, after } }
    }

    /// A removed row, with its last value if known.
    pub fn delete(key: K, before: Option<V>) -> Self {
        Change { key, op: ChangeOp::Delete { before } }
    }

    /// An upsert, as a compacted topic or an upsert stream carries it: `Some(row)` is the
    /// key's new row (its old one, if any, unknown), `None` deletes it.
    pub fn upsert(key: K, row: Option<V>) -> Self {
        match row {
            Some(after) => Change::update(key, None, after),
            None => Change::delete(key, None),
        }
    }

    /// The row after the change; `None` for a delete.
    #[must_use]
    pub fn after(&self) -> Option<&V> {
        match &self.op {
            ChangeOp::Insert(after) | ChangeOp::Update { after, .. } => Some(after),
            ChangeOp::Delete { .. } => None,
        }
    }

    /// The row before the change, if there was one and it is known.
    #[must_use]
    pub fn before(&self) -> Option<&V> {
        match &self.op {
            ChangeOp::Insert(_) => None,
            ChangeOp::Update { before, .. } | ChangeOp::Delete { before } => before.as_ref(),
        }
    }

    /// The change as Flink's rows: `+I after`; `-U before, +U after` (only `+U` when the
    /// before image is unknown); `-D before` (nothing when it is unknown).
    #[must_use]
    pub fn row_kinds(&self) -> Vec<(RowKind, &V)> {
        match &self.op {
            ChangeOp::Insert(after) => vec![(RowKind::Insert, after)],
            ChangeOp::Update { before, after } => {
                let mut rows = Vec::with_capacity(2);
                if let Some(before) = before {
                    rows.push((RowKind::UpdateBefore, before));
                }
                rows.push((RowKind::UpdateAfter, after));
                rows
            }
            ChangeOp::Delete { before } => before.iter().map(|b| (RowKind::Delete, b)).collect(),
        }
    }

    /// The change as an upsert: the key and its row after the change (`None`: deleted).
    /// This is what an upsert sink and a compacted topic take.
    #[must_use]
    pub fn into_upsert(self) -> (K, Option<V>) {
        match self.op {
            ChangeOp::Insert(after) | ChangeOp::Update { after, .. } => (self.key, Some(after)),
            ChangeOp::Delete { .. } => (self.key, None),
        }
    }

    /// The same change with its key and rows mapped.
    pub fn map<K2, V2>(self, key: impl FnOnce(K) -> K2, mut row: impl FnMut(V) -> V2) -> Change<K2, V2> {
        let op = match self.op {
            ChangeOp::Insert(after) => ChangeOp::Insert(row(after)),
            ChangeOp::Update { before, after } => ChangeOp::Update { before: before.map(&mut row), after: row(after) },
            ChangeOp::Delete { before } => ChangeOp::Delete { before: before.map(row) },
        };
        Change { key: key(self.key), op }
    }
}

/// Why a change could not be made of a producer's event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChangeError {
    /// The `op` is none of Debezium's (`c`, `r`, `u`, `d`; `t`, a truncate, has no key
    /// and is not a change of one row).
    #[error("a change event's op {0:?} is not one of c, r, u, d")]
    UnknownOp(String),
    /// An insert, snapshot read or update without its `after` row.
    #[error("a change event with op {0:?} has no after row")]
    MissingAfter(char),
}

impl<K, V> Change<K, V> {
    /// The change a Debezium event stands for, from its key, `op` and `before`/`after`
    /// rows (decoded by the caller): `c` and `r` insert `after`, `u` updates `before`
    /// (often absent) to `after`, `d` deletes `before`.
    ///
    /// # Errors
    ///
    /// [`ChangeError::UnknownOp`] for any other `op`; [`ChangeError::MissingAfter`] for a
    /// `c`, `r` or `u` without `after`.
    pub fn from_debezium(key: K, op: &str, before: Option<V>, after: Option<V>) -> Result<Self, ChangeError> {
        let op_char = match op {
            "c" | "r" | "u" | "d" => op.chars().next().expect("one character"),
            other => return Err(ChangeError::UnknownOp(other.to_owned())),
        };
        match (op_char, after) {
            ('d', _) => Ok(Change::delete(key, before)),
            ('u', Some(after)) => Ok(Change::update(key, before, after)),
            (_, Some(after)) => Ok(Change::insert(key, after)),
            (c, None) => Err(ChangeError::MissingAfter(c)),
        }
    }

    /// Debezium's `op` for this change: `c`, `u` or `d`.
    #[must_use]
    pub fn debezium_op(&self) -> &'static str {
        match self.op {
            ChangeOp::Insert(_) => "c",
            ChangeOp::Update { .. } => "u",
            ChangeOp::Delete { .. } => "d",
        }
    }
}

impl Change<Vec<u8>, Vec<u8>> {
    /// The change a record of a compacted topic stands for: an upsert of its value, or a
    /// delete for a null value (a tombstone; an empty value is a value). `None` for a
    /// record without a key, which a compacted topic does not hold.
    #[must_use]
    pub fn from_compacted(record: TopicRecord) -> Option<Self> {
        Some(Change::upsert(record.key?, record.value))
    }
}

/// Checkpointed (and carried through an exchange in an unaligned checkpoint) as a tag and
/// the rows: 0 insert, 1 update, 2 delete.
impl<K: Data, V: Data> Data for Change<K, V> {
    fn encode(&self, out: &mut Vec<u8>) {
        self.key.encode(out);
        match &self.op {
            ChangeOp::Insert(after) => {
                out.push(0);
                after.encode(out);
            }
            ChangeOp::Update { before, after } => {
                out.push(1);
                before.encode(out);
                after.encode(out);
            }
            ChangeOp::Delete { before } => {
                out.push(2);
                before.encode(out);
            }
        }
    }

    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let key = K::decode(input)?;
        let op = match u8::decode(input)? {
            0 => ChangeOp::Insert(V::decode(input)?),
            1 => ChangeOp::Update { before: Option::<V>::decode(input)?, after: V::decode(input)? },
            2 => ChangeOp::Delete { before: Option::<V>::decode(input)? },
            tag => return Err(StateError(format!("{tag} is not a change's tag"))),
        };
        Ok(Change { key, op })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_encode_and_decode_and_refuse_a_bad_tag() {
        let changes: Vec<Change<u64, String>> = vec![
            Change::insert(1, "a".into()),
            Change::update(2, Some("b".into()), "c".into()),
            Change::upsert(3, Some("d".into())),
            Change::delete(4, Some("e".into())),
            Change::upsert(5, None),
        ];
        let mut out = Vec::new();
        changes.encode(&mut out);
        assert_eq!(Vec::<Change<u64, String>>::decode(&mut &out[..]).unwrap(), changes);
        let mut bad = Vec::new();
        7u64.encode(&mut bad);
        bad.push(9);
        let err = Change::<u64, String>::decode(&mut &bad[..]).unwrap_err();
        assert!(err.0.contains("9 is not a change's tag"), "{err:?}");
    }

    #[test]
    fn debezium_ops_map_onto_changes_and_bad_ones_are_errors() {
        assert_eq!(Change::from_debezium(1u8, "c", None, Some(2u8)), Ok(Change::insert(1, 2)));
        assert_eq!(Change::from_debezium(1u8, "r", None, Some(2u8)), Ok(Change::insert(1, 2)));
        assert_eq!(Change::from_debezium(1u8, "u", None, Some(3u8)), Ok(Change::update(1, None, 3)));
        assert_eq!(Change::from_debezium(1u8, "u", Some(2), Some(3u8)), Ok(Change::update(1, Some(2), 3)));
        assert_eq!(Change::from_debezium(1u8, "d", Some(3u8), None), Ok(Change::delete(1, Some(3))));
        assert_eq!(Change::from_debezium(1u8, "t", None, None::<u8>), Err(ChangeError::UnknownOp("t".into())));
        assert_eq!(Change::from_debezium(1u8, "", None, None::<u8>), Err(ChangeError::UnknownOp(String::new())));
        assert_eq!(Change::from_debezium(1u8, "u", Some(2u8), None), Err(ChangeError::MissingAfter('u')));
        let ops: Vec<_> = [Change::insert(1u8, 1u8), Change::update(1, None, 2), Change::delete(1, None)]
            .iter()
            .map(Change::debezium_op)
            .collect();
        assert_eq!(ops, ["c", "u", "d"]);
    }

    #[test]
    fn row_kinds_and_upserts_follow_flink_and_kafka_streams() {
        let update = Change::update(1u8, Some(10u8), 11);
        let kinds: Vec<_> = update.row_kinds().into_iter().map(|(k, v)| (k.short(), *v)).collect();
        assert_eq!(kinds, vec![("-U", 10), ("+U", 11)]);
        assert_eq!(update.before(), Some(&10));
        assert_eq!(update.clone().into_upsert(), (1, Some(11)));
        let tombstone = Change::<u8, u8>::upsert(2, None);
        assert!(tombstone.row_kinds().is_empty(), "a delete with no before image has no row");
        assert_eq!(tombstone.into_upsert(), (2, None));
        assert_eq!(Change::insert(3u8, 4u8).map(u16::from, |v| v * 2), Change::insert(3u16, 8u8));
    }
}
