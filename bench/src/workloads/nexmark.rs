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

use std::{
    path::PathBuf,
    sync::{Arc, Barrier, Mutex, PoisonError},
    time::{Duration, Instant},
};

use anyhow::{Context as _, ensure};
use clap::{Args, builder::RangedU64ValueParser};
use serde::Serialize;
use sluice_engine::dataflow::{Event as Timed, Operator, Pipeline, PipelineConfig, Stream};
use sluice_io::EventTime;

use crate::{
    harness::{LatencyRecorder, LatencySummary, Table},
    nexmark::{self, NexmarkConfig, NexmarkGenerator, NexmarkSource, Query, QueryParams, ResultSink},
};

/// How long after the pipeline starts a paced schedule begins, so every shard is up first.
const PACED_START_DELAY: Duration = Duration::from_millis(50);

/// Options of `sluice-bench nexmark`.
#[derive(Debug, Clone, Args)]
pub struct NexmarkArgs {
    /// The query to run
    #[arg(long, value_name = "QUERY")]
    pub query: Query,
    /// Events to generate (people, auctions and bids together)
    #[arg(long, default_value_t = 10_000_000, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub events: u64,
    /// Shards running the pipeline, each a glommio executor pinned to a CPU
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub shards: usize,
    /// Latency mode: release the events at this rate (events/s, open loop; event time
    /// advances at the same rate) and report result latency
    #[arg(long, value_name = "EVENTS_PER_SEC", value_parser = clap::value_parser!(u64).range(1..))]
    pub rate: Option<u64>,
    /// Without --rate: events per second of event time
    #[arg(long, default_value_t = 10_000_000, value_name = "EVENTS_PER_SEC",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub event_rate: u64,
    /// Seed of the generated data
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
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
    /// Without --rate: seconds of a latency phase at half the measured rate (0: none)
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS")]
    pub latency_seconds: f64,
    /// Also write the report as JSON to this file
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

/// Result of `sluice-bench nexmark`; this is the `--json` schema.
#[derive(Debug, Clone, Serialize)]
pub struct NexmarkReport {
    /// Always `"nexmark"`.
    pub workload: &'static str,
    /// `--query`.
    pub query: Query,
    /// `--shards`.
    pub shards: usize,
    /// `--events`.
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
    /// `--seed`.
    pub seed: u64,
    /// `--batch`.
    pub batch_records: usize,
}

/// One run of a query.
#[derive(Debug, Clone)]
pub struct QueryRun {
    /// From every shard ready (or the schedule's start) to the last sink's end.
    pub elapsed: Duration,
    /// Results received.
    pub results: u64,
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
    ensure!(
        args.query != Query::Q5 || args.slide_ms <= args.window_ms,
        "q5: --slide-ms ({}) must not exceed --window-ms ({})",
        args.slide_ms,
        args.window_ms
    );
    ensure!(args.latency_seconds.is_finite() && args.latency_seconds >= 0.0, "--latency-seconds must be 0 or more");
    let params = QueryParams { window_ms: args.window_ms, slide_ms: args.slide_ms, ..QueryParams::default() };
    let config = |events_per_sec| NexmarkConfig {
        seed: args.seed,
        events_per_sec,
        out_of_order_group_size: args.out_of_order_group,
        ..NexmarkConfig::default()
    };
    let mut report = NexmarkReport {
        workload: "nexmark",
        query: args.query,
        shards: args.shards,
        events: args.events,
        events_per_sec: 0.0,
        events_per_sec_per_shard: 0.0,
        results: 0,
        latency_us: None,
        incomplete_results: None,
        latency_rate: args.rate,
        rate: args.rate,
        event_rate: args.rate.unwrap_or(args.event_rate),
        seed: args.seed,
        batch_records: args.batch,
    };
    let generator = NexmarkGenerator::new(config(report.event_rate))?;
    let run = run_query(args.query, generator, &params, args.events, args.shards, args.batch, args.rate.is_some())?;
    report.events_per_sec = args.events as f64 / run.elapsed.as_secs_f64().max(1e-9);
    report.events_per_sec_per_shard = report.events_per_sec / args.shards as f64;
    report.results = run.results;
    report.latency_us = run.latency.filter(|l| !l.is_empty()).map(|l| l.summary());
    report.incomplete_results = args.rate.map(|_| run.incomplete);
    if args.rate.is_none() && args.latency_seconds > 0.0 {
        let rate = ((report.events_per_sec / 2.0) as u64).max(1);
        // Long enough for results to complete on the schedule: two spans and a second,
        // for spans up to a minute (q17's day is left to --rate runs).
        let span_ms = args.query.span_ms(&params);
        let seconds = if span_ms <= 60_000 {
            args.latency_seconds.max((2 * span_ms + 1000) as f64 / 1000.0)
        } else {
            args.latency_seconds
        };
        let events = ((rate as f64 * seconds) as u64).max(1);
        let generator = NexmarkGenerator::new(config(rate))?;
        let run = run_query(args.query, generator, &params, events, args.shards, args.batch, true)?;
        report.latency_us = run.latency.filter(|l| !l.is_empty()).map(|l| l.summary());
        report.latency_rate = Some(rate);
        report.incomplete_results = Some(run.incomplete);
    }
    Ok(report)
}

/// Runs `query` over `events` events of `generator` on `shards` shards; `paced` releases
/// them on the wall clock at the generator's rate and measures result latency.
///
/// # Errors
///
/// A pipeline that failed.
pub fn run_query(
    query: Query,
    generator: NexmarkGenerator,
    params: &QueryParams,
    events: u64,
    shards: usize,
    batch: usize,
    paced: bool,
) -> anyhow::Result<QueryRun> {
    let ends: Arc<Mutex<Vec<SinkEnd>>> = Arc::new(Mutex::new(Vec::new()));
    let starts: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::new()));
    let ready = Arc::new(Barrier::new(shards));
    let epoch = Instant::now() + PACED_START_DELAY;
    let params = *params;
    let config = PipelineConfig { batch_records: batch, ..PipelineConfig::with_shards(shards) };
    let (sink_ends, shard_starts) = (ends.clone(), starts.clone());
    Pipeline::new(config)
        .run(move |scope| {
            let events = NexmarkSource::stream(scope, generator, events, paced.then_some(epoch));
            let sink = BenchSink {
                generator,
                latency: paced.then_some(epoch),
                delay_ms: query.completion_delay_ms(),
                ends: sink_ends.clone(),
            };
            nexmark::build(query, events, &params, &sink);
            ready.wait();
            shard_starts.lock().unwrap_or_else(PoisonError::into_inner).push(Instant::now());
        })
        .with_context(|| format!("running nexmark {query}"))?;
    let ends = std::mem::take(&mut *ends.lock().unwrap_or_else(PoisonError::into_inner));
    ensure!(ends.len() == shards, "{} of {shards} shards' sinks ended", ends.len());
    let mut latency = paced.then(LatencyRecorder::new);
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
    Ok(QueryRun { elapsed: ended.saturating_duration_since(started), results, latency, incomplete })
}

