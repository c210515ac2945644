//! What a read_committed Fetch needs to know of a partition: its last stable offset (the
//! first offset of the oldest transaction still open, or the end of the log), and the
//! aborted transactions (producer id, first offset, marker offset) Kafka clients use to
//! skip aborted records. A read_committed ListOffsets reads the last stable offset from
//! here too (brought up to the log's end first).
//!
//! Built by reading each partition's batches once, from its first offset on the first
//! read_committed fetch of it, then only the batches appended since, on each later one.
//! The batches the fetch read for its client are reused when they are the next ones the
//! index needs (a reader at the end of the log, the usual case, costs no extra read);
//! otherwise the listener reads them again. Only the batches from each segment's first
//! transactional or control batch on are read (the segment index records where that is,
//! `Log::first_transactional_from`): a partition no transactional producer wrote to is
//! never read for this, and a first fetch of a large one reads from its first
//! transaction on, not from its start. The index holds the open transactions and the aborted
//! transactions whose marker is still in the log (older ones are dropped as retention
//! removes them). It is shared by the listener's executors; the lock is never held
//! across an await.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use sluice_io::txn::{Marker, OpenTransactions};
use sluice_io::{Offset, OwnedBatches, PartitionId, ProducerId};

use crate::engine::EngineHandle;
use crate::error::EngineError;

/// How many bytes one step of the scan reads.
const SCAN_STEP_BYTES: usize = 1 << 20;

/// A transaction that was aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Aborted {
    /// Its producer.
    pub(crate) producer: ProducerId,
    /// Its first batch's offset.
    pub(crate) first: Offset,
    /// Its abort marker's offset.
    pub(crate) last: Offset,
}

#[derive(Debug, Default)]
struct PartitionTxns {
    /// Batches below this offset have been read.
    scanned_to: Offset,
    open: OpenTransactions,
    aborted: Vec<Aborted>,
}

impl PartitionTxns {
    fn stable(&self) -> Offset {
        self.open.first_open().unwrap_or(self.scanned_to).min(self.scanned_to)
    }
}

/// The index of every partition a read_committed client has fetched.
#[derive(Debug, Default)]
pub(crate) struct StableIndex {
    parts: Mutex<HashMap<(String, PartitionId), PartitionTxns>>,
}

/// A partition's state for one read_committed fetch.
#[derive(Debug)]
pub(crate) struct Stable {
    /// The last stable offset.
    pub(crate) offset: Offset,
    /// The aborted transactions that overlap `from..upper` (see [`StableIndex::view`]).
    pub(crate) aborted: Vec<Aborted>,
}

