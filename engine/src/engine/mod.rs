//! The engine: shards started from a configuration, and the handle host code uses.
//!
//! [`Engine`] owns the shard threads and the data directory's lock; [`EngineHandle`] is
//! `Send + Sync + Clone` and its async methods run on any executor (tokio, glommio, or a
//! plain thread through `futures_lite::future::block_on`): requests travel to the owning
//! shard over bounded channels and replies come back the same way.

mod data;
pub mod groups;
mod topics;

pub use topics::PARTITIONS_MAX;

use std::fs::File;
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;

use crate::config::{EngineConfig, TopicConfig};
use crate::error::{EngineError, Result};
use crate::group::offsets::{self};
use crate::shard::{self, Batching, Request};
use crate::topic::meta::{Layout, Metadata, TopicId, TopicMeta, assign_shards};
use sluice_io::PartitionId;

/// The most bytes a shard batches from single-record sends before appending.
const BATCH_BYTES_MAX: usize = 1 << 20;

/// A running engine. Dropping it shuts it down (flushing and syncing every log); call
/// [`Engine::shutdown`] to see the outcome.
#[derive(Debug)]
pub struct Engine {
    handle: EngineHandle,
    threads: Vec<JoinHandle<()>>,
    _lock: File,
}

/// What host code holds: cheap to clone, usable from any thread and any executor.
#[derive(Clone, Debug)]
pub struct EngineHandle {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    layout: Layout,
    shards: Vec<async_channel::Sender<Request>>,
    meta: RwLock<Metadata>,
    /// Serializes admin operations (create, delete, add partitions, alter settings) with
    /// each other.
    admin: async_lock_free::AdminLock,
    /// Unkeyed sends so far: they stick to one partition for a batch's worth of records,
    /// then move to the next (the shape of Kafka's sticky partitioner, made deterministic
    /// and safe to share between threads).
    unkeyed_sent: std::sync::atomic::AtomicU64,
    topic_defaults: TopicConfig,
    /// Segment size of the internal topics when they are created.
    internal_segment_bytes: u64,
    /// How often each shard's cleaner passes over its partitions.
    retention_check: std::time::Duration,
    /// What a scrape gathers from besides the shards (Kafka listeners, pipelines).
    metrics: crate::metrics::MetricsHub,
}

mod async_lock_free {
    //! A one-at-a-time gate for admin operations, awaited without blocking a thread.

    /// Admin operations run one at a time.
    #[derive(Debug)]
    pub(super) struct AdminLock {
        permits: (async_channel::Sender<()>, async_channel::Receiver<()>),
    }

    impl AdminLock {
        pub(super) fn new() -> AdminLock {
            let (tx, rx) = async_channel::bounded(1);
            tx.try_send(()).expect("a fresh channel has room");
            AdminLock { permits: (tx, rx) }
        }

        pub(super) async fn acquire(&self) -> AdminGuard<'_> {
            let _ = self.permits.1.recv().await;
            AdminGuard { lock: self }
        }
    }

    pub(super) struct AdminGuard<'a> {
        lock: &'a AdminLock,
    }

    impl Drop for AdminGuard<'_> {
        fn drop(&mut self) {
            let _ = self.lock.permits.0.try_send(());
        }
    }
}

/// A topic as described to users.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicDescription {
    /// The name.
    pub name: String,
    /// The id (Kafka's topic id: a random UUID given at creation, never reused).
    pub id: TopicId,
    /// The settings.
    pub config: TopicConfig,
    /// The owning shard of each partition.
    pub shards: Vec<u32>,
}

impl TopicDescription {
    pub(crate) fn of(name: &str, topic: TopicMeta) -> TopicDescription {
        TopicDescription { name: name.to_string(), id: topic.id, config: topic.config, shards: topic.shards }
    }

    /// The number of partitions.
    #[must_use]
    pub fn partitions(&self) -> u32 {
        self.shards.len() as u32
    }
}

fn executor_io_memory(shards: usize) -> usize {
    // glommio registers its I/O memory once per ring (three per executor) against the
    // locked-memory limit (8 MiB here, see tuning.md): keep all executors within 6 MiB.
    ((6usize << 20) / (3 * shards)).clamp(64 << 10, 2 << 20) & !4095
}

