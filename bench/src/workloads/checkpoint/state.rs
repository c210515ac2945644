//! The state mode of `sluice-bench checkpoint` (`--state-keys N`): what it costs to
//! checkpoint and to restore N keys of window state.
//!
//! The job: records `0..N`, record `i` keyed `i`, all at event time 0, counted per key in
//! one one-hour tumbling window that never fires while the run lasts (the watermark stays
//! just below 0), so the window holds one entry per key. Each shard's source
//! ([`HoldingSource`]) sends its share as fast as the pipeline takes it and then holds,
//! without ending (an ended input would fire the window and empty the state). Then:
//!
//! 1. the sources hold until a first checkpoint (empty, whole) has completed, then send;
//!    the first checkpoint triggered after every record was sent holds all N keys (the
//!    window was created after the last snapshot, so it is written whole): its duration
//!    and bytes are the *full* figure;
//! 2. the sources send a second record for keys `0..changed` (`--changed-percent`), and the
//!    first checkpoint triggered after that is the *changed* figure: window state is
//!    incremental, so it holds only the changed keys;
//! 3. a *savepoint* of the same state (every key, changes included) is taken into a
//!    directory of its own: a whole checkpoint, then copied; its time from the request to
//!    being durable there is compared with the full checkpoint's (the target: at
//!    most 2x);
//! 4. the run stops, and a new pipeline starts on the same directory (restoring the
//!    savepoint's checkpoint, the latest): *restore* is the call to `spawn`, which reads
//!    and decodes the last checkpoint's parts and returns once every shard has built its
//!    graph and rebuilt its keys, so records can flow;
//! 5. the restored pipeline drains: its window fires, and every count is checked (1 per
//!    key, 2 for the changed keys). A restore that lost or doubled anything fails the run.

