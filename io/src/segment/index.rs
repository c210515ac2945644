//! The sparse offset and time indexes of one segment.
//!
//! The offset index maps a relative offset to the file position of a batch at or before
//! it; the time index maps "every record before this position is older than T" to the
//! position. Both are sparse (an entry every `index_interval_bytes` of log), kept in
//! memory, and binary-searched, so a lookup is O(log n) and is followed by one read.
//!
//! The files are written once, when a segment is closed, with a header that records the
//! segment facts the index was built from (logical size, next offset, max time) and a
//! CRC. An index file whose CRC fails, whose entries are not monotonic, or whose
//! recorded segment size differs from the segment's is rebuilt from the segment.

use crate::error::{IndexError, IndexFile};
use crate::record::BatchHeader;
use crate::types::{Offset, Timestamp};

/// One offset index entry.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OffsetEntry {
    /// Batch base offset minus the segment base offset.
    pub rel_offset: u32,
    /// Position of the batch in the segment.
    pub pos: u32,
}

/// One time index entry: every record stored before `pos` has an event time below
/// `max_time_before`... or equal to it: `max_time_before` is their maximum.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TimeEntry {
    /// The largest event time of all records before `pos`.
    pub max_time_before: Timestamp,
    /// Position of a batch in the segment.
    pub pos: u32,
}

/// What an index says about its segment, and what a segment scan finds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SegmentFacts {
    /// Bytes of valid batches.
    pub size: u64,
    /// The offset after the segment's last batch (its base offset when empty).
    pub next_offset: Offset,
    /// The largest event time in the segment (`Timestamp::MIN` when empty).
    pub max_time: Timestamp,
    /// The base offset of the segment's first transactional or control batch (`None` when
    /// it holds none): a read_committed reader's scan for transactions skips a segment
    /// without one, and the part of a segment before it.
    pub first_txn: Option<Offset>,
}

/// Both sparse indexes of one segment, in memory.
#[derive(Clone, Debug)]
pub struct SegmentIndex {
    base: Offset,
    interval_bytes: u32,
    offsets: Vec<OffsetEntry>,
    times: Vec<TimeEntry>,
    last_offset_pos: u64,
    last_time_pos: u64,
    facts: SegmentFacts,
}

impl SegmentIndex {
    /// An empty index for a segment starting at `base`.
    #[must_use]
    pub fn new(base: Offset, interval_bytes: u32) -> SegmentIndex {
        SegmentIndex {
            base,
            interval_bytes: interval_bytes.max(1),
            offsets: Vec::new(),
            times: Vec::new(),
            last_offset_pos: 0,
            last_time_pos: 0,
            facts: SegmentFacts { size: 0, next_offset: base, max_time: Timestamp::MIN, first_txn: None },
        }
    }

    /// The segment facts as of the last batch added.
    #[must_use]
    pub fn facts(&self) -> SegmentFacts {
        self.facts
    }

    /// Accounts for a batch stored at `pos` (which must be the segment's current end).
    pub fn add_batch(&mut self, pos: u64, header: &BatchHeader) {
        debug_assert_eq!(pos, self.facts.size, "batches are indexed in order");
        debug_assert!(header.base_offset >= self.facts.next_offset);
        let pos32 = u32::try_from(pos).expect("segments are smaller than 4 GiB");
        let rel = u32::try_from(header.base_offset.0 - self.base.0).expect("relative offset fits");
        if pos > 0 && pos - self.last_offset_pos >= u64::from(self.interval_bytes) {
            self.offsets.push(OffsetEntry { rel_offset: rel, pos: pos32 });
            self.last_offset_pos = pos;
        }
        let grew = self.times.last().is_none_or(|t| self.facts.max_time > t.max_time_before);
        if pos > 0 && grew && pos - self.last_time_pos >= u64::from(self.interval_bytes) {
            self.times.push(TimeEntry { max_time_before: self.facts.max_time, pos: pos32 });
            self.last_time_pos = pos;
        }
        self.facts.size = pos + header.stored_len() as u64;
        self.facts.next_offset = header.next_offset();
        self.facts.max_time = self.facts.max_time.max(header.max_event_time);
        if self.facts.first_txn.is_none() && (header.attributes.is_transactional() || header.attributes.is_control()) {
            self.facts.first_txn = Some(header.base_offset);
        }
    }

