//! Transactions in the log: markers, and reading only what was committed.
//!
//! A transaction is a run of *transactional* batches (attribute bit
//! [`Attributes::TRANSACTIONAL`]) of one producer id, in any number of partitions, ended
//! in each partition by a *control* batch (bits `TRANSACTIONAL | CONTROL`) of the same
//! producer id holding one marker record: commit or abort. As in Kafka, the marker's key is
//! a version (`0i16`) and a type (`0i16` abort, `1i16` commit), big-endian.
//!
//! A `read_committed` reader ([`ReadCommitted`]) delivers a partition's records in offset
//! order up to its *last stable offset*: the first batch of a transaction whose marker it
//! has not read yet. It skips the records of aborted transactions, and control batches
//! always. A `read_uncommitted` reader skips only control batches ([`is_data_batch`]).
//!
//! The stable offset is found by the reader, from the batches it fetches: it holds
//! batches back until the markers of the transactions in them arrive. That costs the
//! reader memory for at most the open transactions' span (for the engine's transactional
//! sink, one checkpoint interval of output) and needs no transaction index in the log.

use std::collections::{HashMap, VecDeque};

use crate::{
    error::{LogError, Result},
    record::{Attributes, BatchHeader, BatchMeta, BatchView},
    segment::OwnedBatches,
    types::{Offset, ProducerId},
};

/// What a control batch's marker says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Marker {
    /// The producer's open transaction in this partition is aborted: skip its records.
    Abort,
    /// The producer's open transaction in this partition is committed: deliver them.
    Commit,
}

impl Marker {
    /// The marker record's key (Kafka's control record key: version 0, then the type).
    #[must_use]
    pub fn key(self) -> [u8; 4] {
        let kind: i16 = match self {
            Marker::Abort => 0,
            Marker::Commit => 1,
        };
        let [a, b] = 0i16.to_be_bytes();
        let [c, d] = kind.to_be_bytes();
        [a, b, c, d]
    }

    /// Reads a marker record's key.
    pub fn from_key(key: &[u8]) -> Option<Marker> {
        match key {
            [0, 0, 0, 0] => Some(Marker::Abort),
            [0, 0, 0, 1] => Some(Marker::Commit),
            _ => None,
        }
    }

    /// The batch attributes of a transactional batch of `producer`, whose first record has
    /// sequence number `base_sequence` in its partition.
    #[must_use]
    pub fn data_meta(producer: ProducerId, base_sequence: i32) -> BatchMeta {
        BatchMeta {
            attributes: Attributes(Attributes::TRANSACTIONAL),
            producer_id: producer,
            producer_epoch: 0,
            base_sequence,
        }
    }

    /// The batch attributes of a marker of `producer`'s transaction.
    #[must_use]
    pub fn meta(producer: ProducerId) -> BatchMeta {
        BatchMeta {
            attributes: Attributes(Attributes::TRANSACTIONAL | Attributes::CONTROL),
            producer_id: producer,
            producer_epoch: 0,
            base_sequence: -1,
        }
    }
}

/// Whether a batch holds records a reader delivers (it is not a control batch).
#[must_use]
pub fn is_data_batch(header: &BatchHeader) -> bool {
    !header.attributes.is_control()
}

/// The marker a control batch holds.
///
/// # Errors
///
/// [`LogError::Corrupt`] for a control batch without a readable marker.
pub fn marker_of(batch: &BatchView<'_>) -> Result<Marker> {
    let bad = |reason: &str| LogError::Corrupt {
        path: "<control batch>".into(),
        pos: crate::types::FilePos(batch.header().base_offset.0),
        reason: format!("control batch at offset {}: {reason}", batch.header().base_offset),
    };
    let record = batch.records().next().ok_or_else(|| bad("no marker record"))?;
    let key = record.key().ok_or_else(|| bad("the marker has no key"))?;
    Marker::from_key(key).ok_or_else(|| bad("the marker key is neither commit nor abort"))
}

/// A transaction a marker ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    /// Its producer.
    pub producer: ProducerId,
    /// The offset of its first batch.
    pub first: Offset,
    /// The offset of the marker that ended it.
    pub marker_offset: Offset,
    /// Committed or aborted.
    pub marker: Marker,
}

/// Finds the transactions still open in a partition, from its batches in offset order.
#[derive(Debug, Default)]
pub struct OpenTransactions {
    open: HashMap<ProducerId, Offset>,
}

impl OpenTransactions {
    /// Takes in the next batch; returns the transaction it ends, if it is a marker of
    /// an open one.
    ///
    /// # Errors
    ///
    /// A control batch without a readable marker.
    pub fn observe(&mut self, batch: &BatchView<'_>) -> Result<Option<Ended>> {
        let h = batch.header();
        if h.attributes.is_control() {
            let marker = marker_of(batch)?;
            return Ok(self.open.remove(&h.producer_id).map(|first| Ended {
                producer: h.producer_id,
                first,
                marker_offset: h.base_offset,
                marker,
            }));
        }
        if h.attributes.is_transactional() {
            self.open.entry(h.producer_id).or_insert(h.base_offset);
        }
        Ok(None)
    }

