//! `sluice-bench nexmark`: one Nexmark query over a generated stream, on `--shards` pinned
//! shards.
//!
//! Without `--rate`, the generator runs as fast as the pipeline takes its events (event
//! time advancing at `--event-rate`, 10 M/s as in the Flink suite's runs) and the figure
//! is events per second from every shard being ready to the last result; a latency phase
//! of `--latency-seconds` at half that rate follows. With `--rate R`, the events are
//! released on the wall clock at `R` per second (event time advancing at the same rate),
//! an open loop, and only the latency is measured.
//!
//! Latency runs from the moment a result could first exist on the schedule to the moment
//! it reaches the sink: for a result of one event, the scheduled time of its event time's
//! millisecond; for a window's result, the end of its window (see
//! [`Query::completion_delay_ms`]). Measuring from the schedule, not from when the source
//! got to an event, charges a stalled pipeline for every event it delayed (coordinated
//! omission corrected). Per-event results are charged from the start of their millisecond,
//! so up to 1 ms more than their true latency. Windows the end of the input fires before
//! they end on the schedule are counted apart (`incomplete_results`), not as latencies;
//! the latency phase lasts at least two window spans and a second so that some complete.
//!
//! `--scaling` runs the throughput mode at one shard and at N (`--shards`, or the CPU
//! count) alternately, `--rounds` times, and reports `scaling_efficiency` (see
//! [`Scaling`]).
//!
//! The shared options: `--duration S` bounds a throughput run by time (each shard's source
//! stops after S seconds) or makes a `--rate` run `R x S` events; `--warmup W` runs a
//! discarded W-second throughput run first, or discards the results due in the first W
//! seconds of a `--rate` schedule; `--seed` seeds the generator; `--find-max-rate` ramps
//! `--rate` (from 100 000 events/s) with steps as long as the latency phase.

