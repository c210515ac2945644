//! Engine and topic configuration.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sluice_io::{CleanupPolicy, FsyncPolicy, LogConfig};

use crate::error::{EngineError, Result};

/// How an engine is started.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Where topics, metadata and the lock file live.
    pub data_dir: PathBuf,
    /// Shards (one executor thread each, pinned to a CPU); `None` means one per CPU
    /// available to the process.
    pub shards: Option<usize>,
    /// Capacity of each inter-shard ring, in batches.
    pub ring_capacity_batches: usize,
    /// Requests (appends, fetches, admin calls from handles and the Kafka listener) a
    /// shard holds queued; a sender waits while its shard's queue is full.
    pub request_queue: usize,
    /// Settings for topics created without their own.
    pub topic_defaults: TopicConfig,
    /// How often each shard applies retention, compaction and time-based rolls to its
    /// partitions (Kafka's `log.retention.check.interval.ms`, default 5 minutes).
    pub retention_check: Duration,
    /// Segment size of the internal topics (`__consumer_offsets`,
    /// `__transaction_state`) when they are created (Kafka's
    /// `offsets.topic.segment.bytes`); compaction cleans only closed segments.
    pub internal_segment_bytes: u64,
}

impl EngineConfig {
    /// A configuration with defaults for everything but the data directory.
    pub fn new(data_dir: impl Into<PathBuf>) -> EngineConfig {
        EngineConfig {
            data_dir: data_dir.into(),
            shards: None,
            ring_capacity_batches: 64,
            request_queue: 4096,
            topic_defaults: TopicConfig::default(),
            retention_check: Duration::from_secs(300),
            internal_segment_bytes: 16 << 20,
        }
    }

    /// The shard count this configuration resolves to.
    pub fn shard_count(&self) -> Result<usize> {
        let n = match self.shards {
            Some(n) => n,
            None => core_affinity::get_core_ids().map_or(1, |ids| ids.len().max(1)),
        };
        if n == 0 || n > 1024 {
            return Err(EngineError::InvalidConfig(format!("shards must be within 1..=1024, not {n}")));
        }
        if self.ring_capacity_batches == 0 {
            return Err(EngineError::InvalidConfig("ring_capacity_batches must be positive".into()));
        }
        if self.request_queue == 0 {
            return Err(EngineError::InvalidConfig("request_queue must be positive".into()));
        }
        if self.retention_check.is_zero() {
            return Err(EngineError::InvalidConfig("retention_check must be positive".into()));
        }
        if !(4096..=u64::from(u32::MAX)).contains(&self.internal_segment_bytes) {
            return Err(EngineError::InvalidConfig(format!(
                "internal_segment_bytes {} must be within [4096, 4 GiB)",
                self.internal_segment_bytes
            )));
        }
        Ok(n)
    }
}

/// Per-topic settings, persisted with the topic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicConfig {
    /// When an append is durable (stored in the metadata as `always`, `interval:MS` or
    /// `never`).
    #[serde(with = "as_text")]
    pub fsync: FsyncPolicy,
    /// Segment size before a roll.
    pub segment_bytes: u64,
    /// Roll the active segment once it is this old, if set (`segment.ms`).
    #[serde(default)]
    pub segment_ms: Option<u64>,
    /// Delete closed segments older than this, if set.
    pub retention_ms: Option<u64>,
    /// Delete the oldest closed segments while a partition is larger than this, if set.
    pub retention_bytes: Option<u64>,
    /// What happens to closed segments beyond retention (stored as `delete` or `compact`).
    #[serde(with = "as_text")]
    pub cleanup: CleanupPolicy,
    /// How long compaction keeps a tombstone (a key with a null value) after its
    /// segment's newest record (`delete.retention.ms`, default one day).
    #[serde(default = "default_delete_retention_ms")]
    pub delete_retention_ms: u64,
    /// Compact once this share of the closed segments' bytes is new since the last
    /// compaction (`min.cleanable.dirty.ratio`, within 0..=1, default 0.5).
    #[serde(default = "default_dirty_ratio")]
    pub min_cleanable_dirty_ratio: f64,
    /// The largest record (key, value and headers) accepted.
    pub max_record_bytes: usize,
    /// How long a send may wait for more records to fill its batch.
    pub linger_ms: u64,
    /// The most records in one batch.
    pub batch_records: usize,
    /// The codec Kafka fetches return this topic's batches in (`compression.type`;
    /// records are stored uncompressed whatever it says).
    #[serde(default, with = "as_text")]
    pub compression: CompressionType,
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            fsync: FsyncPolicy::Interval(Duration::from_millis(5)),
            segment_bytes: 256 << 20,
            segment_ms: None,
            retention_ms: None,
            retention_bytes: None,
            cleanup: CleanupPolicy::Delete,
            delete_retention_ms: default_delete_retention_ms(),
            min_cleanable_dirty_ratio: default_dirty_ratio(),
            max_record_bytes: 1 << 20,
            linger_ms: 1,
            batch_records: 1000,
            compression: CompressionType::Producer,
        }
    }
}

