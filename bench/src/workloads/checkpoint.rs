//! `sluice-bench checkpoint`: what checkpoints cost the windowed keyed count, and how long
//! large state takes to checkpoint and to restore.
//!
//! **Latency mode** (the default, module `latency`). The `pipeline` workload's latency job
//! ([`pipeline_sluice`](super::pipeline_sluice)): an open-loop source sends event `i` at
//! `i / --rate` seconds, keyed `i mod --keys`, into one-second tumbling counts, and each
//! window result's latency runs from the scheduled send time of its window's last event to
//! the result reaching the sink (coordinated omission corrected: a stalled source is
//! charged to every event it delayed). Each of `--rounds` rounds runs it twice in one
//! process, once taking a checkpoint every `--interval-ms` (into a fresh directory under
//! the work directory) and once with checkpoints off (which goes first alternates from
//! round to round); the report has both latency distributions, merged over the rounds,
//! their p99.9 ratio, and the figures of every checkpoint taken
//! ([`RunningPipeline::checkpoints`]: duration, alignment, bytes, keys). Window results
//! only sample the moments windows end (all keys of a window at once), so each run also
//! records every event's *arrival* latency, from its scheduled send time to being counted
//! into its window, which sees a checkpoint's stall whenever it happens.
//!
//! `--job join` (module `join`) runs the same schedule through a window join instead
//! of the count: each key's events alternate between a left and a right stream, joined in
//! the same one-second tumbling windows, so the checkpoints hold the join's buffered
//! records; result latency is per emitted pair, arrival latency is taken after the
//! exchange. Every latency round runs a wake-up probe beside it (`--no-wake-probe` leaves
//! it out): the report's `machine_wake_latency_us` is how late a 1 ms sleep woke meanwhile,
//! the machine's own floor under the figures.
//!
//! **State mode** (`--state-keys N`, module `state`): N keys of window state, one record each in
//! one long window; the first checkpoint holding all of them is timed, then
//! `--changed-percent` of the keys get a second record and the next checkpoint is timed;
//! then a savepoint of the same state is timed (a whole checkpoint copied into a directory
//! of its own, against the full checkpoint: the target is at most 2x);
//! then a new pipeline restores from the directory and the time until every shard has
//! rebuilt its state is measured, after which it drains, and every restored count is
//! checked.
//!
//! `--mode aligned|unaligned` picks the engine's checkpoint mode (`CheckpointMode`) in both
//! modes of the workload, and the report's `mode` says which ran; unaligned checkpoints
//! also report the in-flight records they stored. Window state is incremental: the state
//! mode's "changed"
//! checkpoint writes the changed keys only.
//!
//! [`RunningPipeline::checkpoints`]: sluice_engine::dataflow::RunningPipeline::checkpoints

mod join;
mod latency;
mod state;

use std::time::Duration;

use anyhow::{Context, ensure};
use clap::{Args, builder::RangedU64ValueParser};
use serde::Serialize;
use sluice_engine::dataflow::{CheckpointMode, CheckpointStats, PipelineConfig};

pub use self::state::StateReport;
use super::DirArgs;
use crate::harness::{LatencySummary, RateSearch, RunArgs, RunInfo, Table};

/// `--rate` of the latency mode when not given, events per second.
pub const DEFAULT_RATE: u64 = 200_000;
/// `--duration` of the latency mode when not given, seconds.
pub const DEFAULT_SECONDS: f64 = 10.0;

/// What `checkpoint` makes of the shared options (`--help`).
const SHARED_HELP: &str = "Shared options here: --shards defaults to one per CPU this process may run on. The \
latency mode is an open loop only (--max is refused): --rate R (default 200 000 events/s) for --duration seconds \
(default 10; --seconds is its old name), after --warmup seconds whose events are counted but not measured; --plot \
draws both runs, --hlog logs the checkpointing one. --find-max-rate ramps --rate with the checkpointing run only. The \
job's keys are deterministic (event i has key i mod --keys): --seed is recorded, not used. The state mode \
(--state-keys) takes none of --rate, --duration, --warmup, --find-max-rate, --plot, --hlog.";

