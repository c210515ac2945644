//! Savepoints and operator uids: a job stopped with a savepoint resumes as its next
//! version (an operator added, one removed, another shard count) with the output a run of
//! that version from the start gives; restores that would hand state to the wrong operator
//! are refused with the reason; a savepoint is self-contained and restores from wherever
//! it is copied.

mod common;

use std::{
    collections::BTreeMap,
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use sluice_engine::EngineError;
use sluice_engine::dataflow::checkpoint::CheckpointError;
use sluice_engine::dataflow::{
    ChannelSource, CheckpointConfig, Generator, Pipeline, PipelineConfig, Scope, Stream, WatermarkStrategy, Windows,
};
use sluice_io::{CheckpointId, EventTime};

/// Generator records in the upgrade tests.
const N: u64 = 300_000;

/// Results: (key, window start in ms) -> count, gathered by the sinks.
type Results = Arc<Mutex<Vec<(u64, i64, u64)>>>;

/// The generator numbers `0..n` over the shards, 2 us of work each (so a run lasts long
/// enough to take a savepoint in it), at event time `i / 100` ms.
fn numbers(scope: &Scope, n: u64) -> Stream<u64> {
    numbers_named(scope, n, "generator")
}

/// [`numbers`] with the source's uid.
fn numbers_named(scope: &Scope, n: u64, uid: &str) -> Stream<u64> {
    scope
        .source(
            Generator::new(scope.shard(), scope.shards(), n, |i| i),
            WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis((*i / 100) as i64)),
        )
        .uid(uid)
        .map(|i| {
            let until = Instant::now() + Duration::from_micros(2);
            while Instant::now() < until {}
            i
        })
}

/// Counts per `i % 5` in 100 ms windows under uid "sums", into `out`.
fn sums(numbers: Stream<u64>, out: &Results) {
    let out = out.clone();
    numbers
        .key_by(|i| i % 5)
        .window(Windows::tumbling(Duration::from_millis(100)))
        .count()
        .uid("sums")
        .for_each(move |e| out.lock().unwrap().push((e.value.key, e.value.window.start.millis(), e.value.value)));
}

/// Version 1: a per-`i % 3` count (uid "per-3", its output unused) built before "sums",
/// so "sums" is the second stateful operator.
fn v1(scope: &Scope, out: &Results) {
    let numbers = numbers(scope, N);
    numbers
        .clone()
        .key_by(|i| i % 3)
        .window(Windows::tumbling(Duration::from_millis(200)))
        .count()
        .uid("per-3")
        .for_each(|_| {});
    sums(numbers, out);
}

/// Version 2: "per-3" removed, a stateless filter (keeping everything) added before
/// "sums", which is now the first stateful operator.
fn v2(scope: &Scope, out: &Results) {
    sums(numbers(scope, N).filter(|i| *i < u64::MAX).uid("keep-all"), out);
}

fn sorted(results: &Results) -> Vec<(u64, i64, u64)> {
    let mut got = results.lock().unwrap().clone();
    got.sort_unstable();
    got
}

/// Runs version 1 at one shard until a checkpoint completed, then stops it with a
/// savepoint in `savepoint`; returns what it emitted.
fn v1_stopped_with_savepoint(dir: &Path, savepoint: &Path) -> Results {
    let out = Results::default();
    let sink = out.clone();
    let running = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(CheckpointConfig::new(dir.join("v1")).interval(Duration::from_millis(20)).full_every(1000))
        .spawn(move |scope| v1(scope, &sink))
        .unwrap();
    running.wait_for_checkpoint(CheckpointId(0), Duration::from_secs(20)).expect("a checkpoint completes");
    let taken = running.stop_with_savepoint(savepoint).unwrap();
    assert_eq!(taken.dir, savepoint);
    assert!(taken.duration >= taken.export);
    out
}

