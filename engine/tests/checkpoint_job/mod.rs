//! The job the checkpoint tests run, its input, and a plain reference computation of its
//! output: a topic of keyed numbers through tumbling, sliding and session window counts and
//! a keyed process function with event-time timers, into an exactly-once topic sink.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use sluice_engine::dataflow::topic::{StartFrom, TopicRecord, TopicSink, TopicSource};
use sluice_engine::dataflow::{
    CheckpointConfig, CheckpointMode, Event, KeyedProcessFunction, ListState, Pipeline, PipelineConfig, ProcessContext,
    RunningPipeline, Stream, Timer, WatermarkStrategy, Windows,
};
use sluice_engine::partitioner::partition_for_key;
use sluice_engine::{Consumer, Engine, EngineConfig, EngineHandle, Isolation, OwnedRecord, SeekTo, TopicConfig};
use sluice_io::{BatchMeta, EventTime, Timestamp};

pub const IN: &str = "ckpt-in";
pub const OUT: &str = "ckpt-out";
const IN_PARTITIONS: u32 = 4;
const OUT_PARTITIONS: u32 = 3;
const SESSION_GAP: i64 = 300;
const PROCESS_BUCKET: i64 = 500;

/// One input record: key, event time (ms), value.
pub type In = (u32, i64, i64);

/// `n` records over `keys` keys, event times rising 2 ms per record with up to 20 ms of
/// disorder (less than the job's 50 ms bound, so nothing is late and the output is
/// determined by the input alone).
pub fn input(seed: u64, n: usize, keys: u32) -> Vec<In> {
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    (0..n)
        .map(|i| {
            let key = (next() % u64::from(keys)) as u32;
            let time = 1_000_000 + i as i64 * 2 + (next() % 20) as i64;
            let value = (next() % 100) as i64 - 50;
            (key, time, value)
        })
        .collect()
}

pub fn engine(data: &Path) -> Engine {
    block_on(Engine::open(EngineConfig { shards: Some(1), ..EngineConfig::new(data) })).expect("engine opens")
}

/// Creates the input and output topics and writes `records` to the input, each to its
/// key's partition, in order.
pub fn produce(h: &EngineHandle, records: &[In]) {
    block_on(h.create_topic(IN, IN_PARTITIONS, None)).unwrap();
    let out = TopicConfig { batch_records: 64, ..TopicConfig::default() };
    block_on(h.create_topic(OUT, OUT_PARTITIONS, Some(out))).unwrap();
    for chunk in records.chunks(500) {
        let mut by_partition: BTreeMap<u32, Vec<OwnedRecord>> = BTreeMap::new();
        for (key, time, value) in chunk {
            let key = key.to_string().into_bytes();
            let p = partition_for_key(&key, IN_PARTITIONS);
            by_partition.entry(p).or_default().push(OwnedRecord {
                key: Some(key),
                value: value.to_string().into_bytes(),
                event_time: Timestamp(*time),
            });
        }
        for (p, list) in by_partition {
            block_on(h.append(IN, p, list, BatchMeta::default())).unwrap();
        }
    }
}

/// Sums each key's values per 500 ms of event time, reported by an event-time timer at
/// the bucket's last instant.
struct BucketSums;

impl KeyedProcessFunction<u32, In> for BucketSums {
    type State = ListState<(i64, i64)>;
    type Out = String;

    fn process_element(
        &mut self,
        _: &u32,
        e: Event<In>,
        pending: &mut Self::State,
        ctx: &mut ProcessContext<'_, u32, String>,
    ) {
        let (_, time, value) = e.value;
        pending.add((time, value));
        ctx.register_event_time_timer(EventTime::from_millis(bucket_end(time)));
    }

    fn on_timer(
        &mut self,
        key: &u32,
        timer: Timer,
        pending: &mut Self::State,
        ctx: &mut ProcessContext<'_, u32, String>,
    ) {
        let at = timer.time.millis();
        let (due, keep): (Vec<_>, Vec<_>) = pending.take().into_iter().partition(|(t, _)| *t <= at);
        pending.update(keep);
        ctx.emit(format!("P|{key}|{at}|{}", due.iter().map(|(_, v)| v).sum::<i64>()));
    }
}

fn bucket_end(time: i64) -> i64 {
    (time.div_euclid(PROCESS_BUCKET) + 1) * PROCESS_BUCKET - 1
}

/// How a run of the job is set up.
#[derive(Debug, Clone)]
pub struct JobConfig {
    pub checkpoints: PathBuf,
    pub shards: usize,
    pub interval: Duration,
    /// Busy work per record, so a run lasts long enough to be killed in the middle.
    pub work: Duration,
    /// Aligned or unaligned checkpoints.
    pub mode: CheckpointMode,
}