    /// The position of the last indexed batch whose base offset is at most `offset`
    /// (0 if none): reading from there finds `offset` within one index interval.
    #[must_use]
    pub fn lookup_offset(&self, offset: Offset) -> u64 {
        let rel = offset.0.saturating_sub(self.base.0);
        let i = self.offsets.partition_point(|e| u64::from(e.rel_offset) <= rel);
        if i == 0 { 0 } else { u64::from(self.offsets[i - 1].pos) }
    }

    /// A position before which every record is older than `time` (0 if none is known):
    /// the first record at or after `time` is at or after it.
    #[must_use]
    pub fn lookup_time(&self, time: Timestamp) -> u64 {
        let i = self.times.partition_point(|e| e.max_time_before < time);
        if i == 0 { 0 } else { u64::from(self.times[i - 1].pos) }
    }

    /// Encodes the offset index file.
    #[must_use]
    pub fn encode_offsets(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(self.offsets.len() * 8);
        for e in &self.offsets {
            body.extend_from_slice(&e.rel_offset.to_le_bytes());
            body.extend_from_slice(&e.pos.to_le_bytes());
        }
        self.encode_file(OFFSET_MAGIC, self.offsets.len(), &body)
    }

    /// Encodes the time index file.
    #[must_use]
    pub fn encode_times(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(self.times.len() * 12);
        for e in &self.times {
            body.extend_from_slice(&e.max_time_before.0.to_le_bytes());
            body.extend_from_slice(&e.pos.to_le_bytes());
        }
        self.encode_file(TIME_MAGIC, self.times.len(), &body)
    }

