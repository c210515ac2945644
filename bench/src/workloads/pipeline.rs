//! `sluice-bench pipeline`: the windowed keyed count through sluice's processor, against
//! the same job written with the `timely` dataflow crate.
//!
//! [The job](super::pipeline_job): `--events N` events `i`, key `i mod 10 000`, event time
//! `i` microseconds (a million events per second of event time, so each one-second
//! tumbling window counts 100 events per key), bounded-out-of-orderness watermarks, and a
//! counting sink that checks every result. The sluice side ([`pipeline_sluice`]) runs on
//! `--shards` pinned shards; with `--compare timely` the baseline ([`pipeline_timely`])
//! runs on as many timely workers pinned to the same CPUs, and with `--compare bare` the
//! hand-written single-threaded loop ([`sluice_bench_bare`]) on the first CPU, round after
//! round with sluice, so all see the same spells of noise; `--scaling` also runs sluice at
//! one shard in each round and reports `scaling_efficiency`
//! ([`Scaling`](crate::harness::Scaling)). Each side's figure is its best round.
//!
//! With `--rate R` the run measures latency instead: an open-loop source sends event `i` at
//! `i / R` seconds (its event time too), and each window result's latency runs from the
//! scheduled send time of its window's last event to the result reaching the sink. The
//! baseline has no latency mode.
//!
//! Without `--rate`, the throughput rounds are followed by a latency phase of
//! `--latency-seconds` (default 3, 0 to skip) at half the best rate just measured, so the
//! default run reports both what the pipeline sustains and its result latency when not
//! saturated.

use anyhow::{Context, ensure};
use clap::{Args, ValueEnum, builder::RangedU64ValueParser};
use serde::Serialize;
use sluice_engine::dataflow::PipelineConfig;

use super::pipeline_procs::{self, DEFAULT_PROCESSES_EVENTS, ProcessesArgs, ProcessesReport};
use super::{
    pipeline_job::{Job, Split},
    pipeline_sluice, pipeline_timely,
};
use crate::harness::{
    Curve, LatencyRecorder, LatencySummary, RateSearch, RunArgs, RunInfo, Scaling, Table, WAKE_ROWS, WakeProbe,
};

/// What `pipeline` makes of the shared options (`--help`).
const SHARED_HELP: &str = "Shared options here: --shards defaults to one per CPU this process may run on. Without \
--rate the run is the closed loop (--max): --rounds throughput rounds of --events events (or of --duration seconds \
each), after one discarded round of --warmup seconds, then a latency phase of --latency-seconds at half the best rate \
(its latencies go to --plot and --hlog); --compare and --scaling run their sides in each throughput round. --rate R is the open loop: R events/s for --events events or --duration \
seconds, after --warmup seconds whose events are counted but not measured. --find-max-rate ramps --rate (default \
100 000) with steps of --duration (default --latency-seconds). The job is deterministic (event i has key i mod \
10 000, and every result is checked against that closed form): --seed is recorded, not used.";

