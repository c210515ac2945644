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
///
/// Each batch is read (and its CRC checked) once, when the drain after its push classifies
/// it; a marker decides the batches of its transaction where they wait. So a reader that
/// holds a long open transaction back costs one pass over what it fetched, not one per
/// fetch.
#[derive(Debug)]
pub struct ReadCommitted {
    held: VecDeque<Held>,
    /// Sequence number of `held[0]` (entries are numbered as pushed).
    front: u64,
    /// Held entries at the back not yet classified.
    unclassified: usize,
    /// Transactional batches whose marker has not been read: (entry, batch) by producer.
    pending: HashMap<ProducerId, Vec<(u64, usize)>>,
    /// Records below this offset were delivered or skipped.
    stable: Offset,
}

/// One fetch's batches, and what is known of each.
#[derive(Debug)]
struct Held {
    batches: OwnedBatches,
    spans: Vec<Span>,
    /// Spans already delivered or skipped.
    passed: usize,
}

/// Where a batch lies in its fetch, and whether to deliver it (`None`: undecided).
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    len: usize,
    next: Offset,
    deliver: Option<bool>,
}

impl ReadCommitted {
    /// A reader that delivers records from `position` on.
    #[must_use]
    pub fn new(position: Offset) -> ReadCommitted {
        ReadCommitted { held: VecDeque::new(), front: 0, unclassified: 0, pending: HashMap::new(), stable: position }
    }

    /// Adds the next batches fetched (in offset order, following the last ones pushed).
    pub fn push(&mut self, batches: OwnedBatches) {
        if !batches.is_empty() {
            self.held.push_back(Held { batches, spans: Vec::new(), passed: 0 });
            self.unclassified += 1;
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
        self.held.iter().map(|b| b.batches.bytes().len()).sum()
    }

    /// Classifies the entries pushed since the last drain: plain batches are delivered,
    /// control batches skipped (deciding their transaction's batches), transactional ones
    /// wait for their marker.
    fn classify(&mut self) -> Result<()> {
        let first = self.held.len() - self.unclassified;
        for i in first..self.held.len() {
            let seq = self.front + i as u64;
            let mut spans = Vec::new();
            // Decisions for batches of earlier entries, applied once this one is read.
            let mut earlier = Vec::new();
            let mut at = 0;
            for batch in self.held[i].batches.batches() {
                let batch = batch?;
                let h = *batch.header();
                let mut span = Span { start: at, len: h.stored_len(), next: h.next_offset(), deliver: Some(true) };
                at += span.len;
                if h.attributes.is_control() {
                    let commit = marker_of(&batch)? == Marker::Commit;
                    for (entry, b) in self.pending.remove(&h.producer_id).unwrap_or_default() {
                        let decided = Some(commit);
                        if entry == seq {
                            spans[b] = Span { deliver: decided, ..spans[b] };
                        } else {
                            earlier.push((entry, b, decided));
                        }
                    }
                    span.deliver = Some(false);
                } else if h.attributes.is_transactional() {
                    self.pending.entry(h.producer_id).or_default().push((seq, spans.len()));
                    span.deliver = None;
                }
                spans.push(span);
            }
            self.held[i].spans = spans;
            for (entry, b, decided) in earlier {
                // An entry already dropped held only batches below the stable offset.
                if let Some(held) = entry.checked_sub(self.front).and_then(|i| self.held.get_mut(i as usize)) {
                    held.spans[b].deliver = decided;
                }
            }
        }
        self.unclassified = 0;
        Ok(())
    }

    /// The batches now known committed (or not transactional), in offset order, as one
    /// [`OwnedBatches`] positioned at the previous stable offset (one copy of their
    /// bytes); aborted and control batches are left out. Drops what it no longer needs.
    ///
    /// # Errors
    ///
    /// A batch that cannot be read, or a control batch without a readable marker.
    pub fn drain(&mut self) -> Result<OwnedBatches> {
        self.classify()?;
        let from = self.stable;
        let mut out = rkyv::util::AlignedVec::<16>::new();
        'entries: while let Some(entry) = self.held.front_mut() {
            while let Some(span) = entry.spans.get(entry.passed).copied() {
                if span.next > self.stable {
                    match span.deliver {
                        None => break 'entries,
                        Some(true) => {
                            out.extend_from_slice(&entry.batches.bytes()[span.start..span.start + span.len]);
                        }
                        Some(false) => {}
                    }
                    self.stable = span.next;
                }
                entry.passed += 1;
            }
            self.held.pop_front();
            self.front += 1;
        }
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

    /// Batches of one value each, at consecutive offsets from `base`, as one fetch.
    fn fetch(base: u64, batches: &[(&str, BatchMeta, bool)]) -> OwnedBatches {
        let mut buf = rkyv::util::AlignedVec::<16>::new();
        let mut enc = crate::record::BatchEncoder::new();
        let mut at = base;
        for (value, meta, marker) in batches {
            let key = Marker::Commit.key();
            let record = if *marker {
                crate::record::Record::keyed(&key, b"", crate::types::Timestamp(1))
            } else {
                crate::record::Record::unkeyed(value.as_bytes(), crate::types::Timestamp(1))
            };
            let (bytes, _) = enc.encode(&[record], meta, Offset(at)).unwrap();
            buf.extend_from_slice(bytes);
            at += 1;
        }
        OwnedBatches::from_bytes(buf, Offset(base), Offset(at))
    }

    fn values(batches: &OwnedBatches) -> Vec<String> {
        batches.records().map(|r| String::from_utf8(r.unwrap().value_bytes().to_vec()).unwrap()).collect()
    }

    #[test]
    fn read_committed_decides_held_batches_as_markers_arrive_across_fetches() {
        let plain = BatchMeta::default();
        let a = Marker::data_meta(ProducerId(1), 0);
        let mut rc = ReadCommitted::new(Offset(0));
        rc.push(fetch(0, &[("p0", plain, false), ("a1", a, false), ("p1", plain, false)]));
        assert_eq!(values(&rc.drain().unwrap()), ["p0"]);
        assert_eq!(rc.stable(), Offset(1), "held back at the open transaction");
        // Nothing new: nothing more, and nothing delivered twice.
        assert!(rc.drain().unwrap().is_empty());
        rc.push(fetch(3, &[("a2", Marker::data_meta(ProducerId(1), 1), false)]));
        assert!(rc.drain().unwrap().is_empty());
        // The commit marker, in a later fetch, releases the transaction and what follows it.
        rc.push(fetch(4, &[("", Marker::meta(ProducerId(1)), true), ("p2", plain, false)]));
        assert_eq!(values(&rc.drain().unwrap()), ["a1", "p1", "a2", "p2"]);
        assert_eq!(rc.stable(), Offset(6));
        assert_eq!(rc.held_bytes(), 0);
    }
}
