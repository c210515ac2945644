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

/// Inserts `event` in time order, after the records with the same time.
fn store<T>(side: &mut VecDeque<Event<T>>, event: Event<T>) {
    if side.back().is_none_or(|last| last.time <= event.time) {
        side.push_back(event);
    } else {
        let at = side.partition_point(|e| e.time <= event.time);
        side.insert(at, event);
    }
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
        Sides { key, left: VecDeque::new(), right: VecDeque::new(), expiry: EventTime::MAX }
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
            store(&mut sides.left, event);
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
            store(&mut sides.right, event);
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
                while sides.left.front().is_some_and(|l| plus(l.time, upper) <= watermark) {
                    sides.left.pop_front();
                }
                while sides.right.front().is_some_and(|r| plus(r.time, lower.saturating_neg()) <= watermark) {
                    sides.right.pop_front();
                }
                match next_expiry(sides, lower, upper) {
                    None => {
                        self.keys.remove(&key);
                    }
                    Some(next) => {
                        sides.expiry = EventTime::MAX;
                        Self::expire_at(&mut self.expiries, sides, next);
                    }
                }
            }
        }
    }

    /// One entry per key: the key, its left records and its right records, in time order.
    fn snapshot(&mut self, writer: &mut GroupWriter, _delta: bool) -> bool {
        for sides in self.keys.values() {
            writer.push_with(&sides.key, |out| {
                sides.key.encode(out);
                sides.left.encode(out);
                sides.right.encode(out);
            });
        }
        false
    }

    fn restore(&mut self, input: &mut &[u8]) -> Result<(), StateError> {
        let key = K::decode(input)?;
        let left = VecDeque::<Event<L>>::decode(input)?;
        let right = VecDeque::<Event<R>>::decode(input)?;
        let sides = self.keys.entry(key.clone()).or_insert_with(|| Self::new_sides(key));
        left.into_iter().for_each(|l| store(&mut sides.left, l));
        right.into_iter().for_each(|r| store(&mut sides.right, r));
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