/// Options of `sluice-bench pipeline` (its `--help` says what it makes of the shared ones).
#[derive(Debug, Clone, Args)]
#[command(after_help = SHARED_HELP)]
pub struct PipelineArgs {
    /// Events to generate (per round, and per --rate run unless --duration); the default
    /// makes each throughput round run for seconds (about 5 s at one shard here)
    /// [default: 1000000000; with --processes 5000000]
    #[arg(long, value_name = "N", conflicts_with = "duration", value_parser = clap::value_parser!(u64).range(1..))]
    pub events: Option<u64>,
    /// How far the watermark trails the largest event time seen, in milliseconds
    #[arg(long, default_value_t = 10, value_name = "MS")]
    pub out_of_orderness_ms: u64,
    /// Records per batch: the pipeline's `batch_records`, and the timely input's chunk
    /// between two `advance_to`s
    #[arg(long, default_value_t = PipelineConfig::DEFAULT_BATCH_RECORDS, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub batch: usize,
    /// Leave sluice's shards unpinned (`PipelineConfig::pin = false`): the scheduler may
    /// move them between CPUs
    #[arg(long)]
    pub no_pin: bool,
    /// sluice counts in two phases (`Stream::combine_by`): each shard counts its own
    /// events per key and window and sends only those partial counts to the key's shard,
    /// which adds them up (Flink's local-global aggregation). `--compare timely` runs
    /// timely's job in two phases too; the bare loop has no exchange to save
    #[arg(long)]
    pub two_phase: bool,
    /// How long a busy shard holds its latest watermark back from the other shards
    /// (`PipelineConfig::watermark_interval`), in microseconds; 0 sends every advance
    /// [default: the pipeline's, 0]
    #[arg(long, value_name = "US")]
    pub watermark_interval_us: Option<u64>,
    /// Throughput mode: how the events are divided between the shards (and timely's
    /// workers): `by-residue`, shard `s` of `n` making the events `i % n == s` (the engine's
    /// `Generator`; with 10 000 keys, each shard's events then carry 10 000 / n of them), or
    /// `on-demand`, runs of 65 536 events claimed from one shared counter by whichever shard
    /// asks next (the engine's `SharedGenerator`: a shard on a slower CPU makes fewer, and
    /// every shard's events carry every key) [default: by-residue]
    #[arg(long, value_enum, value_name = "SPLIT")]
    pub split: Option<SplitArg>,
    /// Rounds in the throughput mode, each running sluice and then the baseline; each
    /// side's best round is its figure
    #[arg(long, default_value_t = 3, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub rounds: usize,
    /// Also run the same job with these baselines, side by side in each round (throughput
    /// mode only): `timely`, `bare`, or both (`timely,bare`, or the flag repeated)
    #[arg(long, value_name = "BASELINE", value_delimiter = ',')]
    pub compare: Vec<Baseline>,
    /// Also run sluice at one shard in each throughput round, alternating with the
    /// --shards run, and report scaling_efficiency = rate(N) / (N x rate(1))
    #[arg(long)]
    pub scaling: bool,
    /// Open loop: shard 0's source sends nothing for this long from 1.5 s into the
    /// measured schedule, then sends what it held back, late. With --idle-timeout-ms it
    /// shows what the idle timeout trades: result latency against records dropped as late
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub pause_ms: u64,
    /// Open loop: the sources' idle timeout (`WatermarkStrategy::with_idle_timeout`): a
    /// source split with no records for this long stops holding the watermark back
    #[arg(long, value_name = "MS")]
    pub idle_timeout_ms: Option<u64>,
    /// Without --rate: seconds of a latency phase at half the measured rate (0: none);
    /// with --find-max-rate and no --duration, each step's seconds
    #[arg(long, default_value_t = 3.0, value_name = "SECONDS")]
    pub latency_seconds: f64,
    /// Latency runs (--rate, and the latency phase): run no wake-up probe beside them (a
    /// thread that sleeps 1 ms at a time and reports how late it woke as
    /// `machine_wake_latency_us`, the machine's floor under the result latencies)
    #[arg(long)]
    pub no_wake_probe: bool,
    #[command(flatten)]
    pub run: RunArgs,
    /// `--processes N` and its options ([`pipeline_procs`](super::pipeline_procs)).
    #[command(flatten)]
    pub processes: ProcessesArgs,
}

impl PipelineArgs {
    /// `--events`, or its default (smaller with `--processes`).
    pub fn events(&self) -> u64 {
        let default = if self.processes.processes.is_some() { DEFAULT_PROCESSES_EVENTS } else { DEFAULT_EVENTS };
        self.events.unwrap_or(default)
    }

    /// `--shards`, or one per CPU this process may run on.
    pub fn shards(&self) -> usize {
        self.run.shards.unwrap_or_else(default_shards)
    }

    /// `--split`, or its default, by residue.
    fn split(&self) -> SplitArg {
        self.split.unwrap_or(SplitArg::ByResidue)
    }

    /// `--watermark-interval-us`, if given.
    fn watermark_interval(&self) -> Option<std::time::Duration> {
        self.watermark_interval_us.map(std::time::Duration::from_micros)
    }
}

/// One step of `--find-max-rate` (the harness's, shared by every workload).
pub use crate::harness::RateStep;

/// The CPUs this process may run on: one shard each.
fn default_shards() -> usize {
    core_affinity::get_core_ids().map_or(1, |ids| ids.len().max(1))
}

/// Events enough that no `--duration` run reaches them (a million per second of event
/// time for four months).
const UNBOUNDED_EVENTS: u64 = 10_000_000_000_000;

