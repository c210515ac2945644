//! `sluice-bench checkpoint --job join`: the latency job with a window join in place of the
//! windowed count,
//!
//! ```text
//!                 /- filter(left)  -> key_by -> arrival probe -> key_by -\
//! paced source --<                                                        >- window join (1 s) -> sink
//!                 \- filter(right) -> key_by -> arrival probe -> key_by -/
//! ```
//!
//! Event `i` has key `i mod --keys`; it is a left record when `(i / keys)` is even, a
//! right one otherwise, so each key's events alternate sides and a key with `n` events in
//! a window yields `ceil(n/2) * floor(n/2)` pairs there. The join buffers both sides of
//! every open window (its state, written whole at each checkpoint) and emits every pair
//! when the window fires. Each pair's latency runs from the scheduled send time of its
//! window's last event to the pair reaching the sink, as the count job's results do. The
//! arrival probe records each event's latency from its scheduled send time to crossing the
//! exchange (a second `key_by` on the same key keeps the stream keyed; it sends nothing
//! between shards), which samples every moment of the run. The sink checks every pair
//! (same key, same window, one record per side) and the run fails unless the pairs add up
//! to the job's.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use anyhow::{Context as _, ensure};
use sluice_engine::dataflow::{
    CheckpointConfig, Event, Operator, Pipeline, PipelineConfig, WatermarkStrategy, Windows,
};
use sluice_io::EventTime;

use crate::{
    harness::LatencyRecorder,
    workloads::{
        pipeline_job::{Job, Tally, WINDOW_MS},
        pipeline_sluice::{PacedGenerator, SluiceRun},
    },
};

/// How long after the pipeline starts the schedule begins (every shard is up by then).
const START_DELAY: Duration = Duration::from_millis(50);

/// Whether event `i` is a left record of `job`.
fn is_left(job: &Job, i: u64) -> bool {
    (i / job.keys).is_multiple_of(2)
}

/// The pairs the job's window join emits: per window and key, its left events times its
/// right events.
pub(super) fn expected_pairs(job: &Job) -> u64 {
    if job.events == 0 {
        return 0;
    }
    let last = Job::window_start(job.time_ms(job.events - 1));
    let mut pairs = 0;
    for window in 0..=last / WINDOW_MS {
        let range = job.window_events(window * WINDOW_MS);
        // Key k's events are k + j * keys; in [a, b) those with j in [ceil((a - k) / keys),
        // ceil((b - k) / keys)); the even j are left.
        let first_j = |at: u64, k: u64| if at > k { (at - k).div_ceil(job.keys) } else { 0 };
        for k in 0..job.keys.min(range.end) {
            let (from, to) = (first_j(range.start, k), first_j(range.end, k));
            let left = to.div_ceil(2) - from.div_ceil(2);
            pairs += left * ((to - from) - left);
        }
    }
    pairs
}

/// One pair as the sink sees it: key, left event, right event.
type Pair = (u64, u64, u64);

/// What each shard's sink hands back when its stream ends.
#[derive(Debug)]
struct SinkEnd {
    pairs: u64,
    wrong: u64,
    latency: LatencyRecorder,
    arrivals: LatencyRecorder,
    at: Instant,
}

