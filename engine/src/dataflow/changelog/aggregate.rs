//! Aggregates over a table that retract: [`Table::group_by`] and [`GroupedTable`].
//!
//! Each change of a row becomes contributions to groups: a retraction of the row's before
//! image from the group it was in, an addition of its after image to the group it is in
//! now. A contribution travels through a keyed exchange to its group's shard, so a row
//! that moves between groups retracts on one shard and adds on another. Between one shard
//! and another the rings keep order, and a row's changes all leave from the shard owning
//! the row, so a row's addition to a group always reaches the group before its retraction.
//!
//! A group does not apply a contribution on arrival: it keeps the contributions of each
//! event time (in keyed state) and applies them when the watermark passes that time, then
//! emits one change of its result, at that time. Contributions from different shards
//! arrive interleaved in whatever order the rings delivered them, so the result must not
//! depend on the order of one time's contributions: `add` and `retract` must commute (a
//! count, a sum, a multiset do). In exchange a group's output is a function of the input
//! alone, the same in a run restored from a checkpoint as in one never interrupted.

use std::hash::Hash;

use super::{Change, ChangeOp, Table};
use crate::dataflow::{
    Event, KeyedProcessFunction, MapState, ProcessContext, Stream, Timer, ValueState, checkpoint::Data,
};

/// An aggregate a row can be added to and retracted from, for [`GroupedTable::aggregate`].
///
/// `add` and `retract` of one row must undo each other, and all of them must commute: a
/// group applies the contributions of one event time in arrival order, which varies
/// between runs.
pub trait RetractingAggregate<V>: 'static {
    /// The running state of one group (checkpointed).
    type Acc: Default + Data;
    /// The group's result.
    type Out: Clone + PartialEq + Send + Data;
    /// Adds a row's contribution.
    fn add(&self, acc: &mut Self::Acc, row: &V);
    /// Takes a row's contribution back out.
    fn retract(&self, acc: &mut Self::Acc, row: &V);
    /// The group's result, for a group that holds at least one row.
    fn result(&self, acc: &Self::Acc) -> Self::Out;
}

/// The number of rows in each group.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountRows;

impl<V> RetractingAggregate<V> for CountRows {
    type Acc = i64;
    type Out = i64;
    fn add(&self, acc: &mut i64, _: &V) {
        *acc += 1;
    }
    fn retract(&self, acc: &mut i64, _: &V) {
        *acc -= 1;
    }
    fn result(&self, acc: &i64) -> i64 {
        *acc
    }
}

/// The sum of a column over each group's rows (wrapping on overflow, so that the order
/// of additions and retractions never matters).
#[derive(Debug, Clone, Copy)]
pub struct SumBy<F>(pub F);

impl<V, F: Fn(&V) -> i64 + 'static> RetractingAggregate<V> for SumBy<F> {
    type Acc = i64;
    type Out = i64;
    fn add(&self, acc: &mut i64, row: &V) {
        *acc = acc.wrapping_add((self.0)(row));
    }
    fn retract(&self, acc: &mut i64, row: &V) {
        *acc = acc.wrapping_sub((self.0)(row));
    }
    fn result(&self, acc: &i64) -> i64 {
        *acc
    }
}

/// A table's rows grouped by a column ([`Table::group_by`]): the contributions of every
/// change, partitioned by group. Aggregate it with [`GroupedTable::aggregate`],
/// [`GroupedTable::count`] or [`GroupedTable::sum`].
pub struct GroupedTable<G, V> {
    contributions: Stream<(G, bool, V)>,
}

impl<G, V> std::fmt::Debug for GroupedTable<G, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupedTable").finish_non_exhaustive()
    }
}

impl<K, V> Table<K, V>
where
    K: Hash + Eq + Clone + Send + Data,
    V: Clone + PartialEq + Send + Data,
{
    /// Groups the table's rows by `group(key, row)`; a row whose group changes moves from
    /// one group to the other.
    #[must_use]
    pub fn group_by<G: 'static>(&self, group: impl Fn(&K, &V) -> G + 'static) -> GroupedTable<G, V> {
        let contributions = self.changes().flat_map(move |change: Change<K, V>| {
            let Change { key, op } = change;
            let (before, after) = match op {
                ChangeOp::Insert(after) => (None, Some(after)),
                ChangeOp::Update { before, after } => (before, Some(after)),
                ChangeOp::Delete { before } => (before, None),
            };
            let retract = before.map(|row| (group(&key, &row), false, row));
            let add = after.map(|row| (group(&key, &row), true, row));
            retract.into_iter().chain(add)
        });
        GroupedTable { contributions }
    }
}

