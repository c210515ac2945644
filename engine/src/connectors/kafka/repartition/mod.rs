//! Repartition through a topic: a `key_by` whose keys meet across processes.
//!
//! [`Repartition::key_by_through`] ends a stream in a writer and starts a new one from a
//! reader, with a Kafka topic (the *repartition topic*) in between:
//!
//! - **The writer** (every shard of every process) turns each record into one for the
//!   partition of the topic its key hashes to: `murmur2(encoded key) % partitions`,
//!   Kafka's default partitioner over the key's [`Data`] encoding, which every process
//!   computes alike. The record's value is its event time (8 bytes, little-endian)
//!   followed by its `Data` encoding.
//! - **Watermarks cross with the data**: whenever the writer's watermark advances it
//!   appends a *watermark record* to every partition: no key, the header
//!   [`WATERMARK_HEADER`] naming the writer (`instance * shards + shard`, in decimal), the
//!   watermark as the value (8 bytes, little-endian). When its input ends it appends
//!   `EventTime::MAX` (a checkpointed source passes it before the final checkpoint, so it
//!   is committed with that), so windows downstream close.
//! - **Exactly once** (the default, [`DeliveryGuarantee::ExactlyOnce`]): the writer's
//!   records, watermark records included, go to a [`KafkaSink`] with the transactional-id
//!   prefix `{job_id}-through-{instance}`, the same write-ahead machinery as any
//!   exactly-once Kafka output: an epoch's records are kept in the checkpoint and written
//!   by the shard's committer thread in one Kafka transaction once the checkpoint
//!   completes (idempotently, by the epoch marker, so a restored process commits what its
//!   checkpoint pre-committed without writing it twice). The readers read
//!   `read_committed`, so a record crosses exactly once, **one checkpoint after it was
//!   written**: the repartition adds a checkpoint interval (plus the commit) to the
//!   latency of everything after it. The pipeline must checkpoint.
//!   [`RepartitionConfig::at_least_once`] writes as records come instead (idempotent
//!   producer, flushed at each barrier), with or without checkpoints.
//! - **The reader** (every shard of every process) is a [`KafkaSource`] in the consumer
//!   group named by the job id, so the group splits the topic's partitions between the
//!   processes and a key's records all reach the one process that holds its partition.
//!   A partition's watermark is the minimum over the writers' last watermark records on
//!   it (`EventTime::MIN` until every one of the `instances * shards` writers has written
//!   one there); the reader's watermark is the minimum over the partitions it holds, and
//!   it is emitted as a punctuation, so event-time windows downstream stay correct. Then
//!   a local `key_by` moves each record to the shard of this process that owns its key.
//!   The reader's checkpointed positions are the source's offsets plus every writer's
//!   last watermark on each partition it reads (keyed apart from the offsets), so a
//!   restored process resumes with both and waits for no writer's next watermark record.
//! - **Static membership** (default): the readers join with `group.instance.id`
//!   `{job_id}-{instance}-{shard}` (KIP-345), so a process that dies (`kill -9`) keeps its
//!   partitions, and their state stays valid, until it restarts from its checkpoint with
//!   the same instance number (within the consumer's `session.timeout.ms`, librdkafka's
//!   default 45 s); meanwhile the records for its partitions wait in the topic and the
//!   other processes' windows wait for its writers' watermarks.
//!
//! Limits (issue 27): on its own, a repartition does not move partitions to another
//! process with their state (a process that stays dead past the session timeout has its
//! partitions moved without their state): for takeover and scaling, run the job as slots
//! of a [`JobMember`](super::JobMember), each slot one instance on fixed partitions
//! restored from its own checkpoints wherever it runs; every process must run the same
//! number of shards; an idle writer holds the readers back (it writes no watermark while
//! its input is idle); every reader shard must hold at least one partition, since a shard
//! without one holds back the watermark of the `key_by` that follows:
//! [`Repartition::key_by_through`] refuses a topic with fewer than `instances * shards`
//! partitions, and the input should start once the group has settled
//! ([`Repartition::assignment`]); a broker that forgets group membership when it
//! restarts (`sluice serve` does) rebalances the readers on their rejoin, which can move
//! partitions without their state, unless [`RepartitionConfig::fixed_assignment`] pins
//! them (then a restart of `sluice serve` mid-run is survived exactly once, the
//! processes its restart fails restarted from their checkpoints).
//!
//! [`KafkaSink`]: super::KafkaSink
//! [`KafkaSource`]: super::KafkaSource

