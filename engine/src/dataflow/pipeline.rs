//! [`Pipeline`]: starting a dataflow on every shard, and waiting for or stopping it.

use std::{panic::AssertUnwindSafe, sync::Arc, thread::JoinHandle, time::Duration};

use futures_lite::FutureExt;
use sluice_io::{CheckpointId, EventTime};

use super::{
    Output, Scope, Stream,
    checkpoint::{
        self, CheckpointConfig, CheckpointCoordinator, CheckpointError, CheckpointStats, ShardCheckpoint,
        run_coordinator,
    },
    driver::{self, StopFlag},
    metrics::Metrics,
    scope::Shared,
    source::{Source, SourceInput},
    watermark::WatermarkStrategy,
};
use crate::{
    error::{EngineError, Result},
    ring::RingConfig,
};

/// A pipeline's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelineConfig {
    /// Shards (threads, each a glommio executor pinned to a CPU) running the pipeline.
    /// Default: the CPUs available.
    pub shards: usize,
    /// Pin shard `i` to CPU `i mod cpus`. Default true.
    pub pin: bool,
    /// The rings of every exchange.
    pub ring: RingConfig,
    /// Records per batch: what a source pulls at once and what an exchange sends per ring
    /// message. Default 1024.
    pub batch_records: usize,
    /// Key groups keys hash into; each shard owns a contiguous range. Fixed for the life of
    /// a pipeline's state. Default 128.
    pub key_groups: u32,
    /// How often processing-time watermarks advance while no records arrive. Default 10 ms.
    pub processing_tick: Duration,
    /// How long a busy shard may hold its latest watermark back from the other shards'
    /// rings (every `key_by` and `combine_by` exchange): within that time only the last
    /// advance crosses, as one ring message, instead of one per source batch (with many
    /// shards, one per other shard and batch). A shard that runs out of work, or sends
    /// records, a barrier or the end across a ring, sends the watermark it holds first, so
    /// records never overtake it and an idle shard holds nothing. Default
    /// `Duration::ZERO`: every advance crosses at once (tuning.md has what holding cost
    /// and saved here).
    pub watermark_interval: Duration,
}

impl PipelineConfig {
    /// Default [`PipelineConfig::batch_records`].
    pub const DEFAULT_BATCH_RECORDS: usize = 1024;
    /// Default [`PipelineConfig::key_groups`].
    pub const DEFAULT_KEY_GROUPS: u32 = 128;

    /// The defaults with `shards` shards.
    #[must_use]
    pub fn with_shards(shards: usize) -> Self {
        PipelineConfig { shards, ..Self::default() }
    }
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            shards: core_affinity::get_core_ids().map_or(1, |ids| ids.len().max(1)),
            pin: true,
            ring: RingConfig::default(),
            batch_records: Self::DEFAULT_BATCH_RECORDS,
            key_groups: Self::DEFAULT_KEY_GROUPS,
            processing_tick: Duration::from_millis(10),
            watermark_interval: Duration::ZERO,
        }
    }
}

/// A dataflow to run on every shard.
#[derive(Debug, Clone)]
pub struct Pipeline {
    config: PipelineConfig,
    checkpoints: Option<CheckpointConfig>,
}

/// Why one shard of a pipeline stopped: the panic of a user function, a graph built
/// differently there, or an executor that failed.
#[derive(Debug, thiserror::Error)]
#[error("pipeline shard {shard}: {message}")]
pub(crate) struct ShardFailure {
    shard: usize,
    message: String,
}

/// A pipeline started with [`Pipeline::spawn`].
#[derive(Debug)]
pub struct RunningPipeline {
    threads: Vec<JoinHandle<std::result::Result<(), ShardFailure>>>,
    stop: Arc<StopFlag>,
    shared: Arc<Shared>,
    coordinator: Option<(Arc<CheckpointCoordinator>, JoinHandle<()>)>,
}

/// glommio's registered I/O memory per pipeline executor: pipelines do no direct I/O of
/// their own (topics are read and written by the engine's shards), so the minimum.
const IO_MEMORY: usize = 64 << 10;