impl<G, V> GroupedTable<G, V>
where
    G: Hash + Eq + Clone + Send + Data,
    V: Send + Data,
{
    /// Aggregates each group with `aggregate`: a table of the groups that hold rows, whose
    /// changes are emitted as the watermark passes the times of the changes that caused
    /// them (one change per group and time at most). A group whose last row leaves is
    /// deleted.
    #[must_use]
    pub fn aggregate<A: RetractingAggregate<V>>(self, aggregate: A) -> Table<G, A::Out> {
        let changes = self
            .contributions
            .key_by(|c: &(G, bool, V)| c.0.clone())
            .process(GroupAggregate { aggregate, _v: std::marker::PhantomData });
        Table::from_normalized(changes)
    }

    /// The number of rows in each group.
    #[must_use]
    pub fn count(self) -> Table<G, i64> {
        self.aggregate(CountRows)
    }

    /// The sum of `column` over each group's rows.
    #[must_use]
    pub fn sum(self, column: impl Fn(&V) -> i64 + 'static) -> Table<G, i64> {
        self.aggregate(SumBy(column))
    }
}

/// The process function of a group: its rows' count and accumulator as applied so far,
/// the result it emitted last, and the contributions waiting for the watermark, by time.
struct GroupAggregate<A, V> {
    aggregate: A,
    _v: std::marker::PhantomData<fn(V)>,
}

type GroupState<A, V> = (
    ValueState<(i64, <A as RetractingAggregate<V>>::Acc)>,
    ValueState<<A as RetractingAggregate<V>>::Out>,
    MapState<i64, Vec<(bool, V)>>,
);

impl<G, V, A> KeyedProcessFunction<G, (G, bool, V)> for GroupAggregate<A, V>
where
    G: Hash + Eq + Clone + 'static,
    V: 'static,
    A: RetractingAggregate<V>,
{
    type State = GroupState<A, V>;
    type Out = Change<G, A::Out>;

    fn process_element(
        &mut self,
        _: &G,
        event: Event<(G, bool, V)>,
        state: &mut Self::State,
        ctx: &mut ProcessContext<'_, G, Self::Out>,
    ) {
        let (_, add, row) = event.value;
        state.2.entry(event.time.millis()).or_default().push((add, row));
        ctx.register_event_time_timer(event.time);
    }

    fn on_timer(
        &mut self,
        group: &G,
        timer: Timer,
        state: &mut Self::State,
        ctx: &mut ProcessContext<'_, G, Self::Out>,
    ) {
        let Some(contributions) = state.2.remove(&timer.time.millis()) else { return };
        let (rows, acc) = apply(&self.aggregate, state.0.take().unwrap_or_default(), &contributions);
        // A count below zero only when a row's retraction carries an earlier time than its
        // addition (an input whose times go back): the group holds nothing until it does.
        let now = (rows > 0).then(|| self.aggregate.result(&acc));
        if rows != 0 {
            state.0.set((rows, acc));
        }
        let change = match (state.1.take(), now) {
            (None, None) => None,
            (None, Some(after)) => Some(Change::insert(group.clone(), after)),
            (Some(before), Some(after)) if before == after => {
                state.1.set(after);
                None
            }
            (Some(before), Some(after)) => Some(Change::update(group.clone(), Some(before), after)),
            (Some(before), None) => Some(Change::delete(group.clone(), Some(before))),
        };
        if let Some(change) = change {
            if let Some(after) = change.after() {
                state.1.set(after.clone());
            }
            ctx.emit_at(timer.time, change);
        }
    }
}

/// Applies one time's contributions to a group's row count and accumulator.
fn apply<V, A: RetractingAggregate<V>>(
    aggregate: &A,
    (mut rows, mut acc): (i64, A::Acc),
    contributions: &[(bool, V)],
) -> (i64, A::Acc) {
    for (add, row) in contributions {
        if *add {
            rows += 1;
            aggregate.add(&mut acc, row);
        } else {
            rows -= 1;
            aggregate.retract(&mut acc, row);
        }
    }
    (rows, acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contributions_add_and_retract_in_any_order() {
        let sum = SumBy(|v: &i64| *v);
        let (rows, acc) = apply(&sum, (0, 0), &[(true, 5), (true, 7), (false, 5)]);
        assert_eq!((rows, acc), (1, 7));
        // Retractions first (another shard's contributions came first): same result.
        assert_eq!(apply(&sum, (0, 0), &[(false, 5), (true, 5), (true, 7)]), (1, 7));
        // A retraction stamped before its addition leaves the group below zero until then.
        let (rows, acc) = apply(&CountRows, (0, 0), &[(false, 3i64)]);
        assert_eq!((rows, acc), (-1, -1));
        assert_eq!(apply(&CountRows, (rows, acc), &[(true, 3i64)]), (0, 0));
    }

    #[test]
    fn a_sum_wraps_instead_of_overflowing() {
        let sum = SumBy(|v: &i64| *v);
        let (_, acc) = apply(&sum, (0, 0), &[(true, i64::MAX), (true, 1)]);
        assert_eq!(apply(&sum, (2, acc), &[(false, 1)]).1, i64::MAX);
    }
}
