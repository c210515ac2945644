//! The records host code and the Kafka listener hand to the engine: [`OwnedRecord`] (owned,
//! so it can cross threads), [`PackedRecords`] (many records in one buffer, as a decoded
//! Kafka batch is), and `AppendRecords`, either of them as one append. Value types only:
//! the shard loop, the producers and the Kafka decoder all use them, and none of them owns
//! them.

use sluice_io::{Record, Timestamp};

use crate::error::{EngineError, Result};

/// A record handed to the engine: owned, so it can cross threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedRecord {
    /// The key, if any.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Vec<u8>,
    /// When the event happened.
    pub event_time: Timestamp,
}

impl OwnedRecord {
    /// Key plus value bytes, the size limits apply to.
    #[must_use]
    pub fn size(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len) + self.value.len()
    }

    pub(crate) fn as_record(&self) -> Record<'_> {
        Record { key: self.key.as_deref(), value: &self.value, event_time: self.event_time, headers: &[] }
    }
}

/// Records whose keys and values are ranges of one shared buffer, such as a Kafka record
/// batch as it arrived: appended with no allocation or copy per record before the log
/// encodes them. Cheap to clone and to send to another shard (the buffer is shared).
#[derive(Clone, Debug, Default)]
pub struct PackedRecords {
    data: bytes::Bytes,
    records: Vec<PackedRecord>,
}

/// 24 bytes: offsets into the buffer (at most 4 GiB), a key start of `NO_KEY` for none.
#[derive(Clone, Copy, Debug)]
struct PackedRecord {
    key: (u32, u32),
    value: (u32, u32),
    event_time: Timestamp,
}

const NO_KEY: u32 = u32::MAX;

impl PackedRecords {
    /// No records yet, over `data`, with room for `capacity` of them.
    #[must_use]
    pub fn with_capacity(data: bytes::Bytes, capacity: usize) -> Self {
        PackedRecords { data, records: Vec::with_capacity(capacity) }
    }

    /// Adds a record whose key (if any) and value are ranges of the buffer; refused if a
    /// range does not lie within it.
    pub fn push(
        &mut self,
        key: Option<std::ops::Range<usize>>,
        value: std::ops::Range<usize>,
        event_time: Timestamp,
    ) -> Result<()> {
        let len = self.data.len();
        let check = |r: &std::ops::Range<usize>| match (u32::try_from(r.start), u32::try_from(r.end)) {
            (Ok(start), Ok(end)) if start <= end && r.end <= len && start != NO_KEY => Ok((start, end)),
            _ => Err(EngineError::InvalidConfig(format!("record bytes {r:?} lie outside a buffer of {len} bytes"))),
        };
        let key = key.as_ref().map_or(Ok((NO_KEY, NO_KEY)), check)?;
        let value = check(&value)?;
        self.records.push(PackedRecord { key, value, event_time });
        Ok(())
    }

    /// [`push`](Self::push) for ranges the caller took from the buffer itself (slices of
    /// it, as a decoder does), over a buffer shorter than `u32::MAX`: nothing to check.
    #[inline]
    pub(crate) fn push_within(
        &mut self,
        key: Option<std::ops::Range<usize>>,
        value: std::ops::Range<usize>,
        event_time: Timestamp,
    ) {
        debug_assert!(self.data.len() < NO_KEY as usize);
        debug_assert!(key.iter().chain([&value]).all(|r| r.start <= r.end && r.end <= self.data.len()));
        let key = key.map_or((NO_KEY, NO_KEY), |k| (k.start as u32, k.end as u32));
        self.records.push(PackedRecord { key, value: (value.start as u32, value.end as u32), event_time });
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

    /// Each record's key plus value bytes (what the size limit applies to), from its ranges.
    pub(crate) fn sizes(&self) -> impl Iterator<Item = usize> + '_ {
        let len = |(a, b): (u32, u32)| (b - a) as usize;
        self.records.iter().map(move |r| if r.key.0 == NO_KEY { 0 } else { len(r.key) } + len(r.value))
    }

    /// The records, borrowing the buffer.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Record<'_>> {
        let at = |(a, b): (u32, u32)| &self.data[a as usize..b as usize];
        self.records.iter().map(move |r| Record {
            key: (r.key.0 != NO_KEY).then(|| at(r.key)),
            value: at(r.value),
            event_time: r.event_time,
            headers: &[],
        })
    }

    /// The records as owned ones (for tests and for callers that want to keep them).
    #[must_use]
    pub fn to_owned_records(&self) -> Vec<OwnedRecord> {
        self.iter()
            .map(|r| OwnedRecord { key: r.key.map(<[u8]>::to_vec), value: r.value.to_vec(), event_time: r.event_time })
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
    /// Each record's key plus value bytes, which the size limit applies to.
    pub(crate) fn sizes(&self) -> impl Iterator<Item = usize> + '_ {
        let (owned, packed) = match self {
            AppendRecords::Owned(v) => (Some(v.iter().map(OwnedRecord::size)), None),
            AppendRecords::Packed(p) => (None, Some(p.sizes())),
        };
        owned.into_iter().flatten().chain(packed.into_iter().flatten())
    }

    pub(crate) fn is_empty(&self) -> bool {
        match self {
            AppendRecords::Owned(v) => v.is_empty(),
            AppendRecords::Packed(p) => p.is_empty(),
        }
    }

    pub(crate) fn as_records(&self) -> Vec<Record<'_>> {
        match self {
            AppendRecords::Owned(v) => v.iter().map(OwnedRecord::as_record).collect(),
            AppendRecords::Packed(p) => p.iter().collect(),
        }
    }
}
