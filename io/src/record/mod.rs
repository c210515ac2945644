//! The record batch: the unit of append, storage, replication of offsets and CRC checks.
//!
//! A stored batch is a 64-byte [`BatchHeader`] followed by an rkyv-archived body and
//! zero padding to a multiple of [`BATCH_ALIGN`]. Writers encode with [`BatchEncoder`];
//! readers check a batch with [`check_batch`] and then read its records in place through
//! [`BatchView`], without deserializing.

mod body;
mod header;

use body::delta_flags;
pub use body::{ArchivedBody, ArchivedRecord, Header, Record, RecordView, WireBody, WireHeader, WireRecord};
pub use header::{
    Attributes, BATCH_ALIGN, BatchHeader, HEADER_BYTES, HeaderError, MAGIC, VERSION, batch_crc, stored_len,
};

use rkyv::rancor;
use rkyv::util::AlignedVec;

use crate::types::{EventTime, Offset, ProducerId, Timestamp};

/// The largest body a batch may have, whatever the configuration says: the length field
/// is 32 bits and a reader must be able to bound a read before it trusts a header.
pub const MAX_BODY_BYTES: usize = 1 << 30;

/// Producer and transaction facts stamped on a batch.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BatchMeta {
    /// Attribute bits (transactional, control).
    pub attributes: Attributes,
    /// The idempotent producer, or `ProducerId::NONE`.
    pub producer_id: ProducerId,
    /// The producer's epoch.
    pub producer_epoch: i16,
    /// Sequence number of the batch's first record, or -1.
    pub base_sequence: i32,
}

impl Default for BatchMeta {
    fn default() -> Self {
        BatchMeta {
            attributes: Attributes::default(),
            producer_id: ProducerId::NONE,
            producer_epoch: -1,
            base_sequence: -1,
        }
    }
}

/// Why a batch could not be encoded.
#[derive(Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// No records.
    Empty,
    /// More bytes than a batch may hold.
    TooLarge(usize),
}

/// Encodes batches into a reusable aligned buffer.
#[derive(Debug, Default)]
pub struct BatchEncoder {
    buf: AlignedVec,
}

impl BatchEncoder {
    /// A new encoder with an empty buffer.
    #[must_use]
    pub fn new() -> BatchEncoder {
        BatchEncoder::default()
    }

