//! `sluice-bench pipeline`: the windowed keyed count through sluice's processor, against
//! the same job written with the `timely` dataflow crate.
//!
//! [The job](super::pipeline_job): `--events N` events `i`, key `i mod 10 000`, event time
//! `i` microseconds (a million events per second of event time, so each one-second
//! tumbling window counts 100 events per key), bounded-out-of-orderness watermarks, and a
//! counting sink that checks every result. The sluice side ([`pipeline_sluice`]) runs on
//! `--shards` pinned shards; with `--compare timely` the baseline ([`pipeline_timely`])
//! runs on as many timely workers pinned to the same CPUs, round after round with sluice, so
//! both see the same spells of noise. Each side's figure is its best round.
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

use std::path::PathBuf;

use anyhow::{Context, ensure};
use clap::{Args, ValueEnum, builder::RangedU64ValueParser};
use serde::Serialize;
use sluice_engine::dataflow::PipelineConfig;

use super::{pipeline_job::Job, pipeline_sluice, pipeline_timely};
use crate::harness::{Curve, LatencyRecorder, LatencySummary, Table, write_percentile_plot};

/// Options of `sluice-bench pipeline`.
#[derive(Debug, Clone, Args)]
pub struct PipelineArgs {
    /// Events to generate
    #[arg(long, default_value_t = 20_000_000, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub events: u64,
    /// Shards running the pipeline, each a glommio executor pinned to a CPU (and timely
    /// workers, with --compare timely)
    #[arg(long, default_value_t = default_shards(), value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub shards: usize,
    /// Latency mode: send the events at this rate (events/s, open loop) and report
    /// event-to-result latency
    #[arg(long, value_name = "EVENTS_PER_SEC", value_parser = clap::value_parser!(u64).range(1..))]
    pub rate: Option<u64>,
    /// How far the watermark trails the largest event time seen, in milliseconds
    #[arg(long, default_value_t = 10, value_name = "MS")]
    pub out_of_orderness_ms: u64,
    /// Records per batch: the pipeline's `batch_records`, and the timely input's chunk
    /// between two `advance_to`s
    #[arg(long, default_value_t = PipelineConfig::DEFAULT_BATCH_RECORDS, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub batch: usize,
    /// Rounds in the throughput mode, each running sluice and then the baseline; each
    /// side's best round is its figure
    #[arg(long, default_value_t = 3, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub rounds: usize,
    /// Also run the same job with this baseline, side by side (throughput mode only)
    #[arg(long, value_name = "BASELINE")]
    pub compare: Option<Baseline>,
    /// Also write the report as JSON to this file
    /// Without --rate: seconds of a latency phase at half the measured rate (0: none).
    #[arg(long, default_value_t = 3.0, value_name = "SECONDS")]
    pub latency_seconds: f64,
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write the result latencies' percentile chart (SVG) to this file
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
    /// Write the result latencies as an HdrHistogram interval log (1 s intervals)
    #[arg(long, value_name = "PATH")]
    pub hlog: Option<PathBuf>,
    /// Find the highest offered rate whose p99 result latency stays within --slo-p99-ms:
    /// doubles the rate from --rate (default 100 000) while it holds, then halves the gap
    /// three times; each step runs --latency-seconds
    #[arg(long)]
    pub find_max_rate: bool,
    /// The p99 latency bound for --find-max-rate, milliseconds
    #[arg(long, default_value_t = 10.0, value_name = "MS")]
    pub slo_p99_ms: f64,
}

/// One step of `--find-max-rate`.
#[derive(Debug, Clone, Serialize)]
pub struct RateStep {
    /// Offered events per second.
    pub rate: u64,
    /// Events per second achieved (the schedule's length over the run's).
    pub achieved: f64,
    /// Result latency at this rate.
    pub latency_us: LatencySummary,
    /// Whether p99 was within the bound and the rate was kept up with.
    pub within_slo: bool,
}

