//! The engine: shards started from a configuration, and the handle host code uses.
//!
//! [`Engine`] owns the shard threads and the data directory's lock; [`EngineHandle`] is
//! `Send + Sync + Clone` and its async methods run on any executor (tokio, glommio, or a
//! plain thread through `futures_lite::future::block_on`): requests travel to the owning
//! shard over bounded channels and replies come back the same way.

use std::fs::File;
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use sluice_io::{AppendInfo, BatchMeta, Offset, OwnedBatches, Timestamp};

use std::collections::BTreeMap;

use crate::assignor::MemberId;
use crate::config::{EngineConfig, TopicConfig};
use crate::consumer::SeekTo;
use crate::coordinator::{GroupDescription, JoinRequest, MemberState};
use crate::error::{EngineError, Result};
use crate::meta::{Layout, Metadata, TopicMeta, assign_shards};
use crate::names::validate_name;
use crate::offsets::{self, Committed};
use crate::partitioner::partition_for_key;
use crate::shard::{self, AppendRecords, Batching, OwnedRecord, PackedRecords, Request};

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
    /// Serializes admin operations (create, delete, add partitions) with each other.
    admin: async_lock_free::AdminLock,
    /// Unkeyed sends so far: they stick to one partition for a batch's worth of records,
    /// then move to the next (the shape of Kafka's sticky partitioner, made deterministic
    /// and safe to share between threads).
    unkeyed_sent: std::sync::atomic::AtomicU64,
    topic_defaults: TopicConfig,
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
    /// The settings.
    pub config: TopicConfig,
    /// The owning shard of each partition.
    pub shards: Vec<u32>,
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
        if moved {
            meta.store(&layout)?;
        }
        let cpus: Vec<usize> = core_affinity::get_core_ids().unwrap_or_default().into_iter().map(|c| c.id).collect();
        let io_memory = executor_io_memory(shards);
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
                .spawn(move || shard::run(rx))
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
            }),
        };
        let engine = Engine { handle, threads, _lock: lock };
        for (name, topic) in &meta.topics {
            engine.handle.open_partitions(name, topic, 0).await?;
        }
        if !meta.topics.contains_key(offsets::TOPIC) {
            // Committed offsets: compacted, and durable before a commit is acknowledged.
            let config = TopicConfig {
                fsync: "always".into(),
                cleanup: "compact".into(),
                segment_bytes: 16 << 20,
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
    name == offsets::TOPIC || name == crate::kafka::TRANSACTION_STATE_TOPIC
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

    async fn open_partitions(&self, name: &str, topic: &TopicMeta, from: u32) -> Result<()> {
        let config = topic.config.log_config()?;
        let batching = Batching {
            linger: topic.config.linger(),
            max_records: topic.config.batch_records,
            max_bytes: BATCH_BYTES_MAX,
        };
        for p in from..topic.partitions() {
            let dir = self.inner.layout.partition_dir(name, p);
            let (topic_name, config) = (name.to_string(), config.clone());
            self.call(topic.shards[p as usize], |reply| Request::Open {
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

    /// The shard that owns a partition, and the topic's record size limit (read under the
    /// metadata lock, nothing cloned: this is on every send's path).
    fn owner(&self, topic: &str, partition: u32) -> Result<(u32, usize)> {
        let meta = self.inner.meta.read().unwrap_or_else(|e| e.into_inner());
        let t = meta.topics.get(topic).ok_or_else(|| EngineError::UnknownTopic(topic.to_string()))?;
        let shard = t.shards.get(partition as usize).copied().ok_or_else(|| EngineError::PartitionOutOfRange {
            topic: topic.to_string(),
            partition,
            partitions: t.partitions(),
        })?;
        Ok((shard, t.config.max_record_bytes))
    }

    /// Refuses records larger than the topic's limit.
    fn check_sizes(topic: &str, limit: usize, mut sizes: impl Iterator<Item = usize>) -> Result<()> {
        match sizes.find(|&size| size > limit) {
            Some(bytes) => Err(EngineError::RecordTooLarge { topic: topic.to_string(), bytes, limit }),
            None => Ok(()),
        }
    }

    /// Creates a topic with `partitions` partitions and the given settings (the engine's
    /// defaults when `None`).
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        config: Option<TopicConfig>,
    ) -> Result<TopicDescription> {
        validate_name("topic", name)?;
        if partitions == 0 || partitions > 10_000 {
            return Err(EngineError::InvalidConfig(format!("partitions must be within 1..=10000, not {partitions}")));
        }
        let config = config.unwrap_or_else(|| self.inner.topic_defaults.clone());
        config.log_config()?;
        let _admin = self.inner.admin.acquire().await;
        let topic = TopicMeta { config, shards: assign_shards(name, 0, partitions, self.inner.shards.len()) };
        {
            let mut meta = self.inner.meta.write().unwrap_or_else(|e| e.into_inner());
            if meta.topics.contains_key(name) {
                return Err(EngineError::TopicExists(name.to_string()));
            }
            let mut next = meta.clone();
            next.topics.insert(name.to_string(), topic.clone());
            next.store(&self.inner.layout)?;
            *meta = next;
        }
        self.open_partitions(name, &topic, 0).await?;
        Ok(TopicDescription { name: name.to_string(), config: topic.config, shards: topic.shards })
    }

    /// The topics, by name, without internal ones (`__consumer_offsets`, `__transaction_state`).
    #[must_use]
    pub fn list_topics(&self) -> Vec<String> {
        let meta = self.inner.meta.read().unwrap_or_else(|e| e.into_inner());
        meta.topics.keys().filter(|t| !is_internal(t)).cloned().collect()
    }

    /// A topic's settings and partitions.
    pub fn describe_topic(&self, name: &str) -> Result<TopicDescription> {
        let t = self.topic(name)?;
        Ok(TopicDescription { name: name.to_string(), config: t.config, shards: t.shards })
    }

    /// Deletes a topic and its data.
    pub async fn delete_topic(&self, name: &str) -> Result<()> {
        if is_internal(name) {
            return Err(EngineError::InvalidConfig(format!("{name} is internal and cannot be deleted")));
        }
        let _admin = self.inner.admin.acquire().await;
        let topic = self.topic(name)?;
        {
            let mut meta = self.inner.meta.write().unwrap_or_else(|e| e.into_inner());
            let mut next = meta.clone();
            next.topics.remove(name);
            next.store(&self.inner.layout)?;
            *meta = next;
        }
        for (p, &shard) in topic.shards.iter().enumerate() {
            let topic_name = name.to_string();
            self.call(shard, |reply| Request::Delete { topic: topic_name, partition: p as u32, reply }).await?;
        }
        Ok(())
    }

    /// Grows a topic to `partitions` partitions (never shrinks, as in Kafka).
    pub async fn add_partitions(&self, name: &str, partitions: u32) -> Result<TopicDescription> {
        let _admin = self.inner.admin.acquire().await;
        let mut topic = self.topic(name)?;
        let have = topic.partitions();
        if partitions <= have || partitions > 10_000 {
            return Err(EngineError::InvalidConfig(format!(
                "topic {name:?} has {have} partitions; the new count must be larger (and at most 10000), not {partitions}"
            )));
        }
        topic.shards.extend(assign_shards(name, have, partitions - have, self.inner.shards.len()));
        {
            let mut meta = self.inner.meta.write().unwrap_or_else(|e| e.into_inner());
            let mut next = meta.clone();
            next.topics.insert(name.to_string(), topic.clone());
            next.store(&self.inner.layout)?;
            *meta = next;
        }
        self.open_partitions(name, &topic, have).await?;
        Ok(TopicDescription { name: name.to_string(), config: topic.config, shards: topic.shards })
    }

    /// The partition a record goes to: `murmur2(key) % partitions` for a keyed record
    /// (Kafka's default partitioner), spread evenly otherwise.
    pub fn partition_for(&self, topic: &str, key: Option<&[u8]>) -> Result<u32> {
        let (partitions, batch_records) = {
            let meta = self.inner.meta.read().unwrap_or_else(|e| e.into_inner());
            let t = meta.topics.get(topic).ok_or_else(|| EngineError::UnknownTopic(topic.to_string()))?;
            (t.partitions(), t.config.batch_records as u64)
        };
        Ok(match key {
            Some(k) => partition_for_key(k, partitions),
            None => {
                let n = self.inner.unkeyed_sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                ((n / batch_records) % u64::from(partitions)) as u32
            }
        })
    }

    /// Sends one record; resolves to its partition and offset once it is as durable as
    /// the topic's fsync policy says. Records sent together are batched per the topic's
    /// linger and batch size.
    pub async fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: &[u8],
        event_time: Timestamp,
    ) -> Result<(u32, Offset)> {
        let partition = self.partition_for(topic, key)?;
        let record = OwnedRecord { key: key.map(<[u8]>::to_vec), value: value.to_vec(), event_time };
        let offset = self.send_to(topic, partition, record).await?;
        Ok((partition, offset))
    }

    /// Sends one record to a chosen partition.
    pub async fn send_to(&self, topic: &str, partition: u32, record: OwnedRecord) -> Result<Offset> {
        let (shard, limit) = self.owner(topic, partition)?;
        Self::check_sizes(topic, limit, std::iter::once(record.size()))?;
        let topic = topic.to_string();
        self.call(shard, |reply| Request::Send { topic, partition, record, reply }).await
    }

    /// Appends records to one partition as one batch, now, stamped with `meta`.
    pub async fn append(
        &self,
        topic: &str,
        partition: u32,
        records: Vec<OwnedRecord>,
        meta: BatchMeta,
    ) -> Result<AppendInfo> {
        self.append_records(topic, partition, AppendRecords::Owned(records), meta).await
    }

    /// [`append`](Self::append) of records packed in one shared buffer (as a Kafka record
    /// batch arrives): no allocation or copy per record on the way to the log.
    pub async fn append_packed(
        &self,
        topic: &str,
        partition: u32,
        records: PackedRecords,
        meta: BatchMeta,
    ) -> Result<AppendInfo> {
        self.queue_packed(topic, partition, records, meta).await?.get().await
    }

    /// [`append_packed`](Self::append_packed) in two steps: resolves once the append is
    /// in the owning shard's queue (which may wait while that queue is full), to the
    /// future of its outcome. Appends to one partition queued one after another are
    /// appended in that order, however long each waits for room: the Kafka listener
    /// queues a connection's produce requests this way, in the order they arrived.
    pub(crate) async fn queue_packed(
        &self,
        topic: &str,
        partition: u32,
        records: PackedRecords,
        meta: BatchMeta,
    ) -> Result<Answer<AppendInfo>> {
        self.queue_records(topic, partition, AppendRecords::Packed(records), meta).await
    }

    async fn append_records(
        &self,
        topic: &str,
        partition: u32,
        records: AppendRecords,
        meta: BatchMeta,
    ) -> Result<AppendInfo> {
        self.queue_records(topic, partition, records, meta).await?.get().await
    }

    async fn queue_records(
        &self,
        topic: &str,
        partition: u32,
        records: AppendRecords,
        meta: BatchMeta,
    ) -> Result<Answer<AppendInfo>> {
        let (shard, limit) = self.owner(topic, partition)?;
        Self::check_sizes(topic, limit, records.sizes())?;
        if records.is_empty() {
            return Err(EngineError::InvalidConfig("an append needs at least one record".into()));
        }
        let topic = topic.to_string();
        self.queue(shard, |reply| Request::Append { topic, partition, records, meta, reply }).await
    }

    /// Ends `producer`'s open transaction in one partition with a commit or abort marker
    /// (a control batch), as durable as the topic's fsync policy says. A marker for a
    /// producer with no open transaction there changes nothing a reader sees.
    pub async fn write_marker(
        &self,
        topic: &str,
        partition: u32,
        producer: sluice_io::ProducerId,
        marker: sluice_io::txn::Marker,
    ) -> Result<AppendInfo> {
        let record = OwnedRecord { key: Some(marker.key().to_vec()), value: Vec::new(), event_time: Timestamp::now() };
        self.append(topic, partition, vec![record], sluice_io::txn::Marker::meta(producer)).await
    }

    /// The transactions still open in a partition (no commit or abort marker yet): each
    /// producer id with the offset of its first batch. Reads the partition from the first
    /// offset held.
    pub async fn open_transactions(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<std::collections::HashMap<sluice_io::ProducerId, Offset>> {
        let (mut at, end) = self.offsets(topic, partition).await?;
        let mut scan = sluice_io::txn::OpenTransactions::default();
        while at < end {
            let batches = self.fetch(topic, partition, at, 4 << 20, Duration::ZERO).await?;
            if batches.is_empty() {
                break;
            }
            for batch in batches.batches() {
                scan.observe(&batch.map_err(|e| EngineError::log(topic, partition, e))?)
                    .map_err(|e| EngineError::log(topic, partition, e))?;
            }
            at = batches.next_offset();
        }
        Ok(scan.open().clone())
    }

    /// Reads batches from `offset`, waiting up to `max_wait` for data if there is none
    /// yet (a long poll).
    pub async fn fetch(
        &self,
        topic: &str,
        partition: u32,
        offset: Offset,
        max_bytes: usize,
        max_wait: Duration,
    ) -> Result<OwnedBatches> {
        let (shard, _) = self.owner(topic, partition)?;
        let topic = topic.to_string();
        self.call(shard, |reply| Request::Fetch { topic, partition, offset, max_bytes, wait: max_wait, reply }).await
    }

    /// The first offset still held and the next offset to be written.
    pub async fn offsets(&self, topic: &str, partition: u32) -> Result<(Offset, Offset)> {
        let (shard, _) = self.owner(topic, partition)?;
        let topic = topic.to_string();
        self.call(shard, |reply| Request::Offsets { topic, partition, reply }).await
    }

    /// Makes everything appended to a partition so far durable (written and
    /// fdatasync'd), whatever the topic's fsync policy, and returns the durable end. An
    /// exactly-once sink calls it before a transaction becomes part of a checkpoint, and
    /// after its commit markers, so that a crash cannot take back what a completed
    /// checkpoint relies on.
    pub async fn sync(&self, topic: &str, partition: u32) -> Result<Offset> {
        let (shard, _) = self.owner(topic, partition)?;
        let topic = topic.to_string();
        self.call(shard, |reply| Request::Sync { topic, partition, reply }).await
    }

    /// Every partition of `topic` read from its first offset held up to the end it has
    /// now, as a [`Consumer`](crate::Consumer) with `isolation` would deliver it: with
    /// [`Isolation::ReadCommitted`](crate::Isolation::ReadCommitted), only committed
    /// records, up to each partition's last stable offset. Batches of one partition come
    /// in offset order, partitions one after another.
    ///
    /// # Errors
    ///
    /// [`EngineError::UnknownTopic`], or whatever a fetch answers.
    pub async fn read_to_end(&self, topic: &str, isolation: crate::Isolation) -> Result<Vec<crate::consumer::Polled>> {
        let mut consumer = crate::Consumer::new(self.clone(), 1 << 20).with_isolation(isolation);
        let partitions = consumer.partitions_of(topic)?;
        consumer.assign(&partitions, crate::SeekTo::Earliest).await?;
        consumer.read_to_end().await
    }

    /// The first offset whose record's event time is at or after `time`, if any.
    pub async fn offset_for_time(&self, topic: &str, partition: u32, time: Timestamp) -> Result<Option<Offset>> {
        let (shard, _) = self.owner(topic, partition)?;
        let topic = topic.to_string();
        self.call(shard, |reply| Request::OffsetForTime { topic, partition, time, reply }).await
    }

    /// A new idempotent producer id, unique in this data directory (its allocation is
    /// stored before it is returned).
    pub async fn init_producer_id(&self) -> Result<sluice_io::ProducerId> {
        let _admin = self.inner.admin.acquire().await;
        let mut meta = self.inner.meta.write().unwrap_or_else(|e| e.into_inner());
        let mut alloc = crate::producer_state::ProducerIdAllocator::from_high_water(meta.next_producer_id)
            .ok_or_else(|| EngineError::InvalidConfig("the stored producer id high-water mark is negative".into()))?;
        let id = alloc.next();
        let mut next = meta.clone();
        next.next_producer_id = alloc.high_water();
        next.store(&self.inner.layout)?;
        *meta = next;
        Ok(id)
    }

    /// The partition of the offsets topic that holds a group's offsets, and the shard
    /// that owns it and so coordinates the group.
    fn coordinator_of(&self, group: &str) -> Result<(u32, u32)> {
        validate_name("group", group)?;
        let t = self.topic(offsets::TOPIC)?;
        let p = partition_for_key(group.as_bytes(), t.partitions());
        Ok((p, t.shards[p as usize]))
    }

    /// The partition counts of `topics`, which must all exist.
    fn partition_counts(&self, topics: &[String]) -> Result<BTreeMap<String, u32>> {
        let meta = self.inner.meta.read().unwrap_or_else(|e| e.into_inner());
        topics
            .iter()
            .map(|t| {
                let topic = meta.topics.get(t).ok_or_else(|| EngineError::UnknownTopic(t.clone()))?;
                Ok((t.clone(), topic.partitions()))
            })
            .collect()
    }

    /// A member joins a consumer group (a new generation is assigned).
    pub async fn join_group(&self, group: &str, req: JoinRequest) -> Result<MemberState> {
        let (_, shard) = self.coordinator_of(group)?;
        let partitions = self.partition_counts(&req.topics)?;
        let group = group.to_string();
        self.call(shard, |reply| Request::GroupJoin { group, req, partitions, reply }).await
    }

    /// A member fetches its assignment for the generation its join or heartbeat reported
    /// (Kafka's SyncGroup; here the coordinator computed it). A generation the group has
    /// since left is refused with [`EngineError::StaleGeneration`].
    pub async fn sync_group(&self, group: &str, member: &MemberId, generation: u32) -> Result<MemberState> {
        let (_, shard) = self.coordinator_of(group)?;
        let (group, member) = (group.to_string(), member.clone());
        self.call(shard, |reply| Request::GroupSync { group, member, generation, reply }).await
    }

    /// A member's heartbeat: keeps it in the group and returns the current generation
    /// and its assignment.
    pub async fn heartbeat(&self, group: &str, member: &MemberId, topics: &[String]) -> Result<MemberState> {
        let (_, shard) = self.coordinator_of(group)?;
        let partitions = self.partition_counts(topics)?;
        let (group, member) = (group.to_string(), member.clone());
        self.call(shard, |reply| Request::GroupHeartbeat { group, member, partitions, reply }).await
    }

    /// A member leaves its group (the others rebalance at once).
    pub async fn leave_group(&self, group: &str, member: &MemberId) -> Result<()> {
        let (_, shard) = self.coordinator_of(group)?;
        let (group, member) = (group.to_string(), member.clone());
        self.call(shard, |reply| Request::GroupLeave { group, member, reply }).await
    }

    /// Commits offsets for a group: from a member in its current generation, or with
    /// `member = None` from outside the group while it has no members.
    pub async fn commit_offsets(
        &self,
        group: &str,
        member: Option<(&MemberId, u32)>,
        offsets: &[(String, u32, Offset)],
    ) -> Result<()> {
        let (offsets_partition, shard) = self.coordinator_of(group)?;
        for (topic, p, _) in offsets {
            self.owner(topic, *p)?;
        }
        let group = group.to_string();
        let member = member.map(|(m, g)| (m.clone(), g));
        let offsets = offsets.to_vec();
        self.call(shard, |reply| Request::GroupCommit { group, member, offsets_partition, offsets, reply }).await
    }

    /// A group's committed offsets.
    pub async fn committed_offsets(&self, group: &str) -> Result<Committed> {
        let (_, shard) = self.coordinator_of(group)?;
        let group = group.to_string();
        self.call(shard, |reply| Request::GroupOffsets { group, reply }).await
    }

    /// A group's members, generation and assignment (`None` if it has never had members
    /// since the engine started).
    pub async fn describe_group(&self, group: &str) -> Result<Option<GroupDescription>> {
        let (_, shard) = self.coordinator_of(group)?;
        let group = group.to_string();
        self.call(shard, |reply| Request::GroupDescribe { group, reply }).await
    }

    /// Every group with members or committed offsets.
    pub async fn list_groups(&self) -> Result<Vec<String>> {
        let mut all = Vec::new();
        for shard in 0..self.inner.shards.len() as u32 {
            all.extend(self.call(shard, |reply| Request::GroupList { reply }).await?);
        }
        all.sort();
        all.dedup();
        Ok(all)
    }

    /// Each committed partition of a group with its committed offset, the partition's end
    /// offset, and the lag between them.
    pub async fn group_lag(&self, group: &str) -> Result<Vec<PartitionLag>> {
        let committed = self.committed_offsets(group).await?;
        let mut out = Vec::with_capacity(committed.len());
        for ((topic, partition), offset) in committed {
            let end = match self.offsets(&topic, partition).await {
                Ok((_, end)) => end,
                Err(EngineError::UnknownTopic(_) | EngineError::PartitionOutOfRange { .. }) => continue,
                Err(e) => return Err(e),
            };
            out.push(PartitionLag { topic, partition, committed: offset, end, lag: end.0.saturating_sub(offset.0) });
        }
        Ok(out)
    }

    /// Moves a group's committed offsets for every partition of `topic` (only while the
    /// group has no members, as Kafka requires). Returns the new offsets.
    pub async fn reset_offsets(&self, group: &str, topic: &str, to: SeekTo) -> Result<Vec<(String, u32, Offset)>> {
        let partitions = self.topic(topic)?.partitions();
        let mut offsets = Vec::with_capacity(partitions as usize);
        for p in 0..partitions {
            let (start, end) = self.offsets(topic, p).await?;
            let at = match to {
                SeekTo::Earliest => start,
                SeekTo::Latest => end,
                SeekTo::Offset(o) => o.clamp(start, end),
                SeekTo::Timestamp(t) => self.offset_for_time(topic, p, t).await?.unwrap_or(end),
            };
            offsets.push((topic.to_string(), p, at));
        }
        self.commit_offsets(group, None, &offsets).await?;
        Ok(offsets)
    }
}

/// A group's position in one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionLag {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The committed offset (the next record the group will read).
    pub committed: Offset,
    /// The partition's end offset.
    pub end: Offset,
    /// Records between them.
    pub lag: u64,
}
