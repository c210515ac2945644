//! The sluice side of `sluice-bench pipeline`: the job as a pipeline,
//!
//! ```text
//! source(events) -> key_by(i % 10 000) -> window(tumbling 1 s) -> count -> counting sink
//! ```
//!
//! on `shards` pinned shards. The throughput mode's source is the engine's [`Generator`];
//! the latency mode's is [`PacedGenerator`], an open-loop source that releases each event at
//! its scheduled time. Both are stamped by a bounded-out-of-orderness
//! [`WatermarkStrategy`]. The sink (`CountingSink`) checks every result against the job
//! and, in the latency mode, records the latency of each: from the scheduled send time of
//! its window's last event to the moment the result reaches the sink. A window's result
//! cannot exist before its last event was sent, so this is the event-to-result latency of
//! the event that waited least; measuring from the schedule, not from the actual send,
//! charges a stalled source to every event it delayed (coordinated omission corrected).
//!
//! [`run_bounded`] runs the throughput mode for a time instead of a count (`--duration`):
//! each shard's source stops when the time has passed, so the events counted are not a
//! prefix of the job's and only their sum is checked.
//!
//! [`run_checkpointed`] runs the latency mode with checkpoints on or off for
//! `sluice-bench checkpoint`; it also records each event's arrival latency at its window
//! (`ArrivalCount`), and the paced source can resume from a checkpoint.

