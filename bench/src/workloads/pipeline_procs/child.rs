//! The hidden child mode of `sluice-bench pipeline --processes N`: one instance of the
//! job, as the parent ([`super`]) starts it (`sluice-bench pipeline-child --spec JSON`).
//!
//! The instance builds its pipeline (checkpointing into its own directory in the
//! exactly-once mode), its [`Repartition`] on fixed partitions, and prints `READY` once
//! every shard has built its graph and every reader has polled its partitions. Its
//! sources are gated: nothing is emitted until the parent writes `go EPOCH_NS` on its
//! stdin (`EPOCH_NS`: the paced schedule's start, nanoseconds since the Unix epoch).
//! Shard `s` of instance `i` generates the job's events `e` with
//! `e % (N * shards) == i * shards + s`, so the instances together generate the job's
//! events once. When every shard's sink has seen the end of event time (the watermark
//! `EventTime::MAX`, which the repartition topic carries once every writer of every
//! process has ended), every window this instance holds has fired: it prints
//! `DONE {json}` ([`ChildEnd`]) and exits (the repartition's readers never end on their
//! own).

use std::{
    collections::BTreeMap,
    future::Future,
    io::{BufRead, Write},
    path::PathBuf,
    pin::Pin,
    sync::{
        Arc, Mutex, OnceLock, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context as TaskContext, Poll},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context, ensure};
use clap::Args;
use serde::{Deserialize, Serialize};
use sluice_engine::{
    connectors::kafka::{Repartition, RepartitionConfig},
    dataflow::{
        CheckpointConfig, Event, Generator, Operator, Pipeline, PipelineConfig, ResidueSplit, Source, UserError,
        WatermarkStrategy, WindowResult, Windows,
    },
};
use sluice_io::EventTime;

use super::super::pipeline_job::{Job, Tally, WINDOW_MS};
use super::super::pipeline_sluice::PacedGenerator;
use crate::harness::LatencyRecorder;

/// `sluice-bench pipeline-child`: not for users; the parent passes the spec.
#[derive(Debug, Clone, Args)]
pub struct ChildArgs {
    /// The instance's [`ChildSpec`], as JSON.
    #[arg(long)]
    pub spec: String,
}

/// What the parent tells one instance.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildSpec {
    pub bootstrap: String,
    pub job_id: String,
    pub topic: String,
    pub instance: u32,
    pub instances: u32,
    pub shards: usize,
    pub events: u64,
    /// Paced (latency) mode: events released on the job's schedule from `go`'s epoch;
    /// otherwise as fast as the pipeline takes them.
    pub paced: bool,
    /// The job's [`Job::ps_per_event`] (the schedule, and the events' times).
    pub ps_per_event: u64,
    pub warmup_ms: u64,
    pub out_of_orderness_ms: u64,
    pub batch: usize,
    pub pin: bool,
    /// Exactly once: checkpoints into `checkpoint_dir` every `checkpoint_interval_ms`.
    pub exactly_once: bool,
    pub checkpoint_interval_ms: u64,
    pub checkpoint_dir: PathBuf,
}

impl ChildSpec {
    /// The job this instance runs a share of.
    pub fn job(&self) -> anyhow::Result<Job> {
        let job = Job::new(self.events, None, self.out_of_orderness_ms, self.batch)?
            .with_pin(self.pin)
            .with_warmup(Duration::from_millis(self.warmup_ms));
        ensure!(self.ps_per_event > 0, "a zero ps_per_event");
        ensure!(self.events.checked_mul(self.ps_per_event).is_some(), "the schedule overflows");
        Ok(Job { ps_per_event: self.ps_per_event, ..job })
    }
}

/// What a shard's sink hands over: its tally, and its latencies in the paced mode.
type ShardEnd = (Tally, Option<LatencyRecorder>);

/// What an instance reports when its windows have all fired.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ChildEnd {
    /// Window results its sinks received.
    pub results: u64,
    /// The sum of their counts.
    pub sum: u64,
    /// Results whose count differs from the job's closed form.
    pub wrong: u64,
    /// Result latencies (paced mode): the HdrHistogram, V2-serialized, hex.
    pub latency_hex: Option<String>,
    /// Checkpoints completed.
    pub checkpoints: u64,
    /// CPU seconds (user + system) by thread name, digits dropped
    /// (`sluice-pipeline`, `rdk:broker`, ...), from `/proc/self/task`.
    pub cpu_by_thread: BTreeMap<String, f64>,
}

