//! The configuration of one partition log, with Kafka's names in the docs so users can
//! map what they know.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::LogError;

/// When an append is made durable (Kafka's `flush.messages` / `flush.ms`, made explicit).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Every append resolves only after an fdatasync covers it. Appends that arrive while
    /// a sync is in flight share the next one (group commit).
    Always,
    /// Appends resolve once written to the write-behind buffer; a background task syncs
    /// every interval, so a crash loses at most the last interval's appends.
    Interval(Duration),
    /// Appends resolve once buffered; data is synced only on roll and close.
    Never,
}

impl fmt::Display for FsyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FsyncPolicy::Always => write!(f, "always"),
            FsyncPolicy::Interval(d) => write!(f, "interval:{}", d.as_millis()),
            FsyncPolicy::Never => write!(f, "never"),
        }
    }
}

impl FromStr for FsyncPolicy {
    type Err = LogError;

    /// Parses `always`, `never` or `interval:MS` (MS a positive number of milliseconds).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "always" => Ok(FsyncPolicy::Always),
            "never" => Ok(FsyncPolicy::Never),
            _ => {
                let bad =
                    || LogError::InvalidConfig(format!("fsync policy {s:?}: expected always, never or interval:MS"));
                let ms = s.strip_prefix("interval:").ok_or_else(bad)?;
                // `u64::from_str` also takes a leading `+`; insist on plain digits.
                if !ms.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                let ms: u64 = ms.parse().map_err(|_| bad())?;
                if ms == 0 {
                    return Err(bad());
                }
                Ok(FsyncPolicy::Interval(Duration::from_millis(ms)))
            }
        }
    }
}

/// What happens to closed segments beyond retention (Kafka's `cleanup.policy`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CleanupPolicy {
    /// Delete whole closed segments past the retention time or size.
    Delete,
    /// Keep the latest record per key in closed segments.
    Compact,
    /// Both (Kafka's `compact,delete`): compacted, and segments past the retention time
    /// or size deleted as well.
    CompactDelete,
}

impl CleanupPolicy {
    /// Whether retention deletes segments past the retention time or size.
    #[must_use]
    pub fn deletes(self) -> bool {
        matches!(self, CleanupPolicy::Delete | CleanupPolicy::CompactDelete)
    }

    /// Whether compaction keeps only the latest record per key.
    #[must_use]
    pub fn compacts(self) -> bool {
        matches!(self, CleanupPolicy::Compact | CleanupPolicy::CompactDelete)
    }
}

impl fmt::Display for CleanupPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CleanupPolicy::Delete => "delete",
            CleanupPolicy::Compact => "compact",
            CleanupPolicy::CompactDelete => "compact,delete",
        })
    }
}

impl FromStr for CleanupPolicy {
    type Err = LogError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "delete" => Ok(CleanupPolicy::Delete),
            "compact" => Ok(CleanupPolicy::Compact),
            "compact,delete" | "delete,compact" => Ok(CleanupPolicy::CompactDelete),
            _ => Err(LogError::InvalidConfig(format!(
                "cleanup policy {s:?}: expected delete, compact or compact,delete"
            ))),
        }
    }
}

/// How much of the log is verified when it is opened.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RecoveryMode {
    /// Scan the active segment, and any closed segment whose index is missing or
    /// damaged. Damage in a closed segment is reported and read as a typed error.
    Tail,
    /// Scan every segment and truncate the log at the first bad batch (Kafka's recovery
    /// after an unclean shutdown of unflushed segments).
    Full,
}

