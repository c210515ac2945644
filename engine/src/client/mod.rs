//! What host code reads and writes topics with: the [`consumer`] (assigned partitions,
//! seeks, long polls, read_committed, reading a topic to its end), the
//! [`group_consumer`] (a member of a consumer group) and the idempotent [`producer`].
//! The partition side of idempotence (the sequence table a shard checks batches against)
//! is `crate::producer_state`, beside the shard that owns it.

pub mod consumer;
pub mod group_consumer;
pub mod producer;
