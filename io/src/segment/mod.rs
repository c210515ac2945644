//! One segment: a file of record batches named by its base offset (as Kafka names
//! them), its sparse indexes, and the scan that recovers or rebuilds them.
//!
//! File names: `{base:020}.log` for the batches, `.index` and `.timeindex` for the
//! indexes (written when the segment is closed), and `.cleaned` suffixes for files a
//! compaction is still writing (deleted on open).

pub(crate) mod appender;
pub mod index;
mod read;

use std::path::{Path, PathBuf};
use std::rc::Rc;

pub use index::{SegmentFacts, SegmentIndex};
pub use read::{OwnedBatches, ReadBatches};
pub(crate) use read::{ReadBuf, read_batches, read_batches_from, scan};

use crate::error::{LogError, Result};
use crate::storage::{Storage, StorageFile};
use crate::types::Offset;

/// The file names of a segment.
#[derive(Clone, Debug)]
pub struct SegmentPaths {
    /// The batches.
    pub log: PathBuf,
    /// The offset index.
    pub index: PathBuf,
    /// The time index.
    pub time_index: PathBuf,
}

impl SegmentPaths {
    /// The paths of the segment starting at `base` in `dir`.
    #[must_use]
    pub fn new(dir: &Path, base: Offset) -> SegmentPaths {
        SegmentPaths {
            log: dir.join(format!("{:020}.log", base.0)),
            index: dir.join(format!("{:020}.index", base.0)),
            time_index: dir.join(format!("{:020}.timeindex", base.0)),
        }
    }

    /// The base offset a segment file name encodes, if it is one.
    #[must_use]
    pub fn parse_base(path: &Path) -> Option<Offset> {
        let name = path.file_name()?.to_str()?;
        let digits = name.strip_suffix(".log")?;
        if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok().map(Offset)
    }

    /// The same paths with `.cleaned` appended, for a compaction's output.
    #[must_use]
    pub fn cleaned(&self) -> SegmentPaths {
        let add = |p: &PathBuf| {
            let mut s = p.clone().into_os_string();
            s.push(".cleaned");
            PathBuf::from(s)
        };
        SegmentPaths { log: add(&self.log), index: add(&self.index), time_index: add(&self.time_index) }
    }
}

/// A segment's file and what is known of its contents.
#[derive(Debug)]
pub(crate) struct Segment<F: StorageFile> {
    pub(crate) base: Offset,
    pub(crate) file: Rc<F>,
    pub(crate) paths: SegmentPaths,
    pub(crate) index: SegmentIndex,
    /// When the segment was created or reopened, for rolling by age.
    pub(crate) opened: std::time::Instant,
    /// Where a recovery scan found this closed segment damaged, and why: its index and
    /// facts stop there, and a read that needs what lies beyond gets a corruption error
    /// rather than the next segment's records.
    pub(crate) damage: Option<(u64, String)>,
}

impl<F: StorageFile> Segment<F> {
    /// The error for reading past this segment's damage, if it has any.
    pub(crate) fn damage_error(&self) -> Option<LogError> {
        self.damage.as_ref().map(|(pos, reason)| LogError::Corrupt {
            path: self.paths.log.clone(),
            pos: crate::types::FilePos(*pos),
            reason: reason.clone(),
        })
    }
}

impl<F: StorageFile> Segment<F> {
    pub(crate) fn facts(&self) -> SegmentFacts {
        self.index.facts()
    }
}

/// Writes a small file whole through the storage (index files), durably.
pub(crate) async fn write_small_file<S: Storage>(storage: &S, path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |op| move |e| LogError::io(op, path, e);
    let file = storage.open(path, true).await.map_err(io("open"))?;
    let align = file.alignment() as usize;
    let padded = bytes.len().max(1).next_multiple_of(align);
    let mut buf = file.alloc_buffer(padded);
    buf.as_bytes_mut()[..bytes.len()].copy_from_slice(bytes);
    buf.as_bytes_mut()[bytes.len()..].fill(0);
    file.write_at(Rc::new(buf), 0).await.map_err(io("write"))?;
    file.truncate(bytes.len() as u64).await.map_err(io("truncate"))?;
    file.sync().await.map_err(io("fdatasync"))?;
    Ok(())
}

/// Reads a whole small file, or `None` if it does not exist.
pub(crate) async fn read_small_file<S: Storage>(storage: &S, path: &Path) -> Result<Option<Vec<u8>>> {
    if !path.exists() {
        return Ok(None);
    }
    let io = |op| move |e| LogError::io(op, path, e);
    let file = storage.open(path, false).await.map_err(io("open"))?;
    let len = file.size().await.map_err(io("stat"))?;
    if len == 0 {
        return Ok(Some(Vec::new()));
    }
    let buf = file.read_at(0, len as usize).await.map_err(io("read"))?;
    Ok(Some(buf.to_vec()))
}