use std::{
    cell::RefCell,
    future::Future,
    pin::Pin,
    rc::Rc,
    sync::{
        Arc, Barrier, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use sluice_engine::dataflow::{
    Aggregate, CheckpointConfig, CheckpointStats, Event, Generator, Operator, Pipeline, PipelineConfig, ResidueSplit,
    Scope, SharedGenerator, SharedSequence, Source, Stream, UserError, WatermarkStrategy, WindowResult, Windows,
};
use sluice_io::EventTime;

use super::pipeline_job::{CLAIM_RUN, Job, KEYS, Split, Tally, WINDOW_MS};
use crate::harness::{LatencyRecorder, RunDry, TimeBound, end_spread};

/// The interval of the latency mode's `--hlog` log.
const HLOG_INTERVAL: Duration = Duration::from_secs(1);

/// How long after the pipeline starts the latency mode's schedule begins, so that every
/// shard is up before its first event is due.
const PACED_START_DELAY: Duration = Duration::from_millis(50);

/// One run of the sluice side.
#[derive(Debug, Clone)]
pub struct SluiceRun {
    /// Throughput mode: from the moment every shard was ready to the last shard's end.
    /// Latency mode: from the schedule's start to the last shard's end.
    pub elapsed: Duration,
    /// What the sinks saw (already checked against the job).
    pub tally: Tally,
    /// Events the sources emitted (the job's events, unless [`run_bounded`]).
    pub events: u64,
    /// Result latencies, in the latency mode.
    pub latency: Option<LatencyRecorder>,
    /// Every checkpoint completed, when the run checkpointed ([`run_checkpointed`]).
    pub checkpoints: Vec<CheckpointStats>,
    /// With [`run_checkpointed`]: each event's latency from its scheduled send time to
    /// being counted into its window (after the source, the exchange and any barrier
    /// alignment), sampling every moment of the run rather than only window ends.
    pub arrivals: Option<LatencyRecorder>,
    /// Throughput mode without a limit: from the first shard's source running dry to the
    /// last one's ([`end_spread`]): how long the first shard to finish waited, at the end,
    /// for the slowest. `None` at one shard.
    pub source_end_spread: Option<Duration>,
}

/// What each shard's sink hands back when its stream ends.
#[derive(Debug)]
struct SinkEnd {
    tally: Tally,
    latency: Option<LatencyRecorder>,
    arrivals: Option<LatencyRecorder>,
    at: Instant,
}

/// The pipeline's settings for `job` on `shards` shards.
fn pipeline_config(job: &Job, shards: usize) -> PipelineConfig {
    let config = PipelineConfig { batch_records: job.batch, pin: job.pin, ..PipelineConfig::with_shards(shards) };
    match job.watermark_interval {
        Some(watermark_interval) => PipelineConfig { watermark_interval, ..config },
        None => config,
    }
}

/// Runs the job on `shards` shards; `paced` selects the latency mode (events sent at their
/// scheduled times) over the throughput mode (as fast as the pipeline takes them).
///
/// # Errors
///
/// A pipeline that failed, or results that do not match the job.
pub fn run(job: &Job, shards: usize, paced: bool) -> anyhow::Result<SluiceRun> {
    run_with(job, shards, paced, None, false, None)
}

/// The throughput mode of [`run`] for `limit` (from each shard's first poll) rather than
/// for `job.events` events: the job should have more events than that time lets through.
///
/// # Errors
///
/// A pipeline that failed, or results whose counts do not add up to the events sent.
pub fn run_bounded(job: &Job, shards: usize, limit: Duration) -> anyhow::Result<SluiceRun> {
    run_with(job, shards, false, None, false, Some(limit))
}

/// The latency mode of [`run`], taking checkpoints as `checkpoints` says (none when
/// `None`): the figures of every completed checkpoint come back in
/// [`SluiceRun::checkpoints`], and each event's arrival latency in
/// [`SluiceRun::arrivals`].
///
/// # Errors
///
/// As [`run`].
pub fn run_checkpointed(job: &Job, shards: usize, checkpoints: Option<CheckpointConfig>) -> anyhow::Result<SluiceRun> {
    run_with(job, shards, true, checkpoints, true, None)
}

fn run_with(
    job: &Job,
    shards: usize,
    paced: bool,
    checkpoints: Option<CheckpointConfig>,
    arrivals: bool,
    limit: Option<Duration>,
) -> anyhow::Result<SluiceRun> {
    let job = *job;
    let closed = ClosedLoop::new(&job);
    let source_closed = closed.clone();
    let ends: Arc<Mutex<Vec<SinkEnd>>> = Arc::new(Mutex::new(Vec::new()));
    let starts: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::new()));
    // Every shard has built its graph before the clock starts.
    let ready = Arc::new(Barrier::new(shards));
    let epoch = Instant::now() + PACED_START_DELAY;
    let config = pipeline_config(&job, shards);
    let (sink_ends, shard_starts) = (ends.clone(), starts.clone());
    // Held by the build closure, which every shard's thread keeps until it exits: once this
    // is the last reference, every shard has finished (and every checkpoint is counted).
    let running_token = Arc::new(());
    let token = running_token.clone();
    // What the progress line shows: events counted into results, and each shard's p99.
    let live = Arc::new(Live { events: AtomicU64::new(0), p99_us: (0..shards).map(|_| AtomicU64::new(0)).collect() });
    let sink_live = live.clone();
    // `--live`: the page counts the events the progress line counts.
    let (counted, offered) = (live.clone(), paced.then(|| 1_000_000_000_000 / job.ps_per_event.max(1)));
    crate::harness::live::watch("events", offered, move || counted.events.load(Ordering::Relaxed));
    let mut pipeline = Pipeline::new(config);
    if let Some(checkpoints) = checkpoints {
        pipeline = pipeline.checkpointing(checkpoints);
    }
    let running = pipeline
        .spawn(move |scope| {
            let _ = &token;
            let bound = Duration::from_millis(job.out_of_orderness_ms);
            let mut strategy = WatermarkStrategy::bounded_out_of_orderness(bound, move |i: &u64| {
                EventTime::from_millis(job.time_ms(*i))
            });
            if let Some(timeout) = job.idle_timeout {
                strategy = strategy.with_idle_timeout(timeout);
            }
            let events = if paced {
                scope.source(PacedGenerator::new(scope.shard(), scope.shards(), job, epoch), strategy)
            } else {
                source_closed.source(scope, &job, strategy, limit)
            };
            let arrivals = arrivals.then(|| Rc::new(RefCell::new(LatencyRecorder::new())));
            let sink = CountingSink {
                job,
                tally: Tally::default(),
                latency: paced.then(|| (epoch, LatencyRecorder::with_intervals(epoch, HLOG_INTERVAL))),
                arrivals: arrivals.clone(),
                ends: sink_ends.clone(),
                live: sink_live.clone(),
                shard: scope.shard(),
                published: Instant::now(),
            };
            let arrivals = arrivals.map(|recorder| ArrivalCount { job, epoch, recorder });
            if job.keys == KEYS {
                count_windows(events, |i| Job::default_key(*i), arrivals, sink, job.two_phase);
            } else {
                count_windows(events, move |i| job.key(*i), arrivals, sink, job.two_phase);
            }
            ready.wait();
            shard_starts.lock().unwrap_or_else(PoisonError::into_inner).push(Instant::now());
        })
        .context("starting the sluice pipeline")?;
    // `--metrics-listen` serves it while this run holds it.
    let metrics = running.metric_source("sluice");
    crate::harness::metrics::register(&metrics);
    // `join` consumes the pipeline: read its checkpoints once every shard has ended.
    wait_for_shards(&running_token, &live, paced);
    crate::harness::live::unwatch();
    let checkpoints = running.checkpoints();
    running.join().context("running the sluice pipeline")?;

    let ends = std::mem::take(&mut *ends.lock().unwrap_or_else(PoisonError::into_inner));
    anyhow::ensure!(ends.len() == shards, "{} of {shards} shards' sinks ended", ends.len());
    let (tally, latency, all_arrivals) = merge_ends(&ends, paced.then_some(epoch), arrivals);
    let events = checked_events(&job, limit, &tally, &closed.emitted)?;
    let started = if paced {
        epoch
    } else {
        let starts = starts.lock().unwrap_or_else(PoisonError::into_inner);
        starts.iter().copied().min().context("no shard started")?
    };
    let ended = ends.iter().map(|e| e.at).max().context("no shard ended")?;
    Ok(SluiceRun {
        elapsed: ended.saturating_duration_since(started),
        tally,
        events,
        latency,
        checkpoints,
        arrivals: all_arrivals,
        source_end_spread: end_spread(&closed.dry.lock().unwrap_or_else(PoisonError::into_inner)),
    })
}

