//! Counters a running pipeline keeps, shared by its shards (relaxed atomics, updated once
//! per batch or per rare event, never per record on a hot path).

use std::sync::atomic::{AtomicU64, Ordering};

/// The pipeline's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    late_dropped: AtomicU64,
    late_side_output: AtomicU64,
    late_updates: AtomicU64,
}

impl Metrics {
    /// Late records dropped by window operators (the `Drop` policy, or past allowed lateness).
    #[must_use]
    pub fn late_dropped(&self) -> u64 {
        self.late_dropped.load(Ordering::Relaxed)
    }

    /// Late records sent to a late side output.
    #[must_use]
    pub fn late_side_output(&self) -> u64 {
        self.late_side_output.load(Ordering::Relaxed)
    }

    /// Late records that updated an already emitted window result.
    #[must_use]
    pub fn late_updates(&self) -> u64 {
        self.late_updates.load(Ordering::Relaxed)
    }

    pub(crate) fn add_late_dropped(&self, n: u64) {
        if n > 0 {
            self.late_dropped.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub(crate) fn add_late_side_output(&self, n: u64) {
        if n > 0 {
            self.late_side_output.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub(crate) fn add_late_updates(&self, n: u64) {
        if n > 0 {
            self.late_updates.fetch_add(n, Ordering::Relaxed);
        }
    }
}
