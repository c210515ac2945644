//! The latency mode of `sluice-bench checkpoint`: `--rounds` rounds of the paced job, each
//! run with checkpoints and without (in alternating order), their figures merged
//! ([`Rounds`]) into the report; and `--find-max-rate`, which ramps the rate with the
//! checkpointing run only.

use std::{path::Path, time::Duration};

use anyhow::{Context, ensure};
use sluice_engine::dataflow::{CheckpointConfig, CheckpointStats};

use super::{CheckpointArgs, CheckpointReport, DEFAULT_RATE, JobKind, fresh_subdir};
use crate::{
    harness::{LatencyRecorder, LatencySummary, WakeProbe},
    workloads::{pipeline_job::Job, pipeline_sluice},
};

/// The latency mode: `--rounds` rounds at `--rate` for `seconds` (after `--warmup`), their
/// latencies and checkpoints in `report`; `--plot` and `--hlog` written.
pub(super) fn run(
    args: &CheckpointArgs,
    work: &Path,
    seconds: f64,
    mut report: CheckpointReport,
) -> anyhow::Result<CheckpointReport> {
    let opts = &args.run;
    let rate = args.rate();
    let job = paced_job(args, rate, seconds)?;
    let events = job.events;
    let (rounds, wake) = WakeProbe::around(!args.no_wake_probe, || run_rounds(args, work, &job, report.shards))?;
    report.machine_wake_latency_us = wake;
    let measured = (job.events - job.warmup_events()) * args.rounds as u64;
    let warmups = job.warmup * args.rounds as u32;
    let achieved = |elapsed: Duration| measured as f64 / elapsed.saturating_sub(warmups).as_secs_f64().max(1e-9);
    report.rate = Some(rate);
    report.events = Some(events);
    report.rounds = args.rounds;
    report.events_per_sec = Some(achieved(rounds.elapsed.0));
    report.baseline_events_per_sec = Some(achieved(rounds.elapsed.1));
    let (latency, baseline_latency) = (rounds.latency.0.summary(), rounds.latency.1.summary());
    report.p999_ratio = ratio(&latency, &baseline_latency);
    report.latency_us = Some(latency);
    report.baseline_latency_us = Some(baseline_latency);
    let (arrivals, baseline_arrivals) = (rounds.arrivals.0.summary(), rounds.arrivals.1.summary());
    report.arrival_p999_ratio = ratio(&arrivals, &baseline_arrivals);
    report.arrival_latency_us = Some(arrivals);
    report.baseline_arrival_latency_us = Some(baseline_arrivals);
    let label = |with: &str| format!("{with}, {rate} events/s, {} keys", args.keys);
    let with = rounds.latency.0.curve(&label("checkpoints every second"));
    let without = rounds.latency.1.curve(&label("no checkpoints"));
    if let Some(path) = &opts.plot {
        crate::harness::write_percentile_plot(
            path,
            "result latency with and without checkpoints",
            &[with.clone(), without.clone()],
        )?;
    }
    if let Some(path) = &opts.hlog {
        // The checkpointed runs' latencies; with several rounds, their intervals add up by
        // position.
        rounds.latency.0.write_hlog(path)?;
    }
    report.latency_curve = Some(with);
    report.baseline_latency_curve = Some(without);
    report.round_p999_ratio = rounds.p999_ratio;
    report.round_arrival_p999_ratio = rounds.arrival_p999_ratio;
    report.set_checkpoints(&rounds.checkpoints);
    Ok(report)
}

/// Runs `--rounds` rounds of `job` on `shards` shards, each with checkpoints (into a fresh
/// directory under `work`) and without, in alternating order.
fn run_rounds(args: &CheckpointArgs, work: &Path, job: &Job, shards: usize) -> anyhow::Result<Rounds> {
    let interval = Duration::from_millis(args.interval_ms);
    let events = job.events;
    let mut rounds = Rounds::default();
    for round in 0..args.rounds {
        // Alternate which run goes first, so neither always follows the other.
        let dir = fresh_subdir(work, &format!("checkpoints-{round}"))?;
        let with = || {
            let config = CheckpointConfig::new(&dir).interval(interval).mode(args.mode.into());
            run_job(args, job, shards, Some(config)).with_context(|| format!("round {round}: the run with checkpoints"))
        };
        let without =
            || run_job(args, job, shards, None).with_context(|| format!("round {round}: the run without checkpoints"));
        let (checkpointed, baseline) = if round % 2 == 0 {
            let c = with()?;
            (c, without()?)
        } else {
            let b = without()?;
            (with()?, b)
        };
        ensure!(
            !checkpointed.checkpoints.is_empty(),
            "round {round}: no checkpoint completed in the checkpointing run ({events} events, interval {} ms)",
            args.interval_ms
        );
        rounds.add(checkpointed, baseline);
    }
    Ok(rounds)
}

