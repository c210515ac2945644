//! Changelog streams and tables (`dataflow::changelog`) in real pipelines at one and two
//! shards, against brute-force models:
//!
//! - aggregates over a table retract exactly under random insert/update/delete sequences
//!   (the whole output changelog, time by time, equals the model's);
//! - a table read from a compacted topic (after compaction ran) with tombstones and empty
//!   values;
//! - the event-time temporal join gives each event the row as of its time;
//! - stopped and restored at another shard count, a job's exactly-once output (a
//!   two-phase-commit sink, an upsert sink, a compacted topic with tombstones) equals an
//!   uninterrupted run's.
//!
//! Every test is named `changelog_*` so `cargo test changelog` selects them. Randomized
//! cases print `SEED=<n>`; `SEED=<n> cargo test -p sluice-engine --test changelog` replays.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use sluice_engine::dataflow::changelog::{Change, RetractingAggregate, Table};
use sluice_engine::dataflow::topic::{StartFrom, TopicRecord, TopicSink, TopicSource};
use sluice_engine::dataflow::{
    CheckpointConfig, CheckpointMode, Event, Generator, Pipeline, PipelineConfig, Scope, Stream, TwoPhaseCommitSink,
    UserError, WatermarkStrategy,
};
use sluice_engine::{Engine, EngineConfig, EngineHandle, Isolation, OwnedRecord, TopicConfig};
use sluice_io::{CleanupPolicy, EventTime, PartitionId, Timestamp};

/// A row: (group, amount).
type Row = (u64, i64);

/// The keys: a multiple of every shard count used, so that all of a key's changes come
/// from one generator split (index residue), in index order, as a topic partition would
/// deliver them.
const KEYS: u64 = 16;
const GROUPS: u64 = 5;

