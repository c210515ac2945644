//! [`KafkaSource`]: a pipeline source reading one topic of a Kafka cluster through a
//! consumer group.
//!
//! Every shard runs one librdkafka consumer, a member of the group `group_id` subscribed to
//! the topic, so the shards of a process and several sluice processes split the
//! partitions between them (and Kafka moves them when members come and go). Offsets are
//! never auto-committed:
//!
//! - With checkpoints, [`Source::positions`] is the next offset of every partition this
//!   shard holds, keyed by partition number; a restore remembers every position of the
//!   checkpoint and seeks a partition to it when the group first assigns it in this run
//!   (whichever shard gets it); a completed checkpoint commits its positions to the group
//!   (asynchronously). Partitions the checkpoint does not cover start at the group's
//!   committed offset.
//! - Without checkpoints the source commits what it has emitted every
//!   [`KafkaSourceConfig::commit_interval`] and when it ends, as auto-commit would.
//! - When Kafka revokes a partition, its position is committed synchronously before it
//!   goes, so the next owner starts where this one stopped.
//! - A bounded read commits its end positions when it ends and leaves the group (with
//!   checkpoints, moments before the final checkpoint completes: that completion is not
//!   always reported to sources before a pipeline ends).
//! - The shards of one process hand partitions over in-process: a partition assigned
//!   while another local shard still holds it stays paused until that shard gives it up
//!   and passes on its position (a coordinator may complete a rebalance before the old
//!   owner has heard of it; Kafka's and `sluice serve`'s wait for every member to rejoin
//!   unless the rebalance timeout passes). Across processes the coordinator's protocol
//!   decides: with one that does not wait, records may be read twice during a rebalance.
//!
//! [`KafkaSourceFactory::instance_fixed`] reads given partitions instead, without joining
//! the group (assigned at the first poll: restored position, else the group's committed
//! offset, else the earliest); the checkpoint and commit rules are the same.
//!
//! The shard never blocks on the consumer while running: `poll_next` polls with a zero
//! timeout, and librdkafka's "queue became non-empty" callback wakes the shard when
//! records (or rebalance events) arrive. Starting (metadata, the end offsets of a bounded
//! source) and the synchronous commits of a revocation and of the end block briefly.
//!
//! A shard's consumer is one split: its watermark covers every partition it holds, so a
//! bounded-out-of-orderness strategy must allow for the skew between partitions.
//!
//! This file holds the configuration, the factory and the source itself; the consumer's
//! rebalance callbacks and the in-process handoff of partitions are in `rebalance`.

mod rebalance;

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{Arc, Mutex},
    task::{Context, Poll, Waker},
    time::{Duration, Instant},
};

use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext},
    error::KafkaError,
    message::{BorrowedHeaders, Headers},
};
use sluice_io::EventTime;

use self::rebalance::{Part, SourceContext, release};
use super::{KafkaConnectorError, client_config, validate_common, validate_group};
use crate::dataflow::{RestoreError, Source, UserError};

/// Where and what a [`KafkaSource`] reads.
#[derive(Debug, Clone)]
pub struct KafkaSourceConfig {
    /// librdkafka's `bootstrap.servers`: `host:port[,host:port...]`.
    pub bootstrap_servers: String,
    /// The consumer group every shard (and every process) joins.
    pub group_id: String,
    /// The topic.
    pub topic: String,
    /// Stop at the end offsets the topic had when the factory was made (for tests, examples
    /// and batch jobs); the default reads forever. Bounded reading is tracked per process:
    /// the source ends when this process's shards have read every partition to its end.
    /// The ends are not part of a checkpoint: a run restored from one stops at the ends the
    /// topic has when its factory is made, which include records appended since the first
    /// run started.
    pub bounded: bool,
    /// Without checkpoints, how often emitted positions are committed. Default 5 s.
    pub commit_interval: Duration,
    /// The longest a blocking request (metadata, end offsets, a synchronous commit) may take.
    /// Default 30 s.
    pub request_timeout: Duration,
    /// Static group membership (KIP-345): with `Some(prefix)`, shard `s`'s consumer joins
    /// with `group.instance.id` `{prefix}-{s}`, so a process that dies keeps its
    /// partitions until it restarts with the same prefix and shard count (or until
    /// `session.timeout.ms` passes) instead of having them moved to the other members
    /// without its state. Default none (dynamic members).
    pub static_member: Option<String>,
    /// Any other librdkafka consumer properties (`fetch.wait.max.ms`,
    /// `partition.assignment.strategy`, `session.timeout.ms`, ...), set after sluice's.
    /// `enable.auto.commit` is always false.
    pub properties: Vec<(String, String)>,
}

