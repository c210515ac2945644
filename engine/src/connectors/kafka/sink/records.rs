//! The records a [`KafkaSink`](super::KafkaSink) writes: [`OutRecord`] and the epoch's
//! [`KafkaTxn`], with their [`Data`] encoding (a txn goes into the checkpoint whole).

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;
use sluice_io::EventTime;

use crate::record::OwnedHeader;

use crate::dataflow::{
    Data,
    checkpoint::{StateError, take},
};

/// One output record: what the user's function makes of a stream element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutRecord {
    /// The key; the partition is chosen from it by Kafka's murmur2 partitioner (a record
    /// without a key goes to a random partition).
    pub key: Option<Vec<u8>>,
    /// The value; `None` is a null value (a tombstone), distinct from an empty one.
    pub value: Option<Vec<u8>>,
    /// The Kafka timestamp in ms since the epoch; `None` lets the producer stamp it.
    pub timestamp: Option<i64>,
    /// Headers, in order.
    pub headers: Vec<OwnedHeader>,
    /// The partition to write to; `None` (the usual) lets the key choose it.
    pub partition: Option<i32>,
}

impl OutRecord {
    /// A record with a value, without a timestamp or headers.
    #[must_use]
    pub fn new(key: Option<Vec<u8>>, value: Vec<u8>) -> Self {
        OutRecord { key, value: Some(value), timestamp: None, headers: Vec::new(), partition: None }
    }

    /// A tombstone: `key` with a null value.
    #[must_use]
    pub fn tombstone(key: Vec<u8>) -> Self {
        OutRecord { key: Some(key), value: None, timestamp: None, headers: Vec::new(), partition: None }
    }

    /// With timestamp `time` (typically the element's event time).
    #[must_use]
    pub fn at(mut self, time: EventTime) -> Self {
        self.timestamp = Some(time.millis());
        self
    }

    /// Written to partition `partition` whatever its key.
    #[must_use]
    pub fn to_partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// With one more header (`None`: a null value).
    #[must_use]
    pub fn with_header(mut self, key: impl Into<String>, value: Option<Vec<u8>>) -> Self {
        self.headers.push(OwnedHeader { key: key.into(), value });
        self
    }

    /// The record as librdkafka's producer takes it.
    pub(super) fn to_base_record<'a>(&'a self, topic: &'a str) -> BaseRecord<'a, [u8], [u8]> {
        let mut record = BaseRecord::<[u8], [u8]>::to(topic);
        if let Some(v) = &self.value {
            record = record.payload(&v[..]);
        }
        if let Some(k) = &self.key {
            record = record.key(&k[..]);
        }
        if let Some(ts) = self.timestamp {
            record = record.timestamp(ts);
        }
        if let Some(p) = self.partition {
            record = record.partition(p);
        }
        if !self.headers.is_empty() {
            let headers = self.headers.iter().fold(OwnedHeaders::new_with_capacity(self.headers.len()), |hs, h| {
                hs.insert(Header { key: &h.key, value: h.value.as_deref() })
            });
            record = record.headers(headers);
        }
        record
    }
}

fn encode_bytes(b: &[u8], out: &mut Vec<u8>) {
    (b.len() as u64).encode(out);
    out.extend_from_slice(b);
}

fn decode_bytes(input: &mut &[u8], what: &str) -> Result<Vec<u8>, StateError> {
    let len = u64::decode(input)?;
    let len = usize::try_from(len).map_err(|_| StateError(format!("{what} of {len} bytes")))?;
    Ok(take(input, len, what)?.to_vec())
}

/// The record's first byte: bit 0 a key follows; bit 1 the value is nullable and headers
/// follow the timestamp (records checkpointed before headers existed have it clear); bit 2
/// a partition follows the headers.
const TAG_KEY: u8 = 1;
const TAG_FULL: u8 = 2;
const TAG_PARTITION: u8 = 4;

impl Data for OutRecord {
    fn encode(&self, out: &mut Vec<u8>) {
        let partition = if self.partition.is_some() { TAG_PARTITION } else { 0 };
        out.push(TAG_FULL | partition | if self.key.is_some() { TAG_KEY } else { 0 });
        if let Some(k) = &self.key {
            encode_bytes(k, out);
        }
        self.value.encode(out);
        self.timestamp.encode(out);
        self.headers.encode(out);
        if let Some(p) = self.partition {
            p.encode(out);
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let tag = u8::decode(input)?;
        if tag & !(TAG_KEY | TAG_FULL | TAG_PARTITION) != 0 || tag & (TAG_FULL | TAG_PARTITION) == TAG_PARTITION {
            return Err(StateError(format!("a Kafka record tag {tag}")));
        }
        let key = if tag & TAG_KEY != 0 { Some(decode_bytes(input, "a Kafka record key")?) } else { None };
        let value = if tag & TAG_FULL != 0 {
            Option::<Vec<u8>>::decode(input)?
        } else {
            Some(decode_bytes(input, "a Kafka record value")?)
        };
        let timestamp = Option::<i64>::decode(input)?;
        let headers = if tag & TAG_FULL != 0 { Vec::decode(input)? } else { Vec::new() };
        let partition = if tag & TAG_PARTITION != 0 { Some(i32::decode(input)?) } else { None };
        Ok(OutRecord { key, value, timestamp, headers, partition })
    }
}

/// One epoch of one sink instance: the records themselves, so that any process can commit
/// it from the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaTxn {
    /// Numbered at pre-commit; increasing per origin shard across runs.
    pub epoch: u64,
    /// The shard that made it: names its transactional id and marker group.
    pub origin_shard: u32,
    /// The records, in order (empty in at-least-once mode, which sends them at once).
    pub records: Vec<OutRecord>,
}

impl Data for KafkaTxn {
    fn encode(&self, out: &mut Vec<u8>) {
        self.epoch.encode(out);
        self.origin_shard.encode(out);
        self.records.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(KafkaTxn { epoch: u64::decode(input)?, origin_shard: u32::decode(input)?, records: Vec::decode(input)? })
    }
}

#[cfg(test)]
mod out_record_tests {
    use super::*;

    #[test]
    fn records_round_trip_and_ones_checkpointed_before_headers_still_decode() {
        let r = OutRecord::tombstone(b"k".to_vec()).with_header("h", None).with_header("e", Some(Vec::new()));
        let mut out = Vec::new();
        r.encode(&mut out);
        assert_eq!(OutRecord::decode(&mut out.as_slice()).unwrap(), r);
        // The earlier layout: tag 1, key, value bytes, timestamp.
        let mut old = vec![TAG_KEY];
        encode_bytes(b"key", &mut old);
        encode_bytes(b"value", &mut old);
        Some(5i64).encode(&mut old);
        let decoded = OutRecord::decode(&mut old.as_slice()).unwrap();
        assert_eq!(decoded, OutRecord::new(Some(b"key".to_vec()), b"value".to_vec()).at(EventTime::from_millis(5)));
        assert!(OutRecord::decode(&mut [8u8].as_slice()).is_err(), "an unknown tag bit");
        assert!(OutRecord::decode(&mut [4u8].as_slice()).is_err(), "a partition without the full layout");
        let to = OutRecord::new(None, b"v".to_vec()).to_partition(3).with_header("h", Some(b"x".to_vec()));
        let mut out = Vec::new();
        to.encode(&mut out);
        assert_eq!(OutRecord::decode(&mut out.as_slice()).unwrap(), to);
    }
}
