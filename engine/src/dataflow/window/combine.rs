//! Two-phase (local-global) window aggregation: [`Stream::combine_by`].
//!
//! Each shard folds its own records into one accumulator per key and window *before* the
//! exchange (the local phase, [`Combiner`]), and sends each accumulator across once, when
//! its window can no longer receive an on-time record here; the shard that owns the key
//! merges the accumulators of every shard (the global phase, an ordinary window operator
//! whose aggregate is [`Merged`]). With many records per key and window, the exchange
//! carries one partial per key, window and shard instead of every record: Flink's
//! local-global aggregation, or a MapReduce combiner.
//!
//! Invariants:
//! - A partial of window `w` is sent before the watermark that passes `w.max_timestamp()`
//!   leaves this shard, so the owner has every shard's partial when its combined watermark
//!   fires `w`. A record whose window this shard has already sent goes on at once as a
//!   partial of one record: the owner judges whether it is late, as it would the record.
//! - The local phase holds nothing across a checkpoint: a barrier sends every open partial
//!   before it passes on, so a restore starts it empty and nothing is lost or counted twice.
//!   (Partials in flight are the exchange's, stored by unaligned checkpoints like records.)

use std::{hash::Hash, marker::PhantomData, rc::Rc, time::Duration};

use sluice_io::EventTime;

use super::{Aggregate, SPARE_MAPS, WindowResult, Windows, ms, partials::Partials};
use crate::dataflow::{Event, Operator, Output, Port, Stream, checkpoint::Barrier, checkpoint::Data};

/// A stream whose records will be aggregated per key in two phases;
/// [`CombiningStream::tumbling`] or [`CombiningStream::sliding`] picks the windows.
pub struct CombiningStream<K, T, KS> {
    stream: Stream<T>,
    key: KS,
    _key: PhantomData<fn() -> K>,
}

impl<K, T, KS> std::fmt::Debug for CombiningStream<K, T, KS> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CombiningStream").finish_non_exhaustive()
    }
}

/// A two-phase aggregation over tumbling or sliding windows, waiting for its aggregate.
pub struct CombiningWindows<K, T, KS> {
    combining: CombiningStream<K, T, KS>,
    /// What the local phase keeps a partial per key of: the windows themselves (tumbling)
    /// or panes of the greatest common divisor of size and slide (sliding), each of which
    /// lies wholly inside every window that contains any of it.
    pane: i64,
    windows: Windows,
}

impl<K, T, KS> std::fmt::Debug for CombiningWindows<K, T, KS> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CombiningWindows")
            .field("pane_ms", &self.pane)
            .field("windows", &self.windows)
            .finish_non_exhaustive()
    }
}

impl<T: 'static> Stream<T> {
    /// Aggregates records per key and window in two phases: each shard first folds its own
    /// records into a partial per key and window, and only the partials cross to the shard
    /// that owns the key, which merges them ([`Aggregate::merge`]) into the window's
    /// result. The results equal `key_by(key).window(..).aggregate(..)`'s; the exchange
    /// carries a partial per key, window and shard instead of every record, which is what
    /// makes an aggregate over few keys scale with the shards.
    ///
    /// Tumbling and sliding windows. Late records are dropped (and counted as late), as
    /// with the default [`LatePolicy`](super::LatePolicy); the one-phase window offers the
    /// others.
    pub fn combine_by<K, KS>(self, key: KS) -> CombiningStream<K, T, KS>
    where
        K: Hash + Eq + Clone + Send + Data,
        KS: Fn(&T) -> K + 'static,
    {
        CombiningStream { stream: self, key, _key: PhantomData }
    }
}

impl<K, T, KS> CombiningStream<K, T, KS>
where
    K: Hash + Eq + Clone + Send + Data,
    T: 'static,
    KS: Fn(&T) -> K + 'static,
{
    /// Tumbling windows of `size`, aligned to the epoch (as [`Windows::tumbling`]).
    ///
    /// # Panics
    ///
    /// If `size` is under a millisecond.
    #[must_use]
    pub fn tumbling(self, size: Duration) -> CombiningWindows<K, T, KS> {
        let windows = Windows::tumbling(size);
        CombiningWindows { combining: self, pane: ms(size), windows }
    }

    /// Sliding windows of `size`, one starting every `slide` (as [`Windows::sliding`]). The
    /// local phase keeps a partial per key and *pane* (the greatest common divisor of
    /// `size` and `slide`; `slide` itself when it divides `size`), and the key's owner
    /// merges each pane's partial into every window that holds it.
    ///
    /// # Panics
    ///
    /// If `size` or `slide` is under a millisecond or `slide` exceeds `size`.
    #[must_use]
    pub fn sliding(self, size: Duration, slide: Duration) -> CombiningWindows<K, T, KS> {
        let windows = Windows::sliding(size, slide);
        CombiningWindows { combining: self, pane: gcd(ms(size), ms(slide)), windows }
    }
}