mod reader;
mod writer;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use rdkafka::consumer::BaseConsumer;

pub use self::reader::{RepartitionSource, Through};
pub use self::writer::RepartitionWriter;
use super::{
    DeliveryGuarantee, KafkaConnectorError, KafkaSinkConfig, KafkaSinkFactory, KafkaSourceConfig, KafkaSourceFactory,
    OutRecord, SinkStats, client_config, validate_common, validate_group,
};
use crate::dataflow::{Data, Event, KeyedStream, Output, Stream, WatermarkStrategy};

/// The header that marks a record of a repartition topic as a watermark record; its value
/// names the writer.
pub const WATERMARK_HEADER: &str = "sluice-watermark";

/// Where a [`Repartition`] writes and reads, and which instance of the job this process is.
#[derive(Debug, Clone)]
pub struct RepartitionConfig {
    /// librdkafka's `bootstrap.servers`: `host:port[,host:port...]`.
    pub bootstrap_servers: String,
    /// The job id: the consumer group the readers of every process join.
    pub job_id: String,
    /// The repartition topic (it must exist; its partition count is read at start).
    pub topic: String,
    /// This process's number among the job's processes, `0..instances`.
    pub instance: u32,
    /// How many processes run the job (each writer's watermark is awaited by the readers).
    pub instances: u32,
    /// The longest a blocking request (metadata, a committer's transaction call, a flush)
    /// may take. Default 30 s.
    pub request_timeout: Duration,
    /// Exactly once (the default: the writers' records cross in Kafka transactions
    /// committed after each checkpoint, which the pipeline must take) or at least once.
    pub guarantee: DeliveryGuarantee,
    /// The readers are static group members (`group.instance.id` `{job_id}-{instance}-{shard}`),
    /// so a process that dies keeps its partitions until it restarts (within
    /// `session.timeout.ms`). Default true.
    pub static_membership: bool,
    /// The readers do not join the group: reader `instance * shards + shard` reads the
    /// partitions `p` with `p % (instances * shards)` equal to its number, so nothing
    /// ever moves them, also not a broker that forgets group membership when it restarts
    /// (the group only stores committed offsets). Default false (group assignment).
    pub fixed_assignment: bool,
    /// Any other librdkafka properties, for the writer's producer and the reader's consumer.
    pub properties: Vec<(String, String)>,
}

impl RepartitionConfig {
    /// Instance `instance` of `instances` of job `job_id`, repartitioning through `topic`
    /// of the cluster at `bootstrap_servers`.
    #[must_use]
    pub fn new(
        bootstrap_servers: impl Into<String>,
        job_id: impl Into<String>,
        topic: impl Into<String>,
        instance: u32,
        instances: u32,
    ) -> Self {
        RepartitionConfig {
            bootstrap_servers: bootstrap_servers.into(),
            job_id: job_id.into(),
            topic: topic.into(),
            instance,
            instances,
            request_timeout: Duration::from_secs(30),
            guarantee: DeliveryGuarantee::ExactlyOnce,
            static_membership: true,
            fixed_assignment: false,
            properties: Vec::new(),
        }
    }

    /// At-least-once writes instead: records cross as they come, without checkpoints.
    #[must_use]
    pub fn at_least_once(mut self) -> Self {
        self.guarantee = DeliveryGuarantee::AtLeastOnce;
        self
    }

    /// The writers' transactional-id prefix, `{job_id}-through-{instance}`: unique per
    /// process, stable across its restarts.
    fn transactional_id_prefix(&self) -> String {
        format!("{}-through-{}", self.job_id, self.instance)
    }

    /// Sets a librdkafka property.
    #[must_use]
    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.push((key.into(), value.into()));
        self
    }

    fn validate(&self) -> Result<(), KafkaConnectorError> {
        validate_common(&self.bootstrap_servers, &self.topic, self.request_timeout)?;
        validate_group("job id", &self.job_id)?;
        if self.instances == 0 {
            return Err(KafkaConnectorError::Config("a job runs at least one instance".into()));
        }
        if self.instance >= self.instances {
            return Err(KafkaConnectorError::Config(format!(
                "instance {} is not below the instance count {}",
                self.instance, self.instances
            )));
        }
        Ok(())
    }
}

