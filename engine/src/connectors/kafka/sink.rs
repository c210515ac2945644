//! [`KafkaSink`]: writing a stream to a Kafka topic, exactly once through Kafka
//! transactions tied to checkpoints (or at least once, through a plain idempotent producer).
//!
//! # Exactly once: a write-ahead design
//!
//! librdkafka cannot resume another producer's open transaction after a crash, so the
//! Kafka transaction is not opened during the epoch. Instead:
//!
//! 1. During an epoch (between two barriers) the records are kept in the epoch's
//!    [`KafkaTxn`], with the shard that made them (`origin_shard`).
//! 2. At the barrier, `pre_commit` only closes the epoch and numbers it. The txn, records
//!    and all, goes into the checkpoint: the checkpoint is the write-ahead log. Epochs
//!    increase per origin across runs: each run of a committer reserves a run number `n`
//!    (a plain offset commit of `n` for the group `{prefix}-{origin_shard}-runs`) and
//!    numbers its epochs from `n << 32`, above every epoch an earlier run can have put
//!    into a checkpoint. (Numbering from the restored txns alone would not do: a shard may
//!    reach its first barrier before another shard has handed over the restored txns.)
//! 3. Once the checkpoint completes, `commit` hands the txn to the origin's committer
//!    thread, which runs one Kafka transaction with the stable `transactional.id`
//!    `{prefix}-{origin_shard}`: begin, produce the records,
//!    `send_offsets_to_transaction` committing offset = `epoch` for the *marker group*
//!    `{prefix}-{origin_shard}` on partition 0 of the output topic, commit. The records
//!    and the marker become visible atomically.
//! 4. Before that, the committer reads the marker group's committed offset (a
//!    `read_committed` OffsetFetch, which waits for pending transactional offsets): if it
//!    is `>= epoch`, that epoch is already in Kafka and is skipped. So `commit` is
//!    idempotent: a pipeline restored from a checkpoint commits its txns again and
//!    writes each at most once, and since every txn of a completed checkpoint is committed
//!    (by this run or the restored one), exactly once.
//!
//! `init_transactions` with the stable id, when a committer starts, fences a zombie of a
//! previous run and aborts what it left open. Committing blocks in librdkafka, so each
//! origin has its own committer thread (one per sink instance when the shard count is
//! unchanged); the shard only sends the txn into a bounded channel. A committer's failure
//! surfaces at the sink's next call (failing the pipeline), when the sink instance is
//! dropped at the end of the pipeline (which waits for its committers), and from
//! [`KafkaSinkFactory::finish`].
//!
//! Output is visible (to `read_committed` consumers) one checkpoint after it was made, and
//! each epoch's records are held in memory and in the checkpoint until then: size the
//! checkpoint interval accordingly. Two processes must not share a transactional-id prefix.
//!
//! # At least once
//!
//! [`DeliveryGuarantee::AtLeastOnce`] writes every record as it comes through an
//! idempotent producer and flushes at every barrier (a checkpoint completes only once what
//! came before it is acknowledged). A restore may write records again.

use std::{
    collections::HashMap,
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicU64, Ordering},
        mpsc::{Receiver, SyncSender},
    },
    thread::JoinHandle,
    time::Duration,
};

use rdkafka::{
    ClientContext, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
    message::DeliveryResult,
    producer::{BaseProducer, BaseRecord, Producer, ProducerContext},
    types::RDKafkaErrorCode,
};
use sluice_io::EventTime;

use super::{KafkaConnectorError, client_config, validate_common, validate_group};
use crate::dataflow::{
    Data, Event, TwoPhaseCommitSink,
    checkpoint::{StateError, take},
};

/// The output partition whose offset the marker groups commit.
const MARKER_PARTITION: i32 = 0;

/// What a [`KafkaSink`] promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryGuarantee {
    /// Kafka transactions committed after each checkpoint: every record once, visible to
    /// `read_committed` consumers one checkpoint after it was made.
    ExactlyOnce,
    /// An idempotent producer flushed at every barrier: every record at least once.
    AtLeastOnce,
}

