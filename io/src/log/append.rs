//! Appending to the log: a batch is encoded straight into the active segment's write
//! buffers, its offsets assigned there, synchronously; then the append waits until it is
//! as durable as the fsync policy says.
//!
//! Invariants: offsets are assigned in one synchronous section with the encoding, so
//! batches are stored in offset order; appends land in the order they were made, also
//! across a roll (an append that came during a roll, or while others wait, takes a place
//! in a queue of its own, served in order: the roll lock's semaphore lets a newcomer take
//! a free permit ahead of a woken waiter, so it cannot keep the order); a batch is committed to the
//! write stream only once it fits the active segment (else it is dropped, the segment
//! rolled and the batch encoded again); nothing is appended while a roll is under way or
//! after a failure.

use super::Log;
use super::roll::maybe_extend_allocation;
use crate::config::FsyncPolicy;
use crate::error::{LogError, Result};
use crate::record::{BatchMeta, Record, encode_into};
use crate::storage::{Storage, StorageFile};
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
        // Set once this append has had to wait (for a roll, or behind others that wait):
        // its place in the queue of waiting appends, which keeps their order.
        let mut turn: Option<Turn<'_, S::File>> = None;
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
                // An append that comes while others wait waits behind them, so the log
                // keeps the order appends were made in (a connection's produce requests,
                // queued in order, land in order), also across a roll.
                let my_turn = match &turn {
                    None => st.turn_head == st.turn_tail,
                    Some(t) => st.turn_head == t.ticket,
                };
                if my_turn && !st.rolling && !self.should_roll(&st.active, stored) {
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
            let t = turn.get_or_insert_with(|| Turn::take(&self.inner.state));
            // First in the queue, and no roll under way.
            t.ready().await;
            let must_roll = {
                let st = self.inner.state.borrow();
                self.should_roll(&st.active, stored_len)
            };
            if must_roll {
                let _permit = self.inner.roll_lock.acquire_permit(1).await.map_err(|_| self.closed_error())?;
                let still = {
                    let st = self.inner.state.borrow();
                    self.should_roll(&st.active, stored_len)
                };
                if still {
                    self.roll_locked().await?;
                }
            }
        };
        // Leaving the queue lets the next waiting append go.
        drop(turn);
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

/// An append's place in the queue of appends that wait (`State::turn_head`..`turn_tail`):
/// the one at the head goes next; dropping it (appended, failed, or given up) lets the
/// next one go.
struct Turn<'a, F: StorageFile> {
    state: &'a std::cell::RefCell<super::State<F>>,
    ticket: u64,
}

impl<'a, F: StorageFile> Turn<'a, F> {
    /// A place at the end of the queue.
    fn take(state: &'a std::cell::RefCell<super::State<F>>) -> Turn<'a, F> {
        let mut st = state.borrow_mut();
        let ticket = st.turn_tail;
        st.turn_tail += 1;
        Turn { state, ticket }
    }

    /// Resolves once this append is first in the queue and no roll is under way.
    async fn ready(&self) {
        std::future::poll_fn(|cx| {
            let mut st = self.state.borrow_mut();
            if st.turn_head == self.ticket && !st.rolling {
                return std::task::Poll::Ready(());
            }
            st.turn_waiters.push(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await;
    }
}

impl<F: StorageFile> Drop for Turn<'_, F> {
    fn drop(&mut self) {
        let mut st = self.state.borrow_mut();
        if st.turn_head != self.ticket {
            // Given up before its turn: skipped when the queue reaches it.
            st.turn_abandoned.insert(self.ticket);
            return;
        }
        st.turn_head += 1;
        loop {
            let head = st.turn_head;
            if !st.turn_abandoned.remove(&head) {
                break;
            }
            st.turn_head += 1;
        }
        for w in st.turn_waiters.drain(..) {
            w.wake();
        }
    }
}