/// `--events`' default: a billion events, so that a throughput round lasts seconds even at
/// several hundred million events per second (one shard runs it in about 5 s on the
/// project's machines), and its rate does not hang on a tenth of a second's noise.
pub const DEFAULT_EVENTS: u64 = 1_000_000_000;

/// `--split`: how the throughput mode divides the events between shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SplitArg {
    /// Shard `s` of `n` makes the events `i % n == s`.
    ByResidue,
    /// The shards claim runs of events from a shared counter as they need them.
    OnDemand,
}

impl SplitArg {
    /// The job's split.
    pub fn split(self) -> Split {
        match self {
            SplitArg::ByResidue => Split::ByResidue,
            SplitArg::OnDemand => Split::OnDemand,
        }
    }
}

/// A baseline to compare against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Baseline {
    /// The same job written with the `timely` dataflow crate, on as many workers as sluice
    /// has shards.
    Timely,
    /// The job as one hand-written single-threaded loop, no engine (`sluice_bench_bare`).
    Bare,
}

/// Result of `sluice-bench pipeline`; this is the `--json` schema.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineReport {
    /// Always `"pipeline"`.
    pub workload: &'static str,
    /// `--shards` (and timely workers).
    pub shards: usize,
    /// `--seed`, `--duration` and `--warmup` as used.
    #[serde(flatten)]
    pub run: RunInfo,
    /// Events per run (`--events`, or what `--duration` let through in the last round;
    /// with `--rate`, the warm-up's included).
    pub events: u64,
    /// `--batch`.
    pub batch_records: usize,
    /// Whether sluice's shards were pinned to CPUs (not with `--no-pin`).
    pub pinned: bool,
    /// Whether sluice counted in two phases (`--two-phase`).
    pub two_phase: bool,
    /// How the throughput rounds divided the events between shards (`--split`):
    /// `"on-demand"` or `"by-residue"`; null without throughput rounds (the open loop
    /// splits by residue).
    pub split: Option<SplitArg>,
    /// `--watermark-interval-us`; null: the pipeline's default (0, every advance sent).
    pub watermark_interval_us: Option<u64>,
    /// `--out-of-orderness-ms`.
    pub out_of_orderness_ms: u64,
    /// `--rate`, in the latency mode.
    pub rate: Option<u64>,
    /// `--pause-ms` (0: none).
    pub pause_ms: u64,
    /// `--idle-timeout-ms`.
    pub idle_timeout_ms: Option<u64>,
    /// Events no result counts: records the pause made late, dropped (0 without a pause).
    pub late_events: u64,
    /// Rounds run (1 in the latency mode).
    pub rounds: usize,
    /// Events per second through sluice, from every shard being ready to the last result,
    /// in the best round. In the latency mode, the rate achieved.
    pub events_per_sec: f64,
    /// Window results the sink received (every key with events in a window, per window).
    pub results: u64,
    /// The sum of their counts, equal to `events` (or the run fails).
    pub results_sum: u64,
    /// From each result's window's last event's scheduled time to the result at the sink,
    /// microseconds; from `--rate` runs and the latency phase of throughput runs.
    pub latency_us: Option<LatencySummary>,
    /// The offered rate `latency_us` was measured at, events per second.
    pub latency_rate: Option<u64>,
    /// The latency distribution, for `sluice-bench report --plot`.
    pub latency_curve: Option<Curve>,
    /// How late a thread sleeping 1 ms at a time beside the latency run woke,
    /// microseconds: the machine's floor under `latency_us` (a VM's stalls show here as in
    /// every result they delay). None without a latency run or with `--no-wake-probe`.
    pub machine_wake_latency_us: Option<LatencySummary>,
    /// `--find-max-rate`: the bound (`slo_p99_ms`), every step (`rate_curve`), and the
    /// highest rate within it (`max_rate_within_slo`).
    #[serde(flatten)]
    pub search: RateSearch,
    /// `--compare`: the baselines run, in order.
    pub compare: Vec<Baseline>,
    /// Events per second through timely (`--compare timely`), in its best round.
    pub timely_events_per_sec: Option<f64>,
    /// `events_per_sec / timely_events_per_sec`.
    pub ratio_to_timely: Option<f64>,
    /// Events per second through the bare single-threaded loop (`--compare bare`), in its
    /// best round.
    pub bare_events_per_sec: Option<f64>,
    /// Sluice's events per second per shard over the bare loop's: 1.0 is each shard as
    /// fast as the loop with no engine (with `--scaling`, the one-shard run's figure is
    /// `single_shard_ratio_to_bare`).
    pub ratio_to_bare: Option<f64>,
    /// With `--scaling --compare bare`: `single_shard_events_per_sec / bare_events_per_sec`.
    pub single_shard_ratio_to_bare: Option<f64>,
    /// With `--scaling --compare bare`: N copies of the bare loop run at once, one on each
    /// CPU the N shards are pinned to (shard order), each over all the events; each CPU's
    /// best round. This is what the machine gives N independent single-threaded loops: the
    /// CPUs' own speeds (another guest on a sibling hyperthread) and what they share.
    pub bare_events_per_sec_by_cpu: Vec<f64>,
    /// The slowest of `bare_events_per_sec_by_cpu` over `bare_events_per_sec` (the loop
    /// alone on the first CPU): an evenly split job's N shards end when the slowest does,
    /// so this is the `scaling_efficiency` the machine itself allows a `--split by-residue`
    /// run.
    pub bare_slowest_cpu_ratio: Option<f64>,
    /// The mean of `bare_events_per_sec_by_cpu` over `bare_events_per_sec`: a `--split
    /// on-demand` run's shards each make as many events as their CPU allows and end
    /// together, so this is the `scaling_efficiency` the machine allows that run.
    pub bare_mean_cpu_ratio: Option<f64>,
    /// Sluice's events per second in every round, in order.
    pub round_events_per_sec: Vec<f64>,
    /// Throughput rounds bounded by --events at 2 shards or more: in each round, in
    /// milliseconds, how long the first shard whose source ran dry waited for the last
    /// one's. Split by residue, every shard makes as many events, so this is how much
    /// slower one CPU ran than another in that round (the time a shard sat idle at the
    /// end); split on demand it stays within one claim's time.
    pub round_source_end_spread_ms: Vec<f64>,
    /// Timely's events per second in every round, in order.
    pub round_timely_events_per_sec: Vec<f64>,
    /// The bare loop's events per second in every round, in order.
    pub round_bare_events_per_sec: Vec<f64>,
    /// `--scaling`: the one-shard rates and `scaling_efficiency`.
    #[serde(flatten)]
    pub scaling: Scaling,
    /// `--processes N`: `processes`, the single-process job's figures beside, the
    /// repartition topic's cost and where the time went (the other fields are then the N
    /// processes').
    #[serde(flatten)]
    pub processes: Option<ProcessesReport>,
}

