//! Kafka's record batch v2 (magic 2) to and from sluice's records, at the edge.
//!
//! Produce: each batch's length, magic, CRC-32C, attributes and record count are checked
//! before any record is read, and every length and count inside is checked against the
//! bytes that are really there, so a hostile batch costs at most its own size. A
//! compressed batch (gzip, snappy, lz4 or zstd, [`compression`](super::compression)) has
//! its records section inflated into a buffer of its own, never past the most one stored
//! batch may hold (RECORD_LIST_TOO_LARGE beyond it, CORRUPT_MESSAGE for truncated or
//! corrupt data, UNSUPPORTED_COMPRESSION_TYPE for codec ids 5-7), and its records are
//! read from there as an uncompressed batch's are from the request. Records are stored
//! uncompressed; the batch keeps the codec it arrived in (`Attributes::codec`). Keys,
//! values and headers are kept byte for byte, null distinct from empty (a null key, a
//! null value: a tombstone, a header with a null value); a header's name must be UTF-8
//! (Kafka's clients read it as a string).
//!
//! Fetch: each stored batch becomes one Kafka batch with the same base offset, offset
//! deltas, producer id, epoch, base sequence and transactional and control bits, and its
//! CRC-32C computed here; [`encode_compressed`] then compresses its records section with
//! the codec the topic's `compression.type` asks for. A control batch's record keeps its key (Kafka's control record
//! key: version, then 0 abort or 1 commit) and gets Kafka's EndTransactionMarker value.
//!
//! Produce takes transactional batches (the transactional bit is stored); control batches
//! from clients are refused.

use bytes::{BufMut, Bytes, BytesMut};
use sluice_io::record::Attributes;
use sluice_io::{BatchMeta, BatchView, ProducerId, Timestamp};

use crate::record::PackedRecords;

use super::compression::{self, Codec, InflateError};
use super::errors::code;

/// Bytes of a v2 batch header, from the base offset to the record count inclusive.
pub const BATCH_HEADER_BYTES: usize = 61;
/// The fewest bytes a record takes (length, attributes, timestamp delta, offset delta,
/// key length, value length, header count: one byte each).
const MIN_RECORD_BYTES: usize = 7;

const COMPRESSION_MASK: i16 = 0x7;
const TIMESTAMP_LOG_APPEND: i16 = 1 << 3;
const ATTR_TRANSACTIONAL: i16 = 1 << 4;
const ATTR_CONTROL: i16 = 1 << 5;

/// A produced batch, ready to append.
#[derive(Debug)]
pub struct ProducedBatch {
    /// Producer id, epoch and base sequence.
    pub meta: BatchMeta,
    /// The records, in order: ranges of the request's own bytes, not copies.
    pub records: PackedRecords,
}

/// Why a produced batch was refused: a Kafka error code and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRejected {
    /// The Kafka error code.
    pub code: i16,
    /// What was wrong.
    pub message: String,
}

fn reject(code: i16, message: impl Into<String>) -> BatchRejected {
    BatchRejected { code, message: message.into() }
}

fn corrupt(message: impl Into<String>) -> BatchRejected {
    reject(code::CORRUPT_MESSAGE, message)
}