impl KafkaSourceConfig {
    /// Reads `topic` from the cluster at `bootstrap_servers` as group `group_id`.
    #[must_use]
    pub fn new(bootstrap_servers: impl Into<String>, group_id: impl Into<String>, topic: impl Into<String>) -> Self {
        KafkaSourceConfig {
            bootstrap_servers: bootstrap_servers.into(),
            group_id: group_id.into(),
            topic: topic.into(),
            bounded: false,
            commit_interval: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            static_member: None,
            properties: Vec::new(),
        }
    }

    /// Stops at the end offsets seen at start.
    #[must_use]
    pub fn bounded(mut self) -> Self {
        self.bounded = true;
        self
    }

    /// Sets a librdkafka consumer property.
    #[must_use]
    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.push((key.into(), value.into()));
        self
    }

    fn validate(&self) -> Result<(), KafkaConnectorError> {
        validate_common(&self.bootstrap_servers, &self.topic, self.request_timeout)?;
        validate_group("consumer group", &self.group_id)?;
        if let Some(prefix) = &self.static_member {
            validate_group("static member prefix", prefix)?;
        }
        if self.commit_interval.is_zero() {
            return Err(KafkaConnectorError::Config("the commit interval is zero".into()));
        }
        Ok(())
    }

    fn client(&self) -> rdkafka::ClientConfig {
        let mut config = client_config(&self.bootstrap_servers, &[]);
        config
            .set("group.id", &self.group_id)
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            // Small fetch waits keep an idle source responsive; records still come in
            // whole fetches.
            .set("fetch.wait.max.ms", "100");
        for (k, v) in &self.properties {
            config.set(k, v);
        }
        config.set("enable.auto.commit", "false").set("enable.auto.offset.store", "false");
        config
    }
}

/// One record as the source hands it to the user's function.
#[derive(Clone, Copy)]
pub struct KafkaRecord<'a> {
    /// The key, if the record has one.
    pub key: Option<&'a [u8]>,
    /// The value (`None` for a tombstone).
    pub value: Option<&'a [u8]>,
    /// The partition it was read from.
    pub partition: i32,
    /// Its offset there.
    pub offset: i64,
    /// Its Kafka timestamp (create or log-append time), the natural event time; 0 when the
    /// record has none.
    pub timestamp: EventTime,
    raw_headers: Option<&'a BorrowedHeaders>,
}

impl std::fmt::Debug for KafkaRecord<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaRecord")
            .field("key", &self.key)
            .field("value", &self.value)
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("timestamp", &self.timestamp)
            .field("headers", &self.headers().collect::<Vec<_>>())
            .finish()
    }
}

impl<'a> KafkaRecord<'a> {
    /// Its headers, in order (a `None` value is a null one).
    pub fn headers(&self) -> impl Iterator<Item = sluice_io::Header<'a>> + 'a {
        self.raw_headers.into_iter().flat_map(|hs| hs.iter()).map(|h| sluice_io::Header { key: h.key, value: h.value })
    }
}

/// What the shards of one process share for one run of a pipeline: the end offsets of a
/// bounded read, which partitions have reached them, and the restored positions not yet
/// applied. Clone it into the pipeline's build function and call
/// [`KafkaSourceFactory::instance`] on every shard. Make a new factory for every run.
#[derive(Debug, Clone)]
pub struct KafkaSourceFactory {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    config: KafkaSourceConfig,
    /// A bounded read's end offsets (partition to the offset after its last record).
    ends: Option<BTreeMap<i32, i64>>,
    progress: Mutex<Progress>,
}

#[derive(Debug, Default)]
struct Progress {
    /// Partitions of a bounded read that some shard of this process has read to the end.
    reached: HashSet<i32>,
    /// A restored checkpoint's positions, until the partition is first assigned.
    restored: Option<HashMap<i32, i64>>,
    /// Which shard of this process holds (or has been given) each partition.
    owners: HashMap<i32, usize>,
    /// Positions given up by a shard that was revoked a partition another shard of this
    /// process had already been assigned (see [`Part::waiting`]).
    handoff: HashMap<i32, Option<i64>>,
    /// Every shard's waker, to wake the one waiting for a handoff.
    wakers: HashMap<usize, Arc<Mutex<Option<Waker>>>>,
}