/// Where and how a [`KafkaSink`] writes.
#[derive(Debug, Clone)]
pub struct KafkaSinkConfig {
    /// librdkafka's `bootstrap.servers`.
    pub bootstrap_servers: String,
    /// The output topic (it must exist; partition 0 also carries the marker offsets).
    pub topic: String,
    /// Prefix of the transactional ids and marker groups, `{prefix}-{shard}`; unique per
    /// pipeline writing to the cluster, and stable across its restarts.
    pub transactional_id_prefix: String,
    /// Exactly once (default) or at least once.
    pub guarantee: DeliveryGuarantee,
    /// librdkafka's `transaction.timeout.ms`: how long the broker lets a transaction stay
    /// open before aborting it (a crashed committer's). Default 60 s.
    pub transaction_timeout: Duration,
    /// The longest a blocking producer call (init, commit, flush) may take. Default 30 s.
    pub request_timeout: Duration,
    /// Closed epochs waiting for a committer before `commit` blocks the shard. Default 4.
    pub commit_queue_txns: usize,
    /// librdkafka's `linger.ms`. Default 5 ms.
    pub linger: Duration,
    /// Any other librdkafka producer properties (`batch.size`, `compression.type`, ...),
    /// set after sluice's. The transactional id and idempotence are always sluice's.
    pub properties: Vec<(String, String)>,
}

impl KafkaSinkConfig {
    /// Exactly-once writes to `topic` at `bootstrap_servers`, with ids `{prefix}-{shard}`.
    #[must_use]
    pub fn new(
        bootstrap_servers: impl Into<String>,
        topic: impl Into<String>,
        transactional_id_prefix: impl Into<String>,
    ) -> Self {
        KafkaSinkConfig {
            bootstrap_servers: bootstrap_servers.into(),
            topic: topic.into(),
            transactional_id_prefix: transactional_id_prefix.into(),
            guarantee: DeliveryGuarantee::ExactlyOnce,
            transaction_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(30),
            commit_queue_txns: 4,
            linger: Duration::from_millis(5),
            properties: Vec::new(),
        }
    }

    /// At-least-once writes instead.
    #[must_use]
    pub fn at_least_once(mut self) -> Self {
        self.guarantee = DeliveryGuarantee::AtLeastOnce;
        self
    }

    /// Sets a librdkafka producer property.
    #[must_use]
    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.push((key.into(), value.into()));
        self
    }

    fn validate(&self) -> Result<(), KafkaConnectorError> {
        validate_common(&self.bootstrap_servers, &self.topic, self.request_timeout)?;
        validate_group("transactional id prefix", &self.transactional_id_prefix)?;
        if self.commit_queue_txns == 0 {
            return Err(KafkaConnectorError::Config("commit_queue_txns is zero".into()));
        }
        if self.transaction_timeout < Duration::from_secs(1) {
            return Err(KafkaConnectorError::Config("the transaction timeout is under 1 s".into()));
        }
        Ok(())
    }

    fn runs_group(&self, origin: u32) -> String {
        format!("{}-{origin}-runs", self.transactional_id_prefix)
    }

    fn id(&self, origin: u32) -> String {
        format!("{}-{origin}", self.transactional_id_prefix)
    }

    fn producer_config(&self) -> rdkafka::ClientConfig {
        let mut config = client_config(&self.bootstrap_servers, &[]);
        config
            // Kafka's partitioner for keyed records, so keys land where a Java client puts them.
            .set("partitioner", "murmur2_random")
            .set("linger.ms", self.linger.as_millis().to_string())
            .set("transaction.timeout.ms", self.transaction_timeout.as_millis().to_string());
        for (k, v) in &self.properties {
            config.set(k, v);
        }
        config.set("enable.idempotence", "true");
        config
    }
}

/// One output record: what the user's function makes of a stream element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutRecord {
    /// The key; the partition is chosen from it by Kafka's murmur2 partitioner (a record
    /// without a key goes to a random partition).
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Vec<u8>,
    /// The Kafka timestamp in ms since the epoch; `None` lets the producer stamp it.
    pub timestamp: Option<i64>,
}

impl OutRecord {
    /// A record without a timestamp.
    #[must_use]
    pub fn new(key: Option<Vec<u8>>, value: Vec<u8>) -> Self {
        OutRecord { key, value, timestamp: None }
    }

    /// With timestamp `time` (typically the element's event time).
    #[must_use]
    pub fn at(mut self, time: EventTime) -> Self {
        self.timestamp = Some(time.millis());
        self
    }
}

