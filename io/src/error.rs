//! The log's typed operating errors. Programmer errors are assertions; everything the
//! world can do to us (a bad disk, a corrupt file, a bad request) is a variant here,
//! with enough context (operation, path, position, offset) to act on.

use std::io;
use std::path::PathBuf;

use crate::types::{CheckpointId, FilePos, Offset};

/// What can go wrong in the storage layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// An I/O operation failed.
    #[error("{op} failed on {}: {source}", path.display())]
    Io {
        /// The operation, e.g. "write", "fdatasync".
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The device is full. Nothing was acknowledged that was not written; the log stays
    /// readable up to its last durable offset.
    #[error("no space left on device while writing {}", path.display())]
    NoSpace {
        /// The file being written.
        path: PathBuf,
    },
    /// An fsync failed. The appends that waited on it are failed, and the log refuses
    /// further appends until it is reopened (the kernel may have dropped the dirty data).
    #[error("fsync failed on {}: {source}", path.display())]
    SyncFailed {
        /// The file being synced.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Stored bytes are not what was written: bad magic, bad CRC, impossible length.
    #[error("corrupt data in {} at {pos}: {reason}", path.display())]
    Corrupt {
        /// The file holding the bad bytes.
        path: PathBuf,
        /// Where the bad batch or index entry starts.
        pos: FilePos,
        /// What check failed.
        reason: String,
    },
    /// A read asked for an offset the log does not hold.
    #[error("offset {requested} out of range: the log holds [{start}, {end})")]
    OffsetOutOfRange {
        /// The offset asked for.
        requested: Offset,
        /// The log start offset (first offset still held).
        start: Offset,
        /// The log end offset (next offset to be assigned).
        end: Offset,
    },
    /// A batch is larger than the log accepts.
    #[error("batch of {bytes} bytes exceeds the limit of {limit} bytes")]
    BatchTooLarge {
        /// Encoded size.
        bytes: usize,
        /// The configured limit.
        limit: usize,
    },
    /// A batch with no records.
    #[error("a batch must hold at least one record")]
    EmptyBatch,
    /// The configuration is not usable.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// An earlier write or fsync failed; the log accepts no appends until reopened.
    #[error("the log at {} failed earlier ({reason}) and must be reopened", path.display())]
    Failed {
        /// The partition directory.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The log was closed.
    #[error("the log at {} is closed", path.display())]
    Closed {
        /// The partition directory.
        path: PathBuf,
    },
    /// A checkpoint part name that could escape the checkpoint's directory or clash with
    /// the store's own files.
    #[error("invalid checkpoint part name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A checkpoint operation that the checkpoint's state does not allow (committing an
    /// id older than the last completed one, writing into an aborted checkpoint, a part
    /// whose base is gone), or a checkpoint that cannot be restored because a checkpoint
    /// its chain needs is damaged.
    #[error("checkpoint {id}: {reason}")]
    Checkpoint {
        /// The checkpoint concerned.
        id: CheckpointId,
        /// What is wrong.
        reason: String,
    },
}

impl LogError {
    /// A batch the encoder refused, `limit` being the bound it was held to.
    pub(crate) fn encode(e: crate::record::EncodeError, limit: usize) -> LogError {
        match e {
            crate::record::EncodeError::Empty => LogError::EmptyBatch,
            crate::record::EncodeError::TooLarge(bytes) => LogError::BatchTooLarge { bytes, limit },
        }
    }

    /// Wraps an I/O error with its operation and path, turning "no space" into its own
    /// variant so callers can tell it apart.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> LogError {
        let path = path.into();
        if source.raw_os_error() == Some(libc::ENOSPC) {
            LogError::NoSpace { path }
        } else {
            LogError::Io { op, path, source }
        }
    }

    /// True for errors that mean the stored bytes are damaged.
    #[must_use]
    pub fn is_corruption(&self) -> bool {
        matches!(self, LogError::Corrupt { .. })
    }
}

/// The storage layer's result type.
pub type Result<T, E = LogError> = std::result::Result<T, E>;