/// The CPUs this process may run on: one shard each.
fn default_shards() -> usize {
    core_affinity::get_core_ids().map_or(1, |ids| ids.len().max(1))
}

/// A baseline to compare against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Baseline {
    /// The same job written with the `timely` dataflow crate.
    Timely,
}

/// Result of `sluice-bench pipeline`; this is the `--json` schema.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineReport {
    /// Always `"pipeline"`.
    pub workload: &'static str,
    /// `--shards` (and timely workers).
    pub shards: usize,
    /// `--events`.
    pub events: u64,
    /// `--batch`.
    pub batch_records: usize,
    /// `--out-of-orderness-ms`.
    pub out_of_orderness_ms: u64,
    /// `--rate`, in the latency mode.
    pub rate: Option<u64>,
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
    /// `--find-max-rate`: the bound, every step, and the highest rate within it.
    pub slo_p99_ms: Option<f64>,
    pub rate_curve: Vec<RateStep>,
    pub max_rate_within_slo: Option<u64>,
    /// `--compare`.
    pub baseline: Option<Baseline>,
    /// Events per second through the baseline, in its best round.
    pub baseline_events_per_sec: Option<f64>,
    /// `events_per_sec / baseline_events_per_sec`.
    pub ratio_to_baseline: Option<f64>,
    /// Sluice's events per second in every round, in order.
    pub round_events_per_sec: Vec<f64>,
    /// The baseline's events per second in every round, in order.
    pub round_baseline_events_per_sec: Vec<f64>,
}

/// Runs the workload as `args` say.
///
/// # Errors
///
/// Bad options, a pipeline that failed, or results that do not match the job.
pub fn run(args: &PipelineArgs) -> anyhow::Result<PipelineReport> {
    let job = Job::new(args.events, args.rate, args.out_of_orderness_ms, args.batch)?;
    let mut report = PipelineReport {
        workload: "pipeline",
        shards: args.shards,
        events: args.events,
        batch_records: args.batch,
        out_of_orderness_ms: args.out_of_orderness_ms,
        rate: args.rate,
        rounds: 1,
        events_per_sec: 0.0,
        results: 0,
        results_sum: 0,
        latency_us: None,
        latency_rate: args.rate,
        latency_curve: None,
        slo_p99_ms: None,
        rate_curve: Vec::new(),
        max_rate_within_slo: None,
        baseline: args.compare,
        baseline_events_per_sec: None,
        ratio_to_baseline: None,
        round_events_per_sec: Vec::new(),
        round_baseline_events_per_sec: Vec::new(),
    };
    let rate = |elapsed: std::time::Duration| args.events as f64 / elapsed.as_secs_f64().max(1e-9);
    if args.find_max_rate {
        return find_max_rate(args, report);
    }
    if args.rate.is_some() {
        ensure!(args.compare.is_none(), "--compare measures throughput: run it without --rate");
        let sluice = pipeline_sluice::run(&job, args.shards, true)?;
        report.events_per_sec = rate(sluice.elapsed);
        report.round_events_per_sec.push(report.events_per_sec);
        (report.results, report.results_sum) = (sluice.tally.results, sluice.tally.sum);
        if let Some(l) = &sluice.latency {
            keep_latency(args, &mut report, l, args.rate.unwrap_or_default())?;
        }
        return Ok(report);
    }
    let cpus: Vec<usize> = core_affinity::get_core_ids()
        .filter(|ids| !ids.is_empty())
        .context("reading the CPUs this process may run on")?
        .into_iter()
        .map(|core| core.id)
        .collect();
    for _ in 0..args.rounds {
        let sluice = pipeline_sluice::run(&job, args.shards, false)?;
        report.round_events_per_sec.push(rate(sluice.elapsed));
        (report.results, report.results_sum) = (sluice.tally.results, sluice.tally.sum);
        if let Some(Baseline::Timely) = args.compare {
            let timely = pipeline_timely::run(&job, args.shards, &cpus)?;
            report.round_baseline_events_per_sec.push(rate(timely.elapsed));
        }
    }
    let best = |rates: &[f64]| rates.iter().copied().fold(0.0, f64::max);
    report.rounds = args.rounds;
    report.events_per_sec = best(&report.round_events_per_sec);
    if args.compare.is_some() {
        let baseline = best(&report.round_baseline_events_per_sec);
        report.baseline_events_per_sec = Some(baseline);
        report.ratio_to_baseline = Some(report.events_per_sec / baseline);
    }
    ensure!(args.latency_seconds.is_finite() && args.latency_seconds >= 0.0, "--latency-seconds must be 0 or more");
    if args.latency_seconds > 0.0 {
        // Half of what was just sustained, for the given time.
        let rate = ((report.events_per_sec / 2.0) as u64).max(1);
        let events = ((rate as f64 * args.latency_seconds) as u64).max(1);
        let job = Job::new(events, Some(rate), args.out_of_orderness_ms, args.batch)?;
        let run = pipeline_sluice::run(&job, args.shards, true)?;
        if let Some(l) = &run.latency {
            keep_latency(args, &mut report, l, rate)?;
        }
        report.latency_rate = Some(rate);
    } else {
        ensure!(args.plot.is_none() && args.hlog.is_none(), "--plot and --hlog need a latency phase");
    }
    Ok(report)
}