impl Engine {
    /// Starts an engine on its data directory: takes the directory's lock, reads the
    /// metadata, starts one pinned executor per shard and opens every partition.
    pub async fn open(config: EngineConfig) -> Result<Engine> {
        let shards = config.shard_count()?;
        config.topic_defaults.log_config()?;
        let io = |op, path: &std::path::Path| {
            let path = path.to_path_buf();
            move |source| EngineError::Io { op, path, source }
        };
        // Absolute from here on: a relative path's parent is "", which cannot be opened
        // to fsync a directory entry.
        let data_dir = std::path::absolute(&config.data_dir).map_err(io("resolving", &config.data_dir))?;
        let layout = Layout { data_dir };
        std::fs::create_dir_all(&layout.data_dir).map_err(io("creating", &layout.data_dir))?;
        let lock_path = layout.lock_file();
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io("opening", &lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(EngineError::Locked { dir: layout.data_dir.clone(), lock: lock_path });
            }
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(EngineError::Io { op: "locking", path: lock_path, source });
            }
        }
        let mut meta = Metadata::load(&layout)?;
        // A partition recorded on a shard this run does not have moves, and the move is
        // recorded, so placement stays stable from here on.
        let mut moved = false;
        for (name, topic) in &mut meta.topics {
            for (p, s) in topic.shards.iter_mut().enumerate() {
                if *s as usize >= shards {
                    *s = assign_shards(name, p as u32, 1, shards)[0];
                    moved = true;
                }
            }
        }
        // Topics from a file written before topic ids get theirs now, stored at once, so
        // the id a client learns stays the topic's across restarts.
        if meta.assign_missing_ids() || moved {
            meta.store(&layout)?;
        }
        let cpus: Vec<usize> = core_affinity::get_core_ids().unwrap_or_default().into_iter().map(|c| c.id).collect();
        let io_memory = executor_io_memory(shards);
        let settings = shard::ShardSettings { retention_check: config.retention_check };
        let mut senders = Vec::with_capacity(shards);
        let mut threads = Vec::with_capacity(shards);
        for shard in 0..shards {
            let (tx, rx) = async_channel::bounded(config.request_queue);
            let placement = match cpus.get(shard % cpus.len().max(1)) {
                Some(&cpu) => glommio::Placement::Fixed(cpu),
                None => glommio::Placement::Unbound,
            };
            let builder = glommio::LocalExecutorBuilder::new(placement)
                .name(&format!("sluice-shard-{shard}"))
                .io_memory(io_memory)
                .ring_depth(128);
            let handle = builder
                .spawn(move || shard::run(rx, settings))
                .map_err(|e| EngineError::InvalidConfig(format!("starting shard {shard}: {e}")))?;
            senders.push(tx);
            threads.push(std::thread::spawn(move || {
                let _ = handle.join();
            }));
        }
        let handle = EngineHandle {
            inner: Arc::new(Shared {
                layout,
                shards: senders,
                meta: RwLock::new(meta.clone()),
                admin: async_lock_free::AdminLock::new(),
                unkeyed_sent: std::sync::atomic::AtomicU64::new(0),
                topic_defaults: config.topic_defaults.clone(),
                internal_segment_bytes: config.internal_segment_bytes,
                retention_check: config.retention_check,
                metrics: crate::metrics::MetricsHub::default(),
            }),
        };
        let engine = Engine { handle, threads, _lock: lock };
        for (name, topic) in &meta.topics {
            engine.handle.open_partitions(name, topic, 0).await?;
        }
        if !meta.topics.contains_key(offsets::TOPIC) {
            // Committed offsets: compacted, and durable before a commit is acknowledged.
            let config = TopicConfig {
                fsync: sluice_io::FsyncPolicy::Always,
                cleanup: sluice_io::CleanupPolicy::Compact,
                segment_bytes: config.internal_segment_bytes,
                ..TopicConfig::default()
            };
            engine.handle.create_topic(offsets::TOPIC, shards as u32, Some(config)).await?;
        }
        Ok(engine)
    }

    /// A handle for host code.
    #[must_use]
    pub fn handle(&self) -> EngineHandle {
        self.handle.clone()
    }

    /// The number of shards.
    #[must_use]
    pub fn shards(&self) -> usize {
        self.handle.inner.shards.len()
    }

    /// Flushes and syncs every log, stops the shards and releases the data directory.
    pub async fn shutdown(mut self) -> Result<()> {
        let result = self.stop_shards().await;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        result
    }

    async fn stop_shards(&self) -> Result<()> {
        let mut first_error = None;
        for tx in &self.handle.inner.shards {
            let (reply, rx) = async_channel::bounded(1);
            if tx.send(Request::Shutdown { reply }).await.is_ok()
                && let Ok(Err(e)) = rx.recv().await
            {
                first_error.get_or_insert(e);
            }
            tx.close();
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if self.threads.is_empty() {
            return;
        }
        let _ = futures_lite::future::block_on(self.stop_shards());
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Whether `name` is one of the engine's internal topics (committed offsets, the Kafka
/// listener's transaction state): listed by no one, deleted by no one.
pub(crate) fn is_internal(name: &str) -> bool {
    name == offsets::TOPIC || name == crate::topic::names::TRANSACTION_STATE_TOPIC
}

/// [`EngineHandle::metric_source`].
#[derive(Debug)]
struct EngineSource(EngineHandle);

impl crate::metrics::MetricSource for EngineSource {
    fn collect(&self, out: &mut crate::metrics::Families) {
        if let Ok(families) = futures_lite::future::block_on(self.0.metrics()) {
            out.merge(families);
        }
    }
}

/// A queued request's answer, to come from its shard.
#[derive(Debug)]
pub(crate) struct Answer<T>(async_channel::Receiver<Result<T>>);

impl<T> Answer<T> {
    /// Waits for the shard's answer.
    pub(crate) async fn get(self) -> Result<T> {
        self.0.recv().await.map_err(|_| EngineError::ShutDown)?
    }
}

impl EngineHandle {
    /// The number of shards.
    #[must_use]
    pub fn shard_count(&self) -> usize {
        self.inner.shards.len()
    }

    /// Runs `task` on shard `shard`'s executor and resolves to its output, as Seastar's
    /// `submit_to`: host code that belongs next to a shard's partitions (a producer, a
    /// consumer, a request handler) runs on that shard's pinned thread instead of a thread
    /// of its own, so it competes for no core with the shards. `task` is called on the
    /// shard's thread and its future is polled there, beside the shard's own work: it must
    /// not block the thread (no blocking calls; use the handle's async methods).
    ///
    /// A task that panics takes its shard down with it, as a panic in any shard code does.
    pub async fn run_on<F, Fut, T>(&self, shard: usize, task: F) -> Result<T>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let tx = self.inner.shards.get(shard).ok_or_else(|| {
            EngineError::InvalidConfig(format!("no shard {shard}: the engine has {}", self.inner.shards.len()))
        })?;
        let (done, rx) = async_channel::bounded(1);
        let task: shard::LocalTask = Box::new(move || {
            Box::pin(async move {
                let _ = done.send(task().await).await;
            })
        });
        tx.send(Request::Run { task }).await.map_err(|_| EngineError::ShutDown)?;
        rx.recv().await.map_err(|_| EngineError::ShutDown)
    }

    /// Every shard's metrics and every registered source's (Kafka listeners), merged:
    /// one `Request::Metrics` per shard, answered on the shard's thread from what it owns.
    /// Fails only if the engine has shut down.
    pub async fn metrics(&self) -> Result<crate::metrics::Families> {
        let mut samples = Vec::with_capacity(self.inner.shards.len());
        for shard in 0..self.inner.shards.len() {
            samples.push(self.call(shard as u32, |reply| Request::Metrics { reply }).await?);
        }
        let mut out = crate::metrics::Families::default();
        crate::metrics::shard::add_samples(&mut out, &samples);
        self.inner.metrics.collect(&mut out);
        Ok(out)
    }

    /// Serves these metrics (and those of the sources registered with the engine) on
    /// `addr` at `/metrics`, from a thread of its own, until the server is dropped; and
    /// the overview page at `/` with its data at `/api/overview` (`metrics/http.rs`).
    ///
    /// # Errors
    ///
    /// `addr` cannot be bound.
    pub fn serve_metrics(&self, addr: std::net::SocketAddr) -> std::io::Result<crate::metrics::http::MetricsServer> {
        let engine = self.clone();
        let render = move |openmetrics| {
            futures_lite::future::block_on(engine.render_metrics(openmetrics)).map_err(|e| e.to_string())
        };
        let engine = self.clone();
        let overview = move || {
            let unix_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            let families = futures_lite::future::block_on(engine.metrics()).map_err(|e| e.to_string())?;
            Ok(families.overview_json(unix_ms))
        };
        crate::metrics::http::MetricsServer::start_with_page(
            addr,
            std::sync::Arc::new(render),
            std::sync::Arc::new(overview),
        )
    }

    /// The metrics as a scrape answers them: the Prometheus text format (0.0.4), or
    /// OpenMetrics 1.0 with `openmetrics` (for host code that serves them itself; `sluice
    /// serve --metrics-listen` serves these).
    pub async fn render_metrics(&self, openmetrics: bool) -> Result<String> {
        Ok(self.metrics().await?.render(openmetrics))
    }

    /// The engine as a source another scrape gathers from (a host's own registry): its
    /// `collect` asks the shards, blocking the calling thread until they answer, and adds
    /// nothing once the engine has shut down. Not for the engine's own hub (it would ask
    /// itself).
    #[must_use]
    pub fn metric_source(&self) -> std::sync::Arc<dyn crate::metrics::MetricSource> {
        std::sync::Arc::new(EngineSource(self.clone()))
    }

    /// Registers a source a scrape also gathers from, for as long as it lives.
    pub fn register_metrics(&self, source: &std::sync::Arc<dyn crate::metrics::MetricSource>) {
        self.inner.metrics.register(source);
    }

    async fn call<T>(&self, shard: u32, make: impl FnOnce(shard::Reply<T>) -> Request) -> Result<T> {
        self.queue(shard, make).await?.get().await
    }

    /// Puts a request in `shard`'s queue (waiting while the queue is full) and resolves,
    /// once it is there, to the future of its answer. A shard starts its requests in
    /// queue order, so requests queued one after another reach a partition in that order.
    async fn queue<T>(&self, shard: u32, make: impl FnOnce(shard::Reply<T>) -> Request) -> Result<Answer<T>> {
        let (reply, rx) = async_channel::bounded(1);
        let tx = self.inner.shards.get(shard as usize).ok_or(EngineError::ShutDown)?;
        tx.send(make(reply)).await.map_err(|_| EngineError::ShutDown)?;
        Ok(Answer(rx))
    }

    /// How a topic's partitions batch single-record sends.
    fn batching(config: &TopicConfig) -> Batching {
        Batching { linger: config.linger(), max_records: config.batch_records, max_bytes: BATCH_BYTES_MAX }
    }

    async fn open_partitions(&self, name: &str, topic: &TopicMeta, from: u32) -> Result<()> {
        let config = topic.config.log_config()?;
        let batching = Self::batching(&topic.config);
        for p in PartitionId::all(topic.partitions()).skip(from as usize) {
            let dir = self.inner.layout.partition_dir(name, p);
            let (topic_name, config) = (name.to_string(), config.clone());
            self.call(topic.shards[p.index()], |reply| Request::Open {
                topic: topic_name,
                partition: p,
                dir,
                config,
                batching,
                reply,
            })
            .await?;
        }
        Ok(())
    }

    fn topic(&self, name: &str) -> Result<TopicMeta> {
        let meta = self.inner.meta.read().unwrap_or_else(|e| e.into_inner());
        meta.topics.get(name).cloned().ok_or_else(|| EngineError::UnknownTopic(name.to_string()))
    }

    /// The shard that owns a partition, and what the topic's appends must keep to (read
    /// under the metadata lock, nothing cloned: this is on every send's path).
    fn owner(&self, topic: &str, partition: PartitionId) -> Result<(u32, AppendRules)> {
        let meta = self.inner.meta.read().unwrap_or_else(|e| e.into_inner());
        let t = meta.topics.get(topic).ok_or_else(|| EngineError::UnknownTopic(topic.to_string()))?;
        let shard = t.shards.get(partition.index()).copied().ok_or_else(|| EngineError::PartitionOutOfRange {
            topic: topic.to_string(),
            partition,
            partitions: t.partitions(),
        })?;
        let rules =
            AppendRules { max_record_bytes: t.config.max_record_bytes, key_required: t.config.cleanup.compacts() };
        Ok((shard, rules))
    }
}

/// What every record appended to a topic must keep to, as its settings say when the
/// append is checked (before it is queued).
#[derive(Clone, Copy, Debug)]
struct AppendRules {
    /// The largest record (key, value and headers), `max_record_bytes`.
    max_record_bytes: usize,
    /// A compacted topic takes only records with a key, as Kafka's log layer
    /// (`LogValidator`) refuses a batch holding one without.
    key_required: bool,
}

impl AppendRules {
    /// Refuses records larger than the topic's limit, and, on a compacted topic, a
    /// batch holding records without a key (naming every such record, as Kafka's
    /// per-record errors do). A refusal appends nothing.
    fn check(
        self,
        topic: &str,
        mut sizes: impl Iterator<Item = usize>,
        keyed: impl Iterator<Item = bool>,
    ) -> Result<()> {
        if let Some(bytes) = sizes.find(|&size| size > self.max_record_bytes) {
            return Err(EngineError::RecordTooLarge { topic: topic.to_string(), bytes, limit: self.max_record_bytes });
        }
        if self.key_required {
            let keyless: Vec<usize> = keyed.enumerate().filter_map(|(i, keyed)| (!keyed).then_some(i)).collect();
            if !keyless.is_empty() {
                return Err(EngineError::KeyRequired { topic: topic.to_string(), records: keyless });
            }
        }
        Ok(())
    }
}