impl KafkaSourceFactory {
    /// Checks the config and, for a bounded read, asks the cluster for the topic's
    /// partitions and end offsets (blocking, up to the request timeout).
    ///
    /// # Errors
    ///
    /// A bad config, an unknown topic, or a cluster that does not answer.
    pub fn new(config: KafkaSourceConfig) -> Result<Self, KafkaConnectorError> {
        config.validate()?;
        let ends = if config.bounded {
            let consumer: BaseConsumer =
                config.client().create().map_err(|e| KafkaConnectorError::client("creating a consumer", e))?;
            let mut ends = BTreeMap::new();
            for p in partitions(&consumer, &config.topic, config.request_timeout)? {
                let (low, high) = consumer
                    .fetch_watermarks(&config.topic, p, config.request_timeout)
                    .map_err(|e| KafkaConnectorError::client(format!("end offset of {}/{p}", config.topic), e))?;
                ends.insert(p, if high <= low { -1 } else { high });
            }
            Some(ends)
        } else {
            None
        };
        let progress = Mutex::new(Progress::default());
        Ok(KafkaSourceFactory { shared: Arc::new(Shared { config, ends, progress }) })
    }

    /// The end offsets of a bounded read, by partition (`-1` for a partition that was empty).
    #[must_use]
    pub fn end_offsets(&self) -> Option<&BTreeMap<i32, i64>> {
        self.shared.ends.as_ref()
    }