/// A cursor over untrusted bytes: every read is bounds-checked.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    #[inline(always)]
    fn take(&mut self, n: usize) -> Result<&'a [u8], BatchRejected> {
        let end =
            self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or_else(|| corrupt("record truncated"))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    #[inline(always)]
    fn i8(&mut self) -> Result<i8, BatchRejected> {
        Ok(self.take(1)?[0] as i8)
    }

    #[inline(always)]
    fn varlong(&mut self) -> Result<i64, BatchRejected> {
        // Most lengths and deltas fit one or two bytes (each call site, inlined, has its
        // own well-predicted branch: a record's length is two bytes, its key length one).
        let zigzag = |raw: u64| (raw >> 1) as i64 ^ -((raw & 1) as i64);
        if let Some(&b0) = self.bytes.get(self.at) {
            if b0 & 0x80 == 0 {
                self.at += 1;
                return Ok(zigzag(u64::from(b0)));
            }
            if let Some(&b1) = self.bytes.get(self.at + 1)
                && b1 & 0x80 == 0
            {
                self.at += 2;
                return Ok(zigzag(u64::from(b0 & 0x7f) | u64::from(b1) << 7));
            }
        }
        self.varlong_long()
    }

    /// A varint of three bytes or more (or a truncated one).
    #[cold]
    #[inline(never)]
    fn varlong_long(&mut self) -> Result<i64, BatchRejected> {
        let rest = self.bytes.get(self.at..).unwrap_or_default();
        let mut raw: u64 = 0;
        for (i, &b) in rest.iter().take(10).enumerate() {
            raw |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.at += i + 1;
                return Ok((raw >> 1) as i64 ^ -((raw & 1) as i64));
            }
        }
        Err(corrupt(if rest.len() < 10 { "record truncated" } else { "varint longer than 10 bytes" }))
    }

    #[inline(always)]
    fn varint(&mut self) -> Result<i32, BatchRejected> {
        i32::try_from(self.varlong()?).map_err(|_| corrupt("varint out of the 32-bit range"))
    }

    /// A varint length followed by that many bytes; -1 is null.
    #[inline(always)]
    fn nullable_bytes(&mut self) -> Result<Option<&'a [u8]>, BatchRejected> {
        match self.varint()? {
            -1 => Ok(None),
            n if n < 0 => Err(corrupt(format!("negative length {n}"))),
            n => Ok(Some(self.take(n as usize)?)),
        }
    }
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(x)
}

/// Checks one partition's records of a Produce request: one record batch, whose records
/// become ranges of `bytes` (shared, not copied), or of its inflated records section if it
/// is compressed, which may inflate to at most `max_inflated_bytes`. As in Kafka
/// (`ProduceRequest`'s `validateRecords`, Produce v3 and later), more than one batch is
/// INVALID_RECORD: one request's records for a partition are then one append, which
/// keeps the appends of a connection's pipelined requests in the order they were sent.
pub fn decode_produced(bytes: &Bytes, max_inflated_bytes: usize) -> Result<ProducedBatch, BatchRejected> {
    if bytes.is_empty() {
        return Err(reject(code::INVALID_REQUEST, "a produce request with no records"));
    }
    if bytes.len() < BATCH_HEADER_BYTES {
        return Err(corrupt(format!("a record batch of {} bytes is shorter than its header", bytes.len())));
    }
    let batch_len = be_i32(bytes, 8);
    let total = usize::try_from(batch_len).ok().and_then(|l| l.checked_add(12));
    let total = match total {
        Some(t) if t >= BATCH_HEADER_BYTES && t <= bytes.len() => t,
        _ => {
            return Err(corrupt(format!(
                "record batch length {batch_len} does not fit the {} bytes sent",
                bytes.len()
            )));
        }
    };
    if total < bytes.len() {
        return Err(reject(
            code::INVALID_RECORD,
            format!(
                "Produce requests are only allowed to contain exactly one record batch per partition \
                 ({} bytes follow the first batch's {total})",
                bytes.len() - total
            ),
        ));
    }
    decode_batch(bytes.clone(), max_inflated_bytes)
}

/// Where `inner`, a slice of `outer`, lies in it.
fn range_in(outer: &[u8], inner: &[u8]) -> std::ops::Range<usize> {
    let start = inner.as_ptr() as usize - outer.as_ptr() as usize;
    start..start + inner.len()
}