/// Options of `sluice-bench checkpoint` (its `--help` says what it makes of the shared ones).
#[derive(Debug, Clone, Args)]
#[command(after_help = SHARED_HELP)]
pub struct CheckpointArgs {
    /// The old name of --duration
    #[arg(long, hide = true, value_name = "SECONDS", conflicts_with = "duration")]
    pub seconds: Option<f64>,
    /// Distinct keys: event i has key i mod N
    #[arg(long, default_value_t = 10_000, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// Time from one checkpoint's completion to the next one's start, milliseconds
    #[arg(long, default_value_t = 1000, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub interval_ms: u64,
    /// Rounds of the latency mode, each running the job with checkpoints and without (in
    /// alternating order); latencies are merged over the rounds and each round's p99.9
    /// ratio is reported too
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub rounds: usize,
    /// Checkpoint mode: `aligned` (barriers wait behind queued records) or `unaligned`
    /// (barriers overtake them; the records are stored with the checkpoint)
    #[arg(long, default_value = "aligned", value_name = "MODE", value_parser = parse_mode)]
    pub mode: Mode,
    /// How far the watermark trails the largest event time seen, in milliseconds
    #[arg(long, default_value_t = 10, value_name = "MS")]
    pub out_of_orderness_ms: u64,
    /// The job: `count` (windowed keyed count) or `join` (window join of two keyed streams,
    /// each key's events alternating between them)
    #[arg(long, default_value = "count", value_name = "JOB", value_parser = parse_job)]
    pub job: JobKind,
    /// Latency mode: run no wake-up probe beside the rounds (a thread that sleeps 1 ms at a
    /// time and records how late it woke)
    #[arg(long)]
    pub no_wake_probe: bool,
    /// Records per batch (the pipeline's `batch_records`)
    #[arg(long, default_value_t = PipelineConfig::DEFAULT_BATCH_RECORDS, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub batch: usize,
    /// State mode: checkpoint N keys of window state (one record per key, one long
    /// window), change some of them and checkpoint again, then restore; instead of the
    /// latency runs
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub state_keys: Option<u64>,
    /// State mode: the share of keys given a second record before the second checkpoint,
    /// percent
    #[arg(long, default_value_t = 1.0, value_name = "PERCENT")]
    pub changed_percent: f64,
    #[command(flatten)]
    pub dirs: DirArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

impl CheckpointArgs {
    /// `--shards`, or one per CPU this process may run on.
    pub fn shards(&self) -> usize {
        self.run.shards.unwrap_or_else(default_shards)
    }

    /// `--rate`, or [`DEFAULT_RATE`].
    pub fn rate(&self) -> u64 {
        self.run.rate.unwrap_or(DEFAULT_RATE)
    }

    /// `--duration` (or `--seconds`), or [`DEFAULT_SECONDS`].
    pub fn seconds(&self) -> f64 {
        self.run.duration.or(self.seconds).unwrap_or(DEFAULT_SECONDS)
    }
}

/// The CPUs this process may run on: one shard each.
fn default_shards() -> usize {
    core_affinity::get_core_ids().map_or(1, |ids| ids.len().max(1))
}

/// How barriers pass operators with several inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// An input whose barrier has arrived is held until every input's has.
    Aligned,
    /// The first barrier passes at once; records still queued are stored in flight.
    Unaligned,
}

impl From<Mode> for CheckpointMode {
    fn from(mode: Mode) -> CheckpointMode {
        match mode {
            Mode::Aligned => CheckpointMode::Aligned,
            Mode::Unaligned => CheckpointMode::Unaligned,
        }
    }
}

/// The job the latency mode runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// `key_by -> window(tumbling 1 s) -> count`.
    Count,
    /// Two keyed streams (each key's events alternating between them) window-joined in
    /// tumbling 1 s windows.
    Join,
}

/// `--job`: `count` or `join`.
fn parse_job(s: &str) -> Result<JobKind, String> {
    match s {
        "count" => Ok(JobKind::Count),
        "join" => Ok(JobKind::Join),
        other => Err(format!("unknown job `{other}`: expected `count` or `join`")),
    }
}

/// `--mode`: `aligned` or `unaligned`.
fn parse_mode(s: &str) -> Result<Mode, String> {
    match s {
        "aligned" => Ok(Mode::Aligned),
        "unaligned" => Ok(Mode::Unaligned),
        other => Err(format!("unknown checkpoint mode `{other}`: expected `aligned` or `unaligned`")),
    }
}

