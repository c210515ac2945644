//! Criterion micro-benchmark of keyed process state with a time to live: a one-shard
//! pipeline writes 200 000 in-order events into one value per key (100 000 keys, each
//! written twice, 1 ms of event time apart per 100 events), with plain `ValueState` and
//! with an event-time `TtlValueState` of 10 ms (so most keys expire while the run goes
//! on) swept 1 000 (the default) or 100 000 keys per watermark advance. What it shows:
//! the per-record cost of the stamp and the expiry check, and what a larger sweep costs.
//! Under `cargo test --benches` each runs once, so a broken benchmark fails CI.

use std::{
    hint::black_box,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sluice_engine::dataflow::{
    Data, Event, Generator, KeyedProcessFunction, KeyedState, Pipeline, PipelineConfig, ProcessContext, TimeDomain,
    TtlConfig, TtlPolicy, TtlValueState, ValueState, WatermarkStrategy,
};
use sluice_io::EventTime;

const EVENTS: u64 = 200_000;
const KEYS: u64 = 100_000;

/// 10 ms of event time, the default sweep.
struct Default10;
impl TtlPolicy for Default10 {
    const CONFIG: TtlConfig = TtlConfig::new(Duration::from_millis(10), TimeDomain::EventTime);
}

/// 10 ms of event time, 100 000 keys a sweep.
struct Wide10;
impl TtlPolicy for Wide10 {
    const CONFIG: TtlConfig = TtlConfig::new(Duration::from_millis(10), TimeDomain::EventTime).sweep_keys(100_000);
}

/// A value state the function can write and read.
trait Slot: KeyedState + Default + Data + 'static {
    fn bump(&mut self, ctx: &ProcessContext<'_, u64, u64>) -> u64;
}

impl Slot for ValueState<u64> {
    fn bump(&mut self, _: &ProcessContext<'_, u64, u64>) -> u64 {
        let v = self.value().unwrap_or(0) + 1;
        self.set(v);
        v
    }
}

impl<P: TtlPolicy> Slot for TtlValueState<u64, P> {
    fn bump(&mut self, ctx: &ProcessContext<'_, u64, u64>) -> u64 {
        let v = self.get(ctx).copied().unwrap_or(0) + 1;
        self.set(ctx, v);
        v
    }
}

/// Counts each key's events in its state; emits each count.
struct Bump<S>(std::marker::PhantomData<S>);

impl<S: Slot> KeyedProcessFunction<u64, u64> for Bump<S> {
    type State = S;
    type Out = u64;
    fn process_element(&mut self, _: &u64, _: Event<u64>, s: &mut S, ctx: &mut ProcessContext<'_, u64, u64>) {
        let v = s.bump(ctx);
        ctx.emit(v);
    }
}

/// Runs the job once; the sum of the counts emitted.
fn run<S: Slot>() -> u64 {
    let total = Arc::new(AtomicU64::new(0));
    let sink = total.clone();
    Pipeline::new(PipelineConfig::with_shards(1))
        .run(move |scope| {
            let sink = sink.clone();
            scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), EVENTS, |i| i),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis((*i / 100) as i64)),
                )
                .key_by(|i| i % KEYS)
                .process(Bump::<S>(std::marker::PhantomData))
                .for_each(move |e| {
                    sink.fetch_add(e.value, Ordering::Relaxed);
                });
        })
        .expect("pipeline");
    total.load(Ordering::Relaxed)
}

fn process_ttl(c: &mut Criterion) {
    let mut g = c.benchmark_group("process_state");
    g.throughput(Throughput::Elements(EVENTS));
    g.sample_size(10);
    // Without TTL every key's second event counts 2; with a 10 ms TTL the first write has
    // expired (1 000 ms of event time apart), so each counts 1.
    g.bench_function("value_200k_events_100k_keys", |b| {
        b.iter(|| assert_eq!(black_box(run::<ValueState<u64>>()), 3 * KEYS))
    });
    g.bench_function("ttl_value_sweep_1k_200k_events_100k_keys", |b| {
        b.iter(|| assert_eq!(black_box(run::<TtlValueState<u64, Default10>>()), 2 * KEYS))
    });
    g.bench_function("ttl_value_sweep_100k_200k_events_100k_keys", |b| {
        b.iter(|| assert_eq!(black_box(run::<TtlValueState<u64, Wide10>>()), 2 * KEYS))
    });
    g.finish();
}

criterion_group!(benches, process_ttl);
criterion_main!(benches);
