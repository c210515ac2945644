//! Sources and sinks on an external Kafka cluster (feature `kafka-client`), through
//! librdkafka (the `rdkafka` crate).
//!
//! - [`KafkaSourceFactory`] / [`KafkaSource`]: every shard runs one consumer, a member of
//!   one Kafka consumer group, so the shards of one process and several sluice processes
//!   split the topic's partitions. Checkpoints hold each partition's next offset; a
//!   completed checkpoint commits them to the group. See [`source`].
//! - [`KafkaSinkFactory`] / [`KafkaSink`]: a [`TwoPhaseCommitSink`] writing each epoch as
//!   one Kafka transaction once its checkpoint completes, exactly once across restores,
//!   or, in [`DeliveryGuarantee::AtLeastOnce`], through a plain idempotent producer
//!   flushed at every barrier. See [`sink`] for the write-ahead design.
//! - [`Repartition`]: a `key_by` across processes through a repartition topic, with
//!   watermarks carried as records ([`Repartition::key_by_through`]). See [`repartition`].
//! - [`JobMember`]: a job cut into slots that a consumer group spreads over processes,
//!   moving with their checkpointed state when a process dies, joins or leaves. See
//!   [`member`].
//!
//! All work against any Kafka-protocol broker: Apache Kafka, `sluice serve`
//! ([`crate::kafka`]), librdkafka's mock cluster.
//!
//! ```no_run
//! use sluice_engine::connectors::kafka::{KafkaSinkConfig, KafkaSinkFactory, KafkaSourceConfig, KafkaSourceFactory, OutRecord};
//! use sluice_engine::dataflow::{CheckpointConfig, Pipeline, PipelineConfig, WatermarkStrategy, Windows};
//!
//! let source = KafkaSourceFactory::new(KafkaSourceConfig::new("127.0.0.1:9092", "counter", "clicks"))?;
//! let sink = KafkaSinkFactory::new(KafkaSinkConfig::new("127.0.0.1:9093", "click-counts", "counter"))?;
//! let (source_in, sink_in) = (source.clone(), sink.clone());
//! Pipeline::new(PipelineConfig::with_shards(2))
//!     .checkpointing(CheckpointConfig::new("/tmp/counter-checkpoints"))
//!     .run(move |scope| {
//!         let records = source_in
//!             .instance(scope.shard(), |r| (r.key.unwrap_or_default().to_vec(), r.timestamp))
//!             .expect("the Kafka consumer starts");
//!         let sink = sink_in
//!             .instance(scope.shard(), |e: sluice_engine::dataflow::Event<(Vec<u8>, u64)>| {
//!                 OutRecord::new(Some(e.value.0), e.value.1.to_string().into_bytes()).at(e.time)
//!             })
//!             .expect("the Kafka producer starts");
//!         scope
//!             .source(
//!                 records,
//!                 WatermarkStrategy::bounded_out_of_orderness(std::time::Duration::from_secs(1), |r: &(Vec<u8>, sluice_io::EventTime)| r.1),
//!             )
//!             .key_by(|r| r.0.clone())
//!             .window(Windows::tumbling(std::time::Duration::from_secs(60)))
//!             .count()
//!             .map(|r| (r.key, r.value))
//!             .to_two_phase_commit(sink);
//!     })?;
//! sink.finish()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`TwoPhaseCommitSink`]: crate::dataflow::TwoPhaseCommitSink

pub mod member;
pub mod repartition;
pub mod sink;
pub mod source;

use std::time::Duration;

use rdkafka::{ClientConfig, error::KafkaError};

pub use member::{JobMember, JobMemberConfig, Slot, SlotEvent, SlotJob};
pub use repartition::{Repartition, RepartitionConfig};
pub use sink::{DeliveryGuarantee, KafkaSink, KafkaSinkConfig, KafkaSinkFactory, KafkaTxn, OutRecord, SinkStats};
pub use source::{KafkaRecord, KafkaSource, KafkaSourceConfig, KafkaSourceFactory};

/// Why a Kafka source or sink could not start or could not go on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaConnectorError {
    /// A setting is missing or invalid.
    #[error("Kafka connector configuration: {0}")]
    Config(String),
    /// A topic or group name Kafka would refuse.
    #[error("Kafka connector: {0}")]
    Name(#[from] crate::topic::names::NameError),
    /// librdkafka refused or failed an operation.
    #[error("Kafka connector: {op}: {source}")]
    Client {
        /// What was being done.
        op: String,
        /// librdkafka's error.
        source: KafkaError,
    },
    /// The topic does not exist or reports no partitions.
    #[error("Kafka connector: topic {topic:?} {detail}")]
    Topic {
        /// The topic.
        topic: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A background committer failed; the sink's transactions after it were not written.
    #[error("Kafka sink: {0}")]
    Commit(#[source] sink::SinkFailure),
}

impl KafkaConnectorError {
    pub(crate) fn client(op: impl Into<String>, source: KafkaError) -> Self {
        KafkaConnectorError::Client { op: op.into(), source }
    }
}

/// librdkafka properties sluice sets itself; a user property overrides them only where
/// [`client_config`] says.
fn client_config(bootstrap_servers: &str, properties: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap_servers);
    for (k, v) in properties {
        config.set(k, v);
    }
    config
}

fn validate_common(bootstrap_servers: &str, topic: &str, timeout: Duration) -> Result<(), KafkaConnectorError> {
    if bootstrap_servers.trim().is_empty() {
        return Err(KafkaConnectorError::Config("bootstrap servers are empty".into()));
    }
    crate::topic::names::validate_name("topic", topic)?;
    if timeout.is_zero() {
        return Err(KafkaConnectorError::Config("the request timeout is zero".into()));
    }
    Ok(())
}

/// A group name (Kafka takes any non-empty string of at most 249 characters here; sluice
/// keeps to the topic rule so names stay printable).
fn validate_group(kind: &'static str, group: &str) -> Result<(), KafkaConnectorError> {
    crate::topic::names::validate_name(kind, group)?;
    Ok(())
}