/// Runs the workload as `args` say.
///
/// # Errors
///
/// Bad options, a pipeline that failed, or results that do not match the job.
pub fn run(args: &PipelineArgs) -> anyhow::Result<PipelineReport> {
    let _metrics = args.run.serve_metrics()?;
    let shards = args.shards();
    let opts = &args.run;
    let mut report = PipelineReport {
        workload: "pipeline",
        shards,
        run: opts.info(opts.duration),
        events: args.events(),
        batch_records: args.batch,
        pinned: !args.no_pin,
        two_phase: args.two_phase,
        split: None,
        watermark_interval_us: args.watermark_interval_us,
        out_of_orderness_ms: args.out_of_orderness_ms,
        rate: opts.rate,
        pause_ms: args.pause_ms,
        idle_timeout_ms: args.idle_timeout_ms,
        late_events: 0,
        rounds: 1,
        events_per_sec: 0.0,
        results: 0,
        results_sum: 0,
        latency_us: None,
        latency_rate: opts.rate,
        latency_curve: None,
        machine_wake_latency_us: None,
        search: RateSearch::default(),
        compare: Vec::new(),
        timely_events_per_sec: None,
        ratio_to_timely: None,
        bare_events_per_sec: None,
        ratio_to_bare: None,
        single_shard_ratio_to_bare: None,
        bare_events_per_sec_by_cpu: Vec::new(),
        bare_slowest_cpu_ratio: None,
        bare_mean_cpu_ratio: None,
        round_events_per_sec: Vec::new(),
        round_source_end_spread_ms: Vec::new(),
        round_timely_events_per_sec: Vec::new(),
        round_bare_events_per_sec: Vec::new(),
        scaling: Scaling::default(),
        processes: None,
    };
    for baseline in &args.compare {
        if !report.compare.contains(baseline) {
            report.compare.push(*baseline);
        }
    }
    ensure!(
        opts.rate.is_some() || opts.find_max_rate || (args.pause_ms == 0 && args.idle_timeout_ms.is_none()),
        "--pause-ms and --idle-timeout-ms apply to the open loop: add --rate"
    );
    pipeline_procs::check(args)?;
    #[cfg(feature = "kafka-client")]
    if let Some(n) = args.processes.processes {
        return pipeline_procs::run(args, report, n);
    }
    if opts.find_max_rate {
        return find_max_rate(args, report);
    }
    if let Some(rate) = opts.rate {
        return rate_run(args, report, rate);
    }
    throughput_rounds(args, &mut report)?;
    ensure!(args.latency_seconds.is_finite() && args.latency_seconds >= 0.0, "--latency-seconds must be 0 or more");
    if args.latency_seconds > 0.0 {
        // Half of what was just sustained, for the given time.
        let rate = ((report.events_per_sec / 2.0) as u64).max(1);
        let events = ((rate as f64 * args.latency_seconds) as u64).max(1);
        let job = paced_job(args, rate, events)?;
        let run;
        (run, report.machine_wake_latency_us) =
            WakeProbe::around(!args.no_wake_probe, || pipeline_sluice::run(&job, shards, true))?;
        if let Some(l) = &run.latency {
            keep_latency(args, &mut report, l, rate)?;
        }
        report.latency_rate = Some(rate);
    } else {
        opts.refuse_latency_files("--latency-seconds 0 skips the latency phase")?;
    }
    Ok(report)
}

