//! Recovery on open: what a crash or a damaged disk left in a partition directory, and
//! what the log makes of it.
//!
//! Closed segments are trusted through a valid index and scanned otherwise; the active
//! segment is always scanned and cut after its last valid batch. What was cut, rebuilt or
//! found damaged is reported in a [`RecoveryReport`].
//!
//! Recovery builds on `segment/` alone (its files, scan and appender): the log's open
//! calls it and assembles the log from what it returns; nothing here imports the log.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

use crate::config::{LogConfig, RecoveryMode};
use crate::error::{LogError, Result};
use crate::segment::appender::{Appender, FS_BLOCK_BYTES};
use crate::segment::{Segment, SegmentIndex, SegmentPaths, first_allocation, load_index, scan, write_index};
use crate::storage::{Storage, StorageFile};
use crate::types::{FilePos, Offset};

/// What opening a log found and did.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    /// Segments found.
    pub segments: usize,
    /// Where the log was cut because the bytes there were torn or corrupt, and why.
    pub truncated: Option<Truncation>,
    /// Segments whose indexes were missing or damaged and were rebuilt.
    pub rebuilt_indexes: Vec<PathBuf>,
    /// Closed segments with damage that was left in place (reads of it fail with
    /// [`LogError::Corrupt`]); only in [`RecoveryMode::Tail`].
    pub damaged_segments: Vec<(PathBuf, FilePos, String)>,
    /// Leftover files of an interrupted compaction that were removed.
    pub removed_files: Vec<PathBuf>,
}

/// A cut made by recovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// The segment cut.
    pub path: PathBuf,
    /// Where the first bad batch started: everything from here on was removed.
    pub pos: FilePos,
    /// Why the batch there was bad.
    pub reason: String,
    /// The log end offset after the cut.
    pub log_end: Offset,
    /// Later segments deleted by the cut (only in [`RecoveryMode::Full`]).
    pub segments_removed: usize,
}

/// Opens every segment but the last, trusting a valid index and scanning the segment
/// otherwise. In [`RecoveryMode::Full`] every segment is scanned and the first damage cuts
/// the log; in either mode so does a tail lost in a roll ([`lost_before_roll`]). The cut
/// segment's number and file are returned, to become the active one.
pub(crate) async fn recover_closed<S: Storage>(
    storage: &S,
    dir: &Path,
    bases: &[Offset],
    config: &LogConfig,
    report: &mut RecoveryReport,
) -> Result<(Vec<Segment<S::File>>, Option<(usize, Rc<S::File>)>)> {
    let interval = config.index_interval_bytes;
    let last = bases.len() - 1;
    let mut closed = Vec::new();
    for (i, &base) in bases.iter().enumerate().take(last) {
        let paths = SegmentPaths::new(dir, base);
        let file = Rc::new(storage.open(&paths.log, false).await.map_err(|e| LogError::io("open", &paths.log, e))?);
        let size = file.size().await.map_err(|e| LogError::io("stat", &paths.log, e))?;
        let loaded = match config.recovery {
            RecoveryMode::Full => None,
            RecoveryMode::Tail => load_index(storage, &paths, base, size).await?,
        };
        let mut damage = None;
        let index = match loaded {
            Some(index) => index,
            None => {
                let outcome = scan(&*file, base, interval, size).await?;
                match (outcome.damage, config.recovery) {
                    (Some((pos, reason)), RecoveryMode::Full) => {
                        file.truncate(pos).await.map_err(|e| LogError::io("truncate", &paths.log, e))?;
                        report.truncated = Some(Truncation {
                            path: paths.log.clone(),
                            pos: FilePos(pos),
                            reason,
                            log_end: outcome.index.facts().next_offset,
                            segments_removed: last - i,
                        });
                        return Ok((closed, Some((i, file))));
                    }
                    (Some((pos, reason)), RecoveryMode::Tail) => {
                        report.damaged_segments.push((paths.log.clone(), FilePos(pos), reason.clone()));
                        damage = Some((pos, reason));
                    }
                    (None, mode) => {
                        if i + 1 == last
                            && let Some(cut) =
                                lost_before_roll(storage, dir, &paths, &outcome.index, bases[last], interval).await?
                        {
                            // Segment i becomes the active one again, cut after its
                            // last batch; the empty segment after it goes.
                            report.truncated = Some(cut);
                            return Ok((closed, Some((i, file))));
                        }
                        if mode == RecoveryMode::Tail {
                            write_index(storage, &paths, &outcome.index).await?;
                            report.rebuilt_indexes.push(paths.log.clone());
                        }
                    }
                }
                outcome.index
            }
        };
        closed.push(Segment { base, file, paths, index, opened: Instant::now(), damage });
    }
    Ok((closed, None))
}

