//! Criterion micro-benchmarks of the ring between shards: moving one batch of 1 024
//! records through a ring and giving its vector back, on one thread (the per-message
//! cost: two ring operations and the recycling) and between two threads (throughput with
//! the cache lines crossing cores). Plain threads, no executor: this measures the ring
//! itself; `sluice-bench ring` measures it between pinned shards against a plain rtrb
//! ring. Under `cargo test --benches` each runs once, so a broken benchmark fails CI.

use std::{hint::black_box, time::Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sluice_engine::ring::{Message, RingConfig, TryRecvError, channel};

const RECORDS: usize = 1024;

fn same_thread(c: &mut Criterion) {
    let mut group = c.benchmark_group("ring");
    group.throughput(Throughput::Elements(RECORDS as u64));
    group.bench_function("batch_same_thread", |b| {
        let (mut tx, mut rx) = channel::<u64>(RingConfig::default());
        let mut batch: Vec<u64> = (0..RECORDS as u64).collect();
        b.iter(|| {
            let full = std::mem::take(&mut batch);
            tx.try_send(Message::data(full)).expect("room: the ring is drained every iteration");
            let Ok(Message::Data(got)) = rx.try_recv() else { panic!("the batch just sent") };
            let records = got.into_vec();
            black_box(records.len());
            rx.recycle(records);
            batch = tx.recycled().unwrap_or_default();
            batch.extend(0..RECORDS as u64);
        });
    });
    group.finish();
}

fn two_threads(c: &mut Criterion) {
    const BATCHES: u64 = 2_000;
    let mut group = c.benchmark_group("ring");
    group.throughput(Throughput::Elements(BATCHES * RECORDS as u64));
    group.sample_size(10);
    group.bench_function("batches_between_threads", |b| {
        b.iter_custom(|iters| {
            let mut total = std::time::Duration::ZERO;
            for _ in 0..iters {
                let (mut tx, mut rx) = channel::<u64>(RingConfig::default());
                let start = Instant::now();
                let producer = std::thread::spawn(move || {
                    for _ in 0..BATCHES {
                        let mut batch = tx.recycled().unwrap_or_default();
                        batch.extend(0..RECORDS as u64);
                        let mut message = Message::data(batch);
                        loop {
                            match tx.try_send(message) {
                                Ok(()) => break,
                                Err(e) => {
                                    message = e.into_inner();
                                    std::hint::spin_loop();
                                }
                            }
                        }
                    }
                });
                let mut received = 0;
                while received < BATCHES {
                    match rx.try_recv() {
                        Ok(Message::Data(batch)) => {
                            let records = batch.into_vec();
                            black_box(records.len());
                            rx.recycle(records);
                            received += 1;
                        }
                        Ok(_) => {}
                        Err(TryRecvError::Empty) => std::hint::spin_loop(),
                        Err(TryRecvError::Closed) => panic!("the producer sends every batch first"),
                    }
                }
                producer.join().expect("the producer thread");
                total += start.elapsed();
            }
            total
        });
    });
    group.finish();
}

criterion_group!(benches, same_thread, two_threads);
criterion_main!(benches);
