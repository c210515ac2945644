//! The records host code and the Kafka listener hand to the engine: [`OwnedRecord`] (owned,
//! so it can cross threads), [`PackedRecords`] (many records in one buffer, as a decoded
//! Kafka batch is), and `AppendRecords`, either of them as one append. Value types only:
//! the shard loop, the producers and the Kafka decoder all use them, and none of them owns
//! them.

use sluice_io::{Header, Record, Timestamp};

use crate::error::{EngineError, Result};

/// A record header, owned: a name and a value that may be null (as in Kafka).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OwnedHeader {
    /// The header's name.
    pub key: String,
    /// The value; `None` is null, distinct from empty.
    pub value: Option<Vec<u8>>,
}

impl OwnedHeader {
    /// A header with a value.
    #[must_use]
    pub fn new(key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        OwnedHeader { key: key.into(), value: Some(value.into()) }
    }

    /// An owned copy of a borrowed header.
    #[must_use]
    pub fn from_header(h: &Header<'_>) -> Self {
        OwnedHeader { key: h.key.to_owned(), value: h.value.map(<[u8]>::to_vec) }
    }

    pub(crate) fn as_header(&self) -> Header<'_> {
        Header { key: &self.key, value: self.value.as_deref() }
    }

    fn size(&self) -> usize {
        self.key.len() + self.value.as_ref().map_or(0, Vec::len)
    }
}

/// A record handed to the engine: owned, so it can cross threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedRecord {
    /// The key, if any.
    pub key: Option<Vec<u8>>,
    /// The value; `None` is a null value (a tombstone in a compacted topic), distinct
    /// from an empty one.
    pub value: Option<Vec<u8>>,
    /// When the event happened.
    pub event_time: Timestamp,
    /// Headers, in order (names may repeat).
    pub headers: Vec<OwnedHeader>,
}

impl OwnedRecord {
    /// A record with a value and no headers.
    #[must_use]
    pub fn new(key: Option<Vec<u8>>, value: impl Into<Vec<u8>>, event_time: Timestamp) -> Self {
        OwnedRecord { key, value: Some(value.into()), event_time, headers: Vec::new() }
    }

    /// A tombstone: `key` with a null value.
    #[must_use]
    pub fn tombstone(key: impl Into<Vec<u8>>, event_time: Timestamp) -> Self {
        OwnedRecord { key: Some(key.into()), value: None, event_time, headers: Vec::new() }
    }

    /// The record with one more header.
    #[must_use]
    pub fn with_header(mut self, key: impl Into<String>, value: Option<Vec<u8>>) -> Self {
        self.headers.push(OwnedHeader { key: key.into(), value });
        self
    }

    /// An owned copy of a record read from a log.
    #[must_use]
    pub fn from_view(r: &sluice_io::RecordView<'_>) -> Self {
        OwnedRecord {
            key: r.key().map(<[u8]>::to_vec),
            value: r.value().map(<[u8]>::to_vec),
            event_time: r.event_time(),
            headers: r.headers().map(|h| OwnedHeader::from_header(&h)).collect(),
        }
    }

    /// Key, value and header bytes, the size limits apply to.
    #[must_use]
    pub fn size(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len)
            + self.value.as_ref().map_or(0, Vec::len)
            + self.headers.iter().map(OwnedHeader::size).sum::<usize>()
    }

    /// The records as the log takes them; their headers are laid out in `headers`.
    pub(crate) fn as_records<'a>(records: &'a [OwnedRecord], headers: &'a mut Vec<Header<'a>>) -> Vec<Record<'a>> {
        headers.extend(records.iter().flat_map(|r| r.headers.iter().map(OwnedHeader::as_header)));
        let headers: &'a [Header<'a>] = headers;
        let mut at = 0;
        records
            .iter()
            .map(|r| {
                let span = &headers[at..at + r.headers.len()];
                at += r.headers.len();
                Record { key: r.key.as_deref(), value: r.value.as_deref(), event_time: r.event_time, headers: span }
            })
            .collect()
    }
}

/// Records whose keys, values and headers are ranges of one shared buffer, such as a
/// Kafka record batch as it arrived: appended with no allocation or copy per record
/// before the log encodes them. Cheap to clone and to send to another shard (the buffer
/// is shared).
#[derive(Clone, Debug, Default)]
pub struct PackedRecords {
    data: bytes::Bytes,
    records: Vec<PackedRecord>,
    /// Every record's headers, in record order; a record holds a span of them.
    headers: Vec<PackedHeader>,
}