/// Starts the job on `h`.
pub fn spawn(h: &EngineHandle, config: &JobConfig) -> RunningPipeline {
    let source = block_on(TopicSource::open(h, IN, StartFrom::Earliest)).unwrap().bounded().fetch_max_bytes(16 << 10);
    let sink = TopicSink::open(h, OUT).unwrap().exactly_once();
    let work = config.work;
    let pipeline = PipelineConfig { batch_records: 64, ..PipelineConfig::with_shards(config.shards) };
    Pipeline::new(pipeline)
        .checkpointing(CheckpointConfig::new(&config.checkpoints).interval(config.interval).keep(3).mode(config.mode))
        .spawn(move |scope| {
            let strategy =
                WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(50), TopicRecord::event_time);
            let records: Stream<In> = scope.topic_source(&source, strategy).map(move |r| {
                let until = Instant::now() + work;
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                let key: u32 = std::str::from_utf8(r.key.as_deref().unwrap()).unwrap().parse().unwrap();
                let value: i64 = std::str::from_utf8(&r.value).unwrap().parse().unwrap();
                (key, r.time.millis(), value)
            });
            let tumbling = records
                .clone()
                .key_by(|e: &In| e.0)
                .window(Windows::tumbling(Duration::from_secs(1)))
                .count()
                .map(|r| format!("T|{}|{}|{}", r.key, r.window.start.millis(), r.value));
            let sliding = records
                .clone()
                .key_by(|e: &In| e.0)
                .window(Windows::sliding(Duration::from_secs(2), Duration::from_secs(1)))
                .count()
                .map(|r| format!("S|{}|{}|{}", r.key, r.window.start.millis(), r.value));
            let sessions = records
                .clone()
                .key_by(|e: &In| e.0)
                .window(Windows::session(Duration::from_millis(SESSION_GAP as u64)))
                .count()
                .map(|r| format!("G|{}|{}|{}|{}", r.key, r.window.start.millis(), r.window.end.millis(), r.value));
            let sums = records.key_by(|e: &In| e.0).process(BucketSums);
            Stream::union_all(vec![tumbling, sliding, sessions, sums])
                .to_topic(&sink, |line: String| (None, line.into_bytes()));
        })
        .expect("the job starts")
}

/// What the job must write, sorted: computed plainly from the input.
pub fn expected(records: &[In]) -> Vec<String> {
    let mut out = Vec::new();
    let mut tumbling: BTreeMap<(u32, i64), u64> = BTreeMap::new();
    let mut sliding: BTreeMap<(u32, i64), u64> = BTreeMap::new();
    let mut sums: BTreeMap<(u32, i64), i64> = BTreeMap::new();
    let mut times: HashMap<u32, Vec<i64>> = HashMap::new();
    for &(key, time, value) in records {
        let second = time.div_euclid(1000) * 1000;
        *tumbling.entry((key, second)).or_default() += 1;
        *sliding.entry((key, second)).or_default() += 1;
        *sliding.entry((key, second - 1000)).or_default() += 1;
        *sums.entry((key, bucket_end(time))).or_default() += value;
        times.entry(key).or_default().push(time);
    }
    out.extend(tumbling.iter().map(|((k, s), n)| format!("T|{k}|{s}|{n}")));
    out.extend(sliding.iter().map(|((k, s), n)| format!("S|{k}|{s}|{n}")));
    out.extend(sums.iter().map(|((k, at), v)| format!("P|{k}|{at}|{v}")));
    for (key, mut ts) in times {
        ts.sort_unstable();
        let (mut start, mut last, mut n) = (ts[0], ts[0], 0u64);
        for t in ts {
            if t > last + SESSION_GAP {
                out.push(format!("G|{key}|{start}|{}|{n}", last + SESSION_GAP));
                (start, n) = (t, 0);
            }
            last = t;
            n += 1;
        }
        out.push(format!("G|{key}|{start}|{}|{n}", last + SESSION_GAP));
    }
    out.sort();
    out
}

/// The output topic as a `read_committed` consumer sees it, sorted. Reads until every
/// partition's last stable offset reaches its end (every transaction decided).
pub fn committed_output(h: &EngineHandle) -> Vec<String> {
    block_on(async {
        let mut consumer = Consumer::new(h.clone(), 1 << 16).with_isolation(Isolation::ReadCommitted);
        let partitions = consumer.partitions_of(OUT).unwrap();
        consumer.assign(&partitions, SeekTo::Earliest).await.unwrap();
        let mut ends = BTreeMap::new();
        for (t, p) in &partitions {
            ends.insert((t.clone(), *p), h.offsets(t, *p).await.unwrap().1);
        }
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while consumer.positions() != &ends {
            assert!(
                Instant::now() < deadline,
                "read_committed never reached the ends {ends:?}: {:?}",
                consumer.positions()
            );
            for polled in consumer.poll(Duration::from_millis(100)).await.unwrap() {
                for r in polled.batches.records() {
                    out.push(String::from_utf8(r.unwrap().value().to_vec()).unwrap());
                }
            }
        }
        out.sort();
        out
    })
}

/// Every line that appears more than once, and every line missing or extra, as a report.
pub fn diff(got: &[String], want: &[String]) -> String {
    let count = |v: &[String]| {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for s in v {
            *m.entry(s.clone()).or_default() += 1;
        }
        m
    };
    let (g, w) = (count(got), count(want));
    let mut lines = Vec::new();
    for (k, n) in &g {
        let m = w.get(k).copied().unwrap_or(0);
        if *n != m {
            lines.push(format!("{k}: got {n}, want {m}"));
        }
    }
    for (k, m) in &w {
        if !g.contains_key(k) {
            lines.push(format!("{k}: got 0, want {m}"));
        }
    }
    lines.truncate(20);
    format!("{} lines got, {} wanted; first differences:\n{}", got.len(), want.len(), lines.join("\n"))
}
