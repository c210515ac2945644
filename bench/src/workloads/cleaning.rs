//! `sluice-bench cleaning`: append latency while the log cleaner compacts the partition,
//! against the same appends with nothing to clean.
//!
//! Each of `--rounds` rounds runs two phases, first without the cleaner, then with it,
//! each on an engine of its own in a fresh data directory, into a one-partition topic of
//! small segments (`--segment-bytes`, 1 MiB): a producer on the shard that owns the
//! partition sends `--records` records of `--record-bytes` over `--keys` keys at `--rate`
//! records per second, open loop (as `log --rate` does: it wakes at most every
//! `--send-interval-us` and sends every record due by then as one append). Each record's
//! latency runs from its *scheduled* send time to its append's acknowledgement, so a stall
//! is charged to every record it delayed.
//!
//! - **with the cleaner**: `cleanup=compact`, `min_cleanable_dirty_ratio` 0 and the
//!   engine's `retention_check` every `--retention-check-ms` (100): every check after a
//!   roll compacts the closed segments, so compaction runs all through the phase, on the
//!   shard that serves the appends (in its own task queue, 100 shares to the data path's
//!   1000). A phase in which no compaction ran fails the run: it measured nothing.
//! - **without**: `cleanup=delete`, no retention, `retention_check` one hour.
//!
//! The report has both phases' latencies merged over the rounds, the ratio of their p99
//! (the target: at most 1.5), each round's ratio and their median, and what the
//! cleaner did (`CleanerStats`). Beside each phase a [`WakeProbe`] thread sleeps 1 ms at a
//! time and reports how late it woke: the machine's floor under the figures.
//!
//! Under `--fsync interval:MS` (the default, 5 ms) an append waits for room among the
//! writes in flight, and the interval's fsync holds those writes, so a slow fsync of the
//! device holds the appends behind it, in either phase: on a
//! shared virtual disk such stalls (tens to hundreds of milliseconds, which the wake-up
//! probe does not see) can decide a phase's p99 on their own. `--fsync never` leaves the
//! device's sync latency out and compares the CPU and I/O the cleaner takes from the
//! appends.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clap::{Args, builder::RangedU64ValueParser};
use futures_lite::future::block_on;
use serde::Serialize;
use sluice_engine::{CleanerStats, Engine, EngineConfig, EngineHandle, OwnedRecord, TopicConfig};
use sluice_io::{BatchMeta, CleanupPolicy, FsyncPolicy, PartitionId, Timestamp};

use super::DirArgs;
use crate::harness::{
    Curve, LatencyRecorder, LatencySummary, RunArgs, RunInfo, Table, WAKE_ROWS, WakeProbe, fill_seeded,
};

/// `--rate` when not given, records per second: well within what `log --rate` sustains
/// on this machine (750 000 records/s within a 50 ms p99 on two shards, tuning.md).
pub const DEFAULT_RATE: u64 = 50_000;
/// `--shards` when not given.
pub const DEFAULT_SHARDS: usize = 2;
/// `retention_check` of the phases without the cleaner.
pub const IDLE_RETENTION_CHECK: Duration = Duration::from_secs(3600);

/// The topic each phase writes.
const TOPIC: &str = "cleaning";

/// What `cleaning` makes of the shared options (`--help`).
const SHARED_HELP: &str = "Shared options here: --shards defaults to 2. An open loop only (--max and \
--find-max-rate are refused): --rate R (default 50 000 records/s) for --records records or --duration seconds per \
phase, after --warmup seconds of each phase whose records are sent but not measured; --plot draws both phases' \
latencies merged over the rounds, --hlog logs the cleaner phases' (intervals of several rounds add up by position). \
--seed draws the record payloads.";

/// Options of `sluice-bench cleaning` (its `--help` says what it makes of the shared ones).
#[derive(Debug, Clone, Args)]
#[command(after_help = SHARED_HELP)]
pub struct CleaningArgs {
    /// Records each phase sends (measured ones, after the warm-up's)
    #[arg(long, default_value_t = 200_000, value_name = "N", conflicts_with = "duration",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub records: u64,
    /// Value bytes per record
    #[arg(long, default_value_t = 100, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub record_bytes: usize,
    /// Distinct keys: record i has key i mod N (what compaction keeps, one record per key)
    #[arg(long, default_value_t = 1000, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// Rounds, each a phase without the cleaner and then one with it
    #[arg(long, default_value_t = 3, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub rounds: usize,
    /// Segment size before a roll; compaction cleans closed segments only
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
    pub segment_bytes: u64,
    /// The engine's retention_check in the phases with the cleaner, milliseconds
    #[arg(long, default_value_t = 100, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub retention_check_ms: u64,
    /// The producer wakes at most once per this many microseconds and sends every record
    /// due by then as one append (0: a wake-up for every record)
    #[arg(long, default_value_t = 100, value_name = "US")]
    pub send_interval_us: u64,
    /// When appends are synced: `always`, `interval:MS` or `never`
    #[arg(long, default_value = "interval:5", value_name = "POLICY")]
    pub fsync: FsyncPolicy,
    /// Run no wake-up probe beside the phases
    #[arg(long)]
    pub no_wake_probe: bool,
    #[command(flatten)]
    pub dirs: DirArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

impl CleaningArgs {
    /// `--shards`, or [`DEFAULT_SHARDS`].
    pub fn shards(&self) -> usize {
        self.run.shards_or(DEFAULT_SHARDS)
    }