impl StableIndex {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, PartitionId), PartitionTxns>> {
        self.parts.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads the partition's batches the index has not seen, up to `bounds.1` (its end,
    /// as the caller last read it; `bounds.0` is its first offset). `fetched` are batches
    /// the caller read already: those the index needs next are taken from them rather
    /// than read again (a reader at the end of the log costs no extra read).
    pub(crate) async fn update(
        &self,
        engine: &EngineHandle,
        topic: &str,
        partition: PartitionId,
        bounds: (Offset, Offset),
        fetched: &OwnedBatches,
    ) -> Result<(), EngineError> {
        let (start, end) = bounds;
        let key = (topic.to_string(), partition);
        let mut at = {
            let mut parts = self.lock();
            let e = parts.entry(key.clone()).or_default();
            if e.scanned_to > end {
                // The topic was deleted and made again: start over.
                *e = PartitionTxns::default();
            }
            if e.scanned_to < start {
                e.scanned_to = start;
            }
            e.aborted.retain(|a| a.last >= start);
            e.scanned_to
        };
        let mut first = true;
        while at < end {
            let covers = first && fetched.batches().any(|b| b.is_ok_and(|b| b.header().base_offset == at));
            first = false;
            let read;
            let batches = if covers {
                fetched
            } else {
                // Batches before the next transactional one need no reading (a partition
                // no transactional producer wrote to is never read here at all).
                let skip_to = engine.first_transactional(topic, partition, at).await?.unwrap_or(end).min(end);
                if skip_to > at {
                    let mut parts = self.lock();
                    let e = parts.entry(key.clone()).or_default();
                    if e.scanned_to == at {
                        e.scanned_to = skip_to;
                    }
                    at = e.scanned_to;
                    continue;
                }
                read = match engine.fetch(topic, partition, at, SCAN_STEP_BYTES, Duration::ZERO).await {
                    // Retention or DeleteRecords moved the log's start past `at` since
                    // `bounds` were taken: what lay below is gone, go on from the start.
                    Err(e @ EngineError::OffsetOutOfRange { .. }) => {
                        let (now_start, _) = engine.offsets(topic, partition).await?;
                        if now_start <= at {
                            return Err(e);
                        }
                        let mut parts = self.lock();
                        let e = parts.entry(key.clone()).or_default();
                        e.scanned_to = e.scanned_to.max(now_start);
                        e.aborted.retain(|a| a.last >= now_start);
                        at = e.scanned_to;
                        continue;
                    }
                    other => other?,
                };
                &read
            };
            if batches.is_empty() {
                break;
            }
            let mut parts = self.lock();
            let e = parts.entry(key.clone()).or_default();
            if e.scanned_to != at {
                // Another fetch read these meanwhile.
                at = e.scanned_to;
                continue;
            }
            for batch in batches.batches() {
                let batch = batch.map_err(|err| EngineError::log(topic, partition, err))?;
                let h = *batch.header();
                // A batch that ends at or below `at` was seen; one that starts below it
                // and goes past (DeleteRecords or retention moved the start into its
                // middle) is read, or the index would stop there and hold every
                // read_committed reader at the start.
                if h.next_offset() <= at {
                    continue;
                }
                let ended = e.open.observe(&batch).map_err(|err| EngineError::log(topic, partition, err))?;
                if let Some(t) = ended.filter(|t| t.marker == Marker::Abort) {
                    e.aborted.push(Aborted { producer: t.producer, first: t.first, last: t.marker_offset });
                }
                e.scanned_to = h.next_offset();
            }
            if e.scanned_to == at {
                // Nothing at or past `at` in what was read.
                break;
            }
            at = e.scanned_to;
        }
        Ok(())
    }

