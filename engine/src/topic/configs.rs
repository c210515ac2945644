//! A topic's settings by Kafka's names: one table, [`TOPIC_CONFIGS`], maps each name to
//! the [`TopicConfig`] field it reads and writes, so CreateTopics, DescribeConfigs,
//! AlterConfigs, IncrementalAlterConfigs and `sluice topic alter` all speak the same
//! names and refuse the same values. A new setting is one row.
//!
//! sluice's fsync policy is Kafka's pair `flush.messages` / `flush.ms`, one to one:
//! `always` is `flush.messages=1` (every append fsynced; `flush.ms` then reads as
//! [`LONG_MAX`]), `interval:MS` is `flush.ms=MS` with `flush.messages` at [`LONG_MAX`],
//! and `never` is both at [`LONG_MAX`] (Kafka's own default: the OS writes back).
//!
//! Changes are applied as a whole ([`apply`]): each value is checked by its row, then
//! every value given must read back as given (a value that cannot take effect beside the
//! others, such as `flush.ms` with `flush.messages=1`, is refused), then the whole
//! configuration is checked ([`TopicConfig::log_config`]). A refusal names the setting and
//! changes nothing.

use std::time::Duration;

use sluice_io::{CleanupPolicy, FsyncPolicy};

use crate::config::TopicConfig;

/// Kafka's "no limit" for a LONG setting (`Long.MAX_VALUE`).
pub const LONG_MAX: i64 = i64::MAX;

/// A setting's type as DescribeConfigs reports it (Kafka's `ConfigType` codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigType {
    /// `true` or `false`.
    Boolean = 1,
    /// Text.
    String = 2,
    /// A 32-bit number.
    Int = 3,
    /// A 64-bit number.
    Long = 5,
    /// A floating-point number.
    Double = 6,
    /// A comma-separated list (IncrementalAlterConfigs may APPEND to and SUBTRACT from it).
    List = 7,
}

/// One topic setting: its Kafka name, the broker setting that holds its default in
/// Kafka, its type and documentation, and how it reads and writes a [`TopicConfig`].
#[derive(Clone, Copy)]
pub struct TopicConfigDef {
    /// The topic-level name (`retention.ms`).
    pub name: &'static str,
    /// The broker-level name of its default (`log.retention.ms`), reported as its synonym.
    pub broker_name: &'static str,
    /// Its type.
    pub kind: ConfigType,
    /// What it does, in sluice.
    pub doc: &'static str,
    /// Its value in a configuration, as Kafka prints it.
    pub get: fn(&TopicConfig) -> String,
    /// Sets it from text; on refusal, why (the caller names the setting and value).
    set: fn(&mut TopicConfig, &str) -> Result<(), String>,
}

impl std::fmt::Debug for TopicConfigDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicConfigDef").field("name", &self.name).field("kind", &self.kind).finish()
    }
}

/// Rows are told apart by name.
impl PartialEq for TopicConfigDef {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for TopicConfigDef {}

impl TopicConfigDef {
    /// Sets this setting in `config` from `value`, or says why not.
    pub fn set(&self, config: &mut TopicConfig, value: &str) -> Result<(), ConfigRefused> {
        (self.set)(config, value).map_err(|reason| ConfigRefused::invalid(self.name, value, reason))
    }