/// What every shard's throughput-mode source shares with the run.
#[derive(Clone)]
struct ClosedLoop {
    /// `Split::OnDemand`: the runs of events every shard's source claims from.
    sequence: SharedSequence,
    /// With a limit: the events the sources let through ([`TimeBound`]).
    emitted: Arc<AtomicU64>,
    /// Without one: when each shard's source ran dry ([`RunDry`]).
    dry: Arc<Mutex<Vec<Instant>>>,
}

impl ClosedLoop {
    fn new(job: &Job) -> ClosedLoop {
        ClosedLoop {
            sequence: SharedSequence::new(job.events, CLAIM_RUN),
            emitted: Arc::new(AtomicU64::new(0)),
            dry: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The source on `scope`'s shard: the job's events split as [`Job::split`] says,
    /// ended after `limit` if given, else noting when it ran dry.
    fn source<E: Fn(&u64) -> EventTime + 'static>(
        &self,
        scope: &Scope,
        job: &Job,
        strategy: WatermarkStrategy<u64, E>,
        limit: Option<Duration>,
    ) -> Stream<u64> {
        let (shard, shards, emitted, dry) = (scope.shard(), scope.shards(), &self.emitted, &self.dry);
        match (limit, job.split) {
            (Some(limit), Split::ByResidue) => {
                let generator = Generator::new(shard, shards, job.events, |i| i);
                scope.source(TimeBound::new(generator, limit, emitted.clone()), strategy)
            }
            (Some(limit), Split::OnDemand) => {
                let generator = SharedGenerator::new(self.sequence.clone(), |i| i);
                scope.source(TimeBound::new(generator, limit, emitted.clone()), strategy)
            }
            (None, Split::ByResidue) => {
                scope.source(RunDry::new(Generator::new(shard, shards, job.events, |i| i), dry.clone()), strategy)
            }
            (None, Split::OnDemand) => {
                scope.source(RunDry::new(SharedGenerator::new(self.sequence.clone(), |i| i), dry.clone()), strategy)
            }
        }
    }
}

/// Waits until every shard has finished (the build closure's copy of `running_token` is
/// dropped), drawing the progress line from `live`.
fn wait_for_shards(running_token: &Arc<()>, live: &Live, paced: bool) {
    let progress = crate::harness::Progress::start(if paced { "pipeline latency run" } else { "pipeline" });
    while Arc::strong_count(running_token) > 1 {
        std::thread::sleep(Duration::from_millis(2));
        if progress.is_drawn() {
            let p99 = live.p99_us.iter().map(|p| p.load(Ordering::Relaxed)).max().filter(|_| paced);
            progress.update(live.events.load(Ordering::Relaxed), p99);
        }
    }
    progress.finish();
}

/// The shards' sink figures merged: the tally, the result latencies (when `paced` from
/// the schedule starting at `Some(epoch)`), and the arrival latencies (when `arrivals`).
fn merge_ends(
    ends: &[SinkEnd],
    paced: Option<Instant>,
    arrivals: bool,
) -> (Tally, Option<LatencyRecorder>, Option<LatencyRecorder>) {
    let mut tally = Tally::default();
    let mut latency = paced.map(|epoch| LatencyRecorder::with_intervals(epoch, HLOG_INTERVAL));
    let mut all_arrivals = arrivals.then(LatencyRecorder::new);
    for end in ends {
        tally.merge(&end.tally);
        if let (Some(all), Some(shard)) = (&mut latency, &end.latency) {
            all.merge(shard);
        }
        if let (Some(all), Some(shard)) = (&mut all_arrivals, &end.arrivals) {
            all.merge(shard);
        }
    }
    (tally, latency, all_arrivals)
}

/// The events the run counted, once `tally` is checked against them: with a `limit`, the
/// `emitted` events' sum; with a pause, at most the job's (records the pause made late are
/// dropped); otherwise the job's results exactly.
fn checked_events(job: &Job, limit: Option<Duration>, tally: &Tally, emitted: &AtomicU64) -> anyhow::Result<u64> {
    Ok(match limit {
        Some(_) => {
            // Each shard stopped at its own point: the counts add up, but not to the job's.
            let emitted = emitted.load(Ordering::Relaxed);
            anyhow::ensure!(tally.sum == emitted, "sluice: the results count {} events, {emitted} sent", tally.sum);
            emitted
        }
        None if job.pause_window().is_some() => {
            // Records the pause made late are dropped: the counts may fall short, never over.
            anyhow::ensure!(
                tally.sum <= job.events,
                "sluice: the results count {} events of {}",
                tally.sum,
                job.events
            );
            job.events
        }
        None => {
            tally.check(job, "sluice")?;
            job.events
        }
    })
}

/// The rest of the graph: `key_by(key) -> window(tumbling 1 s) -> count -> sink`, counting
/// with `arrivals` when given; with `two_phase`, `combine_by(key) -> tumbling 1 s -> count`
/// (with `arrivals`, an event's arrival is then when its shard counts it into a partial). Generic over the key selector so the default one stays a
/// zero-sized call the compiler inlines.
fn count_windows<KS: Fn(&u64) -> u64 + 'static>(
    events: Stream<u64>,
    key: KS,
    arrivals: Option<ArrivalCount>,
    sink: CountingSink,
    two_phase: bool,
) {
    let size = Duration::from_millis(WINDOW_MS as u64);
    if two_phase {
        let windows = events.combine_by(key).tumbling(size);
        match arrivals {
            Some(arrivals) => windows.aggregate(arrivals).attach(sink),
            None => windows.count().attach(sink),
        }
        return;
    }
    let windows = events.key_by(key).window(Windows::tumbling(size));
    match arrivals {
        Some(arrivals) => windows.aggregate(arrivals).attach(sink),
        None => windows.count().attach(sink),
    }
}

