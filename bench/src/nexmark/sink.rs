//! [`ResultSink`]: where `sluice-bench nexmark` sends a query's results, whatever their
//! type. Each shard's sink counts them and, when paced, records each one's latency from the
//! schedule, and hands a [`SinkEnd`] back when its stream ends.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use sluice_engine::dataflow::{Event as Timed, Operator, Stream};
use sluice_io::EventTime;

use super::{NexmarkGenerator, NexmarkSource};
use crate::harness::LatencyRecorder;

/// The interval of the latency recorders' `--hlog` logs.
pub const HLOG_INTERVAL: Duration = Duration::from_secs(1);

/// What each shard's sink hands back when its stream ends.
#[derive(Debug)]
pub struct SinkEnd {
    /// Results received.
    pub results: u64,
    /// When paced, results emitted before they were complete on the schedule.
    pub incomplete: u64,
    /// When paced, the results' latencies (but the warm-up's).
    pub latency: Option<LatencyRecorder>,
    /// When the stream ended.
    pub at: Instant,
}

/// Attaches a `CountingSink` to whatever a query produces ([`Query::build`]).
///
/// [`Query::build`]: super::Query::build
#[derive(Debug)]
pub struct ResultSink {
    generator: NexmarkGenerator,
    /// When paced: the schedule's start and its warm-up.
    latency: Option<(Instant, Duration)>,
    delay_ms: i64,
    ends: Arc<Mutex<Vec<SinkEnd>>>,
}

impl ResultSink {
    /// A sink of results of events from `generator`, pushing its [`SinkEnd`] to `ends`.
    /// `latency: Some((epoch, warmup))`: the events are paced from `epoch`, and the latency
    /// of each result, from the moment it could first exist on the schedule (its event
    /// time plus `delay_ms`, [`Query::completion_delay_ms`]), is recorded unless it was
    /// due within `warmup`.
    ///
    /// [`Query::completion_delay_ms`]: super::Query::completion_delay_ms
    #[must_use]
    pub fn new(
        generator: NexmarkGenerator,
        latency: Option<(Instant, Duration)>,
        delay_ms: i64,
        ends: Arc<Mutex<Vec<SinkEnd>>>,
    ) -> Self {
        ResultSink { generator, latency, delay_ms, ends }
    }

    /// Consumes `results` (on this shard).
    pub fn attach<T: 'static>(&self, results: Stream<T>) {
        results.attach(CountingSink {
            generator: self.generator,
            latency: self
                .latency
                .map(|(epoch, warmup)| (epoch, warmup, LatencyRecorder::with_intervals(epoch, HLOG_INTERVAL))),
            delay_ms: self.delay_ms,
            results: 0,
            incomplete: 0,
            ends: self.ends.clone(),
        });
    }
}

/// Counts results and, when paced, records each one's latency from the schedule.
struct CountingSink {
    generator: NexmarkGenerator,
    /// When paced: the schedule's start, its warm-up, and the latencies.
    latency: Option<(Instant, Duration, LatencyRecorder)>,
    delay_ms: i64,
    results: u64,
    incomplete: u64,
    ends: Arc<Mutex<Vec<SinkEnd>>>,
}

impl<T> Operator<T> for CountingSink {
    fn on_batch(&mut self, batch: &mut Vec<Timed<T>>) {
        self.results += batch.len() as u64;
        if let Some((epoch, warmup, latency)) = &mut self.latency {
            let now = Instant::now();
            for result in batch.iter() {
                let complete = EventTime::from_millis(result.time.millis().saturating_add(self.delay_ms));
                let due = NexmarkSource::scheduled_at(&self.generator, *epoch, complete);
                if due > now {
                    // Fired by the end of the input before its window ended.
                    self.incomplete += 1;
                } else if due >= *epoch + *warmup {
                    latency.record_at(now, now - due);
                }
            }
        }
        batch.clear();
    }

    fn on_watermark(&mut self, _: EventTime) {}

    fn on_idle(&mut self, _: bool) {}

    fn on_end(&mut self) {
        let end = SinkEnd {
            results: self.results,
            incomplete: self.incomplete,
            latency: self.latency.as_ref().map(|(_, _, l)| l.clone()),
            at: Instant::now(),
        };
        self.ends.lock().unwrap_or_else(PoisonError::into_inner).push(end);
    }
}