/// `--find-max-rate`: ramps the offered rate and bisects to the highest whose p99 stays
/// within the bound (and which the pipeline keeps up with).
fn find_max_rate(args: &PipelineArgs, mut report: PipelineReport) -> anyhow::Result<PipelineReport> {
    ensure!(args.compare.is_none(), "--compare measures throughput: run it without --find-max-rate");
    ensure!(args.slo_p99_ms.is_finite() && args.slo_p99_ms > 0.0, "--slo-p99-ms must be positive");
    ensure!(
        args.latency_seconds.is_finite() && args.latency_seconds > 0.0,
        "--find-max-rate needs --latency-seconds > 0"
    );
    let slo_us = (args.slo_p99_ms * 1000.0) as u64;
    let mut curves = Vec::new();
    let mut step = |rate: u64, report: &mut PipelineReport| -> anyhow::Result<bool> {
        let events = ((rate as f64 * args.latency_seconds) as u64).max(1);
        let job = Job::new(events, Some(rate), args.out_of_orderness_ms, args.batch)?;
        let run = pipeline_sluice::run(&job, args.shards, true)?;
        let latency = run.latency.context("a latency run records latencies")?;
        let achieved = events as f64 / run.elapsed.as_secs_f64().max(1e-9);
        let summary = latency.summary();
        let within_slo = summary.p99 <= slo_us && achieved >= 0.9 * rate as f64;
        curves.push(latency.curve(&format!("{rate} events/s")));
        report.rate_curve.push(RateStep { rate, achieved, latency_us: summary, within_slo });
        Ok(within_slo)
    };
    let mut good: Option<u64> = None;
    let mut bad: Option<u64> = None;
    let mut rate = args.rate.unwrap_or(100_000).max(1);
    for _ in 0..12 {
        if step(rate, &mut report)? {
            good = Some(rate);
            rate = rate.saturating_mul(2);
        } else {
            bad = Some(rate);
            break;
        }
    }
    if let Some(mut hi) = bad {
        let mut lo = good.unwrap_or(0);
        for _ in 0..3 {
            let mid = lo + (hi - lo) / 2;
            if mid == lo || mid == 0 {
                break;
            }
            if step(mid, &mut report)? {
                lo = mid;
                good = Some(mid);
            } else {
                hi = mid;
            }
        }
    }
    report.slo_p99_ms = Some(args.slo_p99_ms);
    report.max_rate_within_slo = good;
    report.rate = None;
    report.events_per_sec = report.rate_curve.iter().filter(|s| s.within_slo).map(|s| s.achieved).fold(0.0, f64::max);
    if let Some(path) = &args.plot {
        write_percentile_plot(path, "windowed keyed count: result latency per offered rate", &curves)?;
    }
    Ok(report)
}

