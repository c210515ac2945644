//! [`Table`]: the latest row per key, materialized from a changelog stream in keyed state,
//! and its views back to streams: its (normalized) changes and its upserts.

use std::hash::Hash;

use super::{Change, ChangeOp};
use crate::dataflow::UserError;
use crate::dataflow::{
    Event, KeyedProcessFunction, ProcessContext, Stream, ValueState, checkpoint::Data, topic::TopicSink,
    twophase::Upsert,
};
use crate::record::OwnedRecord;

/// A keyed table: the latest row of every key, held on the shard that owns the key (keyed
/// state, checkpointed by key group), seen through the changes it makes.
///
/// Every change it emits is *normalized*: an insert of a new key, an update carrying the
/// row it replaced, a delete carrying the row it removed. So a consumer of
/// [`Table::changes`] can retract exactly what it added before.
pub struct Table<K, V> {
    changes: Stream<Change<K, V>>,
}

impl<K, V> std::fmt::Debug for Table<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").finish_non_exhaustive()
    }
}

impl<K: Clone + 'static, V: Clone + 'static> Clone for Table<K, V> {
    fn clone(&self) -> Self {
        Table { changes: self.changes.clone() }
    }
}

/// The process function that keeps a key's row and normalizes its changes.
struct Materialize;

impl<K: Hash + Eq + Clone + 'static, V: Clone + PartialEq + 'static> KeyedProcessFunction<K, Change<K, V>>
    for Materialize
{
    type State = ValueState<V>;
    type Out = Change<K, V>;

    fn process_element(
        &mut self,
        key: &K,
        event: Event<Change<K, V>>,
        row: &mut ValueState<V>,
        ctx: &mut ProcessContext<'_, K, Change<K, V>>,
    ) {
        let change = match event.value.op {
            ChangeOp::Insert(after) | ChangeOp::Update { after, .. } => {
                if row.get() == Some(&after) {
                    return;
                }
                match row.set(after.clone()) {
                    None => Change::insert(key.clone(), after),
                    Some(before) => Change::update(key.clone(), Some(before), after),
                }
            }
            ChangeOp::Delete { .. } => match row.take() {
                Some(before) => Change::delete(key.clone(), Some(before)),
                None => return,
            },
        };
        ctx.emit(change);
    }
}

impl<K, V> Stream<Change<K, V>>
where
    K: Hash + Eq + Clone + Send + Data,
    V: Clone + PartialEq + Send + Data,
{
    /// Materializes the changelog into a [`Table`]: the stream is partitioned by key and
    /// each key's latest row kept in keyed state (checkpointed, restorable at another
    /// shard count). The before images in the input are not trusted: the table's own
    /// previous row is what its changes carry.
    ///
    /// A key's changes are applied in the order they arrive, which must be the order they
    /// happened: give each key's changes one source split (a keyed topic's partition does).
    #[must_use]
    pub fn into_table(self) -> Table<K, V> {
        Table { changes: self.key_by(|c: &Change<K, V>| c.key.clone()).process(Materialize) }
    }
}

impl<K, V> Table<K, V>
where
    K: Hash + Eq + Clone + Send + Data,
    V: Clone + PartialEq + Send + Data,
{
    /// A table from a changelog that is already normalized and partitioned by key (the
    /// output of an operator over a table, such as a grouped aggregate).
    pub(super) fn from_normalized(changes: Stream<Change<K, V>>) -> Self {
        Table { changes }
    }

    /// Names the operator that keeps the table's state ([`Stream::uid`]), so a changed job
    /// still restores it.
    #[must_use]
    pub fn uid(self, uid: &str) -> Self {
        Table { changes: self.changes.uid(uid) }
    }

    /// The table as a stream of its changes (normalized), on the shards owning the keys,
    /// each at the event time of the change that made it.
    #[must_use]
    pub fn changes(&self) -> Stream<Change<K, V>> {
        self.changes.clone()
    }

    /// The table as a stream of upserts: each key with its row after a change, `None`
    /// when the change deleted it.
    #[must_use]
    pub fn upserts(&self) -> Stream<(K, Option<V>)> {
        self.changes.clone().map(Change::into_upsert)
    }

    /// Writes the table into an external key-value system through an [`Upsert`] sink:
    /// `upsert(key, Some(row))` for a row, `upsert(key, None)` for a delete, exactly once
    /// per checkpoint epoch when the pipeline checkpoints (see [`Upsert`]).
    pub fn to_upsert_sink(&self, upsert: impl FnMut(K, Option<V>) -> Result<(), UserError> + 'static) {
        let sink: Upsert<K, Option<V>, _> = Upsert::new(upsert);
        self.upserts().to_two_phase_commit(sink);
    }

    /// Writes the table to a compacted topic: one record per change, keyed by
    /// `encode_key`, its value `encode_row(row)`, or a null value (a tombstone) for a
    /// delete, so compaction leaves the table's latest rows. With
    /// [`TopicSink::exactly_once`] and checkpoints, each change is in the topic once for
    /// `read_committed` readers.
    pub fn to_compacted_topic(
        &self,
        sink: &TopicSink,
        encode_key: impl Fn(&K) -> Vec<u8> + 'static,
        encode_row: impl Fn(&V) -> Vec<u8> + 'static,
    ) {
        self.upserts().to_topic_records(sink, move |(key, row), time| OwnedRecord {
            key: Some(encode_key(&key)),
            value: row.as_ref().map(&encode_row),
            event_time: time,
            headers: Vec::new(),
        });
    }
}
