//! The interval join's state: per key, the records of each side that a record still to
//! come could match, sorted by time, so a record finds its partners with a binary search
//! and expired records leave from the front.
//!
//! Why the output is exact: a record is accepted only above the watermark `W` it meets, and
//! a left record `l` is kept while `l.time + upper > W`, a right record `r` while
//! `r.time - lower > W`. Take a matching pair whose second record arrives at watermark `W`.
//! If it is `r`, then `l.time + upper >= r.time > W`, so `l` is still there; if it is `l`,
//! then `r.time - lower >= l.time > W`, so `r` is. Every pair of accepted records meets.
//!
//! Clean-up runs on a timer per key (`expiries`): a key is looked at when the watermark
//! reaches the earliest expiry among its records, and then registered again for the next.
//!
//! Snapshots are incremental: each side of a key remembers how much of what the last
//! snapshot wrote is still at its front ([`Mark`]), so a delta writes per changed key only
//! how many records to drop from the front of what the chain holds, how many of the rest
//! to keep, and the records after those (the ones that came since; an out-of-order one
//! that went in before a written record makes the records after it count as new). A key
//! whose buffers emptied gets a tombstone.

use std::{
    collections::{BTreeMap, VecDeque},
    hash::Hash,
    rc::Rc,
};

use rustc_hash::FxHashMap;
use sluice_io::EventTime;

use super::JoinCore;
use crate::dataflow::Event;
use crate::dataflow::checkpoint::{Data, GroupWriter, StateError};

/// One key's stored records.
struct Sides<K, L, R> {
    key: K,
    /// Sorted by time; among equal times, in arrival order.
    left: VecDeque<Event<L>>,
    right: VecDeque<Event<R>>,
    /// The watermark at which this key is next cleaned up: its live entry in `expiries`.
    expiry: EventTime,
    /// What the join's last snapshot holds of each side, and what left it since.
    left_mark: Mark,
    right_mark: Mark,
    /// The join's last snapshot holds this key (so its removal needs a tombstone).
    written: bool,
}

/// One side of a key against the join's last snapshot. Of the records that snapshot wrote
/// of the side, in its order, the first `cut` have been evicted since, the next `kept` are
/// still the side's first `kept` records, and any after those were pushed out of place by
/// an out-of-order record that went in before them. A delta drops `cut` records from the
/// front of what the chain holds, keeps the next `kept`, and appends the side's records
/// after its first `kept` (so the out-of-place ones are written again).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Mark {
    kept: usize,
    cut: usize,
}

impl Mark {
    /// A record went in at index `at`: written records from there on are no longer in place.
    fn inserted(&mut self, at: usize) {
        self.kept = self.kept.min(at);
    }

    /// `n` records left the front (the written ones come first, as long as they are there).
    fn evicted(&mut self, n: usize) {
        let written = n.min(self.kept);
        self.kept -= written;
        self.cut += written;
    }

    /// The side is as a snapshot wrote it, in full: `len` records.
    fn written(len: usize) -> Mark {
        Mark { kept: len, cut: 0 }
    }

    /// A delta has something to say about a side of `len` records.
    fn changed(self, len: usize) -> bool {
        self.cut > 0 || self.kept < len
    }
}

/// In place of a whole entry's left-record count (a count no list can have), the tag of a
/// delta entry: old whole snapshots have no tag and read as they always did.
const DELTA: u64 = u64::MAX;

/// A side's part of a delta entry: its [`Mark`] and its records after the kept ones.
fn encode_side<T: Data>(side: &VecDeque<Event<T>>, mark: Mark, out: &mut Vec<u8>) {
    (mark.cut as u64, mark.kept as u64, (side.len() - mark.kept) as u64).encode(out);
    side.range(mark.kept..).for_each(|e| e.encode(out));
}

