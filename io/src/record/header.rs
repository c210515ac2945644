//! The fixed 64-byte batch header.
//!
//! ```text
//!  0  magic            u32  "SLCB" (0x42434c53 little-endian)
//!  4  version          u8   1
//!  5  attributes       u8   bit 0 transactional, bit 1 control, bits 2-4 the codec
//!                            the batch arrived in (Kafka's ids, 0 none)
//!  6  reserved         u16  0
//!  8  body_len         u32  bytes of rkyv body after the header (unpadded)
//! 12  crc              u32  CRC32C of header bytes 4..12, then 16..64, then the body
//! 16  base_offset      u64
//! 24  record_count     u32  records present (compaction may remove some)
//! 28  last_offset_delta u32 offset of the batch's last record minus base_offset
//! 32  first_event_time i64
//! 40  max_event_time   i64
//! 48  producer_id      i64  -1 when none
//! 56  producer_epoch   i16
//! 58  reserved         u16
//! 60  base_sequence    i32  -1 when none
//! ```
//!
//! All integers are little-endian. The CRC covers everything after itself, so a flipped
//! bit in the offsets or times is caught as surely as one in the records. The magic and
//! length are checked before the CRC so that a reader never trusts a length it has not
//! bounded.

use crate::types::{EventTime, Offset, ProducerId, Timestamp};

/// Bytes in a batch header.
pub const HEADER_BYTES: usize = 64;
/// Every batch starts at a file position that is a multiple of this, so its rkyv body
/// (which needs at most 16-byte alignment) can be accessed in place.
pub const BATCH_ALIGN: usize = 16;
/// "SLCB".
pub const MAGIC: u32 = u32::from_le_bytes(*b"SLCB");
/// The only format version so far.
pub const VERSION: u8 = 1;

/// Batch attribute bits.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes(pub u8);

impl Attributes {
    /// The batch belongs to a transaction and is invisible to read-committed consumers
    /// until a commit marker follows.
    pub const TRANSACTIONAL: u8 = 1 << 0;
    /// The batch is a control batch (a transaction commit or abort marker).
    pub const CONTROL: u8 = 1 << 1;

    /// Is the transactional bit set?
    #[must_use]
    pub fn is_transactional(self) -> bool {
        self.0 & Self::TRANSACTIONAL != 0
    }

    /// Is the control bit set?
    #[must_use]
    pub fn is_control(self) -> bool {
        self.0 & Self::CONTROL != 0
    }

    /// Where the producer's codec lies: bits 2-4, Kafka's codec ids (0 none, 1 gzip, 2
    /// snappy, 3 lz4, 4 zstd). The records are stored uncompressed whatever it says; a
    /// Kafka fetch of a topic whose `compression.type` is `producer` compresses the batch
    /// with it again. Batches written before the field existed have 0 there.
    pub const CODEC_MASK: u8 = 0b111 << 2;

    /// The codec id the batch's producer used (0 for none).
    #[must_use]
    pub fn codec(self) -> u8 {
        (self.0 & Self::CODEC_MASK) >> 2
    }

    /// These attributes with the codec id `codec` (only its low three bits are kept).
    #[must_use]
    pub fn with_codec(self, codec: u8) -> Attributes {
        Attributes((self.0 & !Self::CODEC_MASK) | ((codec & 0b111) << 2))
    }
}

/// A decoded batch header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    /// Attribute bits.
    pub attributes: Attributes,
    /// Length of the rkyv body that follows the header, without padding.
    pub body_len: u32,
    /// CRC32C over header bytes 4..12 and 16..64, and the body.
    pub crc: u32,
    /// Offset of the batch's first record as written.
    pub base_offset: Offset,
    /// Records present in the body.
    pub record_count: u32,
    /// `last_offset - base_offset`; survives compaction so offsets stay stable.
    pub last_offset_delta: u32,
    /// Smallest event time in the batch as written.
    pub first_event_time: EventTime,
    /// Largest event time in the batch.
    pub max_event_time: EventTime,
    /// The idempotent producer, or `ProducerId::NONE`.
    pub producer_id: ProducerId,
    /// The producer's epoch.
    pub producer_epoch: i16,
    /// Sequence number of the first record, or -1.
    pub base_sequence: i32,
}

impl BatchHeader {
    /// The offset of the batch's last record.
    #[must_use]
    pub fn last_offset(&self) -> Offset {
        self.base_offset.plus(u64::from(self.last_offset_delta))
    }

    /// The offset that follows this batch.
    #[must_use]
    pub fn next_offset(&self) -> Offset {
        self.last_offset().plus(1)
    }