/// A crash just after a roll can leave the segment before the active one without the
/// batches it held last (they were still being written) while the new, empty active
/// segment already starts past them: offsets `scanned end..next base` that hold nothing.
/// They were never acknowledged (an append is acknowledged once durable), so, as Kafka
/// truncates to the last valid batch, the log is cut there rather than keep a gap no
/// record will ever fill: returns the cut if the active segment holds no batch.
async fn lost_before_roll<S: Storage>(
    storage: &S,
    dir: &Path,
    paths: &SegmentPaths,
    index: &SegmentIndex,
    next_base: Offset,
    interval: u32,
) -> Result<Option<Truncation>> {
    let facts = index.facts();
    if facts.next_offset >= next_base {
        return Ok(None);
    }
    let next = SegmentPaths::new(dir, next_base);
    let file = storage.open(&next.log, false).await.map_err(|e| LogError::io("open", &next.log, e))?;
    let size = file.size().await.map_err(|e| LogError::io("stat", &next.log, e))?;
    if scan(&file, next_base, interval, size).await?.index.facts().size > 0 {
        // Records after the gap: keep them, and the gap (readers skip it).
        return Ok(None);
    }
    Ok(Some(Truncation {
        path: paths.log.clone(),
        pos: FilePos(facts.size),
        reason: format!(
            "offsets {}..{} were lost in a crash before they were written; the empty segment after them is removed",
            facts.next_offset.0, next_base.0
        ),
        log_end: facts.next_offset,
        segments_removed: 1,
    }))
}

/// Scans the active segment, cuts it after its last valid batch (reporting damage),
/// preallocates it, syncs it, and builds its appender.
pub(crate) async fn recover_active<S: Storage>(
    dir: &Path,
    base: Offset,
    file: Rc<S::File>,
    config: &LogConfig,
    report: &mut RecoveryReport,
) -> Result<(Segment<S::File>, Appender<S::File>)> {
    let paths = SegmentPaths::new(dir, base);
    let file_len = file.size().await.map_err(|e| LogError::io("stat", &paths.log, e))?;
    let outcome = scan(&*file, base, config.index_interval_bytes, file_len).await?;
    let facts = outcome.index.facts();
    // Cut everything past the valid end, not only damage. A scan also ends cleanly at
    // zeros, and a crash that lost one write but not a later one leaves zeros with older
    // batches behind them; once appends end exactly where one of those starts, the next
    // scan would take it (and what follows) for new batches, since offsets may have gaps.
    if file_len > facts.size {
        file.truncate(facts.size).await.map_err(|e| LogError::io("truncate", &paths.log, e))?;
    }
    let allocated = first_allocation(config, facts.size);
    if allocated > facts.size {
        match file.allocate(allocated).await.map_err(|e| LogError::io("fallocate", &paths.log, e)) {
            // A full device does not keep the log from opening: it serves reads, and
            // appends extend the file themselves (and fail, until there is room).
            Err(LogError::NoSpace { .. }) | Ok(()) => {}
            Err(e) => return Err(e),
        }
    }
    if let Some((pos, reason)) = outcome.damage {
        debug_assert_eq!(pos, facts.size, "the scan stops at the end of the valid batches");
        report.truncated.get_or_insert(Truncation {
            path: paths.log.clone(),
            pos: FilePos(pos),
            reason,
            log_end: facts.next_offset,
            segments_removed: 0,
        });
    }
    // What recovery found on the device is made durable before it is served, and so is
    // the allocation, so that the first append's sync does not pay for it.
    file.sync().await.map_err(|e| LogError::SyncFailed { path: paths.log.clone(), source: e })?;
    let align = file.alignment().max(FS_BLOCK_BYTES as u64);
    let tail_start = facts.size - facts.size % align;
    let tail = if tail_start < facts.size {
        let buf = file.read_at(tail_start, (facts.size - tail_start) as usize).await;
        buf.map_err(|e| LogError::io("read", &paths.log, e))?.to_vec()
    } else {
        Vec::new()
    };
    let appender =
        Appender::new(file.clone(), facts.size, &tail, config.write_buffer_bytes, config.write_behind_buffers);
    let segment = Segment { base, file, paths, index: outcome.index, opened: Instant::now(), damage: None };
    Ok((segment, appender))
}
