//! [`SharedGenerator`]: a generator whose records go to whichever shard asks next, in runs
//! ([`SharedSequence`]), so that a shard on a slower core takes fewer of them.
//!
//! [`Generator`](super::Generator) gives shard `s` of `n` the indexes `i % n == s`: every
//! shard makes the same number of records, and the job ends when the slowest shard ends.
//! On a machine whose cores run at different speeds from one moment to the next (a shared
//! host that takes one vCPU away for a while), the others wait for it at the end. Here the
//! shards claim runs of consecutive indexes from one counter, as Flink's split enumerator
//! hands a split to the reader that asks for one: a faster shard claims more runs, and all
//! shards run dry within one run's time of each other.
//!
//! Its records are not tied to a shard, so it records no positions: a pipeline that
//! checkpoints refuses it (use [`Generator`](super::Generator) there).

use std::{
    ops::Range,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
};

use sluice_io::EventTime;

use super::{Event, Source};

/// The indexes `0..count`, handed out in runs of `run` consecutive indexes to whoever
/// claims next. Clones share the counter: make one, and give each shard's source a clone.
#[derive(Debug, Clone)]
pub struct SharedSequence {
    next: Arc<AtomicU64>,
    count: u64,
    run: u64,
}

impl SharedSequence {
    /// `count` indexes in runs of `run` (at least 1). A run is the most one shard can lag
    /// the others by at the end, and each claim is one atomic update of a cache line all
    /// shards share: tens of thousands of records per run make that cost vanish.
    #[must_use]
    pub fn new(count: u64, run: u64) -> Self {
        SharedSequence { next: Arc::new(AtomicU64::new(0)), count, run: run.max(1) }
    }

    /// Claims the next run of indexes; `None` once every index was claimed.
    pub fn claim(&self) -> Option<Range<u64>> {
        let (count, run) = (self.count, self.run);
        self.next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |next| {
                (next < count).then(|| next.saturating_add(run).min(count))
            })
            .ok()
            .map(|start| start..start.saturating_add(run).min(count))
    }
}

/// Makes `make(i)` for every `i` of a [`SharedSequence`], one run at a time, on every shard
/// that reads a clone of the sequence: each index once, on one shard. For tests and
/// benchmarks; see the module docs for when it beats [`Generator`](super::Generator).
pub struct SharedGenerator<T, F> {
    sequence: SharedSequence,
    current: Range<u64>,
    make: F,
    _out: std::marker::PhantomData<fn() -> T>,
}

impl<T, F> std::fmt::Debug for SharedGenerator<T, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedGenerator")
            .field("sequence", &self.sequence)
            .field("current", &self.current)
            .finish_non_exhaustive()
    }
}

impl<T, F: FnMut(u64) -> T + 'static> SharedGenerator<T, F> {
    /// A shard's reader of `sequence` (a clone of the one every shard reads).
    pub fn new(sequence: SharedSequence, make: F) -> Self {
        SharedGenerator { sequence, current: 0..0, make, _out: std::marker::PhantomData }
    }

    /// The next (at most `max`, at least one) indexes, from the current run or a new claim.
    fn take(&mut self, max: usize) -> Option<Range<u64>> {
        if self.current.is_empty() {
            self.current = self.sequence.claim()?;
        }
        let start = self.current.start;
        let end = start.saturating_add(max.max(1) as u64).min(self.current.end);
        self.current.start = end;
        Some(start..end)
    }
}

impl<T: 'static, F: FnMut(u64) -> T + 'static> Source<T> for SharedGenerator<T, F> {
    fn splits(&self) -> usize {
        1
    }

    fn poll_next(&mut self, _cx: &mut Context<'_>, out: &mut Vec<T>, max: usize) -> Poll<Option<usize>> {
        let Some(indexes) = self.take(max) else { return Poll::Ready(None) };
        out.extend(indexes.map(&mut self.make));
        Poll::Ready(Some(0))
    }

    fn poll_events<E: Fn(&T) -> EventTime>(
        &mut self,
        _cx: &mut Context<'_>,
        _scratch: &mut Vec<T>,
        out: &mut Vec<Event<T>>,
        max: usize,
        time: &E,
    ) -> Poll<Option<usize>> {
        let Some(indexes) = self.take(max) else { return Poll::Ready(None) };
        let make = &mut self.make;
        out.extend(indexes.map(|i| {
            let value = make(i);
            Event { time: time(&value), value }
        }));
        Poll::Ready(Some(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_cover_every_index_once_in_runs_and_then_stop() {
        let sequence = SharedSequence::new(10, 4);
        let other = sequence.clone();
        assert_eq!(sequence.claim(), Some(0..4));
        assert_eq!(other.claim(), Some(4..8));
        assert_eq!(sequence.claim(), Some(8..10));
        assert_eq!((other.claim(), sequence.claim()), (None, None));
        assert_eq!(SharedSequence::new(0, 4).claim(), None);
        // A run of 0 is a run of 1; a count near the top of u64 does not wrap.
        assert_eq!(SharedSequence::new(2, 0).claim(), Some(0..1));
        let top = SharedSequence::new(u64::MAX, u64::MAX - 1);
        assert_eq!(
            (top.claim(), top.claim(), top.claim()),
            (Some(0..u64::MAX - 1), Some(u64::MAX - 1..u64::MAX), None)
        );
    }

    #[test]
    fn threads_claiming_at_once_take_each_index_exactly_once() {
        let sequence = SharedSequence::new(1_000_003, 97);
        let taken: Vec<Vec<Range<u64>>> = std::thread::scope(|scope| {
            let readers: Vec<_> = (0..4)
                .map(|_| {
                    let sequence = sequence.clone();
                    scope.spawn(move || std::iter::from_fn(|| sequence.claim()).collect::<Vec<_>>())
                })
                .collect();
            readers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let mut all: Vec<Range<u64>> = taken.into_iter().flatten().collect();
        all.sort_by_key(|r| r.start);
        let mut next = 0;
        for run in all {
            assert_eq!(run.start, next);
            next = run.end;
        }
        assert_eq!(next, 1_000_003);
    }

    #[test]
    fn a_reader_takes_at_most_max_and_crosses_runs() {
        let sequence = SharedSequence::new(7, 3);
        let mut generator = SharedGenerator::new(sequence.clone(), |i| i * 10);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut out = Vec::new();
        let mut batches = Vec::new();
        while let Poll::Ready(Some(0)) = generator.poll_next(&mut cx, &mut out, 2) {
            batches.push(std::mem::take(&mut out));
        }
        assert_eq!(batches, [vec![0, 10], vec![20], vec![30, 40], vec![50], vec![60]]);
        assert_eq!(sequence.claim(), None);
    }
}
