//! The event-time temporal join of a stream with a table ([`Stream::temporal_join`]).
//!
//! Semantics, chosen so that the output depends on the input alone: an event at time `t`
//! is joined with the row its key had *as of `t`*: the last change of the key at a time
//! `<= t` (none, or a delete: no row). The join waits for the watermark to pass `t`, when
//! every change at or before `t` has arrived, as Flink's event-time temporal join does. A
//! run restored from a checkpoint therefore emits what an uninterrupted run emits, in the
//! same order per key and time; events of one key and time from different shards may come
//! out in either order.
//!
//! State, per key, on the shard owning it: the table's versions from the one valid at the
//! watermark on (older ones can no longer be asked for and are dropped when the watermark
//! passes), and the events waiting for the watermark, by time. A late event (at or below
//! the watermark when it arrives) is joined with the versions still kept: the one valid
//! at its time if that is kept, no row if its time is before the oldest version kept.

use std::hash::Hash;

use super::{Change, Table};
use crate::dataflow::{
    Event, KeyedProcessFunction, ListState, MapState, ProcessContext, Stream, Timer,
    checkpoint::{Data, StateError},
};

/// What the join's keyed operator takes: an event of the stream, or a change of the table.
enum Side<T, K, V> {
    Event(T),
    Change(Change<K, V>),
}

/// Carried through the exchange (and stored in flight by an unaligned checkpoint) as a
/// tag, 0 for an event and 1 for a change, and the value.
impl<T: Data, K: Data, V: Data> Data for Side<T, K, V> {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Side::Event(event) => {
                out.push(0);
                event.encode(out);
            }
            Side::Change(change) => {
                out.push(1);
                change.encode(out);
            }
        }
    }

    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        match u8::decode(input)? {
            0 => Ok(Side::Event(T::decode(input)?)),
            1 => Ok(Side::Change(Change::decode(input)?)),
            tag => Err(StateError(format!("{tag} is not a temporal join input's tag"))),
        }
    }
}

/// The keyed function: the key's versions (time, row or `None` for deleted), sorted by
/// time, and the events waiting for the watermark.
struct TemporalJoin<J> {
    join: J,
}

type JoinState<T, V> = (ListState<(i64, Option<V>)>, MapState<i64, Vec<T>>);

impl<K, T, V, O, J> KeyedProcessFunction<K, Side<T, K, V>> for TemporalJoin<J>
where
    K: Hash + Eq + Clone + 'static,
    T: 'static,
    V: Clone + 'static,
    O: 'static,
    J: FnMut(T, Option<&V>) -> O + 'static,
{
    type State = JoinState<T, V>;
    type Out = O;

    fn process_element(
        &mut self,
        _: &K,
        event: Event<Side<T, K, V>>,
        state: &mut Self::State,
        ctx: &mut ProcessContext<'_, K, O>,
    ) {
        let time = event.time.millis();
        match event.value {
            Side::Event(value) => state.1.entry(time).or_default().push(value),
            Side::Change(change) => {
                let mut versions = state.0.take();
                add_version(&mut versions, time, change.after().cloned());
                state.0.update(versions);
            }
        }
        ctx.register_event_time_timer(event.time);
    }

    fn on_timer(&mut self, _: &K, timer: Timer, state: &mut Self::State, ctx: &mut ProcessContext<'_, K, O>) {
        let time = timer.time.millis();
        let row = row_at(state.0.get(), time);
        for value in state.1.remove(&time).unwrap_or_default() {
            ctx.emit((self.join)(value, row));
        }
        let mut versions = state.0.take();
        prune(&mut versions, time);
        state.0.update(versions);
    }
}

/// Adds the version of a change at `time` after every version at or before that time: of
/// two changes at one time, the later one is the row as of that time.
fn add_version<V>(versions: &mut Vec<(i64, Option<V>)>, time: i64, row: Option<V>) {
    let at = versions.partition_point(|(t, _)| *t <= time);
    versions.insert(at, (time, row));
}

/// The row as of `time`: the last version at or before it, unless that is a deletion.
fn row_at<V>(versions: &[(i64, Option<V>)], time: i64) -> Option<&V> {
    let valid = versions.partition_point(|(t, _)| *t <= time);
    valid.checked_sub(1).and_then(|i| versions[i].1.as_ref())
}

/// The watermark has reached `time`: the versions before the one valid at it can no
/// longer be asked for, nor can that one if it is a deletion with nothing after it.
fn prune<V>(versions: &mut Vec<(i64, Option<V>)>, time: i64) {
    let valid = versions.partition_point(|(t, _)| *t <= time);
    if valid > 1 {
        versions.drain(..valid - 1);
    }
    if valid > 0 && versions.len() == 1 && versions[0].1.is_none() {
        versions.clear();
    }
}

impl<T: Send + Data> Stream<T> {
    /// Joins each event with the row of `table` its key had at the event's time (an
    /// event-time temporal join; see the module's semantics): `join(event, row)` with
    /// `row` `None` when the key had no row then (so this is a left join: drop those for
    /// an inner one). An event is joined once the watermark reaches its time; the output
    /// carries the event's time and is on the shard owning the key.
    ///
    /// The events and the table's changes are partitioned by key together (one keyed
    /// exchange), and their state is keyed state: checkpointed, restorable at another
    /// shard count.
    pub fn temporal_join<K, V, O>(
        self,
        table: &Table<K, V>,
        key: impl Fn(&T) -> K + 'static,
        join: impl FnMut(T, Option<&V>) -> O + 'static,
    ) -> Stream<O>
    where
        K: Hash + Eq + Clone + Send + Data,
        V: Clone + PartialEq + Send + Data,
        O: 'static,
    {
        let events = self.map(Side::Event);
        let changes = table.changes().map(Side::Change);
        events
            .union(changes)
            .key_by(move |side: &Side<T, K, V>| match side {
                Side::Event(event) => key(event),
                Side::Change(change) => change.key.clone(),
            })
            .process(TemporalJoin { join })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_answer_as_of_a_time_and_prune_to_the_one_valid_at_the_watermark() {
        let mut v: Vec<(i64, Option<char>)> = Vec::new();
        add_version(&mut v, 10, None);
        add_version(&mut v, 5, Some('a'));
        add_version(&mut v, 15, Some('b'));
        add_version(&mut v, 15, Some('c'));
        assert_eq!(v, vec![(5, Some('a')), (10, None), (15, Some('b')), (15, Some('c'))]);
        assert_eq!(row_at(&v, 4), None, "before the first version");
        assert_eq!(row_at(&v, 5), Some(&'a'), "a change at the event's time counts");
        assert_eq!(row_at(&v, 12), None, "deleted");
        assert_eq!(row_at(&v, 15), Some(&'c'), "the later of two changes at one time");
        prune(&mut v, 9);
        assert_eq!(v.len(), 4, "the version valid at 9 is the first");
        prune(&mut v, 12);
        assert_eq!(v, vec![(10, None), (15, Some('b')), (15, Some('c'))]);
        assert_eq!(row_at(&v, 12), None);
        prune(&mut v, 20);
        assert_eq!(v, vec![(15, Some('c'))]);
        add_version(&mut v, 30, None);
        prune(&mut v, 29);
        assert_eq!(v.len(), 2);
        prune(&mut v, 30);
        assert!(v.is_empty(), "a key deleted as of the watermark holds nothing");
    }
}
