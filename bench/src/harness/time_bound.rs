//! [`TimeBound`]: a source that ends its stream once a duration has passed since its first
//! poll, for closed-loop runs bounded by `--duration` rather than by a count.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use sluice_engine::dataflow::{Event, Source, UserError};
use sluice_io::EventTime;

/// Wraps a closed-loop source (one that is never `Pending` for long): emits what it emits
/// until `limit` has passed since the first poll, then ends. Adds every record it let
/// through to `emitted`, shared by every shard's instance, so the run knows its count:
/// once, when its stream ends (or it is dropped), not per batch: an atomic add per batch
/// from every shard on one shared counter would move its cache line between the cores a
/// few hundred thousand times a second, a cost of the harness inside the figure.
///
/// The clock is read once per batch, not per record. Checkpoint positions are the inner
/// source's.
pub struct TimeBound<S> {
    inner: S,
    limit: Duration,
    until: Option<Instant>,
    emitted: Arc<AtomicU64>,
    /// Records let through and not yet added to `emitted`.
    let_through: u64,
    ended: bool,
}

impl<S> std::fmt::Debug for TimeBound<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeBound").field("limit", &self.limit).field("ended", &self.ended).finish_non_exhaustive()
    }
}

impl<S> TimeBound<S> {
    /// `inner`, ended `limit` after its first poll; counts into `emitted`.
    pub fn new(inner: S, limit: Duration, emitted: Arc<AtomicU64>) -> Self {
        TimeBound { inner, limit, until: None, emitted, let_through: 0, ended: false }
    }

    /// Whether the limit has passed (read once per batch), ending the stream if so.
    fn over(&mut self) -> bool {
        let now = Instant::now();
        let until = *self.until.get_or_insert(now + self.limit);
        if now >= until {
            self.end();
        }
        self.ended
    }

    /// Ends the stream, adding its count to `emitted`.
    fn end(&mut self) {
        self.ended = true;
        self.publish();
    }

    fn publish(&mut self) {
        self.emitted.fetch_add(std::mem::take(&mut self.let_through), Ordering::Relaxed);
    }

    /// Counts the `n` records a poll let through; notes the inner source's end.
    fn counted(&mut self, n: usize, polled: &Poll<Option<usize>>) {
        self.let_through += n as u64;
        if let Poll::Ready(None) = polled {
            self.end();
        }
    }
}

impl<T, S: Source<T>> Source<T> for TimeBound<S> {
    fn splits(&self) -> usize {
        self.inner.splits()
    }

    fn poll_next(&mut self, cx: &mut Context<'_>, out: &mut Vec<T>, max: usize) -> Poll<Option<usize>> {
        if self.over() {
            return Poll::Ready(None);
        }
        let before = out.len();
        let polled = self.inner.poll_next(cx, out, max);
        self.counted(out.len() - before, &polled);
        polled
    }

    // The inner source's own stamping (a generator writes its records straight into the
    // batch): without it, the default would poll into a scratch vector and copy each
    // record over in a second pass, a cost the unwrapped source does not have.
    fn poll_events<E: Fn(&T) -> EventTime>(
        &mut self,
        cx: &mut Context<'_>,
        scratch: &mut Vec<T>,
        out: &mut Vec<Event<T>>,
        max: usize,
        time: &E,
    ) -> Poll<Option<usize>> {
        if self.over() {
            return Poll::Ready(None);
        }
        let before = out.len();
        let polled = self.inner.poll_events(cx, scratch, out, max, time);
        self.counted(out.len() - before, &polled);
        polled
    }

    fn positions(&self) -> Option<Vec<(u64, i64)>> {
        self.inner.positions()
    }

    fn restore(&mut self, positions: &std::collections::HashMap<u64, i64>) -> Result<(), UserError> {
        self.inner.restore(positions)
    }

    fn checkpoint_completed(&mut self, positions: &[(u64, i64)]) {
        self.inner.checkpoint_completed(positions);
    }
}

impl<S> Drop for TimeBound<S> {
    // A stream stopped from outside (a failed shard, a savepoint) never polls its end.
    fn drop(&mut self) {
        self.publish();
    }
}
