//! A log's lifetime: open and close.
//!
//! Open removes a compaction's leftover `.cleaned` files, lets
//! [`recovery`](crate::recovery) verify, cut and rebuild the segments, removes the
//! segments a cut dropped, and assembles the state; under `FsyncPolicy::Interval` it
//! starts the interval flusher. Close flushes and syncs, then refuses appends.
//!
//! Invariants: open returns only once the active segment, as recovery cut and
//! preallocated it, is synced, and a new log's directory entries or a cut are fsynced;
//! the active segment is the last segment on disk, or the one a full recovery cut (the
//! segments after it are removed); after close, appends fail with [`LogError::Closed`]
//! and reads still work.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

use super::flush::spawn_interval_flusher;
use super::retention::stored_start;
use super::{Inner, Log, State};
use crate::config::{FsyncPolicy, LogConfig};
use crate::error::{LogError, Result};
use crate::recovery::{RecoveryReport, recover_active, recover_closed};
use crate::segment::{SegmentPaths, first_allocation, first_step, remove_index_files, remove_segment_files};
use crate::storage::Storage;
use crate::types::Offset;

impl<S: Storage> Log<S> {
    /// Opens (or creates) the log in `dir`, recovering what a crash left behind.
    pub async fn open(storage: S, dir: impl Into<PathBuf>, config: LogConfig) -> Result<(Log<S>, RecoveryReport)> {
        config.validate()?;
        let dir = dir.into();
        storage.create_dir_all(&dir).map_err(|e| LogError::io("create directory", &dir, e))?;
        let mut report = RecoveryReport::default();
        let mut bases = Vec::new();
        for path in storage.list_dir(&dir).map_err(|e| LogError::io("list directory", &dir, e))? {
            if path.extension().is_some_and(|e| e == "cleaned") {
                storage.remove(&path).await.map_err(|e| LogError::io("remove", &path, e))?;
                report.removed_files.push(path);
            } else if let Some(base) = SegmentPaths::parse_base(&path) {
                bases.push(base);
            }
        }
        bases.sort();
        report.segments = bases.len();
        let created = bases.is_empty();
        if created {
            bases.push(Offset(0));
        }
        let (closed, cut) = recover_closed(&storage, &dir, &bases, &config, &mut report).await?;
        // The active segment: the last one, or the one a full recovery cut.
        let (active_base, file) = match cut {
            Some((i, file)) => {
                for &base in &bases[i + 1..] {
                    remove_segment_files(&storage, &SegmentPaths::new(&dir, base)).await?;
                }
                // A closed segment's index files no longer describe it once it is active.
                remove_index_files(&storage, &SegmentPaths::new(&dir, bases[i])).await?;
                (bases[i], file)
            }
            None => {
                let base = *bases.last().expect("at least one segment");
                let path = SegmentPaths::new(&dir, base).log;
                (base, Rc::new(storage.open(&path, true).await.map_err(|e| LogError::io("open", &path, e))?))
            }
        };
        let (active, appender) = recover_active::<S>(&dir, active_base, file, &config, &mut report).await?;
        let allocated = first_allocation(&config, active.facts().size);
        if created {
            // A new log: make the partition directory's own entry durable too.
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                storage.sync_dir(parent).await.map_err(|e| LogError::io("fsync directory", parent, e))?;
            }
        }
        if created || report.truncated.is_some() {
            storage.sync_dir(&dir).await.map_err(|e| LogError::io("fsync directory", &dir, e))?;
        }
        let next_offset = active.facts().next_offset;
        // A start moved by DeleteRecords may lie inside the first segment (never past
        // the end: a cut after a crash may have taken records it was moved over).
        let stored = stored_start(&storage, &dir).await?.unwrap_or(Offset(0)).min(next_offset);
        let start_offset = closed.first().map_or(active_base, |s| s.base).max(stored);
        let state = State {
            closed,
            active,
            appender,
            next_offset,
            start_offset,
            clean_through: start_offset,
            tombstones_due: None,
            durable_offset: next_offset,
            written_offset: next_offset,
            allocated,
            allocating: false,
            allocation_step: first_step(&config),
            sync_running: false,
            rolling: false,
            turn_head: 0,
            turn_tail: 0,
            turn_abandoned: Default::default(),
            turn_waiters: Vec::new(),
            failed: None,
            is_closed: false,
            waiters: Vec::new(),
            flusher: None,
            flusher_epoch: 0,
            visible_floor: Offset(0),
        };
        let inner = Rc::new(Inner {
            storage,
            dir,
            config: RefCell::new(config),
            state: RefCell::new(state),
            roll_lock: glommio::sync::Semaphore::new(1),
            stats: crate::stats::LogStats::default(),
        });
        if let FsyncPolicy::Interval(_) = inner.config.borrow().fsync {
            spawn_interval_flusher(Rc::downgrade(&inner), 0);
        }
        Ok((Log { inner }, report))
    }

    /// Flushes and syncs everything, then refuses further appends. Reads still work.
    pub async fn close(&self) -> Result<()> {
        self.flush().await?;
        self.inner.state.borrow_mut().is_closed = true;
        Ok(())
    }
}