pub(super) struct Shared {
    config: RepartitionConfig,
    partitions: u32,
    /// The readers' factory, one per process: its shards hand partitions to each other.
    readers: KafkaSourceFactory,
    /// The writers' sink factory (their committers, in exactly-once mode).
    writers: KafkaSinkFactory,
    /// Problems the readers reported, oldest first, at most a few.
    errors: Mutex<Vec<String>>,
    /// The partitions each reader (by shard) read at its last poll.
    assigned: Mutex<std::collections::BTreeMap<usize, Vec<i32>>>,
}

impl Shared {
    fn note_assigned(&self, shard: usize, partitions: Vec<i32>) {
        let mut assigned = self.assigned.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if assigned.get(&shard) != Some(&partitions) {
            assigned.insert(shard, partitions);
        }
    }

    fn report(&self, error: String) {
        let mut errors = self.errors.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if errors.len() < 16 {
            errors.push(error);
        }
    }
}

/// One process's side of a repartition topic, shared by its shards: make it before the
/// pipeline and clone it into the job closure.
#[derive(Clone)]
pub struct Repartition {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Repartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repartition")
            .field("config", &self.shared.config)
            .field("partitions", &self.shared.partitions)
            .finish_non_exhaustive()
    }
}

impl Repartition {
    /// Checks the config and reads the topic's partition count (blocking, up to the request
    /// timeout).
    ///
    /// # Errors
    ///
    /// A bad config, an unknown topic, or a cluster that does not answer.
    pub fn new(config: RepartitionConfig) -> Result<Self, KafkaConnectorError> {
        config.validate()?;
        let consumer: BaseConsumer = client_config(&config.bootstrap_servers, &config.properties)
            .create()
            .map_err(|e| KafkaConnectorError::client("creating a metadata client", e))?;
        let partitions = super::source::partitions(&consumer, &config.topic, config.request_timeout)?;
        let partitions = u32::try_from(partitions.len()).map_err(|_| KafkaConnectorError::Topic {
            topic: config.topic.clone(),
            detail: "has more partitions than fit in a u32".into(),
        })?;
        let mut source = KafkaSourceConfig::new(&config.bootstrap_servers, &config.job_id, &config.topic)
            .set("isolation.level", "read_committed");
        source.request_timeout = config.request_timeout;
        source.properties.extend(config.properties.iter().cloned());
        if config.static_membership {
            source.static_member = Some(format!("{}-{}", config.job_id, config.instance));
        }
        let readers = KafkaSourceFactory::new(source)?;
        let mut sink = KafkaSinkConfig::new(&config.bootstrap_servers, &config.topic, config.transactional_id_prefix());
        sink.guarantee = config.guarantee;
        sink.request_timeout = config.request_timeout;
        sink.properties.clone_from(&config.properties);
        let writers = KafkaSinkFactory::new(sink)?;
        Ok(Repartition {
            shared: Arc::new(Shared {
                config,
                partitions,
                readers,
                writers,
                errors: Mutex::new(Vec::new()),
                assigned: Mutex::default(),
            }),
        })
    }

    /// The repartition topic's partition count.
    #[must_use]
    pub fn partitions(&self) -> u32 {
        self.shared.partitions
    }

