//! The log's typed operating errors. Programmer errors are assertions; everything the
//! world can do to us (a bad disk, a corrupt file, a bad request) is a variant here,
//! with enough context (operation, path, position, offset) to act on.
//!
//! [`IndexError`] says why a segment's index files cannot be trusted; recovery answers it
//! by rebuilding the index from the segment, so it never reaches a caller as a
//! [`LogError`].

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
        match source.raw_os_error() {
            Some(libc::ENOSPC) => LogError::NoSpace { path },
            None if source.kind() == io::ErrorKind::StorageFull => LogError::NoSpace { path },
            // The OS error alone: glommio's own text repeats the path and adds its internals
            // ("op: Creating path: Some(..) with fd: None"), and the path is said already.
            Some(code) => LogError::Io { op, path, source: io::Error::from_raw_os_error(code) },
            None => LogError::Io { op, path, source },
        }
    }

    /// True for errors that mean the stored bytes are damaged.
    #[must_use]
    pub fn is_corruption(&self) -> bool {
        matches!(self, LogError::Corrupt { .. })
    }
}

/// Why a segment's index files cannot be trusted (see
/// [`SegmentIndex::decode`](crate::segment::SegmentIndex::decode)). Recovery rebuilds such
/// an index from its segment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// The file is shorter than its header.
    #[error("{file} index file of {len} bytes is shorter than its header")]
    TooShort {
        /// Which index file.
        file: IndexFile,
        /// Its length.
        len: usize,
    },
    /// The file does not start with its magic number.
    #[error("bad {file} index magic {found:#010x}")]
    BadMagic {
        /// Which index file.
        file: IndexFile,
        /// The first four bytes, little-endian.
        found: u32,
    },
    /// The header counts more entries than the file holds.
    #[error("{file} index claims {count} entries but the file is {len} bytes")]
    Truncated {
        /// Which index file.
        file: IndexFile,
        /// The entries the header counts.
        count: usize,
        /// The file's length.
        len: usize,
    },
    /// The CRC does not match the header and entries.
    #[error("{file} index CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    CrcMismatch {
        /// Which index file.
        file: IndexFile,
        /// The CRC in the header.
        stored: u32,
        /// The CRC of the bytes.
        computed: u32,
    },
    /// The two files' headers disagree about the segment they describe.
    #[error("offset and time index describe different segments")]
    Mismatched,
    /// The files describe a segment with another base offset.
    #[error("index is for base offset {index}, segment is {segment}")]
    WrongBase {
        /// The base offset the index records.
        index: Offset,
        /// The segment's base offset.
        segment: Offset,
    },
    /// The files describe a segment of another size (it changed after they were written).
    #[error("index describes {index} bytes, segment holds {segment}")]
    WrongSize {
        /// The segment size the index records.
        index: u64,
        /// The segment's size.
        segment: u64,
    },
    /// Entries that are not strictly increasing or point past the segment.
    #[error("{file} index entries are out of order or out of range")]
    BadEntries {
        /// Which index file.
        file: IndexFile,
    },
}

/// One of a segment's two index files.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum IndexFile {
    /// The offset index (`.index`).
    Offsets,
    /// The time index (`.timeindex`).
    Times,
}

impl std::fmt::Display for IndexFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IndexFile::Offsets => "offset",
            IndexFile::Times => "time",
        })
    }
}

/// The storage layer's result type.
pub type Result<T, E = LogError> = std::result::Result<T, E>;
