//! The window join's state: per window (a bucket, as in the aligned window operator) and,
//! inside it, per key, the records of each side that fell in it.
//!
//! Buckets are kept sorted by window; all windows of one join have the same length, so
//! the order of their starts is the order of their last instants, and the buckets a
//! watermark completes are a prefix. A record goes into each of its windows that has not
//! fired; with none left, it is late.

use std::{hash::Hash, rc::Rc};

use rustc_hash::FxHashMap;
use sluice_io::EventTime;

use super::JoinCore;
use crate::dataflow::checkpoint::{Data, GroupWriter, StateError};
use crate::dataflow::window::buckets::{Bucketed, find_or_insert};
use crate::dataflow::{Event, Window, Windows};

/// One key's records of both sides in one window, and how many of each the join's last
/// snapshot holds (records are only ever appended until the window fires).
struct Sides<L, R> {
    left: Vec<L>,
    right: Vec<R>,
    written: (usize, usize),
}

impl<L, R> Default for Sides<L, R> {
    fn default() -> Self {
        Sides { left: Vec::new(), right: Vec::new(), written: (0, 0) }
    }
}

struct Bucket<K, L, R> {
    window: Window,
    keys: FxHashMap<K, Sides<L, R>>,
}

impl<K, L, R> Bucketed for Bucket<K, L, R> {
    #[inline(always)]
    fn window(&self) -> Window {
        self.window
    }
}

/// Encodes `values` as a `Vec` of them is encoded (a length, then each).
fn encode_list<T: Data>(values: &[T], out: &mut Vec<u8>) {
    (values.len() as u64).encode(out);
    values.iter().for_each(|v| v.encode(out));
}

pub(super) struct WindowJoin<K, L, R, O, F> {
    windows: Windows,
    left_key: Rc<dyn Fn(&L) -> K>,
    right_key: Rc<dyn Fn(&R) -> K>,
    f: F,
    buckets: Vec<Bucket<K, L, R>>,
    /// The bucket the last record went to: in-order input finds its bucket without a search.
    hint: usize,
    /// Scratch: the open windows of the record being added.
    open: Vec<Window>,
    watermark: EventTime,
    /// Entries a snapshot holds whose window has fired since: the next delta deletes them.
    dropped: Vec<(Window, K)>,
    _out: std::marker::PhantomData<fn() -> O>,
}

impl<K, L, R, O, F> WindowJoin<K, L, R, O, F>
where
    K: Hash + Eq + Clone + 'static,
    L: Clone + 'static,
    R: Clone + 'static,
    F: FnMut(&K, &L, &R) -> O,
{
    pub(super) fn new(windows: Windows, left_key: Rc<dyn Fn(&L) -> K>, right_key: Rc<dyn Fn(&R) -> K>, f: F) -> Self {
        WindowJoin {
            windows,
            left_key,
            right_key,
            f,
            buckets: Vec::new(),
            hint: 0,
            open: Vec::new(),
            watermark: EventTime::MIN,
            dropped: Vec::new(),
            _out: std::marker::PhantomData,
        }
    }

    /// The index of `window`'s bucket, created if need be.
    fn bucket(&mut self, window: Window) -> usize {
        find_or_insert(&mut self.buckets, &mut self.hint, window, || Bucket { window, keys: FxHashMap::default() }).0
    }

    /// Puts `value` into each of its windows still open, cloned for all but the last, on
    /// the side `side` picks; `false` if none is open.
    fn add<T: Clone>(&mut self, time: EventTime, value: T, key: K, side: fn(&mut Sides<L, R>) -> &mut Vec<T>) -> bool {
        self.open.clear();
        let (open, watermark) = (&mut self.open, self.watermark);
        self.windows.assign(time, |w| {
            if w.max_timestamp() > watermark {
                open.push(w);
            }
        });
        let Some(&last) = self.open.last() else { return false };
        for i in 0..self.open.len() - 1 {
            let b = self.bucket(self.open[i]);
            side(self.buckets[b].keys.entry(key.clone()).or_default()).push(value.clone());
        }
        let b = self.bucket(last);
        side(self.buckets[b].keys.entry(key).or_default()).push(value);
        true
    }

    #[cfg(test)]
    fn buckets(&self) -> usize {
        self.buckets.len()
    }
}