/// Puts the latencies measured at `rate` in the report, and writes `--plot` and `--hlog`.
fn keep_latency(
    args: &PipelineArgs,
    report: &mut PipelineReport,
    l: &LatencyRecorder,
    rate: u64,
) -> anyhow::Result<()> {
    report.latency_us = Some(l.summary());
    let curve = l.curve(&format!("sluice pipeline, {} shards, {rate} events/s", args.shards));
    if let Some(path) = &args.plot {
        write_percentile_plot(path, "windowed keyed count: result latency", std::slice::from_ref(&curve))?;
    }
    if let Some(path) = &args.hlog {
        l.write_hlog(path)?;
    }
    report.latency_curve = Some(curve);
    Ok(())
}

impl PipelineReport {
    /// The human-readable form of the report.
    pub fn table(&self) -> Table {
        let Self { shards, events, batch_records, out_of_orderness_ms, rounds, .. } = self;
        let mode = match self.rate {
            Some(rate) => format!("{rate} events/s offered"),
            None => format!("best of {rounds} rounds"),
        };
        let mut table = Table::titled(format!(
            "pipeline: windowed keyed count, {shards} shards, {events} events, 10000 keys, 1 s tumbling windows, \
             watermark bound {out_of_orderness_ms} ms, batches of {batch_records}, {mode}"
        ));
        let name = if self.rate.is_some() { "sluice (achieved)" } else { "sluice" };
        table.row(name, format!("{:.0}", self.events_per_sec), "events/s");
        table.row("sluice per shard", format!("{:.0}", self.events_per_sec / *shards as f64), "events/s");
        if let (Some(baseline), Some(ratio)) = (self.baseline_events_per_sec, self.ratio_to_baseline) {
            table.row(format!("timely ({shards} workers)"), format!("{baseline:.0}"), "events/s");
            table.row("sluice / timely", format!("{ratio:.2}"), "x");
            let rounds: Vec<String> = (self.round_events_per_sec.iter().zip(&self.round_baseline_events_per_sec))
                .map(|(sluice, timely)| format!("{:.1}/{:.1}", sluice / 1e6, timely / 1e6))
                .collect();
            table.row("rounds (sluice/timely)", rounds.join(" "), "M events/s");
        } else if self.round_events_per_sec.len() > 1 {
            let rounds: Vec<String> = self.round_events_per_sec.iter().map(|r| format!("{:.1}", r / 1e6)).collect();
            table.row("rounds", rounds.join(" "), "M events/s");
        }
        let ok = if self.results_sum == self.events { "ok" } else { "MISMATCH" };
        table.row("results (sum of counts)", format!("{} ({}, {ok})", self.results, self.results_sum), "");
        if let Some(slo) = self.slo_p99_ms {
            for s in &self.rate_curve {
                table.row(
                    format!("offered {} events/s", s.rate),
                    format!("p99 {} us, achieved {:.0}", s.latency_us.p99, s.achieved),
                    if s.within_slo { "within" } else { "over" },
                );
            }
            match self.max_rate_within_slo {
                Some(r) => table.row(format!("highest rate with p99 <= {slo} ms"), r, "events/s"),
                None => table.row(format!("highest rate with p99 <= {slo} ms"), "none of those tried", ""),
            };
        }
        if let Some(l) = &self.latency_us {
            if self.rate.is_none()
                && let Some(rate) = self.latency_rate
            {
                table.row("latency phase offered", rate, "events/s (half the best rate)");
            }
            table.latency_rows("result latency", l);
        }
        table
    }
}