    /// This shard's source: a consumer joining the group, turning each record into a `T`
    /// with `map`.
    ///
    /// # Errors
    ///
    /// librdkafka refusing the config or the subscription.
    pub fn instance<T, F>(&self, shard: usize, map: F) -> Result<KafkaSource<T, F>, KafkaConnectorError>
    where
        F: FnMut(KafkaRecord<'_>) -> T + 'static,
    {
        self.make(shard, None, map)
    }

    /// This shard's source reading exactly `partitions`, without joining the group (no
    /// rebalance ever moves them; the group only stores committed offsets): each from the
    /// restored position, else the group's committed offset, else the earliest.
    ///
    /// # Errors
    ///
    /// librdkafka refusing the config, or no partitions.
    pub fn instance_fixed<T, F>(
        &self,
        shard: usize,
        partitions: Vec<i32>,
        map: F,
    ) -> Result<KafkaSource<T, F>, KafkaConnectorError>
    where
        F: FnMut(KafkaRecord<'_>) -> T + 'static,
    {
        if partitions.is_empty() {
            return Err(KafkaConnectorError::Config(format!("shard {shard} given no partitions to read")));
        }
        self.make(shard, Some(partitions), map)
    }

    fn make<T, F>(
        &self,
        shard: usize,
        fixed: Option<Vec<i32>>,
        map: F,
    ) -> Result<KafkaSource<T, F>, KafkaConnectorError>
    where
        F: FnMut(KafkaRecord<'_>) -> T + 'static,
    {
        let config = &self.shared.config;
        let waker: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
        let held = Arc::new(Mutex::new(BTreeMap::new()));
        lock(&self.shared.progress).wakers.insert(shard, waker.clone());
        let context = SourceContext {
            shard,
            shared: self.shared.clone(),
            held: held.clone(),
            errors: Arc::new(Mutex::new(Vec::new())),
            leaving: std::sync::atomic::AtomicBool::new(false),
        };
        let mut client = config.client();
        client.set("client.id", format!("sluice-source-{shard}"));
        if let Some(prefix) = &config.static_member {
            client.set("group.instance.id", format!("{prefix}-{shard}"));
        }
        let mut consumer: BaseConsumer<SourceContext> =
            client.create_with_context(context).map_err(|e| KafkaConnectorError::client("creating a consumer", e))?;
        let wake = waker.clone();
        consumer.set_nonempty_callback(move || {
            if let Some(w) = wake.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
                w.wake();
            }
        });
        if fixed.is_none() {
            consumer
                .subscribe(&[&config.topic])
                .map_err(|e| KafkaConnectorError::client(format!("subscribing to {}", config.topic), e))?;
        }
        Ok(KafkaSource {
            shard,
            consumer,
            shared: self.shared.clone(),
            held,
            waker,
            map,
            checkpointed: std::cell::Cell::new(false),
            last_commit: Instant::now(),
            uncommitted: false,
            last_completed: Vec::new(),
            ended: false,
            fixed,
            _out: std::marker::PhantomData,
        })
    }
}

/// The partitions of `topic`, sorted.
pub(super) fn partitions<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<i32>, KafkaConnectorError> {
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| KafkaConnectorError::client(format!("metadata of {topic}"), e))?;
    let t = metadata.topics().iter().find(|t| t.name() == topic).ok_or_else(|| KafkaConnectorError::Topic {
        topic: topic.into(),
        detail: "is not in the cluster's metadata".into(),
    })?;
    if let Some(e) = t.error() {
        return Err(KafkaConnectorError::Topic { topic: topic.into(), detail: format!("has an error: {e:?}") });
    }
    let mut ps: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    if ps.is_empty() {
        return Err(KafkaConnectorError::Topic { topic: topic.into(), detail: "has no partitions".into() });
    }
    ps.sort_unstable();
    Ok(ps)
}

/// The partitions a shard's consumer holds.
type Held = Arc<Mutex<BTreeMap<i32, Part>>>;

fn lock<V>(m: &Mutex<V>) -> std::sync::MutexGuard<'_, V> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One shard's Kafka consumer as a pipeline source: a single split covering the
/// partitions the group gives this shard. Made by [`KafkaSourceFactory::instance`].
pub struct KafkaSource<T, F> {
    shard: usize,
    consumer: BaseConsumer<SourceContext>,
    shared: Arc<Shared>,
    held: Held,
    waker: Arc<Mutex<Option<Waker>>>,
    map: F,
    /// The pipeline checkpoints: offsets are committed only for completed checkpoints.
    /// Set by the first call of `positions`, which a checkpointing pipeline makes when
    /// the source is added (to check that it can resume) and at every barrier.
    checkpointed: std::cell::Cell<bool>,
    last_commit: Instant,
    uncommitted: bool,
    /// The positions of the last completed checkpoint, committed asynchronously when it
    /// completed and once more, synchronously, when the source is dropped (an async
    /// commit still in flight when the consumer closes may be lost).
    last_completed: Vec<(i32, i64)>,
    ended: bool,
    /// The partitions of [`KafkaSourceFactory::instance_fixed`], until the first poll
    /// assigns them.
    fixed: Option<Vec<i32>>,
    _out: std::marker::PhantomData<fn() -> T>,
}

impl<T, F> std::fmt::Debug for KafkaSource<T, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource")
            .field("topic", &self.shared.config.topic)
            .field("group", &self.shared.config.group_id)
            .field("held", &*lock(&self.held))
            .finish_non_exhaustive()
    }
}

impl<T, F> KafkaSource<T, F> {
    /// Problems the consumer reported that did not stop it (failed commits, rebalance
    /// errors, transient consume errors), oldest first, at most a few.
    #[must_use]
    pub fn errors(&self) -> Vec<String> {
        lock(&self.consumer.context().errors).clone()
    }

    /// The partitions the group has given this shard and that it reads now (not those
    /// still waiting for another local shard to hand them over), sorted.
    #[must_use]
    pub fn assigned(&self) -> Vec<i32> {
        lock(&self.held).iter().filter(|(_, part)| !part.waiting).map(|(&p, _)| p).collect()
    }

    fn positions_now(&self) -> Vec<(i32, i64)> {
        lock(&self.held).iter().filter_map(|(&p, part)| part.next.filter(|_| !part.waiting).map(|n| (p, n))).collect()
    }

    /// The `positions` of partitions this shard still holds: a partition given up since
    /// was committed further on when it was revoked, and its new owner may have committed
    /// more since.
    fn still_held(&self, positions: &[(i32, i64)]) -> Vec<(i32, i64)> {
        let held = lock(&self.held);
        positions.iter().copied().filter(|(p, _)| held.get(p).is_some_and(|part| !part.waiting)).collect()
    }