/// Runs the child mode: never returns on success (the process exits after `DONE`).
///
/// # Errors
///
/// A bad spec, a repartition or pipeline that does not start or fails.
pub fn run(args: &ChildArgs) -> anyhow::Result<()> {
    let spec: ChildSpec = serde_json::from_str(&args.spec).context("parsing the child's --spec")?;
    let job = spec.job()?;
    let mut config = RepartitionConfig::new(&spec.bootstrap, &spec.job_id, &spec.topic, spec.instance, spec.instances);
    config.fixed_assignment = true;
    if !spec.exactly_once {
        config = config.at_least_once();
    }
    let through = Repartition::new(config).context("starting the repartition")?;
    let go: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
    let built = Arc::new(AtomicUsize::new(0));
    let ends: Arc<Mutex<Vec<ShardEnd>>> = Arc::default();
    let mut pipeline = Pipeline::new(PipelineConfig {
        batch_records: job.batch,
        pin: job.pin,
        ..PipelineConfig::with_shards(spec.shards)
    });
    if spec.exactly_once {
        let mut checkpoints = CheckpointConfig::new(&spec.checkpoint_dir);
        checkpoints.interval = Duration::from_millis(spec.checkpoint_interval_ms.max(1));
        pipeline = pipeline.checkpointing(checkpoints);
    }
    let (instance, errors) = (spec.instance as usize, Arc::new(Mutex::new(Vec::<String>::new())));
    let (build_go, build_built, build_ends, build_errors, build_through) =
        (go.clone(), built.clone(), ends.clone(), errors.clone(), through.clone());
    let readers = spec.instances as usize * spec.shards;
    let paced = spec.paced;
    // Held by the build closure, which every shard's thread keeps until it exits: once
    // this is the last reference, every shard has ended.
    let alive = Arc::new(());
    let token = alive.clone();
    let running = pipeline
        .spawn(move |scope| {
            let _ = &token;
            let residue = instance * scope.shards() + scope.shard();
            let source = Gate { go: build_go.clone(), job, paced, residue, step: readers, inner: None, timer: None };
            let strategy = WatermarkStrategy::bounded_out_of_orderness(
                Duration::from_millis(job.out_of_orderness_ms),
                move |i: &u64| EventTime::from_millis(job.time_ms(*i)),
            );
            let events = scope.source(source, strategy);
            let sink = EndSink {
                job,
                tally: Tally::default(),
                latency: paced.then(LatencyRecorder::new),
                go: build_go.clone(),
                ends: build_ends.clone(),
                done: false,
            };
            match build_through.key_by_through(events, |i: &u64| Job::default_key(*i)) {
                Ok(keyed) => {
                    keyed.window(Windows::tumbling(Duration::from_millis(WINDOW_MS as u64))).count().attach(sink)
                }
                Err(e) => build_errors.lock().unwrap_or_else(PoisonError::into_inner).push(e.to_string()),
            }
            build_built.fetch_add(1, Ordering::Release);
        })
        .context("starting the instance's pipeline")?;
    wait_ready(&built, &through, &errors, spec.shards)?;
    announce(&format!("READY {}", super::super::kafka::cpu(libc::RUSAGE_SELF).as_secs_f64()))?;
    let epoch = read_go()?;
    let _ = go.set(epoch);
    // Every shard's sink reports once the end of event time reached it.
    while ends.lock().unwrap_or_else(PoisonError::into_inner).len() < spec.shards {
        if let Some(e) = through.errors().first() {
            anyhow::bail!("instance {instance}: the repartition reported: {e}");
        }
        if Arc::strong_count(&alive) == 1 && ends.lock().unwrap_or_else(PoisonError::into_inner).len() < spec.shards {
            running.join().with_context(|| format!("instance {instance}'s pipeline"))?;
            anyhow::bail!("instance {instance}'s pipeline ended before the end of event time reached its sinks");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let end = child_end(&ends, running.checkpoints().len() as u64)?;
    announce(&format!("DONE {}", serde_json::to_string(&end)?))?;
    // The readers never end on their own; the parent has what it needs.
    std::process::exit(0);
}

/// Waits until every shard has built its graph and every reader has polled its
/// partitions (fixed ones: no group to settle).
fn wait_ready(
    built: &AtomicUsize,
    through: &Repartition,
    errors: &Mutex<Vec<String>>,
    shards: usize,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(e) = errors.lock().unwrap_or_else(PoisonError::into_inner).first() {
            anyhow::bail!("building the repartition: {e}");
        }
        let assigned = through.assignment();
        if built.load(Ordering::Acquire) == shards
            && assigned.len() == shards
            && assigned.values().all(|p| !p.is_empty())
        {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "the instance's readers did not start within 60 s: {assigned:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn announce(line: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush().context("writing to the parent")
}

/// Reads `go EPOCH_NS` from stdin: the paced schedule's start as an [`Instant`].
fn read_go() -> anyhow::Result<Instant> {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).context("reading go from the parent")?;
    let ns: u64 = line
        .strip_prefix("go ")
        .and_then(|n| n.trim().parse().ok())
        .with_context(|| format!("expected `go EPOCH_NS` from the parent, got {line:?}"))?;
    let (now, at) = (Instant::now(), SystemTime::now());
    let epoch = SystemTime::UNIX_EPOCH + Duration::from_nanos(ns);
    Ok(match epoch.duration_since(at) {
        Ok(ahead) => now + ahead,
        Err(behind) => now.checked_sub(behind.duration()).unwrap_or(now),
    })
}

/// The shards' ends merged, with the process's CPU by thread.
fn child_end(ends: &Mutex<Vec<ShardEnd>>, checkpoints: u64) -> anyhow::Result<ChildEnd> {
    let ends = ends.lock().unwrap_or_else(PoisonError::into_inner);
    let mut tally = Tally::default();
    let mut latency: Option<LatencyRecorder> = None;
    for (t, l) in ends.iter() {
        tally.merge(t);
        if let Some(l) = l {
            latency.get_or_insert_with(LatencyRecorder::new).merge(l);
        }
    }
    let latency_hex = latency.map(|l| l.to_hex()).transpose()?;
    Ok(ChildEnd {
        results: tally.results,
        sum: tally.sum,
        wrong: tally.wrong,
        latency_hex,
        checkpoints,
        cpu_by_thread: cpu_by_thread(),
    })
}

/// CPU seconds of this process's threads, by name with digits dropped.
fn cpu_by_thread() -> BTreeMap<String, f64> {
    let mut by = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return by };
    for task in tasks.flatten() {
        let (Ok(comm), Ok(stat)) =
            (std::fs::read_to_string(task.path().join("comm")), std::fs::read_to_string(task.path().join("stat")))
        else {
            continue;
        };
        let name: String = comm.trim().trim_end_matches(|c: char| c.is_ascii_digit() || c == '-').to_string();
        *by.entry(name).or_insert(0.0) += super::stat_cpu_seconds(&stat).unwrap_or(0.0);
    }
    by
}

/// A source that emits nothing until the parent's `go`, then shard `residue` of `step`'s
/// events: the engine's [`Generator`] in the throughput mode, a [`PacedGenerator`] on the
/// schedule from `go`'s epoch in the paced mode.
struct Gate {
    go: Arc<OnceLock<Instant>>,
    job: Job,
    paced: bool,
    residue: usize,
    step: usize,
    inner: Option<Box<dyn Source<u64>>>,
    timer: Option<glommio::timer::Timer>,
}

impl Source<u64> for Gate {
    fn splits(&self) -> usize {
        1
    }

    fn poll_next(&mut self, cx: &mut TaskContext<'_>, out: &mut Vec<u64>, max: usize) -> Poll<Option<usize>> {
        if self.inner.is_none() {
            match self.go.get() {
                Some(&epoch) => {
                    let (job, residue, step) = (self.job, self.residue, self.step);
                    self.inner = Some(if self.paced {
                        Box::new(PacedGenerator::new(residue, step, job, epoch))
                    } else {
                        Box::new(Generator::new(residue, step, job.events, |i| i))
                    });
                    self.timer = None;
                }
                None => {
                    let timer = self.timer.get_or_insert_with(|| glommio::timer::Timer::new(Duration::from_millis(1)));
                    if Pin::new(timer).poll(cx).is_ready() {
                        self.timer = None;
                        cx.waker().wake_by_ref();
                    }
                    return Poll::Pending;
                }
            }
        }
        self.inner.as_mut().map_or(Poll::Pending, |inner| inner.poll_next(cx, out, max))
    }

    fn positions(&self) -> Option<Vec<(u64, i64)>> {
        match &self.inner {
            Some(inner) => inner.positions(),
            None => Some(ResidueSplit::new(self.residue, self.step).positions(self.residue as u64)),
        }
    }

    fn restore(&mut self, _: &std::collections::HashMap<u64, i64>) -> Result<(), UserError> {
        Err("a benchmark instance does not restore".into())
    }
}

/// Counts and checks the results of its shard; records each one's latency in the paced
/// mode (as the workload's latency phase does: from its window's last event's scheduled
/// time to now); hands its figures over when the end of event time reaches it.
struct EndSink {
    job: Job,
    tally: Tally,
    latency: Option<LatencyRecorder>,
    go: Arc<OnceLock<Instant>>,
    ends: Arc<Mutex<Vec<ShardEnd>>>,
    done: bool,
}

impl Operator<WindowResult<u64, u64>> for EndSink {
    fn on_batch(&mut self, batch: &mut Vec<Event<WindowResult<u64, u64>>>) {
        let now = Instant::now();
        for result in batch.iter().map(|e| &e.value) {
            self.tally.add(&self.job, result.key, result.window.start.0, result.value);
            if let (Some(latency), Some(epoch)) = (&mut self.latency, self.go.get())
                && let Some(last) = self.job.last_event_of_window(result.window.start.0)
                && self.job.is_measured(last)
            {
                latency.record(now.saturating_duration_since(*epoch + self.job.scheduled(last)));
            }
        }
        batch.clear();
    }

    fn on_watermark(&mut self, watermark: EventTime) {
        if watermark == EventTime::MAX {
            self.finish();
        }
    }

    fn on_idle(&mut self, _: bool) {}

    fn on_end(&mut self) {
        self.finish();
    }
}

impl EndSink {
    fn finish(&mut self) {
        if !std::mem::replace(&mut self.done, true) {
            self.ends.lock().unwrap_or_else(PoisonError::into_inner).push((self.tally, self.latency.take()));
        }
    }
}