use std::{
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use serde::Serialize;
use sluice_engine::dataflow::{
    CheckpointConfig, CheckpointMode, CheckpointStats, Event, Operator, Pipeline, PipelineConfig, ResidueSplit,
    RunningPipeline, Scope, Source, UserError, WatermarkStrategy, WindowResult, Windows,
};
use sluice_io::EventTime;

use super::CheckpointFigures;
use crate::harness::Table;

/// How long any one phase may take before the run is declared stuck.
const PHASE_TIMEOUT: Duration = Duration::from_secs(900);
/// How often a holding source looks for new work.
const HOLD_POLL: Duration = Duration::from_millis(5);
/// The window every record falls in: far longer than any run.
const WINDOW: Duration = Duration::from_secs(3600);

/// What the state mode runs.
#[derive(Debug, Clone)]
pub(super) struct StateJob {
    /// Keys of window state.
    pub(super) keys: u64,
    /// Keys `0..changed` get a second record before the second checkpoint.
    pub(super) changed: u64,
    /// `--mode`.
    pub(super) mode: CheckpointMode,
    pub(super) shards: usize,
    pub(super) batch: usize,
    /// The first run's checkpoint interval.
    pub(super) interval: Duration,
    /// A fresh checkpoint directory.
    pub(super) dir: std::path::PathBuf,
}

/// The state mode's figures (the `state` object of the JSON report).
#[derive(Debug, Clone, Serialize)]
pub struct StateReport {
    /// Keys of window state (`--state-keys`).
    pub keys: u64,
    /// Keys changed before the second checkpoint.
    pub changed_keys: u64,
    /// Whether checkpoints write only what changed: window state is incremental, so
    /// `changed_checkpoint` writes the changed keys (the run checks it holds them all).
    pub incremental: bool,
    /// From starting the pipeline to every record sent, milliseconds.
    pub ingest_ms: f64,
    /// The first checkpoint holding every key.
    pub full_checkpoint: CheckpointFigures,
    /// The first checkpoint after `changed_keys` keys changed.
    pub changed_checkpoint: CheckpointFigures,
    /// The savepoint of the same state: its checkpoint (whole: every key).
    pub savepoint_checkpoint: CheckpointFigures,
    /// From asking for the savepoint to it being durable in its directory, milliseconds.
    pub savepoint_ms: f64,
    /// The part of `savepoint_ms` spent putting the checkpoint into the savepoint's
    /// directory, synced, milliseconds.
    pub savepoint_export_ms: f64,
    /// Whether its parts were hard-linked (the savepoint's directory on the checkpoints'
    /// file system) rather than copied.
    pub savepoint_linked: bool,
    /// `savepoint_ms` over the full checkpoint's duration.
    pub savepoint_ratio: f64,
    /// The checkpoint the second pipeline restored from.
    pub restored_from: u64,
    /// `spawn`: reading the checkpoint, then every shard building its graph and rebuilding
    /// its state, milliseconds.
    pub restore_ms: f64,
    /// The part of `restore_ms` spent reading and decoding every part of the checkpoint,
    /// milliseconds.
    pub restore_read_ms: f64,
    /// From stopping the restored pipeline with a drain to every window result at the
    /// sink, milliseconds (not part of the restore).
    pub drain_ms: f64,
    /// Results the restored pipeline emitted, each checked (one per key).
    pub restored_results: u64,
    /// The sum of their counts (`keys + changed_keys`).
    pub restored_sum: u64,
    /// The process's peak resident memory at the end, MiB (`VmHWM`).
    pub peak_rss_mib: Option<f64>,
}

/// What [`run`] hands back: the report and every checkpoint of the first run.
#[derive(Debug)]
pub(super) struct StateRun {
    pub(super) report: StateReport,
    pub(super) checkpoints: Vec<CheckpointStats>,
}

impl StateReport {
    /// Appends this mode's rows to `table`.
    pub(super) fn rows(&self, table: &mut Table) {
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        table.row("ingest (all records sent)", format!("{:.0}", self.ingest_ms), "ms");
        let f = &self.full_checkpoint;
        table.row(
            format!("full checkpoint ({} keys)", f.keys),
            format!("{:.1}", f.duration_ms),
            format!("ms, {:.1} MiB, alignment {:.1} ms", mib(f.bytes), f.alignment_ms),
        );
        let c = &self.changed_checkpoint;
        table.row(
            format!("after {} keys changed ({} written)", self.changed_keys, c.keys),
            format!("{:.1}", c.duration_ms),
            format!("ms, {:.1} MiB (incremental)", mib(c.bytes)),
        );
        let s = &self.savepoint_checkpoint;
        table.row(
            format!("savepoint ({} keys)", s.keys),
            format!("{:.1}", self.savepoint_ms),
            format!(
                "ms, {:.2}x the full checkpoint; its checkpoint {:.1} ms, {} {:.1} ms, {:.1} MiB",
                self.savepoint_ratio,
                s.duration_ms,
                if self.savepoint_linked { "linked in" } else { "copied in" },
                self.savepoint_export_ms,
                mib(s.bytes)
            ),
        );
        table.row(format!("restore from checkpoint {}", self.restored_from), format!("{:.1}", self.restore_ms), "ms");
        table.row("  of which reading the parts", format!("{:.1}", self.restore_read_ms), "ms");
        table.row(
            "drain after restore",
            format!("{:.1}", self.drain_ms),
            format!("ms, {} results, sum {} (ok)", self.restored_results, self.restored_sum),
        );
        if let Some(rss) = self.peak_rss_mib {
            table.row("peak resident memory", format!("{rss:.0}"), "MiB");
        }
    }
}

/// Progress the shards' sources report and the main thread's go-ahead for the changes.
#[derive(Debug, Default)]
struct Progress {
    /// Sources that have sent their share of `0..keys`.
    sent: AtomicUsize,
    /// Sources that have also sent their changes.
    changed: AtomicUsize,
    /// The changes may be sent.
    release: AtomicBool,
    /// The first records may be sent (once a first, empty checkpoint has completed).
    begin: AtomicBool,
}

/// What one shard's sink saw.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    results: u64,
    sum: u64,
    wrong: u64,
}

