//! Log compaction: keep the latest record per key in closed segments (Kafka's
//! `cleanup.policy=compact`), and drop tombstones (a key with a null value) once they
//! are older than `delete_retention_ms`. An empty value is a value like any other, as in
//! Kafka. Control batches (transaction markers) are kept as they are and their keys do
//! not compete with the data's.
//!
//! Offsets are preserved: a rewritten batch keeps its base offset and last offset delta,
//! and each record keeps its offset delta, so readers see gaps, never renumbering. The
//! active segment is neither compacted nor counted (as in Kafka, a key superseded only
//! by the active segment is kept until that segment closes).
//!
//! Crash safety: a segment is rewritten into `.cleaned` files, synced, and then renamed
//! over the original (the log file first, its indexes after; an index that still
//! describes the old file is detected by its recorded size and rebuilt). Leftover
//! `.cleaned` files are deleted on open.

use std::collections::HashMap;
use std::rc::Rc;

use super::Log;
use crate::error::{LogError, Result};
use crate::record::{BatchMeta, Header, MAX_BODY_BYTES, Record, RecordView, encode_into};
use crate::segment::appender::Appender;
use crate::segment::{ReadBatches, SegmentFacts, SegmentIndex, SegmentPaths, read_batches, write_index};
use crate::storage::{Storage, StorageFile};
use crate::types::{Offset, Timestamp};

/// What a compaction pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactionReport {
    /// Closed segments rewritten.
    pub segments_rewritten: usize,
    /// Records removed because a later record has the same key.
    pub records_superseded: u64,
    /// Tombstones removed because they outlived `delete_retention_ms`.
    pub tombstones_removed: u64,
    /// Bytes of the rewritten segments before the pass.
    pub bytes_before: u64,
    /// Bytes of the rewritten segments after the pass.
    pub bytes_after: u64,
}

const READ_CHUNK_BYTES: usize = 1 << 20;

struct ClosedRef<F> {
    base: Offset,
    file: Rc<F>,
    paths: SegmentPaths,
    facts: SegmentFacts,
}

/// Reads every batch of a closed segment, chunk by chunk, handing each chunk to `f`.
async fn for_each_chunk<F: StorageFile>(
    seg: &ClosedRef<F>,
    mut f: impl AsyncFnMut(&ReadBatches) -> Result<()>,
) -> Result<()> {
    let mut pos = 0;
    while pos < seg.facts.size {
        let batches =
            read_batches(&*seg.file, &seg.paths.log, seg.base, pos, seg.facts.size, READ_CHUNK_BYTES, 0).await?;
        if batches.is_empty() {
            break;
        }
        f(&batches).await?;
        pos = batches.end_pos();
        // Compaction runs beside appends and fetches on the same executor: give way.
        glommio::yield_if_needed().await;
    }
    Ok(())
}

/// The records of the chunk's data batches: control batches take no part in compaction.
fn data_records<'a>(batches: &'a ReadBatches) -> impl Iterator<Item = Result<RecordView<'a>>> + 'a {
    batches.batches().flat_map(|batch| {
        let (records, err) = match batch {
            Ok(b) if b.header().attributes.is_control() => (None, None),
            Ok(b) => (Some(b.records().map(Ok)), None),
            Err(e) => (None, Some(Err(e))),
        };
        records.into_iter().flatten().chain(err)
    })
}