fn decode_batch(batch: Bytes, max_inflated_bytes: usize) -> Result<ProducedBatch, BatchRejected> {
    let b: &[u8] = &batch;
    let magic = b[16] as i8;
    if magic != 2 {
        return Err(reject(code::INVALID_REQUEST, format!("record batch magic {magic}: only v2 batches are accepted")));
    }
    let crc = u32::from_be_bytes([b[17], b[18], b[19], b[20]]);
    let actual = crc32c::crc32c(&b[21..]);
    if crc != actual {
        return Err(corrupt(format!(
            "record batch CRC-32C mismatch: header says {crc:#010x}, bytes give {actual:#010x}"
        )));
    }
    let attributes = be_i16(b, 21);
    let codec_id = (attributes & COMPRESSION_MASK) as u8;
    let codec = Codec::from_id(codec_id).ok_or_else(|| {
        reject(code::UNSUPPORTED_COMPRESSION_TYPE, format!("compression codec {codec_id} does not exist"))
    })?;
    if attributes & ATTR_CONTROL != 0 {
        // Only the transaction coordinator writes markers (EndTxn), as in Kafka.
        return Err(reject(code::INVALID_REQUEST, "clients may not produce control batches"));
    }
    let transactional = attributes & ATTR_TRANSACTIONAL != 0;
    let log_append_time = attributes & TIMESTAMP_LOG_APPEND != 0;
    let first_timestamp = be_i64(b, 27);
    let producer_id = be_i64(b, 43);
    let producer_epoch = be_i16(b, 51);
    let base_sequence = be_i32(b, 53);
    let count = be_i32(b, 57);
    // A compressed batch's records are read from their inflated copy: from here on,
    // `batch` and `b` are the buffer the records lie in, and `body` the records.
    let (batch, body_start) = match codec {
        Codec::None => (batch, BATCH_HEADER_BYTES),
        codec => (inflate_records(codec, &b[BATCH_HEADER_BYTES..], max_inflated_bytes)?, 0),
    };
    let b: &[u8] = &batch;
    if b.len() >= u32::MAX as usize {
        // Records are kept as 32-bit ranges of the batch (and requests are far smaller).
        return Err(reject(code::MESSAGE_TOO_LARGE, format!("a record batch of {} bytes", b.len())));
    }
    let body = &b[body_start..];
    if count <= 0 || count as usize > body.len() / MIN_RECORD_BYTES {
        return Err(corrupt(format!("record count {count} does not fit a batch body of {} bytes", body.len())));
    }
    // The append time, for batches that ask for it (or carry no time): read once.
    let now = (log_append_time || first_timestamp < 0).then(Timestamp::now);
    let mut cur = Cursor { bytes: body, at: 0 };
    let mut records = PackedRecords::with_capacity(batch.clone(), count as usize);
    for i in 0..count {
        let len = cur.varint()?;
        if len < 0 {
            return Err(corrupt(format!("record {i} has length {len}")));
        }
        let rec = cur.take(len as usize)?;
        let mut r = Cursor { bytes: rec, at: 0 };
        let _attributes = r.i8()?;
        let ts_delta = r.varlong()?;
        let offset_delta = r.varint()?;
        if offset_delta != i {
            return Err(corrupt(format!("record {i} has offset delta {offset_delta}")));
        }
        let key = r.nullable_bytes()?.map(|k| range_in(b, k));
        let value = r.nullable_bytes()?.map(|v| range_in(b, v));
        let headers = r.varint()?;
        // Each header takes at least two bytes (its two lengths).
        if headers < 0 || headers as usize > (rec.len() - r.at) / 2 {
            return Err(corrupt(format!("record {i} claims {headers} headers in {} bytes", rec.len() - r.at)));
        }
        for _ in 0..headers {
            let key = r.nullable_bytes()?.ok_or_else(|| corrupt("a record header with a null key"))?;
            std::str::from_utf8(key).map_err(|_| corrupt("a record header key that is not UTF-8"))?;
            let value = r.nullable_bytes()?.map(|v| range_in(b, v));
            records.push_header_within(range_in(b, key), value);
        }
        if r.at != rec.len() {
            return Err(corrupt(format!("record {i} has {} bytes past its last field", rec.len() - r.at)));
        }
        let event_time = now.unwrap_or(Timestamp(first_timestamp.saturating_add(ts_delta)));
        records.push_within(key, value, event_time);
    }
    if cur.at != body.len() {
        return Err(corrupt(format!("{} bytes after the batch's last record", body.len() - cur.at)));
    }
    let meta = BatchMeta {
        attributes: if transactional { Attributes(Attributes::TRANSACTIONAL) } else { Attributes::default() }
            .with_codec(codec.id()),
        producer_id: ProducerId(producer_id),
        producer_epoch,
        base_sequence,
    };
    Ok(ProducedBatch { meta, records })
}

/// A compressed batch's records section, inflated into a buffer of its own.
fn inflate_records(codec: Codec, compressed: &[u8], limit: usize) -> Result<Bytes, BatchRejected> {
    match compression::inflate(codec, compressed, limit) {
        Ok(records) => Ok(Bytes::from(records)),
        // Kafka's code for a batch larger than the log takes.
        Err(e @ InflateError::TooLarge { .. }) => Err(reject(code::RECORD_LIST_TOO_LARGE, e.to_string())),
        Err(e @ InflateError::Corrupt { .. }) => Err(corrupt(e.to_string())),
    }
}