/// The throughput rounds: each runs sluice at `--shards`, then (`--scaling`) at one shard,
/// then each `--compare` baseline over the events sluice just counted; each side's best
/// round is its figure.
fn throughput_rounds(args: &PipelineArgs, report: &mut PipelineReport) -> anyhow::Result<()> {
    let (opts, shards) = (&args.run, report.shards);
    let cpus: Vec<usize> = core_affinity::get_core_ids()
        .filter(|ids| !ids.is_empty())
        .context("reading the CPUs this process may run on")?
        .into_iter()
        .map(|core| core.id)
        .collect();
    if args.scaling {
        report.scaling = Scaling::to(shards)?;
    }
    let job = Job::new(args.events(), None, args.out_of_orderness_ms, args.batch)?
        .with_pin(!args.no_pin)
        .with_two_phase(args.two_phase)
        .with_watermark_interval(args.watermark_interval())
        .with_split(args.split().split());
    let unbounded = Job::new(UNBOUNDED_EVENTS, None, args.out_of_orderness_ms, args.batch)?
        .with_pin(!args.no_pin)
        .with_two_phase(args.two_phase)
        .with_watermark_interval(args.watermark_interval())
        .with_split(args.split().split());
    let sluice_round = |shards: usize| match opts.duration() {
        Some(limit) => pipeline_sluice::run_bounded(&unbounded, shards, limit),
        None => pipeline_sluice::run(&job, shards, false),
    };
    let rate = |events: u64, elapsed: std::time::Duration| events as f64 / elapsed.as_secs_f64().max(1e-9);
    if opts.warmup > 0.0 {
        // A discarded round of --warmup seconds.
        pipeline_sluice::run_bounded(&unbounded, shards, opts.warmup()).context("the warm-up round")?;
    }
    report.split = Some(args.split());
    let mut at_once: Vec<Vec<f64>> = vec![Vec::new(); shards];
    for _ in 0..args.rounds {
        let sluice = sluice_round(shards)?;
        report.events = sluice.events;
        report.round_events_per_sec.push(rate(sluice.events, sluice.elapsed));
        if let Some(spread) = sluice.source_end_spread {
            report.round_source_end_spread_ms.push(spread.as_secs_f64() * 1e3);
        }
        (report.results, report.results_sum) = (sluice.tally.results, sluice.tally.sum);
        if report.scaling.is_on() {
            let one = sluice_round(1).context("the one-shard run of --scaling")?;
            report.scaling.push(rate(sluice.events, sluice.elapsed), rate(one.events, one.elapsed));
        }
        // The baselines count the same events sluice just counted (all of --events, or
        // what --duration let through).
        let job = Job::new(sluice.events, None, args.out_of_orderness_ms, args.batch)?
            .with_pin(!args.no_pin)
            .with_two_phase(args.two_phase)
            .with_watermark_interval(args.watermark_interval());
        for baseline in &report.compare {
            match baseline {
                Baseline::Timely => {
                    let timely = pipeline_timely::run(&job, shards, &cpus)?;
                    report.round_timely_events_per_sec.push(rate(job.events, timely.elapsed));
                }
                Baseline::Bare => {
                    let bare = sluice_bench_bare::run(&job, (!args.no_pin).then_some(cpus[0]))?;
                    report.round_bare_events_per_sec.push(rate(job.events, bare.elapsed));
                    if report.scaling.is_on() && !args.no_pin {
                        // A copy on every shard's CPU at once (shard i runs on CPU i mod CPUs).
                        let runs = std::thread::scope(|scope| {
                            let copies: Vec<_> = (0..shards)
                                .map(|i| {
                                    let (job, cpu) = (&job, cpus[i % cpus.len()]);
                                    scope.spawn(move || sluice_bench_bare::run(job, Some(cpu)))
                                })
                                .collect();
                            copies.into_iter().map(|c| c.join().expect("a bare loop's thread")).collect::<Vec<_>>()
                        });
                        for (rates, run) in at_once.iter_mut().zip(runs) {
                            rates.push(rate(job.events, run?.elapsed));
                        }
                    }
                }
            }
        }
    }
    let best = |rates: &[f64]| rates.iter().copied().fold(0.0, f64::max);
    report.rounds = args.rounds;
    report.events_per_sec = best(&report.round_events_per_sec);
    report.scaling.finish(report.events_per_sec);
    if report.compare.contains(&Baseline::Timely) {
        let timely = best(&report.round_timely_events_per_sec);
        (report.timely_events_per_sec, report.ratio_to_timely) = (Some(timely), Some(report.events_per_sec / timely));
    }
    if report.compare.contains(&Baseline::Bare) {
        let bare = best(&report.round_bare_events_per_sec);
        report.bare_events_per_sec = Some(bare);
        report.ratio_to_bare = Some(report.events_per_sec / (shards as f64 * bare));
        report.single_shard_ratio_to_bare = report.scaling.single_shard_events_per_sec.map(|one| one / bare);
        if at_once.iter().all(|rates| !rates.is_empty()) {
            report.bare_events_per_sec_by_cpu = at_once.iter().map(|r| best(r)).collect();
            let by_cpu = &report.bare_events_per_sec_by_cpu;
            report.bare_slowest_cpu_ratio = Some(by_cpu.iter().copied().fold(f64::MAX, f64::min) / bare);
            report.bare_mean_cpu_ratio = Some(by_cpu.iter().sum::<f64>() / by_cpu.len() as f64 / bare);
        }
    }
    Ok(())
}

