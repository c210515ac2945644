//! The job the checkpoint tests run, its input, and a plain reference computation of its
//! output: a topic of keyed numbers through a tumbling window count, sliding (2 s every
//! 500 ms) and session windows with a custom aggregate (count, sum, least and greatest
//! value), a keyed process function with event-time timers, a window join and an interval
//! join of two filtered sides of the input, into an exactly-once topic sink; and, from a
//! second topic of one partition, a session window with allowed lateness whose late
//! records update sessions that have fired (`late_plan` says how they are made late
//! whatever the timing).
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use sluice_engine::dataflow::topic::{StartFrom, TopicRecord, TopicSink, TopicSource};
use sluice_engine::dataflow::{
    Aggregate, CheckpointConfig, CheckpointMode, Event, KeyedProcessFunction, LatePolicy, ListState, Pipeline,
    PipelineConfig, ProcessContext, RunningPipeline, Stream, Timer, WatermarkStrategy, Windows,
};
use sluice_engine::topic::partitioner::partition_for_key;
use sluice_engine::{Engine, EngineConfig, EngineHandle, Isolation, OwnedRecord, TopicConfig};
use sluice_io::{BatchMeta, EventTime, PartitionId, Timestamp};

pub const IN: &str = "ckpt-in";
pub const OUT: &str = "ckpt-out";
/// The late-session topic: one partition, so its records reach the session window in
/// their order, each batch followed by the watermark it moved.
pub const LATE: &str = "ckpt-late";
const IN_PARTITIONS: u32 = 4;
const OUT_PARTITIONS: u32 = 3;
const SESSION_GAP: i64 = 300;
const PROCESS_BUCKET: i64 = 500;
const SLIDING_SIZE: i64 = 2000;
const SLIDING_SLIDE: i64 = 500;
const JOIN_WINDOW: i64 = 1000;
/// The interval join pairs a left record with right records within this many ms either side.
const INTERVAL: i64 = 30;
/// The late-session topic's records, its keys, and the records each key holds in turn
/// (one session: 400 ms of event time, then 1200 ms of silence for that key).
const LATE_RECORDS: usize = 24_000;
const LATE_KEYS: u32 = 4;
const LATE_PHASE: usize = 200;
/// How many records after its session's last record a late record comes (2 s of event
/// time): the watermark the topic's shard sent before it has passed the session's end
/// (the 300 ms gap, the 50 ms bound, a 64-record batch) by far. A restore finds it late
/// too, in either mode, even when it is among an unaligned checkpoint's in-flight records
/// (up to (64 + 128) batches of 64 records before the window, many times this delay):
/// those come back after the watermarks before them.
const LATE_DELAY: usize = 1_000;
/// The late sessions' allowed lateness: more than the event time of `LATE_DELAY` records
/// plus what a checkpoint can hold in flight after one (2 ms a record), so a late record
/// is always within it.
const LATE_LATENESS_MS: i64 = 60_000;

/// The window join's sides: records whose value ends in 0 (left) or 5 (right).
fn window_side(e: &In, digit: i64) -> bool {
    e.2.rem_euclid(10) == digit
}

/// The interval join's sides: records whose value ends in 1 (left) or 2 (right).
fn interval_side(e: &In, digit: i64) -> bool {
    e.2.rem_euclid(10) == digit
}

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

/// The late-session topic's records for the job over `records`, and which of them are
/// late. Key `1000 + k` holds every `LATE_KEYS`-th phase of `LATE_PHASE` records, 2 ms
/// apart with up to 20 ms of disorder (never late); every third phase from the second on
/// gets a late record `LATE_DELAY` records after its last (inside its session's span, so
/// it updates that session and does not stretch it), and every sixth a second one 300
/// records after the first. By then the watermark has passed the session's end, also as
/// a restore sees it (in-flight records keep the watermarks before them), and is still
/// within the allowed lateness.
pub fn late_plan(records: &[In]) -> Vec<(In, bool)> {
    let mut x = records.len() as u64 ^ records.first().map_or(0, |r| r.1 as u64 ^ ((r.2 as u64) << 32));
    let mut next = move || {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        x >> 33
    };
    let base = |i: usize| 5_000_000 + i as i64 * 2;
    let mut late: BTreeMap<usize, Vec<In>> = BTreeMap::new();
    for phase in (1..LATE_RECORDS / LATE_PHASE).step_by(3) {
        let last = (phase + 1) * LATE_PHASE - 1;
        let key = 1000 + (phase as u32 % LATE_KEYS);
        // A time between the session's first and last records (their disorder is < 20 ms).
        let at = |k: usize| base(phase * LATE_PHASE + k);
        let mut add = |pos: usize, time: i64| {
            if pos < LATE_RECORDS {
                late.entry(pos).or_default().push((key, time, (next() % 100) as i64 - 50));
            }
        };
        add(last + LATE_DELAY, at(50));
        if phase % 2 == 1 {
            add(last + LATE_DELAY + 300, at(150));
        }
    }
    let mut out = Vec::with_capacity(LATE_RECORDS + late.len() * 2);
    for i in 0..LATE_RECORDS {
        let key = 1000 + ((i / LATE_PHASE) as u32 % LATE_KEYS);
        out.push(((key, base(i) + (next() % 20) as i64, (next() % 100) as i64 - 50), false));
        for r in late.remove(&i).unwrap_or_default() {
            out.push((r, true));
        }
    }
    out
}