impl TopicConfig {
    /// Checks every value and returns the partition logs' configuration.
    pub fn log_config(&self) -> Result<LogConfig> {
        let bad = |m: String| EngineError::InvalidConfig(m);
        let (fsync, cleanup) = (self.fsync, self.cleanup);
        if self.max_record_bytes == 0 || self.max_record_bytes > 64 << 20 {
            return Err(bad(format!("max_record_bytes {} must be within [1, 64 MiB]", self.max_record_bytes)));
        }
        if self.batch_records == 0 || self.batch_records > 100_000 {
            return Err(bad(format!("batch_records {} must be within [1, 100000]", self.batch_records)));
        }
        if self.linger_ms > 60_000 {
            return Err(bad(format!("linger_ms {} must be at most 60000", self.linger_ms)));
        }
        let config = LogConfig {
            fsync,
            cleanup,
            segment_bytes_max: self.segment_bytes,
            segment_ms: self.segment_ms,
            delete_retention_ms: self.delete_retention_ms,
            min_cleanable_dirty_ratio: self.min_cleanable_dirty_ratio,
            retention_ms: self.retention_ms,
            retention_bytes: self.retention_bytes,
            max_batch_bytes: self.max_batch_bytes(),
            ..LogConfig::default()
        };
        config.validate().map_err(|e| match e {
            // Its text without the log's own "invalid configuration" prefix: ours says it.
            sluice_io::LogError::InvalidConfig(m) => bad(m),
            e => bad(e.to_string()),
        })?;
        Ok(config)
    }

    /// The most bytes of records one batch may hold: what the largest record needs, and
    /// at least 8 MiB. A compressed Kafka batch whose records inflate past it is refused
    /// before more is inflated.
    #[must_use]
    pub fn max_batch_bytes(&self) -> usize {
        (self.max_record_bytes + 256).max(8 << 20)
    }

    /// The linger as a duration.
    pub fn linger(&self) -> Duration {
        Duration::from_millis(self.linger_ms)
    }
}

/// Which codec a topic's batches are fetched in (Kafka's `compression.type`). sluice
/// stores records uncompressed; the Kafka listener compresses what it sends.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum CompressionType {
    /// Each batch in the codec its producer used (Kafka's default).
    #[default]
    Producer,
    /// No compression.
    Uncompressed,
    /// gzip.
    Gzip,
    /// Snappy.
    Snappy,
    /// LZ4 (the frame format).
    Lz4,
    /// Zstandard.
    Zstd,
}

impl CompressionType {
    /// Every value, in Kafka's words.
    pub const NAMES: [&'static str; 6] = ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"];
}

impl fmt::Display for CompressionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CompressionType::Producer => "producer",
            CompressionType::Uncompressed => "uncompressed",
            CompressionType::Gzip => "gzip",
            CompressionType::Snappy => "snappy",
            CompressionType::Lz4 => "lz4",
            CompressionType::Zstd => "zstd",
        })
    }
}

impl FromStr for CompressionType {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "producer" => CompressionType::Producer,
            "uncompressed" => CompressionType::Uncompressed,
            "gzip" => CompressionType::Gzip,
            "snappy" => CompressionType::Snappy,
            "lz4" => CompressionType::Lz4,
            "zstd" => CompressionType::Zstd,
            _ => {
                return Err(EngineError::InvalidConfig(format!(
                    "compression type {s:?}: expected one of {}",
                    CompressionType::NAMES.join(", ")
                )));
            }
        })
    }
}

// The ratio is validated to lie within 0..=1 (never NaN), so equality is total.
impl Eq for TopicConfig {}

fn default_delete_retention_ms() -> u64 {
    86_400_000
}

fn default_dirty_ratio() -> f64 {
    0.5
}

/// A setting stored in the metadata as its text form (`Display` and `FromStr`), so that
/// `meta/topics.json` keeps the words a user typed.
mod as_text {
    use std::{fmt::Display, str::FromStr};

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(super) fn serialize<T: Display, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }

    pub(super) fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_is_stored_as_kafkas_word_and_old_metadata_loads_as_producer() {
        let zstd = TopicConfig { compression: CompressionType::Zstd, ..TopicConfig::default() };
        let text = serde_json::to_string(&zstd).expect("serializes");
        assert!(text.contains(r#""compression":"zstd""#), "{text}");
        assert_eq!(serde_json::from_str::<TopicConfig>(&text).expect("loads"), zstd);
        // A topic stored before the field existed.
        let mut old: serde_json::Value = serde_json::from_str(&text).expect("json");
        old.as_object_mut().expect("an object").remove("compression");
        let loaded: TopicConfig = serde_json::from_value(old).expect("old metadata loads");
        assert_eq!(loaded.compression, CompressionType::Producer);
        let bad = text.replace(r#""zstd""#, r#""brotli""#);
        let e = serde_json::from_str::<TopicConfig>(&bad).expect_err("no such codec");
        assert!(e.to_string().contains("brotli"), "{e}");
        for name in CompressionType::NAMES {
            assert_eq!(name.parse::<CompressionType>().expect("parses").to_string(), name);
        }
    }
}