#[test]
fn savepoint_upgrade_adds_and_removes_operators_and_rescales_with_the_output_of_a_fresh_run() {
    let dir = common::data_dir("savepoint", "upgrade");
    let savepoint = dir.join("savepoint");
    let before = v1_stopped_with_savepoint(&dir, &savepoint);
    let fresh = Results::default();
    let sink = fresh.clone();
    Pipeline::new(PipelineConfig::with_shards(2))
        .checkpointing(CheckpointConfig::new(dir.join("fresh")).interval(Duration::from_millis(20)))
        .run(move |scope| v2(scope, &sink))
        .unwrap();
    let want = sorted(&fresh);
    assert_eq!(want.len(), 150, "5 keys in 30 windows");
    let before_len = before.lock().unwrap().len();
    assert!(before_len < want.len(), "version 1 stopped before the end ({before_len} results)");

    // Version 2 at two shards from the savepoint, dropping "per-3"'s state explicitly.
    let after = before.clone();
    let running = Pipeline::new(PipelineConfig::with_shards(2))
        .checkpointing(
            CheckpointConfig::new(dir.join("v2"))
                .interval(Duration::from_millis(20))
                .restore_from(&savepoint)
                .allow_non_restored_state(true),
        )
        .spawn(move |scope| v2(scope, &after))
        .unwrap();
    assert!(running.restored_from().is_some(), "version 2 restores the savepoint");
    running.join().unwrap();
    let got = sorted(&before);
    assert_eq!(got, want, "version 1 until the savepoint, then version 2, equals version 2 from the start");
}

#[test]
fn savepoint_restore_refuses_a_removed_operator_unless_allowed_and_a_changed_state_type() {
    let dir = common::data_dir("savepoint", "refused");
    let savepoint = dir.join("savepoint");
    v1_stopped_with_savepoint(&dir, &savepoint);
    let config = |name: &str| CheckpointConfig::new(dir.join(name)).restore_from(&savepoint);

    // "per-3" is gone and dropping it was not allowed.
    let err = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(config("removed"))
        .spawn(|scope| v2(scope, &Results::default()))
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::Checkpoint(CheckpointError::UnknownOperator { operator, .. }) if operator.contains("\"per-3\"")),
        "{err}"
    );
    assert!(err.to_string().contains("allow non-restored state"), "{err}");

    // "sums" now keeps each window's records instead of a count: another state type.
    let err = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(config("state-type").allow_non_restored_state(true))
        .spawn(|scope| {
            numbers(scope, N)
                .key_by(|i| i % 5)
                .window(Windows::tumbling(Duration::from_millis(100)))
                .process(|_, _, records| records.len() as u64)
                .uid("sums")
                .for_each(|_| {});
        })
        .unwrap_err();
    let EngineError::Checkpoint(CheckpointError::IncompatibleState { operator, what, had, has, .. }) = &err else {
        panic!("{err}")
    };
    assert!(operator.contains("\"sums\"") && *what == "state type", "{err}");
    assert_eq!(had, "u64", "{err}");
    assert_ne!(has, "u64", "{err}");

    // "sums" keyed by i32 instead of u64.
    let err = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(config("key-type").allow_non_restored_state(true))
        .spawn(|scope| {
            numbers(scope, N)
                .key_by(|i| (i % 5) as i32)
                .window(Windows::tumbling(Duration::from_millis(100)))
                .count()
                .uid("sums")
                .for_each(|_| {});
        })
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::Checkpoint(CheckpointError::IncompatibleState { what: "key type", had, has, .. }) if had == "u64" && has == "i32"),
        "{err}"
    );

    // Without uids, version 2's window is stateful operator #0, which in version 1 was
    // "per-3" (stored by uid): the position finds nothing, so "sums"' state is unclaimed.
    let err = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(config("no-uids"))
        .spawn(|scope| {
            numbers(scope, N)
                .key_by(|i| i % 5)
                .window(Windows::tumbling(Duration::from_millis(100)))
                .count()
                .for_each(|_| {});
        })
        .unwrap_err();
    assert!(matches!(&err, EngineError::Checkpoint(CheckpointError::UnknownOperator { .. })), "{err}");
}