    fn encode_file(&self, magic: u32, count: usize, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(FILE_HEADER_BYTES + body.len());
        out.extend_from_slice(&magic.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes()); // CRC, filled below
        out.extend_from_slice(&(count as u32).to_le_bytes());
        out.extend_from_slice(&self.interval_bytes.to_le_bytes());
        out.extend_from_slice(&self.base.0.to_le_bytes());
        out.extend_from_slice(&self.facts.size.to_le_bytes());
        out.extend_from_slice(&self.facts.next_offset.0.to_le_bytes());
        out.extend_from_slice(&self.facts.max_time.0.to_le_bytes());
        out.extend_from_slice(&self.facts.first_txn.map_or(NO_TXN, |o| o.0).to_le_bytes());
        out.extend_from_slice(body);
        let crc = crc32c::crc32c(&out[8..]);
        out[4..8].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Rebuilds an index from both files' bytes, checking them against the segment's
    /// base offset and size.
    ///
    /// # Errors
    ///
    /// Why the files are unusable: an [`IndexError`] naming the failed check.
    pub fn decode(
        base: Offset,
        segment_size: u64,
        offsets_file: &[u8],
        times_file: &[u8],
    ) -> Result<SegmentIndex, IndexError> {
        let (o_head, o_body) = parse_file(IndexFile::Offsets, OFFSET_MAGIC, offsets_file, 8)?;
        let (t_head, t_body) = parse_file(IndexFile::Times, TIME_MAGIC, times_file, 12)?;
        if o_head != t_head {
            return Err(IndexError::Mismatched);
        }
        let head = o_head;
        if head.base != base {
            return Err(IndexError::WrongBase { index: head.base, segment: base });
        }
        if head.facts.size != segment_size {
            return Err(IndexError::WrongSize { index: head.facts.size, segment: segment_size });
        }
        let mut index = SegmentIndex::new(base, head.interval_bytes);
        index.facts = head.facts;
        for e in o_body.chunks_exact(8) {
            let rel_offset = u32::from_le_bytes(e[0..4].try_into().expect("4 bytes"));
            let pos = u32::from_le_bytes(e[4..8].try_into().expect("4 bytes"));
            index.offsets.push(OffsetEntry { rel_offset, pos });
        }
        for e in t_body.chunks_exact(12) {
            let t = i64::from_le_bytes(e[0..8].try_into().expect("8 bytes"));
            let pos = u32::from_le_bytes(e[8..12].try_into().expect("4 bytes"));
            index.times.push(TimeEntry { max_time_before: Timestamp(t), pos });
        }
        let size = index.facts.size;
        let end_rel = index.facts.next_offset.0.saturating_sub(base.0);
        let offsets_ok = index.offsets.windows(2).all(|w| w[0].rel_offset < w[1].rel_offset && w[0].pos < w[1].pos)
            && index.offsets.iter().all(|e| u64::from(e.pos) < size && u64::from(e.rel_offset) < end_rel);
        let times_ok =
            index.times.windows(2).all(|w| w[0].max_time_before < w[1].max_time_before && w[0].pos < w[1].pos)
                && index.times.iter().all(|e| u64::from(e.pos) < size);
        if !offsets_ok {
            return Err(IndexError::BadEntries { file: IndexFile::Offsets });
        }
        if !times_ok {
            return Err(IndexError::BadEntries { file: IndexFile::Times });
        }
        Ok(index)
    }
}

// Version 2 of both files ("SLOX"/"SLTX" before it) records the segment's first
// transactional batch; a version 1 file fails its magic check and is rebuilt from the
// segment, once, on the first open after the upgrade.
const OFFSET_MAGIC: u32 = u32::from_le_bytes(*b"SLO2");
const TIME_MAGIC: u32 = u32::from_le_bytes(*b"SLT2");
const FILE_HEADER_BYTES: usize = 56;
/// `first_txn` in a file: the segment holds no transactional batch.
const NO_TXN: u64 = u64::MAX;

#[derive(PartialEq, Eq)]
struct FileHead {
    interval_bytes: u32,
    base: Offset,
    facts: SegmentFacts,
}

fn parse_file(file: IndexFile, magic: u32, bytes: &[u8], entry_bytes: usize) -> Result<(FileHead, &[u8]), IndexError> {
    if bytes.len() < FILE_HEADER_BYTES {
        return Err(IndexError::TooShort { file, len: bytes.len() });
    }
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    if u32_at(0) != magic {
        return Err(IndexError::BadMagic { file, found: u32_at(0) });
    }
    let count = u32_at(8) as usize;
    let end = FILE_HEADER_BYTES + count * entry_bytes;
    if bytes.len() < end {
        return Err(IndexError::Truncated { file, count, len: bytes.len() });
    }
    let crc = crc32c::crc32c(&bytes[8..end]);
    if crc != u32_at(4) {
        return Err(IndexError::CrcMismatch { file, stored: u32_at(4), computed: crc });
    }
    let head = FileHead {
        interval_bytes: u32_at(12),
        base: Offset(u64_at(16)),
        facts: SegmentFacts {
            size: u64_at(24),
            next_offset: Offset(u64_at(32)),
            max_time: Timestamp(u64_at(40) as i64),
            first_txn: Some(Offset(u64_at(48))).filter(|o| o.0 != NO_TXN),
        },
    };
    Ok((head, &bytes[FILE_HEADER_BYTES..end]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Attributes, HEADER_BYTES};
    use crate::types::ProducerId;

    fn header(base: u64, n: u32, body_len: u32, max_time: i64) -> BatchHeader {
        BatchHeader {
            attributes: Attributes::default(),
            body_len,
            crc: 0,
            base_offset: Offset(base),
            record_count: n,
            last_offset_delta: n - 1,
            first_event_time: Timestamp(max_time - 5),
            max_event_time: Timestamp(max_time),
            producer_id: ProducerId::NONE,
            producer_epoch: -1,
            base_sequence: -1,
        }
    }

    fn built() -> SegmentIndex {
        let mut idx = SegmentIndex::new(Offset(1000), 4096);
        let mut pos = 0;
        for i in 0..100u64 {
            let h = header(1000 + i * 10, 10, 1000 - HEADER_BYTES as u32, 100 + i as i64 * 7);
            idx.add_batch(pos, &h);
            pos += h.stored_len() as u64;
        }
        idx
    }

    #[test]
    fn lookups_land_at_or_before_the_target() {
        let idx = built();
        assert_eq!(idx.facts().next_offset, Offset(2000));
        assert!(!idx.offsets.is_empty());
        for off in 1000..2000 {
            let pos = idx.lookup_offset(Offset(off));
            // batch i lives at i * 1008 (1000 bytes padded to 16) and holds 10 offsets
            let batch_pos = (off - 1000) / 10 * 1008;
            assert!(pos <= batch_pos && batch_pos - pos < 4096 + 1008, "offset {off}: {pos}");
        }
        for t in [0, 100, 350, 792, 10_000] {
            let pos = idx.lookup_time(Timestamp(t));
            let first_batch = (0..100u64).find(|i| 100 + *i as i64 * 7 >= t).unwrap_or(100);
            assert!(pos <= first_batch * 1008, "time {t}: {pos}");
        }
    }

    #[test]
    fn files_round_trip_and_damage_is_detected() {
        let idx = built();
        let (o, t) = (idx.encode_offsets(), idx.encode_times());
        let back = SegmentIndex::decode(Offset(1000), idx.facts().size, &o, &t).unwrap();
        assert_eq!(back.offsets, idx.offsets);
        assert_eq!(back.times, idx.times);
        assert_eq!(back.facts(), idx.facts());
        assert!(SegmentIndex::decode(Offset(1000), idx.facts().size + 16, &o, &t).is_err());
        assert!(SegmentIndex::decode(Offset(0), idx.facts().size, &o, &t).is_err());
        for i in 0..o.len() {
            let mut bad = o.clone();
            bad[i] ^= 0x40;
            assert!(SegmentIndex::decode(Offset(1000), idx.facts().size, &bad, &t).is_err(), "byte {i}");
        }
        assert!(SegmentIndex::decode(Offset(1000), idx.facts().size, &o[..20], &t).is_err());
    }

    #[test]
    fn the_first_transactional_batch_is_recorded_and_survives_the_files() {
        let mut idx = built();
        assert_eq!(idx.facts().first_txn, None);
        let back = |idx: &SegmentIndex| {
            SegmentIndex::decode(Offset(1000), idx.facts().size, &idx.encode_offsets(), &idx.encode_times()).unwrap()
        };
        assert_eq!(back(&idx).facts().first_txn, None);
        let mut pos = idx.facts().size;
        for (i, txn) in [(0u64, false), (1, true), (2, true)] {
            let mut h = header(2000 + i * 10, 10, 1000 - HEADER_BYTES as u32, 900);
            if txn {
                h.attributes = Attributes(Attributes::TRANSACTIONAL);
            }
            idx.add_batch(pos, &h);
            pos += h.stored_len() as u64;
        }
        assert_eq!(idx.facts().first_txn, Some(Offset(2010)));
        assert_eq!(back(&idx).facts().first_txn, Some(Offset(2010)));
        // A file of the first version (no first_txn) fails its magic and is rebuilt.
        let mut old = idx.encode_offsets();
        old[0..4].copy_from_slice(b"SLOX");
        assert!(matches!(
            SegmentIndex::decode(Offset(1000), idx.facts().size, &old, &idx.encode_times()),
            Err(IndexError::BadMagic { file: IndexFile::Offsets, .. })
        ));
    }

    #[test]
    fn decode_names_the_failed_check() {
        let idx = built();
        let (o, t) = (idx.encode_offsets(), idx.encode_times());
        let size = idx.facts().size;
        let decode = |base, size, o: &[u8], t: &[u8]| SegmentIndex::decode(Offset(base), size, o, t).unwrap_err();
        assert_eq!(decode(1000, size + 16, &o, &t), IndexError::WrongSize { index: size, segment: size + 16 });
        assert_eq!(decode(0, size, &o, &t), IndexError::WrongBase { index: Offset(1000), segment: Offset(0) });
        assert_eq!(decode(1000, size, &o[..20], &t), IndexError::TooShort { file: IndexFile::Offsets, len: 20 });
        assert!(matches!(decode(1000, size, &o, &o), IndexError::BadMagic { file: IndexFile::Times, .. }));
        let mut bad = t.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(matches!(decode(1000, size, &o, &bad), IndexError::CrcMismatch { file: IndexFile::Times, .. }));
        let other = SegmentIndex::new(Offset(1000), 4096);
        assert_eq!(decode(1000, size, &o, &other.encode_times()), IndexError::Mismatched);
        assert!(decode(1000, size, &o[..o.len() - 1], &t).to_string().contains("claims"));
    }
}
