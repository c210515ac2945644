//! Criterion benchmark of appending to the partition log through io_uring on the real
//! disk (a glommio executor per measurement; its start-up is outside the timing).

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sluice_io::{FsyncPolicy, Log, LogConfig, Record, Timestamp, UringStorage};

const BATCH: usize = 100;
const LARGE_BATCH: usize = 10_000;
const VALUE_BYTES: usize = 100;

fn append_batches(batches: u64, batch: usize, fsync: FsyncPolicy) -> Duration {
    let dir = std::env::temp_dir().join(format!("sluice-bench-append-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let elapsed = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(1 << 20)
        .spawn({
            let dir = dir.clone();
            move || async move {
                let config = LogConfig { fsync, segment_bytes_max: 64 << 20, ..LogConfig::default() };
                let (log, _) = Log::open(UringStorage, &dir, config).await.expect("open log");
                let value = vec![7u8; VALUE_BYTES];
                let recs: Vec<Record<'_>> = (0..batch).map(|i| Record::unkeyed(&value, Timestamp(i as i64))).collect();
                let start = Instant::now();
                for _ in 0..batches {
                    log.append(&recs).await.expect("append");
                }
                log.flush().await.expect("flush");
                start.elapsed()
            }
        })
        .expect("spawn executor")
        .join()
        .expect("executor");
    let _ = std::fs::remove_dir_all(&dir);
    elapsed
}

fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("segment_append");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.sample_size(10);
    g.bench_function("append_100x100B_fsync_never", |b| {
        b.iter_custom(|n| append_batches(n, BATCH, FsyncPolicy::Never))
    });
    g.bench_function("append_100x100B_fsync_always", |b| {
        b.iter_custom(|n| append_batches(n, BATCH, FsyncPolicy::Always))
    });
    g.finish();
    // Batches of the size a Kafka client sends (about 1 MB), where encoding and copying
    // the bytes, not the append's round trip, is the cost.
    let mut g = c.benchmark_group("segment_append_large");
    g.throughput(Throughput::Elements(LARGE_BATCH as u64));
    g.sample_size(10);
    g.bench_function("append_10000x100B_fsync_never", |b| {
        b.iter_custom(|n| append_batches(n, LARGE_BATCH, FsyncPolicy::Never))
    });
    g.finish();
}

criterion_group!(benches, append);
criterion_main!(benches);