fn encode_bytes(b: &[u8], out: &mut Vec<u8>) {
    (b.len() as u64).encode(out);
    out.extend_from_slice(b);
}

fn decode_bytes(input: &mut &[u8], what: &str) -> Result<Vec<u8>, StateError> {
    let len = u64::decode(input)?;
    let len = usize::try_from(len).map_err(|_| StateError(format!("{what} of {len} bytes")))?;
    Ok(take(input, len, what)?.to_vec())
}

impl Data for OutRecord {
    fn encode(&self, out: &mut Vec<u8>) {
        match &self.key {
            Some(k) => {
                out.push(1);
                encode_bytes(k, out);
            }
            None => out.push(0),
        }
        encode_bytes(&self.value, out);
        self.timestamp.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let key = match u8::decode(input)? {
            0 => None,
            1 => Some(decode_bytes(input, "a Kafka record key")?),
            t => return Err(StateError(format!("a Kafka record key tag {t}"))),
        };
        let value = decode_bytes(input, "a Kafka record value")?;
        let timestamp = Option::<i64>::decode(input)?;
        Ok(OutRecord { key, value, timestamp })
    }
}

/// One epoch of one sink instance: the records themselves, so that any process can commit
/// it from the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaTxn {
    /// Numbered at pre-commit; increasing per origin shard across runs.
    pub epoch: u64,
    /// The shard that made it: names its transactional id and marker group.
    pub origin_shard: u32,
    /// The records, in order (empty in at-least-once mode, which sends them at once).
    pub records: Vec<OutRecord>,
}

impl Data for KafkaTxn {
    fn encode(&self, out: &mut Vec<u8>) {
        self.epoch.encode(out);
        self.origin_shard.encode(out);
        self.records.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(KafkaTxn { epoch: u64::decode(input)?, origin_shard: u32::decode(input)?, records: Vec::decode(input)? })
    }
}

/// What the committers did, summed over every origin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkStats {
    /// Epochs written in a committed Kafka transaction.
    pub epochs_committed: u64,
    /// Epochs found already committed (by the marker) and skipped: the commits after a
    /// restore of what the previous run had committed.
    pub epochs_skipped: u64,
    /// Records written in committed transactions.
    pub records_committed: u64,
}

#[derive(Debug, Default)]
struct Counters {
    committed: AtomicU64,
    skipped: AtomicU64,
    records: AtomicU64,
}

/// Shared by every sink instance of one process for one pipeline: the committers (one
/// thread per origin shard) and their counters. Clone it into the build function and call
/// [`KafkaSinkFactory::instance`] on every shard; call [`KafkaSinkFactory::finish`] after
/// the pipeline.
#[derive(Debug, Clone)]
pub struct KafkaSinkFactory {
    shared: Arc<SinkShared>,
}

#[derive(Debug)]
struct SinkShared {
    config: KafkaSinkConfig,
    committers: Mutex<HashMap<u32, Arc<Committer>>>,
    counters: Arc<Counters>,
}

fn lock<V>(m: &Mutex<V>) -> std::sync::MutexGuard<'_, V> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One origin's committer thread and what the shards see of it.
#[derive(Debug)]
struct Committer {
    origin: u32,
    tx: Mutex<Option<SyncSender<KafkaTxn>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    state: Mutex<CommitterState>,
    changed: Condvar,
    /// The highest epoch of this origin known: committed (the marker read at start), the
    /// floor of this run's reserved range minus one, restored, or numbered by pre-commit.
    highest_epoch: AtomicU64,
}

#[derive(Debug, Default)]
struct CommitterState {
    /// Set once the thread has started its producer and read the marker.
    started: Option<Result<(), String>>,
    queued: u64,
    done: u64,
    error: Option<String>,
}

impl Committer {
    fn error(&self) -> Option<String> {
        lock(&self.state).error.clone()
    }

    fn wait_started(&self, timeout: Duration) -> Result<(), String> {
        let state = lock(&self.state);
        let (state, _) = self
            .changed
            .wait_timeout_while(state, timeout, |s| s.started.is_none())
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.started.clone().unwrap_or_else(|| Err(format!("committer {} did not start in {timeout:?}", self.origin)))
    }

    /// Waits until every txn queued so far is committed or skipped (or failed).
    fn wait_idle(&self) {
        let state = lock(&self.state);
        drop(self.changed.wait_while(state, |s| s.done < s.queued).unwrap_or_else(std::sync::PoisonError::into_inner));
    }

