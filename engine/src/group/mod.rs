//! Consumer groups: the [`coordinator`] (members, generations, assignments of the
//! engine's own consumers; a pure state machine that lives on the shard owning the
//! group's partition of the offsets topic), the partition [`assignor`]s it runs, Kafka's
//! [`classic`] group protocol for Kafka clients (a client leader assigns), Kafka's
//! [`consumer_protocol`] (subscriptions and assignments inside the group protocol), the
//! [`consumer`] group protocol of KIP-848 for Kafka clients (the coordinator assigns), and
//! the groups' committed [`offsets`] in the compacted internal topic `__consumer_offsets`.
//! The clients that join groups are in `client/` and the Kafka listener; the shard serves
//! group requests in `shard/groups.rs`.

pub mod assignor;
pub mod classic;
pub mod consumer;
pub mod consumer_protocol;
pub mod coordinator;
pub mod offsets;
