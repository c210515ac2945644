//! A partition log: an ordered set of segments, the last of which is active.
//!
//! Contract: a `Log` lives on the executor that opened it (it is `!Send`), and that
//! executor alone touches its files. No `RefCell` borrow is held across an `.await`:
//! every method takes what it needs from the state in a synchronous section, awaits
//! I/O, and writes the outcome back in another.
//!
//! Durability: an append is acknowledged only as durable as the policy says. Under
//! `Always`, appends that arrive while an fdatasync is in flight wait for the next one,
//! which covers them all (group commit). A failed write or fsync fails the appends that
//! waited on it and puts the log in a failed state that refuses appends until it is
//! reopened; what was durable stays readable.
//!
//! This file owns the handle ([`Log`]), the state its clones and background tasks share
//! (`Inner`, `State`), and the accessors. The operations are split by idea into the
//! files below; each builds on this one, and they use each other without a circle
//! (`lifecycle`, `append` and `read` use `flush`; `append` uses `roll`):
//!
//! - `lifecycle.rs`: open (which assembles the log from what
//!   [`recovery`](crate::recovery) finds) and close.
//! - `append.rs`: appending a batch, and waiting until it is as durable as the policy says.
//! - `roll.rs`: when the active segment rolls, the roll itself, and growing the active
//!   segment's preallocation.
//! - `flush.rs`: group commit (`flush`, `sync_to`) and the interval flusher.
//! - `read.rs`: reads by offset and by time, from disk or from the write-behind buffers.
//! - `retention.rs`: deleting whole closed segments by age or size.
//! - `compaction.rs`: keeping the latest record per key in closed segments.
//! - `clean.rs`: one cleaning pass as the engine's cleaner runs it: time-based rolls,
//!   retention and compaction (by dirty ratio), per the cleanup policy.
//! - `reconfigure.rs`: changing an open log's settings (fsync policy, segment size and
//!   age, retention, compaction, the batch size limit), effective at once.

mod append;
mod clean;
mod compaction;
mod flush;
mod lifecycle;
mod read;
mod reconfigure;
mod retention;
mod roll;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::task::Waker;

pub use append::AppendInfo;
pub use clean::{CleanReport, CleanTrigger};
pub use compaction::CompactionReport;
pub use retention::{LOG_START_FILE, RetentionReport};

use crate::config::LogConfig;
use crate::error::{LogError, Result};
use crate::segment::Segment;
use crate::segment::appender::Appender;
use crate::storage::{Storage, StorageFile, UringStorage};
use crate::types::Offset;

/// A partition log. Cheap to clone (a handle); lives on one executor.
#[derive(Debug)]
pub struct Log<S: Storage = UringStorage> {
    pub(crate) inner: Rc<Inner<S>>,
}

impl<S: Storage> Clone for Log<S> {
    fn clone(&self) -> Self {
        Log { inner: self.inner.clone() }
    }
}

#[derive(Debug)]
pub(crate) struct Inner<S: Storage> {
    pub(crate) storage: S,
    pub(crate) dir: PathBuf,
    /// The settings: those [`Log::reconfigure`] may change are read where they apply
    /// (never held across an `.await`), so a change takes effect at the next append, roll
    /// or cleaning pass.
    pub(crate) config: RefCell<LogConfig>,
    pub(crate) state: RefCell<State<S::File>>,
    /// Held while the active segment is rolled or a compaction swaps segments.
    pub(crate) roll_lock: glommio::sync::Semaphore,
    /// What the log counts for the engine's metrics (plain cells: the log is `!Send`).
    pub(crate) stats: crate::stats::LogStats,
}

impl<S: Storage> Drop for Inner<S> {
    /// A parked interval flusher looks once more, finds the log gone, and ends.
    fn drop(&mut self) {
        if let Some(w) = self.state.get_mut().flusher.take() {
            w.wake();
        }
    }
}

#[derive(Debug)]
pub(crate) struct State<F: StorageFile> {
    pub(crate) closed: Vec<Segment<F>>,
    pub(crate) active: Segment<F>,
    pub(crate) appender: Appender<F>,
    pub(crate) next_offset: Offset,
    pub(crate) start_offset: Offset,
    /// Closed segments below this were compacted (Kafka's cleaner checkpoint); those at
    /// or above it are dirty. Kept in memory: after a reopen every closed segment counts
    /// as dirty until the next compaction.
    pub(crate) clean_through: Offset,
    /// When the earliest tombstone the last compaction kept will have outlived
    /// `delete_retention_ms`: a compaction is due then, dirty or not.
    pub(crate) tombstones_due: Option<crate::types::Timestamp>,
    durable_offset: Offset,
    /// Every offset below this is in a completed write: a kill of the process cannot take
    /// it back (the durable offset is at or below it).
    written_offset: Offset,
    /// Bytes the active segment's file is allocated to, and whether a step is under way.
    allocated: u64,
    allocating: bool,
    /// The next step's size: doubles from 64 KiB up to `preallocate_step_bytes`.
    allocation_step: u64,
    sync_running: bool,
    rolling: bool,
    /// The queue of appends that wait (for a roll, or behind others that do): tickets
    /// `turn_head..turn_tail`, served in order; abandoned tickets are skipped. While it is
    /// not empty, a new append queues too (appends keep their order across a roll).
    turn_head: u64,
    turn_tail: u64,
    turn_abandoned: std::collections::BTreeSet<u64>,
    turn_waiters: Vec<Waker>,
    failed: Option<String>,
    is_closed: bool,
    waiters: Vec<Waker>,
    /// The interval flusher, parked while there is nothing to sync: the next append wakes
    /// it, so an idle partition costs no timer wake-ups.
    flusher: Option<Waker>,
    /// Which interval flusher is current: a change of the fsync policy starts a new one
    /// (or none) and the older one ends when it sees the count moved.
    flusher_epoch: u64,
    /// Under `FsyncPolicy::Always`, readers see at least this far: what was visible (the
    /// written end) when the policy became `always`, so the high watermark never moves
    /// back across that change.
    visible_floor: Offset,
}

