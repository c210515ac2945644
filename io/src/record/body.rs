//! The rkyv-archived batch body, and the borrowed views a reader gets of it.
//!
//! The writer serializes borrowed records (`WireRecord`, built from the caller's
//! slices, so a send copies each byte once: into the batch). The reader accesses the
//! archived form in place; nothing is deserialized.

use rkyv::with::{InlineAsBox, Map};
use rkyv::{Archive, Serialize};

use crate::types::{EventTime, Offset, Timestamp};

/// A record header: a string key and a value, which may be null (Kafka allows both).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Header<'a> {
    /// The header's name.
    pub key: &'a str,
    /// The header's value; `None` is a null value, distinct from an empty one.
    pub value: Option<&'a [u8]>,
}

impl<'a> Header<'a> {
    /// A header with a (non-null) value.
    #[must_use]
    pub fn new(key: &'a str, value: &'a [u8]) -> Header<'a> {
        Header { key, value: Some(value) }
    }
}

/// A record as a producer hands it to the log: borrowed bytes, nothing copied yet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Optional key (used for partitioning and compaction).
    pub key: Option<&'a [u8]>,
    /// The value; `None` is a null value (a tombstone in a compacted topic), distinct
    /// from an empty one.
    pub value: Option<&'a [u8]>,
    /// When the event happened.
    pub event_time: EventTime,
    /// Headers, in order (names may repeat, as in Kafka).
    pub headers: &'a [Header<'a>],
}

impl<'a> Record<'a> {
    /// A record with a key.
    #[must_use]
    pub fn keyed(key: &'a [u8], value: &'a [u8], event_time: EventTime) -> Record<'a> {
        Record { key: Some(key), value: Some(value), event_time, headers: &[] }
    }

    /// A record without a key.
    #[must_use]
    pub fn unkeyed(value: &'a [u8], event_time: EventTime) -> Record<'a> {
        Record { key: None, value: Some(value), event_time, headers: &[] }
    }

    /// A tombstone: `key` with a null value, which compaction removes (with the key's
    /// earlier records) once it has outlived `delete_retention_ms`.
    #[must_use]
    pub fn tombstone(key: &'a [u8], event_time: EventTime) -> Record<'a> {
        Record { key: Some(key), value: None, event_time, headers: &[] }
    }
}

/// Flags in the high bits of a stored record's `offset_delta` (a batch spans far fewer
/// than 2^30 offsets: its body is at most 1 GiB and a record takes at least 40 bytes).
/// Kept there so that the archived record stays 40 bytes and batches written before
/// null values existed read unchanged (their flags are clear).
pub(crate) mod delta_flags {
    /// The record's value is null (stored as an empty value).
    pub const NULL_VALUE: u32 = 1 << 31;
    /// Some header values are null: the record's last stored header is not a header but
    /// a bitmap (empty name; bit `i` of byte `i / 8` set for each null header `i`), and
    /// those headers' stored values are empty.
    pub const NULL_HEADER_VALUES: u32 = 1 << 30;
    /// The offset delta itself.
    pub const DELTA: u32 = (1 << 30) - 1;
}

/// The stored shape of a header (both parts non-null; see [`delta_flags`]).
#[derive(Archive, Serialize, Debug)]
pub struct WireHeader<'a> {
    #[rkyv(with = InlineAsBox)]
    pub(crate) key: &'a str,
    #[rkyv(with = InlineAsBox)]
    pub(crate) value: &'a [u8],
}

/// The stored shape of a record. Field order is layout: the 8-byte time first, so the
/// archived record (40 bytes before its data) has no padding.
#[derive(Archive, Serialize, Debug)]
pub struct WireRecord<'a> {
    pub(crate) event_time: i64,
    /// The offset delta, with [`delta_flags`] in its high bits.
    pub(crate) offset_delta: u32,
    #[rkyv(with = Map<InlineAsBox>)]
    pub(crate) key: Option<&'a [u8]>,
    #[rkyv(with = InlineAsBox)]
    pub(crate) value: &'a [u8],
    #[rkyv(with = InlineAsBox)]
    pub(crate) headers: &'a [WireHeader<'a>],
}

/// The stored shape of a batch body: the root of the rkyv archive.
#[derive(Archive, Serialize, Debug)]
pub struct WireBody<'a> {
    #[rkyv(with = InlineAsBox)]
    pub(crate) records: &'a [WireRecord<'a>],
}

/// The archived body as it lies in a buffer.
pub type ArchivedBody = ArchivedWireBody<'static>;
/// An archived record as it lies in a buffer.
pub type ArchivedRecord = ArchivedWireRecord<'static>;

/// A record read in place from a batch: every slice points into the read buffer.
#[derive(Copy, Clone)]
pub struct RecordView<'a> {
    offset: Offset,
    raw: &'a ArchivedRecord,
}

impl<'a> RecordView<'a> {
    pub(crate) fn new(base: Offset, raw: &'a ArchivedRecord) -> RecordView<'a> {
        let delta = raw.offset_delta.to_native() & delta_flags::DELTA;
        RecordView { offset: base.plus(u64::from(delta)), raw }
    }

    fn flags(&self) -> u32 {
        self.raw.offset_delta.to_native() & !delta_flags::DELTA
    }

    /// The record's offset.
    #[must_use]
    pub fn offset(&self) -> Offset {
        self.offset
    }

    /// The record's event time.
    #[must_use]
    pub fn event_time(&self) -> EventTime {
        Timestamp(self.raw.event_time.to_native())
    }

    /// The key, if any.
    #[must_use]
    pub fn key(&self) -> Option<&'a [u8]> {
        self.raw.key.as_ref().map(|k| k.get())
    }

    /// The value; `None` for a null value (a tombstone).
    #[must_use]
    pub fn value(&self) -> Option<&'a [u8]> {
        (self.flags() & delta_flags::NULL_VALUE == 0).then(|| self.raw.value.get())
    }

    /// The value's bytes, empty for a null value: for readers to whom the two mean the same.
    #[must_use]
    pub fn value_bytes(&self) -> &'a [u8] {
        self.raw.value.get()
    }

    /// True for a key with a null value: what compaction treats as a delete.
    #[must_use]
    pub fn is_tombstone(&self) -> bool {
        self.key().is_some() && self.value().is_none()
    }

    /// The headers, in order.
    pub fn headers(&self) -> impl ExactSizeIterator<Item = Header<'a>> + 'a {
        let stored = self.raw.headers.get();
        let (headers, nulls): (_, &'a [u8]) = match stored.split_last() {
            Some((bitmap, rest)) if self.flags() & delta_flags::NULL_HEADER_VALUES != 0 => (rest, bitmap.value.get()),
            _ => (stored, &[]),
        };
        headers.iter().enumerate().map(move |(i, h)| {
            let null = nulls.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0);
            Header { key: h.key.get(), value: (!null).then(|| h.value.get()) }
        })
    }

    /// A `Record` borrowing this view's bytes, e.g. to append it elsewhere. Headers
    /// are not carried (they would need an owned slice); use `headers()` for them.
    #[must_use]
    pub fn as_record(&self) -> Record<'a> {
        Record { key: self.key(), value: self.value(), event_time: self.event_time(), headers: &[] }
    }
}

impl std::fmt::Debug for RecordView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordView")
            .field("offset", &self.offset)
            .field("event_time", &self.event_time())
            .field("key", &self.key())
            .field("value_len", &self.value().map(<[u8]>::len))
            .finish()
    }
}