/// Copies directory `from` to `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn savepoint_copied_elsewhere_restores_without_the_job_that_took_it() {
    let dir = common::data_dir("savepoint", "moved");
    let out = Results::default();
    let sink = out.clone();
    // Incremental checkpoints (a whole one every 1000): the savepoint must not need them.
    let running = Pipeline::new(PipelineConfig::with_shards(2))
        .checkpointing(CheckpointConfig::new(dir.join("v1")).interval(Duration::from_millis(10)).full_every(1000))
        .spawn(move |scope| sums(numbers(scope, N), &sink))
        .unwrap();
    let first = running.wait_for_checkpoint(CheckpointId(0), Duration::from_secs(20)).expect("a checkpoint");
    running.wait_for_checkpoint(first.id, Duration::from_secs(20)).expect("a second checkpoint");
    // Some windows fired (so the savepoint is taken mid-stream, with a watermark).
    let deadline = Instant::now() + Duration::from_secs(20);
    while out.lock().unwrap().len() < 20 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let taken = running.savepoint(dir.join("savepoint")).unwrap();
    // A second savepoint into the same directory is refused; the job goes on.
    let err = running.savepoint(dir.join("savepoint")).unwrap_err();
    assert!(err.to_string().contains("holds a checkpoint already"), "{err}");
    running.stop(false);
    running.join().unwrap();

    // Moved: copied elsewhere, and the original and the job's checkpoints deleted.
    copy_dir(&dir.join("savepoint"), &dir.join("elsewhere"));
    std::fs::remove_dir_all(dir.join("savepoint")).unwrap();
    std::fs::remove_dir_all(dir.join("v1")).unwrap();
    let resumed = Results::default();
    let sink = resumed.clone();
    let running = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(CheckpointConfig::new(dir.join("v2")).restore_from(dir.join("elsewhere")))
        .spawn(move |scope| sums(numbers(scope, N), &sink))
        .unwrap();
    assert_eq!(running.restored_from(), Some(taken.checkpoint.id));
    running.join().unwrap();
    // Every window the resumed job fires has its whole count: the part before the
    // savepoint came from it. The last window is among them.
    let mut want = BTreeMap::new();
    for i in 0..N {
        *want.entry((i % 5, ((i / 100) / 100 * 100) as i64)).or_insert(0u64) += 1;
    }
    let got = sorted(&resumed);
    assert!(!got.is_empty() && got.len() < want.len(), "{} results after the savepoint", got.len());
    for (key, start, count) in &got {
        assert_eq!(want.get(&(*key, *start)), Some(count), "window {start} of key {key}");
    }
    assert!(got.iter().any(|r| r.1 == 2900), "the last window fires");

    // Restarted on its own checkpoint directory, the job restores its own (newer)
    // checkpoint, not the savepoint again.
    let again = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(CheckpointConfig::new(dir.join("v2")).restore_from(dir.join("elsewhere")))
        .spawn(|scope| sums(numbers(scope, N), &Results::default()))
        .unwrap();
    assert!(again.restored_from().is_some_and(|id| id != taken.checkpoint.id));
    again.join().unwrap();
}

#[test]
fn savepoint_of_a_channel_source_job_is_refused_saying_why() {
    // A channel's records are gone once read: no checkpoint or savepoint can replay them,
    // so such a job can neither take one nor restore from one.
    let dir = common::data_dir("savepoint", "channel");
    let savepoint = dir.join("savepoint");
    v1_stopped_with_savepoint(&dir, &savepoint);
    let (_tx, rx) = async_channel::unbounded::<u64>();
    let err = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(CheckpointConfig::new(dir.join("job")).restore_from(&savepoint).allow_non_restored_state(true))
        .spawn(move |scope| {
            scope
                .source(
                    ChannelSource::new(rx.clone()),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis(*i as i64)),
                )
                .uid("channel")
                .for_each(|_| {});
        })
        .unwrap_err();
    let EngineError::Checkpoint(CheckpointError::NotCheckpointable { what }) = &err else { panic!("{err}") };
    assert!(what.contains("ChannelSource"), "{err}");

    // A savepoint directory that holds none is refused too.
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    let err = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(CheckpointConfig::new(dir.join("job2")).restore_from(dir.join("empty")))
        .spawn(|scope| sums(numbers(scope, 10), &Results::default()))
        .unwrap_err();
    assert!(err.to_string().contains("no completed savepoint"), "{err}");
}