/// Percentiles of a few durations (one per checkpoint), in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MillisSummary {
    /// Values summarized.
    pub count: usize,
    /// Median (nearest rank).
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

impl MillisSummary {
    /// The summary of `values`; all zero when empty.
    pub fn of(values: impl IntoIterator<Item = Duration>) -> Self {
        let mut ms: Vec<f64> = values.into_iter().map(|d| d.as_secs_f64() * 1e3).collect();
        if ms.is_empty() {
            return Self::default();
        }
        ms.sort_by(f64::total_cmp);
        let rank = |q: f64| ms[((q * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
        Self {
            count: ms.len(),
            p50: rank(0.5),
            p99: rank(0.99),
            max: ms[ms.len() - 1],
            mean: ms.iter().sum::<f64>() / ms.len() as f64,
        }
    }
}

/// Mean and largest of a per-checkpoint count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CountSummary {
    /// Mean over the checkpoints.
    pub mean: f64,
    /// Largest.
    pub max: u64,
}

impl CountSummary {
    fn of(values: &[u64]) -> Self {
        let mean = if values.is_empty() { 0.0 } else { values.iter().sum::<u64>() as f64 / values.len() as f64 };
        Self { mean, max: values.iter().copied().max().unwrap_or(0) }
    }
}

/// One checkpoint's figures, as the JSON report lists them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CheckpointFigures {
    /// The latency round that took it (ids start over in each round's fresh directory).
    pub round: usize,
    /// The checkpoint's id.
    pub id: u64,
    /// From the trigger to the manifest being durable, milliseconds.
    pub duration_ms: f64,
    /// The longest a shard spent between its first and last participant reporting,
    /// milliseconds.
    pub alignment_ms: f64,
    /// Bytes of state written (all parts).
    pub bytes: u64,
    /// Keyed entries written (all parts).
    pub keys: u64,
    /// In-flight records stored (unaligned mode; all parts).
    pub inflight_records: u64,
}

impl From<&CheckpointStats> for CheckpointFigures {
    fn from(s: &CheckpointStats) -> Self {
        CheckpointFigures {
            round: 0,
            id: s.id.get(),
            duration_ms: s.duration.as_secs_f64() * 1e3,
            alignment_ms: s.alignment.as_secs_f64() * 1e3,
            bytes: s.bytes,
            keys: s.keys,
            inflight_records: s.inflight_records,
        }
    }
}

/// Result of `sluice-bench checkpoint`; this is the `--json` schema. The latency fields are
/// `null` in the state mode, and `state` is `null` in the latency mode.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointReport {
    /// Always `"checkpoint"`.
    pub workload: &'static str,
    /// `--mode`.
    pub mode: Mode,
    /// `--job`: `"count"` or `"join"`.
    pub job: JobKind,
    /// `--shards`.
    pub shards: usize,
    /// `--seed`, `--duration` and `--warmup` as used.
    #[serde(flatten)]
    pub run: RunInfo,
    /// `--keys` (latency mode) or `--state-keys` (state mode).
    pub keys: u64,
    /// `--rate`, events per second offered (latency mode).
    pub rate: Option<u64>,
    /// `--interval-ms`.
    pub interval_ms: u64,
    /// Events each latency run sent.
    pub events: Option<u64>,
    /// `--rounds`: latency runs with checkpoints and as many without (0 in the state mode).
    pub rounds: usize,
    /// The 1-minute load average when the latency runs began: above the CPU count, other
    /// processes competed for the shards' cores and the figures are noise-bound.
    pub load_average: Option<f64>,
    /// Each round's `p999_ratio`.
    pub round_p999_ratio: Vec<f64>,
    /// Each round's `arrival_p999_ratio`.
    pub round_arrival_p999_ratio: Vec<f64>,
    /// Result latency with checkpoints every `interval_ms`, microseconds.
    pub latency_us: Option<LatencySummary>,
    /// Result latency of the same job with checkpoints off, microseconds.
    pub baseline_latency_us: Option<LatencySummary>,
    /// The result latency distributions, for `sluice-bench report --plot`.
    pub latency_curve: Option<crate::harness::Curve>,
    pub baseline_latency_curve: Option<crate::harness::Curve>,
    /// `latency_us.p999 / baseline_latency_us.p999`, over all rounds (the target:
    /// at most 1.5).
    pub p999_ratio: Option<f64>,
    /// Each event's latency with checkpoints, from its scheduled send time to being
    /// counted into its window, microseconds. Window results sample only the moments
    /// windows end (ten in ten seconds, each firing all keys at once, so their p99.9 is
    /// nearly their max); this samples every moment, so it shows the stalls checkpoints
    /// cause whenever they happen.
    pub arrival_latency_us: Option<LatencySummary>,
    /// The same without checkpoints, microseconds.
    pub baseline_arrival_latency_us: Option<LatencySummary>,
    /// `arrival_latency_us.p999 / baseline_arrival_latency_us.p999`.
    pub arrival_p999_ratio: Option<f64>,
    /// Events per second achieved with checkpoints.
    pub events_per_sec: Option<f64>,
    /// Events per second achieved without checkpoints.
    pub baseline_events_per_sec: Option<f64>,
    /// Checkpoints completed in the checkpointing run (including the last one, taken when
    /// the input ends).
    pub checkpoints: usize,
    /// Their durations, trigger to durable manifest, milliseconds.
    pub checkpoint_duration_ms: MillisSummary,
    /// Their alignment times (per checkpoint, the slowest shard's), milliseconds.
    pub alignment_ms: MillisSummary,
    /// Bytes of state written per checkpoint.
    pub bytes_per_checkpoint: CountSummary,
    /// Keyed entries written per checkpoint.
    pub keys_per_checkpoint: CountSummary,
    /// In-flight records stored per checkpoint (always 0 in aligned mode).
    pub inflight_records_per_checkpoint: CountSummary,
    /// Every checkpoint, in order.
    pub checkpoint_list: Vec<CheckpointFigures>,
    /// How late a 1 ms sleep woke while the latency rounds ran (the wake-up probe),
    /// microseconds: the machine's own stalls. None with `--no-wake-probe`, in the state
    /// mode and with `--find-max-rate`.
    pub machine_wake_latency_us: Option<LatencySummary>,
    /// The state mode's figures.
    pub state: Option<StateReport>,
    /// `--find-max-rate`: the bound, every step, and the highest rate within it.
    #[serde(flatten)]
    pub search: RateSearch,
}

