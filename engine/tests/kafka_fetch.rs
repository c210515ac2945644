//! Fetch over raw TCP (requests encoded and responses decoded with the `kafka-protocol`
//! crate): the response keeps to `max_bytes` and `partition_max_bytes` as Kafka's does
//! (KIP-74: the first batch of the first partition with data goes out whole, nothing past
//! a limit after it), counted in the bytes sent; and each batch goes out in the codec the
//! topic's `compression.type` names.

mod common;

use bytes::{Bytes, BytesMut};
use common::kafka::{RawClient, Served};
use futures_lite::future::block_on;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use sluice_engine::kafka::KafkaConfig;
use sluice_engine::kafka::records::decode_produced;
use sluice_engine::{CompressionType, OwnedRecord, TopicConfig};
use sluice_io::{BatchMeta, PartitionId, Timestamp};

/// Batches per partition, and bytes of each batch's one record.
const BATCHES: usize = 6;
const VALUE_BYTES: usize = 100_000;

impl Served {
    fn start(name: &str) -> Served {
        Served::launch("kafka_fetch", name, 2, KafkaConfig::new("127.0.0.1:0".parse().expect("address")))
    }

    fn connect(&self) -> Client {
        RawClient::connect(self.addr(), "test")
    }

    /// A topic of `partitions` partitions, each holding `BATCHES` batches of one record of
    /// `value(i)`.
    fn filled(&self, topic: &str, partitions: u32, compression: CompressionType, value: impl Fn(usize) -> Vec<u8>) {
        let h = self.handle();
        let config = TopicConfig { compression, ..TopicConfig::default() };
        block_on(h.create_topic(topic, partitions, Some(config))).expect("topic");
        for p in PartitionId::all(partitions) {
            for i in 0..BATCHES {
                let record = OwnedRecord::new(None, value(i), Timestamp(1000));
                block_on(h.append(topic, p, vec![record], BatchMeta::default())).expect("append");
            }
        }
    }
}

/// The raw client of `common::kafka`, with this file's requests.
type Client = RawClient;

impl Client {
    /// Fetch v11 of `topic` with `max_bytes`, for each (partition, offset,
    /// partition_max_bytes): the response frame's size, and each partition's records.
    fn fetch(&mut self, topic: &str, max_bytes: i32, parts: &[(i32, i64, i32)]) -> (usize, Vec<Bytes>) {
        let mut t = fetch_request::FetchTopic::default();
        t.topic = TopicName(StrBytes::from_string(topic.to_string()));
        for &(partition, offset, pmax) in parts {
            let mut p = fetch_request::FetchPartition::default();
            p.partition = partition;
            p.fetch_offset = offset;
            p.partition_max_bytes = pmax;
            p.log_start_offset = -1;
            t.partitions.push(p);
        }
        let mut r = FetchRequest::default();
        r.replica_id = BrokerId(-1);
        r.max_wait_ms = 100;
        r.min_bytes = 1;
        r.max_bytes = max_bytes;
        r.topics = vec![t];
        let (len, resp): (usize, FetchResponse) = self.call_sized(ApiKey::Fetch, 11, &r);
        let parts = resp.responses[0]
            .partitions
            .iter()
            .map(|p| {
                assert_eq!(p.error_code, 0, "partition {}", p.partition_index);
                p.records.clone().unwrap_or_default()
            })
            .collect();
        (len, parts)
    }
}

impl Client {
    /// Produce v7 of one batch to partition 0 of `topic`: the error code.
    fn produce(&mut self, topic: &str, batch: Bytes) -> i16 {
        let mut p = produce_request::PartitionProduceData::default();
        p.index = 0;
        p.records = Some(batch);
        let mut t = produce_request::TopicProduceData::default();
        t.name = TopicName(StrBytes::from_string(topic.to_string()));
        t.partition_data = vec![p];
        let mut r = ProduceRequest::default();
        r.acks = -1;
        r.timeout_ms = 5000;
        r.topic_data = vec![t];
        let (_, resp): (usize, ProduceResponse) = self.call_sized(ApiKey::Produce, 7, &r);
        resp.responses[0].partition_responses[0].error_code
    }
}

/// A batch of one record of `value`, its records section gzip-compressed as a producer
/// would send it.
fn gzip_batch(value: &[u8]) -> Bytes {
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
    use std::io::Write as _;
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: 1000,
        key: None,
        value: Some(Bytes::copy_from_slice(value)),
        headers: Default::default(),
    };
    let mut plain = BytesMut::new();
    let opts = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut plain, [record].iter(), &opts).expect("encodes");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain[61..]).expect("memory");
    let mut b = plain[..61].to_vec();
    b.extend_from_slice(&gz.finish().expect("memory"));
    b[22] |= 1;
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

/// How many batches `records` holds (each checked whole: length and, for uncompressed
/// ones, CRC).
fn batches(records: &Bytes) -> usize {
    let mut at = 0;
    let mut n = 0;
    while at < records.len() {
        let len = i32::from_be_bytes(records[at + 8..at + 12].try_into().expect("4 bytes")) as usize + 12;
        assert!(at + len <= records.len(), "a whole batch, never a part of one");
        if records[at + 22] & 0x7 == 0 {
            RecordBatchDecoder::decode(&mut records.slice(at..at + len)).expect("decodes, CRC checked");
        }
        at += len;
        n += 1;
    }
    n
}

