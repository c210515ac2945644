//! Retention: deleting whole closed segments by age or total size, oldest first, and
//! moving the log start offset; and moving it on request (Kafka's DeleteRecords), which
//! may leave it inside a segment.
//!
//! Invariants: the active segment is never deleted; segments leave the log's state
//! before their files are removed, and the directory is fsynced after; the start offset
//! never moves back. A start moved on request is stored in [`LOG_START_FILE`] (written
//! aside, synced, renamed over, the directory synced) before it takes effect, and open
//! starts the log there.

use super::Log;
use crate::error::{LogError, Result};
use crate::segment::{SegmentPaths, read_small_file, remove_segment_files, write_small_file};
use crate::storage::Storage;
use crate::types::{Offset, Timestamp};

/// What a retention pass removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Segments deleted.
    pub segments_deleted: usize,
    /// Bytes deleted.
    pub bytes_deleted: u64,
    /// The log start offset after the pass.
    pub log_start: Offset,
}

impl<S: Storage> Log<S> {
    /// Deletes closed segments past the retention time (their newest record older than
    /// `now - retention_ms`) or beyond the retention size, oldest first, and moves the log
    /// start offset. The active segment is never deleted.
    pub async fn apply_retention(&self, now: Timestamp) -> Result<RetentionReport> {
        let removed: Vec<SegmentPaths> = {
            let st = &mut *self.inner.state.borrow_mut();
            let config = self.config();
            let mut total: u64 = st.segments().map(|s| s.facts().size).sum();
            let mut n = 0;
            for seg in &st.closed {
                let size = seg.facts().size;
                let by_time =
                    config.retention_ms.is_some_and(|ms| seg.facts().max_time.0 < now.0.saturating_sub(ms as i64));
                let by_size = config.retention_bytes.is_some_and(|max| total - size >= max);
                if !(by_time || by_size) {
                    break;
                }
                total -= size;
                n += 1;
            }
            let gone: Vec<_> = st.closed.drain(..n).collect();
            st.start_offset = st.start_offset.max(st.closed.first().map_or(st.active.base, |s| s.base));
            gone.into_iter().map(|s| s.paths).collect()
        };
        let mut report =
            RetentionReport { segments_deleted: removed.len(), bytes_deleted: 0, log_start: self.start_offset() };
        for paths in &removed {
            report.bytes_deleted += std::fs::metadata(&paths.log).map(|m| m.len()).unwrap_or(0);
            remove_segment_files(&self.inner.storage, paths).await?;
        }
        if !removed.is_empty() {
            let dir = &self.inner.dir;
            self.inner.storage.sync_dir(dir).await.map_err(|e| LogError::io("fsync directory", dir, e))?;
        }
        Ok(report)
    }

    /// Moves the log start offset to `before` (Kafka's DeleteRecords): records below it are
    /// no longer readable, and the closed segments that hold nothing at or above it are
    /// deleted. `before` may be anywhere up to the end offset; at or below the current
    /// start it changes nothing. Returns the new start (Kafka's low watermark).
    pub async fn delete_records_before(&self, before: Offset) -> Result<Offset> {
        let (start, end) = (self.start_offset(), self.end_offset());
        if before > end {
            return Err(LogError::OffsetOutOfRange { requested: before, start, end });
        }
        if before <= start {
            return Ok(start);
        }
        // Stored first: after a crash the log must not start before `before` again.
        let dir = &self.inner.dir;
        let (path, aside) = (dir.join(LOG_START_FILE), dir.join(format!("{LOG_START_FILE}.new")));
        let storage = &self.inner.storage;
        write_small_file(storage, &aside, format!("{}\n", before.0).as_bytes()).await?;
        storage.rename(&aside, &path).await.map_err(|e| LogError::io("rename", &aside, e))?;
        storage.sync_dir(dir).await.map_err(|e| LogError::io("fsync directory", dir, e))?;
        let removed: Vec<SegmentPaths> = {
            let st = &mut *self.inner.state.borrow_mut();
            st.start_offset = st.start_offset.max(before);
            // A closed segment goes when the next one starts at or below the new start.
            let next_base = |i: usize| st.closed.get(i + 1).map_or(st.active.base, |s| s.base);
            let n = (0..st.closed.len()).take_while(|&i| next_base(i) <= st.start_offset).count();
            st.closed.drain(..n).map(|s| s.paths).collect()
        };
        for paths in &removed {
            remove_segment_files(storage, paths).await?;
        }
        if !removed.is_empty() {
            storage.sync_dir(dir).await.map_err(|e| LogError::io("fsync directory", dir, e))?;
        }
        Ok(self.start_offset())
    }
}

/// The file that holds a start offset moved on request, as decimal text.
pub const LOG_START_FILE: &str = "log-start-offset";

/// The start offset stored in `dir`, if one was.
pub(crate) async fn stored_start<S: Storage>(storage: &S, dir: &std::path::Path) -> Result<Option<Offset>> {
    let path = dir.join(LOG_START_FILE);
    let Some(bytes) = read_small_file(storage, &path).await? else { return Ok(None) };
    let text = String::from_utf8_lossy(&bytes);
    let start = text.trim().parse::<u64>().map_err(|_| LogError::Corrupt {
        path: path.clone(),
        pos: crate::types::FilePos(0),
        reason: format!("{text:?} is not a start offset"),
    })?;
    Ok(Some(Offset(start)))
}
