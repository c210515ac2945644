//! [`RunDry`]: a source wrapper that notes when its source ran dry, so a run can tell how
//! long its first shard to finish waited for its last ([`end_spread`]): with the input split
//! evenly, that wait is one CPU running slower than the other for a while, not the engine.

use std::{
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use sluice_engine::dataflow::{Event, Source, UserError};
use sluice_io::EventTime;

/// Wraps a source: the first time it returns `Ready(None)`, pushes the instant to `ends`,
/// shared by every shard's instance. One comparison per poll (per batch), nothing per
/// record.
pub struct RunDry<S> {
    inner: S,
    ends: Arc<Mutex<Vec<Instant>>>,
    noted: bool,
}

impl<S> std::fmt::Debug for RunDry<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunDry").field("noted", &self.noted).finish_non_exhaustive()
    }
}

impl<S> RunDry<S> {
    /// `inner`, its end pushed to `ends`.
    pub fn new(inner: S, ends: Arc<Mutex<Vec<Instant>>>) -> Self {
        RunDry { inner, ends, noted: false }
    }

    fn note(&mut self, polled: &Poll<Option<usize>>) {
        if !self.noted && matches!(polled, Poll::Ready(None)) {
            self.noted = true;
            self.ends.lock().unwrap_or_else(PoisonError::into_inner).push(Instant::now());
        }
    }
}

/// The time from the first of `ends` to the last; `None` for fewer than two.
#[must_use]
pub fn end_spread(ends: &[Instant]) -> Option<Duration> {
    let (first, last) = (ends.iter().min()?, ends.iter().max()?);
    (ends.len() > 1).then(|| last.saturating_duration_since(*first))
}

impl<T, S: Source<T>> Source<T> for RunDry<S> {
    fn splits(&self) -> usize {
        self.inner.splits()
    }

    fn poll_next(&mut self, cx: &mut Context<'_>, out: &mut Vec<T>, max: usize) -> Poll<Option<usize>> {
        let polled = self.inner.poll_next(cx, out, max);
        self.note(&polled);
        polled
    }

    // The inner source's own stamping, as `TimeBound` keeps it.
    fn poll_events<E: Fn(&T) -> EventTime>(
        &mut self,
        cx: &mut Context<'_>,
        scratch: &mut Vec<T>,
        out: &mut Vec<Event<T>>,
        max: usize,
        time: &E,
    ) -> Poll<Option<usize>> {
        let polled = self.inner.poll_events(cx, scratch, out, max, time);
        self.note(&polled);
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

#[cfg(test)]
mod tests {
    use sluice_engine::dataflow::Generator;

    use super::*;

    #[test]
    fn notes_the_end_once_and_the_spread_is_last_minus_first() {
        let ends = Arc::new(Mutex::new(Vec::new()));
        let mut source = RunDry::new(Generator::new(0, 1, 3, |i| i), ends.clone());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut out = Vec::new();
        assert_eq!(source.poll_next(&mut cx, &mut out, 2), Poll::Ready(Some(0)));
        assert!(ends.lock().unwrap().is_empty());
        assert_eq!(source.poll_next(&mut cx, &mut out, 2), Poll::Ready(Some(0)));
        for _ in 0..3 {
            assert_eq!(source.poll_next(&mut cx, &mut out, 2), Poll::Ready(None));
        }
        assert_eq!((out, ends.lock().unwrap().len()), (vec![0, 1, 2], 1));
        let t = Instant::now();
        assert_eq!(end_spread(&[t]), None);
        assert_eq!(
            end_spread(&[t + Duration::from_millis(5), t, t + Duration::from_millis(2)]),
            Some(Duration::from_millis(5))
        );
    }
}