/// One run of `--job`'s job, checkpointing as `config` says (none when `None`).
fn run_job(
    args: &CheckpointArgs,
    job: &Job,
    shards: usize,
    config: Option<CheckpointConfig>,
) -> anyhow::Result<pipeline_sluice::SluiceRun> {
    match args.job {
        JobKind::Count => pipeline_sluice::run_checkpointed(job, shards, config),
        JobKind::Join => super::join::run(job, shards, config),
    }
}

/// The latency job at `rate` for `seconds` after `--warmup`'s events.
fn paced_job(args: &CheckpointArgs, rate: u64, seconds: f64) -> anyhow::Result<Job> {
    let events = ((rate as f64 * (seconds + args.run.warmup)) as u64).max(1);
    Ok(Job::new(events, Some(rate), args.out_of_orderness_ms, args.batch)?
        .with_keys(args.keys)?
        .with_warmup(args.run.warmup()))
}

/// `--find-max-rate`: ramps the offered rate ([`RunArgs::find_max_rate`]) with the
/// checkpointing run only, and reports the highest rate whose result p99 stays within the
/// bound, with that step's checkpoints.
pub(super) fn find_max_rate(
    args: &CheckpointArgs,
    work: &Path,
    seconds: f64,
    mut report: CheckpointReport,
) -> anyhow::Result<CheckpointReport> {
    let opts = &args.run;
    let interval = Duration::from_millis(args.interval_ms);
    let mut steps: Vec<(u64, pipeline_sluice::SluiceRun)> = Vec::new();
    let title = "result latency with checkpoints per offered rate";
    let search = opts.find_max_rate(DEFAULT_RATE, title, "events/s", |rate| {
        let job = paced_job(args, rate, seconds)?;
        let dir = fresh_subdir(work, &format!("checkpoints-{}", steps.len()))?;
        let run = run_job(
            args,
            &job,
            args.shards(),
            Some(CheckpointConfig::new(&dir).interval(interval).mode(args.mode.into())),
        )
        .with_context(|| format!("the run at {rate} events/s"))?;
        let latency = run.latency.clone().unwrap_or_default();
        let measured = job.events - job.warmup_events();
        let achieved = measured as f64 / run.elapsed.saturating_sub(job.warmup).as_secs_f64().max(1e-9);
        steps.push((rate, run));
        Ok((achieved, latency))
    })?;
    let (rate, run) = steps.swap_remove(search.kept_step(&steps, |s| s.0));
    let latency = run.latency.clone().unwrap_or_default();
    report.rate = Some(rate);
    report.events = Some(paced_job(args, rate, seconds)?.events);
    report.rounds = 1;
    report.latency_us = Some(latency.summary());
    report.latency_curve = Some(latency.curve(&format!("checkpoints, {rate} events/s, {} keys", args.keys)));
    report.arrival_latency_us = run.arrivals.as_ref().map(LatencyRecorder::summary);
    report.events_per_sec = Some(search.best_achieved());
    report.set_checkpoints(&run.checkpoints.iter().map(|s| (0, *s)).collect::<Vec<_>>());
    report.search = search;
    Ok(report)
}

/// `with.p999 / without.p999`, when both were measured.
fn ratio(with: &LatencySummary, without: &LatencySummary) -> Option<f64> {
    (without.p999 > 0 && with.count > 0).then(|| with.p999 as f64 / without.p999 as f64)
}

/// The latency runs' figures, merged over the rounds: `.0` with checkpoints, `.1` without.
#[derive(Default)]
struct Rounds {
    /// Rounds added so far.
    latency: (LatencyRecorder, LatencyRecorder),
    arrivals: (LatencyRecorder, LatencyRecorder),
    elapsed: (Duration, Duration),
    rounds: usize,
    checkpoints: Vec<(usize, CheckpointStats)>,
    p999_ratio: Vec<f64>,
    arrival_p999_ratio: Vec<f64>,
}

impl Rounds {
    fn add(&mut self, with: pipeline_sluice::SluiceRun, without: pipeline_sluice::SluiceRun) {
        let empty = LatencyRecorder::new();
        let pair = |a: &Option<LatencyRecorder>, b: &Option<LatencyRecorder>| {
            (a.as_ref().unwrap_or(&empty).clone(), b.as_ref().unwrap_or(&empty).clone())
        };
        let latency = pair(&with.latency, &without.latency);
        let arrivals = pair(&with.arrivals, &without.arrivals);
        self.p999_ratio.extend(ratio(&latency.0.summary(), &latency.1.summary()));
        self.arrival_p999_ratio.extend(ratio(&arrivals.0.summary(), &arrivals.1.summary()));
        if self.rounds == 0 {
            // The first round's recorders as they are (they keep latency intervals).
            self.latency = latency;
        } else {
            self.latency.0.merge(&latency.0);
            self.latency.1.merge(&latency.1);
        }
        self.arrivals.0.merge(&arrivals.0);
        self.arrivals.1.merge(&arrivals.1);
        self.elapsed.0 += with.elapsed;
        self.elapsed.1 += without.elapsed;
        let round = self.rounds;
        self.checkpoints.extend(with.checkpoints.iter().map(|s| (round, *s)));
        self.rounds += 1;
    }
}
