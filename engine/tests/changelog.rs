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
use sluice_engine::dataflow::changelog::{Change, ChangeOp, RetractingAggregate, Table};
use sluice_engine::dataflow::topic::{StartFrom, TopicRecord, TopicSink, TopicSource};
use sluice_engine::dataflow::{
    CheckpointConfig, Event, Generator, Pipeline, PipelineConfig, Scope, Stream, TwoPhaseCommitSink, UserError,
    WatermarkStrategy,
};
use sluice_engine::{Engine, EngineConfig, EngineHandle, Isolation, OwnedRecord, TopicConfig};
use sluice_io::{BatchMeta, CleanupPolicy, EventTime, PartitionId, Timestamp};

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
    scope.source(
        Generator::new(scope.shard(), scope.shards(), n, move |i| Event::new(change_time(i, per_ms), change(seed, i))),
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