impl Pipeline {
    /// A pipeline with `config`.
    #[must_use]
    pub fn new(config: PipelineConfig) -> Self {
        Pipeline { config, checkpoints: None }
    }

    /// Takes checkpoints as `config` says, and restores from the last completed one in its
    /// directory when there is one (see [`checkpoint`](super::checkpoint)).
    ///
    /// Every source must be able to resume from a position (a topic, a generator) and
    /// every stateful operator's keys and state (a join's records too) must be
    /// [`Data`](super::Data). A source that cannot resume is refused.
    #[must_use]
    pub fn checkpointing(mut self, config: CheckpointConfig) -> Self {
        self.checkpoints = Some(config);
        self
    }

    /// Starts the checkpoint coordinator's thread: it opens the checkpoint directory,
    /// reads what to restore, and then takes checkpoints.
    fn start_coordinator(
        &self,
        checkpoints: &CheckpointConfig,
    ) -> Result<(Arc<CheckpointCoordinator>, JoinHandle<()>)> {
        checkpoints.validate()?;
        let shards = self.config.shards;
        let key_groups = self.config.key_groups;
        let config = checkpoints.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .name("sluice-checkpoints")
            .io_memory(IO_MEMORY)
            .ring_depth(32)
            .spawn(move || async move {
                let reading = std::time::Instant::now();
                let opened = checkpoint::open_store(&config).await.and_then(|(store, restored)| match &restored {
                    Some(r) if r.key_groups != key_groups => {
                        Err(checkpoint::CheckpointError::KeyGroups { id: r.id, had: r.key_groups, has: key_groups })
                    }
                    _ => Ok((store, restored)),
                });
                match opened {
                    Ok((store, restored)) => {
                        let read = restored.is_some().then(|| reading.elapsed());
                        let coordinator = Arc::new(CheckpointCoordinator::new(shards, restored.map(Arc::new)));
                        *coordinator.restore_read.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = read;
                        if read.is_some() {
                            *coordinator.restore_began.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                                Some(reading);
                        }
                        let _ = tx.send(Ok(coordinator.clone()));
                        run_coordinator(coordinator, config, store).await;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| EngineError::InvalidConfig(format!("starting the checkpoint coordinator: {e}")))?;
        let coordinator = rx
            .recv()
            .map_err(|_| EngineError::Pipeline("the checkpoint coordinator stopped while starting".into()))?
            .map_err(EngineError::Checkpoint)?;
        let thread = std::thread::spawn(move || {
            let _ = handle.join();
        });
        Ok((coordinator, thread))
    }

    /// Starts the pipeline: `build` runs on every shard's thread with that shard's
    /// [`Scope`] and must build the same graph on each (the `n`-th `key_by` of one shard
    /// exchanges records with the `n`-th of the others).
    ///
    /// # Errors
    ///
    /// A bad config (no shards, no key groups, fewer key groups than shards, empty batches)
    /// or a shard that could not start. [`EngineError::Checkpoint`] when the checkpoints
    /// cannot be opened or read, or the graph is refused once every shard has built it
    /// (no shard has started then): a uid given twice, state of an operator the job lacks,
    /// a changed key or state type, state that does not decode, or an operator or source
    /// that cannot be checkpointed (see [`CheckpointError`]). [`EngineError::StateTtl`] for a
    /// keyed process state's time to live that cannot apply.
    pub fn spawn<F>(&self, build: F) -> Result<RunningPipeline>
    where
        F: Fn(&Scope) + Send + Sync + 'static,
    {
        let config = self.config;
        if config.shards == 0 || config.batch_records == 0 || config.ring.ring_capacity_batches == 0 {
            return Err(EngineError::InvalidConfig(format!(
                "pipeline needs at least one shard, record per batch and ring slot: {config:?}"
            )));
        }
        if (config.key_groups as usize) < config.shards {
            return Err(EngineError::InvalidConfig(format!(
                "{} key groups cannot be spread over {} shards",
                config.key_groups, config.shards
            )));
        }
        let coordinator = match &self.checkpoints {
            Some(c) => Some(self.start_coordinator(c)?),
            None => None,
        };
        let full_every = self.checkpoints.as_ref().map_or(1, |c| c.full_every);
        let mode = self.checkpoints.as_ref().map(|c| c.mode).unwrap_or_default();
        let allow_non_restored = self.checkpoints.as_ref().is_some_and(|c| c.allow_non_restored_state);
        let gate = Arc::new(BuildGate::new(config.shards));
        let outcomes = std::sync::mpsc::channel();
        let config = Arc::new(config);
        let build = Arc::new(build);
        let shared = Arc::new(Shared::default());
        let stop = Arc::new(StopFlag::default());
        let cpus: Vec<usize> = core_affinity::get_core_ids().unwrap_or_default().into_iter().map(|c| c.id).collect();
        let mut threads = Vec::with_capacity(config.shards);
        for shard in 0..config.shards {
            let placement = match cpus.get(shard % cpus.len().max(1)) {
                Some(&cpu) if config.pin => glommio::Placement::Fixed(cpu),
                _ => glommio::Placement::Unbound,
            };
            let (config, build, shared, shard_stop) = (config.clone(), build.clone(), shared.clone(), stop.clone());
            // Made on the shard's thread (it holds the operators' restores, which are not
            // `Send`).
            let checkpoint = coordinator.as_ref().map(|(c, _)| (c.clone(), full_every, mode));
            let ctx = ShardStart { shard, allow_non_restored, gate: gate.clone(), outcomes: outcomes.0.clone() };
            let handle = glommio::LocalExecutorBuilder::new(placement)
                .name(&format!("sluice-pipeline-{shard}"))
                .io_memory(IO_MEMORY)
                .ring_depth(32)
                .spawn(move || async move { run_shard(ctx, config, build, shared, shard_stop, checkpoint).await });
            let handle = match handle {
                Ok(handle) => handle,
                Err(e) => {
                    // The shards started wait for this one's build: let them go, failed.
                    gate.abandon();
                    stop.fail();
                    return Err(EngineError::InvalidConfig(format!("starting pipeline shard {shard}: {e}")));
                }
            };
            threads.push(std::thread::spawn(move || {
                handle.join().map_err(|e| ShardFailure { shard, message: e.to_string() }).and_then(|ran| ran)
            }));
        }
        drop(outcomes.0);
        // Every shard reports its build once (the senders drop with the threads, should a
        // shard's executor fail before it does).
        let mut refused = None;
        for _ in 0..config.shards {
            match outcomes.1.recv() {
                Ok(Some(e)) => {
                    refused.get_or_insert(e);
                }
                Ok(None) => {}
                Err(_) => break,
            }
        }
        if let Some(e) = refused {
            stop.fail();
            for thread in threads {
                let _ = thread.join();
            }
            if let Some((coordinator, thread)) = coordinator {
                coordinator.stop();
                let _ = thread.join();
            }
            return Err(e);
        }
        Ok(RunningPipeline { threads, stop, shared, coordinator })
    }

    /// Runs the pipeline until every source has ended and every record has reached its
    /// sink.
    ///
    /// # Errors
    ///
    /// As [`Pipeline::spawn`] and [`RunningPipeline::join`].
    pub fn run<F>(&self, build: F) -> Result<()>
    where
        F: Fn(&Scope) + Send + Sync + 'static,
    {
        self.spawn(build)?.join()
    }
}

/// What a shard's thread needs besides the pipeline's shared parts.
struct ShardStart {
    shard: usize,
    allow_non_restored: bool,
    gate: Arc<BuildGate>,
    /// Where the shard reports its build: `None` when it built (or panicked: `join`
    /// reports that), the error when its restore was refused.
    outcomes: std::sync::mpsc::Sender<Option<EngineError>>,
}

/// Holds every shard after its build until all have built, so that no shard starts
/// (reads a source, recovers a sink's transactions) in a pipeline another shard refused.
#[derive(Debug)]
struct BuildGate {
    shards: usize,
    state: std::sync::Mutex<(usize, bool)>,
    all: std::sync::Condvar,
}

impl BuildGate {
    fn new(shards: usize) -> BuildGate {
        BuildGate { shards, state: std::sync::Mutex::new((0, true)), all: std::sync::Condvar::new() }
    }

    /// A shard could not start: every shard waiting is let go, as failed.
    fn abandon(&self) {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *state = (self.shards, false);
        self.all.notify_all();
    }

    /// Reports this shard's build (`ok`) and waits for every shard's: whether all built.
    fn arrive(&self, ok: bool) -> bool {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.0 += 1;
        state.1 &= ok;
        self.all.notify_all();
        while state.0 < self.shards {
            state = self.all.wait(state).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        state.1
    }
}

/// One shard's life: builds its graph, restores its operators' state, waits for the
/// other shards' builds, then runs.
async fn run_shard<F>(
    ctx: ShardStart,
    config: Arc<PipelineConfig>,
    build: Arc<F>,
    shared: Arc<Shared>,
    stop: Arc<StopFlag>,
    checkpoint: Option<(Arc<CheckpointCoordinator>, u32, checkpoint::CheckpointMode)>,
) -> std::result::Result<(), ShardFailure>
where
    F: Fn(&Scope) + Send + Sync + 'static,
{
    let shard = ctx.shard;
    // A panic in a user function (or a graph built differently here) fails the whole
    // pipeline: the other shards stop instead of waiting forever for this one's records.
    let built = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let checkpoint = checkpoint.map(|(coordinator, full_every, mode)| {
            ShardCheckpoint::new(shard, config.shards, config.key_groups, coordinator, full_every, mode)
        });
        let scope = Scope::new(shard, config, shared, checkpoint);
        build(&scope);
        let unsupported = scope.checkpoint().map(|c| c.borrow().unsupported.clone()).unwrap_or_default();
        let restored = if let Some(refused) = scope.take_refusal() {
            Err(refused)
        } else if unsupported.is_empty() {
            scope.finish_build(ctx.allow_non_restored).map_err(EngineError::Checkpoint)
        } else {
            Err(EngineError::Checkpoint(CheckpointError::NotCheckpointable { what: unsupported.join(", ") }))
        };
        (scope, restored)
    }));
    let failure = |message: String| {
        stop.fail();
        ShardFailure { shard, message }
    };
    let scope = match built {
        Ok((scope, Ok(()))) => {
            // Noted before `spawn` hears of it, so the restore time is whole when it returns.
            if let Some(c) = scope.checkpoint() {
                c.borrow().coordinator.note_shard_restored();
            }
            let _ = ctx.outcomes.send(None);
            if !ctx.gate.arrive(true) {
                return Err(failure("another shard's build failed".into()));
            }
            scope
        }
        Ok((_, Err(e))) => {
            let message = e.to_string();
            let _ = ctx.outcomes.send(Some(e));
            ctx.gate.arrive(false);
            return Err(failure(message));
        }
        Err(panic) => {
            let _ = ctx.outcomes.send(None);
            ctx.gate.arrive(false);
            return Err(failure(panic_message(panic.as_ref())));
        }
    };
    drop(ctx.outcomes);
    if let Some(c) = scope.checkpoint() {
        c.borrow().coordinator.built.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
    AssertUnwindSafe(driver::run(scope, stop.clone()))
        .catch_unwind()
        .await
        .map_err(|panic| failure(panic_message(panic.as_ref())))
}

/// A panic's message.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

impl RunningPipeline {
    /// The pipeline's counters, readable while it runs and after it has finished.
    #[must_use]
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    /// The pipeline's metrics as a source a scrape gathers from (records and watermark lag
    /// per stream and shard, late records, checkpoints), every series labelled
    /// `pipeline="{name}"`: register it with an engine
    /// ([`EngineHandle::register_metrics`](crate::EngineHandle::register_metrics)) so the
    /// engine's scrape includes it, or render it with [`RunningPipeline::render_metrics`].
    /// It reads the pipeline's cells while it lives, also after the pipeline ended.
    #[must_use]
    pub fn metric_source(&self, name: &str) -> Arc<dyn crate::metrics::MetricSource> {
        Arc::new(super::metrics::PipelineMetrics {
            name: name.to_string(),
            shared: self.shared.clone(),
            coordinator: self.coordinator.as_ref().map(|(c, _)| c.clone()),
        })
    }

    /// The pipeline's metrics (labelled `pipeline="pipeline"`) as data.
    #[must_use]
    pub fn metric_families(&self) -> crate::metrics::Families {
        let mut out = crate::metrics::Families::default();
        self.metric_source("pipeline").collect(&mut out);
        out
    }

    /// The pipeline's metrics as a scrape answers them: the Prometheus text format, or
    /// OpenMetrics with `openmetrics` (for host code with its own HTTP server).
    #[must_use]
    pub fn render_metrics(&self, openmetrics: bool) -> String {
        self.metric_families().render(openmetrics)
    }

    /// Every checkpoint completed so far in this run, in order.
    #[must_use]
    pub fn checkpoints(&self) -> Vec<CheckpointStats> {
        self.coordinator.as_ref().map(|(c, _)| c.stats()).unwrap_or_default()
    }

    /// Every checkpoint of this run that failed, in order, with the reason (also logged
    /// to stderr). A failed checkpoint does not stop the pipeline: the next one begins
    /// after the interval. A checkpoint directory removed under the pipeline fails every
    /// checkpoint from then on (it is not made again: the checkpoints a delta would build
    /// on went with it); once it is back, the next whole snapshot starts a new chain.
    #[must_use]
    pub fn failed_checkpoints(&self) -> Vec<super::CheckpointFailure> {
        self.coordinator.as_ref().map(|(c, _)| c.failures()).unwrap_or_default()
    }

    /// Blocks until a checkpoint with an id above `after` has completed in this run, and
    /// returns its figures: `wait_for_checkpoint(0, ..)` waits for the first, and
    /// passing the id of the last entry of [`RunningPipeline::checkpoints`] waits for the
    /// next one. Its sinks commit what it covers right after. `None` if the pipeline does
    /// not checkpoint, if `timeout` passes, or if the pipeline takes no more checkpoints
    /// (the final one of bounded inputs is done, or the checkpoint coordinator stopped).
    #[must_use]
    pub fn wait_for_checkpoint(&self, after: CheckpointId, timeout: Duration) -> Option<CheckpointStats> {
        self.coordinator.as_ref().and_then(|(c, _)| c.wait_for(after, timeout))
    }

    /// Whether every shard has finished (so [`RunningPipeline::join`] will not wait for
    /// them).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.threads.iter().all(JoinHandle::is_finished)
    }

    /// How long reading the restored checkpoint took (its parts read, checked and merged,
    /// before any operator took its state), if this run restored.
    #[must_use]
    pub fn restore_read(&self) -> Option<Duration> {
        self.coordinator
            .as_ref()
            .and_then(|(c, _)| *c.restore_read.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// How long the restore took as a whole, if this run restored: from reading the
    /// checkpoint until the last shard had built its graph and decoded its state, ready to
    /// run ([`restore_read`](Self::restore_read) is the first part of it).
    #[must_use]
    pub fn restore_time(&self) -> Option<Duration> {
        self.coordinator
            .as_ref()
            .and_then(|(c, _)| *c.restore_ready.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// The checkpoint this run restored from, if it did.
    #[must_use]
    pub fn restored_from(&self) -> Option<CheckpointId> {
        self.coordinator.as_ref().and_then(|(c, _)| c.restored.as_ref().map(|r| r.id))
    }

    /// Takes a savepoint into `dir` (a new or empty directory) and returns once it is
    /// durable there: a checkpoint of the job, whole (not built on the job's incremental
    /// chain), copied into `dir`, and kept until deleted; the directory can be moved to
    /// another machine. A job restores from it with [`CheckpointConfig::restore_from`],
    /// at any shard count, with its operators matched by uid ([`Stream::uid`]).
    ///
    /// # Errors
    ///
    /// The pipeline does not checkpoint, another savepoint is being taken, its checkpoint
    /// was aborted (timed out, failed), or copying it into `dir` failed.
    pub fn savepoint(&self, dir: impl Into<std::path::PathBuf>) -> Result<checkpoint::Savepoint> {
        self.request_savepoint(dir.into(), false)
    }

    /// Stops the job with a savepoint: every source reads nothing after the savepoint's
    /// barrier, the savepoint is taken into `dir` (as [`RunningPipeline::savepoint`]),
    /// the sinks commit what it covers, and the sources end without draining (open
    /// windows stay in the savepoint, not fired). Returns once every shard has finished.
    ///
    /// # Errors
    ///
    /// As [`RunningPipeline::savepoint`] (the job then goes on running: stop it with
    /// [`RunningPipeline::stop`]), and as [`RunningPipeline::join`].
    pub fn stop_with_savepoint(self, dir: impl Into<std::path::PathBuf>) -> Result<checkpoint::Savepoint> {
        let savepoint = self.request_savepoint(dir.into(), true)?;
        self.join()?;
        Ok(savepoint)
    }

    fn request_savepoint(&self, dir: std::path::PathBuf, stop: bool) -> Result<checkpoint::Savepoint> {
        let Some((coordinator, _)) = &self.coordinator else {
            return Err(EngineError::InvalidConfig("a savepoint needs a pipeline that checkpoints".into()));
        };
        let (reply, answer) = std::sync::mpsc::channel();
        let requested = std::time::Instant::now();
        coordinator.request_savepoint(checkpoint::SavepointRequest { dir: dir.clone(), stop, requested, reply });
        match answer.recv() {
            Ok(result) => result.map_err(EngineError::Checkpoint),
            Err(_) => Err(EngineError::Checkpoint(CheckpointError::Savepoint {
                dir,
                reason: "the checkpoint coordinator stopped".into(),
            })),
        }
    }

    /// Asks every shard to stop its sources. With `drain`, the sources end as if their
    /// input had run out: the watermark goes to the end of time and every window fires;
    /// without, they just stop and open windows are discarded.
    pub fn stop(&self, drain: bool) {
        self.stop.stop(drain);
    }

    /// Waits for every shard to finish.
    ///
    /// # Errors
    ///
    /// A shard that panicked (a user function's panic, or a graph built differently on
    /// different shards).
    pub fn join(self) -> Result<()> {
        let mut failures = Vec::new();
        for thread in self.threads {
            match thread.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failures.push(e.to_string()),
                Err(_) => failures.push("a pipeline shard's thread panicked".into()),
            }
        }
        if let Some((coordinator, thread)) = self.coordinator {
            coordinator.stop();
            let _ = thread.join();
        }
        if failures.is_empty() { Ok(()) } else { Err(EngineError::Pipeline(failures.join("; "))) }
    }
}

impl Scope {
    /// A stream read from `source` (this shard's instance), stamped and watermarked by
    /// `strategy`.
    pub fn source<T, S, E>(&self, source: S, strategy: WatermarkStrategy<T, E>) -> Stream<T>
    where
        T: 'static,
        S: Source<T>,
        E: Fn(&T) -> EventTime + 'static,
    {
        let out = Output::port();
        let config = self.config();
        if self.checkpointing() && source.positions().is_none() {
            self.not_checkpointable(
                "a source that cannot resume from a position (such as a ChannelSource or a SharedGenerator)",
            );
        }
        let input = SourceInput::new(source, strategy, config.batch_records, config.processing_tick, out.clone());
        let mut origin = None;
        match self.checkpoint() {
            Some(c) => {
                let (input, id) = input.checkpointed(c);
                origin = Some(super::scope::Origin::Source(id));
                self.add_input(Box::new(input));
            }
            None => self.add_input(Box::new(input)),
        }
        let mut stream = self.stream(out, "source");
        stream.origin = origin;
        stream
    }
}