    /// Commits `positions`; a failure is kept in [`KafkaSource::errors`] (the next commit
    /// supersedes it). Returns whether it succeeded (for an async commit: was sent).
    fn commit(&self, positions: &[(i32, i64)], mode: CommitMode) -> bool {
        if positions.is_empty() {
            return true;
        }
        let mut tpl = TopicPartitionList::with_capacity(positions.len());
        for &(p, next) in positions {
            let _ = tpl.add_partition_offset(&self.shared.config.topic, p, Offset::Offset(next));
        }
        match self.consumer.commit(&tpl, mode) {
            Ok(()) => true,
            Err(e) => {
                let mut errors = lock(&self.consumer.context().errors);
                if errors.len() < 16 {
                    errors.push(format!("commit: {e}"));
                }
                false
            }
        }
    }

    /// The last commit, synchronous. A group in the middle of a rebalance may refuse it
    /// (ILLEGAL_GENERATION) until this member rejoins, which only polling does, so the
    /// consumer is polled and the commit tried again, for at most 5 s. It is made while
    /// the other shards are still group members (see `poll_next`): once one has left, a
    /// coordinator may hold a commit until the rebalance ends.
    fn commit_at_end(&self, positions: &[(i32, i64)]) {
        let deadline = Instant::now() + Duration::from_secs(5).min(self.shared.config.request_timeout);
        while !self.commit(positions, CommitMode::Sync) && Instant::now() < deadline {
            drop(self.consumer.poll(Duration::from_millis(50)));
        }
    }

    /// Whether every partition of a bounded read has been read to its end by a shard of
    /// this process.
    fn bounded_done(&self) -> bool {
        let Some(ends) = &self.shared.ends else { return false };
        let progress = lock(&self.shared.progress);
        ends.iter().all(|(p, &end)| end < 0 || progress.reached.contains(p))
    }

    /// Marks the held partitions of a bounded read that are at their end (an empty one, or
    /// one whose restored position is its end).
    fn mark_reached(&self) {
        let Some(ends) = &self.shared.ends else { return };
        let held = lock(&self.held);
        let mut progress = lock(&self.shared.progress);
        for (p, part) in held.iter() {
            if let (Some(next), Some(&end)) = (part.next, ends.get(p))
                && next >= end
            {
                progress.reached.insert(*p);
            }
        }
    }

    /// Ends a bounded read once every partition reached its end: commits the end
    /// positions, leaves the group, and wakes the other shards' instances.
    fn end_bounded(&mut self) {
        // Commit the end positions now, while every shard is still in the group
        // (an ended source keeps serving its consumer until dropped). With
        // checkpoints this runs ahead of the final checkpoint by moments: its
        // completion is not always reported to sources before the pipeline ends
        // (the driver may finish first), and a restore seeks to checkpointed
        // positions anyway, as after a revocation's commit.
        self.commit_at_end(&self.positions_now());
        self.uncommitted = false;
        // Leave the group now rather than when dropped: shards are dropped one by
        // one as the pipeline ends, and a member closing while the group
        // rebalances around one that is already gone can wait out the session
        // timeout.
        self.consumer.context().leaving.store(true, std::sync::atomic::Ordering::Release);
        self.consumer.unsubscribe();
        self.ended = true;
        // Shards idle on their consumers learn of the end from here.
        let others: Vec<Waker> = lock(&self.shared.progress)
            .wakers
            .iter()
            .filter(|(s, _)| **s != self.shard)
            .filter_map(|(_, w)| lock(w).take())
            .collect();
        others.into_iter().for_each(Waker::wake);
    }
}