/// 32 bytes: offsets into the buffer (at most 4 GiB), a start of `NULL` for a null key
/// or value, and the record's span of the header list.
#[derive(Clone, Copy, Debug)]
struct PackedRecord {
    key: (u32, u32),
    value: (u32, u32),
    event_time: Timestamp,
    headers: (u32, u32),
}

/// A header's name and value as ranges of the buffer (value start `NULL` for null).
#[derive(Clone, Copy, Debug)]
struct PackedHeader {
    key: (u32, u32),
    value: (u32, u32),
}

const NULL: u32 = u32::MAX;

/// Whether a ranged field is present (not null).
fn present((start, _): (u32, u32)) -> bool {
    start != NULL
}

fn span_len((a, b): (u32, u32)) -> usize {
    if a == NULL { 0 } else { (b - a) as usize }
}

impl PackedRecords {
    /// No records yet, over `data`, with room for `capacity` of them.
    #[must_use]
    pub fn with_capacity(data: bytes::Bytes, capacity: usize) -> Self {
        PackedRecords { data, records: Vec::with_capacity(capacity), headers: Vec::new() }
    }

    fn check(&self, r: &std::ops::Range<usize>) -> Result<(u32, u32)> {
        let len = self.data.len();
        match (u32::try_from(r.start), u32::try_from(r.end)) {
            (Ok(start), Ok(end)) if start <= end && r.end <= len && start != NULL => Ok((start, end)),
            _ => Err(EngineError::InvalidConfig(format!("record bytes {r:?} lie outside a buffer of {len} bytes"))),
        }
    }

    fn check_opt(&self, r: Option<&std::ops::Range<usize>>) -> Result<(u32, u32)> {
        r.map_or(Ok((NULL, NULL)), |r| self.check(r))
    }

    /// Adds a record whose key (if any) and value (if not null) are ranges of the
    /// buffer; refused if a range does not lie within it. The record gets the headers
    /// pushed since the previous record ([`push_header`](Self::push_header)).
    pub fn push(
        &mut self,
        key: Option<std::ops::Range<usize>>,
        value: Option<std::ops::Range<usize>>,
        event_time: Timestamp,
    ) -> Result<()> {
        let key = self.check_opt(key.as_ref())?;
        let value = self.check_opt(value.as_ref())?;
        let headers = self.pending_headers();
        self.records.push(PackedRecord { key, value, event_time, headers });
        Ok(())
    }

    /// Adds a header, by ranges of the buffer, to the next record pushed; refused if a
    /// range does not lie within the buffer or the name is not UTF-8.
    pub fn push_header(&mut self, key: std::ops::Range<usize>, value: Option<std::ops::Range<usize>>) -> Result<()> {
        let k = self.check(&key)?;
        std::str::from_utf8(&self.data[key.clone()])
            .map_err(|_| EngineError::InvalidConfig(format!("header name at {key:?} is not UTF-8")))?;
        let value = self.check_opt(value.as_ref())?;
        self.headers.push(PackedHeader { key: k, value });
        Ok(())
    }

    /// The headers pushed since the last record, as that record's span.
    fn pending_headers(&self) -> (u32, u32) {
        let start = self.records.last().map_or(0, |r| r.headers.1);
        (start, self.headers.len() as u32)
    }

    /// [`push`](Self::push) for ranges the caller took from the buffer itself (slices of
    /// it, as a decoder does), over a buffer shorter than `u32::MAX`: nothing to check.
    #[inline]
    pub(crate) fn push_within(
        &mut self,
        key: Option<std::ops::Range<usize>>,
        value: Option<std::ops::Range<usize>>,
        event_time: Timestamp,
    ) {
        debug_assert!(self.data.len() < NULL as usize);
        debug_assert!(key.iter().chain(&value).all(|r| r.start <= r.end && r.end <= self.data.len()));
        let span = |r: Option<std::ops::Range<usize>>| r.map_or((NULL, NULL), |r| (r.start as u32, r.end as u32));
        let headers = if self.headers.is_empty() { (0, 0) } else { self.pending_headers() };
        self.records.push(PackedRecord { key: span(key), value: span(value), event_time, headers });
    }

