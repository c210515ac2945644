//! Retention: deleting whole closed segments by age or total size, oldest first, and
//! moving the log start offset.
//!
//! Invariants: the active segment is never deleted; segments leave the log's state
//! before their files are removed, and the directory is fsynced after.

use super::Log;
use crate::error::{LogError, Result};
use crate::segment::{SegmentPaths, remove_segment_files};
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
            let config = &self.inner.config;
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
            st.start_offset = st.closed.first().map_or(st.active.base, |s| s.base);
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
}