/// Runs the state mode.
///
/// # Errors
///
/// A pipeline that failed or hung, a checkpoint missing keys, or a restore whose counts
/// differ from the input.
pub(super) fn run(job: &StateJob) -> anyhow::Result<StateRun> {
    ensure!(job.changed <= job.keys, "cannot change more keys than there are");
    let config = PipelineConfig { batch_records: job.batch, ..PipelineConfig::with_shards(job.shards) };

    // 1 and 2: fill, checkpoint, change, checkpoint.
    let progress = Arc::new(Progress::default());
    let ends = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let running = Pipeline::new(config)
        // Long enough that no checkpoint falls in the middle of the ingest, which would
        // split the keys over two snapshots.
        .checkpointing(
            CheckpointConfig::new(&job.dir).interval(job.interval.max(ingest_allowance(job.keys))).mode(job.mode),
        )
        .spawn(build(job.clone(), progress.clone(), ends.clone()))
        .context("starting the pipeline that fills the state")?;
    let metrics = running.metric_source("checkpoint-fill");
    crate::harness::metrics::register(&metrics);
    let measured = fill_and_checkpoint(job, &running, &progress, started);
    // 3: a savepoint of the same state.
    let savepoint = measured.as_ref().ok().map(|_| running.savepoint(job.dir.with_extension("savepoint")));
    running.stop(false);
    let checkpoints = running.checkpoints();
    // A failed shard's error says more than the wait that noticed it.
    running.join().context("the pipeline that fills the state")?;
    let (ingest, full, changed) = measured?;
    let savepoint = savepoint.context("no savepoint")?.context("the savepoint")?;
    ensure!(
        savepoint.checkpoint.keys == job.keys,
        "savepoint {} holds {} keys, expected all {} (a savepoint is whole)",
        savepoint.checkpoint.id,
        savepoint.checkpoint.keys,
        job.keys
    );

    // 4: restore. No checkpoint is due while it is measured and drained.
    let ends = Arc::new(Mutex::new(Vec::new()));
    let progress = Arc::new(Progress::default());
    progress.begin.store(true, Ordering::Release);
    let started = Instant::now();
    let running = Pipeline::new(config)
        .checkpointing(CheckpointConfig::new(&job.dir).interval(WINDOW).mode(job.mode))
        .spawn(build(job.clone(), progress.clone(), ends.clone()))
        .context("starting the restored pipeline")?;
    // `spawn` returns once every shard has built its graph and rebuilt its state.
    let restore = started.elapsed();
    let metrics = running.metric_source("checkpoint-restore");
    crate::harness::metrics::register(&metrics);
    let read = running.restore_read().unwrap_or_default();
    let restored = drain(job, &running, &progress, &ends);
    let restored_from = running.restored_from();
    if restored.is_err() {
        running.stop(false);
    }
    running.join().context("the restored pipeline")?;
    let (drain, tally) = restored?;
    let restored_from = restored_from.context("the second pipeline did not restore a checkpoint")?;
    ensure!(
        restored_from >= changed.id,
        "restored checkpoint {restored_from}, older than {} which held the changes",
        changed.id
    );
    ensure!(
        tally.results == job.keys,
        "the restored pipeline emitted {} results, expected {}",
        tally.results,
        job.keys
    );
    ensure!(
        tally.sum == job.keys + job.changed,
        "the restored counts sum to {}, expected {}",
        tally.sum,
        job.keys + job.changed
    );
    ensure!(tally.wrong == 0, "{} restored counts are wrong", tally.wrong);

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let report = StateReport {
        keys: job.keys,
        changed_keys: job.changed,
        incremental: changed.keys < full.keys,
        ingest_ms: ms(ingest),
        full_checkpoint: CheckpointFigures::from(&full),
        changed_checkpoint: CheckpointFigures::from(&changed),
        savepoint_checkpoint: CheckpointFigures::from(&savepoint.checkpoint),
        savepoint_ms: ms(savepoint.duration),
        savepoint_export_ms: ms(savepoint.export),
        savepoint_linked: savepoint.linked,
        savepoint_ratio: savepoint.duration.as_secs_f64() / full.duration.as_secs_f64().max(1e-9),
        restored_from: restored_from.get(),
        restore_ms: ms(restore),
        restore_read_ms: ms(read),
        drain_ms: ms(drain),
        restored_results: tally.results,
        restored_sum: tally.sum,
        peak_rss_mib: peak_rss_mib(),
    };
    Ok(StateRun { report, checkpoints })
}

/// The least interval between the state mode's checkpoints: time to send every key at
/// 1 M records/s, and at least 300 ms, so no checkpoint is likely to fall in the middle of
/// the ingest (which would split the keys over two checkpoints, and fail the run).
fn ingest_allowance(keys: u64) -> Duration {
    Duration::from_secs_f64(keys as f64 / 1e6).max(Duration::from_millis(300))
}

