//! Appending to the log: a batch is encoded straight into the active segment's write
//! buffers, its offsets assigned there, synchronously; then the append waits until it is
//! as durable as the fsync policy says.
//!
//! Invariants: offsets are assigned in one synchronous section with the encoding, so
//! batches are stored in offset order; a batch is committed to the write stream only once
//! it fits the active segment (else it is dropped, the segment rolled and the batch
//! encoded again); nothing is appended while a roll is under way or after a failure.

use super::Log;
use super::roll::maybe_extend_allocation;
use crate::config::FsyncPolicy;
use crate::error::{LogError, Result};
use crate::record::{BatchMeta, Record, encode_into};
use crate::storage::Storage;
use crate::types::Offset;

/// Where an append landed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    /// The offset of the batch's first record.
    pub base_offset: Offset,
    /// The offset of the batch's last record.
    pub last_offset: Offset,
}

impl<S: Storage> Log<S> {
    /// Appends `records` as one batch.
    pub async fn append(&self, records: &[Record<'_>]) -> Result<AppendInfo> {
        self.append_with(records, &BatchMeta::default()).await
    }

    /// Appends `records` as one batch stamped with `meta` (producer, attributes). Resolves
    /// once the batch is as durable as the fsync policy says.
    pub async fn append_with(&self, records: &[Record<'_>], meta: &BatchMeta) -> Result<AppendInfo> {
        let info = self.append_unsynced(records, meta).await?;
        self.wait_durable(info).await?;
        Ok(info)
    }

    /// Appends `records` as one batch and returns its offsets as soon as they are
    /// assigned and the bytes are buffered, without waiting for the fsync policy. For
    /// callers that must record the offsets before the wait (an idempotent producer's
    /// sequence table): follow it with [`wait_durable`](Self::wait_durable) before
    /// acknowledging anything.
    pub async fn append_unsynced(&self, records: &[Record<'_>], meta: &BatchMeta) -> Result<AppendInfo> {
        if records.is_empty() {
            return Err(LogError::EmptyBatch);
        }
        let info = loop {
            let stored_len = {
                let st = &mut *self.inner.state.borrow_mut();
                self.check_writable(st)?;
                // Encoded straight into the segment's write buffers; committed to the
                // stream only once it is known to fit.
                let pos = st.appender.end();
                let mut stage = st.appender.stage();
                let limit = self.inner.config.borrow().max_batch_bytes;
                let header = encode_into(records, None, None, meta, st.next_offset, &mut stage)
                    .map_err(|e| LogError::encode(e, limit))?;
                let stored = stage.len();
                if stored > limit {
                    return Err(LogError::BatchTooLarge { bytes: stored, limit });
                }
                if !st.rolling && !self.should_roll(&st.active, stored) {
                    stage.commit();
                    self.inner.stats.appended(records.len(), stored);
                    st.active.index.add_batch(pos, &header);
                    st.next_offset = header.next_offset();
                    if let Some(flusher) = st.flusher.take() {
                        flusher.wake();
                    }
                    maybe_extend_allocation(&self.inner, st);
                    break AppendInfo { base_offset: header.base_offset, last_offset: header.last_offset() };
                }
                stored
            };
            let _permit = self.inner.roll_lock.acquire_permit(1).await.map_err(|_| self.closed_error())?;
            let must_roll = {
                let st = self.inner.state.borrow();
                self.should_roll(&st.active, stored_len)
            };
            if must_roll {
                self.roll_locked().await?;
            }
        };
        Ok(info)
    }

    /// Waits until an append is as durable as the fsync policy promises (under
    /// `interval` and `never`: until the write-behind has room again).
    pub async fn wait_durable(&self, info: AppendInfo) -> Result<()> {
        if self.fsync() == FsyncPolicy::Always {
            self.sync_to(info.last_offset.plus(1)).await?;
        } else {
            // Backpressure: wait until at most `write_behind_buffers` writes submitted
            // before this append are still in flight.
            let (handle, ticket) = {
                let st = self.inner.state.borrow();
                (st.appender.handle(), st.appender.room_ticket())
            };
            handle.wait(ticket).await.map_err(|e| LogError::io("write", self.inner.dir.clone(), e))?;
        }
        Ok(())
    }
}
