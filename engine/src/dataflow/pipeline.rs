//! [`Pipeline`]: starting a dataflow on every shard, and waiting for or stopping it.

use std::{panic::AssertUnwindSafe, sync::Arc, thread::JoinHandle, time::Duration};

use futures_lite::FutureExt;
use sluice_io::{CheckpointId, EventTime};

use super::{
    Output, Scope, Stream,
    checkpoint::{self, CheckpointConfig, CheckpointCoordinator, CheckpointStats, ShardCheckpoint, run_coordinator},
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
    /// or a shard that could not start.
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
            let (config, build, shared, stop) = (config.clone(), build.clone(), shared.clone(), stop.clone());
            let checkpoint = coordinator.as_ref().map(|(c, _)| {
                ShardCheckpoint::new(shard, config.shards, config.key_groups, c.clone(), full_every, mode)
            });
            let handle = glommio::LocalExecutorBuilder::new(placement)
                .name(&format!("sluice-pipeline-{shard}"))
                .io_memory(IO_MEMORY)
                .ring_depth(32)
                .spawn(move || async move {
                    // A panic in a user function (or a graph built differently here) fails
                    // the whole pipeline: the other shards stop instead of waiting forever
                    // for this one's records.
                    let built = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        let scope = Scope::new(shard, config, shared, checkpoint);
                        build(&scope);
                        if let Some(c) = scope.checkpoint() {
                            let c = c.borrow();
                            if !c.unsupported.is_empty() {
                                panic!("checkpoints cannot include {}", c.unsupported.join(", "));
                            }
                            c.coordinator.built.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                        }
                        scope
                    }));
                    let ran = match built {
                        Ok(scope) => AssertUnwindSafe(driver::run(scope, stop.clone())).catch_unwind().await,
                        Err(panic) => Err(panic),
                    };
                    ran.map_err(|panic| {
                        stop.fail();
                        let message = panic
                            .downcast_ref::<&str>()
                            .map(|s| (*s).to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "a panic without a message".into());
                        ShardFailure { shard, message }
                    })
                })
                .map_err(|e| EngineError::InvalidConfig(format!("starting pipeline shard {shard}: {e}")))?;
            threads.push(std::thread::spawn(move || {
                handle.join().map_err(|e| ShardFailure { shard, message: e.to_string() }).and_then(|ran| ran)
            }));
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

    /// The checkpoint this run restored from, if it did.
    #[must_use]
    pub fn restored_from(&self) -> Option<CheckpointId> {
        self.coordinator.as_ref().and_then(|(c, _)| c.restored.as_ref().map(|r| r.id))
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
            self.not_checkpointable("a source that cannot resume from a position");
        }
        let input = SourceInput::new(source, strategy, config.batch_records, config.processing_tick, out.clone());
        match self.checkpoint() {
            Some(c) => self.add_input(Box::new(input.checkpointed(c))),
            None => self.add_input(Box::new(input)),
        }
        self.stream(out, "source")
    }
}
