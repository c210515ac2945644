//! [`NexmarkSource`]: the generator as a sluice [`Source`], one disjoint slice of the stream
//! per shard, as fast as the pipeline takes it or paced on the wall clock.
//!
//! Shard `s` of `n` emits the positions `k` with `k mod n == s`, in order, so the shards
//! together emit every position once and each shard's event times advance at the stream's
//! rate. Paced (`--rate`), position `k` is released once `epoch + k / rate` has come, an
//! open loop: a stalled pipeline delays the events but not their schedule, and the time at
//! which event time `t` was due on the wall clock is [`NexmarkSource::scheduled_at`].

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use sluice_engine::dataflow::{Scope, Source, Stream, WatermarkStrategy};
use sluice_io::EventTime;

use super::{generator::NexmarkGenerator, model::Event};

/// One shard's share of a Nexmark stream of `events` events.
pub struct NexmarkSource {
    generator: NexmarkGenerator,
    next: u64,
    step: u64,
    end: u64,
    pacing: Option<Pacing>,
}

struct Pacing {
    epoch: Instant,
    timer: Option<glommio::timer::Timer>,
}

impl std::fmt::Debug for NexmarkSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NexmarkSource")
            .field("next", &self.next)
            .field("step", &self.step)
            .field("end", &self.end)
            .field("paced", &self.pacing.is_some())
            .finish_non_exhaustive()
    }
}

impl NexmarkSource {
    /// Shard `shard` of `shards`'s share of the first `events` positions, unpaced.
    #[must_use]
    pub fn new(generator: NexmarkGenerator, shard: usize, shards: usize, events: u64) -> Self {
        NexmarkSource { generator, next: shard as u64, step: shards.max(1) as u64, end: events, pacing: None }
    }

    /// The same share released on the wall clock: position `k` at `epoch + k / rate`, with
    /// the generator's rate. Needs a glommio executor (the pipeline's).
    #[must_use]
    pub fn paced(mut self, epoch: Instant) -> Self {
        self.pacing = Some(Pacing { epoch, timer: None });
        self
    }

    /// When position `position` is due after the schedule's start.
    #[must_use]
    pub fn schedule(generator: &NexmarkGenerator, position: u64) -> Duration {
        let ns = u128::from(position) * 1_000_000_000 / u128::from(generator.config().events_per_sec);
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// The first position not yet due at `now` in a schedule started at `epoch`: position
    /// `k` is due once `epoch + schedule(k) <= now`, and `schedule(k)` is `k x 10^9 / rate`
    /// whole nanoseconds, so `k` is due exactly when `k x 10^9 < (ns + 1) x rate`.
    #[must_use]
    pub fn due_end(generator: &NexmarkGenerator, epoch: Instant, now: Instant) -> u64 {
        let Some(since) = now.checked_duration_since(epoch) else { return 0 };
        let limit = (since.as_nanos() + 1) * u128::from(generator.config().events_per_sec.max(1));
        u64::try_from((limit - 1) / 1_000_000_000 + 1).unwrap_or(u64::MAX)
    }

    /// When event time `time` was due on the wall clock of a paced run started at `epoch`:
    /// the schedule of the first event at that millisecond. Latencies are measured from it.
    #[must_use]
    pub fn scheduled_at(generator: &NexmarkGenerator, epoch: Instant, time: EventTime) -> Instant {
        let ms = time.millis().saturating_sub(generator.config().base_time_ms).max(0);
        let ns = u128::from(ms.unsigned_abs()) * 1_000_000;
        epoch + Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// The watermark strategy of a Nexmark stream: event time from `date_time`, and an
    /// out-of-orderness that covers the generator's out-of-order groups, so no event is
    /// ever late.
    #[must_use]
    pub fn watermarks(generator: &NexmarkGenerator) -> WatermarkStrategy<Event> {
        WatermarkStrategy::bounded_out_of_orderness(generator.watermark_bound(), Event::event_time as fn(&Event) -> _)
    }

    /// The stream of `events` Nexmark events on this shard of `scope`, paced from `epoch`
    /// if given: what every query reads.
    pub fn stream(scope: &Scope, generator: NexmarkGenerator, events: u64, epoch: Option<Instant>) -> Stream<Event> {
        let mut source = NexmarkSource::new(generator, scope.shard(), scope.shards(), events);
        if let Some(epoch) = epoch {
            source = source.paced(epoch);
        }
        scope.source(source, Self::watermarks(&generator))
    }
}

impl Source<Event> for NexmarkSource {
    fn splits(&self) -> usize {
        1
    }

    fn poll_next(&mut self, cx: &mut Context<'_>, out: &mut Vec<Event>, max: usize) -> Poll<Option<usize>> {
        loop {
            if self.next >= self.end {
                return Poll::Ready(None);
            }
            let Some(pacing) = &mut self.pacing else {
                let mut k = self.next;
                while k < self.end && out.len() < max {
                    out.push(self.generator.event_at(k));
                    k += self.step;
                }
                self.next = k;
                return Poll::Ready(Some(0));
            };
            let now = Instant::now();
            let before = out.len();
            // One division for the batch, not a schedule comparison per event.
            let due_end = Self::due_end(&self.generator, pacing.epoch, now).min(self.end);
            while self.next < due_end && out.len() - before < max {
                out.push(self.generator.event_at(self.next));
                self.next += self.step;
            }
            if out.len() > before {
                pacing.timer = None;
                return Poll::Ready(Some(0));
            }
            let due = pacing.epoch + Self::schedule(&self.generator, self.next);
            let timer =
                pacing.timer.get_or_insert_with(|| glommio::timer::Timer::new(due.saturating_duration_since(now)));
            if Pin::new(timer).poll(cx).is_pending() {
                return Poll::Pending;
            }
            pacing.timer = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nexmark::generator::NexmarkConfig;

    #[test]
    fn due_end_agrees_with_the_schedule_position_by_position() {
        for events_per_sec in [1_000u64, 3_000_000, 7_777_777, 100_000_000] {
            let generator =
                NexmarkGenerator::new(NexmarkConfig { events_per_sec, ..NexmarkConfig::default() }).unwrap();
            let epoch = Instant::now();
            for k in (0..2000u64).chain([10_000_019]) {
                let at = epoch + NexmarkSource::schedule(&generator, k);
                assert!(NexmarkSource::due_end(&generator, epoch, at) > k, "rate {events_per_sec}, position {k}");
                if let Some(before) = at.checked_sub(Duration::from_nanos(1)).filter(|b| *b >= epoch) {
                    let end = NexmarkSource::due_end(&generator, epoch, before);
                    assert!(end <= k, "rate {events_per_sec}, position {k}");
                }
            }
        }
    }
}