/// `--rate R`: one open-loop run at `rate` for `--events` events (or `--duration`
/// seconds) after `--warmup`'s, its latency in `report`.
fn rate_run(args: &PipelineArgs, mut report: PipelineReport, rate: u64) -> anyhow::Result<PipelineReport> {
    let (opts, shards) = (&args.run, report.shards);
    ensure!(args.compare.is_empty(), "--compare measures throughput: run it without --rate");
    ensure!(
        args.split.is_none(),
        "--split divides the throughput mode's events: the open loop (--rate) splits by residue"
    );
    ensure!(!args.scaling, "--scaling measures throughput: run it without --rate");
    let events = match opts.duration {
        Some(seconds) => ((rate as f64 * seconds) as u64).max(1),
        None => args.events(),
    };
    let job = paced_job(args, rate, events)?;
    let sluice;
    (sluice, report.machine_wake_latency_us) =
        WakeProbe::around(!args.no_wake_probe, || pipeline_sluice::run(&job, shards, true))?;
    report.events = job.events;
    report.events_per_sec = achieved(&job, sluice.elapsed);
    report.round_events_per_sec.push(report.events_per_sec);
    (report.results, report.results_sum) = (sluice.tally.results, sluice.tally.sum);
    report.late_events = job.events - sluice.tally.sum;
    if let Some(l) = &sluice.latency {
        keep_latency(args, &mut report, l, rate)?;
    }
    Ok(report)
}