    /// `value` as this setting reads back once set (`"compact, delete"` reads back as
    /// `"compact,delete"`), or why it is not a value of this setting.
    pub fn normalize(&self, value: &str) -> Result<String, ConfigRefused> {
        let mut scratch = TopicConfig::default();
        self.set(&mut scratch, value)?;
        Ok((self.get)(&scratch))
    }
}

use ConfigType::{Double, Int, List, Long, String as Text};

/// Every topic setting sluice takes, by Kafka's name.
pub const TOPIC_CONFIGS: &[TopicConfigDef] = &[
    TopicConfigDef {
        name: "cleanup.policy",
        broker_name: "log.cleanup.policy",
        kind: List,
        doc: "What happens to closed segments: delete (past retention.ms or retention.bytes), compact (the latest record per key is kept), or both.",
        get: |c| c.cleanup.to_string(),
        set: |c, v| put(&mut c.cleanup, cleanup_policy(v)),
    },
    TopicConfigDef {
        name: "retention.ms",
        broker_name: "log.retention.ms",
        kind: Long,
        doc: "Closed segments whose newest record is older than this are deleted (cleanup.policy delete); -1 keeps them.",
        get: |c| c.retention_ms.map_or("-1".into(), |v| v.to_string()),
        set: |c, v| put(&mut c.retention_ms, limit(v, 1)),
    },
    TopicConfigDef {
        name: "retention.bytes",
        broker_name: "log.retention.bytes",
        kind: Long,
        doc: "The oldest closed segments are deleted while a partition holds more than this (cleanup.policy delete); -1 keeps them.",
        get: |c| c.retention_bytes.map_or("-1".into(), |v| v.to_string()),
        set: |c, v| put(&mut c.retention_bytes, limit(v, 0)),
    },
    TopicConfigDef {
        name: "segment.bytes",
        broker_name: "log.segment.bytes",
        kind: Int,
        doc: "A partition's active segment rolls before it would grow past this size (at least 4096).",
        get: |c| c.segment_bytes.to_string(),
        set: |c, v| put(&mut c.segment_bytes, int(v, 4096).map(|n| n as u64)),
    },
    TopicConfigDef {
        name: "segment.ms",
        broker_name: "log.roll.ms",
        kind: Long,
        doc: "The active segment rolls once it is this old, so retention and compaction can reach its records; 9223372036854775807 never rolls by age.",
        get: |c| c.segment_ms.map_or(LONG_MAX.to_string(), |v| v.to_string()),
        set: |c, v| put(&mut c.segment_ms, millis_or_never(v)),
    },
    TopicConfigDef {
        name: "delete.retention.ms",
        broker_name: "log.cleaner.delete.retention.ms",
        kind: Long,
        doc: "How long compaction keeps a tombstone after its segment's newest record.",
        get: |c| c.delete_retention_ms.to_string(),
        set: |c, v| put(&mut c.delete_retention_ms, long(v, 0).map(|n| n as u64)),
    },
    TopicConfigDef {
        name: "min.cleanable.dirty.ratio",
        broker_name: "log.cleaner.min.cleanable.ratio",
        kind: Double,
        doc: "The cleaner compacts a partition once this share of its closed segments' bytes is new since the last compaction (0 to 1).",
        get: |c| format!("{:?}", c.min_cleanable_dirty_ratio),
        set: |c, v| put(&mut c.min_cleanable_dirty_ratio, ratio(v)),
    },
    TopicConfigDef {
        name: "max.message.bytes",
        broker_name: "message.max.bytes",
        kind: Int,
        doc: "The largest record (key, value and headers) a partition accepts, at most 67108864; a larger one gets MESSAGE_TOO_LARGE.",
        get: |c| c.max_record_bytes.to_string(),
        set: |c, v| put(&mut c.max_record_bytes, record_limit(v)),
    },
    TopicConfigDef {
        name: "compression.type",
        broker_name: "compression.type",
        kind: Text,
        doc: "The codec fetches return batches in: producer (each batch as its producer sent it), uncompressed, gzip, snappy, lz4 or zstd. Records are stored uncompressed either way.",
        get: |c| c.compression.to_string(),
        set: |c, v| put(&mut c.compression, v.trim().parse().map_err(|e: crate::error::EngineError| e.to_string())),
    },
    TopicConfigDef {
        name: "message.timestamp.type",
        broker_name: "log.message.timestamp.type",
        kind: Text,
        doc: "sluice keeps the timestamp each producer gave its records (CreateTime); LogAppendTime is not supported.",
        get: |_| "CreateTime".into(),
        set: |_, v| match v.trim() {
            "CreateTime" => Ok(()),
            "LogAppendTime" => Err("sluice keeps the producer's timestamps: only CreateTime".into()),
            _ => Err("expected CreateTime".into()),
        },
    },
    TopicConfigDef {
        name: "flush.messages",
        broker_name: "log.flush.interval.messages",
        kind: Long,
        doc: "1 fsyncs every append before it is acknowledged (sluice's fsync always); 9223372036854775807 leaves fsyncs to flush.ms.",
        get: |c| if c.fsync == FsyncPolicy::Always { "1".into() } else { LONG_MAX.to_string() },
        set: |c, v| match long(v, 1)? {
            1 => put(&mut c.fsync, Ok(FsyncPolicy::Always)),
            LONG_MAX if c.fsync == FsyncPolicy::Always => put(&mut c.fsync, Ok(FsyncPolicy::Never)),
            LONG_MAX => Ok(()),
            _ => Err("sluice fsyncs every append (1) or by time (9223372036854775807, and flush.ms)".into()),
        },
    },
    TopicConfigDef {
        name: "flush.ms",
        broker_name: "log.flush.interval.ms",
        kind: Long,
        doc: "Appends are fsynced this often (sluice's fsync interval:MS); 9223372036854775807 never fsyncs by time (fsync never: on roll and close only). With flush.messages=1 every append is fsynced and this reads 9223372036854775807.",
        get: |c| match c.fsync {
            FsyncPolicy::Interval(d) => d.as_millis().to_string(),
            FsyncPolicy::Always | FsyncPolicy::Never => LONG_MAX.to_string(),
        },
        set: |c, v| {
            let ms = millis_or_never(v)?;
            if c.fsync != FsyncPolicy::Always {
                c.fsync = ms.map_or(FsyncPolicy::Never, |ms| FsyncPolicy::Interval(Duration::from_millis(ms)));
            }
            Ok(())
        },
    },
];

/// The row of a setting, by its Kafka name.
#[must_use]
pub fn find(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Why a topic setting was refused: the setting, and why (Kafka's INVALID_CONFIG).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigRefused {
    /// The setting's name.
    pub name: String,
    /// What is wrong, naming the setting.
    pub message: String,
}

impl ConfigRefused {
    fn invalid(name: &str, value: &str, reason: impl std::fmt::Display) -> ConfigRefused {
        ConfigRefused {
            name: name.into(),
            message: format!("Invalid value {value} for configuration {name}: {reason}"),
        }
    }

    fn unknown(name: &str) -> ConfigRefused {
        let known: Vec<&str> = TOPIC_CONFIGS.iter().map(|d| d.name).collect();
        ConfigRefused {
            name: name.into(),
            message: format!("Unknown topic config name: {name} (sluice's topic configs: {})", known.join(", ")),
        }
    }
}

/// One change to a topic's settings (IncrementalAlterConfigs' operations).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigOp {
    /// Set the value.
    Set(String),
    /// Back to the default.
    Delete,
    /// Add these items to a list setting (those not in it yet).
    Append(String),
    /// Remove these items from a list setting.
    Subtract(String),
}

/// `config` with `changes` made, each by Kafka's name: checked row by row, then that
/// every value given reads back as given, then as a whole. `defaults` is what
/// [`ConfigOp::Delete`] goes back to. Settings without a Kafka name (`linger_ms`,
/// `batch_records`) keep their values.
pub fn apply(
    config: &TopicConfig,
    defaults: &TopicConfig,
    changes: &[(String, ConfigOp)],
) -> Result<TopicConfig, ConfigRefused> {
    let mut next = config.clone();
    let mut given = Vec::with_capacity(changes.len());
    for (name, op) in changes {
        let def = find(name).ok_or_else(|| ConfigRefused::unknown(name))?;
        let value = match op {
            ConfigOp::Set(v) => v.clone(),
            ConfigOp::Delete => (def.get)(defaults),
            ConfigOp::Append(items) | ConfigOp::Subtract(items) => {
                if def.kind != List {
                    return Err(ConfigRefused {
                        name: name.clone(),
                        message: format!(
                            "Config value append or subtract is not allowed for config key: {name} (not a list)"
                        ),
                    });
                }
                let mut list = split_list((def.get)(config).as_str());
                for item in split_list(items) {
                    match op {
                        ConfigOp::Append(_) if !list.contains(&item) => list.push(item),
                        ConfigOp::Subtract(_) => list.retain(|i| *i != item),
                        _ => {}
                    }
                }
                list.join(",")
            }
        };
        def.set(&mut next, &value)?;
        given.push((def, value));
    }
    // Settings that share a field (flush.messages and flush.ms) may need another pass to
    // agree whatever their order: repeat until nothing changes (each pass is the same
    // deterministic function, so this ends once it reaches a fixed point).
    for _ in 0..given.len() {
        let before = next.clone();
        for (def, value) in &given {
            def.set(&mut next, value)?;
        }
        if next == before {
            break;
        }
    }
    for (def, value) in given {
        let wanted = def.normalize(&value)?;
        let got = (def.get)(&next);
        if got != wanted {
            return Err(ConfigRefused {
                name: def.name.into(),
                message: format!(
                    "Invalid value {value} for configuration {}: it cannot take effect beside the topic's other settings (it reads back as {got}{})",
                    def.name,
                    if def.name == "flush.ms" { "; flush.messages=1 fsyncs every append" } else { "" },
                ),
            });
        }
    }
    next.log_config().map_err(|e| ConfigRefused { name: String::new(), message: e.to_string() })?;
    Ok(next)
}

/// `config` with every setting that has a Kafka name put back to `defaults`' value (what
/// AlterConfigs does to the settings a request leaves out); the others keep theirs.
#[must_use]
pub fn reset(config: &TopicConfig, defaults: &TopicConfig) -> TopicConfig {
    let mut next = config.clone();
    for def in TOPIC_CONFIGS {
        def.set(&mut next, &(def.get)(defaults)).expect("a default reads back as a valid value");
    }
    next
}

/// A setting of a topic as DescribeConfigs reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    /// The row.
    pub def: &'static TopicConfigDef,
    /// The topic's value.
    pub value: String,
    /// The default's value.
    pub default: String,
}

