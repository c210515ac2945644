//! Criterion micro-benchmark of window aggregation: a one-shard pipeline counting 200 000
//! in-order events per key (1 000 keys) in tumbling and sliding windows, from generator to
//! a counting sink. Each iteration runs a whole pipeline (its executor's start and end
//! included, a few hundred microseconds). Under `cargo test --benches` each runs once, so
//! a broken benchmark fails CI; the headline figures come from `sluice-bench pipeline`.

use std::{
    hint::black_box,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sluice_engine::dataflow::{Generator, Pipeline, PipelineConfig, WatermarkStrategy, Windows};
use sluice_io::EventTime;

const EVENTS: u64 = 200_000;

/// Runs the count once and returns the sum of all window counts.
fn count(windows: Windows) -> u64 {
    let total = Arc::new(AtomicU64::new(0));
    let sink = total.clone();
    Pipeline::new(PipelineConfig::with_shards(1))
        .run(move |scope| {
            let sink = sink.clone();
            scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), EVENTS, |i| i),
                    WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(5), |i: &u64| {
                        EventTime::from_millis((*i / 100) as i64)
                    }),
                )
                .key_by(|i| i % 1000)
                .window(windows)
                .count()
                .for_each(move |e| {
                    sink.fetch_add(e.value.value, Ordering::Relaxed);
                });
        })
        .expect("pipeline");
    total.load(Ordering::Relaxed)
}

fn window(c: &mut Criterion) {
    let mut g = c.benchmark_group("window_count");
    g.throughput(Throughput::Elements(EVENTS));
    g.sample_size(10);
    g.bench_function("tumbling_200k_events_1k_keys", |b| {
        b.iter(|| assert_eq!(black_box(count(Windows::Tumbling { size: 100, offset: 0 })), EVENTS))
    });
    g.bench_function("sliding_4_panes_200k_events_1k_keys", |b| {
        // Every event is in four windows.
        b.iter(|| assert_eq!(black_box(count(Windows::Sliding { size: 100, slide: 25 })), 4 * EVENTS))
    });
    g.finish();
}

criterion_group!(benches, window);
criterion_main!(benches);