/// The open-loop job at `rate`: `events` measured events after `--warmup`'s.
pub(crate) fn paced_job(args: &PipelineArgs, rate: u64, events: u64) -> anyhow::Result<Job> {
    let warmup_events = (rate as f64 * args.run.warmup) as u64;
    Ok(Job::new(events.saturating_add(warmup_events), Some(rate), args.out_of_orderness_ms, args.batch)?
        .with_warmup(args.run.warmup())
        .with_pin(!args.no_pin)
        .with_two_phase(args.two_phase)
        .with_watermark_interval(args.watermark_interval())
        .with_pause(
            std::time::Duration::from_millis(args.pause_ms),
            args.idle_timeout_ms.map(std::time::Duration::from_millis),
        ))
}

/// The rate a paced run achieved: its measured events over the time after the warm-up.
fn achieved(job: &Job, elapsed: std::time::Duration) -> f64 {
    let measured = job.events - job.warmup_events();
    measured as f64 / elapsed.saturating_sub(job.warmup).as_secs_f64().max(1e-9)
}

/// `--find-max-rate`: ramps the offered rate ([`RunArgs::find_max_rate`]) and reports the
/// highest whose p99 stays within the bound (and which the pipeline keeps up with).
fn find_max_rate(args: &PipelineArgs, mut report: PipelineReport) -> anyhow::Result<PipelineReport> {
    ensure!(args.compare.is_empty(), "--compare measures throughput: run it without --find-max-rate");
    ensure!(
        args.split.is_none(),
        "--split divides the throughput mode's events: the open loop (--find-max-rate) splits by residue"
    );
    ensure!(!args.scaling, "--scaling measures throughput: run it without --find-max-rate");
    let opts = &args.run;
    let seconds = opts.duration.unwrap_or(args.latency_seconds);
    ensure!(seconds.is_finite() && seconds > 0.0, "--find-max-rate needs --duration (or --latency-seconds) > 0");
    let shards = args.shards();
    let title = "windowed keyed count: result latency per offered rate";
    let search = opts.find_max_rate(100_000, title, "events/s", |rate| {
        let job = paced_job(args, rate, ((rate as f64 * seconds) as u64).max(1))?;
        let run = pipeline_sluice::run(&job, shards, true)?;
        let latency = run.latency.context("a latency run records latencies")?;
        Ok((achieved(&job, run.elapsed), latency))
    })?;
    report.run.duration = Some(seconds);
    report.rate = None;
    report.events_per_sec = search.best_achieved();
    report.search = search;
    Ok(report)
}

/// Puts the latencies measured at `rate` in the report, and writes `--plot` and `--hlog`.
pub(crate) fn keep_latency(
    args: &PipelineArgs,
    report: &mut PipelineReport,
    l: &LatencyRecorder,
    rate: u64,
) -> anyhow::Result<()> {
    report.latency_us = Some(l.summary());
    let label = format!("sluice pipeline, {} shards, {rate} events/s", report.shards);
    report.latency_curve = Some(args.run.write_latency(l, "windowed keyed count: result latency", &label)?);
    Ok(())
}