impl Described {
    /// Whether the topic has the default value (Kafka's DEFAULT_CONFIG source, else
    /// DYNAMIC_TOPIC_CONFIG).
    #[must_use]
    pub fn is_default(&self) -> bool {
        self.value == self.default
    }
}

/// Every setting of `config` by Kafka's name, in table order, beside its default.
#[must_use]
pub fn describe(config: &TopicConfig, defaults: &TopicConfig) -> Vec<Described> {
    TOPIC_CONFIGS.iter().map(|def| Described { def, value: (def.get)(config), default: (def.get)(defaults) }).collect()
}

/// Stores a parsed value in its field (a row's setter in one expression).
fn put<T>(field: &mut T, value: Result<T, String>) -> Result<(), String> {
    *field = value?;
    Ok(())
}

fn split_list(v: &str) -> Vec<String> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

fn cleanup_policy(v: &str) -> Result<CleanupPolicy, String> {
    let items = split_list(v);
    let (mut delete, mut compact) = (false, false);
    for item in &items {
        match item.as_str() {
            "delete" => delete = true,
            "compact" => compact = true,
            other => return Err(format!("{other:?} is not a cleanup policy (expected delete, compact or both)")),
        }
    }
    match (delete, compact) {
        (true, false) => Ok(CleanupPolicy::Delete),
        (false, true) => Ok(CleanupPolicy::Compact),
        (true, true) => Ok(CleanupPolicy::CompactDelete),
        (false, false) => Err("an empty list: sluice needs delete, compact or both".into()),
    }
}