/// Figures the sinks publish for the progress line while the run lasts.
#[derive(Debug)]
struct Live {
    events: AtomicU64,
    p99_us: Vec<AtomicU64>,
}

/// The counting sink: checks and counts each result; in the latency mode, also records its
/// latency. Hands its figures over when the stream ends.
struct CountingSink {
    live: Arc<Live>,
    shard: usize,
    /// When the sink last published its figures (every 100 ms at most).
    published: Instant,
    job: Job,
    tally: Tally,
    latency: Option<(Instant, LatencyRecorder)>,
    /// The shard's [`ArrivalCount`] recorder, handed over with the rest at the end.
    arrivals: Option<Rc<RefCell<LatencyRecorder>>>,
    ends: Arc<Mutex<Vec<SinkEnd>>>,
}

impl Operator<WindowResult<u64, u64>> for CountingSink {
    fn on_batch(&mut self, batch: &mut Vec<Event<WindowResult<u64, u64>>>) {
        let mut events = 0;
        for result in batch.iter().map(|e| &e.value) {
            self.tally.add(&self.job, result.key, result.window.start.0, result.value);
            events += result.value;
        }
        self.live.events.fetch_add(events, Ordering::Relaxed);
        if let Some((epoch, latency)) = &mut self.latency {
            let now = Instant::now();
            for result in batch.iter().map(|e| &e.value) {
                if let Some(last) = self.job.last_event_of_window(result.window.start.0)
                    && self.job.is_measured(last)
                {
                    latency.record_at(now, now.saturating_duration_since(*epoch + self.job.scheduled(last)));
                }
            }
            if now.duration_since(self.published) >= Duration::from_millis(100) {
                self.published = now;
                self.live.p99_us[self.shard].store(latency.summary().p99, Ordering::Relaxed);
            }
        }
        batch.clear();
    }