    /// `--rate`, or [`DEFAULT_RATE`].
    pub fn rate(&self) -> u64 {
        self.run.rate.unwrap_or(DEFAULT_RATE)
    }

    /// Measured records per phase: `--records`, or `--rate` times `--duration`.
    pub fn measured_records(&self) -> u64 {
        match self.run.duration {
            Some(seconds) => ((self.rate() as f64 * seconds) as u64).max(1),
            None => self.records,
        }
    }
}

/// One phase's figures.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseFigures {
    /// The round, from 0.
    pub round: usize,
    /// Whether the cleaner compacted (`cleanup=compact`) or had nothing to do.
    pub cleaner: bool,
    /// Append latency from the scheduled send time, microseconds.
    pub latency_us: LatencySummary,
    /// Measured records per second, from the first measured record's schedule to the last
    /// acknowledgement.
    pub records_per_sec: f64,
    /// How late a thread sleeping 1 ms at a time woke during the phase, microseconds; None
    /// with `--no-wake-probe`.
    pub machine_wake_latency_us: Option<LatencySummary>,
    /// Compactions the cleaner ran.
    pub compactions: u64,
    /// Records compaction removed.
    pub records_removed: u64,
    /// Bytes retention and compaction gave back.
    pub bytes_reclaimed: u64,
    /// The cleaner's passes over a partition (the internal topic's included).
    pub cleaner_passes: u64,
    /// Passes that failed.
    pub cleaner_failures: u64,
}

/// Result of `sluice-bench cleaning`; the `--json` schema. Latencies in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct CleaningReport {
    /// Always `"cleaning"`.
    pub workload: &'static str,
    /// Engine shards.
    pub shards: usize,
    /// `--seed`, `--duration` and `--warmup` as used.
    #[serde(flatten)]
    pub run: RunInfo,
    /// Offered rate, records per second.
    pub rate: u64,
    /// Measured records per phase.
    pub records: u64,
    /// Value bytes per record.
    pub record_bytes: usize,
    /// Distinct keys.
    pub keys: u64,
    /// Segment size, bytes.
    pub segment_bytes: u64,
    /// The engine's `retention_check` with the cleaner, milliseconds.
    pub retention_check_ms: u64,
    /// Rounds (each a phase without the cleaner and one with it).
    pub rounds: usize,
    /// The topic's fsync policy.
    #[serde(serialize_with = "crate::harness::serialize_display")]
    pub fsync: FsyncPolicy,
    /// The least time between two wake-ups of the producer, microseconds.
    pub send_interval_us: u64,
    /// The 1-minute load average when the run started.
    pub load_average: Option<f64>,
    /// Append latency without the cleaner, merged over the rounds.
    pub without_cleaner_latency_us: LatencySummary,
    /// Append latency with the cleaner compacting, merged over the rounds.
    pub with_cleaner_latency_us: LatencySummary,
    /// `with_cleaner_latency_us.p99 / without_cleaner_latency_us.p99` (the issue's
    /// target: at most 1.5).
    pub p99_ratio: f64,
    /// Each round's p99 ratio.
    pub round_p99_ratio: Vec<f64>,
    /// The median of `round_p99_ratio` (the mean of the middle two for an even count): one
    /// phase's stall (a slow fsync of the shared disk shows in either phase) moves it less
    /// than it moves `p99_ratio`.
    pub median_round_p99_ratio: f64,
    /// Measured records per second without the cleaner, over all its phases.
    pub without_cleaner_records_per_sec: f64,
    /// Measured records per second with the cleaner, over all its phases.
    pub with_cleaner_records_per_sec: f64,
    /// Compactions in the phases with the cleaner.
    pub compactions: u64,
    /// Records those compactions removed.
    pub records_removed: u64,
    /// Bytes the cleaner gave back in the phases with it.
    pub bytes_reclaimed: u64,
    /// Failed cleaner passes, all phases.
    pub cleaner_failures: u64,
    /// Every phase, in the order run.
    pub phases: Vec<PhaseFigures>,
    /// Latency with the cleaner, as a curve for `sluice-bench report --plot`.
    pub with_cleaner_latency_curve: Curve,
    /// Latency without it, likewise.
    pub without_cleaner_latency_curve: Curve,
}