impl<F: StorageFile> State<F> {
    fn wake_all(&mut self) {
        for w in self.waiters.drain(..).chain(self.turn_waiters.drain(..)) {
            w.wake();
        }
    }

    /// The segments in offset order, active last.
    pub(crate) fn segments(&self) -> impl Iterator<Item = &Segment<F>> {
        self.closed.iter().chain(std::iter::once(&self.active))
    }
}

impl<S: Storage> Log<S> {
    /// The partition directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The configuration, as it is now ([`reconfigure`](Self::reconfigure) changes it).
    #[must_use]
    pub fn config(&self) -> LogConfig {
        self.inner.config.borrow().clone()
    }

    /// The fsync policy now.
    fn fsync(&self) -> crate::config::FsyncPolicy {
        self.inner.config.borrow().fsync
    }

    /// What the log has counted since it was opened (records and bytes appended, rolls,
    /// fsync latencies).
    #[must_use]
    pub fn stats(&self) -> crate::stats::LogStatsSnapshot {
        self.inner.stats.snapshot()
    }

    /// The first offset still held.
    #[must_use]
    pub fn start_offset(&self) -> Offset {
        self.inner.state.borrow().start_offset
    }

    /// The offset the next append gets (Kafka's log end offset).
    #[must_use]
    pub fn end_offset(&self) -> Offset {
        self.inner.state.borrow().next_offset
    }

    /// Every offset below this is durable.
    #[must_use]
    pub fn durable_offset(&self) -> Offset {
        self.inner.state.borrow().durable_offset
    }

    /// The end a read may reach now: the visible end under `FsyncPolicy::Always` (what is
    /// fsynced), the end of the log otherwise (a read writes the tail out first). A
    /// long-polling reader waits until this passes its position.
    #[must_use]
    pub fn readable_end(&self) -> Offset {
        match self.fsync() {
            crate::config::FsyncPolicy::Always => self.visible_offset(),
            _ => self.end_offset(),
        }
    }

    /// Every offset below this is written: past the process's buffers, so a kill of the
    /// process cannot take it back (a crash of the machine still may, unless synced).
    #[must_use]
    pub fn written_offset(&self) -> Offset {
        self.inner.state.borrow().written_offset
    }

    /// The end of what readers see (Kafka's high watermark on one node): what is fsynced
    /// under `FsyncPolicy::Always`, what is written otherwise. Nothing past it was ever
    /// read, so nothing a reader saw can vanish in a crash the policy covers, and the
    /// offsets of appends that failed are never seen. See [`make_visible`](Self::make_visible).
    #[must_use]
    pub fn visible_offset(&self) -> Offset {
        let st = self.inner.state.borrow();
        match self.fsync() {
            // What was visible before the policy became `always` stays visible.
            crate::config::FsyncPolicy::Always => st.durable_offset.max(st.visible_floor),
            _ => st.written_offset,
        }
    }

    /// Segments, the active one included.
    #[must_use]
    pub fn segment_count(&self) -> usize {
        self.inner.state.borrow().closed.len() + 1
    }

    /// Bytes of batches held, over all segments.
    #[must_use]
    pub fn size_bytes(&self) -> u64 {
        self.inner.state.borrow().segments().map(|s| s.facts().size).sum()
    }

    /// The base offsets of the segments, oldest first.
    #[must_use]
    pub fn segment_bases(&self) -> Vec<Offset> {
        self.inner.state.borrow().segments().map(|s| s.base).collect()
    }

    /// Why the log refuses appends, if it does: a write or fsync failed (a full device,
    /// an I/O error). It stays readable; reopening it (recovery) makes it writable again.
    #[must_use]
    pub fn failure(&self) -> Option<String> {
        let st = self.inner.state.borrow();
        if st.is_closed {
            return None;
        }
        st.failed.clone().or_else(|| st.appender.error().map(|e| format!("write failed: {e}")))
    }

    fn closed_error(&self) -> LogError {
        LogError::Closed { path: self.inner.dir.clone() }
    }

    fn check_writable(&self, st: &State<S::File>) -> Result<()> {
        if st.is_closed {
            return Err(self.closed_error());
        }
        if let Some(reason) = &st.failed {
            return Err(LogError::Failed { path: self.inner.dir.clone(), reason: reason.clone() });
        }
        if let Some(e) = st.appender.error() {
            return Err(LogError::Failed { path: self.inner.dir.clone(), reason: format!("write failed: {e}") });
        }
        Ok(())
    }
}
