//! # sluice-engine
//!
//! The engine half of sluice: shards (one pinned glommio executor per core, each owning
//! its partition logs), the handle host code embeds, topics with persistent metadata,
//! producers and consumers.

// Denied, not forbidden: `dataflow::scatter` alone allows it, for the exchange's
// branch-free record routing (its SAFETY comments and tests say why it is sound).
#![deny(unsafe_code)]

pub mod assignor;
pub mod config;
pub mod connectors;
pub mod consumer;
pub mod coordinator;
pub mod dataflow;
pub mod engine;
pub mod error;
pub mod group_consumer;
pub mod kafka;
pub mod meta;
pub mod names;
pub mod offsets;
pub mod partitioner;
pub mod producer;
pub mod producer_state;
pub mod ring;
pub mod shard;

pub use config::{EngineConfig, TopicConfig};
pub use consumer::{Consumer, Isolation, Polled, SeekTo};
pub use engine::{Engine, EngineHandle, PartitionLag, TopicDescription};
pub use error::{EngineError, Result};
pub use group_consumer::{GroupConsumer, GroupOptions, OffsetReset, RebalanceListener};
pub use names::{NameError, validate_name};
pub use producer::IdempotentProducer;
pub use shard::{OwnedRecord, PackedRecords};