#[test]
fn uid_given_twice_is_refused_at_build_with_or_without_checkpoints() {
    let dir = common::data_dir("savepoint", "duplicate-uid");
    let build = |scope: &Scope| {
        let a = numbers(scope, 10).uid("twice");
        a.map(|i| i + 1).uid("twice").for_each(|_| {});
    };
    let err = Pipeline::new(PipelineConfig::with_shards(1)).spawn(build).unwrap_err();
    assert!(matches!(&err, EngineError::Checkpoint(CheckpointError::DuplicateUid { uid }) if uid == "twice"), "{err}");
    let err = Pipeline::new(PipelineConfig::with_shards(2))
        .checkpointing(CheckpointConfig::new(&*dir))
        .spawn(build)
        .unwrap_err();
    assert!(matches!(&err, EngineError::Checkpoint(CheckpointError::DuplicateUid { .. })), "{err}");
}

#[test]
fn uid_keeps_state_when_a_stateful_operator_is_inserted_before_it() {
    // Stopped with a savepoint, then resumed with a new stateful operator (a count of
    // its own) built before "sums": "sums" still gets its state, the new one starts empty.
    let dir = common::data_dir("savepoint", "inserted");
    let savepoint = dir.join("savepoint");
    let out = Results::default();
    let sink = out.clone();
    let running = Pipeline::new(PipelineConfig::with_shards(2))
        .checkpointing(CheckpointConfig::new(dir.join("v1")).interval(Duration::from_millis(20)))
        .spawn(move |scope| sums(numbers(scope, N), &sink))
        .unwrap();
    running.wait_for_checkpoint(CheckpointId(0), Duration::from_secs(20)).expect("a checkpoint");
    running.stop_with_savepoint(&savepoint).unwrap();
    let before = out.lock().unwrap().len();
    let sink = out.clone();
    let others = Results::default();
    let other_sink = others.clone();
    Pipeline::new(PipelineConfig::with_shards(2))
        .checkpointing(CheckpointConfig::new(dir.join("v2")).restore_from(&savepoint))
        .run(move |scope| {
            let numbers = numbers(scope, N);
            let other_sink = other_sink.clone();
            numbers
                .clone()
                .key_by(|i| i % 2)
                .window(Windows::global())
                .trigger(sluice_engine::dataflow::CountTrigger(1000))
                .count()
                .uid("new")
                .for_each(move |e| other_sink.lock().unwrap().push((e.value.key, 0, e.value.value)));
            sums(numbers, &sink);
        })
        .unwrap();
    let mut want = BTreeMap::new();
    for i in 0..N {
        *want.entry((i % 5, ((i / 100) / 100 * 100) as i64)).or_insert(0u64) += 1;
    }
    let want: Vec<_> = want.into_iter().map(|((k, s), c)| (k, s, c)).collect();
    assert!(before < want.len());
    assert_eq!(sorted(&out), want);
    // It saw only the records after the savepoint.
    let counted: u64 = others.lock().unwrap().iter().map(|r| r.2).sum();
    assert!(counted > 0 && counted < N, "the new operator starts empty: it counted {counted}");
}