/// What one phase hands back.
struct PhaseOutcome {
    figures: PhaseFigures,
    latency: LatencyRecorder,
    measured_time: Duration,
}

/// Runs the cleaning workload in `--dir` (or a fresh temporary directory).
///
/// # Errors
///
/// Refused options, an engine that failed, appends that did not all land, or a phase
/// with the cleaner in which no compaction ran.
pub fn run(args: &CleaningArgs) -> anyhow::Result<CleaningReport> {
    ensure!(!args.run.max, "cleaning is an open loop only: --max is refused");
    ensure!(!args.run.find_max_rate, "cleaning measures latency at one --rate: --find-max-rate is refused");
    let work_dir = args.dirs.work_dir("cleaning")?;
    let _metrics = args.run.serve_metrics()?;
    if args.dirs.keep {
        eprintln!("keeping data in {}", work_dir.path().display());
    }
    let load_average = super::load_average();
    let (rate, records) = (args.rate(), args.measured_records());
    let mut latency = (LatencyRecorder::new(), LatencyRecorder::new());
    let mut intervals: Option<LatencyRecorder> = None;
    let mut time = (Duration::ZERO, Duration::ZERO);
    let (mut phases, mut round_p99_ratio) = (Vec::new(), Vec::new());
    for round in 0..args.rounds {
        let mut p99 = [0, 0];
        for cleaner in [false, true] {
            let dir = work_dir.path().join(format!("round-{round}-{}", if cleaner { "with" } else { "without" }));
            let what = format!("round {round}, {} the cleaner", if cleaner { "with" } else { "without" });
            let outcome = run_phase(args, &dir, round, cleaner).with_context(|| what.clone())?;
            if !args.dirs.keep {
                std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
            }
            ensure!(!cleaner || outcome.figures.compactions > 0, "{what}: no compaction ran, so nothing was measured");
            p99[usize::from(cleaner)] = outcome.figures.latency_us.p99;
            let (merged, spent) = if cleaner { (&mut latency.0, &mut time.0) } else { (&mut latency.1, &mut time.1) };
            merged.merge(&outcome.latency);
            *spent += outcome.measured_time;
            if cleaner {
                match &mut intervals {
                    Some(all) => all.merge(&outcome.latency),
                    None => intervals = Some(outcome.latency),
                }
            }
            phases.push(outcome.figures);
        }
        round_p99_ratio.push(p99[1] as f64 / p99[0].max(1) as f64);
    }
    let label = |with: &str| format!("append, {with}, {rate} records/s, {} keys", args.keys);
    let with_curve = latency.0.curve(&label("cleaner compacting"));
    let without_curve = latency.1.curve(&label("no cleaning"));
    if let Some(path) = &args.run.plot {
        let title = "append latency with and without the cleaner";
        crate::harness::write_percentile_plot(path, title, &[with_curve.clone(), without_curve.clone()])?;
    }
    if let (Some(path), Some(recorder)) = (&args.run.hlog, &intervals) {
        recorder.write_hlog(path)?;
    }
    let (with, without) = (latency.0.summary(), latency.1.summary());
    let cleaned = |f: fn(&PhaseFigures) -> u64| phases.iter().filter(|p| p.cleaner).map(f).sum::<u64>();
    let per_sec = |spent: Duration| (records * args.rounds as u64) as f64 / spent.as_secs_f64().max(1e-9);
    Ok(CleaningReport {
        workload: "cleaning",
        shards: args.shards(),
        run: args.run.info(args.run.duration.or(Some(records as f64 / rate as f64))),
        rate,
        records,
        record_bytes: args.record_bytes,
        keys: args.keys,
        segment_bytes: args.segment_bytes,
        retention_check_ms: args.retention_check_ms,
        rounds: args.rounds,
        fsync: args.fsync,
        send_interval_us: args.send_interval_us,
        load_average,
        without_cleaner_latency_us: without,
        with_cleaner_latency_us: with,
        p99_ratio: with.p99 as f64 / without.p99.max(1) as f64,
        median_round_p99_ratio: crate::harness::median(&round_p99_ratio),
        round_p99_ratio,
        without_cleaner_records_per_sec: per_sec(time.1),
        with_cleaner_records_per_sec: per_sec(time.0),
        compactions: cleaned(|p| p.compactions),
        records_removed: cleaned(|p| p.records_removed),
        bytes_reclaimed: cleaned(|p| p.bytes_reclaimed),
        cleaner_failures: phases.iter().map(|p| p.cleaner_failures).sum(),
        phases,
        with_cleaner_latency_curve: with_curve,
        without_cleaner_latency_curve: without_curve,
    })
}

