//! The `--fsync` policy: when written data is made durable with `fdatasync`.
//!
//! This module owns the textual form (`always`, `interval:MS`, `never`), its parser and its
//! typed parse error. The log workload and the [`baseline`](crate::baseline) both follow it.

use std::{fmt, str::FromStr};

use serde::{Serialize, Serializer};

/// When appended data is synced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FsyncArg {
    /// `always`: every append is synced before it is acknowledged.
    Always,
    /// `interval:MS`: a sync every `MS` milliseconds (at least 1) while writing.
    IntervalMs(u64),
    /// `never`: no sync while writing, only one when the writer finishes.
    Never,
}

/// Why an `--fsync` value could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseFsyncError {
    /// The value is none of `always`, `never`, `interval:MS`.
    #[error("unknown fsync policy `{0}`: expected `always`, `interval:MS` or `never`")]
    Unknown(String),
    /// `interval:` followed by something that is not a whole number of milliseconds
    /// (empty, signed, fractional, with a unit, or too large for a `u64`).
    #[error("bad fsync interval `{0}`: expected a whole number of milliseconds")]
    BadInterval(String),
    /// `interval:0`, which would mean syncing continuously; use `always` instead.
    #[error("fsync interval must be at least 1 ms (use `always` to sync every append)")]
    ZeroInterval,
}

impl FromStr for FsyncArg {
    type Err = ParseFsyncError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "always" => Ok(Self::Always),
            "never" => Ok(Self::Never),
            _ => {
                let Some(ms) = s.strip_prefix("interval:") else {
                    return Err(ParseFsyncError::Unknown(s.to_owned()));
                };
                // `u64::from_str` also accepts a leading `+`; insist on plain digits.
                let parsed = ms.bytes().all(|b| b.is_ascii_digit()).then(|| ms.parse::<u64>().ok()).flatten();
                match parsed {
                    Some(0) => Err(ParseFsyncError::ZeroInterval),
                    Some(ms) => Ok(Self::IntervalMs(ms)),
                    None => Err(ParseFsyncError::BadInterval(ms.to_owned())),
                }
            }
        }
    }
}

/// Formats back to the command-line form, so `s.parse::<FsyncArg>()?.to_string() == s`.
impl fmt::Display for FsyncArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Always => f.write_str("always"),
            Self::IntervalMs(ms) => write!(f, "interval:{ms}"),
            Self::Never => f.write_str("never"),
        }
    }
}

/// Serialized as its command-line form, e.g. `"interval:5"`.
impl Serialize for FsyncArg {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}