/// A LONG of at least `min`.
fn long(v: &str, min: i64) -> Result<i64, String> {
    let n: i64 = v.trim().parse().map_err(|_| "not a number of type LONG".to_string())?;
    if n < min {
        return Err(format!("must be at least {min}"));
    }
    Ok(n)
}

/// An INT of at least `min`.
fn int(v: &str, min: i32) -> Result<i32, String> {
    let n: i32 = v.trim().parse().map_err(|_| "not a number of type INT".to_string())?;
    if n < min {
        return Err(format!("must be at least {min}"));
    }
    Ok(n)
}

/// -1 for no limit, else a LONG of at least `min`.
fn limit(v: &str, min: i64) -> Result<Option<u64>, String> {
    match v.trim().parse::<i64>() {
        Ok(-1) => Ok(None),
        Ok(n) if n >= min => Ok(Some(n as u64)),
        Ok(_) => Err(format!("must be -1 (no limit) or at least {min}")),
        Err(_) => Err("not a number of type LONG".into()),
    }
}

/// A positive number of milliseconds, or `None` for [`LONG_MAX`] (never).
fn millis_or_never(v: &str) -> Result<Option<u64>, String> {
    match long(v, 1)? {
        LONG_MAX => Ok(None),
        ms => Ok(Some(ms as u64)),
    }
}