/// Runs the workload as `args` say.
///
/// # Errors
///
/// Bad options, a pipeline that failed, results that do not match the job, or a run in
/// which no checkpoint completed.
pub fn run(args: &CheckpointArgs) -> anyhow::Result<CheckpointReport> {
    let work = args.dirs.work_dir("checkpoint").context("creating the work directory")?;
    let opts = &args.run;
    let _metrics = opts.serve_metrics()?;
    let mut report = CheckpointReport::empty(args);
    if let Some(keys) = args.state_keys {
        return state_mode(args, work.path(), keys, report);
    }

    ensure!(
        !opts.max,
        "the checkpoint workload measures result latency at an offered rate (open loop): give --rate, not --max"
    );
    let seconds = args.seconds();
    ensure!(seconds.is_finite() && seconds > 0.0, "--duration must be positive");
    report.run.duration = Some(seconds);
    report.load_average = load_average();
    if opts.find_max_rate {
        return latency::find_max_rate(args, work.path(), seconds, report);
    }
    latency::run(args, work.path(), seconds, report)
}

/// The state mode (`--state-keys keys`): the checkpoints and the restore of `keys` keys of
/// state, in a fresh directory under `work`.
fn state_mode(
    args: &CheckpointArgs,
    work: &std::path::Path,
    keys: u64,
    mut report: CheckpointReport,
) -> anyhow::Result<CheckpointReport> {
    let opts = &args.run;
    ensure!(args.job == JobKind::Count, "the state mode (--state-keys) measures window state: it takes no --job join");
    ensure!(
        opts.rate.is_none()
            && opts.duration.is_none()
            && args.seconds.is_none()
            && opts.warmup == 0.0
            && !opts.find_max_rate
            && !opts.wants_latency_files(),
        "the state mode (--state-keys) times checkpoints and a restore of a fixed state: it takes none of \
         --rate, --duration, --warmup, --find-max-rate, --plot, --hlog"
    );
    ensure!(
        args.changed_percent.is_finite() && (0.0..=100.0).contains(&args.changed_percent),
        "--changed-percent must be between 0 and 100"
    );
    let dir = fresh_subdir(work, "state-checkpoints")?;
    let state = state::run(&state::StateJob {
        keys,
        changed: (keys as f64 * args.changed_percent / 100.0).round() as u64,
        mode: args.mode.into(),
        shards: report.shards,
        batch: args.batch,
        interval: Duration::from_millis(args.interval_ms),
        dir,
    })?;
    report.keys = keys;
    report.set_checkpoints(&state.checkpoints.iter().map(|s| (0, *s)).collect::<Vec<_>>());
    report.state = Some(state.report);
    Ok(report)
}