/// The configuration of one partition log.
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// Durability of an acknowledged append.
    pub fsync: FsyncPolicy,
    /// Roll the active segment before it would exceed this size (`segment.bytes`).
    pub segment_bytes_max: u64,
    /// Roll the active segment once it is this old, if set (`segment.ms`).
    pub segment_ms: Option<u64>,
    /// Bytes of log between sparse index entries (`index.interval.bytes`).
    pub index_interval_bytes: u32,
    /// Size of each write-behind buffer.
    pub write_buffer_bytes: usize,
    /// Write-behind buffers in flight before appends wait.
    pub write_behind_buffers: usize,
    /// Preallocate the active segment ahead of its writes (`file.preallocate`).
    pub preallocate: bool,
    /// How far ahead, at most: the active segment is allocated in steps that start at
    /// 64 KiB and double with each step up to this size (never past `segment_bytes_max`),
    /// the next step started in the background when the writes come within half a step
    /// of the allocated end; after a roll the new segment starts with the step reached
    /// (at most the old segment's size). Idle partitions stay small; busy ones allocate
    /// rarely.
    pub preallocate_step_bytes: u64,
    /// Delete closed segments whose newest record is older than this (`retention.ms`).
    pub retention_ms: Option<u64>,
    /// Delete the oldest closed segments while the log is larger than this
    /// (`retention.bytes`).
    pub retention_bytes: Option<u64>,
    /// Delete or compact.
    pub cleanup: CleanupPolicy,
    /// How long a tombstone survives compaction (`delete.retention.ms`).
    pub delete_retention_ms: u64,
    /// Compact once the share of the closed segments' bytes written since the last
    /// compaction reaches this (`min.cleanable.dirty.ratio`, within 0..=1).
    pub min_cleanable_dirty_ratio: f64,
    /// The largest stored batch accepted (`max.message.bytes`).
    pub max_batch_bytes: usize,
    /// How much to verify on open.
    pub recovery: RecoveryMode,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            fsync: FsyncPolicy::Interval(Duration::from_millis(5)),
            segment_bytes_max: 256 << 20,
            segment_ms: None,
            index_interval_bytes: 4096,
            write_buffer_bytes: 1 << 20,
            write_behind_buffers: 4,
            preallocate: true,
            preallocate_step_bytes: 64 << 20,
            retention_ms: None,
            retention_bytes: None,
            cleanup: CleanupPolicy::Delete,
            delete_retention_ms: 86_400_000,
            min_cleanable_dirty_ratio: 0.5,
            max_batch_bytes: 8 << 20,
            recovery: RecoveryMode::Tail,
        }
    }
}

impl LogConfig {
    /// Checks that the values are usable together.
    pub fn validate(&self) -> Result<(), LogError> {
        let bad = |m: String| Err(LogError::InvalidConfig(m));
        if self.segment_bytes_max < 4096 || self.segment_bytes_max > u64::from(u32::MAX) {
            return bad(format!("segment_bytes_max {} must be within [4096, 4 GiB)", self.segment_bytes_max));
        }
        if self.index_interval_bytes == 0 {
            return bad("index_interval_bytes must be positive".into());
        }
        if self.write_buffer_bytes < 4096 || self.write_buffer_bytes > 64 << 20 {
            return bad(format!("write_buffer_bytes {} must be within [4 KiB, 64 MiB]", self.write_buffer_bytes));
        }
        if self.preallocate && self.preallocate_step_bytes < 4096 {
            return bad(format!("preallocate_step_bytes {} must be at least 4096", self.preallocate_step_bytes));
        }
        if self.write_behind_buffers == 0 {
            return bad("write_behind_buffers must be positive".into());
        }
        if self.max_batch_bytes < 128 || self.max_batch_bytes > crate::record::MAX_BODY_BYTES {
            return bad(format!("max_batch_bytes {} must be within [128, 1 GiB]", self.max_batch_bytes));
        }
        if self.segment_ms == Some(0) || self.retention_ms == Some(0) {
            return bad("segment_ms and retention_ms must be positive when set".into());
        }
        if !(0.0..=1.0).contains(&self.min_cleanable_dirty_ratio) {
            return bad(format!("min_cleanable_dirty_ratio {} must be within [0, 1]", self.min_cleanable_dirty_ratio));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsync_policy_parses_and_prints() {
        for s in ["always", "never", "interval:5", "interval:1000"] {
            assert_eq!(s.parse::<FsyncPolicy>().unwrap().to_string(), s);
        }
        for s in [
            "",
            "sometimes",
            "ALWAYS",
            " always",
            "interval",
            "interval5",
            "interval:",
            "interval:0",
            "interval:-1",
            "interval:x",
            "interval:+5",
            "interval:5ms",
            "interval:1.5",
            "interval:99999999999999999999999",
        ] {
            assert!(matches!(s.parse::<FsyncPolicy>(), Err(LogError::InvalidConfig(_))), "{s}");
        }
    }

    #[test]
    fn bad_configs_are_refused() {
        assert!(LogConfig::default().validate().is_ok());
        let mut c = LogConfig { segment_bytes_max: 10, ..LogConfig::default() };
        assert!(c.validate().is_err());
        c = LogConfig { max_batch_bytes: 0, ..LogConfig::default() };
        assert!(c.validate().is_err());
        c = LogConfig { retention_ms: Some(0), ..LogConfig::default() };
        assert!(c.validate().is_err());
    }
}