#[test]
fn uid_on_a_source_keeps_its_positions_when_a_source_is_added_before_it() {
    let dir = common::data_dir("savepoint", "source-uid");
    let savepoint = dir.join("savepoint");
    let out = Results::default();
    let sink = out.clone();
    let running = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(CheckpointConfig::new(dir.join("v1")).interval(Duration::from_millis(20)))
        .spawn(move |scope| sums(numbers_named(scope, N, "numbers"), &sink))
        .unwrap();
    running.wait_for_checkpoint(CheckpointId(0), Duration::from_secs(20)).expect("a checkpoint");
    running.stop_with_savepoint(&savepoint).unwrap();
    let before = out.lock().unwrap().len();
    // Version 2 builds a new source first: by position it would take "numbers"' place.
    let extra = Arc::new(Mutex::new(0u64));
    let (sink, extra_sink) = (out.clone(), extra.clone());
    Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(CheckpointConfig::new(dir.join("v2")).restore_from(&savepoint))
        .run(move |scope| {
            let extra_sink = extra_sink.clone();
            scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), 1000, |i| i),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis(*i as i64)),
                )
                .uid("extra")
                .for_each(move |_| *extra_sink.lock().unwrap() += 1);
            sums(numbers_named(scope, N, "numbers"), &sink);
        })
        .unwrap();
    let mut want = BTreeMap::new();
    for i in 0..N {
        *want.entry((i % 5, ((i / 100) / 100 * 100) as i64)).or_insert(0u64) += 1;
    }
    let want: Vec<_> = want.into_iter().map(|((k, s), c)| (k, s, c)).collect();
    assert!(before < want.len());
    assert_eq!(sorted(&out), want, "\"numbers\" resumed where it stopped");
    assert_eq!(*extra.lock().unwrap(), 1000, "the new source starts from its beginning");
}

#[test]
fn savepoint_stop_commits_the_sinks_transactions_before_the_job_ends() {
    // A two-phase-commit sink (an upsert table) and a plain callback see the same results:
    // once stop_with_savepoint returns, the table holds exactly what the job fired before
    // the savepoint (committed, nothing after it), and the resumed job completes it.
    let dir = common::data_dir("savepoint", "commits");
    let savepoint = dir.join("savepoint");
    let table = Arc::new(Mutex::new(BTreeMap::new()));
    let build = |out: Results, table: Arc<Mutex<BTreeMap<(u64, i64), u64>>>| {
        move |scope: &Scope| {
            let counts = numbers(scope, N)
                .key_by(|i| i % 5)
                .window(Windows::tumbling(Duration::from_millis(100)))
                .count()
                .uid("sums");
            let out = out.clone();
            counts.clone().for_each(move |e| {
                out.lock().unwrap().push((e.value.key, e.value.window.start.millis(), e.value.value));
            });
            let table = table.clone();
            counts.map(|r| ((r.key, r.window.start.millis()), r.value)).to_two_phase_commit(
                sluice_engine::dataflow::Upsert::new(move |k: (u64, i64), v: u64| {
                    table.lock().unwrap().insert(k, v);
                    Ok(())
                }),
            );
        }
    };
    let fired = Results::default();
    let running = Pipeline::new(PipelineConfig::with_shards(2))
        .checkpointing(CheckpointConfig::new(dir.join("v1")).interval(Duration::from_millis(20)))
        .spawn(build(fired.clone(), table.clone()))
        .unwrap();
    running.wait_for_checkpoint(CheckpointId(0), Duration::from_secs(20)).expect("a checkpoint");
    running.stop_with_savepoint(&savepoint).unwrap();
    let committed: Vec<(u64, i64, u64)> = table.lock().unwrap().iter().map(|(&(k, s), &c)| (k, s, c)).collect();
    assert!(!committed.is_empty() && committed.len() < 150, "{} results committed", committed.len());
    assert_eq!(committed, sorted(&fired), "committed at the stop: exactly what fired before the savepoint");

    Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(CheckpointConfig::new(dir.join("v2")).restore_from(&savepoint))
        .run(build(fired.clone(), table.clone()))
        .unwrap();
    let mut want = BTreeMap::new();
    for i in 0..N {
        *want.entry((i % 5, ((i / 100) / 100 * 100) as i64)).or_insert(0u64) += 1;
    }
    assert_eq!(*table.lock().unwrap(), want);
}