/// One phase on an engine of its own in `dir` (which must not exist yet).
fn run_phase(args: &CleaningArgs, dir: &Path, round: usize, cleaner: bool) -> anyhow::Result<PhaseOutcome> {
    ensure!(!dir.exists(), "{} exists: each phase starts from a fresh data directory", dir.display());
    let (rate, measured) = (args.rate(), args.measured_records());
    let warmup_records = (rate as f64 * args.run.warmup) as u64;
    let records = warmup_records + measured;
    let retention_check = if cleaner { Duration::from_millis(args.retention_check_ms) } else { IDLE_RETENTION_CHECK };
    let config = EngineConfig { shards: Some(args.shards()), retention_check, ..EngineConfig::new(dir) };
    let engine = block_on(Engine::open(config)).context("starting the engine")?;
    let handle = engine.handle();
    let metrics = handle.metric_source();
    crate::harness::metrics::register(&metrics);
    let topic = TopicConfig {
        fsync: args.fsync,
        segment_bytes: args.segment_bytes,
        linger_ms: 0,
        retention_ms: None,
        retention_bytes: None,
        cleanup: if cleaner { CleanupPolicy::Compact } else { CleanupPolicy::Delete },
        min_cleanable_dirty_ratio: if cleaner { 0.0 } else { TopicConfig::default().min_cleanable_dirty_ratio },
        ..TopicConfig::default()
    };
    block_on(handle.create_topic(TOPIC, 1, Some(topic))).context("creating the topic")?;
    let owner = handle.describe_topic(TOPIC).context("describing the topic")?.shards[0] as usize;
    let mut payload = vec![0u8; args.record_bytes];
    fill_seeded(args.run.seed, &mut payload);
    let probe = if args.no_wake_probe { None } else { Some(WakeProbe::start().context("starting the wake-up probe")?) };
    let plan = Schedule {
        epoch: Instant::now() + Duration::from_millis(50),
        interval: Duration::from_secs_f64(1.0 / rate as f64),
        records,
        warmup: Duration::from_secs_f64(args.run.warmup),
        keys: args.keys,
        payload,
        send_interval: Duration::from_micros(args.send_interval_us),
    };
    let h = handle.clone();
    let (latency, sent_in) = block_on(handle.run_on(owner, move || produce(h, plan)))??;
    let wake = probe.map(WakeProbe::finish);
    let (_, end) = block_on(handle.offsets(TOPIC, PartitionId(0))).context("reading the partition's end")?;
    ensure!(end.0 == records, "the partition ends at offset {} after {records} records", end.0);
    let stats = block_on(handle.cleaner_stats()).context("reading the cleaner's figures")?;
    block_on(engine.shutdown()).context("shutting the engine down")?;
    let sum = |f: fn(&CleanerStats) -> u64| stats.iter().map(f).sum::<u64>();
    let measured_time = sent_in.saturating_sub(Duration::from_secs_f64(args.run.warmup));
    let figures = PhaseFigures {
        round,
        cleaner,
        latency_us: latency.summary(),
        records_per_sec: measured as f64 / measured_time.as_secs_f64().max(1e-9),
        machine_wake_latency_us: wake,
        compactions: sum(|s| s.compactions),
        records_removed: sum(|s| s.records_removed),
        bytes_reclaimed: sum(|s| s.bytes_reclaimed),
        cleaner_passes: sum(|s| s.passes),
        cleaner_failures: sum(|s| s.failures),
    };
    Ok(PhaseOutcome { figures, latency, measured_time })
}

/// The producer's schedule: record `i` is due `i * interval` after `epoch`.
struct Schedule {
    epoch: Instant,
    interval: Duration,
    records: u64,
    /// Records due before this are sent but not measured.
    warmup: Duration,
    keys: u64,
    payload: Vec<u8>,
    send_interval: Duration,
}

impl Schedule {
    /// When record `i` is due, from the epoch.
    fn due(&self, i: u64) -> Duration {
        self.interval.mul_f64(i as f64)
    }
}