/// Runs the join job on `shards` shards at its schedule, checkpointing as `checkpoints`
/// says (none when `None`).
///
/// # Errors
///
/// A pipeline that failed, or pairs that do not match the job.
pub(super) fn run(job: &Job, shards: usize, checkpoints: Option<CheckpointConfig>) -> anyhow::Result<SluiceRun> {
    let job = *job;
    let ends: Arc<Mutex<Vec<SinkEnd>>> = Arc::new(Mutex::new(Vec::new()));
    let epoch = Instant::now() + START_DELAY;
    let config = PipelineConfig { batch_records: job.batch, pin: job.pin, ..PipelineConfig::with_shards(shards) };
    let sink_ends = ends.clone();
    // Dropped with the build closure, which every shard's thread keeps until it exits.
    let running_token = Arc::new(());
    let token = running_token.clone();
    let mut pipeline = Pipeline::new(config);
    if let Some(checkpoints) = checkpoints {
        pipeline = pipeline.checkpointing(checkpoints);
    }
    let running = pipeline
        .spawn(move |scope| {
            let _ = &token;
            let bound = Duration::from_millis(job.out_of_orderness_ms);
            let strategy = WatermarkStrategy::bounded_out_of_orderness(bound, move |i: &u64| {
                EventTime::from_millis(job.time_ms(*i))
            });
            let events = scope.source(PacedGenerator::new(scope.shard(), scope.shards(), job, epoch), strategy);
            let arrivals = std::rc::Rc::new(std::cell::RefCell::new(LatencyRecorder::new()));
            let side = |left: bool| {
                let recorder = arrivals.clone();
                events
                    .clone()
                    .filter(move |i| is_left(&job, *i) == left)
                    .key_by(move |i| job.key(*i))
                    .into_stream()
                    .map(move |i| {
                        if job.is_measured(i) {
                            let late = Instant::now().saturating_duration_since(epoch + job.scheduled(i));
                            recorder.borrow_mut().record(late);
                        }
                        i
                    })
                    .key_by(move |i| job.key(*i))
            };
            let (left, right) = (side(true), side(false));
            let sink = PairSink {
                job,
                epoch,
                pairs: 0,
                wrong: 0,
                latency: LatencyRecorder::new(),
                arrivals,
                ends: sink_ends.clone(),
            };
            left.window_join(right, Windows::tumbling(Duration::from_millis(WINDOW_MS as u64)), |k, l, r| (*k, *l, *r))
                .attach(sink);
        })
        .context("starting the join pipeline")?;
    while Arc::strong_count(&running_token) > 1 {
        std::thread::sleep(Duration::from_millis(2));
    }
    let checkpoints = running.checkpoints();
    running.join().context("running the join pipeline")?;
    let ends = std::mem::take(&mut *ends.lock().unwrap_or_else(PoisonError::into_inner));
    ensure!(ends.len() == shards, "{} of {shards} shards' sinks ended", ends.len());
    let (mut latency, mut arrivals) = (LatencyRecorder::new(), LatencyRecorder::new());
    let (mut pairs, mut wrong) = (0, 0);
    for end in &ends {
        latency.merge(&end.latency);
        arrivals.merge(&end.arrivals);
        pairs += end.pairs;
        wrong += end.wrong;
    }
    ensure!(wrong == 0, "join: {wrong} of {pairs} pairs do not belong together");
    let expected = expected_pairs(&job);
    ensure!(pairs == expected, "join: {pairs} pairs, expected {expected}");
    let ended = ends.iter().map(|e| e.at).max().context("no shard ended")?;
    Ok(SluiceRun {
        elapsed: ended.saturating_duration_since(epoch),
        tally: Tally { results: pairs, sum: job.events, wrong },
        events: job.events,
        latency: Some(latency),
        checkpoints,
        arrivals: Some(arrivals),
        source_end_spread: None,
    })
}

/// Checks and counts each pair, and records its latency; hands its figures over at the end.
struct PairSink {
    job: Job,
    epoch: Instant,
    pairs: u64,
    wrong: u64,
    latency: LatencyRecorder,
    /// The shard's arrival probe's recorder.
    arrivals: std::rc::Rc<std::cell::RefCell<LatencyRecorder>>,
    ends: Arc<Mutex<Vec<SinkEnd>>>,
}

impl Operator<Pair> for PairSink {
    fn on_batch(&mut self, batch: &mut Vec<Event<Pair>>) {
        let now = Instant::now();
        let job = &self.job;
        for e in batch.drain(..) {
            let (key, l, r) = e.value;
            // A pair carries its window's last instant.
            let start = e.time.millis() + 1 - WINDOW_MS;
            let window = |i: u64| Job::window_start(job.time_ms(i));
            let fits = job.key(l) == key
                && job.key(r) == key
                && is_left(job, l)
                && !is_left(job, r)
                && window(l) == start
                && window(r) == start;
            self.wrong += u64::from(!fits);
            self.pairs += 1;
            if let Some(last) = job.last_event_of_window(start)
                && job.is_measured(last)
            {
                self.latency.record_at(now, now.saturating_duration_since(self.epoch + job.scheduled(last)));
            }
        }
    }

    fn on_watermark(&mut self, _: EventTime) {}

    fn on_idle(&mut self, _: bool) {}

    fn on_end(&mut self) {
        let end = SinkEnd {
            pairs: self.pairs,
            wrong: self.wrong,
            latency: self.latency.clone(),
            arrivals: self.arrivals.borrow().clone(),
            at: Instant::now(),
        };
        self.ends.lock().unwrap_or_else(PoisonError::into_inner).push(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_pairs_match_a_count_over_every_event() {
        for (events, keys) in [(2_500u64, 7u64), (3_000, 1), (10_000, 1_000), (1, 3)] {
            let job = Job::new(events, Some(1_000), 0, 64).unwrap().with_keys(keys).unwrap();
            let mut sides: std::collections::HashMap<(i64, u64), (u64, u64)> = std::collections::HashMap::new();
            for i in 0..events {
                let slot = sides.entry((Job::window_start(job.time_ms(i)), job.key(i))).or_default();
                if is_left(&job, i) {
                    slot.0 += 1;
                } else {
                    slot.1 += 1;
                }
            }
            let want: u64 = sides.values().map(|(l, r)| l * r).sum();
            assert_eq!(expected_pairs(&job), want, "{events} events, {keys} keys");
        }
    }
}