impl PipelineReport {
    /// The baselines' rows, and every side's rate in each round.
    fn baseline_rows(&self, table: &mut Table) {
        let shards = self.shards;
        if let (Some(timely), Some(ratio)) = (self.timely_events_per_sec, self.ratio_to_timely) {
            table.row(format!("timely ({shards} workers)"), format!("{timely:.0}"), "events/s");
            table.row("sluice / timely", format!("{ratio:.2}"), "x");
        }
        if let (Some(bare), Some(ratio)) = (self.bare_events_per_sec, self.ratio_to_bare) {
            table.row("bare loop (1 thread, no engine)", format!("{bare:.0}"), "events/s");
            table.row("sluice per shard / bare", format!("{ratio:.2}"), "x");
            if let Some(one) = self.single_shard_ratio_to_bare {
                table.row("sluice 1 shard / bare", format!("{one:.2}"), "x");
            }
            if let (Some(slowest), Some(mean)) = (self.bare_slowest_cpu_ratio, self.bare_mean_cpu_ratio) {
                let by_cpu: Vec<String> =
                    self.bare_events_per_sec_by_cpu.iter().map(|r| format!("{:.1}", r / 1e6)).collect();
                table.row("bare loop on every shard's CPU at once", by_cpu.join(" / "), "M events/s");
                // The bound that applies to this run's split first.
                let (mean_row, slowest_row) = (
                    ("mean of those / bare alone (the scaling the machine allows --split on-demand)", mean),
                    ("slowest of those / bare alone (the scaling the machine allows --split by-residue)", slowest),
                );
                let rows = match self.split {
                    Some(SplitArg::OnDemand) => [mean_row, slowest_row],
                    _ => [slowest_row, mean_row],
                };
                for (what, ratio) in rows {
                    table.row(what, format!("{ratio:.2}"), "x");
                }
            }
        }
        let mut sides = vec![("sluice", &self.round_events_per_sec)];
        sides.extend([("timely", &self.round_timely_events_per_sec), ("bare", &self.round_bare_events_per_sec)]);
        sides.push(("1 shard", &self.scaling.round_single_shard_events_per_sec));
        sides.retain(|(_, rates)| !rates.is_empty());
        if self.round_events_per_sec.len() > 1 || sides.len() > 1 {
            let names: Vec<&str> = sides.iter().map(|(name, _)| *name).collect();
            let rounds: Vec<String> = (0..self.round_events_per_sec.len())
                .map(|r| {
                    sides
                        .iter()
                        .map(|(_, rates)| rates.get(r).map_or("-".into(), |v| format!("{:.1}", v / 1e6)))
                        .collect::<Vec<_>>()
                        .join("/")
                })
                .collect();
            table.row(format!("rounds ({})", names.join("/")), rounds.join(" "), "M events/s");
        }
        if !self.round_source_end_spread_ms.is_empty() {
            let spreads: Vec<String> = self.round_source_end_spread_ms.iter().map(|ms| format!("{ms:.1}")).collect();
            let what = format!("rounds: first shard dry to last ({} shards)", self.shards);
            table.row(what, spreads.join(" "), "ms");
        }
    }

    /// The human-readable form of the report.
    pub fn table(&self) -> Table {
        let Self { shards, events, batch_records, out_of_orderness_ms, rounds, .. } = self;
        let mut mode = match self.rate {
            Some(rate) => format!("{rate} events/s offered"),
            None => format!("best of {rounds} rounds"),
        };
        if self.pause_ms > 0 {
            mode += &format!(", shard 0 paused {} ms", self.pause_ms);
        }
        if let Some(t) = self.idle_timeout_ms {
            mode += &format!(", idle timeout {t} ms");
        }
        let mut table = Table::titled(format!(
            "pipeline: windowed keyed count, {shards} shards, {events} events, 10000 keys, 1 s tumbling windows, \
             watermark bound {out_of_orderness_ms} ms, batches of {batch_records}, {mode}, {}",
            self.run.describe()
        ));
        let name = if self.rate.is_some() { "sluice (achieved)" } else { "sluice" };
        table.row(name, format!("{:.0}", self.events_per_sec), "events/s");
        table.row("sluice per shard", format!("{:.0}", self.events_per_sec / *shards as f64), "events/s");
        self.baseline_rows(&mut table);
        if let Some(p) = &self.processes {
            p.rows(&mut table, self.events_per_sec);
        }
        self.scaling.rows(&mut table);
        if self.search.slo_p99_ms.is_none() {
            // (Each step of --find-max-rate checks its own results.)
            let ok = if self.pause_ms > 0 {
                format!("{} late, dropped", self.late_events)
            } else if self.results_sum == self.events {
                "ok".to_string()
            } else {
                "MISMATCH".to_string()
            };
            table.row("results (sum of counts)", format!("{} ({}, {ok})", self.results, self.results_sum), "");
        }
        self.search.rows(&mut table, "events/s");
        if let Some(l) = &self.latency_us {
            if self.rate.is_none()
                && let Some(rate) = self.latency_rate
            {
                table.row("latency phase offered", rate, "events/s (half the best rate)");
            }
            table.latency_rows("result latency", l);
        }
        if let Some(m) = &self.machine_wake_latency_us {
            table.latency_rows(WAKE_ROWS, m);
        }
        table
    }
}