    /// Bytes the batch occupies in a segment, header and padding included.
    #[must_use]
    pub fn stored_len(&self) -> usize {
        stored_len(self.body_len as usize)
    }

    /// Writes the header, CRC field included, into `out[..64]`.
    pub fn encode(&self, out: &mut [u8]) {
        let out = &mut out[..HEADER_BYTES];
        out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        out[4] = VERSION;
        out[5] = self.attributes.0;
        out[6..8].copy_from_slice(&0u16.to_le_bytes());
        out[8..12].copy_from_slice(&self.body_len.to_le_bytes());
        out[12..16].copy_from_slice(&self.crc.to_le_bytes());
        out[16..24].copy_from_slice(&self.base_offset.0.to_le_bytes());
        out[24..28].copy_from_slice(&self.record_count.to_le_bytes());
        out[28..32].copy_from_slice(&self.last_offset_delta.to_le_bytes());
        out[32..40].copy_from_slice(&self.first_event_time.0.to_le_bytes());
        out[40..48].copy_from_slice(&self.max_event_time.0.to_le_bytes());
        out[48..56].copy_from_slice(&self.producer_id.0.to_le_bytes());
        out[56..58].copy_from_slice(&self.producer_epoch.to_le_bytes());
        out[58..60].copy_from_slice(&0u16.to_le_bytes());
        out[60..64].copy_from_slice(&self.base_sequence.to_le_bytes());
    }

    /// Decodes a header, checking only what can be checked without the body: magic,
    /// version and that the body length is within `max_body_len`.
    pub fn decode(bytes: &[u8], max_body_len: usize) -> Result<BatchHeader, HeaderError> {
        if bytes.len() < HEADER_BYTES {
            return Err(HeaderError::Short);
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let magic = u32_at(0);
        if magic == 0 && bytes[..HEADER_BYTES].iter().all(|&b| b == 0) {
            return Err(HeaderError::Zero);
        }
        if magic != MAGIC {
            return Err(HeaderError::BadMagic(magic));
        }
        if bytes[4] != VERSION {
            return Err(HeaderError::BadVersion(bytes[4]));
        }
        let body_len = u32_at(8);
        if body_len as usize > max_body_len {
            return Err(HeaderError::BadLength(body_len));
        }
        Ok(BatchHeader {
            attributes: Attributes(bytes[5]),
            body_len,
            crc: u32_at(12),
            base_offset: Offset(u64_at(16)),
            record_count: u32_at(24),
            last_offset_delta: u32_at(28),
            first_event_time: Timestamp::from_le(u64_at(32)),
            max_event_time: Timestamp::from_le(u64_at(40)),
            producer_id: ProducerId(u64_at(48) as i64),
            producer_epoch: i16::from_le_bytes([bytes[56], bytes[57]]),
            base_sequence: u32_at(60) as i32,
        })
    }
}

impl Timestamp {
    fn from_le(raw: u64) -> Timestamp {
        Timestamp(raw as i64)
    }
}

/// Why a header did not decode.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Fewer than 64 bytes remain.
    Short,
    /// All 64 bytes are zero: the clean end of a preallocated or padded segment.
    Zero,
    /// The magic number is wrong.
    BadMagic(u32),
    /// Unknown format version.
    BadVersion(u8),
    /// The body length is larger than any batch can be.
    BadLength(u32),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::Short => write!(f, "truncated batch header"),
            HeaderError::Zero => write!(f, "zeroed batch header"),
            HeaderError::BadMagic(m) => write!(f, "bad magic {m:#010x}"),
            HeaderError::BadVersion(v) => write!(f, "unknown batch format version {v}"),
            HeaderError::BadLength(l) => write!(f, "impossible body length {l}"),
        }
    }
}

/// Bytes a batch with a body of `body_len` bytes occupies, padded to `BATCH_ALIGN`.
#[must_use]
pub const fn stored_len(body_len: usize) -> usize {
    (HEADER_BYTES + body_len).next_multiple_of(BATCH_ALIGN)
}

/// The CRC of a batch: header bytes 4..12 (version, attributes, length), 16..64, then
/// the body. Only the magic and the CRC itself are outside it.
#[must_use]
pub fn batch_crc(header: &[u8], body: &[u8]) -> u32 {
    crc32c::crc32c_append(header_crc(header), body)
}

/// [`batch_crc`]'s header part, for a writer that extends it over a body held in pieces.
pub(crate) fn header_crc(header: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&header[4..12]), &header[16..HEADER_BYTES])
}
