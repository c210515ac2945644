//! Criterion micro-benchmark of the Kafka listener's produce decoding: one Kafka record
//! batch v2 of 1 000 records of 100 bytes (what a client's produce request carries),
//! checked and split into records. `packed` is what the listener does: the records stay
//! ranges of the request's bytes (`PackedRecords`). `packed_then_copied` adds what it did
//! before: a vector per value, as `OwnedRecord`s. Under `cargo test --benches` each runs
//! once, so a broken benchmark fails CI.

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use sluice_engine::kafka::records::decode_produced;

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

criterion_group!(benches, decode);
criterion_main!(benches);
