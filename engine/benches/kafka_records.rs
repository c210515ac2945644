//! Criterion micro-benchmark of the Kafka listener's produce decoding: one Kafka record
//! batch v2 of 1 000 records of 100 bytes (what a client's produce request carries),
//! checked and split into records. `packed` is what the listener does: the records stay
//! ranges of the request's bytes (`PackedRecords`). `packed_then_copied` adds what it did
//! before: a vector per value, as `OwnedRecord`s. `kafka_produce_decode_compressed` is
//! `packed` for the same batch compressed with each codec (the records inflated first);
//! `kafka_fetch_encode` is the way back, a stored batch of those records sent as a Kafka
//! batch compressed with each codec, what a fetch pays per batch for a topic's
//! `compression.type`. Under `cargo test --benches` each runs once, so a broken benchmark
//! fails CI.

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use sluice_engine::kafka::compression::{Codec, compress};
use sluice_engine::kafka::records::{decode_produced, encode_compressed};
use sluice_io::record::{BatchEncoder, BatchMeta, BatchView};
use sluice_io::{Offset, Timestamp};

const CODECS: [Codec; 5] = [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd];

const RECORDS: usize = 1000;
const VALUE_BYTES: usize = 100;

fn batch() -> Bytes {
    let records: Vec<Record> = (0..RECORDS)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // Kafka's encoder starts a new batch where offset minus sequence changes:
            // one batch, base sequence -1 (no idempotence).
            sequence: i as i32 - 1,
            timestamp: 1_700_000_000_000 + i as i64,
            key: None,
            value: Some(Bytes::from(format!("{i:0width$}", width = VALUE_BYTES))),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let opts = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut buf, records.iter(), &opts).expect("a batch the crate encodes");
    buf.freeze()
}

fn decode(c: &mut Criterion) {
    let bytes = batch();
    let mut group = c.benchmark_group("kafka_produce_decode");
    group.throughput(Throughput::Elements(RECORDS as u64));
    group.bench_function("packed", |b| {
        b.iter(|| {
            let batch = decode_produced(black_box(&bytes), 8 << 20).expect("decodes");
            black_box(batch.records.len())
        });
    });
    group.bench_function("packed_then_copied", |b| {
        b.iter(|| {
            let batch = decode_produced(black_box(&bytes), 8 << 20).expect("decodes");
            black_box(batch.records.to_owned_records())
        });
    });
    group.finish();
}

/// `plain` with its records section compressed by `codec`, as a producer sends it.
fn compressed(plain: &[u8], codec: Codec) -> Bytes {
    let mut b = BytesMut::from(&plain[..61]);
    compress(codec, &plain[61..], &mut b);
    let attributes = i16::from_be_bytes([b[21], b[22]]) | i16::from(codec.id());
    b[21..23].copy_from_slice(&attributes.to_be_bytes());
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

fn decode_compressed(c: &mut Criterion) {
    let plain = batch();
    let mut group = c.benchmark_group("kafka_produce_decode_compressed");
    group.throughput(Throughput::Elements(RECORDS as u64));
    for codec in CODECS {
        let bytes = compressed(&plain, codec);
        group.bench_function(codec.name(), |b| {
            b.iter(|| {
                let batch = decode_produced(black_box(&bytes), 8 << 20).expect("decodes");
                black_box(batch.records.len())
            });
        });
    }
    group.finish();
}

fn fetch_encode(c: &mut Criterion) {
    let values: Vec<String> = (0..RECORDS).map(|i| format!("{i:0width$}", width = VALUE_BYTES)).collect();
    let records: Vec<sluice_io::Record<'_>> = values
        .iter()
        .enumerate()
        .map(|(i, v)| sluice_io::Record::unkeyed(v.as_bytes(), Timestamp(1_700_000_000_000 + i as i64)))
        .collect();
    let mut enc = BatchEncoder::new();
    let (stored, _) = enc.encode(&records, &BatchMeta::default(), Offset(0)).expect("encodes");
    let mut aligned = rkyv::util::AlignedVec::<16>::new();
    aligned.extend_from_slice(stored);
    let view = BatchView::new(&aligned).expect("a valid batch");
    let mut group = c.benchmark_group("kafka_fetch_encode");
    group.throughput(Throughput::Elements(RECORDS as u64));
    let (mut scratch, mut out) = (BytesMut::new(), BytesMut::new());
    for codec in CODECS {
        group.bench_function(codec.name(), |b| {
            b.iter(|| {
                out.clear();
                encode_compressed(black_box(view), codec, &mut scratch, &mut out);
                black_box(out.len())
            });
        });
    }
    group.finish();
}

criterion_group!(benches, decode, decode_compressed, fetch_encode);
criterion_main!(benches);