impl<S: Storage> Log<S> {
    /// Compacts the closed segments. `now` decides which tombstones have outlived
    /// `delete_retention_ms` (compared with their segment's newest event time).
    pub async fn compact(&self, now: Timestamp) -> Result<CompactionReport> {
        let config = self.config();
        if !config.cleanup.compacts() {
            return Err(LogError::InvalidConfig(format!("{} is not a compacted log", self.dir().display())));
        }
        let (closed, clean_end) = {
            let st = self.inner.state.borrow();
            let closed: Vec<ClosedRef<S::File>> = st
                .closed
                .iter()
                .map(|s| ClosedRef { base: s.base, file: s.file.clone(), paths: s.paths.clone(), facts: s.facts() })
                .collect();
            (closed, st.active.base)
        };
        // Pass 1: the latest offset of every key.
        let mut latest: HashMap<Vec<u8>, Offset> = HashMap::new();
        for seg in &closed {
            for_each_chunk(seg, async |batches| {
                for r in data_records(batches) {
                    let r = r?;
                    if let Some(k) = r.key() {
                        match latest.get_mut(k) {
                            Some(o) => *o = r.offset(),
                            None => {
                                latest.insert(k.to_vec(), r.offset());
                            }
                        }
                    }
                }
                Ok(())
            })
            .await?;
        }
        // Pass 2: rewrite each segment that loses records.
        let mut report = CompactionReport::default();
        let mut tombstone_due = None;
        let tombstone_horizon = now.0.saturating_sub(config.delete_retention_ms as i64);
        for seg in &closed {
            let expired = seg.facts.max_time.0 < tombstone_horizon;
            let keep = |r: &RecordView<'_>| match r.key() {
                None => (true, false),
                Some(k) if latest.get(k) != Some(&r.offset()) => (false, false),
                Some(_) if r.value().is_none() && expired => (false, true),
                Some(_) => (true, false),
            };
            let mut superseded = 0u64;
            let mut tombstones = 0u64;
            for_each_chunk(seg, async |batches| {
                for r in data_records(batches) {
                    let r = r?;
                    match keep(&r) {
                        (true, _) if r.is_tombstone() => {
                            // A tombstone kept until `delete_retention_ms` after its segment's
                            // newest record: a pass at that time removes it.
                            let due = seg.facts.max_time.0.saturating_add(config.delete_retention_ms as i64);
                            tombstone_due = Some(tombstone_due.map_or(due, |t: i64| t.min(due)));
                        }
                        (true, _) => {}
                        (false, true) => tombstones += 1,
                        (false, false) => superseded += 1,
                    }
                }
                Ok(())
            })
            .await?;
            if superseded + tombstones == 0 {
                continue;
            }
            let cleaned = seg.paths.cleaned();
            let index = self.write_cleaned(seg, &cleaned, keep).await?;
            if self.swap_in(seg, &cleaned, index).await? {
                report.segments_rewritten += 1;
                report.records_superseded += superseded;
                report.tombstones_removed += tombstones;
                report.bytes_before += seg.facts.size;
                report.bytes_after +=
                    self.inner.state.borrow().closed.iter().find(|s| s.base == seg.base).map_or(0, |s| s.facts().size);
            }
        }
        let st = &mut *self.inner.state.borrow_mut();
        st.clean_through = st.clean_through.max(clean_end);
        st.tombstones_due = tombstone_due.map(Timestamp);
        Ok(report)
    }

    /// Writes the records `keep` retains into the `.cleaned` files, durably.
    async fn write_cleaned(
        &self,
        seg: &ClosedRef<S::File>,
        cleaned: &SegmentPaths,
        keep: impl Fn(&RecordView<'_>) -> (bool, bool),
    ) -> Result<SegmentIndex> {
        let storage = &self.inner.storage;
        let config = self.config();
        let io = |op| move |e| LogError::io(op, &cleaned.log, e);
        let file = Rc::new(storage.open(&cleaned.log, true).await.map_err(io("create"))?);
        file.truncate(0).await.map_err(io("truncate"))?;
        let mut appender = Appender::new(file.clone(), 0, &[], config.write_buffer_bytes, config.write_behind_buffers);
        let mut index = SegmentIndex::new(seg.base, config.index_interval_bytes);
        for_each_chunk(seg, async |batches| {
            for batch in batches.batches() {
                let batch = batch?;
                let h = *batch.header();
                let control = h.attributes.is_control();
                let kept: Vec<_> = batch.records().filter(|r| control || keep(r).0).collect();
                if kept.is_empty() {
                    continue;
                }
                let headers: Vec<Vec<Header<'_>>> = kept.iter().map(|r| r.headers().collect()).collect();
                let records: Vec<Record<'_>> = kept
                    .iter()
                    .zip(&headers)
                    .map(|(r, hs)| Record { key: r.key(), value: r.value(), event_time: r.event_time(), headers: hs })
                    .collect();
                let deltas: Vec<u32> = kept.iter().map(|r| (r.offset().0 - h.base_offset.0) as u32).collect();
                let meta = BatchMeta {
                    attributes: h.attributes,
                    producer_id: h.producer_id,
                    producer_epoch: h.producer_epoch,
                    base_sequence: h.base_sequence,
                };
                // Encoded straight into the cleaned segment's write buffers, as an append is.
                let pos = appender.end();
                let mut stage = appender.stage();
                let header =
                    encode_into(&records, Some(&deltas), Some(h.last_offset_delta), &meta, h.base_offset, &mut stage)
                        .map_err(|e| LogError::encode(e, MAX_BODY_BYTES))?;
                stage.commit();
                index.add_batch(pos, &header);
            }
            appender.handle().wait(appender.room_ticket()).await.map_err(io("write"))
        })
        .await?;
        let ticket = appender.start_flush();
        appender.handle().wait(ticket).await.map_err(io("write"))?;
        file.truncate(index.facts().size).await.map_err(io("truncate"))?;
        file.sync().await.map_err(|e| LogError::SyncFailed { path: cleaned.log.clone(), source: e })?;
        write_index(storage, cleaned, &index).await?;
        Ok(index)
    }

    /// Renames the cleaned files over the segment's and swaps it in, unless retention
    /// deleted the segment meanwhile. Returns whether it was swapped.
    async fn swap_in(&self, seg: &ClosedRef<S::File>, cleaned: &SegmentPaths, index: SegmentIndex) -> Result<bool> {
        let storage = &self.inner.storage;
        let _permit = self
            .inner
            .roll_lock
            .acquire_permit(1)
            .await
            .map_err(|_| LogError::Closed { path: self.dir().to_path_buf() })?;
        let present =
            self.inner.state.borrow().closed.iter().any(|s| s.base == seg.base && Rc::ptr_eq(&s.file, &seg.file));
        if !present {
            for p in [&cleaned.log, &cleaned.index, &cleaned.time_index] {
                storage.remove(p).await.map_err(|e| LogError::io("remove", p, e))?;
            }
            return Ok(false);
        }
        let rename = |from: &std::path::Path, to: &std::path::Path| {
            let (from, to) = (from.to_path_buf(), to.to_path_buf());
            async move { storage.rename(&from, &to).await.map_err(|e| LogError::io("rename", &from, e)) }
        };
        rename(&cleaned.log, &seg.paths.log).await?;
        rename(&cleaned.index, &seg.paths.index).await?;
        rename(&cleaned.time_index, &seg.paths.time_index).await?;
        let dir = self.dir().to_path_buf();
        storage.sync_dir(&dir).await.map_err(|e| LogError::io("fsync directory", &dir, e))?;
        let file =
            Rc::new(storage.open(&seg.paths.log, false).await.map_err(|e| LogError::io("open", &seg.paths.log, e))?);
        let mut st = self.inner.state.borrow_mut();
        if let Some(s) = st.closed.iter_mut().find(|s| s.base == seg.base) {
            s.file = file;
            s.index = index;
        }
        Ok(true)
    }
}