use std::{
    sync::{
        Arc, Barrier, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, anyhow, ensure};
use clap::{Args, builder::RangedU64ValueParser};
use serde::Serialize;
use sluice_engine::dataflow::{Pipeline, PipelineConfig};

use crate::{
    harness::{Curve, LatencyRecorder, LatencySummary, RateSearch, RunArgs, RunInfo, Scaling, Table, TimeBound},
    nexmark::{
        NexmarkConfig, NexmarkGenerator, NexmarkSource, Query, QueryParams, ResultSink, SinkEnd, sink::HLOG_INTERVAL,
    },
};

/// How long after the pipeline starts a paced schedule begins, so every shard is up first.
const PACED_START_DELAY: Duration = Duration::from_millis(50);

/// What `nexmark` makes of the shared options (`--help`).
const SHARED_HELP: &str = "Shared options here: --shards defaults to 1 (with --scaling, one per CPU). Without --rate the run is the closed loop \
(--max): --events events (or --duration seconds) as fast as the pipeline takes them, after a discarded --warmup \
run, then a latency phase of --latency-seconds at half that rate (its latencies go to --plot and --hlog). --rate R \
releases the events on the wall clock at R per second (event time advancing at the same rate) for --events events or \
--duration seconds, after --warmup seconds whose results are not measured. --find-max-rate ramps --rate (default \
100 000) with steps of --duration (default --latency-seconds, at least two window spans and a second). --seed seeds \
the generator.";

/// `sluice-bench nexmark`'s line in `sluice-bench --help`, naming the queries of
/// [`Query::ALL`].
#[must_use]
pub fn about() -> String {
    format!("Events per second and result latency of a Nexmark query ({})", Query::listing())
}

/// Options of `sluice-bench nexmark` (its `--help` says what it makes of the shared ones).
#[derive(Debug, Clone, Args)]
#[command(after_help = SHARED_HELP)]
pub struct NexmarkArgs {
    /// The query to run
    #[arg(long, value_name = "QUERY")]
    pub query: Query,
    /// Events to generate (people, auctions and bids together)
    #[arg(long, default_value_t = 10_000_000, value_name = "N", conflicts_with = "duration",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub events: u64,
    /// Without --rate: events per second of event time
    #[arg(long, default_value_t = 10_000_000, value_name = "EVENTS_PER_SEC",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub event_rate: u64,
    /// Events per out-of-order group (1: in time order); the watermark allows for them
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub out_of_order_group: u64,
    /// Tumbling window (q7, q8) and sliding window (q5) size, ms
    #[arg(long, default_value_t = 10_000, value_name = "MS", value_parser = clap::value_parser!(i64).range(1..))]
    pub window_ms: i64,
    /// q5's window slide, ms (at most --window-ms)
    #[arg(long, default_value_t = 2_000, value_name = "MS", value_parser = clap::value_parser!(i64).range(1..))]
    pub slide_ms: i64,
    /// Records per batch (the pipeline's batch_records)
    #[arg(long, default_value_t = PipelineConfig::DEFAULT_BATCH_RECORDS, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub batch: usize,
    /// Without --rate: seconds of a latency phase at half the measured rate (0: none);
    /// with --find-max-rate and no --duration, each step's seconds
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS")]
    pub latency_seconds: f64,
    /// Throughput runs, each side's best its figure [default: 1, or 3 with --scaling]
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub rounds: Option<usize>,
    /// Also run the query at one shard in each throughput round, alternating with the
    /// --shards run (default with this: one per CPU), and report scaling_efficiency =
    /// rate(N) / (N x rate(1))
    #[arg(long)]
    pub scaling: bool,
    #[command(flatten)]
    pub run: RunArgs,
}

impl NexmarkArgs {
    /// `--shards` (default 1; with `--scaling`, one per CPU this process may run on).
    pub fn shards(&self) -> usize {
        match self.scaling {
            true => self.run.shards.unwrap_or_else(|| core_affinity::get_core_ids().map_or(1, |ids| ids.len().max(1))),
            false => self.run.shards_or(1),
        }
    }

    /// `--rounds` (default 1; 3 with `--scaling`).
    pub fn rounds(&self) -> usize {
        self.rounds.unwrap_or(if self.scaling { 3 } else { 1 })
    }
}

/// Events enough that no `--duration` throughput run reaches them.
const UNBOUNDED_EVENTS: u64 = 1 << 50;

/// Result of `sluice-bench nexmark`; this is the `--json` schema.
#[derive(Debug, Clone, Serialize)]
pub struct NexmarkReport {
    /// Always `"nexmark"`.
    pub workload: &'static str,
    /// `--query`.
    pub query: Query,
    /// `--shards`.
    pub shards: usize,
    /// `--seed`, `--duration` and `--warmup` as used.
    #[serde(flatten)]
    pub run: RunInfo,
    /// `--events` (or what `--duration` let through; with `--rate`, the warm-up's
    /// included).
    pub events: u64,
    /// Events per second through the query: in the throughput mode, from every shard
    /// being ready to the last result; with `--rate`, the rate achieved.
    pub events_per_sec: f64,
    /// `events_per_sec / shards`.
    pub events_per_sec_per_shard: f64,
    /// Results the sinks received.
    pub results: u64,
    /// Result latency, microseconds: from `--rate` runs and the latency phase (none if no
    /// result completed on the schedule).
    pub latency_us: Option<LatencySummary>,
    /// Results of the latency run emitted before they were complete on the schedule
    /// (windows the end of the input fired early): not in `latency_us`.
    pub incomplete_results: Option<u64>,
    /// The offered rate `latency_us` was measured at, events per second.
    pub latency_rate: Option<u64>,
    /// `--rate`.
    pub rate: Option<u64>,
    /// Events per second of event time in the throughput run.
    pub event_rate: u64,
    /// `--batch`.
    pub batch_records: usize,
    /// The latency distribution, for `sluice-bench report --plot`.
    pub latency_curve: Option<Curve>,
    /// `--find-max-rate`: the bound, every step, and the highest rate within it.
    #[serde(flatten)]
    pub search: RateSearch,
    /// Throughput rounds run (`--rounds`; 1 with `--rate`).
    pub rounds: usize,
    /// Events per second at `--shards` in every throughput round, in order.
    pub round_events_per_sec: Vec<f64>,
    /// `--scaling`: the one-shard rates and `scaling_efficiency`.
    #[serde(flatten)]
    pub scaling: Scaling,
}

/// One run of a query.
#[derive(Debug, Clone)]
pub struct QueryRun {
    /// From every shard ready (or the schedule's start) to the last sink's end.
    pub elapsed: Duration,
    /// Results received.
    pub results: u64,
    /// Events the sources emitted.
    pub events: u64,
    /// Their latencies, when paced.
    pub latency: Option<LatencyRecorder>,
    /// When paced, results emitted before they were complete on the schedule.
    pub incomplete: u64,
}

/// Runs the workload as `args` say.
///
/// # Errors
///
/// Bad options or a pipeline that failed.
pub fn run(args: &NexmarkArgs) -> anyhow::Result<NexmarkReport> {
    let params = QueryParams { window_ms: args.window_ms, slide_ms: args.slide_ms, ..QueryParams::default() };
    args.query.check(&params).map_err(|problem| anyhow!("{}: {problem}", args.query))?;
    ensure!(args.latency_seconds.is_finite() && args.latency_seconds >= 0.0, "--latency-seconds must be 0 or more");
    let opts = &args.run;
    let _metrics = opts.serve_metrics()?;
    let shards = args.shards();
    let mut report = NexmarkReport {
        workload: "nexmark",
        query: args.query,
        shards,
        run: opts.info(opts.duration),
        events: args.events,
        events_per_sec: 0.0,
        events_per_sec_per_shard: 0.0,
        results: 0,
        latency_us: None,
        incomplete_results: None,
        latency_rate: opts.rate,
        rate: opts.rate,
        event_rate: opts.rate.unwrap_or(args.event_rate),
        batch_records: args.batch,
        latency_curve: None,
        search: RateSearch::default(),
        rounds: 1,
        round_events_per_sec: Vec::new(),
        scaling: Scaling::default(),
    };
    ensure!(
        (opts.rate.is_none() && !opts.find_max_rate) || (!args.scaling && args.rounds.is_none()),
        "--scaling and --rounds measure throughput: run them without --rate and --find-max-rate"
    );
    if opts.find_max_rate {
        return find_max_rate(args, &params, report);
    }
    if let Some(rate) = opts.rate {
        let events = match opts.duration {
            Some(seconds) => ((rate as f64 * seconds) as u64).max(1),
            None => args.events,
        };
        let run = paced_run(args, &params, rate, events)?;
        report.events = run.events;
        report.events_per_sec = run.achieved;
        report.events_per_sec_per_shard = run.achieved / shards as f64;
        report.results = run.query.results;
        keep_latency(args, &mut report, &run, rate)?;
        return Ok(report);
    }
    throughput_rounds(args, &params, &mut report)?;
    if args.latency_seconds > 0.0 {
        let rate = ((report.events_per_sec / 2.0) as u64).max(1);
        let seconds = latency_seconds(args, &params, args.latency_seconds);
        let run = paced_run(args, &params, rate, ((rate as f64 * seconds) as u64).max(1))?;
        keep_latency(args, &mut report, &run, rate)?;
    } else {
        opts.refuse_latency_files("--latency-seconds 0 skips the latency phase")?;
    }
    Ok(report)
}

/// The throughput rounds: each runs the query at `--shards` and (`--scaling`) at one shard;
/// the best round is the figure.
fn throughput_rounds(args: &NexmarkArgs, params: &QueryParams, report: &mut NexmarkReport) -> anyhow::Result<()> {
    let (opts, shards) = (&args.run, report.shards);
    if args.scaling {
        report.scaling = Scaling::to(shards)?;
    }
    let generator = NexmarkGenerator::new(config(args, report.event_rate))?;
    let run = |shards: usize, limit: Option<Duration>| match limit {
        Some(limit) => {
            run_query(args.query, generator, params, UNBOUNDED_EVENTS, shards, args.batch, None, Some(limit))
        }
        None => run_query(args.query, generator, params, args.events, shards, args.batch, None, None),
    };
    let rate = |run: &QueryRun| run.events as f64 / run.elapsed.as_secs_f64().max(1e-9);
    if opts.warmup > 0.0 {
        // A discarded throughput run of --warmup seconds.
        run(shards, Some(opts.warmup())).context("the warm-up run")?;
    }
    report.rounds = args.rounds();
    for _ in 0..report.rounds {
        let many = run(shards, opts.duration())?;
        (report.events, report.results) = (many.events, many.results);
        report.round_events_per_sec.push(rate(&many));
        if report.scaling.is_on() {
            let one = run(1, opts.duration()).context("the one-shard run of --scaling")?;
            report.scaling.push(rate(&many), rate(&one));
        }
    }
    report.events_per_sec = report.round_events_per_sec.iter().copied().fold(0.0, f64::max);
    report.events_per_sec_per_shard = report.events_per_sec / shards as f64;
    report.scaling.finish(report.events_per_sec);
    Ok(())
}

/// The generator's configuration at `events_per_sec`, seeded by `--seed`.
fn config(args: &NexmarkArgs, events_per_sec: u64) -> NexmarkConfig {
    NexmarkConfig {
        seed: args.run.seed,
        events_per_sec,
        out_of_order_group_size: args.out_of_order_group,
        ..NexmarkConfig::default()
    }
}

/// A latency phase's length: `seconds`, but long enough for results to complete on the
/// schedule (two spans and a second, for spans up to a minute; q17's day is left to
/// `--rate` runs).
fn latency_seconds(args: &NexmarkArgs, params: &QueryParams, seconds: f64) -> f64 {
    let span_ms = args.query.span_ms(params);
    if span_ms <= 60_000 { seconds.max((2 * span_ms + 1000) as f64 / 1000.0) } else { seconds }
}

/// A paced run and the rate it achieved after the warm-up.
struct PacedRun {
    query: QueryRun,
    events: u64,
    achieved: f64,
}

/// Releases `events` events (plus `--warmup`'s) at `rate` per second; results due within
/// the warm-up are not measured.
fn paced_run(args: &NexmarkArgs, params: &QueryParams, rate: u64, events: u64) -> anyhow::Result<PacedRun> {
    let warmup_events = (rate as f64 * args.run.warmup) as u64;
    let total = events.saturating_add(warmup_events);
    let generator = NexmarkGenerator::new(config(args, rate))?;
    let warmup = args.run.warmup();
    let query = run_query(args.query, generator, params, total, args.shards(), args.batch, Some(warmup), None)?;
    let achieved = events as f64 / query.elapsed.saturating_sub(warmup).as_secs_f64().max(1e-9);
    Ok(PacedRun { query, events: total, achieved })
}

/// Puts a paced run's latencies in the report, and writes `--plot` and `--hlog`.
fn keep_latency(args: &NexmarkArgs, report: &mut NexmarkReport, run: &PacedRun, rate: u64) -> anyhow::Result<()> {
    let latency = run.query.latency.as_ref().filter(|l| !l.is_empty());
    report.latency_us = latency.map(LatencyRecorder::summary);
    report.latency_rate = Some(rate);
    report.incomplete_results = Some(run.query.incomplete);
    match latency {
        Some(l) => {
            let label = format!("nexmark {}, {} shards, {rate} events/s", args.query, report.shards);
            report.latency_curve = Some(args.run.write_latency(l, "nexmark: result latency", &label)?);
        }
        None => args.run.refuse_latency_files("no result completed on the schedule")?,
    }
    Ok(())
}

/// `--find-max-rate`: ramps the offered rate ([`RunArgs::find_max_rate`]), each step as
/// long as a latency phase.
fn find_max_rate(args: &NexmarkArgs, params: &QueryParams, mut report: NexmarkReport) -> anyhow::Result<NexmarkReport> {
    let opts = &args.run;
    let seconds = latency_seconds(args, params, opts.duration.unwrap_or(args.latency_seconds));
    ensure!(seconds > 0.0, "--find-max-rate needs --duration (or --latency-seconds) > 0");
    let title = format!("nexmark {}: result latency per offered rate", args.query);
    let search = opts.find_max_rate(100_000, &title, "events/s", |rate| {
        let run = paced_run(args, params, rate, ((rate as f64 * seconds) as u64).max(1))?;
        Ok((run.achieved, run.query.latency.unwrap_or_default()))
    })?;
    report.run.duration = Some(seconds);
    report.rate = None;
    report.events_per_sec = search.best_achieved();
    report.events_per_sec_per_shard = report.events_per_sec / report.shards as f64;
    report.search = search;
    Ok(report)
}

/// Runs `query` over `events` events of `generator` on `shards` shards. `paced: Some(W)`
/// releases them on the wall clock at the generator's rate and measures result latency,
/// except for results due within the first `W` of the schedule (the warm-up); `limit`
/// ends an unpaced run's sources that long after their first poll.
///
/// # Errors
///
/// A pipeline that failed.
#[allow(clippy::too_many_arguments)]
pub fn run_query(
    query: Query,
    generator: NexmarkGenerator,
    params: &QueryParams,
    events: u64,
    shards: usize,
    batch: usize,
    paced: Option<Duration>,
    limit: Option<Duration>,
) -> anyhow::Result<QueryRun> {
    let warmup = paced;
    let paced = paced.is_some();
    let emitted = Arc::new(AtomicU64::new(0));
    let source_emitted = emitted.clone();
    let ends: Arc<Mutex<Vec<SinkEnd>>> = Arc::new(Mutex::new(Vec::new()));
    let starts: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::new()));
    let ready = Arc::new(Barrier::new(shards));
    let epoch = Instant::now() + PACED_START_DELAY;
    let params = *params;
    let config = PipelineConfig { batch_records: batch, ..PipelineConfig::with_shards(shards) };
    let (sink_ends, shard_starts) = (ends.clone(), starts.clone());
    let running = Pipeline::new(config)
        .spawn(move |scope| {
            let events = match limit {
                Some(limit) => {
                    let source = NexmarkSource::new(generator, scope.shard(), scope.shards(), events);
                    let source = TimeBound::new(source, limit, source_emitted.clone());
                    scope.source(source, NexmarkSource::watermarks(&generator))
                }
                None => NexmarkSource::stream(scope, generator, events, paced.then_some(epoch)),
            };
            let latency = warmup.map(|warmup| (epoch, warmup));
            let sink = ResultSink::new(generator, latency, query.completion_delay_ms(), sink_ends.clone());
            query.build(events, &params, &sink);
            ready.wait();
            shard_starts.lock().unwrap_or_else(PoisonError::into_inner).push(Instant::now());
        })
        .with_context(|| format!("starting nexmark {query}"))?;
    let metrics = running.metric_source("nexmark");
    crate::harness::metrics::register(&metrics);
    running.join().with_context(|| format!("running nexmark {query}"))?;
    let ends = std::mem::take(&mut *ends.lock().unwrap_or_else(PoisonError::into_inner));
    ensure!(ends.len() == shards, "{} of {shards} shards' sinks ended", ends.len());
    let mut latency = paced.then(|| LatencyRecorder::with_intervals(epoch, HLOG_INTERVAL));
    let (mut results, mut incomplete) = (0, 0);
    for end in &ends {
        results += end.results;
        incomplete += end.incomplete;
        if let (Some(all), Some(shard)) = (&mut latency, &end.latency) {
            all.merge(shard);
        }
    }
    let started = if paced {
        epoch
    } else {
        let starts = starts.lock().unwrap_or_else(PoisonError::into_inner);
        starts.iter().copied().min().context("no shard started")?
    };
    let ended = ends.iter().map(|e| e.at).max().context("no shard ended")?;
    let events = if limit.is_some() { emitted.load(Ordering::Relaxed) } else { events };
    Ok(QueryRun { elapsed: ended.saturating_duration_since(started), results, events, latency, incomplete })
}