impl<T: 'static, F: FnMut(KafkaRecord<'_>) -> T + 'static> Source<T> for KafkaSource<T, F> {
    fn splits(&self) -> usize {
        1
    }

    fn poll_next(&mut self, cx: &mut Context<'_>, out: &mut Vec<T>, max: usize) -> Poll<Option<usize>> {
        if self.ended {
            // Serve the consumer's events (the revocation of leaving the group; a bounded
            // read's records are all emitted, anything polled now is past the end).
            while let Some(m) = self.consumer.poll(Duration::ZERO) {
                drop(m);
            }
            return Poll::Ready(None);
        }
        // Registered before polling: a record that lands after the last poll below finds
        // the queue empty and fires the callback with this waker.
        *lock(&self.waker) = Some(cx.waker().clone());
        self.assign_fixed();
        let topic = self.shared.config.topic.clone();
        let ends = self.shared.ends.clone();
        let mut polled = self.take_handoffs();
        let mut drained = false;
        while out.len() < max {
            match self.consumer.poll(Duration::ZERO) {
                None => {
                    drained = true;
                    break;
                }
                Some(Err(KafkaError::MessageConsumptionFatal(code))) => {
                    panic!("Kafka source on {topic}: fatal consumer error {code}");
                }
                Some(Err(e)) => {
                    let mut errors = lock(&self.consumer.context().errors);
                    if errors.len() < 16 {
                        errors.push(format!("consume: {e}"));
                    }
                }
                Some(Ok(m)) => {
                    polled += 1;
                    let (p, offset) = (m.partition(), m.offset());
                    if m.topic() != topic {
                        continue;
                    }
                    let mut held = lock(&self.held);
                    let Some(part) = held.get_mut(&p).filter(|part| !part.waiting) else {
                        // Revoked since it was fetched, or not handed over yet.
                        continue;
                    };
                    let next = &mut part.next;
                    if let Some(end) = ends.as_ref().and_then(|e| e.get(&p)).copied() {
                        if offset >= end {
                            *next = Some(end.max(next.unwrap_or(end)));
                            drop(held);
                            lock(&self.shared.progress).reached.insert(p);
                            continue;
                        }
                        if offset + 1 >= end {
                            lock(&self.shared.progress).reached.insert(p);
                        }
                    }
                    *next = Some(offset + 1);
                    drop(held);
                    let timestamp = EventTime::from_millis(m.timestamp().to_millis().unwrap_or(0));
                    out.push((self.map)(KafkaRecord {
                        key: m.key(),
                        value: m.payload(),
                        partition: p,
                        offset,
                        timestamp,
                        raw_headers: m.headers(),
                    }));
                    self.uncommitted = true;
                }
            }
        }
        if !self.checkpointed.get()
            && self.uncommitted
            && self.last_commit.elapsed() >= self.shared.config.commit_interval
        {
            self.commit(&self.positions_now(), CommitMode::Async);
            self.uncommitted = false;
            self.last_commit = Instant::now();
        }
        if !out.is_empty() {
            return Poll::Ready(Some(0));
        }
        if ends.is_some() {
            self.mark_reached();
            if self.bounded_done() {
                self.end_bounded();
                return Poll::Ready(None);
            }
        }
        if drained && polled == 0 {
            Poll::Pending
        } else {
            // Events were served (a rebalance, skipped records): look again.
            Poll::Ready(Some(0))
        }
    }

    fn positions(&self) -> Option<Vec<(u64, i64)>> {
        self.checkpointed.set(true);
        Some(self.positions_now().into_iter().map(|(p, n)| (p as u64, n)).collect())
    }

    fn restore(&mut self, positions: &HashMap<u64, i64>) -> Result<(), UserError> {
        self.checkpointed.set(true);
        let mut progress = lock(&self.shared.progress);
        if progress.restored.is_none() {
            let mut restored = HashMap::with_capacity(positions.len());
            for (&p, &next) in positions {
                let p = i32::try_from(p).map_err(|_| RestoreError::Split {
                    source_name: "Kafka source",
                    detail: format!("no partition {p} (from a checkpoint)"),
                })?;
                if next < 0 {
                    let split = p as u64;
                    return Err(
                        RestoreError::NegativePosition { source_name: "Kafka source", split, position: next }.into()
                    );
                }
                restored.insert(p, next);
            }
            progress.restored = Some(restored);
        }
        Ok(())
    }

    fn checkpoint_completed(&mut self, positions: &[(u64, i64)]) {
        let positions: Vec<(i32, i64)> =
            positions.iter().filter_map(|&(p, n)| i32::try_from(p).ok().map(|p| (p, n))).collect();
        self.last_completed = positions;
        self.commit(&self.still_held(&self.last_completed), CommitMode::Async);
    }
}

impl<T, F> Drop for KafkaSource<T, F> {
    fn drop(&mut self) {
        if !self.checkpointed.get() && self.uncommitted {
            self.commit_at_end(&self.positions_now());
        } else if self.checkpointed.get() && !self.ended {
            // Again, in case the async commit at completion was still in flight.
            self.commit(&self.still_held(&self.last_completed), CommitMode::Async);
        }
        let held: Vec<(i32, Part)> = lock(&self.held).iter().map(|(&p, &part)| (p, part)).collect();
        release(&self.shared, self.shard, &self.held, &held);
        lock(&self.shared.progress).wakers.remove(&self.shard);
        // Dropping the consumer leaves the group (librdkafka's close).
    }
}
