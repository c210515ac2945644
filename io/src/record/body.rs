//! The rkyv-archived batch body, and the borrowed views a reader gets of it.
//!
//! The writer serializes borrowed records (`WireRecord`, built from the caller's
//! slices, so a send copies each byte once: into the batch). The reader accesses the
//! archived form in place; nothing is deserialized.

use rkyv::with::{InlineAsBox, Map};
use rkyv::{Archive, Serialize};

use crate::types::{EventTime, Offset, Timestamp};

/// A record header: a string key and a byte value. Stored as is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Archive, Serialize)]
pub struct Header<'a> {
    /// The header's name.
    #[rkyv(with = InlineAsBox)]
    pub key: &'a str,
    /// The header's value.
    #[rkyv(with = InlineAsBox)]
    pub value: &'a [u8],
}

/// A record as a producer hands it to the log: borrowed bytes, nothing copied yet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Optional key (used for partitioning and compaction).
    pub key: Option<&'a [u8]>,
    /// The value. An empty value with a key is a tombstone in a compacted topic.
    pub value: &'a [u8],
    /// When the event happened.
    pub event_time: EventTime,
    /// Optional headers.
    pub headers: &'a [Header<'a>],
}

impl<'a> Record<'a> {
    /// A record with a key.
    #[must_use]
    pub fn keyed(key: &'a [u8], value: &'a [u8], event_time: EventTime) -> Record<'a> {
        Record { key: Some(key), value, event_time, headers: &[] }
    }

    /// A record without a key.
    #[must_use]
    pub fn unkeyed(value: &'a [u8], event_time: EventTime) -> Record<'a> {
        Record { key: None, value, event_time, headers: &[] }
    }
}

/// The stored shape of a record. Field order is layout: the 8-byte time first, so the
/// archived record (40 bytes before its data) has no padding.
#[derive(Archive, Serialize, Debug)]
pub struct WireRecord<'a> {
    pub(crate) event_time: i64,
    pub(crate) offset_delta: u32,
    #[rkyv(with = Map<InlineAsBox>)]
    pub(crate) key: Option<&'a [u8]>,
    #[rkyv(with = InlineAsBox)]
    pub(crate) value: &'a [u8],
    #[rkyv(with = InlineAsBox)]
    pub(crate) headers: &'a [Header<'a>],
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
        RecordView { offset: base.plus(u64::from(raw.offset_delta.to_native())), raw }
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

    /// The value.
    #[must_use]
    pub fn value(&self) -> &'a [u8] {
        self.raw.value.get()
    }

    /// The headers, in order.
    pub fn headers(&self) -> impl ExactSizeIterator<Item = Header<'a>> + 'a {
        self.raw.headers.get().iter().map(|h| Header { key: h.key.get(), value: h.value.get() })
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
            .field("value_len", &self.value().len())
            .finish()
    }
}