impl NexmarkReport {
    /// The human-readable form of the report.
    pub fn table(&self) -> Table {
        let Self { query, shards, events, batch_records, event_rate, .. } = self;
        let mode = match self.rate {
            Some(rate) => format!("{rate} events/s offered"),
            None => format!("as fast as possible, {event_rate} events/s of event time"),
        };
        let mut table = Table::titled(format!(
            "nexmark {query}: {shards} shards, {events} events, batches of {batch_records}, {mode}, {}",
            self.run.describe()
        ));
        let name = if self.rate.is_some() { "events (achieved)" } else { "events" };
        table.row(name, format!("{:.0}", self.events_per_sec), "events/s");
        table.row("per shard", format!("{:.0}", self.events_per_sec_per_shard), "events/s");
        if self.round_events_per_sec.len() > 1 {
            let rounds: Vec<String> = self.round_events_per_sec.iter().map(|r| format!("{:.2}", r / 1e6)).collect();
            table.row("rounds", rounds.join(" "), "M events/s");
        }
        self.scaling.rows(&mut table);
        table.row("results", self.results, "");
        if let Some(l) = &self.latency_us {
            if self.rate.is_none()
                && let Some(rate) = self.latency_rate
            {
                table.row("latency phase offered", rate, "events/s (half the measured rate)");
            }
            table.latency_rows("result latency", l);
        }
        if let Some(n) = self.incomplete_results.filter(|n| *n > 0) {
            table.row("results fired early by the input's end", n, "(not in the latency)");
        }
        self.search.rows(&mut table, "events/s");
        table
    }
}