    fn enqueue(&self, txn: KafkaTxn) -> Result<(), String> {
        if let Some(e) = self.error() {
            return Err(e);
        }
        self.highest_epoch.fetch_max(txn.epoch, Ordering::AcqRel);
        let tx = lock(&self.tx).clone().ok_or_else(|| "the Kafka sink has finished".to_string())?;
        lock(&self.state).queued += 1;
        tx.send(txn).map_err(|_| {
            let mut state = lock(&self.state);
            state.queued -= 1;
            state.error.clone().unwrap_or_else(|| format!("committer {} stopped", self.origin))
        })
    }
}

impl KafkaSinkFactory {
    /// Checks the config. Nothing connects until [`KafkaSinkFactory::instance`].
    ///
    /// # Errors
    ///
    /// A bad config.
    pub fn new(config: KafkaSinkConfig) -> Result<Self, KafkaConnectorError> {
        config.validate()?;
        Ok(KafkaSinkFactory {
            shared: Arc::new(SinkShared {
                config,
                committers: Mutex::new(HashMap::new()),
                counters: Arc::new(Counters::default()),
            }),
        })
    }

    /// This shard's sink, turning each element into an [`OutRecord`] with `map`. In
    /// exactly-once mode this starts the shard's committer (its transactional producer,
    /// fencing a previous run's, and the read of its marker) and waits for it.
    ///
    /// # Errors
    ///
    /// The producer could not start or the cluster did not answer in time.
    pub fn instance<T, F>(&self, shard: usize, map: F) -> Result<KafkaSink<T, F>, KafkaConnectorError>
    where
        F: FnMut(Event<T>) -> OutRecord + 'static,
    {
        let origin = u32::try_from(shard).map_err(|_| KafkaConnectorError::Config(format!("shard {shard}")))?;
        let config = &self.shared.config;
        let producer = match config.guarantee {
            DeliveryGuarantee::ExactlyOnce => {
                let committer = self.shared.committer(origin);
                committer
                    .wait_started(config.request_timeout.saturating_mul(3) + config.transaction_timeout)
                    .map_err(KafkaConnectorError::Commit)?;
                None
            }
            DeliveryGuarantee::AtLeastOnce => {
                let mut client = config.producer_config();
                client.set("client.id", format!("sluice-sink-{origin}"));
                let producer: BaseProducer<DeliveryErrors> = client
                    .create_with_context(DeliveryErrors::default())
                    .map_err(|e| KafkaConnectorError::client("creating a producer", e))?;
                Some(producer)
            }
        };
        Ok(KafkaSink {
            shared: self.shared.clone(),
            origin,
            map,
            last_epoch: 0,
            producer,
            _in: std::marker::PhantomData,
        })
    }

    /// The committers' counts so far.
    #[must_use]
    pub fn stats(&self) -> SinkStats {
        let c = &self.shared.counters;
        SinkStats {
            epochs_committed: c.committed.load(Ordering::Acquire),
            epochs_skipped: c.skipped.load(Ordering::Acquire),
            records_committed: c.records.load(Ordering::Acquire),
        }
    }

    /// Waits for every committer to finish what it was given, stops them, and reports.
    /// Call it after the pipeline has ended.
    ///
    /// # Errors
    ///
    /// The first committer failure.
    pub fn finish(&self) -> Result<SinkStats, KafkaConnectorError> {
        let committers: Vec<Arc<Committer>> = lock(&self.shared.committers).values().cloned().collect();
        let mut first_error = None;
        for c in committers {
            lock(&c.tx).take();
            if let Some(t) = lock(&c.thread).take() {
                let _ = t.join();
            }
            if let Some(e) = c.error() {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(KafkaConnectorError::Commit(e)),
            None => Ok(self.stats()),
        }
    }
}

impl SinkShared {
    /// The committer of `origin`, started if there is none yet.
    fn committer(&self, origin: u32) -> Arc<Committer> {
        let mut committers = lock(&self.committers);
        committers
            .entry(origin)
            .or_insert_with(|| {
                let (tx, rx) = std::sync::mpsc::sync_channel(self.config.commit_queue_txns);
                let committer = Arc::new(Committer {
                    origin,
                    tx: Mutex::new(Some(tx)),
                    thread: Mutex::new(None),
                    state: Mutex::new(CommitterState::default()),
                    changed: Condvar::new(),
                    highest_epoch: AtomicU64::new(0),
                });
                let (c, config, counters) = (committer.clone(), self.config.clone(), self.counters.clone());
                let thread = std::thread::Builder::new()
                    .name(format!("sluice-kafka-commit-{origin}"))
                    .spawn(move || run_committer(&c, &config, &counters, &rx));
                match thread {
                    Ok(t) => *lock(&committer.thread) = Some(t),
                    Err(e) => {
                        let mut state = lock(&committer.state);
                        let e = format!("starting committer {origin}: {e}");
                        state.started = Some(Err(e.clone()));
                        state.error = Some(e);
                    }
                }
                committer
            })
            .clone()
    }