    fn on_watermark(&mut self, _: EventTime) {}

    fn on_idle(&mut self, _: bool) {}

    fn on_end(&mut self) {
        let end = SinkEnd {
            tally: self.tally,
            latency: self.latency.as_ref().map(|(_, l)| l.clone()),
            arrivals: self.arrivals.as_ref().map(|a| a.borrow().clone()),
            at: Instant::now(),
        };
        self.ends.lock().unwrap_or_else(PoisonError::into_inner).push(end);
    }
}

/// Counts a key's events like [`Count`](sluice_engine::dataflow::Count), and records
/// each event's latency as it is counted: from its scheduled send time to now.
struct ArrivalCount {
    job: Job,
    epoch: Instant,
    recorder: Rc<RefCell<LatencyRecorder>>,
}

impl Aggregate<u64> for ArrivalCount {
    type Acc = u64;
    type Out = u64;

    fn create(&self) -> u64 {
        0
    }

    fn add(&self, acc: &mut u64, i: &u64) {
        *acc += 1;
        if self.job.is_measured(*i) {
            let scheduled = self.epoch + self.job.scheduled(*i);
            self.recorder.borrow_mut().record(Instant::now().saturating_duration_since(scheduled));
        }
    }

    fn merge(&self, into: &mut u64, from: u64) {
        *into += from;
    }

    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// An open-loop source: shard `s` of `n` releases the events `i` with `i % n == s`, each
/// once `epoch + job.scheduled(i)` has come, whatever happened to the earlier ones. With
/// nothing due it sleeps on a glommio timer until the next event is.
pub struct PacedGenerator {
    job: Job,
    epoch: Instant,
    /// Shard 0's pause ([`Job::pause_window`]), as instants.
    pause: Option<(Instant, Instant)>,
    next: u64,
    step: u64,
    timer: Option<glommio::timer::Timer>,
}

impl std::fmt::Debug for PacedGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacedGenerator").field("next", &self.next).field("step", &self.step).finish_non_exhaustive()
    }
}

impl PacedGenerator {
    /// Shard `shard` of `shards`'s share of `job`'s events, on the schedule starting at
    /// `epoch`.
    pub fn new(shard: usize, shards: usize, job: Job, epoch: Instant) -> Self {
        let pause = job.pause_window().filter(|_| shard == 0).map(|(from, until)| (epoch + from, epoch + until));
        PacedGenerator { job, epoch, pause, next: shard as u64, step: shards.max(1) as u64, timer: None }
    }
}

impl Source<u64> for PacedGenerator {
    fn splits(&self) -> usize {
        1
    }

    fn poll_next(&mut self, cx: &mut Context<'_>, out: &mut Vec<u64>, max: usize) -> Poll<Option<usize>> {
        let Some((start, step, n)) = std::task::ready!(self.take_due(cx, max)) else { return Poll::Ready(None) };
        out.extend((0..n).map(|j| start + j * step));
        Poll::Ready(Some(0))
    }