    /// Problems the readers of this process reported (undecodable records, a writer id
    /// out of range), oldest first, at most a few. (A writer's failure, as any Kafka
    /// sink's, fails the pipeline.)
    #[must_use]
    pub fn errors(&self) -> Vec<String> {
        self.shared.errors.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The partitions of the repartition topic each reader of this process holds, by
    /// shard, as they last saw them (each reader notes its assignment whenever the
    /// pipeline polls it).
    #[must_use]
    pub fn assignment(&self) -> std::collections::BTreeMap<usize, Vec<i32>> {
        self.shared.assigned.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// What the writers' committers did so far (exactly once: epochs and records
    /// committed to the repartition topic).
    #[must_use]
    pub fn stats(&self) -> SinkStats {
        self.shared.writers.stats()
    }

    /// Waits for the writers' committers to finish what they were given, stops them and
    /// reports; call it after the pipeline has ended.
    ///
    /// # Errors
    ///
    /// The first committer failure.
    pub fn finish(&self) -> Result<SinkStats, KafkaConnectorError> {
        self.shared.writers.finish()
    }

    /// Partitions `stream` by `key` across every process of the job, through the
    /// repartition topic: the records of one key, whichever process read them, continue in
    /// the process (and shard) that holds the key. See the [module](self) for how.
    ///
    /// # Errors
    ///
    /// A topic with fewer partitions than the job has readers (`instances * shards`), an
    /// exactly-once repartition in a pipeline that does not checkpoint, or librdkafka
    /// refusing the producer or the consumer.
    pub fn key_by_through<T, K, KS>(
        &self,
        stream: Stream<T>,
        key: KS,
    ) -> Result<KeyedStream<K, T, KS>, KafkaConnectorError>
    where
        T: Data + Send,
        K: Data + std::hash::Hash + Eq + Clone + 'static,
        KS: Fn(&T) -> K + Clone + 'static,
    {
        let scope = stream.scope().clone();
        let (shard, shards) = (scope.shard(), scope.shards());
        check_partitions(self.shared.partitions, self.shared.config.instances, shards, &self.shared.config.topic)?;
        if self.shared.config.guarantee == DeliveryGuarantee::ExactlyOnce && !scope.checkpointing() {
            return Err(KafkaConnectorError::Config(
                "an exactly-once repartition needs a checkpointing pipeline (its records cross when their \
                 checkpoint completes); checkpoint, or use RepartitionConfig::at_least_once"
                    .into(),
            ));
        }
        let id = u64::from(self.shared.config.instance) * shards as u64 + shard as u64;
        let out = Output::port();
        stream.attach(RepartitionWriter::new(self.shared.clone(), id, key.clone(), out.clone()));
        let sink = self.shared.writers.instance(shard, |e: Event<OutRecord>| e.value)?;
        Stream::from_port(scope.clone(), out, "repartition writer").to_two_phase_commit(sink);
        let reader = RepartitionSource::<T>::new(self.shared.clone(), shard, shards)?;
        let strategy = WatermarkStrategy::punctuated(Through::<T>::time as fn(&Through<T>) -> _, |t, _| t.watermark());
        Ok(scope.source(reader, strategy).flat_map(Through::into_data).key_by(key))
    }
}

/// Refuses a topic with fewer partitions than readers: a reader shard holding none would
/// hold back the watermark of the `key_by` after it for good.
fn check_partitions(partitions: u32, instances: u32, shards: usize, topic: &str) -> Result<(), KafkaConnectorError> {
    let readers = u64::from(instances) * shards as u64;
    if u64::from(partitions) < readers {
        return Err(KafkaConnectorError::Topic {
            topic: topic.into(),
            detail: format!(
                "has {partitions} partitions, fewer than the job's {readers} readers ({instances} instances x {shards} \
                 shards): a reader without a partition would hold the watermark back"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topic_needs_a_partition_per_reader() {
        assert!(check_partitions(6, 3, 2, "t").is_ok());
        assert!(check_partitions(7, 3, 2, "t").is_ok());
        let e = check_partitions(5, 3, 2, "t").unwrap_err().to_string();
        assert!(e.contains("5 partitions") && e.contains("6 readers"), "{e}");
    }

    #[test]
    fn config_refuses_bad_instances() {
        let bad = RepartitionConfig::new("127.0.0.1:9092", "job", "through", 3, 3);
        assert!(matches!(bad.validate(), Err(KafkaConnectorError::Config(m)) if m.contains("instance 3")));
        let none = RepartitionConfig::new("127.0.0.1:9092", "job", "through", 0, 0);
        assert!(matches!(none.validate(), Err(KafkaConnectorError::Config(_))));
        assert!(RepartitionConfig::new("127.0.0.1:9092", "job", "through", 2, 3).validate().is_ok());
        assert!(RepartitionConfig::new("", "job", "through", 0, 1).validate().is_err());
    }
}
