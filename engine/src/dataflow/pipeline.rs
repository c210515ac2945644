//! [`Pipeline`]: starting a dataflow on every shard, and waiting for or stopping it.

use std::{panic::AssertUnwindSafe, sync::Arc, thread::JoinHandle, time::Duration};

use futures_lite::FutureExt;
use sluice_io::EventTime;

use super::{
    Output, Scope, Stream,
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
}

/// A pipeline started with [`Pipeline::spawn`].
#[derive(Debug)]
pub struct RunningPipeline {
    threads: Vec<JoinHandle<std::result::Result<(), String>>>,
    stop: Arc<StopFlag>,
    shared: Arc<Shared>,
}

/// glommio's registered I/O memory per pipeline executor: pipelines do no direct I/O of
/// their own (topics are read and written by the engine's shards), so the minimum.
const IO_MEMORY: usize = 64 << 10;

impl Pipeline {
    /// A pipeline with `config`.
    #[must_use]
    pub fn new(config: PipelineConfig) -> Self {
        Pipeline { config }
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
            let handle = glommio::LocalExecutorBuilder::new(placement)
                .name(&format!("sluice-pipeline-{shard}"))
                .io_memory(IO_MEMORY)
                .ring_depth(32)
                .spawn(move || async move {
                    // A panic in a user function (or a graph built differently here) fails
                    // the whole pipeline: the other shards stop instead of waiting forever
                    // for this one's records.
                    let built = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        let scope = Scope::new(shard, config, shared);
                        build(&scope);
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
                        format!("pipeline shard {shard}: {message}")
                    })
                })
                .map_err(|e| EngineError::InvalidConfig(format!("starting pipeline shard {shard}: {e}")))?;
            threads.push(std::thread::spawn(move || {
                handle.join().map_err(|e| format!("pipeline shard {shard}: {e}")).and_then(|ran| ran)
            }));
        }
        Ok(RunningPipeline { threads, stop, shared })
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
                Ok(Err(e)) => failures.push(e),
                Err(_) => failures.push("a pipeline shard's thread panicked".into()),
            }
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
        self.add_input(Box::new(SourceInput::new(
            source,
            strategy,
            config.batch_records,
            config.processing_tick,
            out.clone(),
        )));
        self.stream(out)
    }
}