fn gcd(mut a: i64, mut b: i64) -> i64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl<K, T, KS> CombiningWindows<K, T, KS>
where
    K: Hash + Eq + Clone + Send + Data,
    T: 'static,
    KS: Fn(&T) -> K + 'static,
{
    /// Each key's window aggregated by `aggregate`, in two phases.
    pub fn aggregate<A>(self, aggregate: A) -> Stream<WindowResult<K, A::Out>>
    where
        A: Aggregate<T>,
        A::Acc: Clone + Send + Data,
    {
        let CombiningWindows { combining: CombiningStream { stream, key, .. }, pane, windows } = self;
        let aggregate = Rc::new(aggregate);
        let out = Output::port();
        let combiner = Combiner {
            key,
            aggregate: aggregate.clone(),
            size: pane,
            open: Vec::new(),
            spare: Vec::new(),
            buf: Vec::new(),
            out: out.clone(),
            _t: PhantomData,
        };
        stream.port.borrow_mut().attach(Box::new(combiner));
        Stream::from_port(stream.scope, out, "combine")
            .key_by(|partial: &(K, A::Acc)| partial.0.clone())
            .window(windows)
            .aggregate(Merged(aggregate, PhantomData))
    }

    /// The number of records in each key's window, in two phases.
    pub fn count(self) -> Stream<WindowResult<K, u64>> {
        self.aggregate(super::Count)
    }
}

/// The global phase's aggregate: merges partials of `A`.
struct Merged<A, T>(Rc<A>, PhantomData<fn(&T)>);

impl<K: 'static, T: 'static, A> Aggregate<(K, A::Acc)> for Merged<A, T>
where
    A: Aggregate<T>,
    A::Acc: Clone,
{
    type Acc = A::Acc;
    type Out = A::Out;
    fn create(&self) -> A::Acc {
        self.0.create()
    }
    fn add(&self, acc: &mut A::Acc, partial: &(K, A::Acc)) {
        self.0.merge(acc, partial.1.clone());
    }
    fn merge(&self, into: &mut A::Acc, from: A::Acc) {
        self.0.merge(into, from);
    }
    fn result(&self, acc: &A::Acc) -> A::Out {
        self.0.result(acc)
    }
}

/// The local phase on one shard: the open windows' partials, per key.
struct Combiner<K, T, KS, A: Aggregate<T>> {
    key: KS,
    aggregate: Rc<A>,
    /// The pane: a window (tumbling) or the part of a window that every sliding window
    /// holds whole or not at all.
    size: i64,
    /// (pane start, partial per key) of the panes not sent yet; usually one or two.
    open: Vec<(i64, Partials<K, A::Acc>)>,
    /// Emptied maps of sent panes, kept with their capacity for the next ones.
    spare: Vec<Partials<K, A::Acc>>,
    buf: Vec<Event<(K, A::Acc)>>,
    out: Port<(K, A::Acc)>,
    _t: PhantomData<fn(&T)>,
}

