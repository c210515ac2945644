//! One cleaning pass, as the engine's cleaner runs it on every partition at each check
//! (Kafka's `log.retention.check.interval.ms`) and `sluice topic clean` runs it on demand:
//!
//! 1. Time-based rolls. The active segment rolls once it is older than `segment_ms`, or,
//!    under a deleting policy, once its newest record is past `retention_ms`, so that an
//!    idle partition's data ages out too (Kafka rolls before it would delete the active
//!    segment). An empty active segment never rolls.
//! 2. Retention, when the policy deletes ([`Log::apply_retention`]).
//! 3. Compaction, when the policy compacts and the dirty ratio (the share of the closed
//!    segments' bytes at or above the cleaner's mark) reaches `min_cleanable_dirty_ratio`,
//!    or, for [`CleanTrigger::Now`], whenever anything is dirty; and, dirty or not, once a
//!    tombstone the last compaction kept has outlived `delete_retention_ms`.

use super::Log;
use super::compaction::CompactionReport;
use crate::error::Result;
use crate::log::RetentionReport;
use crate::storage::Storage;
use crate::types::Timestamp;

/// What a cleaning pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// The active segment rolled (by `segment_ms`, or to let retention delete it).
    pub rolled: bool,
    /// What retention deleted (nothing when the policy does not delete).
    pub retention: RetentionReport,
    /// What compaction did, if it ran.
    pub compaction: Option<CompactionReport>,
}

impl CleanReport {
    /// Bytes the pass gave back: deleted segments, and what compaction removed.
    #[must_use]
    pub fn bytes_reclaimed(&self) -> u64 {
        self.retention.bytes_deleted
            + self.compaction.as_ref().map_or(0, |c| c.bytes_before.saturating_sub(c.bytes_after))
    }
}

/// Why a pass runs: the scheduled check honours the dirty ratio; an explicit request
/// compacts whatever is dirty.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CleanTrigger {
    /// The periodic check.
    Scheduled,
    /// Asked for now (`sluice topic clean`).
    Now,
}

impl<S: Storage> Log<S> {
    /// The share of the closed segments' bytes written since the last compaction (0 when
    /// there are no closed segments).
    #[must_use]
    pub fn dirty_ratio(&self) -> f64 {
        let st = self.inner.state.borrow();
        let (mut total, mut dirty) = (0u64, 0u64);
        for seg in &st.closed {
            let size = seg.facts().size;
            total += size;
            if seg.base >= st.clean_through {
                dirty += size;
            }
        }
        if total == 0 { 0.0 } else { dirty as f64 / total as f64 }
    }

    /// One cleaning pass at time `now` (see the module docs).
    pub async fn clean(&self, now: Timestamp, trigger: CleanTrigger) -> Result<CleanReport> {
        let config = self.config();
        let mut report = CleanReport::default();
        let roll = {
            let st = self.inner.state.borrow();
            let facts = st.active.facts();
            let aged = self.aged(&st.active);
            let expired = config.cleanup.deletes()
                && config.retention_ms.is_some_and(|ms| facts.max_time.0 < now.0.saturating_sub(ms as i64));
            facts.size > 0 && (aged || expired)
        };
        if roll {
            self.roll().await?;
            report.rolled = true;
        }
        if config.cleanup.deletes() {
            report.retention = self.apply_retention(now).await?;
        } else {
            report.retention.log_start = self.start_offset();
        }
        let ratio = self.dirty_ratio();
        let tombstones_due = self.inner.state.borrow().tombstones_due.is_some_and(|t| now >= t);
        let due = tombstones_due
            || match trigger {
                CleanTrigger::Scheduled => ratio > 0.0 && ratio >= config.min_cleanable_dirty_ratio,
                CleanTrigger::Now => ratio > 0.0,
            };
        if config.cleanup.compacts() && due {
            report.compaction = Some(self.compact(now).await?);
        }
        Ok(report)
    }
}
