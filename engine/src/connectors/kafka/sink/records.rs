//! The records a [`KafkaSink`](super::KafkaSink) writes: [`OutRecord`] and the epoch's
//! [`KafkaTxn`], with their [`Data`] encoding (a txn goes into the checkpoint whole).

use sluice_io::EventTime;

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
    /// The value.
    pub value: Vec<u8>,
    /// The Kafka timestamp in ms since the epoch; `None` lets the producer stamp it.
    pub timestamp: Option<i64>,
}

impl OutRecord {
    /// A record without a timestamp.
    #[must_use]
    pub fn new(key: Option<Vec<u8>>, value: Vec<u8>) -> Self {
        OutRecord { key, value, timestamp: None }
    }

    /// With timestamp `time` (typically the element's event time).
    #[must_use]
    pub fn at(mut self, time: EventTime) -> Self {
        self.timestamp = Some(time.millis());
        self
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

impl Data for OutRecord {
    fn encode(&self, out: &mut Vec<u8>) {
        match &self.key {
            Some(k) => {
                out.push(1);
                encode_bytes(k, out);
            }
            None => out.push(0),
        }
        encode_bytes(&self.value, out);
        self.timestamp.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let key = match u8::decode(input)? {
            0 => None,
            1 => Some(decode_bytes(input, "a Kafka record key")?),
            t => return Err(StateError(format!("a Kafka record key tag {t}"))),
        };
        let value = decode_bytes(input, "a Kafka record value")?;
        let timestamp = Option::<i64>::decode(input)?;
        Ok(OutRecord { key, value, timestamp })
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