    /// Encodes `records` as one batch whose first record gets `base_offset`, and returns
    /// the stored bytes (header, body, padding) and the header. The records' offsets are
    /// `base_offset`, `base_offset + 1`, ... in order.
    pub fn encode(
        &mut self,
        records: &[Record<'_>],
        meta: &BatchMeta,
        base_offset: Offset,
    ) -> Result<(&[u8], BatchHeader), EncodeError> {
        self.encode_span(records, None, None, meta, base_offset)
    }

    /// As [`encode`](Self::encode), but with explicit offset deltas (strictly increasing),
    /// as compaction needs to keep offsets with gaps.
    pub fn encode_with_deltas(
        &mut self,
        records: &[Record<'_>],
        offset_deltas: &[u32],
        meta: &BatchMeta,
        base_offset: Offset,
    ) -> Result<(&[u8], BatchHeader), EncodeError> {
        self.encode_span(records, Some(offset_deltas), None, meta, base_offset)
    }

    /// The general form: `offset_deltas` of `None` means 0, 1, 2, ...; `last_offset_delta`
    /// may exceed the last record's delta when compaction removed the batch's tail records.
    pub(crate) fn encode_span(
        &mut self,
        records: &[Record<'_>],
        offset_deltas: Option<&[u32]>,
        last_offset_delta: Option<u32>,
        meta: &BatchMeta,
        base_offset: Offset,
    ) -> Result<(&[u8], BatchHeader), EncodeError> {
        let mut out = VecOut(std::mem::take(&mut self.buf));
        out.0.clear();
        let encoded = encode_into(records, offset_deltas, last_offset_delta, meta, base_offset, &mut out);
        self.buf = out.0;
        let header = encoded?;
        Ok((&self.buf[..header.stored_len()], header))
    }
}

/// Where a batch is encoded to: a buffer of its own ([`BatchEncoder`]), or straight into
/// the active segment's write buffers (the log's append). Positions count from the
/// batch's first byte.
pub(crate) trait BatchOut: rkyv::ser::Writer<rancor::Error> {
    /// Overwrites `bytes.len()` bytes already written, from `at`.
    fn patch(&mut self, at: usize, bytes: &[u8]);
    /// `crc` extended (CRC-32C) over the bytes written from `at` on.
    fn crc_from(&self, crc: u32, at: usize) -> u32;
}

struct VecOut(AlignedVec);

impl rkyv::ser::Positional for VecOut {
    fn pos(&self) -> usize {
        self.0.len()
    }
}

impl rkyv::ser::Writer<rancor::Error> for VecOut {
    fn write(&mut self, bytes: &[u8]) -> Result<(), rancor::Error> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }
}

impl BatchOut for VecOut {
    fn patch(&mut self, at: usize, bytes: &[u8]) {
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn crc_from(&self, crc: u32, at: usize) -> u32 {
        crc32c::crc32c_append(crc, &self.0[at..])
    }
}

/// Encodes one batch (header, body, padding) into `out`, which holds nothing of it yet;
/// see [`BatchEncoder::encode_span`] for the arguments. On an error `out` holds a partial
/// batch, to be thrown away.
pub(crate) fn encode_into<O: BatchOut>(
    records: &[Record<'_>],
    offset_deltas: Option<&[u32]>,
    last_offset_delta: Option<u32>,
    meta: &BatchMeta,
    base_offset: Offset,
    out: &mut O,
) -> Result<BatchHeader, EncodeError> {
    if let Some(d) = offset_deltas {
        debug_assert_eq!(records.len(), d.len());
        debug_assert!(d.windows(2).all(|w| w[0] < w[1]));
    }
    if records.is_empty() {
        return Err(EncodeError::Empty);
    }
    debug_assert_eq!(out.pos(), 0, "a batch starts at its output's start");
    let delta = |i: usize| offset_deltas.map_or(i as u32, |d| d[i]);
    let last_delta = delta(records.len() - 1);
    if last_delta > delta_flags::DELTA {
        // Unreachable through the log (a batch spans far fewer offsets), refused anyway:
        // the bits above are flags.
        return Err(EncodeError::TooLarge(last_delta as usize));
    }
    let bitmaps: Vec<Vec<u8>> = records.iter().filter_map(|r| null_header_bitmap(r.headers)).collect();
    let (wire_headers, spans) = stored_headers(records, &bitmaps);
    let mut first = Timestamp(i64::MAX);
    let mut max = EventTime::MIN;
    let wire: Vec<WireRecord<'_>> = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            first = first.min(r.event_time);
            max = max.max(r.event_time);
            let mut flags = if r.value.is_none() { delta_flags::NULL_VALUE } else { 0 };
            let headers = match spans.get(i) {
                Some((span, nulls)) => {
                    if *nulls {
                        flags |= delta_flags::NULL_HEADER_VALUES;
                    }
                    &wire_headers[span.clone()]
                }
                None => &[],
            };
            WireRecord {
                offset_delta: delta(i) | flags,
                event_time: r.event_time.0,
                key: r.key,
                value: r.value.unwrap_or_default(),
                headers,
            }
        })
        .collect();
    let ok = |r: Result<(), rancor::Error>| r.unwrap_or_else(|e| unreachable!("batch outputs cannot fail: {e}"));
    // The header's place, written once the body's length and CRC are known.
    ok(out.write(&[0u8; HEADER_BYTES]));
    let body = WireBody { records: &wire };
    if let Err(e) = rkyv::api::high::to_bytes_in::<_, rancor::Error>(&body, &mut *out) {
        unreachable!("batch outputs cannot fail: {e}");
    }
    let body_len = out.pos() - HEADER_BYTES;
    if body_len > MAX_BODY_BYTES {
        return Err(EncodeError::TooLarge(body_len));
    }
    let mut header = BatchHeader {
        attributes: meta.attributes,
        body_len: body_len as u32,
        crc: 0,
        base_offset,
        record_count: records.len() as u32,
        last_offset_delta: last_offset_delta.unwrap_or(last_delta),
        first_event_time: first,
        max_event_time: max,
        producer_id: meta.producer_id,
        producer_epoch: meta.producer_epoch,
        base_sequence: meta.base_sequence,
    };
    let mut head = [0u8; HEADER_BYTES];
    header.encode(&mut head);
    // `batch_crc`, with the body read where it lies.
    header.crc = out.crc_from(header::header_crc(&head), HEADER_BYTES);
    head[12..16].copy_from_slice(&header.crc.to_le_bytes());
    out.patch(0, &head);
    let padding = stored_len(body_len) - HEADER_BYTES - body_len;
    ok(out.write(&[0u8; BATCH_ALIGN][..padding]));
    Ok(header)
}

/// Every record's headers in their stored shape, all in one list (no allocation when no
/// record has any), with a null-value bitmap (from `bitmaps`, one per record with a null
/// header value, in order) after a record's headers where needed; and per record, its span
/// of that list and whether the span ends with a bitmap. Both are empty when no record has
/// headers.
fn stored_headers<'a>(
    records: &[Record<'a>],
    bitmaps: &'a [Vec<u8>],
) -> (Vec<WireHeader<'a>>, Vec<(std::ops::Range<usize>, bool)>) {
    let mut wire_headers: Vec<WireHeader<'a>> = Vec::new();
    let mut spans = Vec::new();
    if records.iter().any(|r| !r.headers.is_empty()) {
        let mut bitmaps = bitmaps.iter();
        spans.reserve(records.len());
        for r in records {
            let start = wire_headers.len();
            wire_headers
                .extend(r.headers.iter().map(|h| WireHeader { key: h.key, value: h.value.unwrap_or_default() }));
            let nulls = r.headers.iter().any(|h| h.value.is_none());
            if nulls {
                let bitmap = bitmaps.next().expect("one bitmap per record with null header values");
                wire_headers.push(WireHeader { key: "", value: bitmap.as_slice() });
            }
            spans.push((start..wire_headers.len(), nulls));
        }
    }
    (wire_headers, spans)
}

/// The null-value bitmap of `headers` (bit `i % 8` of byte `i / 8` for header `i`), if
/// any of their values is null.
fn null_header_bitmap(headers: &[Header<'_>]) -> Option<Vec<u8>> {
    headers.iter().any(|h| h.value.is_none()).then(|| {
        let mut bitmap = vec![0u8; headers.len().div_ceil(8)];
        for (i, h) in headers.iter().enumerate() {
            if h.value.is_none() {
                bitmap[i / 8] |= 1 << (i % 8);
            }
        }
        bitmap
    })
}

/// Why a stored batch was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchError {
    /// The header did not decode.
    Header(HeaderError),
    /// The buffer ends before the batch does.
    Truncated {
        /// Bytes the batch needs.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// The CRC does not match.
    Crc {
        /// CRC in the header.
        stored: u32,
        /// CRC of the bytes.
        computed: u32,
    },
    /// The body passed the CRC but is not a valid archive (a writer bug).
    Body(String),
}

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BatchError::Header(h) => write!(f, "{h}"),
            BatchError::Truncated { needed, available } => {
                write!(f, "batch needs {needed} bytes but only {available} remain")
            }
            BatchError::Crc { stored, computed } => {
                write!(f, "CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")
            }
            BatchError::Body(e) => write!(f, "invalid batch body: {e}"),
        }
    }
}