/// What each shard's sink hands back when its stream ends.
#[derive(Debug)]
struct SinkEnd {
    results: u64,
    incomplete: u64,
    latency: Option<LatencyRecorder>,
    at: Instant,
}

/// Attaches a [`CountingSink`] to whatever a query produces.
struct BenchSink {
    generator: NexmarkGenerator,
    latency: Option<Instant>,
    delay_ms: i64,
    ends: Arc<Mutex<Vec<SinkEnd>>>,
}

impl ResultSink for BenchSink {
    fn attach<T: 'static>(&self, results: Stream<T>) {
        results.attach(CountingSink {
            generator: self.generator,
            latency: self.latency.map(|epoch| (epoch, LatencyRecorder::new())),
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
    latency: Option<(Instant, LatencyRecorder)>,
    delay_ms: i64,
    results: u64,
    incomplete: u64,
    ends: Arc<Mutex<Vec<SinkEnd>>>,
}

impl<T> Operator<T> for CountingSink {
    fn on_batch(&mut self, batch: &mut Vec<Timed<T>>) {
        self.results += batch.len() as u64;
        if let Some((epoch, latency)) = &mut self.latency {
            let now = Instant::now();
            for result in batch.iter() {
                let complete = EventTime::from_millis(result.time.millis().saturating_add(self.delay_ms));
                let due = NexmarkSource::scheduled_at(&self.generator, *epoch, complete);
                if due > now {
                    // Fired by the end of the input before its window ended.
                    self.incomplete += 1;
                } else {
                    latency.record(now - due);
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
            latency: self.latency.as_ref().map(|(_, l)| l.clone()),
            at: Instant::now(),
        };
        self.ends.lock().unwrap_or_else(PoisonError::into_inner).push(end);
    }
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
            "nexmark {query}: {shards} shards, {events} events, batches of {batch_records}, {mode}"
        ));
        let name = if self.rate.is_some() { "events (achieved)" } else { "events" };
        table.row(name, format!("{:.0}", self.events_per_sec), "events/s");
        table.row("per shard", format!("{:.0}", self.events_per_sec_per_shard), "events/s");
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
        table
    }
}
