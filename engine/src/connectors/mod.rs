//! Connectors to systems outside sluice, each behind its own cargo feature so the default
//! build stays lean.
//!
//! - [`kafka`] (feature `kafka-client`): a pipeline source reading a topic of an external
//!   Kafka cluster through a consumer group, and a sink writing to one exactly-once
//!   through Kafka transactions tied to checkpoints. Built on librdkafka (`rdkafka`).

#[cfg(feature = "kafka-client")]
pub mod kafka;