pub fn engine(data: &Path) -> Engine {
    block_on(Engine::open(EngineConfig { shards: Some(1), ..EngineConfig::new(data) })).expect("engine opens")
}

/// Creates the input and output topics and writes `records` to the input, each to its
/// key's partition, in order.
pub fn produce(h: &EngineHandle, records: &[In]) {
    produce_with(h, records, &TopicConfig::default().fsync.to_string());
}

/// [`produce`], with the output topic's fsync policy `out_fsync`.
pub fn produce_with(h: &EngineHandle, records: &[In], out_fsync: &str) {
    block_on(h.create_topic(IN, IN_PARTITIONS, None)).unwrap();
    let out = TopicConfig { batch_records: 64, fsync: out_fsync.parse().unwrap(), ..TopicConfig::default() };
    block_on(h.create_topic(OUT, OUT_PARTITIONS, Some(out))).unwrap();
    append_input(h, records);
    block_on(h.create_topic(LATE, 1, None)).unwrap();
    let late: Vec<OwnedRecord> = late_plan(records)
        .into_iter()
        .map(|((key, time, value), _)| {
            OwnedRecord::new(Some(key.to_string().into_bytes()), value.to_string().into_bytes(), Timestamp(time))
        })
        .collect();
    for chunk in late.chunks(500) {
        block_on(h.append(LATE, PartitionId(0), chunk.to_vec(), BatchMeta::default())).unwrap();
    }
}