fn mix(seed: u64, i: u64) -> u64 {
    let mut rng = common::Rng::seeded(seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    rng.next()
}

/// The `i`-th change of a run seeded `seed`: key `i % KEYS`; an insert, an update (with a
/// before image that is sometimes wrong, which the table must not trust), an upsert or a
/// delete (with or without a before image), to a random group and amount. Whether the key
/// exists is not consulted: the table must make sense of an update of a missing key and a
/// delete of one.
fn change(seed: u64, i: u64) -> Change<u64, Row> {
    let r = mix(seed, i);
    let key = i % KEYS;
    let row = ((r >> 8) % GROUPS, ((r >> 16) % 100) as i64 - 20);
    let wrong = ((r >> 32) % GROUPS, 7);
    match r % 10 {
        0..=1 => Change::insert(key, row),
        2..=4 => Change::update(key, Some(wrong), row),
        5..=6 => Change::upsert(key, Some(row)),
        7 => Change::upsert(key, None),
        8 => Change::delete(key, Some(wrong)),
        _ => Change::delete(key, None),
    }
}

/// The time of change `i`: several changes share a time.
fn change_time(i: u64, per_ms: u64) -> EventTime {
    EventTime::from_millis((i / per_ms) as i64)
}

/// The model: applies `n` changes in index order (every key's order), time by time, and
/// returns each table's (count and sum by group) changes as `(time, group) -> change`,
/// and the table's final rows.
#[allow(clippy::type_complexity)]
fn model(
    seed: u64,
    n: u64,
    per_ms: u64,
) -> (BTreeMap<(i64, u64), Change<u64, i64>>, BTreeMap<(i64, u64), Change<u64, i64>>, BTreeMap<u64, Row>) {
    let mut table: BTreeMap<u64, Row> = BTreeMap::new();
    let (mut counts, mut sums) = (BTreeMap::new(), BTreeMap::new());
    let mut before: BTreeMap<u64, (i64, i64)> = BTreeMap::new();
    let mut i = 0;
    while i < n {
        let t = change_time(i, per_ms).millis();
        while i < n && change_time(i, per_ms).millis() == t {
            let c = change(seed, i);
            match c.after() {
                Some(row) => table.insert(c.key, *row),
                None => table.remove(&c.key),
            };
            i += 1;
        }
        let mut now: BTreeMap<u64, (i64, i64)> = BTreeMap::new();
        for (g, amount) in table.values() {
            let e = now.entry(*g).or_default();
            e.0 += 1;
            e.1 += amount;
        }
        for g in 0..GROUPS {
            let (b, a) = (before.get(&g), now.get(&g));
            let diff = |pick: fn(&(i64, i64)) -> i64| match (b, a) {
                (None, None) => None,
                (None, Some(a)) => Some(Change::insert(g, pick(a))),
                (Some(b), Some(a)) if pick(b) == pick(a) => None,
                (Some(b), Some(a)) => Some(Change::update(g, Some(pick(b)), pick(a))),
                (Some(b), None) => Some(Change::delete(g, Some(pick(b)))),
            };
            if let Some(c) = diff(|x| x.0) {
                counts.insert((t, g), c);
            }
            if let Some(c) = diff(|x| x.1) {
                sums.insert((t, g), c);
            }
        }
        before = now;
    }
    (counts, sums, table)
}

/// Collects `(time, change)`s, refusing two changes of one group at one time.
fn by_time_and_group(got: &[Event<Change<u64, i64>>]) -> BTreeMap<(i64, u64), Change<u64, i64>> {
    let mut out = BTreeMap::new();
    for e in got {
        let old = out.insert((e.time.millis(), e.value.key), e.value.clone());
        assert!(old.is_none(), "two changes of group {} at {}", e.value.key, e.time.millis());
    }
    out
}

/// The changes of a run, as a table from `Generator` indexes `0..n`.
fn changes_source(scope: &Scope, seed: u64, n: u64, per_ms: u64) -> Stream<Change<u64, Row>> {
    scope
        .source(
            Generator::new(scope.shard(), scope.shards(), n, move |i| {
                Event::new(change_time(i, per_ms), change(seed, i))
            }),
            WatermarkStrategy::monotonous(|e: &Event<Change<u64, Row>>| e.time),
        )
        .map(|e| e.value)
}

/// A general add/retract aggregate: the multiset of amounts of a group, reported as
/// (rows, max amount), which plain counters cannot retract.
struct MaxAmount;

impl RetractingAggregate<Row> for MaxAmount {
    type Acc = BTreeMap<i64, u64>;
    type Out = (u64, i64);
    fn add(&self, acc: &mut BTreeMap<i64, u64>, row: &Row) {
        *acc.entry(row.1).or_default() += 1;
    }
    fn retract(&self, acc: &mut BTreeMap<i64, u64>, row: &Row) {
        let n = acc.get_mut(&row.1).expect("a retracted amount was added before");
        *n -= 1;
        if *n == 0 {
            acc.remove(&row.1);
        }
    }
    fn result(&self, acc: &BTreeMap<i64, u64>) -> (u64, i64) {
        (acc.values().sum(), *acc.keys().next_back().expect("a group with rows"))
    }
}

#[test]
fn changelog_aggregates_over_a_table_retract_exactly_under_random_changes() {
    let base = common::seed_from_env();
    for round in 0..12u64 {
        let seed = base.wrapping_add(round);
        for shards in [1, 2] {
            let n = 600 + mix(seed, 1 << 40) % 1400;
            let per_ms = 1 + mix(seed, 1 << 41) % 4;
            let (counts, sums, maxes) =
                (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
            let (c, s, m) = (counts.clone(), sums.clone(), maxes.clone());
            Pipeline::new(PipelineConfig::with_shards(shards))
                .run(move |scope| {
                    let table = changes_source(scope, seed, n, per_ms).into_table();
                    let (c, s, m) = (c.clone(), s.clone(), m.clone());
                    let grouped = || table.group_by(|_, row: &Row| row.0);
                    grouped().count().changes().for_each(move |e| c.lock().unwrap().push(e));
                    grouped().sum(|row| row.1).changes().for_each(move |e| s.lock().unwrap().push(e));
                    grouped().aggregate(MaxAmount).changes().for_each(move |e| m.lock().unwrap().push(e));
                })
                .unwrap();
            let (want_counts, want_sums, table) = model(seed, n, per_ms);
            let context = format!("SEED={seed} shards={shards} n={n} per_ms={per_ms}");
            assert_eq!(by_time_and_group(&counts.lock().unwrap()), want_counts, "counts, {context}");
            assert_eq!(by_time_and_group(&sums.lock().unwrap()), want_sums, "sums, {context}");
            // The general aggregate: its final state per group, from its changelog.
            let mut max_final: BTreeMap<u64, (u64, i64)> = BTreeMap::new();
            let mut got = maxes.lock().unwrap().clone();
            got.sort_by_key(|e| e.time);
            for e in got {
                assert_eq!(e.value.before(), max_final.get(&e.value.key), "a normalized change, {context}");
                let (k, v) = e.value.into_upsert();
                match v {
                    Some(v) => max_final.insert(k, v),
                    None => max_final.remove(&k),
                };
            }
            let mut want_max: BTreeMap<u64, (u64, i64)> = BTreeMap::new();
            for (g, amount) in table.values() {
                let e = want_max.entry(*g).or_insert((0, i64::MIN));
                *e = (e.0 + 1, e.1.max(*amount));
            }
            assert_eq!(max_final, want_max, "max by group, {context}");
        }
    }
}

/// The `j`-th event of the temporal join test: (j, key), at a time spread over `span` ms.
fn event(seed: u64, j: u64, m: u64, span: u64) -> Event<(u64, u64)> {
    Event::new(EventTime::from_millis((j * span / m) as i64), (j, mix(seed ^ 0xE7E7, j) % KEYS))
}

/// The model of the temporal join: each event's row as of its time (the last change of
/// its key at or before it).
fn join_model(seed: u64, n: u64, per_ms: u64, m: u64, span: u64) -> BTreeMap<u64, (i64, Option<Row>)> {
    let mut versions: BTreeMap<u64, Vec<(i64, Option<Row>)>> = BTreeMap::new();
    for i in 0..n {
        let c = change(seed, i);
        versions.entry(c.key).or_default().push((change_time(i, per_ms).millis(), c.after().copied()));
    }
    (0..m)
        .map(|j| {
            let e = event(seed, j, m, span);
            let t = e.time.millis();
            let row = versions
                .get(&e.value.1)
                .and_then(|v| v.iter().rev().find(|(vt, _)| *vt <= t))
                .and_then(|(_, row)| *row);
            (j, (t, row))
        })
        .collect()
}

#[test]
fn changelog_temporal_join_gives_each_event_the_row_as_of_its_time() {
    let base = common::seed_from_env();
    for round in 0..6u64 {
        let seed = base.wrapping_add(round);
        for shards in [1, 2] {
            let (n, per_ms, m) = (1500, 2, 900);
            let span = n / per_ms + 20;
            let joined = Arc::new(Mutex::new(Vec::new()));
            let out = joined.clone();
            Pipeline::new(PipelineConfig::with_shards(shards))
                .run(move |scope| {
                    let table = changes_source(scope, seed, n, per_ms).into_table();
                    let out = out.clone();
                    scope
                        .source(
                            Generator::new(scope.shard(), scope.shards(), m, move |j| event(seed, j, m, span)),
                            WatermarkStrategy::monotonous(|e: &Event<(u64, u64)>| e.time),
                        )
                        .map(|e| e.value)
                        .temporal_join(&table, |e: &(u64, u64)| e.1, |e, row: Option<&Row>| (e.0, row.copied()))
                        .for_each(move |e| out.lock().unwrap().push((e.value.0, (e.time.millis(), e.value.1))));
                })
                .unwrap();
            let mut got = BTreeMap::new();
            for (j, v) in joined.lock().unwrap().iter() {
                assert!(got.insert(*j, *v).is_none(), "event {j} joined twice, SEED={seed}");
            }
            let want = join_model(seed, n, per_ms, m, span);
            assert!(want.values().any(|v| v.1.is_some()) && want.values().any(|v| v.1.is_none()));
            assert_eq!(got, want, "SEED={seed} shards={shards}");
        }
    }
}

/// An engine on `dir` whose cleaner never runs on its own (the test cleans when it wants).
fn engine(dir: &Path) -> Engine {
    let config = EngineConfig { shards: Some(2), retention_check: Duration::from_secs(3600), ..EngineConfig::new(dir) };
    block_on(Engine::open(config)).unwrap()
}

fn compacted() -> TopicConfig {
    TopicConfig { segment_bytes: 4096, cleanup: CleanupPolicy::Compact, ..TopicConfig::default() }
}

/// A record read back: (partition, key, value or `None` for a tombstone, time).
type Read = (u32, Vec<u8>, Option<Vec<u8>>, i64);

/// Every record of `topic` read to its end with `isolation`, per partition in offset
/// order: (partition, key, value or `None` for a tombstone, time).
fn read_topic(h: &EngineHandle, topic: &str, isolation: Isolation) -> Vec<Read> {
    let mut out = Vec::new();
    for polled in block_on(h.read_to_end(topic, isolation)).unwrap() {
        for r in polled.batches.records() {
            let r = r.unwrap();
            let key = r.key().expect("a compacted topic's records have keys").to_vec();
            out.push((polled.partition.get(), key, r.value().map(<[u8]>::to_vec), r.event_time().millis()));
        }
    }
    out.sort_by_key(|r| (r.0, r.3));
    out
}

/// The latest value per key of records in each key's order: a tombstone removes the key.
fn latest(records: &[Read]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut table = BTreeMap::new();
    for (_, key, value, _) in records {
        match value {
            Some(v) => table.insert(key.clone(), v.clone()),
            None => table.remove(key),
        };
    }
    table
}

#[test]
fn changelog_a_table_from_a_compacted_topic_applies_tombstones_and_keeps_empty_values() {
    let dir = common::data_dir("changelog", "compacted");
    let engine = engine(&dir);
    let h = engine.handle();
    block_on(h.create_topic("rows", 2, Some(compacted()))).unwrap();
    block_on(h.create_topic("out", 3, Some(compacted()))).unwrap();
    let mut rng = common::Rng::from_env();
    let mut sent = Vec::new();
    for i in 0..1500i64 {
        let key = format!("k{}", rng.below(60)).into_bytes();
        let record = match rng.below(10) {
            0..=1 => OwnedRecord::tombstone(key.clone(), Timestamp(i)),
            2 => OwnedRecord::new(Some(key.clone()), Vec::new(), Timestamp(i)),
            _ => OwnedRecord::new(Some(key.clone()), format!("v{i}").into_bytes(), Timestamp(i)),
        };
        let (p, _) = block_on(h.send_record("rows", record.clone())).unwrap();
        sent.push((p.get(), key, record.value, i));
    }
    let want = latest(&sent);
    assert!(want.values().any(Vec::is_empty), "an empty value is a row, not a delete");
    let cleaned = block_on(h.clean_topic("rows")).unwrap();
    let superseded: u64 = cleaned.iter().filter_map(|(_, r)| r.compaction.as_ref()).map(|c| c.records_superseded).sum();
    assert!(superseded > 0, "compaction removed superseded records");
    assert!(read_topic(&h, "rows", Isolation::ReadUncommitted).len() < sent.len());
    for shards in [1, 2] {
        let rows = Arc::new(Mutex::new(BTreeMap::new()));
        let upserts = rows.clone();
        let source = block_on(TopicSource::open(&h, "rows", StartFrom::Earliest)).unwrap().bounded();
        let sink = TopicSink::open(&h, "out").unwrap();
        Pipeline::new(PipelineConfig::with_shards(shards))
            .run(move |scope| {
                let table: Table<Vec<u8>, Vec<u8>> = scope
                    .topic_source(&source, WatermarkStrategy::monotonous(TopicRecord::event_time))
                    .flat_map(Change::from_compacted)
                    .into_table();
                let upserts = upserts.clone();
                table.to_upsert_sink(move |key, row| {
                    match row {
                        Some(row) => upserts.lock().unwrap().insert(key, row),
                        None => upserts.lock().unwrap().remove(&key),
                    };
                    Ok(())
                });
                table.to_compacted_topic(&sink, Clone::clone, Clone::clone);
            })
            .unwrap();
        assert_eq!(*rows.lock().unwrap(), want, "the table at {shards} shards");
    }
    // Written twice (a run per shard count), each run's records in key order: the latest
    // per key is the table, and a deleted key ends in a tombstone.
    let out = read_topic(&h, "out", Isolation::ReadUncommitted);
    assert_eq!(latest(&out), want);
    assert!(out.iter().any(|r| r.2.is_none()), "deletes are tombstones");
    block_on(engine.shutdown()).unwrap();
}

/// A two-phase-commit sink into a shared "external system": transactions are staged
/// record lists with an id, only committed ones become visible, and committing an id
/// twice (as a restore does for what its checkpoint pre-committed) changes nothing.
struct Staged {
    visible: Arc<Mutex<(HashSet<u64>, Vec<String>)>>,
}

static NEXT_TXN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl TwoPhaseCommitSink<String> for Staged {
    type Txn = (u64, Vec<String>);
    fn begin(&mut self) -> Result<Self::Txn, UserError> {
        Ok((NEXT_TXN.fetch_add(1, std::sync::atomic::Ordering::Relaxed), Vec::new()))
    }
    fn write(&mut self, txn: &mut Self::Txn, record: Event<String>) -> Result<(), UserError> {
        txn.1.push(record.value);
        Ok(())
    }
    fn pre_commit(&mut self, _: &mut Self::Txn) -> Result<(), UserError> {
        Ok(())
    }
    fn commit(&mut self, (id, records): Self::Txn) -> Result<(), UserError> {
        let mut visible = self.visible.lock().unwrap();
        if visible.0.insert(id) {
            visible.1.extend(records);
        }
        Ok(())
    }
    fn abort(&mut self, _: Self::Txn) -> Result<(), UserError> {
        Ok(())
    }
}

type Visible = Arc<Mutex<(HashSet<u64>, Vec<String>)>>;

/// What the restore test's job writes to, shared by its runs.
#[derive(Clone)]
struct Outputs {
    counts: Visible,
    joined: Visible,
    upserted: Arc<Mutex<BTreeMap<u64, i64>>>,
    topic: TopicSink,
}

const RESTORE_N: u64 = 240_000;
const RESTORE_PER_MS: u64 = 20;
const RESTORE_M: u64 = 20_000;

/// The restore test's job: random changes (2 us of work each, so a run can be stopped
/// midway) into a table, counted by group, the counts written through a two-phase-commit
/// sink, an upsert sink and a compacted topic exactly once; events joined with the table
/// through another two-phase-commit sink.
fn restore_job(scope: &Scope, seed: u64, out: &Outputs) {
    let span = RESTORE_N / RESTORE_PER_MS;
    let table = changes_source(scope, seed, RESTORE_N, RESTORE_PER_MS)
        .map(|c| {
            let until = Instant::now() + Duration::from_micros(2);
            while Instant::now() < until {}
            c
        })
        .into_table()
        .uid("rows");
    let counts = table.group_by(|_, row: &Row| row.0).count().uid("counts");
    counts
        .changes()
        .map_event(|e| format!("{}|{:?}", e.time.millis(), e.value))
        .to_two_phase_commit(Staged { visible: out.counts.clone() });
    let upserted = out.upserted.clone();
    counts.to_upsert_sink(move |group, count| {
        match count {
            Some(count) => upserted.lock().unwrap().insert(group, count),
            None => upserted.lock().unwrap().remove(&group),
        };
        Ok(())
    });
    counts.to_compacted_topic(&out.topic, |g| g.to_string().into_bytes(), |c| c.to_string().into_bytes());
    scope
        .source(
            Generator::new(scope.shard(), scope.shards(), RESTORE_M, move |j| event(seed, j, RESTORE_M, span)),
            WatermarkStrategy::monotonous(|e: &Event<(u64, u64)>| e.time),
        )
        .map(|e| e.value)
        .temporal_join(&table, |e: &(u64, u64)| e.1, |e, row: Option<&Row>| (e.0, row.copied()))
        .map_event(|e| format!("{}|{:?}", e.time.millis(), e.value))
        .to_two_phase_commit(Staged { visible: out.joined.clone() });
}

#[test]
fn changelog_tables_restore_at_another_shard_count_with_output_equal_to_an_uninterrupted_run() {
    restore_case("restore", CheckpointMode::Aligned);
}

#[test]
fn changelog_tables_restore_from_unaligned_checkpoints_with_output_equal_to_an_uninterrupted_run() {
    // Changes and join inputs in flight through the exchanges are part of the checkpoints.
    restore_case("restore-unaligned", CheckpointMode::Unaligned);
}

/// Runs [`restore_job`] stopped after 3 checkpoints at 2 shards, restored at 1 and stopped
/// after 2 more, restored at 2 to the end; checks every output against the model.
fn restore_case(name: &str, mode: CheckpointMode) {
    let seed = common::seed_from_env();
    let dir = common::data_dir("changelog", name);
    let engine = engine(&dir.join("engine"));
    let h = engine.handle();
    block_on(h.create_topic("counts", 2, Some(compacted()))).unwrap();
    let out = Outputs {
        counts: Visible::default(),
        joined: Visible::default(),
        upserted: Arc::default(),
        topic: TopicSink::open(&h, "counts").unwrap().exactly_once(),
    };
    let checkpoints = dir.join("checkpoints");
    let run = |shards: usize, stop_after: Option<usize>| {
        let out = out.clone();
        let running = Pipeline::new(PipelineConfig::with_shards(shards))
            .checkpointing(CheckpointConfig::new(&checkpoints).interval(Duration::from_millis(15)).mode(mode))
            .spawn(move |scope| restore_job(scope, seed, &out))
            .unwrap();
        if let Some(k) = stop_after {
            let mut last = sluice_io::CheckpointId(0);
            for n in 1..=k {
                let stats = running.wait_for_checkpoint(last, Duration::from_secs(60));
                last = stats.unwrap_or_else(|| panic!("checkpoint {n} of {k} in 60 s")).id;
            }
            running.stop(false);
        }
        let restored = running.restored_from();
        let inflight: u64 = running.checkpoints().iter().map(|c| c.inflight_records).sum();
        println!("{shards} shards, {mode:?}: restored from {restored:?}, {inflight} in-flight records stored");
        running.join().unwrap();
        restored
    };
    assert_eq!(run(2, Some(3)), None);
    let first = out.counts.lock().unwrap().1.len();
    assert!(run(1, Some(2)).is_some(), "the run at 1 shard restores");
    assert!(run(2, None).is_some(), "the last run at 2 shards restores");

    let (counts, _, table) = model(seed, RESTORE_N, RESTORE_PER_MS);
    let mut want: Vec<String> = counts.iter().map(|((t, _), c)| format!("{t}|{c:?}")).collect();
    let mut got = out.counts.lock().unwrap().1.clone();
    assert!(first < want.len(), "the first run stopped before the end ({first} of {} changes)", want.len());
    want.sort();
    got.sort();
    assert_eq!(got, want, "each change of the counts once, as in an uninterrupted run (SEED={seed})");

    let span = RESTORE_N / RESTORE_PER_MS;
    let mut want_joined: Vec<String> = join_model(seed, RESTORE_N, RESTORE_PER_MS, RESTORE_M, span)
        .into_iter()
        .map(|(j, (t, row))| format!("{t}|{:?}", (j, row)))
        .collect();
    let mut joined = out.joined.lock().unwrap().1.clone();
    want_joined.sort();
    joined.sort();
    assert_eq!(joined, want_joined, "each event joined once with the row as of its time (SEED={seed})");

    let mut final_counts: BTreeMap<u64, i64> = BTreeMap::new();
    for (g, _) in table.values() {
        *final_counts.entry(*g).or_default() += 1;
    }
    assert_eq!(*out.upserted.lock().unwrap(), final_counts, "the upsert sink holds the final counts");

    for p in PartitionId::all(2) {
        assert!(block_on(h.open_transactions("counts", p)).unwrap().is_empty(), "no transaction left open");
    }
    let mut topic: Vec<String> = read_topic(&h, "counts", Isolation::ReadCommitted)
        .into_iter()
        .map(|(_, k, v, t)| {
            let v = v.map(|v| String::from_utf8(v).unwrap());
            format!("{t}|{}|{v:?}", String::from_utf8(k).unwrap())
        })
        .collect();
    let mut want_topic: Vec<String> =
        counts.iter().map(|((t, g), c)| format!("{t}|{g}|{:?}", c.after().map(i64::to_string))).collect();
    topic.sort();
    want_topic.sort();
    assert_eq!(topic, want_topic, "the compacted topic holds each change once, deletes as tombstones");
    assert!(want_topic.iter().any(|r| r.ends_with("None")), "some group emptied (a tombstone)");
    block_on(engine.shutdown()).unwrap();
}