    // Stamps the events as it makes them, as the engine's `Generator` does: no scratch
    // batch and second pass.
    fn poll_events<E: Fn(&u64) -> EventTime>(
        &mut self,
        cx: &mut Context<'_>,
        _scratch: &mut Vec<u64>,
        out: &mut Vec<Event<u64>>,
        max: usize,
        time: &E,
    ) -> Poll<Option<usize>> {
        let Some((start, step, n)) = std::task::ready!(self.take_due(cx, max)) else { return Poll::Ready(None) };
        out.extend((0..n).map(|j| {
            let value = start + j * step;
            Event { time: time(&value), value }
        }));
        Poll::Ready(Some(0))
    }

    /// One split per shard, named by the shard count and the shard's residue (as the
    /// engine's `Generator` names its own), so a checkpoint can resume it.
    fn positions(&self) -> Option<Vec<(u64, i64)>> {
        Some(self.split().positions(self.next))
    }

    fn restore(&mut self, positions: &std::collections::HashMap<u64, i64>) -> Result<(), UserError> {
        if let Some(next) = self.split().restore("a paced source", positions)? {
            self.next = next;
            self.timer = None;
        }
        Ok(())
    }
}

impl PacedGenerator {
    /// Takes the events due now (at most `max`): the first, the step and how many.
    /// `Ready(None)` once all were sent; `Pending`, with a timer armed for the next one's
    /// time, when none is due yet.
    fn take_due(&mut self, cx: &mut Context<'_>, max: usize) -> Poll<Option<(u64, u64, u64)>> {
        loop {
            if self.next >= self.job.events {
                return Poll::Ready(None);
            }
            let now = Instant::now();
            // While paused, only the events scheduled before the pause go out.
            let paused = self.pause.filter(|&(_, until)| now < until);
            let cutoff = paused.map_or(now, |(from, _)| now.min(from));
            // One division for the batch, not a schedule comparison per event: at 100 M
            // events/s and more the per-event form was most of a shard's CPU.
            let end = self.due_end(cutoff).min(self.job.events);
            if end > self.next {
                let n = (end - self.next).div_ceil(self.step).min(max.max(1) as u64);
                let start = self.next;
                self.next += n * self.step;
                self.timer = None;
                return Poll::Ready(Some((start, self.step, n)));
            }
            let due = match paused {
                Some((from, until)) if self.epoch + self.job.scheduled(self.next) > from => until,
                _ => self.epoch + self.job.scheduled(self.next),
            };
            let timer =
                self.timer.get_or_insert_with(|| glommio::timer::Timer::new(due.saturating_duration_since(now)));
            if Pin::new(timer).poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.timer = None;
        }
    }

    /// The first event index not yet due at `cutoff`: event `i` is due once `epoch +
    /// job.scheduled(i) <= cutoff`, and `scheduled(i)` is `i x ps_per_event / 1000` whole
    /// nanoseconds, so `i` is due exactly when `i x ps_per_event <= ns x 1000 + 999`.
    fn due_end(&self, cutoff: Instant) -> u64 {
        let Some(since) = cutoff.checked_duration_since(self.epoch) else { return 0 };
        let limit = since.as_nanos() * 1000 + 999;
        u64::try_from(limit / u128::from(self.job.ps_per_event.max(1)) + 1).unwrap_or(u64::MAX)
    }

    fn split(&self) -> ResidueSplit {
        ResidueSplit::new((self.next % self.step) as usize, self.step as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_end_agrees_with_the_schedule_event_by_event() {
        // Rates whose spacing divides a nanosecond evenly, and ones that do not.
        for rate in [1_000u64, 3_000_000, 7_777_777, 100_000_000, 333_333_333] {
            let job = Job::new(1_000_000, Some(rate), 0, 16).unwrap();
            let epoch = Instant::now();
            let paced = PacedGenerator::new(0, 1, job, epoch);
            for i in (0..2000u64).chain([999_999]) {
                let at = epoch + job.scheduled(i);
                // Due at its own time: the end is past it; a nanosecond before, it is not due.
                assert!(paced.due_end(at) > i, "rate {rate}, event {i}");
                if let Some(before) = at.checked_sub(Duration::from_nanos(1)).filter(|b| *b >= epoch) {
                    assert!(paced.due_end(before) <= i, "rate {rate}, event {i}");
                }
            }
        }
    }
}