    /// The last stable offset, and the aborted transactions that overlap offsets
    /// `from..upper` (Kafka's rule: the marker at or after `from`, the first batch
    /// before `upper`).
    pub(crate) fn view(&self, topic: &str, partition: PartitionId, from: Offset, upper: Offset) -> Stable {
        let parts = self.lock();
        match parts.get(&(topic.to_string(), partition)) {
            None => Stable { offset: from, aborted: Vec::new() },
            Some(e) => Stable {
                offset: e.stable(),
                aborted: e.aborted.iter().filter(|a| a.last >= from && a.first < upper).copied().collect(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_lite::future::block_on;
    use sluice_io::Timestamp;

    use super::*;
    use crate::{Engine, EngineConfig, OwnedRecord};

    #[test]
    fn a_partition_no_transaction_touched_is_not_read_and_one_that_was_is_read_from_its_first() {
        let dir = std::env::temp_dir().join(format!("sluice-stable-skip-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let engine = block_on(Engine::open(EngineConfig { shards: Some(1), ..EngineConfig::new(&dir) })).unwrap();
        let h = engine.handle();
        block_on(h.create_topic("t", 1, None)).unwrap();
        let p = PartitionId(0);
        let plain = |i: i64| {
            let r = OwnedRecord::new(None, format!("v{i}"), Timestamp(i));
            block_on(h.append("t", p, vec![r], sluice_io::BatchMeta::default())).unwrap();
        };
        (0..5).for_each(plain);
        assert_eq!(block_on(h.first_transactional("t", p, Offset(0))).unwrap(), None);
        let index = StableIndex::default();
        let bounds = block_on(h.offsets("t", p)).unwrap();
        block_on(index.update(&h, "t", p, bounds, &OwnedBatches::empty(bounds.0))).unwrap();
        assert_eq!(index.view("t", p, Offset(0), bounds.1).offset, Offset(5), "the end, unread");
        // A transaction opens at 5 and stays open: the last stable offset stops there, and
        // a fresh index finds it by reading from 5.
        let r = OwnedRecord::new(None, "t0", Timestamp(5));
        block_on(h.append("t", p, vec![r], Marker::data_meta(ProducerId(3), 0))).unwrap();
        (6..9).for_each(plain);
        assert_eq!(block_on(h.first_transactional("t", p, Offset(0))).unwrap(), Some(Offset(5)));
        let bounds = block_on(h.offsets("t", p)).unwrap();
        for index in [index, StableIndex::default()] {
            block_on(index.update(&h, "t", p, bounds, &OwnedBatches::empty(bounds.0))).unwrap();
            assert_eq!(index.view("t", p, Offset(0), bounds.1).offset, Offset(5), "held at the open transaction");
        }
        drop(engine);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_start_moved_after_the_bounds_were_taken_is_skipped_not_an_error() {
        let dir = std::env::temp_dir().join(format!("sluice-stable-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let engine = block_on(Engine::open(EngineConfig { shards: Some(1), ..EngineConfig::new(&dir) })).unwrap();
        let h = engine.handle();
        block_on(h.create_topic("t", 1, None)).unwrap();
        let p = PartitionId(0);
        // One plain batch, then a transaction of nine batches and its commit marker: the
        // scan skips the plain one and meets the moved start at the transaction's.
        for i in 0..10 {
            let r = OwnedRecord::new(None, format!("v{i}"), Timestamp(i));
            let meta = match i {
                0 => sluice_io::BatchMeta::default(),
                _ => Marker::data_meta(ProducerId(7), i as i32 - 1),
            };
            block_on(h.append("t", p, vec![r], meta)).unwrap();
        }
        block_on(h.write_marker("t", p, ProducerId(7), Marker::Commit)).unwrap();
        let bounds = block_on(h.offsets("t", p)).unwrap();
        assert_eq!(block_on(h.first_transactional("t", p, Offset(0))).unwrap(), Some(Offset(1)));
        // Retention or DeleteRecords moves the start after a reader took its bounds.
        block_on(h.delete_records("t", p, Offset(6))).unwrap();
        let index = StableIndex::default();
        block_on(index.update(&h, "t", p, bounds, &OwnedBatches::empty(bounds.0))).expect("no OFFSET_OUT_OF_RANGE");
        assert_eq!(index.view("t", p, bounds.1, bounds.1).offset, bounds.1, "no transaction holds it back");
        drop(engine);
        let _ = std::fs::remove_dir_all(&dir);
    }
    #[test]
    fn a_start_moved_into_the_middle_of_a_batch_does_not_stop_the_scan_there() {
        let dir = std::env::temp_dir().join(format!("sluice-stable-mid-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let engine = block_on(Engine::open(EngineConfig { shards: Some(1), ..EngineConfig::new(&dir) })).unwrap();
        let h = engine.handle();
        block_on(h.create_topic("t", 1, None)).unwrap();
        let p = PartitionId(0);
        // One transactional batch of ten records and its commit marker, then DeleteRecords
        // before its sixth.
        let records = (0..10).map(|i| OwnedRecord::new(None, format!("v{i}"), Timestamp(i))).collect();
        block_on(h.append("t", p, records, Marker::data_meta(ProducerId(7), 0))).unwrap();
        block_on(h.write_marker("t", p, ProducerId(7), Marker::Commit)).unwrap();
        block_on(h.delete_records("t", p, Offset(5))).unwrap();
        let bounds = block_on(h.offsets("t", p)).unwrap();
        assert_eq!(bounds, (Offset(5), Offset(11)));
        let index = StableIndex::default();
        block_on(index.update(&h, "t", p, bounds, &OwnedBatches::empty(bounds.0))).unwrap();
        assert_eq!(index.view("t", p, bounds.0, bounds.1).offset, Offset(11), "read past the batch the start is in");
        drop(engine);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
