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
//! unchanged); the shard only sends the txn into a bounded channel. A checkpoint holds
//! only the txns not yet handed over, so at every barrier the sink waits until those it
//! handed over are committed
//! ([`TwoPhaseCommitSink::flush_commits`]): otherwise a crash between that checkpoint and
//! their commit would lose them (the restored run would not know them). The wait is
//! usually nil: a txn is handed over when its checkpoint completes, an interval earlier. A committer's failure
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
//!
//! This file holds the configuration, the factory and the sink itself; the epoch's records
//! and their checkpoint encoding are in `records`, the committer threads and their Kafka
//! transactions in `committer`.

mod committer;
mod records;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use rdkafka::{
    ClientContext,
    error::KafkaError,
    message::DeliveryResult,
    producer::{BaseProducer, BaseRecord, Producer, ProducerContext},
    types::RDKafkaErrorCode,
};

pub use self::committer::SinkFailure;
use self::committer::{Committer, SinkShared};
pub use self::records::{KafkaTxn, OutRecord};
use super::{KafkaConnectorError, client_config, validate_common, validate_group};
use crate::dataflow::{Event, TwoPhaseCommitSink, UserError};

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

fn lock<V>(m: &Mutex<V>) -> std::sync::MutexGuard<'_, V> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
            handed: HashMap::new(),
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

/// Sends `record`, waiting (serving delivery reports) while librdkafka's queue is full.
pub(super) fn send_with_backpressure<C: ProducerContext>(
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
    /// Exactly once: per committer, the ticket of the last txn this instance handed it
    /// that is not known to be committed yet.
    handed: HashMap<u32, u64>,
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
    fn flush(&self) -> Result<(), SinkFailure> {
        let Some(p) = &self.producer else { return Ok(()) };
        p.flush(self.shared.config.request_timeout).map_err(SinkFailure::kafka("Kafka sink flush".into()))?;
        match lock(&p.context().first).clone() {
            Some(e) => Err(SinkFailure::new(format!("Kafka sink: {e}"))),
            None => Ok(()),
        }
    }
}

impl<T: 'static, F: FnMut(Event<T>) -> OutRecord + 'static> TwoPhaseCommitSink<T> for KafkaSink<T, F> {
    type Txn = KafkaTxn;

    fn begin(&mut self) -> Result<KafkaTxn, UserError> {
        self.shared.check()?;
        Ok(KafkaTxn { epoch: 0, origin_shard: self.origin, records: Vec::new() })
    }

    fn write(&mut self, txn: &mut KafkaTxn, record: Event<T>) -> Result<(), UserError> {
        let r = (self.map)(record);
        match &self.producer {
            None => txn.records.push(r),
            Some(p) => {
                send_with_backpressure(p, r.to_base_record(&self.shared.config.topic))
                    .map_err(SinkFailure::kafka("Kafka sink: producing".into()))?;
                p.poll(Duration::ZERO);
            }
        }
        Ok(())
    }

    fn pre_commit(&mut self, txn: &mut KafkaTxn) -> Result<(), UserError> {
        if self.producer.is_some() {
            return Ok(self.flush()?);
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

    fn commit(&mut self, txn: KafkaTxn) -> Result<(), UserError> {
        if self.producer.is_some() {
            return Ok(self.flush()?);
        }
        if txn.epoch == 0 {
            return Err("Kafka sink: a transaction committed without pre-commit".into());
        }
        self.shared.check()?;
        let origin = txn.origin_shard;
        let ticket = self.shared.committer(origin).enqueue(txn)?;
        self.handed.insert(origin, ticket);
        Ok(())
    }

    /// A checkpoint holds only the txns not yet handed to a committer: wait until those
    /// handed over are in Kafka, or a crash after this checkpoint would lose them.
    fn flush_commits(&mut self) -> Result<(), UserError> {
        for (origin, ticket) in std::mem::take(&mut self.handed) {
            self.shared.committer(origin).wait_done(ticket)?;
        }
        Ok(())
    }

    fn abort(&mut self, _: KafkaTxn) -> Result<(), UserError> {
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