fn ratio(v: &str) -> Result<f64, String> {
    match v.trim().parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        Ok(_) => Err("must be within 0 and 1".into()),
        Err(_) => Err("not a number of type DOUBLE".into()),
    }
}

fn record_limit(v: &str) -> Result<usize, String> {
    let n = int(v, 1)?;
    if n > 64 << 20 {
        return Err("sluice takes records of at most 67108864 bytes".into());
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str, value: &str) -> (String, ConfigOp) {
        (name.to_string(), ConfigOp::Set(value.to_string()))
    }

    #[test]
    fn every_setting_reads_back_what_it_was_set_to() {
        let defaults = TopicConfig::default();
        for def in TOPIC_CONFIGS {
            let value = (def.get)(&defaults);
            assert_eq!(def.normalize(&value).unwrap(), value, "{}", def.name);
        }
        let c = apply(
            &defaults,
            &defaults,
            &[
                set("cleanup.policy", "delete, compact"),
                set("retention.ms", "60000"),
                set("retention.bytes", "0"),
                set("segment.bytes", "1048576"),
                set("segment.ms", "3600000"),
                set("delete.retention.ms", "0"),
                set("min.cleanable.dirty.ratio", "0.1"),
                set("max.message.bytes", "2000000"),
                set("message.timestamp.type", "CreateTime"),
                set("flush.ms", "12345678"),
            ],
        )
        .unwrap();
        assert_eq!(c.cleanup, CleanupPolicy::CompactDelete);
        assert_eq!((c.retention_ms, c.retention_bytes, c.segment_ms), (Some(60_000), Some(0), Some(3_600_000)));
        assert_eq!((c.segment_bytes, c.delete_retention_ms, c.max_record_bytes), (1 << 20, 0, 2_000_000));
        assert_eq!(c.min_cleanable_dirty_ratio, 0.1);
        assert_eq!(c.fsync, FsyncPolicy::Interval(Duration::from_millis(12_345_678)));
        let shown: Vec<(&str, String)> =
            describe(&c, &defaults).iter().map(|d| (d.def.name, d.value.clone())).collect();
        assert!(shown.contains(&("cleanup.policy", "compact,delete".into())), "{shown:?}");
        assert!(shown.contains(&("min.cleanable.dirty.ratio", "0.1".into())), "{shown:?}");
        assert!(describe(&c, &defaults).iter().any(|d| d.def.name == "message.timestamp.type" && d.is_default()));
    }

    #[test]
    fn the_fsync_policy_is_flush_messages_and_flush_ms() {
        let d = TopicConfig::default();
        let policy = |changes: &[(String, ConfigOp)]| apply(&d, &d, changes).map(|c| c.fsync);
        assert_eq!(policy(&[set("flush.messages", "1")]), Ok(FsyncPolicy::Always));
        assert_eq!(policy(&[set("flush.ms", "9223372036854775807")]), Ok(FsyncPolicy::Never));
        assert_eq!(policy(&[set("flush.ms", "1000")]), Ok(FsyncPolicy::Interval(Duration::from_millis(1000))));
        // flush.messages=1 with flush.ms=MAX is always, in either order; with a time, refused.
        let both = [set("flush.ms", "9223372036854775807"), set("flush.messages", "1")];
        assert_eq!(policy(&both), Ok(FsyncPolicy::Always));
        let refused = policy(&[set("flush.messages", "1"), set("flush.ms", "1000")]).unwrap_err();
        assert_eq!(refused.name, "flush.ms", "{refused}");
        let refused = policy(&[set("flush.ms", "1000"), set("flush.messages", "1")]).unwrap_err();
        assert_eq!(refused.name, "flush.ms", "{refused}");
        // Leaving always for an interval works in either order.
        let always = TopicConfig { fsync: FsyncPolicy::Always, ..d.clone() };
        let interval = FsyncPolicy::Interval(Duration::from_millis(100));
        for changes in [
            [set("flush.ms", "100"), ("flush.messages".into(), ConfigOp::Delete)],
            [("flush.messages".into(), ConfigOp::Delete), set("flush.ms", "100")],
        ] {
            assert_eq!(apply(&always, &d, &changes).map(|c| c.fsync), Ok(interval), "{changes:?}");
        }
        // Leaving always: flush.messages back to "not by count" with no time is never.
        let off = apply(&always, &d, &[("flush.messages".into(), ConfigOp::Delete)]).unwrap();
        assert_eq!(off.fsync, FsyncPolicy::Never);
        assert!(policy(&[set("flush.messages", "100")]).is_err(), "per N messages is not a sluice policy");
        assert!(policy(&[set("flush.ms", "0")]).is_err());
    }

    #[test]
    fn bad_names_and_values_are_refused_naming_the_setting() {
        let d = TopicConfig::default();
        for (name, value) in [
            ("retention.ms", "abc"),
            ("retention.ms", "0"),
            ("retention.ms", "-2"),
            ("retention.bytes", "-5"),
            ("segment.bytes", "100"),
            ("segment.bytes", "4294967296"),
            ("segment.ms", "0"),
            ("min.cleanable.dirty.ratio", "1.5"),
            ("min.cleanable.dirty.ratio", "NaN"),
            ("max.message.bytes", "0"),
            ("max.message.bytes", "100000000"),
            ("cleanup.policy", "forever"),
            ("cleanup.policy", ""),
            ("message.timestamp.type", "LogAppendTime"),
            ("delete.retention.ms", "-1"),
        ] {
            let e = apply(&d, &d, &[set(name, value)]).unwrap_err();
            assert_eq!(e.name, name, "{name}={value}: {e}");
            assert!(e.message.contains(name) && e.message.contains("Invalid value"), "{e}");
        }
        let e = apply(&d, &d, &[set("max.compaction.lag.ms", "1")]).unwrap_err();
        assert!(e.message.starts_with("Unknown topic config name: max.compaction.lag.ms"), "{e}");
        let e = apply(&d, &d, &[("retention.ms".into(), ConfigOp::Append("1".into()))]).unwrap_err();
        assert_eq!(e.name, "retention.ms", "{e}");
    }

    #[test]
    fn lists_take_append_and_subtract_and_delete_goes_back_to_the_default() {
        let d = TopicConfig::default();
        let c = apply(&d, &d, &[("cleanup.policy".into(), ConfigOp::Append("compact".into()))]).unwrap();
        assert_eq!(c.cleanup, CleanupPolicy::CompactDelete);
        let c = apply(&c, &d, &[("cleanup.policy".into(), ConfigOp::Subtract("delete".into()))]).unwrap();
        assert_eq!(c.cleanup, CleanupPolicy::Compact);
        let refused = apply(&c, &d, &[("cleanup.policy".into(), ConfigOp::Subtract("compact".into()))]);
        assert!(refused.is_err(), "nothing left");
        let c = apply(&c, &d, &[set("retention.ms", "5000"), ("cleanup.policy".into(), ConfigOp::Delete)]).unwrap();
        assert_eq!((c.cleanup, c.retention_ms), (CleanupPolicy::Delete, Some(5000)));
    }

    #[test]
    fn reset_puts_every_named_setting_back_and_keeps_the_others() {
        for fsync in [FsyncPolicy::Always, FsyncPolicy::Never, FsyncPolicy::Interval(Duration::from_millis(7))] {
            let defaults = TopicConfig { fsync, ..TopicConfig::default() };
            for current in [FsyncPolicy::Always, FsyncPolicy::Never, FsyncPolicy::Interval(Duration::from_millis(9))] {
                let config = TopicConfig {
                    fsync: current,
                    retention_ms: Some(5),
                    cleanup: CleanupPolicy::Compact,
                    linger_ms: 42,
                    ..TopicConfig::default()
                };
                let back = reset(&config, &defaults);
                assert_eq!(back, TopicConfig { linger_ms: 42, ..defaults.clone() }, "{current:?} -> {fsync:?}");
            }
        }
    }
}