impl CheckpointReport {
    /// The report of `args` before anything ran: the options, and no figures.
    fn empty(args: &CheckpointArgs) -> CheckpointReport {
        let opts = &args.run;
        CheckpointReport {
            workload: "checkpoint",
            mode: args.mode,
            job: args.job,
            shards: args.shards(),
            run: opts.info(None),
            keys: args.keys,
            rate: None,
            interval_ms: args.interval_ms,
            events: None,
            rounds: 0,
            load_average: None,
            round_p999_ratio: Vec::new(),
            round_arrival_p999_ratio: Vec::new(),
            latency_us: None,
            baseline_latency_us: None,
            latency_curve: None,
            baseline_latency_curve: None,
            p999_ratio: None,
            arrival_latency_us: None,
            baseline_arrival_latency_us: None,
            arrival_p999_ratio: None,
            events_per_sec: None,
            baseline_events_per_sec: None,
            checkpoints: 0,
            checkpoint_duration_ms: MillisSummary::default(),
            alignment_ms: MillisSummary::default(),
            bytes_per_checkpoint: CountSummary::default(),
            keys_per_checkpoint: CountSummary::default(),
            inflight_records_per_checkpoint: CountSummary::default(),
            checkpoint_list: Vec::new(),
            machine_wake_latency_us: None,
            state: None,
            search: RateSearch::default(),
        }
    }
}

/// Creates `parent/name`, which must not exist yet (a `--dir` reused from an earlier run
/// would otherwise restore that run's checkpoints).
fn fresh_subdir(parent: &std::path::Path, name: &str) -> anyhow::Result<std::path::PathBuf> {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).with_context(|| {
        format!("creating {} (it must not exist: checkpoints found there would be restored)", dir.display())
    })?;
    Ok(dir)
}

impl CheckpointReport {
    fn set_checkpoints(&mut self, rounds: &[(usize, CheckpointStats)]) {
        let stats: Vec<CheckpointStats> = rounds.iter().map(|(_, s)| *s).collect();
        self.checkpoints = stats.len();
        self.checkpoint_duration_ms = MillisSummary::of(stats.iter().map(|s| s.duration));
        self.alignment_ms = MillisSummary::of(stats.iter().map(|s| s.alignment));
        self.bytes_per_checkpoint = CountSummary::of(&stats.iter().map(|s| s.bytes).collect::<Vec<_>>());
        self.keys_per_checkpoint = CountSummary::of(&stats.iter().map(|s| s.keys).collect::<Vec<_>>());
        self.inflight_records_per_checkpoint =
            CountSummary::of(&stats.iter().map(|s| s.inflight_records).collect::<Vec<_>>());
        self.checkpoint_list =
            rounds.iter().map(|(round, s)| CheckpointFigures { round: *round, ..CheckpointFigures::from(s) }).collect();
    }