/// Writes `records` to the input topic, each to its key's partition, in order.
pub fn append_input(h: &EngineHandle, records: &[In]) {
    for chunk in records.chunks(500) {
        let mut by_partition: BTreeMap<PartitionId, Vec<OwnedRecord>> = BTreeMap::new();
        for (key, time, value) in chunk {
            let key = key.to_string().into_bytes();
            let p = partition_for_key(&key, IN_PARTITIONS);
            by_partition.entry(p).or_default().push(OwnedRecord::new(
                Some(key),
                value.to_string().into_bytes(),
                Timestamp(*time),
            ));
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

/// A window's count, sum, least and greatest value: a custom aggregate with a tuple for
/// its accumulator, merged when sessions merge.
struct Stats;

impl Aggregate<In> for Stats {
    type Acc = (u64, i64, i64, i64);
    type Out = String;
    fn create(&self) -> Self::Acc {
        (0, 0, i64::MAX, i64::MIN)
    }
    fn add(&self, acc: &mut Self::Acc, e: &In) {
        *acc = (acc.0 + 1, acc.1 + e.2, acc.2.min(e.2), acc.3.max(e.2));
    }
    fn merge(&self, into: &mut Self::Acc, from: Self::Acc) {
        *into = (into.0 + from.0, into.1 + from.1, into.2.min(from.2), into.3.max(from.3));
    }
    fn result(&self, acc: &Self::Acc) -> String {
        stats_line(acc)
    }
}

fn stats_line(acc: &(u64, i64, i64, i64)) -> String {
    format!("{},{},{},{}", acc.0, acc.1, acc.2, acc.3)
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
    let late = block_on(TopicSource::open(h, LATE, StartFrom::Earliest)).unwrap().bounded().fetch_max_bytes(16 << 10);
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
                parse(&r)
            });
            let strategy =
                WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(50), TopicRecord::event_time);
            let late_sessions = scope
                .topic_source(&late, strategy)
                .map(|r| parse(&r))
                .key_by(|e: &In| e.0)
                .window(Windows::session(Duration::from_millis(SESSION_GAP as u64)))
                .allowed_lateness(Duration::from_millis(LATE_LATENESS_MS as u64))
                .late_policy(LatePolicy::Update)
                .aggregate(Stats)
                .map(|r| {
                    let (start, end) = (r.window.start.millis(), r.window.end.millis());
                    format!("L|{}|{start}|{end}|{}|{:?}", r.key, r.value, r.firing)
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
                .window(Windows::sliding(
                    Duration::from_millis(SLIDING_SIZE as u64),
                    Duration::from_millis(SLIDING_SLIDE as u64),
                ))
                .aggregate(Stats)
                .map(|r| format!("S|{}|{}|{}", r.key, r.window.start.millis(), r.value));
            let sessions = records
                .clone()
                .key_by(|e: &In| e.0)
                .window(Windows::session(Duration::from_millis(SESSION_GAP as u64)))
                .aggregate(Stats)
                .map(|r| format!("G|{}|{}|{}|{}", r.key, r.window.start.millis(), r.window.end.millis(), r.value));
            let window_join = records.clone().filter(|e| window_side(e, 0)).key_by(|e: &In| e.0).window_join(
                records.clone().filter(|e| window_side(e, 5)).key_by(|e: &In| e.0),
                Windows::tumbling(Duration::from_millis(JOIN_WINDOW as u64)),
                |k, l, r| format!("J|{k}|{}|{}|{}|{}", l.1.div_euclid(JOIN_WINDOW) * JOIN_WINDOW, l.1, r.1, l.2 + r.2),
            );
            let interval_join = records.clone().filter(|e| interval_side(e, 1)).key_by(|e: &In| e.0).interval_join(
                records.clone().filter(|e| interval_side(e, 2)).key_by(|e: &In| e.0),
                -INTERVAL,
                INTERVAL,
                |k, l, r| format!("I|{k}|{}|{}|{}", l.1, r.1, l.2 * r.2),
            );
            let sums = records.key_by(|e: &In| e.0).process(BucketSums);
            Stream::union_all(vec![tumbling, sliding, sessions, sums, window_join, interval_join, late_sessions])
                .to_topic(&sink, |line: String| (None, line.into_bytes()));
        })
        .expect("the job starts")
}

/// A topic record of the job as an input record.
fn parse(r: &TopicRecord) -> In {
    let key: u32 = std::str::from_utf8(r.key.as_deref().unwrap()).unwrap().parse().unwrap();
    let value: i64 = std::str::from_utf8(r.value.as_deref().unwrap_or_default()).unwrap().parse().unwrap();
    (key, r.time.millis(), value)
}

/// Sessions (start, last record, values) of one key's records, by the job's rule: a
/// record a gap or more after the last one starts a new session.
fn cut_sessions(mut es: Vec<(i64, i64)>) -> Vec<(i64, i64, Vec<i64>)> {
    es.sort_unstable();
    let mut out: Vec<(i64, i64, Vec<i64>)> = Vec::new();
    for (t, v) in es {
        match out.last_mut() {
            Some((_, last, values)) if t < *last + SESSION_GAP => {
                *last = t;
                values.push(v);
            }
            _ => out.push((t, t, vec![v])),
        }
    }
    out
}

/// What the late-session window must write for `records`: each session of the on-time
/// records once, on time, then, for each late record in input order, its session again
/// with every record so far, as an update.
fn expected_late(records: &[In], stats: impl Fn(&[i64]) -> String) -> Vec<String> {
    let plan = late_plan(records);
    let mut by_key: BTreeMap<u32, Vec<(i64, i64)>> = BTreeMap::new();
    for ((key, time, value), _) in plan.iter().filter(|(_, late)| !late) {
        by_key.entry(*key).or_default().push((*time, *value));
    }
    let mut sessions: BTreeMap<u32, Vec<(i64, i64, Vec<i64>)>> =
        by_key.into_iter().map(|(k, es)| (k, cut_sessions(es))).collect();
    let mut out = Vec::new();
    let line = |key: u32, s: &(i64, i64, Vec<i64>), firing: &str| {
        format!("L|{key}|{}|{}|{}|{firing}", s.0, s.1 + SESSION_GAP, stats(&s.2))
    };
    for (key, list) in &sessions {
        out.extend(list.iter().map(|s| line(*key, s, "OnTime")));
    }
    for ((key, time, value), _) in plan.iter().filter(|(_, late)| *late) {
        let list = sessions.get_mut(key).expect("a late record's key has sessions");
        let s = list.iter_mut().find(|s| s.0 <= *time && *time <= s.1).expect("a late record falls in a session");
        s.2.push(*value);
        out.push(line(*key, s, "Update"));
    }
    out
}

