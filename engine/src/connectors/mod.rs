//! Connectors to systems outside sluice, each behind its own cargo feature so the default
//! build stays lean.
//!
//! - [`kafka`] (feature `kafka-client`): a pipeline source reading a topic of an external
//!   Kafka cluster through a consumer group, and a sink writing to one exactly-once
//!   through Kafka transactions tied to checkpoints. Built on librdkafka (`rdkafka`).
//! - [`debezium`]: Debezium's JSON change events (key, value envelope, tombstone; schema-less
//!   and with Kafka Connect's schema), decoded and encoded.
//! - [`postgres`]: a pipeline source reading PostgreSQL's changes through logical
//!   replication (`pgoutput`): a snapshot consistent with the slot, then the stream, its
//!   position (the LSN) checkpointed and acknowledged once the checkpoint completes.

#[cfg(feature = "kafka-client")]
pub mod kafka;

pub mod debezium;
pub mod postgres;