/// Noise that does not compress: every batch's wire size is about its record's.
fn noise(i: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ i as u64;
    (0..VALUE_BYTES)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn max_bytes_bounds_the_response_past_its_first_batch() {
    let s = Served::start("max_bytes");
    s.filled("f", 3, CompressionType::Producer, noise);
    let mut c = s.connect();
    let all = |pmax: i32| [(0, 0, pmax), (1, 0, pmax), (2, 0, pmax)];
    // One batch as it goes out (a little larger than its record).
    let (_, parts) = c.fetch("f", 1, &all(1));
    let batch = parts[0].len() as i32;
    assert!((VALUE_BYTES..VALUE_BYTES + 200).contains(&(batch as usize)), "a batch of {batch} bytes");

    // librdkafka's test 0082: 20 MB per partition asked, 1 MB for the whole response.
    // Before, the first partition's whole read went out (19 MB in that test).
    let (frame, parts) = c.fetch("f", 2 * batch + batch / 2, &all(20_000_000));
    let sizes: Vec<usize> = parts.iter().map(Bytes::len).collect();
    assert_eq!(parts.iter().map(batches).collect::<Vec<_>>(), [2, 0, 0], "{sizes:?}");
    assert_eq!(sizes.iter().sum::<usize>(), 2 * batch as usize);
    assert!(frame < 2 * batch as usize + 1000, "the response frame is {frame} bytes");

    // Exactly room for three batches: all from the first partition, none from the others.
    let (_, parts) = c.fetch("f", 3 * batch, &all(20_000_000));
    assert_eq!(parts.iter().map(batches).collect::<Vec<_>>(), [3, 0, 0]);
    // Each partition's own limit: one batch each, in order.
    let (_, parts) = c.fetch("f", 3 * batch, &all(batch + batch / 2));
    assert_eq!(parts.iter().map(batches).collect::<Vec<_>>(), [1, 1, 1]);

    // A first batch larger than max_bytes goes out whole (the client makes progress), and
    // nothing after it.
    let (frame, parts) = c.fetch("f", 1000, &all(20_000_000));
    assert_eq!(parts.iter().map(batches).collect::<Vec<_>>(), [1, 0, 0]);
    assert!(frame > VALUE_BYTES && frame < VALUE_BYTES + 1000, "the response frame is {frame} bytes");
    // As does one larger than its partition's limit.
    let (_, parts) = c.fetch("f", 1_000_000, &all(1000));
    assert_eq!(parts.iter().map(batches).collect::<Vec<_>>(), [1, 0, 0]);
    // The first partition *with data* gets that: here partition 1, partition 0 being read
    // at its end.
    let end = BATCHES as i64;
    let (_, parts) = c.fetch("f", 1000, &[(0, end, 1000), (1, 0, 1000), (2, 0, 1000)]);
    assert_eq!(parts.iter().map(batches).collect::<Vec<_>>(), [0, 1, 0]);
    // A partition limit of 0 takes nothing past that first batch; what the response has
    // left goes to the next partition.
    let (_, parts) = c.fetch("f", 9 * batch + batch / 2, &[(0, 0, 1_000_000), (1, 0, 0), (2, 0, 1_000_000)]);
    assert_eq!(parts.iter().map(batches).collect::<Vec<_>>(), [6, 0, 3]);
}

#[test]
fn fetched_batches_are_compressed_as_the_topics_compression_type_says() {
    let s = Served::start("codecs");
    // Values that compress well: a zstd batch is a fraction of the stored one.
    let zeros = |i: usize| vec![i as u8; VALUE_BYTES];
    let topics = [
        ("producer", CompressionType::Producer, 0u8),
        ("uncompressed", CompressionType::Uncompressed, 0),
        ("gzip", CompressionType::Gzip, 1),
        ("snappy", CompressionType::Snappy, 2),
        ("lz4", CompressionType::Lz4, 3),
        ("zstd", CompressionType::Zstd, 4),
    ];
    let mut c = s.connect();
    for (topic, compression, codec) in topics {
        s.filled(topic, 1, compression, zeros);
        // The limit counts the bytes sent: more compressed batches fit than uncompressed
        // ones (as many as the partition's read from the log holds: it is bounded in
        // stored bytes, half as much again as the limit).
        let (_, parts) = c.fetch(topic, 3 * VALUE_BYTES as i32 + 1000, &[(0, 0, 20_000_000)]);
        let records = &parts[0];
        let want = if codec == 0 { 3 } else { 4 };
        assert_eq!(batches(records), want, "{topic}: {} bytes", records.len());
        assert!(codec == 0 || records.len() < VALUE_BYTES / 4, "{topic}: {} bytes", records.len());
        let mut at = 0;
        let mut i = 0;
        while at < records.len() {
            let len = i32::from_be_bytes(records[at + 8..at + 12].try_into().expect("4 bytes")) as usize + 12;
            let batch = records.slice(at..at + len);
            assert_eq!(batch[22] & 0x7, codec, "{topic}: batch {i}'s codec");
            // The batch as a producer would send it: its CRC and records check out, and
            // they inflate to the stored record.
            let decoded = decode_produced(&batch, 1 << 20).unwrap_or_else(|e| panic!("{topic}: {e:?}"));
            let recs = decoded.records.to_owned_records();
            assert_eq!((recs.len(), recs[0].value.as_deref().unwrap_or_default()), (1, zeros(i).as_slice()), "{topic}");
            at += len;
            i += 1;
        }
    }
    // With `producer`, a batch goes out in the codec it came in: a gzip batch produced
    // after the six the engine appended uncompressed.
    assert_eq!(c.produce("producer", gzip_batch(&zeros(6))), 0);
    let (_, parts) = c.fetch("producer", 20_000_000, &[(0, 0, 20_000_000)]);
    let mut at = 0;
    let mut codecs = Vec::new();
    while at < parts[0].len() {
        codecs.push(parts[0][at + 22] & 0x7);
        at += i32::from_be_bytes(parts[0][at + 8..at + 12].try_into().expect("4 bytes")) as usize + 12;
    }
    assert_eq!(codecs, [0, 0, 0, 0, 0, 0, 1]);
}
