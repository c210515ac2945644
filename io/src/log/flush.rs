//! Making appends durable: group commit and the interval flusher.
//!
//! `sync_to` elects one leader that flushes the write-behind buffers and fsyncs; every
//! append made before the leader started is covered, and those arriving meanwhile wait
//! for the next sync. Under `FsyncPolicy::Interval` a background task does the same every
//! interval while there is something to sync, and parks until the next append otherwise.
//!
//! Invariants: at most one sync is in flight (`sync_running`); the durable offset only
//! grows; a failed write or fsync fails every append waiting on it and puts the log in
//! its failed state, which refuses appends until the log is reopened.

use std::future::poll_fn;
use std::rc::Weak;
use std::task::Poll;

use super::{Inner, Log};
use crate::error::{LogError, Result};
use crate::segment::appender::{Appender, FlushTicket, TrackerHandle};
use crate::storage::{Storage, StorageFile};
use crate::types::Offset;

impl<S: Storage> Log<S> {
    /// Makes every append so far durable.
    pub async fn flush(&self) -> Result<()> {
        let target = self.inner.state.borrow().next_offset;
        self.sync_to(target).await
    }

    /// Waits until every offset below `target` is durable, leading a sync if none is in
    /// flight (group commit: one fdatasync covers every append made before it started).
    pub async fn sync_to(&self, target: Offset) -> Result<()> {
        loop {
            let lead = poll_fn(|cx| {
                let mut st = self.inner.state.borrow_mut();
                if st.durable_offset >= target {
                    return Poll::Ready(Ok(false));
                }
                if let Some(reason) = &st.failed {
                    return Poll::Ready(Err(LogError::Failed { path: self.inner.dir.clone(), reason: reason.clone() }));
                }
                if st.sync_running {
                    st.waiters.push(cx.waker().clone());
                    return Poll::Pending;
                }
                st.sync_running = true;
                Poll::Ready(Ok(true))
            })
            .await?;
            if !lead {
                return Ok(());
            }
            let result = self.sync_now().await;
            let mut st = self.inner.state.borrow_mut();
            st.sync_running = false;
            match &result {
                Ok(upto) => {
                    st.durable_offset = st.durable_offset.max(*upto);
                    st.written_offset = st.written_offset.max(*upto);
                }
                Err(e) => {
                    st.failed.get_or_insert_with(|| e.to_string());
                }
            }
            st.wake_all();
            drop(st);
            result?;
        }
    }

    /// Makes every append so far visible to readers ([`visible_offset`](Self::visible_offset))
    /// as far as the policy allows without an fsync: under `interval` and `never` the
    /// write-behind buffers are written out (no fsync); under `always` nothing is done
    /// (what is not fsynced yet waits for its group commit). Returns the visible end. A log
    /// whose writes failed makes nothing more visible: what failed is never read.
    pub async fn make_visible(&self) -> Result<Offset> {
        if self.fsync() == crate::config::FsyncPolicy::Always {
            return Ok(self.visible_offset());
        }
        let flush = {
            let st = &mut *self.inner.state.borrow_mut();
            if st.written_offset >= st.next_offset {
                return Ok(st.written_offset);
            }
            let upto = st.next_offset;
            flush_unless_failed(&mut st.appender).map(|f| (f, upto, st.active.paths.log.clone()))
        };
        if let Some(((handle, ticket), upto, path)) = flush {
            handle.wait(ticket).await.map_err(|e| LogError::io("write", &path, e))?;
            let st = &mut *self.inner.state.borrow_mut();
            st.written_offset = st.written_offset.max(upto);
        }
        Ok(self.visible_offset())
    }

    async fn sync_now(&self) -> Result<Offset> {
        let (ticket, handle, file, upto, path) = {
            let st = &mut *self.inner.state.borrow_mut();
            (
                st.appender.start_flush(),
                st.appender.handle(),
                st.active.file.clone(),
                st.next_offset,
                st.active.paths.log.clone(),
            )
        };
        handle.wait(ticket).await.map_err(|e| LogError::io("write", &path, e))?;
        let started = std::time::Instant::now();
        file.sync().await.map_err(|e| LogError::SyncFailed { path, source: e })?;
        self.inner.stats.fsync.record(started.elapsed());
        Ok(upto)
    }
}

/// Starts a flush of the active segment so a read sees every append, unless a write has
/// already failed: then no flush can complete, while everything acknowledged is on disk
/// already and stays readable (what was never written reads as the end of the data or as
/// damage, never as records).
pub(super) fn flush_unless_failed<F: StorageFile>(appender: &mut Appender<F>) -> Option<(TrackerHandle, FlushTicket)> {
    if appender.error().is_some() {
        return None;
    }
    let ticket = appender.start_flush();
    Some((appender.handle(), ticket))
}

/// Syncs the log every interval of its `FsyncPolicy::Interval` while there is something
/// to sync, until it is dropped, closed or failed, or the policy changes (the flusher of
/// `epoch` ends once the log's flusher epoch has moved on). With nothing to sync it parks
/// until the next append: ten thousand idle partitions cost no timer wake-ups.
pub(super) fn spawn_interval_flusher<S: Storage>(inner: Weak<Inner<S>>, epoch: u64) {
    glommio::spawn_local(async move {
        loop {
            // Parked on a weak reference: a dropped log wakes it (`Inner`'s drop) and it ends.
            let every = poll_fn(|cx| {
                let Some(inner) = inner.upgrade() else { return Poll::Ready(None) };
                let every = match inner.config.borrow().fsync {
                    crate::config::FsyncPolicy::Interval(every) => every,
                    _ => return Poll::Ready(None),
                };
                let mut st = inner.state.borrow_mut();
                if st.is_closed || st.failed.is_some() || st.flusher_epoch != epoch {
                    return Poll::Ready(None);
                }
                if st.durable_offset < st.next_offset {
                    return Poll::Ready(Some(every));
                }
                st.flusher = Some(cx.waker().clone());
                Poll::Pending
            })
            .await;
            let Some(every) = every else { return };
            glommio::timer::sleep(every).await;
            let Some(inner) = inner.upgrade() else { return };
            let (target, stop) = {
                let st = inner.state.borrow();
                (st.next_offset, st.is_closed || st.failed.is_some() || st.flusher_epoch != epoch)
            };
            if stop {
                return;
            }
            let log = Log { inner };
            // A failure is recorded in the log's state and reported to the next append.
            let _ = log.sync_to(target).await;
        }
    })
    .detach();
}