/// Sends each record at its scheduled time without waiting for earlier appends (open
/// loop), waking at most once per send interval and sending every record due by then as
/// one append. Resolves to each measured record's latency, from its scheduled time to its
/// append's acknowledgement, and the time from the epoch to the last acknowledgement.
async fn produce(handle: EngineHandle, plan: Schedule) -> anyhow::Result<(LatencyRecorder, Duration)> {
    let plan = Rc::new(plan);
    let latency = Rc::new(RefCell::new(LatencyRecorder::with_intervals(plan.epoch, Duration::from_secs(1))));
    let mut tasks = Vec::new();
    let (mut i, mut woke) = (0, None::<Instant>);
    while i < plan.records {
        let wake = woke.map_or(plan.epoch + plan.due(i), |w| (plan.epoch + plan.due(i)).max(w + plan.send_interval));
        let now = Instant::now();
        if wake > now {
            glommio::timer::sleep(wake - now).await;
        }
        woke = Some(wake);
        let now = Instant::now();
        let first = i;
        let mut batch = Vec::new();
        while i < plan.records && (batch.is_empty() || plan.epoch + plan.due(i) <= now) {
            let key = (i % plan.keys).to_be_bytes().to_vec();
            batch.push(OwnedRecord::new(Some(key), plan.payload.clone(), Timestamp::now()));
            i += 1;
        }
        let (handle, plan, latency, last) = (handle.clone(), plan.clone(), latency.clone(), i);
        tasks.push(glommio::spawn_local(async move {
            handle.append(TOPIC, PartitionId(0), batch, BatchMeta::default()).await?;
            let done = Instant::now();
            let mut latency = latency.borrow_mut();
            for j in (first..last).filter(|&j| plan.due(j) >= plan.warmup) {
                latency.record_at(done, done.saturating_duration_since(plan.epoch + plan.due(j)));
            }
            Ok::<_, sluice_engine::EngineError>(())
        }));
    }
    for t in tasks {
        t.await.context("an append")?;
    }
    let sent_in = plan.epoch.elapsed();
    let latency = Rc::try_unwrap(latency).map_err(|_| anyhow::anyhow!("appends still running"))?.into_inner();
    Ok((latency, sent_in))
}

impl CleaningReport {
    /// The human-readable form of the report.
    pub fn table(&self) -> Table {
        let mut table = Table::titled(format!(
            "cleaning: {} shards, 1 partition, {} records/s offered, {} records x {} B over {} keys per phase, \
             {} KiB segments, fsync {}; compaction (dirty ratio 0, checked every {} ms) vs none, {} round(s), {}",
            self.shards,
            self.rate,
            self.records,
            self.record_bytes,
            self.keys,
            self.segment_bytes >> 10,
            self.fsync,
            self.retention_check_ms,
            self.rounds,
            self.run.describe()
        ));
        if let Some(load) = self.load_average {
            table.row("load average at start", format!("{load:.2}"), "(1 min; noisy above the CPU count)");
        }
        table.latency_rows("append latency, no cleaner", &self.without_cleaner_latency_us);
        table.latency_rows("append latency, cleaner", &self.with_cleaner_latency_us);
        table.row("p99 with / without", format!("{:.2}", self.p99_ratio), "x (target <= 1.5)");
        if self.round_p99_ratio.len() > 1 {
            let ratios: Vec<String> = self.round_p99_ratio.iter().map(|r| format!("{r:.2}")).collect();
            table.row("  per round", ratios.join(" "), "x");
            table.row("  median round", format!("{:.2}", self.median_round_p99_ratio), "x");
        }
        let rates = format!("{:.0} / {:.0}", self.with_cleaner_records_per_sec, self.without_cleaner_records_per_sec);
        table.row("achieved (with / without)", rates, "records/s");
        table.row("compactions (cleaner phases)", self.compactions, "");
        table.row("records removed", self.records_removed, "");
        table.row("bytes reclaimed", format!("{:.1}", self.bytes_reclaimed as f64 / 1e6), "MB");
        if self.cleaner_failures > 0 {
            table.row("failed cleaner passes", self.cleaner_failures, "");
        }
        // Each phase's own figures (the whole summaries are in the JSON's `phases`).
        for p in &self.phases {
            let name = format!("round {} {}", p.round, if p.cleaner { "cleaner" } else { "no cleaner" });
            table.row(
                format!("{name}: append p99 / max"),
                format!("{} / {}", p.latency_us.p99, p.latency_us.max),
                "us",
            );
            if let Some(w) = &p.machine_wake_latency_us {
                table.row(format!("{name}: {WAKE_ROWS} p99.9 / max"), format!("{} / {}", w.p999, w.max), "us");
            }
        }
        table
    }
}