/// What the job must write, sorted: computed plainly from the input.
pub fn expected(records: &[In]) -> Vec<String> {
    let mut out = Vec::new();
    let mut tumbling: BTreeMap<(u32, i64), u64> = BTreeMap::new();
    let mut sliding: BTreeMap<(u32, i64), Vec<i64>> = BTreeMap::new();
    let mut sums: BTreeMap<(u32, i64), i64> = BTreeMap::new();
    let mut events: HashMap<u32, Vec<(i64, i64)>> = HashMap::new();
    let stats = |values: &[i64]| {
        let acc = values
            .iter()
            .fold((0, 0, i64::MAX, i64::MIN), |a: (u64, i64, i64, i64), &v| (a.0 + 1, a.1 + v, a.2.min(v), a.3.max(v)));
        stats_line(&acc)
    };
    for &(key, time, value) in records {
        let second = time.div_euclid(1000) * 1000;
        *tumbling.entry((key, second)).or_default() += 1;
        // Every window [start, start + size) with start a multiple of the slide holding `time`.
        let mut start = time.div_euclid(SLIDING_SLIDE) * SLIDING_SLIDE;
        while start > time - SLIDING_SIZE {
            sliding.entry((key, start)).or_default().push(value);
            start -= SLIDING_SLIDE;
        }
        *sums.entry((key, bucket_end(time))).or_default() += value;
        events.entry(key).or_default().push((time, value));
    }
    out.extend(tumbling.iter().map(|((k, s), n)| format!("T|{k}|{s}|{n}")));
    out.extend(sliding.iter().map(|((k, s), values)| format!("S|{k}|{s}|{}", stats(values))));
    out.extend(sums.iter().map(|((k, at), v)| format!("P|{k}|{at}|{v}")));
    let mut by_key: HashMap<u32, Vec<&In>> = HashMap::new();
    for e in records {
        by_key.entry(e.0).or_default().push(e);
    }
    // Every pair of records of one key, for the two joins.
    for (l, r) in by_key.values().flat_map(|es| es.iter().flat_map(move |l| es.iter().map(move |r| (*l, *r)))) {
        let window = l.1.div_euclid(JOIN_WINDOW) * JOIN_WINDOW;
        if window_side(l, 0) && window_side(r, 5) && r.1.div_euclid(JOIN_WINDOW) * JOIN_WINDOW == window {
            out.push(format!("J|{}|{window}|{}|{}|{}", l.0, l.1, r.1, l.2 + r.2));
        }
        if interval_side(l, 1) && interval_side(r, 2) && (r.1 - l.1).abs() <= INTERVAL {
            out.push(format!("I|{}|{}|{}|{}", l.0, l.1, r.1, l.2 * r.2));
        }
    }
    for (key, es) in events {
        // Closer than the gap joins; exactly a gap after starts a new session.
        for (start, last, values) in cut_sessions(es) {
            out.push(format!("G|{key}|{start}|{}|{}", last + SESSION_GAP, stats(&values)));
        }
    }
    out.extend(expected_late(records, stats));
    out.sort();
    out
}

/// The output topic as a `read_committed` consumer sees it, sorted. Fails if a
/// transaction is still open in it (every run that wrote it has been settled).
pub fn committed_output(h: &EngineHandle) -> Vec<String> {
    for p in PartitionId::all(OUT_PARTITIONS) {
        let open = block_on(h.open_transactions(OUT, p)).unwrap();
        assert!(open.is_empty(), "transactions still open in {OUT}-{p}: {open:?}");
    }
    output(h, Isolation::ReadCommitted)
}

/// The output topic as a `read_uncommitted` consumer sees it (aborted records included),
/// sorted: to tell results never written from results written and not committed.
pub fn uncommitted_output(h: &EngineHandle) -> Vec<String> {
    output(h, Isolation::ReadUncommitted)
}

/// The output topic read to its end with `isolation`, as sorted lines.
fn output(h: &EngineHandle, isolation: Isolation) -> Vec<String> {
    let mut out = Vec::new();
    for polled in block_on(h.read_to_end(OUT, isolation)).unwrap() {
        for r in polled.batches.records() {
            out.push(String::from_utf8(r.unwrap().value_bytes().to_vec()).unwrap());
        }
    }
    out.sort();
    out
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
