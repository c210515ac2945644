//! Criterion micro-benchmarks of the record batch: encode, CRC, validated in-place
//! access. Under `cargo test --benches` each runs once with its inputs, so a broken
//! benchmark fails CI; real figures come from `cargo bench`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rkyv::util::AlignedVec;
use sluice_io::record::{BatchEncoder, BatchMeta, BatchView, batch_crc, check_batch};
use sluice_io::{Offset, Record, Timestamp};

const RECORDS: usize = 1000;
const VALUE_BYTES: usize = 100;

fn codec(c: &mut Criterion) {
    let values: Vec<Vec<u8>> = (0..RECORDS).map(|i| vec![(i % 251) as u8; VALUE_BYTES]).collect();
    let keys: Vec<Vec<u8>> = (0..RECORDS).map(|i| format!("key-{i:08}").into_bytes()).collect();
    let recs: Vec<Record<'_>> =
        values.iter().zip(&keys).enumerate().map(|(i, (v, k))| Record::keyed(k, v, Timestamp(i as i64))).collect();
    let mut g = c.benchmark_group("batch");
    g.throughput(Throughput::Elements(RECORDS as u64));
    let mut enc = BatchEncoder::new();
    g.bench_function("encode_1000x100B", |b| {
        b.iter(|| {
            let (bytes, _) = enc.encode(black_box(&recs), &BatchMeta::default(), Offset(0)).expect("encode");
            black_box(bytes.len())
        })
    });
    let stored: AlignedVec = {
        let (bytes, _) = enc.encode(&recs, &BatchMeta::default(), Offset(0)).expect("encode");
        let mut v = AlignedVec::new();
        v.extend_from_slice(bytes);
        v
    };
    g.bench_function("crc_1000x100B", |b| b.iter(|| black_box(batch_crc(&stored[..64], &stored[64..]))));
    g.bench_function("check_and_access_1000x100B", |b| {
        b.iter(|| {
            let view = BatchView::new(black_box(&stored)).expect("valid batch");
            let mut sum = 0usize;
            for r in view.records() {
                sum += r.value_bytes().len();
            }
            black_box(sum)
        })
    });
    g.bench_function("header_and_crc_only_1000x100B", |b| b.iter(|| black_box(check_batch(&stored).expect("valid"))));
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
