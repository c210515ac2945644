//! A segment's files on disk: their names, the active segment's creation and
//! preallocation, the index files, and removal.
//!
//! File names: `{base:020}.log` for the batches, `.index` and `.timeindex` for the
//! indexes (written when the segment is closed), and `.cleaned` suffixes for files a
//! compaction is still writing (deleted on open).
//!
//! Invariants: an index file is written whole and synced before it is trusted, and its
//! callers write it only once the data it describes is durable (see the roll in
//! `log/roll.rs`); reading one back never trusts it without
//! [`SegmentIndex::decode`]'s checks. An active segment is allocated to at most
//! `segment_bytes_max` (or its data's end, if larger). Removing a file that is already
//! gone is not an error (a crash may have removed it first).

use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::index::SegmentIndex;
use crate::config::LogConfig;
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

/// Writes both index files of a closed segment, durably.
pub(crate) async fn write_index<S: Storage>(storage: &S, paths: &SegmentPaths, index: &SegmentIndex) -> Result<()> {
    // The two files are independent: written (and synced) side by side.
    let (offsets, times) = (index.encode_offsets(), index.encode_times());
    let (offsets, times) = futures_lite::future::zip(
        write_small_file(storage, &paths.index, &offsets),
        write_small_file(storage, &paths.time_index, &times),
    )
    .await;
    offsets.and(times)
}

/// Creates a segment file preallocated to `step` bytes (none when preallocation is off);
/// returns it and the size allocated.
pub(crate) async fn open_segment_file<S: Storage>(
    storage: &S,
    paths: &SegmentPaths,
    config: &LogConfig,
    step: u64,
) -> Result<(S::File, u64)> {
    let file = storage.open(&paths.log, true).await.map_err(|e| LogError::io("create", &paths.log, e))?;
    let allocated = if config.preallocate { step.min(config.segment_bytes_max) } else { 0 };
    if allocated > 0 {
        file.allocate(allocated).await.map_err(|e| LogError::io("fallocate", &paths.log, e))?;
        // Commit the allocation now, so that the first sync of an append does not pay for it.
        file.sync().await.map_err(|e| LogError::SyncFailed { path: paths.log.clone(), source: e })?;
    }
    Ok((file, allocated))
}

/// The size to allocate an active segment to when its data ends at `data_end` (0 when
/// preallocation is off).
pub(crate) fn first_allocation(config: &LogConfig, data_end: u64) -> u64 {
    if !config.preallocate {
        return 0;
    }
    (data_end.next_multiple_of(4096) + first_step(config)).min(config.segment_bytes_max.max(data_end))
}

/// The first preallocation step of a partition: 64 KiB (or the largest step, if smaller),
/// so that an idle partition holds little more than its data (an empty 1 000-partition
/// topic took 4 GiB with a 4 MiB first step).
pub(crate) fn first_step(config: &LogConfig) -> u64 {
    config.preallocate_step_bytes.min(FIRST_STEP_BYTES)
}

/// See [`first_step`].
pub(crate) const FIRST_STEP_BYTES: u64 = 64 << 10;

/// Removes a segment's data and index files.
pub(crate) async fn remove_segment_files<S: Storage>(storage: &S, paths: &SegmentPaths) -> Result<()> {
    remove_files(storage, &[&paths.log, &paths.index, &paths.time_index]).await
}

/// Removes a segment's index files (they no longer describe it once it is active again).
pub(crate) async fn remove_index_files<S: Storage>(storage: &S, paths: &SegmentPaths) -> Result<()> {
    remove_files(storage, &[&paths.index, &paths.time_index]).await
}

async fn remove_files<S: Storage>(storage: &S, files: &[&PathBuf]) -> Result<()> {
    for &p in files {
        match storage.remove(p).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::io("remove", p, e)),
        }
    }
    Ok(())
}

/// Reads both index files of a closed segment of `size` bytes, or `None` if either is
/// missing or fails [`SegmentIndex::decode`]'s checks (the segment is then scanned).
pub(crate) async fn load_index<S: Storage>(
    storage: &S,
    paths: &SegmentPaths,
    base: Offset,
    size: u64,
) -> Result<Option<SegmentIndex>> {
    let (Some(offsets), Some(times)) =
        (read_small_file(storage, &paths.index).await?, read_small_file(storage, &paths.time_index).await?)
    else {
        return Ok(None);
    };
    Ok(SegmentIndex::decode(base, size, &offsets, &times).ok())
}