impl<K, T, KS, A> Combiner<K, T, KS, A>
where
    K: Hash + Eq + 'static,
    KS: Fn(&T) -> K,
    A: Aggregate<T>,
{
    /// The index in `open` of the window starting at `start`, opened if need be.
    fn window(&mut self, start: i64) -> usize {
        match self.open.iter().position(|(s, _)| *s == start) {
            Some(i) => i,
            None => {
                self.open.push((start, self.spare.pop().unwrap_or_default()));
                self.open.len() - 1
            }
        }
    }

    /// Sends the partials of the windows `send` picks by start, oldest window first.
    fn send(&mut self, mut send: impl FnMut(i64) -> bool) {
        self.open.sort_unstable_by_key(|(start, _)| *start);
        let mut i = 0;
        while i < self.open.len() {
            if !send(self.open[i].0) {
                i += 1;
                continue;
            }
            let (start, mut partials) = self.open.remove(i);
            let time = EventTime::from_millis(start.saturating_add(self.size).saturating_sub(1));
            // Room for the whole pane at once, as `extend` with an exact size hint made.
            let buf = &mut self.buf;
            buf.reserve(partials.len());
            partials.drain_into(|key, acc| buf.push(Event { time, value: (key, acc) }));
            // The next window has about as many keys: its map starts at this one's size.
            if self.spare.len() < SPARE_MAPS {
                self.spare.push(partials);
            }
        }
        self.out.borrow_mut().push(&mut self.buf);
    }
}

/// Whether `start <= t <= start + width`, in one comparison: `t - start` wraps past
/// `width` for every `t` below `start` (two's complement; `start + width` must not
/// overflow).
#[inline]
fn within(t: i64, start: i64, width: u64) -> bool {
    (t.wrapping_sub(start) as u64) <= width
}

impl<K, T, KS, A> Operator<T> for Combiner<K, T, KS, A>
where
    K: Hash + Eq + 'static,
    KS: Fn(&T) -> K,
    A: Aggregate<T>,
{
    fn on_batch(&mut self, batch: &mut Vec<Event<T>>) {
        // Records of one window come in runs: the window is worked out, and its map looked
        // up, once per run.
        // Windows ending at or before the watermark passed on have been sent.
        let sent_through = self.out.borrow().watermark();
        let mut rest = &batch[..];
        while let Some(first) = rest.first() {
            let start = first.time.0 - first.time.0.rem_euclid(self.size);
            let last = start.saturating_add(self.size).saturating_sub(1);
            let width = last.wrapping_sub(start) as u64;
            let in_window = |e: &Event<T>| within(e.time.0, start, width);
            if last <= sent_through.0 {
                // Its window has been sent: on at once, for the owner to judge.
                let run = rest.iter().position(|e| !in_window(e)).unwrap_or(rest.len());
                let (this, next) = rest.split_at(run);
                rest = next;
                for event in this {
                    let mut acc = self.aggregate.create();
                    self.aggregate.add(&mut acc, &event.value);
                    self.buf.push(Event { time: event.time, value: ((self.key)(&event.value), acc) });
                }
                continue;
            }
            let index = self.window(start);
            let (partials, aggregate, key) = (&mut self.open[index].1, &*self.aggregate, &self.key);
            // The run's end is found in the same pass that folds it in.
            let run = rest.iter().position(|event| {
                if !in_window(event) {
                    return true;
                }
                let key = key(&event.value);
                partials.upsert(
                    Partials::<K, A::Acc>::hash(&key),
                    key,
                    || aggregate.create(),
                    |acc| {
                        aggregate.add(acc, &event.value);
                    },
                );
                false
            });
            rest = &rest[run.unwrap_or(rest.len())..];
        }
        self.out.borrow_mut().push(&mut self.buf);
    }

    fn on_watermark(&mut self, watermark: EventTime) {
        let size = self.size;
        self.send(|start| start.saturating_add(size).saturating_sub(1) <= watermark.0);
        self.out.borrow_mut().watermark_to(watermark);
    }

    fn on_idle(&mut self, idle: bool) {
        self.out.borrow_mut().set_idle(idle);
    }

    fn on_end(&mut self) {
        self.send(|_| true);
        self.out.borrow_mut().end();
    }

    fn on_barrier(&mut self, barrier: Barrier) {
        self.send(|_| true);
        self.out.borrow_mut().barrier(barrier);
    }
}

#[cfg(test)]
mod tests {
    use super::within;

    #[test]
    fn within_is_the_inclusive_range_at_the_extremes() {
        let times = [i64::MIN, i64::MIN + 1, -1001, -1000, -1, 0, 1, 999, 1000, i64::MAX - 1, i64::MAX];
        for start in times {
            for last in times.into_iter().filter(|&last| last >= start) {
                let width = last.wrapping_sub(start) as u64;
                for t in times {
                    assert_eq!(within(t, start, width), (start..=last).contains(&t), "{t} in {start}..={last}");
                }
            }
        }
    }
}