    fn check(&self) -> Result<(), String> {
        for c in lock(&self.committers).values() {
            if let Some(e) = c.error() {
                return Err(e);
            }
        }
        Ok(())
    }
}

/// The body of a committer thread: start, then commit txns in order until the channel
/// closes. After a failure it only counts what it is given, so nothing waits forever.
fn run_committer(c: &Committer, config: &KafkaSinkConfig, counters: &Counters, rx: &Receiver<KafkaTxn>) {
    let mut worker = match Worker::start(config, c.origin) {
        Ok((worker, floor)) => {
            c.highest_epoch.fetch_max(floor, Ordering::AcqRel);
            lock(&c.state).started = Some(Ok(()));
            Some(worker)
        }
        Err(e) => {
            let mut state = lock(&c.state);
            state.started = Some(Err(e.clone()));
            state.error = Some(e);
            None
        }
    };
    c.changed.notify_all();
    while let Ok(txn) = rx.recv() {
        if let Some(w) = &mut worker {
            match w.commit(&txn) {
                Ok(true) => {
                    counters.committed.fetch_add(1, Ordering::AcqRel);
                    counters.records.fetch_add(txn.records.len() as u64, Ordering::AcqRel);
                }
                Ok(false) => {
                    counters.skipped.fetch_add(1, Ordering::AcqRel);
                }
                Err(e) => {
                    lock(&c.state).error = Some(e);
                    worker = None;
                }
            }
        }
        lock(&c.state).done += 1;
        c.changed.notify_all();
    }
}

/// A committer's clients: the transactional producer and a consumer of the marker group
/// (never subscribed; it only reads the committed marker and provides group metadata).
struct Worker {
    producer: BaseProducer,
    marker: BaseConsumer,
    topic: String,
    id: String,
    timeout: Duration,
}

impl Worker {
    /// Starts the producer (`init_transactions` fences a previous run's and aborts its
    /// open transaction), reads the marker and reserves this run's epoch range; returns
    /// the highest epoch this run must stay above.
    fn start(config: &KafkaSinkConfig, origin: u32) -> Result<(Worker, u64), String> {
        let id = config.id(origin);
        let mut client = config.producer_config();
        client.set("transactional.id", &id).set("client.id", format!("sluice-sink-{origin}"));
        let producer: BaseProducer = client.create().map_err(|e| format!("creating producer {id}: {e}"))?;
        producer.init_transactions(config.request_timeout).map_err(|e| format!("init_transactions of {id}: {e}"))?;
        let marker: BaseConsumer = client_config(&config.bootstrap_servers, &[])
            .set("group.id", &id)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("client.id", format!("sluice-sink-marker-{origin}"))
            .create()
            .map_err(|e| format!("creating the marker consumer of {id}: {e}"))?;
        let worker = Worker { producer, marker, topic: config.topic.clone(), id, timeout: config.request_timeout };
        let committed = worker.committed_epoch()?;
        let run = worker.reserve_run(config, origin)?;
        Ok((worker, committed.max((run << 32) - 1)))
    }