/// Applies a side's part of a delta entry to what the chain before it restored.
fn apply_side<T: Data>(side: &mut VecDeque<Event<T>>, input: &mut &[u8], what: &str) -> Result<(), StateError> {
    let (cut, kept) = <(usize, usize)>::decode(input)?;
    let records = Vec::<Event<T>>::decode(input)?;
    if cut.checked_add(kept).is_none_or(|n| n > side.len()) {
        return Err(StateError(format!(
            "an interval join delta drops {cut} and keeps {kept} {what} records of a key, but the snapshots \
             before it restored {}",
            side.len()
        )));
    }
    side.drain(..cut);
    side.truncate(kept);
    for record in records {
        store(side, record);
    }
    Ok(())
}

pub(super) struct IntervalJoin<K, L, R, O, F> {
    lower: i64,
    upper: i64,
    left_key: Rc<dyn Fn(&L) -> K>,
    right_key: Rc<dyn Fn(&R) -> K>,
    f: F,
    keys: FxHashMap<K, Sides<K, L, R>>,
    /// Keys to clean up when the watermark reaches the time; an entry is stale (skipped)
    /// once its key's `expiry` is another time.
    expiries: BTreeMap<EventTime, Vec<K>>,
    watermark: EventTime,
    /// Keys the last snapshot holds whose buffers emptied since: the next delta deletes them.
    dropped: Vec<K>,
    _out: std::marker::PhantomData<fn() -> O>,
}

fn plus(time: EventTime, ms: i64) -> EventTime {
    EventTime::from_millis(time.0.saturating_add(ms))
}

/// The records of `side` with a time in `[lo, hi]`.
fn within<T>(side: &VecDeque<Event<T>>, lo: EventTime, hi: EventTime) -> impl Iterator<Item = &Event<T>> {
    let start = side.partition_point(|e| e.time < lo);
    side.range(start..).take_while(move |e| e.time <= hi)
}

/// When a key's records are next worth looking at: the earliest watermark at which one of
/// them can match nothing more (`None`: it has none).
fn next_expiry<K, L, R>(sides: &Sides<K, L, R>, lower: i64, upper: i64) -> Option<EventTime> {
    [sides.left.front().map(|l| plus(l.time, upper)), sides.right.front().map(|r| plus(r.time, lower.saturating_neg()))]
        .into_iter()
        .flatten()
        .min()
}

/// Inserts `event` in time order, after the records with the same time; returns its index.
fn store<T>(side: &mut VecDeque<Event<T>>, event: Event<T>) -> usize {
    if side.back().is_none_or(|last| last.time <= event.time) {
        side.push_back(event);
        side.len() - 1
    } else {
        let at = side.partition_point(|e| e.time <= event.time);
        side.insert(at, event);
        at
    }
}

/// Drops the records of `side` whose expiry (`time + after`) the watermark has reached;
/// returns how many.
fn evict<T>(side: &mut VecDeque<Event<T>>, after: i64, watermark: EventTime) -> usize {
    let n = side.partition_point(|e| plus(e.time, after) <= watermark);
    side.drain(..n);
    n
}

impl<K, L, R, O, F> IntervalJoin<K, L, R, O, F>
where
    K: Hash + Eq + Clone + 'static,
    F: FnMut(&K, &L, &R) -> O,
{
    pub(super) fn new(
        lower: i64,
        upper: i64,
        left_key: Rc<dyn Fn(&L) -> K>,
        right_key: Rc<dyn Fn(&R) -> K>,
        f: F,
    ) -> Self {
        IntervalJoin {
            lower,
            upper,
            left_key,
            right_key,
            f,
            keys: FxHashMap::default(),
            expiries: BTreeMap::new(),
            watermark: EventTime::MIN,
            dropped: Vec::new(),
            _out: std::marker::PhantomData,
        }
    }

    /// Makes sure `key` is looked at when the watermark reaches `expiry`.
    fn expire_at(expiries: &mut BTreeMap<EventTime, Vec<K>>, sides: &mut Sides<K, L, R>, expiry: EventTime) {
        if expiry < sides.expiry {
            sides.expiry = expiry;
            expiries.entry(expiry).or_default().push(sides.key.clone());
        }
    }

    fn new_sides(key: K) -> Sides<K, L, R> {
        Sides {
            key,
            left: VecDeque::new(),
            right: VecDeque::new(),
            expiry: EventTime::MAX,
            left_mark: Mark::default(),
            right_mark: Mark::default(),
            written: false,
        }
    }

    #[cfg(test)]
    fn stored(&self) -> (usize, usize, usize) {
        let left = self.keys.values().map(|s| s.left.len()).sum();
        let right = self.keys.values().map(|s| s.right.len()).sum();
        (self.keys.len(), left, right)
    }
}

