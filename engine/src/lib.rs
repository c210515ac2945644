//! # sluice-engine
//!
//! The engine half of sluice: shards (one pinned glommio executor per core, each owning
//! its partition logs), the handle host code embeds, topics with persistent metadata,
//! producers and consumers.

// Denied, not forbidden: `dataflow::scatter` alone allows it, for the exchange's
// branch-free record routing (its SAFETY comments and tests say why it is sound).
#![deny(unsafe_code)]

pub mod client;
pub mod config;
pub mod connectors;
pub mod dataflow;
pub mod engine;
pub mod error;
pub mod group;
pub mod kafka;
pub mod metrics;
pub mod producer_state;
pub mod record;
pub mod ring;
pub mod security;
pub(crate) mod shard;
pub mod topic;

pub use client::consumer::{Consumer, Isolation, Polled, SeekTo};
pub use client::group_consumer::{GroupConsumer, GroupOptions, OffsetReset, RebalanceListener};
pub use client::producer::IdempotentProducer;
pub use config::{CompressionType, EngineConfig, TopicConfig};
pub use engine::groups::PartitionLag;
pub use engine::{Engine, EngineHandle, TopicDescription};
pub use error::{EngineError, GroupError, Result};
pub use record::{OwnedHeader, OwnedRecord, PackedRecords};
pub use shard::CleanerStats;
pub use topic::meta::TopicId;
pub use topic::names::{NameError, validate_name};