impl<K, L, R, O, F> JoinCore for WindowJoin<K, L, R, O, F>
where
    K: Hash + Eq + Clone + Data,
    L: Clone + Data,
    R: Clone + Data,
    O: 'static,
    F: FnMut(&K, &L, &R) -> O + 'static,
{
    type Left = L;
    type Right = R;
    type Out = O;
    const KIND: &'static str = "window join";

    fn left(&mut self, event: Event<L>, _: &mut Vec<Event<O>>) -> bool {
        let key = (self.left_key)(&event.value);
        self.add(event.time, event.value, key, |s| &mut s.left)
    }

    fn right(&mut self, event: Event<R>, _: &mut Vec<Event<O>>) -> bool {
        let key = (self.right_key)(&event.value);
        self.add(event.time, event.value, key, |s| &mut s.right)
    }

    fn advance(&mut self, watermark: EventTime, out: &mut Vec<Event<O>>) {
        self.watermark = watermark;
        let complete = self.buckets.partition_point(|b| b.window.max_timestamp() <= watermark);
        for bucket in self.buckets.drain(..complete) {
            let time = bucket.window.max_timestamp();
            for (key, sides) in bucket.keys {
                if sides.written != (0, 0) {
                    self.dropped.push((bucket.window, key.clone()));
                }
                for l in &sides.left {
                    for r in &sides.right {
                        out.push(Event::new(time, (self.f)(&key, l, r)));
                    }
                }
            }
        }
        self.hint = self.buckets.len().saturating_sub(1);
    }

    /// One entry per key and window: the window's bounds, the key, and its left and right
    /// records. Whole, every record; a delta, the records appended to each entry since the
    /// last snapshot (a restore appends them to what the chain before held) and, for each
    /// entry a snapshot holds whose window has fired since, a tombstone: the entry with no
    /// records (never written otherwise, since an entry exists only once a record is in it).
    fn snapshot(&mut self, writer: &mut GroupWriter, delta: bool) -> bool {
        for bucket in &mut self.buckets {
            let bounds = (bucket.window.start.millis(), bucket.window.end.millis());
            for (key, sides) in &mut bucket.keys {
                let from = if delta { sides.written } else { (0, 0) };
                if (sides.left.len(), sides.right.len()) != from {
                    writer.push_with(key, |out| {
                        bounds.encode(out);
                        key.encode(out);
                        encode_list(&sides.left[from.0..], out);
                        encode_list(&sides.right[from.1..], out);
                    });
                }
                sides.written = (sides.left.len(), sides.right.len());
            }
        }
        for (window, key) in self.dropped.drain(..) {
            if delta {
                let bounds = (window.start.millis(), window.end.millis());
                writer.push_with(&key, |out| {
                    bounds.encode(out);
                    key.encode(out);
                    encode_list::<L>(&[], out);
                    encode_list::<R>(&[], out);
                });
            }
        }
        delta
    }

    fn restore(&mut self, input: &mut &[u8]) -> Result<(), StateError> {
        let (start, end) = <(i64, i64)>::decode(input)?;
        let key = K::decode(input)?;
        let left = Vec::<L>::decode(input)?;
        let right = Vec::<R>::decode(input)?;
        let window = Window { start: EventTime::from_millis(start), end: EventTime::from_millis(end) };
        if left.is_empty() && right.is_empty() {
            // A tombstone: the window fired after the snapshot that held the entry.
            if let Some(bucket) = self.buckets.iter_mut().find(|b| b.window == window) {
                bucket.keys.remove(&key);
            }
            return Ok(());
        }
        let b = self.bucket(window);
        let sides = self.buckets[b].keys.entry(key).or_default();
        sides.left.extend(left);
        sides.right.extend(right);
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
    type Join = WindowJoin<u32, Rec, Rec, (i64, i64), fn(&u32, &Rec, &Rec) -> (i64, i64)>;

    fn join() -> Join {
        let windows = Windows::Sliding { size: 10, slide: 5 };
        WindowJoin::new(windows, Rc::new(|l: &Rec| l.0), Rc::new(|r: &Rec| r.0), |_, l, r| (l.1, r.1))
    }

    /// Snapshots `join` (a delta on its last snapshot when `delta`) into one entry list
    /// per key group, in group order.
    fn snapshot(join: &mut Join, delta: bool) -> Vec<Vec<u8>> {
        let mut w = GroupWriter::for_tests(4);
        assert_eq!(join.snapshot(&mut w, delta), delta);
        w.finish_all()
    }

    /// A fresh join with `parts` restored in order; what it emits at the end of time.
    fn restored(parts: &[&Vec<Vec<u8>>]) -> Vec<Event<(i64, i64)>> {
        let mut join = join();
        for groups in parts.iter().flat_map(|p| p.iter()) {
            crate::dataflow::checkpoint::read_entries_raw(groups, |input| join.restore(input)).unwrap();
        }
        let mut out = Vec::new();
        join.advance(EventTime::MAX, &mut out);
        out.sort_unstable();
        out
    }

    #[test]
    fn checkpointed_join_deltas_hold_new_records_and_tombstones_of_fired_windows() {
        let mut join = join();
        let mut out = Vec::new();
        join.left(Event::new(at(6), (1, 6)), &mut out);
        join.right(Event::new(at(7), (1, 7)), &mut out);
        let whole = snapshot(&mut join, false);
        join.left(Event::new(at(8), (1, 8)), &mut out);
        let first = snapshot(&mut join, true);
        // The delta holds the one new record, in both of its windows: two entries.
        let entries = |parts: &Vec<Vec<u8>>| {
            let mut n = 0;
            parts.iter().for_each(|g| {
                crate::dataflow::checkpoint::read_entries_raw(g, |input| {
                    *input = &input[input.len()..];
                    n += 1;
                    Ok(())
                })
                .unwrap()
            });
            n
        };
        assert_eq!((entries(&whole), entries(&first)), (2, 2));
        let pairs = |v: &[(i64, i64)], window: i64| v.iter().map(|&p| Event::new(at(window), p)).collect::<Vec<_>>();
        let mut both = [pairs(&[(6, 7), (8, 7)], 9), pairs(&[(6, 7), (8, 7)], 14)].concat();
        both.sort_unstable();
        assert_eq!(restored(&[&whole, &first]), both, "the chain appends the new record to the whole snapshot's");
        // [0, 10) fires; 12 goes to [10, 20) only.
        join.advance(at(9), &mut out);
        join.right(Event::new(at(12), (1, 12)), &mut out);
        let second = snapshot(&mut join, true);
        // 12 goes to [5, 15) and [10, 20); [0, 10) gets a tombstone.
        assert_eq!(entries(&second), 3);
        let mut rest = [pairs(&[(6, 7), (8, 7), (6, 12), (8, 12)], 14)].concat();
        rest.sort_unstable();
        assert_eq!(restored(&[&whole, &first, &second]), rest, "the fired window does not come back");
        // Nothing changed: an empty delta. [5, 15) fires: a whole snapshot writes the open
        // [10, 20) and no tombstone.
        assert_eq!(entries(&snapshot(&mut join, true)), 0);
        join.advance(at(14), &mut out);
        assert_eq!(entries(&snapshot(&mut join, false)), 1);
    }

    #[test]
    fn fired_windows_free_their_state_and_refuse_late_records() {
        let mut join = join();
        let mut out = Vec::new();
        assert!(join.left(Event::new(at(7), (1, 7)), &mut out));
        assert!(join.right(Event::new(at(8), (1, 8)), &mut out));
        // 7 and 8 fall in [0, 10) and [5, 15).
        assert_eq!(join.buckets(), 2);
        join.advance(at(9), &mut out);
        assert_eq!(out, vec![Event::new(at(9), (7, 8))]);
        assert_eq!(join.buckets(), 1);
        // 3 falls in [-5, 5) and [0, 10), both fired: late.
        assert!(!join.left(Event::new(at(3), (1, 3)), &mut out));
        // 6 still falls in [5, 15): it goes there alone.
        assert!(join.right(Event::new(at(6), (1, 6)), &mut out));
        assert_eq!(join.buckets(), 1);
        out.clear();
        join.advance(at(14), &mut out);
        out.sort_unstable();
        assert_eq!(out, vec![Event::new(at(14), (7, 6)), Event::new(at(14), (7, 8))]);
        assert_eq!(join.buckets(), 0);
    }
}