impl<K, L, R, O, F> JoinCore for IntervalJoin<K, L, R, O, F>
where
    K: Hash + Eq + Clone + Data,
    L: Data,
    R: Data,
    O: 'static,
    F: FnMut(&K, &L, &R) -> O + 'static,
{
    type Left = L;
    type Right = R;
    type Out = O;
    const KIND: &'static str = "interval join";

    fn left(&mut self, event: Event<L>, out: &mut Vec<Event<O>>) -> bool {
        if event.time <= self.watermark {
            return false;
        }
        let key = (self.left_key)(&event.value);
        let expiry = plus(event.time, self.upper);
        let keep = expiry > self.watermark;
        let sides = match self.keys.get_mut(&key) {
            Some(sides) => sides,
            None if keep => self.keys.entry(key.clone()).or_insert_with(|| Self::new_sides(key)),
            None => return true,
        };
        let (lo, hi) = (plus(event.time, self.lower), plus(event.time, self.upper));
        for r in within(&sides.right, lo, hi) {
            out.push(Event::new(event.time.max(r.time), (self.f)(&sides.key, &event.value, &r.value)));
        }
        if keep {
            let at = store(&mut sides.left, event);
            sides.left_mark.inserted(at);
            Self::expire_at(&mut self.expiries, sides, expiry);
        }
        true
    }

    fn right(&mut self, event: Event<R>, out: &mut Vec<Event<O>>) -> bool {
        if event.time <= self.watermark {
            return false;
        }
        let key = (self.right_key)(&event.value);
        let expiry = plus(event.time, self.lower.saturating_neg());
        let keep = expiry > self.watermark;
        let sides = match self.keys.get_mut(&key) {
            Some(sides) => sides,
            None if keep => self.keys.entry(key.clone()).or_insert_with(|| Self::new_sides(key)),
            None => return true,
        };
        let (lo, hi) = (plus(event.time, self.upper.saturating_neg()), plus(event.time, self.lower.saturating_neg()));
        for l in within(&sides.left, lo, hi) {
            out.push(Event::new(event.time.max(l.time), (self.f)(&sides.key, &l.value, &event.value)));
        }
        if keep {
            let at = store(&mut sides.right, event);
            sides.right_mark.inserted(at);
            Self::expire_at(&mut self.expiries, sides, expiry);
        }
        true
    }

    fn advance(&mut self, watermark: EventTime, _: &mut Vec<Event<O>>) {
        self.watermark = watermark;
        let (lower, upper) = (self.lower, self.upper);
        while let Some(entry) = self.expiries.first_entry() {
            let due = *entry.key();
            if due > watermark {
                break;
            }
            for key in entry.remove() {
                let Some(sides) = self.keys.get_mut(&key) else { continue };
                if sides.expiry != due {
                    continue;
                }
                sides.left_mark.evicted(evict(&mut sides.left, upper, watermark));
                sides.right_mark.evicted(evict(&mut sides.right, lower.saturating_neg(), watermark));
                match next_expiry(sides, lower, upper) {
                    None => {
                        if self.keys.remove(&key).is_some_and(|s| s.written) {
                            self.dropped.push(key);
                        }
                    }
                    Some(next) => {
                        sides.expiry = EventTime::MAX;
                        Self::expire_at(&mut self.expiries, sides, next);
                    }
                }
            }
        }
    }

    /// One entry per key. Whole: the key, its left records and its right records, in time
    /// order. A delta, per key changed since the last snapshot: the key, [`DELTA`], and for
    /// each side how many records to drop from the front of what the chain holds, how many
    /// of the rest to keep, and the records after those; a key the last snapshot holds
    /// whose buffers emptied since gets a tombstone (nothing kept, nothing added). A key
    /// emptied and filled again since writes nothing kept, which replaces it all the same.
    fn snapshot(&mut self, writer: &mut GroupWriter, delta: bool) -> bool {
        for sides in self.keys.values_mut() {
            if !delta {
                writer.push_with(&sides.key, |out| {
                    sides.key.encode(out);
                    sides.left.encode(out);
                    sides.right.encode(out);
                });
            } else if !sides.written
                || sides.left_mark.changed(sides.left.len())
                || sides.right_mark.changed(sides.right.len())
            {
                writer.push_with(&sides.key, |out| {
                    sides.key.encode(out);
                    DELTA.encode(out);
                    encode_side(&sides.left, sides.left_mark, out);
                    encode_side(&sides.right, sides.right_mark, out);
                });
            }
            sides.written = true;
            sides.left_mark = Mark::written(sides.left.len());
            sides.right_mark = Mark::written(sides.right.len());
        }
        for key in self.dropped.drain(..) {
            if delta && !self.keys.contains_key(&key) {
                writer.push_with(&key, |out| {
                    key.encode(out);
                    DELTA.encode(out);
                    encode_side::<L>(&VecDeque::new(), Mark::default(), out);
                    encode_side::<R>(&VecDeque::new(), Mark::default(), out);
                });
            }
        }
        delta
    }

    fn restore(&mut self, input: &mut &[u8]) -> Result<(), StateError> {
        let key = K::decode(input)?;
        let mut peek = *input;
        if u64::decode(&mut peek)? == DELTA {
            *input = peek;
            let sides = self.keys.entry(key.clone()).or_insert_with(|| Self::new_sides(key.clone()));
            apply_side(&mut sides.left, input, "left")?;
            apply_side(&mut sides.right, input, "right")?;
            match next_expiry(sides, self.lower, self.upper) {
                Some(next) => Self::expire_at(&mut self.expiries, sides, next),
                None => {
                    self.keys.remove(&key);
                }
            }
            return Ok(());
        }
        let left = VecDeque::<Event<L>>::decode(input)?;
        let right = VecDeque::<Event<R>>::decode(input)?;
        let sides = self.keys.entry(key.clone()).or_insert_with(|| Self::new_sides(key));
        left.into_iter().for_each(|l| {
            store(&mut sides.left, l);
        });
        right.into_iter().for_each(|r| {
            store(&mut sides.right, r);
        });
        if let Some(next) = next_expiry(sides, self.lower, self.upper) {
            Self::expire_at(&mut self.expiries, sides, next);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> EventTime {
        EventTime::from_millis(ms)
    }

    /// A test record: (key, time in ms); a pair is (left time, right time).
    type Rec = (u32, i64);
    type Pair = (i64, i64);
    type Join = IntervalJoin<u32, Rec, Rec, Pair, fn(&u32, &Rec, &Rec) -> Pair>;

    fn join(lower: i64, upper: i64) -> Join {
        IntervalJoin::new(lower, upper, Rc::new(|l: &Rec| l.0), Rc::new(|r: &Rec| r.0), |_, l, r| (l.1, r.1))
    }

    fn left(join: &mut Join, key: u32, ms: i64) -> (bool, Vec<Event<Pair>>) {
        let mut out = Vec::new();
        let taken = join.left(Event::new(at(ms), (key, ms)), &mut out);
        (taken, out)
    }

    fn right(join: &mut Join, key: u32, ms: i64) -> (bool, Vec<Event<Pair>>) {
        let mut out = Vec::new();
        let taken = join.right(Event::new(at(ms), (key, ms)), &mut out);
        (taken, out)
    }

    /// Snapshots `join` (a delta on its last snapshot when `delta`) into one entry list
    /// per key group, in group order.
    fn snapshot(join: &mut Join, delta: bool) -> Vec<Vec<u8>> {
        let mut w = GroupWriter::for_tests(4);
        assert_eq!(join.snapshot(&mut w, delta), delta);
        w.finish_all()
    }

    /// One side of a delta entry: (records dropped from the front, records kept, the
    /// times of the records added).
    type SideDelta = (usize, usize, Vec<i64>);

    fn side_delta(input: &mut &[u8]) -> SideDelta {
        let (cut, kept) = <(usize, usize)>::decode(input).unwrap();
        let records = Vec::<Event<Rec>>::decode(input).unwrap();
        (cut, kept, records.iter().map(|e| e.time.millis()).collect())
    }

    /// The entries of a delta, by key: each side's [`SideDelta`].
    fn deltas(groups: &[Vec<u8>]) -> BTreeMap<u32, (SideDelta, SideDelta)> {
        let mut entries = BTreeMap::new();
        for g in groups {
            crate::dataflow::checkpoint::read_entries_raw(g, |input| {
                let key = u32::decode(input)?;
                assert_eq!(u64::decode(input)?, DELTA, "key {key}: a delta entry");
                let left = side_delta(input);
                entries.insert(key, (left, side_delta(input)));
                Ok(())
            })
            .unwrap();
        }
        entries
    }

    /// One side's records, as (time, value).
    type SideRecords = Vec<(i64, Rec)>;

    /// Every key's records, by side.
    fn contents(join: &Join) -> BTreeMap<u32, (SideRecords, SideRecords)> {
        let side = |s: &VecDeque<Event<Rec>>| s.iter().map(|e| (e.time.millis(), e.value)).collect();
        join.keys.iter().map(|(k, s)| (*k, (side(&s.left), side(&s.right)))).collect()
    }

    /// A fresh join with `parts` restored in order.
    fn restored(parts: &[&Vec<Vec<u8>>]) -> Result<Join, StateError> {
        let mut join = join(-3, 2);
        for groups in parts.iter().flat_map(|p| p.iter()) {
            crate::dataflow::checkpoint::read_entries_raw(groups, |input| join.restore(input))?;
        }
        Ok(join)
    }

    #[test]
    fn checkpointed_join_interval_deltas_hold_only_new_records_and_front_drops() {
        // r.time in [l.time - 3, l.time + 2]: l is kept while l + 2 is above the watermark,
        // r while r + 3 is.
        let mut join = join(-3, 2);
        for (key, ms) in [(1, 10), (1, 11), (2, 15)] {
            left(&mut join, key, ms);
        }
        for (key, ms) in [(1, 9), (3, 10)] {
            right(&mut join, key, ms);
        }
        let whole = snapshot(&mut join, false);
        // Left 10 and right 9 of key 1 expire; 14 comes after 11, 13 before key 2's 15.
        join.advance(at(12), &mut Vec::new());
        left(&mut join, 1, 14);
        left(&mut join, 2, 13);
        let first = snapshot(&mut join, true);
        let want =
            BTreeMap::from([(1, ((1, 1, vec![14]), (1, 0, vec![]))), (2, ((0, 0, vec![13, 15]), (0, 0, vec![])))]);
        assert_eq!(deltas(&first), want, "key 3 did not change; key 2's 15 is out of place after 13");
        assert_eq!(contents(&restored(&[&whole, &first]).unwrap()), contents(&join));
        // Key 3's right record expires and the key goes: a tombstone. Key 1 drops 11.
        join.advance(at(13), &mut Vec::new());
        right(&mut join, 4, 14);
        let second = snapshot(&mut join, true);
        let want = BTreeMap::from([
            (1, ((1, 1, vec![]), (0, 0, vec![]))),
            (3, ((0, 0, vec![]), (0, 0, vec![]))),
            (4, ((0, 0, vec![]), (0, 0, vec![14]))),
        ]);
        assert_eq!(deltas(&second), want);
        let back = restored(&[&whole, &first, &second]).unwrap();
        assert_eq!(contents(&back), contents(&join), "the chain restores the live state");
        assert!(!back.keys.contains_key(&3), "the tombstone removed key 3");
        // Nothing changed: an empty delta; a whole snapshot has every key again.
        assert!(deltas(&snapshot(&mut join, true)).is_empty());
        let whole_again = snapshot(&mut join, false);
        assert_eq!(contents(&restored(&[&whole_again]).unwrap()), contents(&join));
        // A delta that drops more than the chain before it holds is refused, not a panic.
        let err = restored(&[&first]).err().expect("a delta on nothing");
        assert!(err.0.contains("drops 1 and keeps 1 left records"), "{err}");
    }

    #[test]
    fn checkpointed_join_interval_state_of_the_old_whole_format_restores() {
        // Before incremental snapshots an entry was the key and both sides' records.
        let mut w = GroupWriter::for_tests(4);
        let l: VecDeque<Event<Rec>> = [Event::new(at(10), (7, 10)), Event::new(at(12), (7, 12))].into();
        let r: VecDeque<Event<Rec>> = [Event::new(at(11), (7, 11))].into();
        w.push_with(&7u32, |out| {
            7u32.encode(out);
            l.encode(out);
            r.encode(out);
        });
        let old = w.finish_all();
        let back = restored(&[&old]).unwrap();
        let want = BTreeMap::from([(7, (vec![(10, (7, 10)), (12, (7, 12))], vec![(11, (7, 11))]))]);
        assert_eq!(contents(&back), want);
    }

    #[test]
    fn state_is_dropped_exactly_when_no_match_can_come() {
        // r.time in [l.time - 3, l.time + 2]: l is needed while l + 2 is above the
        // watermark, r while r + 3 is.
        let mut join = join(-3, 2);
        let mut out = Vec::new();
        assert_eq!(left(&mut join, 1, 10), (true, vec![]));
        assert_eq!(right(&mut join, 1, 8), (true, vec![Event::new(at(10), (10, 8))]));
        // At 10, a left record at 11 could still match r = 8, a right one at 11 or 12 l = 10.
        join.advance(at(10), &mut out);
        assert_eq!(join.stored(), (1, 1, 1));
        join.advance(at(11), &mut out);
        assert_eq!(join.stored(), (1, 1, 0), "r = 8 matches left records up to 11 only");
        assert_eq!(right(&mut join, 1, 12), (true, vec![Event::new(at(12), (10, 12))]));
        join.advance(at(12), &mut out);
        assert_eq!(join.stored(), (1, 0, 1), "l = 10 matches right records up to 12 only");
        assert_eq!(left(&mut join, 1, 13), (true, vec![Event::new(at(13), (13, 12))]));
        join.advance(at(15), &mut out);
        assert_eq!(join.stored(), (0, 0, 0), "the key's state is gone");
        assert!(out.is_empty(), "clean-up emits nothing");
    }

    #[test]
    fn late_records_are_refused_and_useless_ones_not_stored() {
        let mut join = join(-3, -1);
        join.advance(at(20), &mut Vec::new());
        assert_eq!(left(&mut join, 1, 20), (false, vec![]), "at the watermark: late");
        // Stored: r = 22 matches left records in [23, 25].
        assert_eq!(right(&mut join, 1, 22), (true, vec![]));
        // l = 21 can only match right records at or below 20, all of them past: it matches
        // nothing now and is not stored.
        assert_eq!(left(&mut join, 1, 21), (true, vec![]));
        assert_eq!(join.stored(), (1, 0, 1));
        assert_eq!(left(&mut join, 1, 24), (true, vec![Event::new(at(24), (24, 22))]));
        // l = 24 can still match a right record at 21..=23, above the watermark.
        assert_eq!(join.stored(), (1, 1, 1));
    }
}
