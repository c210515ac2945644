//! # sluice-io: the durable partition log
//!
//! This crate is sluice's storage layer. It knows nothing of shards or dataflow; it
//! gives one executor (one shard) a partition log with Kafka's semantics:
//!
//! - [`record`]: the batch format (a 64-byte header and an rkyv body read in place).
//! - [`storage`]: the I/O seam, with the io_uring (glommio DMA, `O_DIRECT`) backend and
//!   a fault-injecting wrapper for tests.
//! - [`segment`]: one segment file, its appender and its sparse indexes.
//! - [`log`]: a partition: segments, roll, group commit, reads, retention, compaction
//!   (keep the latest record per key in closed segments).
//! - [`recovery`]: what opening a log verifies, cuts and rebuilds.
//! - [`reader`]: a sequential reader with read-ahead.
//! - [`checkpoint`]: checkpoint part files, atomic manifests, keep-K pruning, and the
//!   latest valid checkpoint on recovery.
//! - [`stats`]: what a log counts about itself for the engine's metrics (plain cells).
//! - [`config`], [`error`], [`types`]: knobs, typed errors, typed offsets and times.
//!
//! Everything here is `!Send` by design: a log lives on the executor that opened it.

#![forbid(unsafe_code)]

pub mod checkpoint;
pub mod config;
pub mod error;
pub mod log;
pub mod reader;
pub mod record;
pub mod recovery;
pub mod segment;
pub mod stats;
pub mod storage;
pub mod txn;
pub mod types;

pub use checkpoint::{
    CheckpointStore, CommitReport, LatestValid, Manifest, OpenReport, PartInfo, PartStore, SkippedCheckpoint,
};
pub use config::{CleanupPolicy, FsyncPolicy, LogConfig, RecoveryMode};
pub use error::{IndexError, IndexFile, LogError, Result};
pub use log::CompactionReport;
pub use log::{AppendInfo, CleanReport, CleanTrigger, Log, RetentionReport};
pub use reader::LogReader;
pub use record::{BatchMeta, BatchView, Header, Record, RecordView};
pub use recovery::{RecoveryReport, Truncation};
pub use segment::{OwnedBatches, ReadBatches};
pub use stats::{LatencyCounts, LatencyHistogram, LogStatsSnapshot};
pub use storage::{FaultPlan, FaultyStorage, Storage, UringStorage};
pub use types::{CheckpointId, EventTime, FilePos, Offset, PartitionId, ProducerId, Timestamp};