/// Checks the batch at the start of `bytes`: header, length, CRC. Returns the header;
/// the batch occupies `header.stored_len()` bytes.
pub fn check_batch(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::decode(bytes, MAX_BODY_BYTES).map_err(BatchError::Header)?;
    let end = HEADER_BYTES + header.body_len as usize;
    if bytes.len() < end {
        return Err(BatchError::Truncated { needed: end, available: bytes.len() });
    }
    let computed = batch_crc(&bytes[..HEADER_BYTES], &bytes[HEADER_BYTES..end]);
    if computed != header.crc {
        return Err(BatchError::Crc { stored: header.crc, computed });
    }
    Ok(header)
}

/// A checked batch, read in place.
#[derive(Clone, Copy)]
pub struct BatchView<'a> {
    header: BatchHeader,
    body: &'a ArchivedBody,
}

impl<'a> BatchView<'a> {
    /// Checks the batch at the start of `bytes` (header, CRC, archive structure) and
    /// returns a view of it. `bytes` must start at a 16-byte aligned address.
    pub fn new(bytes: &'a [u8]) -> Result<BatchView<'a>, BatchError> {
        let header = check_batch(bytes)?;
        Self::after_check(header, bytes)
    }

    /// Builds the view of a batch whose header and CRC were already checked.
    pub fn after_check(header: BatchHeader, bytes: &'a [u8]) -> Result<BatchView<'a>, BatchError> {
        let body = &bytes[HEADER_BYTES..HEADER_BYTES + header.body_len as usize];
        let body = rkyv::access::<ArchivedBody, rancor::Error>(body).map_err(|e| BatchError::Body(e.to_string()))?;
        if body.records.len() != header.record_count as usize {
            return Err(BatchError::Body(format!(
                "header says {} records, body holds {}",
                header.record_count,
                body.records.len()
            )));
        }
        Ok(BatchView { header, body })
    }

    /// The batch header.
    #[must_use]
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// Records in the batch.
    #[must_use]
    pub fn len(&self) -> usize {
        self.body.records.len()
    }

    /// True if compaction removed every record (such batches are not stored).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records, in offset order, read in place.
    pub fn records(self) -> impl ExactSizeIterator<Item = RecordView<'a>> + use<'a> {
        let base = self.header.base_offset;
        self.body.records.get().iter().map(move |r| RecordView::new(base, r))
    }
}

impl std::fmt::Debug for BatchView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchView").field("header", &self.header).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record<'static>> {
        static HEADERS: [Header<'static>; 1] = [Header { key: "h", value: Some(b"v") }];
        vec![
            Record::keyed(b"k1", b"hello", Timestamp(10)),
            Record::unkeyed(b"", Timestamp(5)),
            Record { key: Some(b"k3"), value: Some(b"world"), event_time: Timestamp(30), headers: &HEADERS },
        ]
    }

    #[test]
    fn round_trip_in_place() {
        let mut enc = BatchEncoder::new();
        let recs = sample();
        let (bytes, header) = enc.encode(&recs, &BatchMeta::default(), Offset(100)).unwrap();
        assert_eq!(bytes.len() % BATCH_ALIGN, 0);
        assert_eq!(header.base_offset, Offset(100));
        assert_eq!(header.last_offset(), Offset(102));
        assert_eq!(header.first_event_time, Timestamp(5));
        assert_eq!(header.max_event_time, Timestamp(30));
        let copy: AlignedVec = {
            let mut v = AlignedVec::new();
            v.extend_from_slice(bytes);
            v
        };
        let view = BatchView::new(&copy).unwrap();
        let got: Vec<_> = view.records().collect();
        assert_eq!(got.len(), 3);
        for (i, (r, want)) in got.iter().zip(&recs).enumerate() {
            assert_eq!(r.offset(), Offset(100 + i as u64));
            assert_eq!(r.key(), want.key);
            assert_eq!(r.value(), want.value);
            assert_eq!(r.event_time(), want.event_time);
            assert!(!r.is_tombstone());
            assert_eq!(r.headers().collect::<Vec<_>>(), want.headers.to_vec());
        }
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let mut enc = BatchEncoder::new();
        let (bytes, header) = enc.encode(&sample(), &BatchMeta::default(), Offset(7)).unwrap();
        let used = HEADER_BYTES + header.body_len as usize;
        for byte in 0..used {
            for bit in 0..8 {
                let mut v = AlignedVec::<16>::new();
                v.extend_from_slice(bytes);
                v[byte] ^= 1 << bit;
                assert!(BatchView::new(&v).is_err(), "flip at byte {byte} bit {bit} not caught");
            }
        }
    }

    #[test]
    fn truncated_and_zero_are_typed() {
        let mut enc = BatchEncoder::new();
        let (bytes, _) = enc.encode(&sample(), &BatchMeta::default(), Offset(0)).unwrap();
        let mut v = AlignedVec::<16>::new();
        v.extend_from_slice(&bytes[..bytes.len() - 20]);
        assert!(matches!(check_batch(&v), Err(BatchError::Truncated { .. })));
        assert_eq!(check_batch(&[0u8; 64]), Err(BatchError::Header(HeaderError::Zero)));
        assert!(matches!(check_batch(&[1u8; 10]), Err(BatchError::Header(HeaderError::Short))));
    }

    #[test]
    fn archived_record_framing_is_40_bytes() {
        // The per-record overhead on disk; a field reorder that adds padding shows here.
        assert_eq!(std::mem::size_of::<ArchivedRecord>(), 40);
    }

    #[test]
    fn null_values_and_null_header_values_stay_apart_from_empty_ones() {
        let headers = [
            Header::new("a", b""),
            Header { key: "b", value: None },
            Header::new("a", b"again"),
            Header { key: "", value: None },
        ];
        let (h9, h10): (Vec<String>, Vec<Option<Vec<u8>>>) =
            (0..10).map(|i| (format!("h{i}"), (i % 3 != 0).then(|| vec![i as u8]))).unzip();
        let many: Vec<Header<'_>> = h9.iter().zip(&h10).map(|(k, v)| Header { key: k, value: v.as_deref() }).collect();
        let recs = [
            Record { key: Some(b"k"), value: None, event_time: Timestamp(1), headers: &headers },
            Record { key: Some(b"k"), value: Some(b""), event_time: Timestamp(2), headers: &[] },
            Record { key: None, value: None, event_time: Timestamp(3), headers: &many },
            Record::tombstone(b"t", Timestamp(4)),
            Record { key: Some(b""), value: Some(b"v"), event_time: Timestamp(5), headers: &headers[..1] },
        ];
        let mut enc = BatchEncoder::new();
        let (bytes, _) = enc.encode(&recs, &BatchMeta::default(), Offset(40)).unwrap();
        let mut copy = AlignedVec::<16>::new();
        copy.extend_from_slice(bytes);
        let got: Vec<_> = BatchView::new(&copy).unwrap().records().collect();
        for (i, (r, want)) in got.iter().zip(&recs).enumerate() {
            assert_eq!(r.offset(), Offset(40 + i as u64), "record {i}");
            assert_eq!((r.key(), r.value()), (want.key, want.value), "record {i}");
            assert_eq!(r.headers().collect::<Vec<_>>(), want.headers.to_vec(), "record {i}");
            assert_eq!(r.is_tombstone(), want.key.is_some() && want.value.is_none(), "record {i}");
        }
        assert_eq!(got[1].value(), Some(&b""[..]), "an empty value is not null");
        assert_eq!(got[2].headers().len(), 10);
    }

    #[test]
    fn the_producer_codec_is_stored_beside_the_transaction_bits() {
        let txn = Attributes(Attributes::TRANSACTIONAL);
        assert_eq!(txn.codec(), 0, "a batch from before the codec field reads as uncompressed");
        for codec in 0..=4u8 {
            let attributes = txn.with_codec(codec);
            assert!(attributes.is_transactional() && !attributes.is_control());
            assert_eq!(attributes.codec(), codec);
            let meta = BatchMeta { attributes, ..BatchMeta::default() };
            let mut enc = BatchEncoder::new();
            let (bytes, _) = enc.encode(&sample(), &meta, Offset(3)).unwrap();
            let mut v = AlignedVec::<16>::new();
            v.extend_from_slice(bytes);
            let h = *BatchView::new(&v).unwrap().header();
            assert_eq!((h.attributes.codec(), h.attributes.is_transactional()), (codec, true));
        }
        assert_eq!(Attributes(Attributes::CONTROL).with_codec(0xff).codec(), 7, "three bits, no more");
        assert!(Attributes(Attributes::CONTROL).with_codec(0xff).is_control());
    }

    #[test]
    fn empty_batch_is_refused() {
        let mut enc = BatchEncoder::new();
        assert_eq!(enc.encode(&[], &BatchMeta::default(), Offset(0)).unwrap_err(), EncodeError::Empty);
    }
}