fn put_varlong(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

fn varlong_len(v: i64) -> usize {
    let z = ((v << 1) ^ (v >> 63)) as u64;
    ((64 - z.leading_zeros() as usize).max(1)).div_ceil(7)
}

fn nullable_len(b: Option<&[u8]>) -> usize {
    match b {
        None => 1,
        Some(b) => varlong_len(b.len() as i64) + b.len(),
    }
}

fn put_nullable(out: &mut BytesMut, b: Option<&[u8]>) {
    match b {
        None => put_varlong(out, -1),
        Some(b) => {
            put_varlong(out, b.len() as i64);
            out.put_slice(b);
        }
    }
}

/// Appends one stored batch to `out` as a Kafka v2 batch.
pub fn encode_batch(view: BatchView<'_>, out: &mut BytesMut) {
    let h = *view.header();
    let records: Vec<_> = view.records().collect();
    let first_ts = records.first().map_or(0, |r| r.event_time().millis());
    let max_ts = records.iter().map(|r| r.event_time().millis()).max().unwrap_or(first_ts);
    let start = out.len();
    out.put_i64(h.base_offset.0 as i64);
    out.put_i32(0); // batch length, filled in below
    out.put_i32(0); // partition leader epoch
    out.put_i8(2);
    out.put_u32(0); // CRC, filled in below
    let mut attributes = 0i16;
    if h.attributes.is_transactional() {
        attributes |= ATTR_TRANSACTIONAL;
    }
    if h.attributes.is_control() {
        attributes |= ATTR_CONTROL;
    }
    out.put_i16(attributes);
    out.put_i32(h.last_offset_delta as i32);
    out.put_i64(first_ts);
    out.put_i64(max_ts);
    out.put_i64(h.producer_id.0);
    out.put_i16(h.producer_epoch);
    out.put_i32(h.base_sequence);
    out.put_i32(records.len() as i32);
    // A control record's value is Kafka's EndTransactionMarker (version 0, coordinator
    // epoch 0) where sluice stores none.
    let control_value: &[u8] = &[0, 0, 0, 0, 0, 0];
    for r in &records {
        let value = match r.value() {
            Some([]) | None if h.attributes.is_control() => Some(control_value),
            v => v,
        };
        let ts_delta = r.event_time().millis().wrapping_sub(first_ts);
        let offset_delta = (r.offset().0 - h.base_offset.0) as i64;
        let headers: Vec<_> = r.headers().collect();
        let mut body_len = 1 + varlong_len(ts_delta) + varlong_len(offset_delta);
        body_len += nullable_len(r.key()) + nullable_len(value);
        body_len += varlong_len(headers.len() as i64);
        for hd in &headers {
            body_len += nullable_len(Some(hd.key.as_bytes())) + nullable_len(hd.value);
        }
        put_varlong(out, body_len as i64);
        out.put_i8(0);
        put_varlong(out, ts_delta);
        put_varlong(out, offset_delta);
        put_nullable(out, r.key());
        put_nullable(out, value);
        put_varlong(out, headers.len() as i64);
        for hd in &headers {
            put_nullable(out, Some(hd.key.as_bytes()));
            put_nullable(out, hd.value);
        }
    }
    let batch_len = (out.len() - start - 12) as i32;
    out[start + 8..start + 12].copy_from_slice(&batch_len.to_be_bytes());
    let crc = crc32c::crc32c(&out[start + 21..]);
    out[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
}

/// Appends one stored batch to `out` as a Kafka v2 batch whose records section is
/// compressed with `codec` (as [`encode_batch`] with `Codec::None`): encoded into
/// `scratch` first, then its records compressed into `out`, with the codec in its
/// attributes and its length and CRC-32C made again.
pub fn encode_compressed(view: BatchView<'_>, codec: Codec, scratch: &mut BytesMut, out: &mut BytesMut) {
    if codec == Codec::None {
        return encode_batch(view, out);
    }
    scratch.clear();
    encode_batch(view, scratch);
    let start = out.len();
    out.extend_from_slice(&scratch[..BATCH_HEADER_BYTES]);
    compression::compress(codec, &scratch[BATCH_HEADER_BYTES..], out);
    let attributes = be_i16(out, start + 21) | i16::from(codec.id());
    out[start + 21..start + 23].copy_from_slice(&attributes.to_be_bytes());
    let batch_len = (out.len() - start - 12) as i32;
    out[start + 8..start + 12].copy_from_slice(&batch_len.to_be_bytes());
    let crc = crc32c::crc32c(&out[start + 21..]);
    out[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::OwnedRecord;

    /// The most a compressed batch in these tests may inflate to.
    const LIMIT: usize = 1 << 20;

    fn decode(bytes: &[u8]) -> Result<ProducedBatch, BatchRejected> {
        decode_produced(&Bytes::copy_from_slice(bytes), LIMIT)
    }
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    use sluice_io::Offset;
    use sluice_io::record::BatchEncoder;

    fn kafka_record(offset: i64, key: Option<&str>, value: &str, ts: i64) -> Record {
        Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: 7,
            producer_epoch: 1,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: 10 + offset as i32,
            timestamp: ts,
            key: key.map(|k| bytes::Bytes::copy_from_slice(k.as_bytes())),
            value: Some(bytes::Bytes::copy_from_slice(value.as_bytes())),
            headers: Default::default(),
        }
    }

    fn encode_kafka(records: &[Record]) -> Vec<u8> {
        let mut buf = BytesMut::new();
        let opts = RecordEncodeOptions { version: 2, compression: Compression::None };
        RecordBatchEncoder::encode(&mut buf, records.iter(), &opts).expect("encodes");
        buf.to_vec()
    }

    #[test]
    fn a_batch_from_the_kafka_protocol_crate_decodes() {
        let bytes = encode_kafka(&[kafka_record(0, Some("k"), "v0", 1000), kafka_record(1, None, "v1", 1005)]);
        let b = decode(&bytes).expect("decodes");
        assert_eq!((b.meta.producer_id, b.meta.producer_epoch, b.meta.base_sequence), (ProducerId(7), 1, 10));
        assert_eq!(
            b.records.to_owned_records()[0],
            OwnedRecord::new(Some(b"k".to_vec()), b"v0".to_vec(), Timestamp(1000))
        );
        assert_eq!(b.records.to_owned_records()[1], OwnedRecord::new(None, b"v1".to_vec(), Timestamp(1005)));
    }

    #[test]
    fn headers_null_values_and_null_keys_are_kept_byte_for_byte() {
        let mut r = kafka_record(0, None, "", 1000);
        r.value = None;
        r.headers.insert("trace".into(), Some(bytes::Bytes::from_static(b"abc")));
        r.headers.insert("empty".into(), Some(bytes::Bytes::new()));
        r.headers.insert("null".into(), None);
        let mut r2 = kafka_record(1, Some("k"), "", 1001);
        r2.headers.insert("h".into(), Some(bytes::Bytes::from_static(&[0, 255])));
        let b = decode(&encode_kafka(&[r.clone(), r2])).expect("decodes");
        let got = b.records.to_owned_records();
        assert_eq!((got[0].key.as_ref(), got[0].value.as_ref()), (None, None), "a null key and a null value");
        let mut headers: Vec<_> = got[0].headers.iter().map(|h| (h.key.as_str(), h.value.as_deref())).collect();
        headers.sort_unstable();
        assert_eq!(headers, [("empty", Some(&b""[..])), ("null", None), ("trace", Some(&b"abc"[..]))]);
        assert_eq!(got[1].value.as_deref(), Some(&b""[..]), "an empty value is not null");
        assert_eq!(got[1].headers, [crate::record::OwnedHeader::new("h", vec![0, 255])]);
        // Stored, then fetched: the same bytes come back.
        let mut scratch = Vec::new();
        let stored = b.records.records(&mut scratch);
        let set = stored_to_wire(&stored, &b.meta, Offset(0));
        assert_eq!(set.records[0].value, None);
        assert_eq!(set.records[0].key, None);
        assert_eq!(set.records[0].headers, r.headers);
        assert_eq!(set.records[1].value.as_deref(), Some(&b""[..]));
    }

    #[test]
    fn header_counts_beyond_the_record_are_refused() {
        let mut r = kafka_record(0, Some("k"), "v", 1000);
        r.headers.insert("a".into(), Some(bytes::Bytes::from_static(b"1")));
        let good = encode_kafka(&[r]);
        // The header count is the byte before the header's key length (2 * 1 = 0x02):
        // find it from the end (key "a" = 0x02 'a', value "1" = 0x02 '1').
        let at = good.len() - 5;
        assert_eq!(good[at], 2, "one header, zigzag-encoded");
        for (count, what) in [(0x7e_u8, "63 headers"), (0x01, "-1 headers")] {
            let mut b = good.clone();
            b[at] = count;
            let crc = crc32c::crc32c(&b[21..]);
            b[17..21].copy_from_slice(&crc.to_be_bytes());
            assert_eq!(decode(&b).expect_err(what).code, code::CORRUPT_MESSAGE, "{what}");
        }
        // A header name that is not UTF-8.
        let mut b = good.clone();
        b[at + 2] = 0xff;
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        let e = decode(&b).expect_err("not UTF-8");
        assert!(e.message.contains("UTF-8"), "{e:?}");
    }

    #[test]
    fn a_flipped_byte_fails_the_crc() {
        let mut bytes = encode_kafka(&[kafka_record(0, Some("k"), "value", 1000)]);
        let last = bytes.len() - 3;
        bytes[last] ^= 0x40;
        let e = decode(&bytes).expect_err("corrupt");
        assert_eq!(e.code, code::CORRUPT_MESSAGE, "{e:?}");
        assert!(e.message.contains("CRC"), "{e:?}");
    }

    #[test]
    fn lying_lengths_and_counts_are_refused_without_allocating_them() {
        let good = encode_kafka(&[kafka_record(0, Some("k"), "value", 1000)]);
        // A record count far beyond the body (CRC recomputed so only the count is wrong).
        let mut b = good.clone();
        b[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(decode(&b).expect_err("count").code, code::CORRUPT_MESSAGE);
        // A batch length longer than what was sent.
        let mut b = good.clone();
        b[8..12].copy_from_slice(&(1i32 << 30).to_be_bytes());
        assert_eq!(decode(&b).expect_err("length").code, code::CORRUPT_MESSAGE);
        // Truncated.
        assert_eq!(decode(&good[..good.len() - 1]).expect_err("short").code, code::CORRUPT_MESSAGE);
        assert_eq!(decode(&good[..20]).expect_err("header").code, code::CORRUPT_MESSAGE);
        // Said to be gzip, but not compressed.
        let mut b = good;
        b[22] |= 1;
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(decode(&b).expect_err("gzip").code, code::CORRUPT_MESSAGE);
    }

    /// `plain`, an uncompressed batch, with its records section compressed by `codec`
    /// straight through the codec's crate (snappy as librdkafka writes it: one raw
    /// block), and its attributes, length and CRC made to match.
    fn compress_kafka(plain: &[u8], codec: u8, records: &[u8]) -> Vec<u8> {
        let mut b = plain[..BATCH_HEADER_BYTES].to_vec();
        b.extend_from_slice(records);
        b[22] |= codec;
        let len = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    fn compressed_section(codec: u8, section: &[u8]) -> Vec<u8> {
        use std::io::Write;
        match codec {
            1 => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(section).unwrap();
                e.finish().unwrap()
            }
            2 => snap::raw::Encoder::new().compress_vec(section).unwrap(),
            3 => {
                let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
                e.write_all(section).unwrap();
                e.finish().unwrap()
            }
            4 => zstd::bulk::compress(section, 3).unwrap(),
            _ => unreachable!(),
        }
    }

    fn sample_records() -> Vec<Record> {
        (0..50).map(|i| kafka_record(i, Some(&format!("key-{i}")), &"v".repeat(i as usize * 10), 1000 + i)).collect()
    }

    #[test]
    fn compressed_batches_of_every_codec_decode_to_the_records_and_keep_their_codec() {
        let plain = encode_kafka(&sample_records());
        let want = decode(&plain).expect("uncompressed").records.to_owned_records();
        assert_eq!(decode(&plain).unwrap().meta.attributes.codec(), 0);
        for codec in 1..=4u8 {
            let section = compressed_section(codec, &plain[BATCH_HEADER_BYTES..]);
            let batch = compress_kafka(&plain, codec, &section);
            let b = decode(&batch).unwrap_or_else(|e| panic!("codec {codec}: {e:?}"));
            assert_eq!(b.records.to_owned_records(), want, "codec {codec}");
            assert_eq!(b.meta.attributes.codec(), codec);
            assert_eq!((b.meta.producer_id, b.meta.base_sequence), (ProducerId(7), 10));
        }
    }

    #[test]
    fn bad_compressed_batches_get_kafka_codes_and_nothing_else() {
        let plain = encode_kafka(&sample_records());
        let records = &plain[BATCH_HEADER_BYTES..];
        // Codec ids 5-7 do not exist.
        for codec in 5..=7u8 {
            let e = decode(&compress_kafka(&plain, codec, records)).expect_err("no such codec");
            assert_eq!(e.code, code::UNSUPPORTED_COMPRESSION_TYPE, "{e:?}");
            assert!(e.message.contains(&format!("codec {codec}")), "{e:?}");
        }
        for codec in 1..=4u8 {
            let section = compressed_section(codec, records);
            // Truncated (the CRC made to match, so only the compressed data is short).
            for cut in [1, section.len() / 2] {
                let e = decode(&compress_kafka(&plain, codec, &section[..section.len() - cut])).expect_err("truncated");
                assert_eq!(e.code, code::CORRUPT_MESSAGE, "codec {codec} cut {cut}: {e:?}");
            }
            // Not compressed with the codec it claims.
            let e = decode(&compress_kafka(&plain, codec, b"\x00\x01 not compressed at all")).expect_err("garbage");
            assert_eq!(e.code, code::CORRUPT_MESSAGE, "codec {codec}: {e:?}");
            // Well compressed, but what it inflates to is not the records the header counts.
            let e = decode(&compress_kafka(&plain, codec, &compressed_section(codec, &records[..records.len() - 1])))
                .expect_err("records cut");
            assert_eq!(e.code, code::CORRUPT_MESSAGE, "codec {codec}: {e:?}");
            // Inflating past the limit: refused as a batch too large for the log.
            let bomb = compressed_section(codec, &vec![0u8; LIMIT + 1]);
            assert!(bomb.len() < LIMIT / 10, "codec {codec}: {} bytes", bomb.len());
            let e = decode(&compress_kafka(&plain, codec, &bomb)).expect_err("bomb");
            assert_eq!(e.code, code::RECORD_LIST_TOO_LARGE, "codec {codec}: {e:?}");
        }
    }

    #[test]
    fn fetched_batches_compressed_with_each_codec_read_back_as_the_stored_records() {
        let values: Vec<[u8; 100]> = (0..40u8).map(|i| [i; 100]).collect();
        let recs: Vec<_> = (0..40u8)
            .map(|i| sluice_io::Record::keyed(b"key", &values[i as usize], Timestamp(5000 + i64::from(i))))
            .collect();
        let meta =
            BatchMeta { producer_id: ProducerId(9), producer_epoch: 2, base_sequence: 40, ..BatchMeta::default() };
        let mut enc = BatchEncoder::new();
        let (stored, _) = enc.encode(&recs, &meta, Offset(500)).expect("encodes");
        let mut buf = vec![0u8; stored.len() + 16];
        let at = buf.as_ptr().align_offset(16);
        buf[at..at + stored.len()].copy_from_slice(stored);
        let view = BatchView::new(&buf[at..at + stored.len()]).expect("valid");
        let mut plain = BytesMut::new();
        encode_batch(view, &mut plain);
        let want = decode(&plain).expect("plain").records.to_owned_records();
        let mut scratch = BytesMut::new();
        for codec in [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let mut out = BytesMut::from(&b"before"[..]);
            encode_compressed(view, codec, &mut scratch, &mut out);
            assert_eq!(&out[..6], b"before", "appended");
            let wire = &out[6..];
            assert_eq!(be_i16(wire, 21) & COMPRESSION_MASK, i16::from(codec.id()));
            assert_eq!(be_i32(wire, 8) as usize + 12, wire.len(), "{codec}: length");
            assert_eq!(be_i64(wire, 0), 500, "{codec}: base offset");
            if codec != Codec::None {
                assert!(wire.len() < plain.len() / 4, "{codec}: {} of {} bytes", wire.len(), plain.len());
            }
            // The CRC is checked by the decoder, which inflates the records.
            let b = decode(wire).unwrap_or_else(|e| panic!("{codec}: {e:?}"));
            assert_eq!(b.records.to_owned_records(), want, "{codec}");
        }
    }

    #[test]
    fn two_batches_for_one_partition_are_an_invalid_record() {
        let one = encode_kafka(&[kafka_record(0, None, "a", 1000)]);
        let two = [one.clone(), one].concat();
        let e = decode(&two).expect_err("two batches");
        assert_eq!(e.code, code::INVALID_RECORD, "{e:?}");
        assert!(e.message.contains("exactly one record batch"), "{e:?}");
    }

    #[test]
    fn transactional_batches_keep_their_bit_and_control_batches_are_refused() {
        let mut r = kafka_record(0, Some("k"), "v", 1000);
        r.transactional = true;
        let b = decode(&encode_kafka(&[r.clone()])).expect("a transactional batch is accepted");
        assert!(b.meta.attributes.is_transactional());
        assert!(!b.meta.attributes.is_control());
        r.control = true;
        let e = decode(&encode_kafka(&[r])).expect_err("a control batch from a client");
        assert_eq!(e.code, code::INVALID_REQUEST, "{e:?}");
    }

    /// `records` stored as one sluice batch at `base`, sent as a Kafka batch, and read back
    /// by the kafka-protocol crate (which checks the CRC).
    fn stored_to_wire(
        records: &[sluice_io::Record<'_>],
        meta: &BatchMeta,
        base: Offset,
    ) -> kafka_protocol::records::RecordSet {
        let mut enc = BatchEncoder::new();
        let (stored, _) = enc.encode(records, meta, base).expect("encodes");
        // A stored batch is read from a 16-byte aligned address.
        let mut buf = vec![0u8; stored.len() + 16];
        let at = buf.as_ptr().align_offset(16);
        buf[at..at + stored.len()].copy_from_slice(stored);
        let view = BatchView::new(&buf[at..at + stored.len()]).expect("valid");
        let mut out = BytesMut::new();
        encode_batch(view, &mut out);
        let mut bytes = out.freeze();
        RecordBatchDecoder::decode(&mut bytes).expect("the crate reads it, CRC included")
    }

    #[test]
    fn markers_encode_as_kafka_control_batches() {
        let key = sluice_io::txn::Marker::Abort.key();
        let marker = sluice_io::Record::keyed(&key, b"", Timestamp(5));
        let meta = sluice_io::txn::Marker::meta(ProducerId(11));
        let set = stored_to_wire(&[marker], &meta, Offset(7));
        let r = &set.records[0];
        assert!(r.control && r.transactional);
        assert_eq!((r.offset, r.producer_id), (7, 11));
        assert_eq!(r.key.as_deref(), Some(&[0u8, 0, 0, 0][..]), "version 0, type 0 (abort)");
        assert_eq!(r.value.as_deref(), Some(&[0u8; 6][..]), "an EndTransactionMarker: version 0, epoch 0");
    }

    #[test]
    fn stored_batches_encode_to_what_the_kafka_protocol_crate_reads() {
        let recs = [
            sluice_io::Record::keyed(b"a", b"one", Timestamp(2000)),
            sluice_io::Record::unkeyed(b"two", Timestamp(1990)),
            sluice_io::Record::keyed(b"c", &[0u8; 300], Timestamp(2100)),
        ];
        let meta =
            BatchMeta { producer_id: ProducerId(9), producer_epoch: 2, base_sequence: 40, ..BatchMeta::default() };
        let set = stored_to_wire(&recs, &meta, Offset(500));
        assert_eq!(set.records.len(), 3);
        let offsets: Vec<i64> = set.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [500, 501, 502]);
        let times: Vec<i64> = set.records.iter().map(|r| r.timestamp).collect();
        assert_eq!(times, [2000, 1990, 2100]);
        assert_eq!(set.records[0].key.as_deref(), Some(&b"a"[..]));
        assert_eq!(set.records[1].key, None);
        assert_eq!(set.records[2].value.as_deref(), Some(&[0u8; 300][..]));
        assert_eq!((set.records[0].producer_id, set.records[0].producer_epoch, set.records[0].sequence), (9, 2, 40));
    }
}
