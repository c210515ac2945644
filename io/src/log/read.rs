//! Reading the log: whole checked batches by offset, and the first offset at or after a
//! time.
//!
//! The segment is found by binary search, the position in it by its sparse index. The
//! active segment's tail may still be in the write-behind buffers: a reader there copies
//! it from memory, and otherwise flushes before it reads the disk.
//!
//! Invariants: a read returns whole batches that passed their checks, never records of
//! the next segment in place of a damaged one's (it returns the damage as
//! [`LogError::Corrupt`]); gaps in the offsets (compaction, a cut before a roll) are
//! skipped.

use super::Log;
use super::flush::flush_unless_failed;
use crate::error::{LogError, Result};
use crate::segment::{ReadBatches, ReadBuf, read_batches, read_batches_from};
use crate::storage::{Storage, StorageFile};
use crate::types::{Offset, Timestamp};

impl<S: Storage> Log<S> {
    /// Reads whole batches starting with the one that holds `offset`, up to about
    /// `max_bytes` (at least one batch, however large), and none at or past the visible
    /// end ([`visible_offset`](Self::visible_offset)), making what was appended visible
    /// first where the policy allows ([`make_visible`](Self::make_visible)). Reading at the
    /// visible end returns no batches; outside `[start, end]` is
    /// [`LogError::OffsetOutOfRange`].
    pub async fn read(&self, offset: Offset, max_bytes: usize) -> Result<ReadBatches> {
        // A write that fails here fails the log for appends (they report it); a reader just
        // sees what is visible.
        let bound = match self.visible_offset() < self.end_offset() {
            true => self.make_visible().await.unwrap_or_else(|_| self.visible_offset()),
            false => self.visible_offset(),
        };
        let mut batches = self.read_unbounded(offset, max_bytes).await?;
        batches.keep_below(bound);
        Ok(batches)
    }

    /// Where a scan for transactions starting at `from` must begin: the first
    /// transactional or control batch at or after `from` as far as the segments' facts
    /// tell (each segment knows its first one, so inside the segment that holds `from` the
    /// answer is `from` itself once that segment's first one lies before it), or `None`
    /// when no segment from `from` on holds one: nothing at or past `from` opens or ends
    /// a transaction, as of now. A read_committed reader of a partition no transactional
    /// producer wrote to thus never reads it for transactions.
    #[must_use]
    pub fn first_transactional_from(&self, from: Offset) -> Option<Offset> {
        let st = self.inner.state.borrow();
        st.segments().filter(|s| s.facts().next_offset > from).find_map(|s| match s.facts().first_txn {
            // A damaged segment's facts stop at the damage: the scan reads it and meets it.
            _ if s.damage.is_some() => Some(from.max(s.base)),
            first => first.map(|f| f.max(from)),
        })
    }

    async fn read_unbounded(&self, offset: Offset, max_bytes: usize) -> Result<ReadBatches> {
        let mut at = offset;
        loop {
            let (file, path, start_pos, end_pos, next_base, base, damage) = {
                let st = &mut *self.inner.state.borrow_mut();
                if at < st.start_offset || at > st.next_offset {
                    return Err(LogError::OffsetOutOfRange {
                        requested: at,
                        start: st.start_offset,
                        end: st.next_offset,
                    });
                }
                if at == st.next_offset {
                    return Ok(ReadBatches::empty(at));
                }
                let i = st.closed.partition_point(|s| s.base <= at);
                let (seg, next_base) = if i == st.closed.len() && st.active.base <= at {
                    (&st.active, None)
                } else {
                    let seg = &st.closed[i.saturating_sub(1)];
                    (seg, Some(st.closed.get(i).map_or(st.active.base, |s| s.base)))
                };
                (
                    seg.file.clone(),
                    seg.paths.log.clone(),
                    seg.index.lookup_offset(at),
                    seg.facts().size,
                    next_base,
                    seg.base,
                    seg.damage_error(),
                )
            };
            let lookahead = self.inner.config.borrow().index_interval_bytes as usize + 4096;
            // The active segment's tail may still be in the write-behind buffers: a reader
            // there copies it from memory rather than waiting for a write and a read.
            let read = async |pos: u64, len: usize| -> Result<ReadBuf> {
                // Only while this segment is still the active one (a roll may intervene).
                let flush = {
                    let st = &mut *self.inner.state.borrow_mut();
                    if next_base.is_some() || st.active.base != base {
                        None
                    } else if let Some(bytes) = st.appender.read_tail(pos, len) {
                        return Ok(ReadBuf::Memory(bytes));
                    } else {
                        flush_unless_failed(&mut st.appender)
                    }
                };
                if let Some((handle, ticket)) = flush {
                    handle.wait(ticket).await.map_err(|e| LogError::io("write", &path, e))?;
                }
                file.read_at(pos, len).await.map(ReadBuf::Disk).map_err(|e| LogError::io("read", &path, e))
            };
            let batches = read_batches_from(read, &path, at, start_pos, end_pos, max_bytes, lookahead).await?;
            if !batches.is_empty() {
                return Ok(batches);
            }
            if let Some(e) = damage {
                return Err(e);
            }
            match next_base {
                Some(next) => at = at.max(next),
                None => return Ok(ReadBatches::empty(at)),
            }
        }
    }

    /// if every record is older (Kafka's ListOffsets by timestamp).
    pub async fn offset_for_time(&self, time: Timestamp) -> Result<Option<Offset>> {
        let candidates: Vec<_> = {
            let st = self.inner.state.borrow();
            st.segments()
                // A damaged segment's unreadable part may hold the answer: visit it.
                .filter(|s| s.facts().max_time >= time || s.damage.is_some())
                .map(|s| {
                    (
                        s.file.clone(),
                        s.paths.log.clone(),
                        s.base,
                        s.index.lookup_time(time),
                        s.facts().size,
                        s.base == st.active.base,
                        s.damage_error(),
                    )
                })
                .collect()
        };
        for (file, path, base, start_pos, end_pos, is_active, damage) in candidates {
            let flush = if is_active { flush_unless_failed(&mut self.inner.state.borrow_mut().appender) } else { None };
            if let Some((handle, ticket)) = flush {
                handle.wait(ticket).await.map_err(|e| LogError::io("write", &path, e))?;
            }
            let mut pos = start_pos;
            while pos < end_pos {
                let batches = read_batches(&*file, &path, base, pos, end_pos, 1 << 20, 0).await?;
                if batches.is_empty() {
                    break;
                }
                for batch in batches.batches() {
                    let batch = batch?;
                    if batch.header().max_event_time >= time
                        && let Some(r) = batch.records().find(|r| r.event_time() >= time)
                    {
                        return Ok(Some(r.offset()));
                    }
                }
                pos = batches.end_pos();
            }
            if let Some(e) = damage {
                return Err(e);
            }
        }
        Ok(None)
    }
}