    /// Reserves the next run number of this origin: reads the last one from the group
    /// `{prefix}-{origin}-runs` and commits it plus one (a plain, synchronous commit).
    fn reserve_run(&self, config: &KafkaSinkConfig, origin: u32) -> Result<u64, String> {
        let group = config.runs_group(origin);
        let runs: BaseConsumer = client_config(&config.bootstrap_servers, &[])
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .set("client.id", format!("sluice-sink-runs-{origin}"))
            .create()
            .map_err(|e| format!("creating the run consumer of {group}: {e}"))?;
        let mut tpl = TopicPartitionList::new();
        let _ = tpl.add_partition(&self.topic, MARKER_PARTITION);
        let last = runs
            .committed_offsets(tpl, self.timeout)
            .map_err(|e| format!("reading the run number of {group}: {e}"))?
            .find_partition(&self.topic, MARKER_PARTITION)
            .and_then(|e| e.offset().to_raw())
            .filter(|&n| n >= 0)
            .unwrap_or(0);
        let run = u64::try_from(last).unwrap_or(0) + 1;
        if run >= 1 << 31 {
            return Err(format!("{group}: run number {run} out of range"));
        }
        let mut next = TopicPartitionList::new();
        next.add_partition_offset(&self.topic, MARKER_PARTITION, Offset::Offset(run as i64))
            .map_err(|e| format!("run number offset: {e}"))?;
        runs.commit(&next, rdkafka::consumer::CommitMode::Sync)
            .map_err(|e| format!("reserving run {run} in {group}: {e}"))?;
        Ok(run)
    }

    /// The last epoch committed for this origin: the marker group's committed offset.
    fn committed_epoch(&self) -> Result<u64, String> {
        let mut tpl = TopicPartitionList::new();
        let _ = tpl.add_partition(&self.topic, MARKER_PARTITION);
        let committed = self
            .marker
            .committed_offsets(tpl, self.timeout)
            .map_err(|e| format!("reading the marker of {}: {e}", self.id))?;
        let offset =
            committed.find_partition(&self.topic, MARKER_PARTITION).map(|e| e.offset()).unwrap_or(Offset::Invalid);
        Ok(match offset {
            Offset::Offset(n) => u64::try_from(n).unwrap_or(0),
            _ => 0,
        })
    }

    /// Commits `txn` unless its epoch is already committed; returns whether it wrote.
    fn commit(&mut self, txn: &KafkaTxn) -> Result<bool, String> {
        if self.committed_epoch()? >= txn.epoch {
            return Ok(false);
        }
        let id = self.id.clone();
        self.producer.begin_transaction().map_err(|e| format!("begin_transaction of {id}: {e}"))?;
        match self.write(txn) {
            Ok(()) => Ok(true),
            Err(e) => {
                // Leave nothing open behind; a fatal error makes the producer unusable,
                // which the error already says.
                let _ = self.producer.abort_transaction(self.timeout);
                Err(format!("transaction of {id} for epoch {}: {e}", txn.epoch))
            }
        }
    }

    fn write(&mut self, txn: &KafkaTxn) -> Result<(), String> {
        for r in &txn.records {
            let mut record = BaseRecord::<[u8], [u8]>::to(&self.topic).payload(&r.value[..]);
            if let Some(k) = &r.key {
                record = record.key(&k[..]);
            }
            if let Some(ts) = r.timestamp {
                record = record.timestamp(ts);
            }
            send_with_backpressure(&self.producer, record).map_err(|e| format!("producing: {e}"))?;
        }
        let mut offsets = TopicPartitionList::new();
        let epoch = i64::try_from(txn.epoch).map_err(|_| format!("epoch {} out of range", txn.epoch))?;
        offsets
            .add_partition_offset(&self.topic, MARKER_PARTITION, Offset::Offset(epoch))
            .map_err(|e| format!("marker offset: {e}"))?;
        let group = self.marker.group_metadata().ok_or_else(|| "no group metadata for the marker".to_string())?;
        self.producer
            .send_offsets_to_transaction(&offsets, &group, self.timeout)
            .map_err(|e| format!("send_offsets_to_transaction: {e}"))?;
        self.producer.commit_transaction(self.timeout).map_err(|e| format!("commit_transaction: {e}"))
    }
}

/// Sends `record`, waiting (serving delivery reports) while librdkafka's queue is full.
fn send_with_backpressure<C: ProducerContext>(
    producer: &BaseProducer<C>,
    mut record: BaseRecord<'_, [u8], [u8], C::DeliveryOpaque>,
) -> Result<(), KafkaError> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                producer.poll(Duration::from_millis(10));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// The at-least-once producer's delivery reports: the first failure is kept.
#[derive(Debug, Default)]
struct DeliveryErrors {
    first: Mutex<Option<String>>,
}

impl ClientContext for DeliveryErrors {}

impl ProducerContext for DeliveryErrors {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            lock(&self.first).get_or_insert_with(|| format!("delivering a record: {e}"));
        }
    }
}