    /// The human-readable form of the report.
    pub fn table(&self) -> Table {
        let Self { shards, keys, interval_ms, .. } = self;
        let mode = CheckpointMode::from(self.mode);
        let mut table = match (&self.state, self.rate) {
            (Some(_), _) => Table::titled(format!(
                "checkpoint state: {keys} keys of window state (one record each, one window), {shards} shards, \
                 {mode}, incremental snapshots"
            )),
            (None, rate) => Table::titled(format!(
                "checkpoint: {}, {shards} shards, {keys} keys, {} events/s offered, \
                 1 s tumbling windows; {mode} checkpoints every {interval_ms} ms vs none, {} round(s), {}",
                match self.job {
                    JobKind::Count => "windowed keyed count",
                    JobKind::Join => "window join of two keyed streams",
                },
                rate.unwrap_or(0),
                self.rounds,
                self.run.describe()
            )),
        };
        if let (Some(with), Some(without)) = (&self.latency_us, &self.baseline_latency_us) {
            table.latency_rows("latency, checkpoints", with);
            table.latency_rows("latency, no checkpoints", without);
            if let Some(ratio) = self.p999_ratio {
                table.row("p99.9 with / without", format!("{ratio:.2}"), "x (target <= 1.5)");
            }
            if self.round_p999_ratio.len() > 1 {
                table.row("  per round", ratios(&self.round_p999_ratio), "x");
            }
        }
        if let (Some(with), Some(without)) = (&self.arrival_latency_us, &self.baseline_arrival_latency_us) {
            table.latency_rows("event arrival, checkpoints", with);
            table.latency_rows("event arrival, no checkpoints", without);
            if let Some(ratio) = self.arrival_p999_ratio {
                table.row("arrival p99.9 with / without", format!("{ratio:.2}"), "x");
            }
            if self.round_arrival_p999_ratio.len() > 1 {
                table.row("  per round", ratios(&self.round_arrival_p999_ratio), "x");
            }
        }
        if let (Some(a), Some(b)) = (self.events_per_sec, self.baseline_events_per_sec) {
            table.row("achieved (with / without)", format!("{a:.0} / {b:.0}"), "events/s");
        }
        if let Some(wake) = &self.machine_wake_latency_us {
            table.latency_rows(crate::harness::WAKE_ROWS, wake);
        }
        if let Some(load) = self.load_average {
            table.row("load average at start", format!("{load:.2}"), "(1 min; noisy above the CPU count)");
        }
        table.row("checkpoints completed", self.checkpoints, "");
        let d = &self.checkpoint_duration_ms;
        table.row("checkpoint duration p50/p99/max", format!("{:.1} / {:.1} / {:.1}", d.p50, d.p99, d.max), "ms");
        let a = &self.alignment_ms;
        table.row("alignment p50/p99/max", format!("{:.2} / {:.2} / {:.2}", a.p50, a.p99, a.max), "ms");
        let b = &self.bytes_per_checkpoint;
        table.row("bytes per checkpoint mean/max", format!("{:.0} / {}", b.mean, b.max), "B");
        let k = &self.keys_per_checkpoint;
        table.row("keys per checkpoint mean/max", format!("{:.0} / {}", k.mean, k.max), "");
        let f = &self.inflight_records_per_checkpoint;
        table.row("in-flight records per checkpoint mean/max", format!("{:.0} / {}", f.mean, f.max), "");
        if let Some(s) = &self.state {
            s.rows(&mut table);
        }
        self.search.rows(&mut table, "events/s");
        table
    }
}

/// `1.20 0.95 ...`
fn ratios(values: &[f64]) -> String {
    values.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" ")
}

/// The 1-minute load average (`/proc/loadavg`).
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let ms = |v: &[u64]| MillisSummary::of(v.iter().map(|&m| Duration::from_millis(m)));
        let s = ms(&[5, 1, 3, 2, 4]);
        assert_eq!((s.count, s.p50, s.p99, s.max, s.mean), (5, 3.0, 5.0, 5.0, 3.0));
        assert_eq!(ms(&[]), MillisSummary::default());
        assert_eq!(ms(&[7]).p50, 7.0);
        let c = CountSummary::of(&[10, 20]);
        assert_eq!((c.mean, c.max), (15.0, 20));
    }

    #[test]
    fn both_modes_parse_and_name_the_engine_mode() {
        assert_eq!(parse_mode("aligned"), Ok(Mode::Aligned));
        assert_eq!(parse_mode("unaligned"), Ok(Mode::Unaligned));
        assert_eq!(CheckpointMode::from(Mode::Unaligned), CheckpointMode::Unaligned);
        assert_eq!(CheckpointMode::from(Mode::Aligned), CheckpointMode::Aligned);
        assert!(parse_mode("Aligned").unwrap_err().contains("expected `aligned` or `unaligned`"));
        assert_eq!((parse_job("count"), parse_job("join")), (Ok(JobKind::Count), Ok(JobKind::Join)));
        assert!(parse_job("joins").unwrap_err().contains("expected `count` or `join`"));
    }
}