/// Steps 1 and 2: returns the time to send every record, the first checkpoint holding
/// them all, and the first one holding the changes.
fn fill_and_checkpoint(
    job: &StateJob,
    running: &RunningPipeline,
    progress: &Arc<Progress>,
    started: Instant,
) -> anyhow::Result<(Duration, CheckpointStats, CheckpointStats)> {
    let shards = job.shards;
    wait_for("a first checkpoint", progress, || !running.checkpoints().is_empty())?;
    let started = started.max(Instant::now());
    progress.begin.store(true, Ordering::Release);
    wait_for("every record to be sent", progress, || progress.sent.load(Ordering::Acquire) >= shards)?;
    let ingest = started.elapsed();
    // With incremental snapshots the keys are in whichever checkpoint followed them; the
    // ones after it are empty: take the largest since the records were released.
    let since = running.checkpoints().len().min(1);
    next_checkpoint(running, progress)?;
    let full = largest_since(running, since);
    ensure!(full.keys == job.keys, "checkpoint {} holds {} keys, expected all {}", full.id, full.keys, job.keys);
    progress.release.store(true, Ordering::Release);
    wait_for("the changes to be sent", progress, || progress.changed.load(Ordering::Acquire) >= shards)?;
    let since = running.checkpoints().iter().position(|c| c.id == full.id).map_or(0, |i| i + 1);
    next_checkpoint(running, progress)?;
    let changed = largest_since(running, since);
    ensure!(
        changed.keys >= job.changed,
        "checkpoint {} holds {} keys, expected at least the {} changed",
        changed.id,
        changed.keys,
        job.changed
    );
    Ok((ingest, full, changed))
}

/// The checkpoint holding the most keys among those completed from index `since` on.
fn largest_since(running: &RunningPipeline, since: usize) -> CheckpointStats {
    let all = running.checkpoints();
    all[since.min(all.len().saturating_sub(1))..].iter().copied().max_by_key(|c| c.keys).unwrap_or_default()
}

/// The first checkpoint triggered after this call: the one after any in progress now (a
/// checkpoint begins an interval after the previous one completed).
fn next_checkpoint(running: &RunningPipeline, progress: &Arc<Progress>) -> anyhow::Result<CheckpointStats> {
    let completed = running.checkpoints().len();
    wait_for("a checkpoint", progress, || running.checkpoints().len() >= completed + 2)?;
    Ok(running.checkpoints()[completed + 1])
}

/// Step 5: the drain time and what the sinks saw.
fn drain(
    job: &StateJob,
    running: &RunningPipeline,
    progress: &Arc<Progress>,
    ends: &Mutex<Vec<(Tally, Instant)>>,
) -> anyhow::Result<(Duration, Tally)> {
    let draining = Instant::now();
    running.stop(true);
    let ended = || ends.lock().unwrap_or_else(PoisonError::into_inner).clone();
    wait_for("the restored pipeline to drain", progress, || ended().len() >= job.shards)?;
    let ends = ended();
    let drain = ends.iter().map(|(_, at)| at.saturating_duration_since(draining)).max().unwrap_or_default();
    let mut tally = Tally::default();
    for (t, _) in &ends {
        tally.results += t.results;
        tally.sum += t.sum;
        tally.wrong += t.wrong;
    }
    Ok((drain, tally))
}