    /// Every open transaction's producer and first offset.
    #[must_use]
    pub fn open(&self) -> &HashMap<ProducerId, Offset> {
        &self.open
    }

    /// The first offset of the oldest open transaction, if any is open.
    #[must_use]
    pub fn first_open(&self) -> Option<Offset> {
        self.open.values().copied().min()
    }
}

/// A `read_committed` reader's hold on one partition: fetched batches go in
/// ([`ReadCommitted::push`]), and committed records come out in offset order
/// ([`ReadCommitted::drain`]) once every transaction before them is decided.
#[derive(Debug)]
pub struct ReadCommitted {
    held: VecDeque<OwnedBatches>,
    /// Records below this offset were delivered or skipped.
    stable: Offset,
}

impl ReadCommitted {
    /// A reader that delivers records from `position` on.
    #[must_use]
    pub fn new(position: Offset) -> ReadCommitted {
        ReadCommitted { held: VecDeque::new(), stable: position }
    }

    /// Adds the next batches fetched (in offset order, following the last ones pushed).
    pub fn push(&mut self, batches: OwnedBatches) {
        if !batches.is_empty() {
            self.held.push_back(batches);
        }
    }

    /// The last stable offset: everything below it has been delivered or skipped, and
    /// the transaction holding the batch at it (if one is held) is still undecided.
    #[must_use]
    pub fn stable(&self) -> Offset {
        self.stable
    }

    /// Bytes held back waiting for transactions to be decided.
    #[must_use]
    pub fn held_bytes(&self) -> usize {
        self.held.iter().map(|b| b.bytes().len()).sum()
    }

    /// The batches now known committed (or not transactional), in offset order, as one
    /// [`OwnedBatches`] positioned at the previous stable offset (one copy of their
    /// bytes); aborted and control batches are left out. Drops what it no longer needs.
    ///
    /// # Errors
    ///
    /// A batch that cannot be read, or a control batch without a readable marker.
    pub fn drain(&mut self) -> Result<OwnedBatches> {
        // Decide every held batch: Some(true) deliver, Some(false) skip, None undecided.
        let mut decisions: Vec<Vec<Option<bool>>> = Vec::with_capacity(self.held.len());
        let mut pending: HashMap<ProducerId, Vec<(usize, usize)>> = HashMap::new();
        for (i, batches) in self.held.iter().enumerate() {
            let mut row = Vec::new();
            for (j, batch) in batches.batches().enumerate() {
                let batch = batch?;
                let h = batch.header();
                if h.attributes.is_control() {
                    let commit = marker_of(&batch)? == Marker::Commit;
                    for (a, b) in pending.remove(&h.producer_id).unwrap_or_default() {
                        let slot: &mut Option<bool> = if a == i { &mut row[b] } else { &mut decisions[a][b] };
                        *slot = Some(commit);
                    }
                    row.push(Some(false));
                } else if h.attributes.is_transactional() {
                    pending.entry(h.producer_id).or_default().push((i, j));
                    row.push(None);
                } else {
                    row.push(Some(true));
                }
            }
            decisions.push(row);
        }
        // Copy out the decided prefix.
        let from = self.stable;
        let mut out = rkyv::util::AlignedVec::<16>::new();
        let mut done_entries = 0;
        'outer: for (i, batches) in self.held.iter().enumerate() {
            let bytes = batches.bytes();
            let mut at = 0;
            let mut j = 0;
            while at < bytes.len() {
                let batch = BatchView::new(&bytes[at..]).map_err(|e| LogError::Corrupt {
                    path: "<fetched batches>".into(),
                    pos: crate::types::FilePos(at as u64),
                    reason: e.to_string(),
                })?;
                let h = *batch.header();
                let len = h.stored_len();
                if h.next_offset() > self.stable {
                    match decisions[i][j] {
                        None => break 'outer,
                        Some(true) => out.extend_from_slice(&bytes[at..at + len]),
                        Some(false) => {}
                    }
                    self.stable = h.next_offset();
                }
                at += len;
                j += 1;
            }
            done_entries = i + 1;
        }
        self.held.drain(..done_entries);
        Ok(OwnedBatches::from_bytes(out, from, self.stable))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_keys_round_trip_and_reject_others() {
        for m in [Marker::Abort, Marker::Commit] {
            assert_eq!(Marker::from_key(&m.key()), Some(m));
        }
        assert_eq!(Marker::from_key(&[0, 0, 0, 2]), None);
        assert_eq!(Marker::from_key(&[0, 1, 0, 1]), None);
        assert_eq!(Marker::from_key(&[]), None);
    }
}