    /// [`push_header`](Self::push_header) for a name the caller took from the buffer and
    /// checked to be UTF-8.
    #[inline]
    pub(crate) fn push_header_within(&mut self, key: std::ops::Range<usize>, value: Option<std::ops::Range<usize>>) {
        debug_assert!(std::str::from_utf8(&self.data[key.clone()]).is_ok());
        let value = value.map_or((NULL, NULL), |r| (r.start as u32, r.end as u32));
        self.headers.push(PackedHeader { key: (key.start as u32, key.end as u32), value });
    }

    /// How many records.
    #[must_use]
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Each record's key, value and header bytes (what the size limit applies to).
    pub(crate) fn sizes(&self) -> impl Iterator<Item = usize> + '_ {
        self.records.iter().map(move |r| {
            let headers = self.headers[r.headers.0 as usize..r.headers.1 as usize].iter();
            span_len(r.key) + span_len(r.value) + headers.map(|h| span_len(h.key) + span_len(h.value)).sum::<usize>()
        })
    }

    /// Whether each record has a key (not null), in order.
    pub(crate) fn keyed(&self) -> impl Iterator<Item = bool> + '_ {
        self.records.iter().map(|r| present(r.key))
    }

    fn bytes(&self, r: (u32, u32)) -> Option<&[u8]> {
        present(r).then(|| &self.data[r.0 as usize..r.1 as usize])
    }

    /// The records as the log takes them, borrowing the buffer; their headers are laid
    /// out in `headers`.
    pub fn records<'a>(&'a self, headers: &'a mut Vec<Header<'a>>) -> Vec<Record<'a>> {
        headers.extend(self.headers.iter().map(|h| Header {
            // Checked to be UTF-8 when pushed.
            key: std::str::from_utf8(self.bytes(h.key).unwrap_or_default()).unwrap_or_default(),
            value: self.bytes(h.value),
        }));
        let headers: &'a [Header<'a>] = headers;
        self.records
            .iter()
            .map(|r| Record {
                key: self.bytes(r.key),
                value: self.bytes(r.value),
                event_time: r.event_time,
                headers: &headers[r.headers.0 as usize..r.headers.1 as usize],
            })
            .collect()
    }

    /// The records as owned ones (for tests and for callers that want to keep them).
    #[must_use]
    pub fn to_owned_records(&self) -> Vec<OwnedRecord> {
        let mut headers = Vec::new();
        self.records(&mut headers)
            .iter()
            .map(|r| OwnedRecord {
                key: r.key.map(<[u8]>::to_vec),
                value: r.value.map(<[u8]>::to_vec),
                event_time: r.event_time,
                headers: r.headers.iter().map(OwnedHeader::from_header).collect(),
            })
            .collect()
    }
}

/// The records of an append: owned one by one, or packed in one buffer.
#[derive(Debug)]
pub(crate) enum AppendRecords {
    Owned(Vec<OwnedRecord>),
    Packed(PackedRecords),
}

impl AppendRecords {
    /// Each record's key, value and header bytes, which the size limit applies to.
    pub(crate) fn sizes(&self) -> impl Iterator<Item = usize> + '_ {
        let (owned, packed) = match self {
            AppendRecords::Owned(v) => (Some(v.iter().map(OwnedRecord::size)), None),
            AppendRecords::Packed(p) => (None, Some(p.sizes())),
        };
        owned.into_iter().flatten().chain(packed.into_iter().flatten())
    }

    /// Whether each record has a key (not null), in order.
    pub(crate) fn keyed(&self) -> impl Iterator<Item = bool> + '_ {
        let (owned, packed) = match self {
            AppendRecords::Owned(v) => (Some(v.iter().map(|r| r.key.is_some())), None),
            AppendRecords::Packed(p) => (None, Some(p.keyed())),
        };
        owned.into_iter().flatten().chain(packed.into_iter().flatten())
    }

    pub(crate) fn is_empty(&self) -> bool {
        match self {
            AppendRecords::Owned(v) => v.is_empty(),
            AppendRecords::Packed(p) => p.is_empty(),
        }
    }

    /// The records as the log takes them; their headers are laid out in `headers`.
    pub(crate) fn as_records<'a>(&'a self, headers: &'a mut Vec<Header<'a>>) -> Vec<Record<'a>> {
        match self {
            AppendRecords::Owned(v) => OwnedRecord::as_records(v, headers),
            AppendRecords::Packed(p) => p.records(headers),
        }
    }
}