/// Polls `done` every millisecond for up to [`PHASE_TIMEOUT`]. `progress` is also held by
/// the build closure and every shard's source: once this is the last reference, every shard
/// has ended, and waiting longer is pointless.
fn wait_for(what: &str, progress: &Arc<Progress>, mut done: impl FnMut() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    while !done() {
        if Arc::strong_count(progress) == 1 && !done() {
            bail!("the pipeline ended while waiting for {what}");
        }
        if Instant::now() >= deadline {
            bail!("timed out after {PHASE_TIMEOUT:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// The graph every shard builds: holding source -> key_by(i) -> one-hour tumbling count ->
/// checking sink.
fn build(
    job: StateJob,
    progress: Arc<Progress>,
    ends: Arc<Mutex<Vec<(Tally, Instant)>>>,
) -> impl Fn(&Scope) + Send + Sync + 'static {
    move |scope: &Scope| {
        let source = HoldingSource::new(scope.shard(), scope.shards(), job.keys, job.changed, progress.clone());
        let strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::ZERO, |_: &u64| EventTime::from_millis(0));
        let sink = StateSink { changed: job.changed, tally: Tally::default(), ends: ends.clone() };
        scope.source(source, strategy).key_by(|i| *i).window(Windows::tumbling(WINDOW)).count().attach(sink);
    }
}

/// Shard `s` of `n` sends positions `p` with `p % n == s` from `0..keys + changed`: position
/// `p` is record `p` below `keys` and record `p - keys` after (a key's second record). It
/// sends the first part at once and the second once released, then holds: `Pending`,
/// looking again every few milliseconds, never ending.
struct HoldingSource {
    next: u64,
    step: u64,
    keys: u64,
    total: u64,
    progress: Arc<Progress>,
    reported_sent: bool,
    reported_changed: bool,
    timer: Option<glommio::timer::Timer>,
}

impl HoldingSource {
    fn new(shard: usize, shards: usize, keys: u64, changed: u64, progress: Arc<Progress>) -> Self {
        HoldingSource {
            next: shard as u64,
            step: shards.max(1) as u64,
            keys,
            total: keys + changed,
            progress,
            reported_sent: false,
            reported_changed: false,
            timer: None,
        }
    }

    fn split(&self) -> ResidueSplit {
        ResidueSplit::new((self.next % self.step) as usize, self.step as usize)
    }

    fn report(&mut self) {
        if !self.reported_sent && self.next >= self.keys {
            self.reported_sent = true;
            self.progress.sent.fetch_add(1, Ordering::AcqRel);
        }
        if !self.reported_changed && self.next >= self.total {
            self.reported_changed = true;
            self.progress.changed.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl Source<u64> for HoldingSource {
    fn splits(&self) -> usize {
        1
    }

    fn poll_next(&mut self, cx: &mut Context<'_>, out: &mut Vec<u64>, max: usize) -> Poll<Option<usize>> {
        loop {
            let limit = if !self.progress.begin.load(Ordering::Acquire) {
                0
            } else if self.progress.release.load(Ordering::Acquire) {
                self.total
            } else {
                self.keys
            };
            if self.next < limit {
                let before = out.len();
                while self.next < limit && out.len() - before < max {
                    out.push(if self.next < self.keys { self.next } else { self.next - self.keys });
                    self.next += self.step;
                }
                // Reported before the driver pushes this batch downstream, so any checkpoint
                // triggered after the main thread sees the report comes after these records.
                self.report();
                return Poll::Ready(Some(0));
            }
            self.report();
            let timer = self.timer.get_or_insert_with(|| glommio::timer::Timer::new(HOLD_POLL));
            if std::pin::Pin::new(timer).poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.timer = None;
        }
    }

    fn positions(&self) -> Option<Vec<(u64, i64)>> {
        Some(self.split().positions(self.next))
    }

    fn restore(&mut self, positions: &std::collections::HashMap<u64, i64>) -> Result<(), UserError> {
        match self.split().restore("the state source", positions)? {
            Some(next) => {
                self.next = next;
                Ok(())
            }
            None => Err("the checkpoint holds no source position".into()),
        }
    }
}

/// Counts and checks the window results: key `k`'s count must be 2 below `changed`, else 1.
struct StateSink {
    changed: u64,
    tally: Tally,
    ends: Arc<Mutex<Vec<(Tally, Instant)>>>,
}

impl Operator<WindowResult<u64, u64>> for StateSink {
    fn on_batch(&mut self, batch: &mut Vec<Event<WindowResult<u64, u64>>>) {
        for r in batch.drain(..).map(|e| e.value) {
            self.tally.results += 1;
            self.tally.sum += r.value;
            self.tally.wrong += u64::from(r.value != 1 + u64::from(r.key < self.changed));
        }
    }

    fn on_watermark(&mut self, _: EventTime) {}

    fn on_idle(&mut self, _: bool) {}

    fn on_end(&mut self) {
        self.ends.lock().unwrap_or_else(PoisonError::into_inner).push((self.tally, Instant::now()));
    }
}

/// The process's peak resident set (`VmHWM` in `/proc/self/status`), MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