/// One shard's Kafka sink; use it with
/// [`Stream::to_two_phase_commit`](crate::dataflow::Stream::to_two_phase_commit). Made by
/// [`KafkaSinkFactory::instance`].
pub struct KafkaSink<T, F> {
    shared: Arc<SinkShared>,
    origin: u32,
    map: F,
    /// The last epoch this instance numbered.
    last_epoch: u64,
    /// At least once: the producer records go through as they come.
    producer: Option<BaseProducer<DeliveryErrors>>,
    _in: std::marker::PhantomData<fn(T)>,
}

impl<T, F> std::fmt::Debug for KafkaSink<T, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink")
            .field("topic", &self.shared.config.topic)
            .field("origin", &self.origin)
            .field("last_epoch", &self.last_epoch)
            .finish_non_exhaustive()
    }
}

impl<T, F> KafkaSink<T, F> {
    fn flush(&self) -> Result<(), String> {
        let Some(p) = &self.producer else { return Ok(()) };
        p.flush(self.shared.config.request_timeout).map_err(|e| format!("Kafka sink flush: {e}"))?;
        match lock(&p.context().first).clone() {
            Some(e) => Err(format!("Kafka sink: {e}")),
            None => Ok(()),
        }
    }
}

impl<T: 'static, F: FnMut(Event<T>) -> OutRecord + 'static> TwoPhaseCommitSink<T> for KafkaSink<T, F> {
    type Txn = KafkaTxn;

    fn begin(&mut self) -> Result<KafkaTxn, String> {
        self.shared.check()?;
        Ok(KafkaTxn { epoch: 0, origin_shard: self.origin, records: Vec::new() })
    }

    fn write(&mut self, txn: &mut KafkaTxn, record: Event<T>) -> Result<(), String> {
        let r = (self.map)(record);
        match &self.producer {
            None => txn.records.push(r),
            Some(p) => {
                let mut record = BaseRecord::<[u8], [u8]>::to(&self.shared.config.topic).payload(&r.value[..]);
                if let Some(k) = &r.key {
                    record = record.key(&k[..]);
                }
                if let Some(ts) = r.timestamp {
                    record = record.timestamp(ts);
                }
                send_with_backpressure(p, record).map_err(|e| format!("Kafka sink: producing: {e}"))?;
                p.poll(Duration::ZERO);
            }
        }
        Ok(())
    }

    fn pre_commit(&mut self, txn: &mut KafkaTxn) -> Result<(), String> {
        if self.producer.is_some() {
            return self.flush();
        }
        // Above everything this origin has committed (the marker at start), above every
        // epoch an earlier run numbered (this run's reserved range) and above what this
        // run numbered.
        let committer = self.shared.committer(self.origin);
        let epoch = self.last_epoch.max(committer.highest_epoch.load(Ordering::Acquire)) + 1;
        committer.highest_epoch.fetch_max(epoch, Ordering::AcqRel);
        self.last_epoch = epoch;
        txn.epoch = epoch;
        Ok(())
    }

    fn commit(&mut self, txn: KafkaTxn) -> Result<(), String> {
        if self.producer.is_some() {
            return self.flush();
        }
        if txn.epoch == 0 {
            return Err("Kafka sink: a transaction committed without pre-commit".into());
        }
        self.shared.check()?;
        self.shared.committer(txn.origin_shard).enqueue(txn)
    }

    fn abort(&mut self, _: KafkaTxn) -> Result<(), String> {
        // Nothing reached Kafka (exactly once) or it already has (at least once).
        Ok(())
    }
}

impl<T, F> Drop for KafkaSink<T, F> {
    /// The end of the pipeline: waits until the committers have written what they were
    /// given (or flushes the at-least-once producer), and fails the shard if they could
    /// not.
    fn drop(&mut self) {
        let result = if self.producer.is_some() {
            self.flush()
        } else {
            let committers: Vec<Arc<Committer>> = lock(&self.shared.committers).values().cloned().collect();
            for c in &committers {
                c.wait_idle();
            }
            self.shared.check()
        };
        if let Err(e) = result
            && !std::thread::panicking()
        {
            panic!("{e}");
        }
    }
}
