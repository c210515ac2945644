//! Checkpoints in one process: a bounded job that checkpoints as it runs writes exactly
//! the reference output through its exactly-once sink, and a restart on its checkpoints
//! replays nothing; a stopped run resumed from a damaged latest checkpoint falls back to
//! the one before and loses nothing; transactions are invisible to
//! `read_committed` readers until committed, and aborted ones never show; an unaligned
//! checkpoint's in-flight records come back after the watermarks that were before them.

#[path = "checkpoint_job/mod.rs"]
mod checkpoint_job;
mod common;

use std::time::{Duration, Instant};

use checkpoint_job::{JobConfig, committed_output, diff, engine, expected, input, produce, spawn};
use futures_lite::future::block_on;
use std::sync::{Arc, Mutex};

use sluice_engine::dataflow::checkpoint::CheckpointError;
use sluice_engine::dataflow::topic::{StartFrom, TopicRecord, TopicSource};
use sluice_engine::dataflow::{
    ChannelSource, CheckpointConfig, CheckpointStats, Generator, Pipeline, PipelineConfig, SharedGenerator,
    SharedSequence, WatermarkStrategy, Windows,
};
use sluice_engine::{Consumer, EngineError, Isolation, OffsetReset, OwnedRecord, SeekTo};
use sluice_io::{CheckpointId, EventTime, PartitionId, ProducerId, Timestamp, txn::Marker};

#[test]
fn a_bounded_job_writes_each_result_once_and_a_restart_replays_nothing() {
    use sluice_engine::dataflow::CheckpointMode::{Aligned, Unaligned};
    for (shards, mode) in [(1, Aligned), (2, Aligned), (2, Unaligned)] {
        let dir = common::data_dir("checkpoint", &format!("bounded-{shards}-{mode}"));
        let records = input(7, 3000, 20);
        let want = expected(&records);
        let e = engine(&dir.join("data"));
        let h = e.handle();
        produce(&h, &records);
        let config = JobConfig {
            checkpoints: dir.join("checkpoints"),
            shards,
            interval: Duration::from_millis(20),
            work: Duration::from_micros(20),
            mode,
        };
        let running = spawn(&h, &config);
        assert_eq!(running.restored_from(), None);
        running.join().unwrap();
        let got = committed_output(&h);
        assert!(got == want, "{shards} shards: {}", diff(&got, &want));

        // Again on the same checkpoints: it restores the final one and has nothing to do.
        let running = spawn(&h, &config);
        assert!(running.restored_from().is_some(), "{shards} shards: the second run restores");
        running.join().unwrap();
        let again = committed_output(&h);
        assert!(again == want, "{shards} shards, after the restart: {}", diff(&again, &want));

        // The output read by another checkpointed pipeline, read_committed, starting from a
        // consumer group: it sees each result once, and its checkpoints commit its
        // positions to the group.
        let source = block_on(TopicSource::open(
            &h,
            checkpoint_job::OUT,
            StartFrom::Committed { group: "readers".into(), reset: OffsetReset::Earliest },
        ))
        .unwrap()
        .bounded()
        .read_committed();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        Pipeline::new(PipelineConfig::with_shards(shards))
            .checkpointing(CheckpointConfig::new(dir.join("reader-checkpoints")).interval(Duration::from_millis(10)))
            .run(move |scope| {
                let sink = sink.clone();
                scope.topic_source(&source, WatermarkStrategy::monotonous(TopicRecord::event_time)).for_each(
                    move |e| sink.lock().unwrap().push(String::from_utf8(e.value.value.unwrap_or_default()).unwrap()),
                );
            })
            .unwrap();
        let mut lines = lines.lock().unwrap().clone();
        lines.sort();
        assert!(lines == want, "{shards} shards, read by a pipeline: {}", diff(&lines, &want));
        let committed = block_on(h.committed_offsets("readers")).unwrap();
        for p in PartitionId::all(3) {
            let end = block_on(h.offsets(checkpoint_job::OUT, p)).unwrap().1;
            let key = (checkpoint_job::OUT.to_string(), p);
            // Committed asynchronously after the final checkpoint: wait a little for it.
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut at = committed.get(&key).copied();
            while at != Some(end) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
                at = block_on(h.committed_offsets("readers")).unwrap().get(&key).copied();
            }
            assert_eq!(at, Some(end), "{shards} shards: partition {p}'s committed offset");
        }
        block_on(e.shutdown()).unwrap();
    }
}

#[test]
fn a_damaged_latest_checkpoint_falls_back_to_the_previous_one() {
    let dir = common::data_dir("checkpoint", "damaged");
    let records = input(11, 6000, 30);
    let want = expected(&records);
    let e = engine(&dir.join("data"));
    let h = e.handle();
    produce(&h, &records);
    let checkpoints = dir.join("checkpoints");
    let config = JobConfig {
        checkpoints: checkpoints.clone(),
        shards: 2,
        interval: Duration::from_millis(30),
        work: Duration::from_micros(150),
        mode: sluice_engine::dataflow::CheckpointMode::Aligned,
    };
    // Stop the first run (without draining) once at least three checkpoints completed.
    let running = spawn(&h, &config);
    stop_after_checkpoints(&running, 3);
    let taken: Vec<u64> = running.checkpoints().iter().map(|c| c.id.get()).collect();
    running.join().unwrap();
    // Flip a byte in the body of the latest completed checkpoint's first part.
    let mut completed: Vec<_> = std::fs::read_dir(&checkpoints)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("MANIFEST").exists())
        .collect();
    completed.sort();
    assert!(completed.len() >= 2, "kept checkpoints: {completed:?}");
    let latest = completed.last().unwrap().clone();
    let previous = completed[completed.len() - 2].clone();
    let part = latest.join("shard-0.part");
    let mut bytes = std::fs::read(&part).unwrap();
    let at = bytes.len() - 1;
    bytes[at] ^= 0x5a;
    std::fs::write(&part, bytes).unwrap();

    let running = spawn(&h, &config);
    let restored = running.restored_from().expect("restores an older checkpoint");
    let id_of = |p: &std::path::Path| p.file_name().unwrap().to_str().unwrap()[4..].parse::<u64>().unwrap();
    assert_eq!(restored.get(), id_of(&previous), "taken {taken:?}; latest {latest:?} is damaged");
    running.join().unwrap();
    // Nothing is lost and nothing is wrong; what the damaged checkpoint had committed is
    // written again when its input is replayed from the older one (falling back trades
    // exactly-once for the span between the two, as restoring any older checkpoint does).
    let got = committed_output(&h);
    let mut distinct = got.clone();
    distinct.dedup();
    assert!(distinct == want, "{}", diff(&distinct, &want));
    block_on(e.shutdown()).unwrap();
}

#[test]
fn read_committed_shows_only_committed_transactions() {
    let dir = common::data_dir("checkpoint", "read-committed");
    let e = engine(&dir);
    let h = e.handle();
    block_on(h.create_topic("t", 1, None)).unwrap();
    let rec = |v: &str| OwnedRecord::new(None, v.as_bytes().to_vec(), Timestamp(1));
    let append = |records: Vec<OwnedRecord>, producer: i64, seq: i32| {
        block_on(h.append("t", PartitionId(0), records, Marker::data_meta(ProducerId(producer), seq))).unwrap();
    };
    let plain = |v: &str| {
        block_on(h.append("t", PartitionId(0), vec![rec(v)], sluice_io::BatchMeta::default())).unwrap();
    };
    let a = block_on(h.init_producer_id()).unwrap().0;
    let b = block_on(h.init_producer_id()).unwrap().0;
    plain("p0");
    append(vec![rec("a1"), rec("a2")], a, 0);
    append(vec![rec("b1")], b, 0);
    plain("p1");
    let read = |isolation| {
        block_on(async {
            let mut c = Consumer::new(h.clone(), 1 << 20).with_isolation(isolation);
            c.assign(&[("t".to_string(), PartitionId(0))], SeekTo::Earliest).await.unwrap();
            let mut out = Vec::new();
            for polled in c.poll(Duration::ZERO).await.unwrap() {
                out.extend(
                    polled.batches.records().map(|r| String::from_utf8(r.unwrap().value_bytes().to_vec()).unwrap()),
                );
            }
            (out, c.positions()[&("t".to_string(), PartitionId(0))])
        })
    };
    // The helper that reads a whole topic to its current end sees the same at each step.
    let to_end = |isolation| {
        let polled = block_on(h.read_to_end("t", isolation)).unwrap();
        let records = polled.iter().flat_map(|p| p.batches.records());
        records.map(|r| String::from_utf8(r.unwrap().value_bytes().to_vec()).unwrap()).collect::<Vec<_>>()
    };
    // Both transactions open: read_committed stops at the first one's first record.
    let (seen, stable) = read(Isolation::ReadCommitted);
    assert_eq!(seen, ["p0"]);
    assert_eq!(to_end(Isolation::ReadCommitted), ["p0"]);
    assert_eq!(to_end(Isolation::ReadUncommitted), ["p0", "a1", "a2", "b1", "p1"]);
    assert_eq!(stable.0, 1, "the last stable offset is a1's");
    assert_eq!(read(Isolation::ReadUncommitted).0, ["p0", "a1", "a2", "b1", "p1"]);
    // b commits first: a still holds everything after it back.
    block_on(h.write_marker("t", PartitionId(0), ProducerId(b), Marker::Commit)).unwrap();
    assert_eq!(read(Isolation::ReadCommitted).0, ["p0"]);
    // a aborts: its records vanish, b's and the plain ones show, markers never do.
    block_on(h.write_marker("t", PartitionId(0), ProducerId(a), Marker::Abort)).unwrap();
    assert_eq!(read(Isolation::ReadCommitted).0, ["p0", "b1", "p1"]);
    assert_eq!(read(Isolation::ReadUncommitted).0, ["p0", "a1", "a2", "b1", "p1"]);
    assert_eq!(to_end(Isolation::ReadCommitted), ["p0", "b1", "p1"]);
    let open = block_on(h.open_transactions("t", PartitionId(0))).unwrap();
    assert!(open.is_empty(), "{open:?}");
    append(vec![rec("a3")], b + 1_000_000, 0);
    assert_eq!(block_on(h.open_transactions("t", PartitionId(0))).unwrap().len(), 1);
    block_on(e.shutdown()).unwrap();
}

#[test]
fn pipelines_that_cannot_checkpoint_are_refused_with_the_reason() {
    let dir = common::data_dir("checkpoint", "refused");
    // A source that cannot resume from a position (a channel) cannot be replayed.
    let (_tx, rx) = async_channel::unbounded::<u64>();
    let err = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(CheckpointConfig::new(dir.join("a")))
        .run(move |scope| {
            scope
                .source(
                    ChannelSource::new(rx.clone()),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis(*i as i64)),
                )
                .for_each(|_| {});
        })
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::Checkpoint(CheckpointError::NotCheckpointable { what }) if what.contains("cannot resume")),
        "{err}"
    );
    // Nor can a generator whose records go to whichever shard asks.
    let sequence = SharedSequence::new(10, 1);
    let err = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(CheckpointConfig::new(dir.join("c")))
        .run(move |scope| {
            scope
                .source(
                    SharedGenerator::new(sequence.clone(), |i| i),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis(*i as i64)),
                )
                .for_each(|_| {});
        })
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::Checkpoint(CheckpointError::NotCheckpointable { what }) if what.contains("SharedGenerator")),
        "{err}"
    );
    // A zero interval is a bad config.
    let err = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(CheckpointConfig::new(dir.join("b")).interval(Duration::ZERO))
        .run(|_| {})
        .unwrap_err();
    assert!(matches!(err, EngineError::InvalidConfig(_)), "{err}");
}

#[test]
fn a_generator_pipeline_restores_its_window_state_and_positions() {
    // Count per key in 100 ms windows over a generator, checkpointing; compare with the
    // plain computation, and check the figures a checkpoint reports.
    let dir = common::data_dir("checkpoint", "generator");
    let totals = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    let sink = totals.clone();
    let running = Pipeline::new(PipelineConfig::with_shards(2))
        .checkpointing(CheckpointConfig::new(&*dir).interval(Duration::from_millis(10)))
        .spawn(move |scope| {
            let sink = sink.clone();
            scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), 200_000, |i| i),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis((*i / 100) as i64)),
                )
                .key_by(|i| i % 7)
                .window(Windows::tumbling(Duration::from_millis(100)))
                .count()
                .for_each(move |e| {
                    *sink.lock().unwrap().entry((e.value.key, e.value.window.start.millis())).or_insert(0) +=
                        e.value.value;
                });
        })
        .unwrap();
    let stats = loop {
        let s = running.checkpoints();
        if !s.is_empty() {
            break s;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    running.join().unwrap();
    let first = stats[0];
    assert!(first.bytes > 0 && first.duration > Duration::ZERO, "{first:?}");
    let mut want = std::collections::BTreeMap::new();
    for i in 0..200_000u64 {
        *want.entry((i % 7, ((i / 100) / 100 * 100) as i64)).or_insert(0u64) += 1;
    }
    assert_eq!(*totals.lock().unwrap(), want);
}

/// Waits for `k` completed checkpoints, then stops `running` without draining.
fn stop_after_checkpoints(running: &sluice_engine::dataflow::RunningPipeline, k: usize) {
    let mut last = CheckpointId(0);
    for n in 1..=k {
        let stats = running.wait_for_checkpoint(last, Duration::from_secs(30));
        last = stats.unwrap_or_else(|| panic!("checkpoint {n} of {k} in 30 s")).id;
    }
    running.stop(false);
}

#[test]
fn waiting_for_a_checkpoint_returns_each_in_turn_and_none_once_no_more_will_complete() {
    let dir = common::data_dir("checkpoint", "wait-for");
    let records = input(5, 2000, 10);
    let e = engine(&dir.join("data"));
    let h = e.handle();
    produce(&h, &records);
    let config = JobConfig {
        checkpoints: dir.join("checkpoints"),
        shards: 1,
        interval: Duration::from_millis(20),
        work: Duration::from_micros(100),
        mode: sluice_engine::dataflow::CheckpointMode::Aligned,
    };
    let running = spawn(&h, &config);
    let first = running.wait_for_checkpoint(CheckpointId(0), Duration::from_secs(30)).expect("a first checkpoint");
    let second = running.wait_for_checkpoint(first.id, Duration::from_secs(30)).expect("a second checkpoint");
    assert!(second.id > first.id, "{first:?} then {second:?}");
    assert_eq!(running.checkpoints().iter().find(|c| c.id == second.id), Some(&second));
    // A bounded job ends with its final checkpoint: after that, waiting returns at once.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !running.is_finished() {
        assert!(Instant::now() < deadline, "the job ends");
        std::thread::sleep(Duration::from_millis(5));
    }
    let last = running.checkpoints().last().unwrap().id;
    let t = Instant::now();
    assert_eq!(running.wait_for_checkpoint(last, Duration::from_secs(10)), None);
    assert!(t.elapsed() < Duration::from_secs(5), "waited {:?} for a checkpoint that cannot come", t.elapsed());
    running.join().unwrap();
    block_on(e.shutdown()).unwrap();
}

#[test]
fn a_restored_bounded_job_stops_where_the_interrupted_run_would_have() {
    for shards in [1, 2] {
        let dir = common::data_dir("checkpoint", &format!("bounded-end-{shards}"));
        let records = input(13, 4000, 20);
        let want = expected(&records);
        let e = engine(&dir.join("data"));
        let h = e.handle();
        produce(&h, &records);
        let config = JobConfig {
            checkpoints: dir.join("checkpoints"),
            shards,
            interval: Duration::from_millis(20),
            work: Duration::from_micros(100),
            mode: sluice_engine::dataflow::CheckpointMode::Aligned,
        };
        let running = spawn(&h, &config);
        stop_after_checkpoints(&running, 2);
        running.join().unwrap();
        // More input arrives before the restart: the restored run must not read it.
        let later: Vec<checkpoint_job::In> =
            input(14, 500, 20).into_iter().map(|(k, t, v)| (k, t + 100_000, v)).collect();
        checkpoint_job::append_input(&h, &later);
        let running = spawn(&h, &config);
        assert!(running.restored_from().is_some(), "{shards} shards: the second run restores");
        running.join().unwrap();
        let got = committed_output(&h);
        assert!(got == want, "{shards} shards: {}", diff(&got, &want));
        block_on(e.shutdown()).unwrap();
    }
}

#[test]
fn checkpointed_join_state_moves_between_one_and_two_shards_and_the_output_stays_exact() {
    // The job's window join and interval join hold records of open windows and intervals
    // at every checkpoint; a restore at another shard count must hand each key's records
    // to the shard that owns its key group now, or pairs go missing.
    for (first, second) in [(1, 2), (2, 1)] {
        for mode in
            [sluice_engine::dataflow::CheckpointMode::Aligned, sluice_engine::dataflow::CheckpointMode::Unaligned]
        {
            let dir = common::data_dir("checkpoint", &format!("join-{first}-{second}-{mode}"));
            let records = input(21, 4000, 20);
            let want = expected(&records);
            assert!(want.iter().any(|l| l.starts_with("J|")) && want.iter().any(|l| l.starts_with("I|")));
            let e = engine(&dir.join("data"));
            let h = e.handle();
            produce(&h, &records);
            let mut config = JobConfig {
                checkpoints: dir.join("checkpoints"),
                shards: first,
                interval: Duration::from_millis(20),
                work: Duration::from_micros(100),
                mode,
            };
            let running = spawn(&h, &config);
            stop_after_checkpoints(&running, 3);
            running.join().unwrap();
            config.shards = second;
            let running = spawn(&h, &config);
            assert!(running.restored_from().is_some(), "{first} -> {second} shards, {mode}: the second run restores");
            running.join().unwrap();
            let got = committed_output(&h);
            assert!(got == want, "{first} -> {second} shards, {mode}: {}", diff(&got, &want));
            block_on(e.shutdown()).unwrap();
        }
    }
}

/// Ends `running`: stopped once `stop_after` checkpoints completed (when given), else run
/// to the end of its input; returns its checkpoints and the one it restored from.
fn finish(
    running: sluice_engine::dataflow::RunningPipeline,
    stop_after: Option<usize>,
) -> (Vec<sluice_engine::dataflow::CheckpointStats>, Option<CheckpointId>) {
    if let Some(k) = stop_after {
        stop_after_checkpoints(&running, k);
    }
    let stats = running.checkpoints();
    let restored = running.restored_from();
    running.join().unwrap();
    (stats, restored)
}

/// A two-phase-commit sink into a shared "external system": transactions are staged
/// record lists with an id, only committed ones become visible, and committing an id
/// twice (as a restore does for what its checkpoint pre-committed) changes nothing.
struct Staged {
    visible: std::sync::Arc<std::sync::Mutex<(std::collections::HashSet<u64>, Vec<String>)>>,
}

static NEXT_TXN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl sluice_engine::dataflow::TwoPhaseCommitSink<String> for Staged {
    type Txn = (u64, Vec<String>);
    fn begin(&mut self) -> Result<(u64, Vec<String>), sluice_engine::dataflow::UserError> {
        Ok((NEXT_TXN.fetch_add(1, std::sync::atomic::Ordering::Relaxed), Vec::new()))
    }
    fn write(
        &mut self,
        txn: &mut Self::Txn,
        record: sluice_engine::dataflow::Event<String>,
    ) -> Result<(), sluice_engine::dataflow::UserError> {
        txn.1.push(record.value);
        Ok(())
    }
    fn pre_commit(&mut self, _: &mut Self::Txn) -> Result<(), sluice_engine::dataflow::UserError> {
        Ok(())
    }
    fn commit(&mut self, (id, records): Self::Txn) -> Result<(), sluice_engine::dataflow::UserError> {
        let mut visible = self.visible.lock().unwrap();
        if visible.0.insert(id) {
            visible.1.extend(records);
        }
        Ok(())
    }
    fn abort(&mut self, _: Self::Txn) -> Result<(), sluice_engine::dataflow::UserError> {
        Ok(())
    }
}

/// The counting job of the stop-and-restore tests: generator numbers `0..n` split over
/// the shards, 2 us of work each (so a run lasts long enough to be stopped), counted per
/// `i % 5` in 100 ms windows of event time `i / 100` ms.
fn slow_counts(
    scope: &sluice_engine::dataflow::Scope,
    n: u64,
) -> sluice_engine::dataflow::Stream<sluice_engine::dataflow::WindowResult<u64, u64>> {
    scope
        .source(
            Generator::new(scope.shard(), scope.shards(), n, |i| i),
            WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis((*i / 100) as i64)),
        )
        .map(|i| {
            let until = Instant::now() + Duration::from_micros(2);
            while Instant::now() < until {}
            i
        })
        .key_by(|i| i % 5)
        .window(Windows::tumbling(Duration::from_millis(100)))
        .count()
}

/// What [`slow_counts`] must count: per (key, window start).
fn slow_counts_want(n: u64) -> std::collections::BTreeMap<(u64, i64), u64> {
    let mut counts = std::collections::BTreeMap::new();
    for i in 0..n {
        *counts.entry((i % 5, ((i / 100) / 100 * 100) as i64)).or_default() += 1;
    }
    counts
}

#[test]
fn two_phase_commit_and_upsert_sinks_expose_each_result_once_across_a_stop_and_restore() {
    use std::collections::BTreeMap;

    let dir = common::data_dir("checkpoint", "two-phase");
    let visible = Arc::new(Mutex::new((std::collections::HashSet::new(), Vec::new())));
    let table = Arc::new(Mutex::new(BTreeMap::new()));
    let n = 300_000u64;
    let run = |stop_after: Option<usize>| {
        let (visible, table) = (visible.clone(), table.clone());
        let running = Pipeline::new(PipelineConfig::with_shards(2))
            .checkpointing(CheckpointConfig::new(&*dir).interval(Duration::from_millis(15)))
            .spawn(move |scope| {
                let counts = slow_counts(scope, n);
                counts
                    .clone()
                    .map(|r| format!("{}|{}|{}", r.key, r.window.start.millis(), r.value))
                    .to_two_phase_commit(Staged { visible: visible.clone() });
                let table = table.clone();
                counts.map(|r| ((r.key, r.window.start.millis()), r.value)).to_two_phase_commit(
                    sluice_engine::dataflow::Upsert::new(move |k: (u64, i64), v: u64| {
                        table.lock().unwrap().insert(k, v);
                        Ok(())
                    }),
                );
            })
            .unwrap();
        finish(running, stop_after).1
    };
    assert_eq!(run(Some(3)), None);
    let partial = visible.lock().unwrap().1.len();
    assert!(run(None).is_some(), "the second run restores");
    let mut want = Vec::new();
    let mut want_table = BTreeMap::new();
    for ((k, s), c) in slow_counts_want(n) {
        want.push(format!("{k}|{s}|{c}"));
        want_table.insert((k, s), c);
    }
    let mut got = visible.lock().unwrap().1.clone();
    got.sort();
    want.sort();
    assert!(partial < want.len(), "the first run stopped before the end ({partial} results visible)");
    assert_eq!(got, want, "each result visible once");
    assert_eq!(*table.lock().unwrap(), want_table);
}

#[test]
fn a_generator_job_resumes_at_another_shard_count_with_each_result_once() {
    // Stopped at 2 shards, resumed at 1 and stopped again, then resumed at 2 to the end:
    // each generator index is read once over the three runs, so each window's count is
    // right and visible once.
    let dir = common::data_dir("checkpoint", "generator-rescale");
    let visible = Arc::new(Mutex::new((std::collections::HashSet::new(), Vec::new())));
    let n = 300_000u64;
    let run = |shards: usize, stop_after: Option<usize>| {
        let visible = visible.clone();
        let running = Pipeline::new(PipelineConfig::with_shards(shards))
            .checkpointing(CheckpointConfig::new(&*dir).interval(Duration::from_millis(15)))
            .spawn(move |scope| {
                slow_counts(scope, n)
                    .map(|r| format!("{}|{}|{}", r.key, r.window.start.millis(), r.value))
                    .to_two_phase_commit(Staged { visible: visible.clone() });
            })
            .unwrap();
        finish(running, stop_after).1
    };
    assert_eq!(run(2, Some(3)), None);
    let first = visible.lock().unwrap().1.len();
    assert!(run(1, Some(1)).is_some(), "the run at 1 shard restores");
    let second = visible.lock().unwrap().1.len();
    assert!(run(2, None).is_some(), "the last run at 2 shards restores");
    let mut want: Vec<String> = slow_counts_want(n).iter().map(|((k, s), c)| format!("{k}|{s}|{c}")).collect();
    let mut got = visible.lock().unwrap().1.clone();
    got.sort();
    want.sort();
    // The middle run's results become visible when its checkpoint's transactions are
    // committed, which may be by the last run's restore: only the first run's count says
    // that the runs stopped before the end.
    assert!(first < want.len(), "the first run stopped before the end: {first} of {} results", want.len());
    assert!(second >= first, "results stay visible: {first}, then {second}");
    assert_eq!(got, want, "each result visible once");
}

#[test]
fn a_checkpoint_that_times_out_is_aborted_and_the_next_one_completes() {
    // The only shard stalls for 400 ms on one record: a checkpoint begun meanwhile cannot
    // complete within its 100 ms timeout, is aborted, and later ones complete.
    let dir = common::data_dir("checkpoint", "timeout");
    let total = Arc::new(Mutex::new(0u64));
    let sink = total.clone();
    let running = Pipeline::new(PipelineConfig { batch_records: 16, ..PipelineConfig::with_shards(1) })
        .checkpointing(
            CheckpointConfig::new(&*dir).interval(Duration::from_millis(10)).timeout(Duration::from_millis(100)),
        )
        .spawn(move |scope| {
            let sink = sink.clone();
            scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), 20_000, |i| i),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis(*i as i64)),
                )
                .map(|i| {
                    if i == 10_000 {
                        std::thread::sleep(Duration::from_millis(400));
                    } else {
                        let until = Instant::now() + Duration::from_micros(20);
                        while Instant::now() < until {}
                    }
                    i
                })
                .key_by(|i| i % 3)
                .window(Windows::tumbling(Duration::from_millis(1000)))
                .count()
                .for_each(move |e| *sink.lock().unwrap() += e.value.value);
        })
        .unwrap();
    let checkpoints = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let done = running.checkpoints();
            if done.windows(2).any(|w| w[1].id > w[0].id.next()) || Instant::now() > deadline {
                break done;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    running.join().unwrap();
    let ids: Vec<u64> = checkpoints.iter().map(|c| c.id.get()).collect();
    assert!(ids.windows(2).any(|w| w[1] > w[0] + 1), "an aborted checkpoint leaves a gap in the ids: {ids:?}");
    assert_eq!(*total.lock().unwrap(), 20_000, "every record counted once");
    let aborted = (ids[0]..*ids.last().unwrap()).find(|id| !ids.contains(id)).unwrap();
    assert!(!dir.join(format!("chk-{aborted:020}")).exists(), "the aborted checkpoint {aborted} was removed");
}

/// A running sum per key, emitted on every record.
struct RunningSum;

impl sluice_engine::dataflow::KeyedProcessFunction<u64, u64> for RunningSum {
    type State = sluice_engine::dataflow::ValueState<u64>;
    type Out = (u64, u64);
    fn process_element(
        &mut self,
        key: &u64,
        e: sluice_engine::dataflow::Event<u64>,
        sum: &mut Self::State,
        ctx: &mut sluice_engine::dataflow::ProcessContext<'_, u64, (u64, u64)>,
    ) {
        let s = sum.get_or_insert_with(|| 0);
        *s += e.value;
        ctx.emit((*key, *s));
    }
}

/// 20 000 keys get a record each, then only 10 keys for a long while.
fn incremental_key(i: u64) -> u64 {
    if i < 20_000 { i } else { i % 10 }
}

type Table = Arc<Mutex<std::collections::BTreeMap<u64, u64>>>;

/// What an incremental test runs on its keyed records: a `(key, value)` per result.
type Stage = fn(sluice_engine::dataflow::KeyedStream<u64, u64>) -> sluice_engine::dataflow::Stream<(u64, u64)>;

/// Runs a two-shard checkpointing pipeline (10 ms interval, whole snapshots only every
/// 1000th, two kept): records `0..n` at event time `i / div` ms, keyed by
/// [`incremental_key`], through `stage`, upserted into `table`; stopped after `stop_after`
/// checkpoints if given. Returns the checkpoints' figures and what it restored from.
fn run_incremental(
    dir: &std::path::Path,
    n: u64,
    div: u64,
    table: &Table,
    stage: Stage,
    stop_after: Option<usize>,
) -> (Vec<sluice_engine::dataflow::CheckpointStats>, Option<CheckpointId>) {
    let table = table.clone();
    let running = Pipeline::new(PipelineConfig::with_shards(2))
        .checkpointing(CheckpointConfig::new(dir).interval(Duration::from_millis(10)).full_every(1000).keep(2))
        .spawn(move |scope| {
            let table = table.clone();
            let keyed = scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), n, |i| i),
                    WatermarkStrategy::monotonous(move |i: &u64| EventTime::from_millis((*i / div) as i64)),
                )
                .map(|i| {
                    let until = Instant::now() + Duration::from_micros(2);
                    while Instant::now() < until {}
                    i
                })
                .key_by(|i| incremental_key(*i))
                .boxed();
            stage(keyed).to_two_phase_commit(sluice_engine::dataflow::Upsert::new(move |k: u64, v: u64| {
                table.lock().unwrap().insert(k, v);
                Ok(())
            }));
        })
        .unwrap();
    finish(running, stop_after)
}

/// Checks that later checkpoints of a stopped run hold only the few changed keys, and
/// returns after a second run restored.
fn check_incremental(dir: &std::path::Path, table: &Table, n: u64, div: u64, stage: Stage) {
    let (first, _) = run_incremental(dir, n, div, table, stage, Some(8));
    let most = first.iter().map(|c| c.keys).max().unwrap();
    let later = first.last().unwrap();
    assert!(most >= 1_000, "a checkpoint holds every key seen: {first:?}");
    assert!(later.keys < most / 10, "later checkpoints hold only changed keys: {first:?}");
    // Only the last two are kept, but the whole snapshot they build on is too.
    let kept = std::fs::read_dir(dir).unwrap().filter(|e| e.as_ref().unwrap().path().join("MANIFEST").exists()).count();
    assert!(kept >= 3, "two kept checkpoints and the chain under them: {kept}");
    let (_, restored) = run_incremental(dir, n, div, table, stage, None);
    assert!(restored.is_some(), "the second run restores");
}

#[test]
fn incremental_snapshots_write_only_changed_keys_and_restore_through_the_chain() {
    // A running sum per key: later checkpoints are deltas of a few keys on a chain back to
    // a whole one, and after a stop and a restore through the chain the sums are right.
    let dir = common::data_dir("checkpoint", "incremental");
    let table = Table::default();
    let n = 400_000u64;
    check_incremental(&dir, &table, n, 1, |keyed| keyed.process(RunningSum));
    let mut want = std::collections::BTreeMap::new();
    for i in 0..n {
        *want.entry(incremental_key(i)).or_insert(0u64) += i;
    }
    assert_eq!(*table.lock().unwrap(), want);
}

/// Runs the incremental join job at `shards` shards (10 ms interval, whole snapshots only
/// every 1000th): records `0..n` at event time `i / 1000` ms (one window of an hour),
/// keyed by [`incremental_key`]; the right side is the odd records below 20 000, the left
/// every other. Counts the pairs per key into `pairs`; stopped after `stop_after`
/// checkpoints if given.
fn run_incremental_join(
    dir: &std::path::Path,
    shards: usize,
    n: u64,
    pairs: &Table,
    stop_after: Option<usize>,
) -> (Vec<sluice_engine::dataflow::CheckpointStats>, Option<CheckpointId>) {
    let pairs = pairs.clone();
    let right = |i: &u64| *i < 20_000 && i % 2 == 1;
    let running = Pipeline::new(PipelineConfig::with_shards(shards))
        .checkpointing(CheckpointConfig::new(dir).interval(Duration::from_millis(10)).full_every(1000).keep(2))
        .spawn(move |scope| {
            let pairs = pairs.clone();
            let records = scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), n, |i| i),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis((*i / 1000) as i64)),
                )
                .map(|i| {
                    let until = Instant::now() + Duration::from_micros(2);
                    while Instant::now() < until {}
                    i
                });
            let left = records.clone().filter(move |i| !right(i)).key_by(|i| incremental_key(*i));
            left.window_join(
                records.filter(right).key_by(|i| incremental_key(*i)),
                Windows::tumbling(Duration::from_secs(3600)),
                |k, _, _| *k,
            )
            .for_each(move |e| *pairs.lock().unwrap().entry(e.value).or_insert(0) += 1);
        })
        .unwrap();
    finish(running, stop_after)
}

#[test]
fn checkpointed_join_snapshots_write_only_new_records_and_restore_through_the_chain() {
    // One long window: the first checkpoints hold the 20 000 keys' records, later ones
    // only the entries new records went to (10 keys); after a stop and a restore at one
    // shard through the chain of deltas, every pair comes out once.
    let dir = common::data_dir("checkpoint", "incremental-join");
    let pairs = Table::default();
    // Long enough that 8 checkpoints complete before the input ends even while the other
    // tests load the machine (at 400 000 the input sometimes ended first).
    let n = 800_000u64;
    let (first, _) = run_incremental_join(&dir, 2, n, &pairs, Some(8));
    let most = first.iter().map(|c| c.keys).max().unwrap();
    let later = first.last().unwrap();
    assert!(most >= 1_000, "a checkpoint holds every entry seen: {first:?}");
    assert!(later.keys < most / 10, "later checkpoints hold only the entries that grew: {first:?}");
    assert!(pairs.lock().unwrap().is_empty(), "the window has not fired before the stop");
    let (_, restored) = run_incremental_join(&dir, 1, n, &pairs, None);
    assert!(restored.is_some(), "the second run restores");
    // Keys 1, 3, 5, 7 and 9 have one right record (i = key) and a left record for every
    // i >= 20 000 that ends in the key; no other key has a right record.
    let want: std::collections::BTreeMap<u64, u64> =
        [1, 3, 5, 7, 9].into_iter().map(|k| (k, (n - 20_000) / 10)).collect();
    assert_eq!(*pairs.lock().unwrap(), want);
}

/// The interval join job's sides: records below 20 000 are on the left if even, on the
/// right if odd, each under its own key (none of them match). From 20 000 on, every 100th
/// record (`i % 100 == 0`) is on the left under a key of its own, and the record 10 050
/// after it (`i % 100 == 50`) on the right under the same key: the pair's records are
/// about 10 ms of event time apart, so many pairs straddle a checkpoint, their left record
/// in a delta. The rest are on the left under `i % 10`, piling up.
fn interval_right(i: &u64) -> bool {
    if *i < 20_000 { i % 2 == 1 } else { i % 100 == 50 }
}

fn interval_left_key(i: u64) -> u64 {
    match i {
        ..20_000 => i,
        _ if i.is_multiple_of(100) => 20_000 + i / 100,
        _ => i % 10,
    }
}

fn interval_right_key(i: u64) -> u64 {
    if i < 20_000 { i } else { 20_000 + (i - 50) / 100 - 100 }
}

/// `r.time` in `[l.time + LOWER, l.time + UPPER]`: a left record is kept 1 s (longer than
/// the input's 800 ms), a right one 5 ms, so right records (and the keys that hold only
/// them) come and go at every checkpoint while the left ones pile up.
const INTERVAL_LOWER: i64 = -5;
const INTERVAL_UPPER: i64 = 1000;

/// The interval join's pairs over records `0..n` at event time `i / 1000` ms, as
/// (right record, left record): each right record matches at most one left one.
fn interval_pairs_want(n: u64) -> std::collections::BTreeMap<u64, u64> {
    let time = |i: u64| (i / 1000) as i64;
    let mut lefts: std::collections::HashMap<u64, Vec<u64>> = std::collections::HashMap::new();
    for i in (0..n).filter(|i| !interval_right(i)) {
        lefts.entry(interval_left_key(i)).or_default().push(i);
    }
    let mut want = std::collections::BTreeMap::new();
    for r in (0..n).filter(interval_right) {
        for &l in lefts.get(&interval_right_key(r)).into_iter().flatten() {
            if (time(l) + INTERVAL_LOWER..=time(l) + INTERVAL_UPPER).contains(&time(r)) {
                assert!(want.insert(r, l).is_none(), "right record {r} matches one left record");
            }
        }
    }
    want
}

/// Runs the interval join job at `shards` shards (10 ms interval, every 4th snapshot
/// whole, two kept) over records `0..n` at event time `i / 1000` ms, upserting each pair
/// into `pairs` through a two-phase-commit sink; stopped after `stop_after` checkpoints if
/// given.
fn run_incremental_interval_join(
    dir: &std::path::Path,
    shards: usize,
    n: u64,
    pairs: &Table,
    stop_after: Option<usize>,
) -> (Vec<sluice_engine::dataflow::CheckpointStats>, Option<CheckpointId>) {
    let pairs = pairs.clone();
    let running = Pipeline::new(PipelineConfig::with_shards(shards))
        .checkpointing(CheckpointConfig::new(dir).interval(Duration::from_millis(10)).full_every(4).keep(2))
        .spawn(move |scope| {
            let pairs = pairs.clone();
            let records = scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), n, |i| i),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis((*i / 1000) as i64)),
                )
                .map(|i| {
                    let until = Instant::now() + Duration::from_micros(2);
                    while Instant::now() < until {}
                    i
                });
            let left = records.clone().filter(|i| !interval_right(i)).key_by(|i| interval_left_key(*i));
            left.interval_join(
                records.filter(interval_right).key_by(|i| interval_right_key(*i)),
                INTERVAL_LOWER,
                INTERVAL_UPPER,
                |_, l, r| (*r, *l),
            )
            .to_two_phase_commit(sluice_engine::dataflow::Upsert::new(move |r: u64, l: u64| {
                pairs.lock().unwrap().insert(r, l);
                Ok(())
            }));
        })
        .unwrap();
    finish(running, stop_after)
}

#[test]
fn checkpointed_join_interval_snapshots_write_only_new_records_and_restore_through_the_chain() {
    // Left records pile up under 10 000 early keys, a key per pair and 10 more keys while
    // right records come and go: a whole snapshot (every 4th) holds them all, a delta only
    // the records that came since, the right records dropped from the front and the
    // tombstones of keys that held only right records. Stopped at 2 shards, again at 1,
    // then run to the end at 2, restoring through the chain each time: every pair comes
    // out once, as in a run without a failure (many pairs have their left record in a
    // delta and their right one after the restore).
    let dir = common::data_dir("checkpoint", "incremental-interval-join");
    let pairs = Table::default();
    let n = 800_000u64;
    let mut runs: Vec<Vec<CheckpointStats>> = Vec::new();
    // Every 4th snapshot of a run is whole, the first one included; a stop after 11 or 7
    // (even with one more completing meanwhile) leaves a delta last, so each restore reads
    // a chain.
    for (shards, stop_after) in [(2, Some(11)), (1, Some(7)), (2, None)] {
        let (stats, restored) = run_incremental_interval_join(&dir, shards, n, &pairs, stop_after);
        for c in &stats {
            eprintln!("{shards} shards: checkpoint {} {} bytes {} entries", c.id.get(), c.bytes, c.keys);
        }
        if let Some(before) = runs.last() {
            let restored = restored.expect("the runs after the first restore");
            let at = before.iter().position(|c| c.id == restored).unwrap_or(before.len());
            assert!(at % 4 != 0, "{shards} shards: restored {restored:?}, a delta: {before:?}");
        }
        runs.push(stats);
    }
    // Medians: a slow spell of the machine makes one cycle, and so its delta, long.
    let median = |mut v: Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    // The median over a run's deltas from its `from`-th checkpoint on.
    let deltas = |run: &[CheckpointStats], from: usize, what: fn(&CheckpointStats) -> u64| {
        median(run.iter().enumerate().skip(from).filter(|(j, _)| j % 4 != 0).map(|(_, c)| what(c)).collect())
    };
    let first = &runs[0];
    let most = first.iter().map(|c| c.keys).max().unwrap();
    // The deltas after the second whole snapshot (the first ones hold the early keys).
    assert!(most >= 10_000, "a whole snapshot holds every key: {first:?}");
    assert!(deltas(first, 5, |c| c.keys) < most / 5, "a delta holds only the keys that changed: {first:?}");
    // The second run starts from all the first one's records (11 checkpoints' worth): its
    // deltas are much smaller than its whole snapshots.
    let second = &runs[1];
    let whole = second.iter().step_by(4).map(|c| c.bytes).min().unwrap();
    assert!(deltas(second, 0, |c| c.bytes) < whole / 3, "a delta holds only the records that came: {second:?}");
    let got = pairs.lock().unwrap().clone();
    let want = interval_pairs_want(n);
    assert!(want.len() > 1_000, "{} pairs", want.len());
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the pairs differ from a run without a failure");
}

#[test]
fn incremental_window_snapshots_write_only_changed_keys_and_restore_exactly() {
    // One long window: its later checkpoints hold the few changed keys, and after a stop
    // and a restore the window's final counts are exact.
    let dir = common::data_dir("checkpoint", "incremental-windows");
    let table = Table::default();
    let n = 400_000u64;
    check_incremental(&dir, &table, n, 1000, |keyed| {
        keyed.window(Windows::tumbling(Duration::from_secs(3600))).count().map(|r| (r.key, r.value))
    });
    let mut want = std::collections::BTreeMap::new();
    for i in 0..n {
        *want.entry(incremental_key(i)).or_insert(0u64) += 1;
    }
    assert_eq!(*table.lock().unwrap(), want);
}

#[test]
fn a_checkpoint_directory_removed_under_a_running_pipeline_fails_its_checkpoints_not_the_pipeline() {
    // Removing the directory once made glommio panic in the checkpoint coordinator's
    // thread (it unwraps a statfs of a file it just opened) and the pipeline hang. Now
    // each checkpoint after it fails with the reason, as a failed write does, the
    // directory is not made again, records keep flowing, and the pipeline stops when asked.
    let dir = common::data_dir("checkpoint", "removed-dir");
    let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = seen.clone();
    let running = Pipeline::new(PipelineConfig::with_shards(2))
        .checkpointing(CheckpointConfig::new(&dir).interval(Duration::from_millis(10)))
        .spawn(move |scope| {
            let counter = counter.clone();
            scope
                .source(
                    Generator::new(scope.shard(), scope.shards(), u64::MAX, |i| i),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis((*i / 100) as i64)),
                )
                .map(|i| {
                    let until = Instant::now() + Duration::from_micros(20);
                    while Instant::now() < until {}
                    i
                })
                .key_by(|i| i % 100)
                .window(Windows::tumbling(Duration::from_millis(100)))
                .count()
                .for_each(move |_| {
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                });
        })
        .unwrap();
    let first = running.wait_for_checkpoint(CheckpointId(0), Duration::from_secs(30)).expect("a first checkpoint");
    assert!(running.wait_for_checkpoint(first.id, Duration::from_secs(30)).is_some(), "a second checkpoint");
    // Files appear in it while it is being removed: try again until it is gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    while dir.exists() {
        let _ = std::fs::remove_dir_all(&dir);
        assert!(Instant::now() < deadline, "{} could not be removed", dir.display());
    }
    let completed = running.checkpoints().len();
    let deadline = Instant::now() + Duration::from_secs(30);
    let failed = loop {
        let failed = running.failed_checkpoints();
        if failed.iter().filter(|f| f.reason.contains("was removed")).count() >= 2 {
            break failed;
        }
        assert!(Instant::now() < deadline, "no failed checkpoints reported: {failed:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    let removed = failed.iter().find(|f| f.reason.contains("was removed")).unwrap();
    assert!(removed.reason.contains(&dir.display().to_string()), "{removed:?}");
    assert!(failed.windows(2).all(|w| w[0].id < w[1].id), "in order, each its own id: {failed:?}");
    assert_eq!(running.checkpoints().len(), completed, "no checkpoint completes without its directory");
    assert!(!dir.exists(), "the checkpoint directory is not made again");
    let families = running.metric_families();
    let metric = families.get("sluice_pipeline_checkpoints_failed_total", &[("pipeline", "pipeline")]);
    let Some(sluice_engine::metrics::Value::Counter(sluice_engine::metrics::Num::Int(counted))) = metric else {
        panic!("a failed-checkpoint counter: {metric:?}")
    };
    assert!(*counted >= failed.len() as i64, "{counted} failed checkpoints counted, {} listed", failed.len());
    let results = seen.load(std::sync::atomic::Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.load(std::sync::atomic::Ordering::Relaxed) == results {
        assert!(Instant::now() < deadline, "the pipeline goes on: no results after the failures");
        std::thread::sleep(Duration::from_millis(10));
    }
    running.stop(false);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(running.join().map_err(|e| e.to_string())));
    let joined = rx.recv_timeout(Duration::from_secs(30)).expect("the pipeline stops within 30 s");
    joined.unwrap();
}

#[test]
fn checkpoints_that_all_fail_to_read_refuse_the_start() {
    // Starting over when checkpoints exist would replay everything: refused instead.
    let dir = common::data_dir("checkpoint", "all-damaged");
    let build = |scope: &sluice_engine::dataflow::Scope| {
        scope
            .source(
                Generator::new(scope.shard(), scope.shards(), 50_000, |i| i),
                WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis((*i / 10) as i64)),
            )
            .key_by(|i| i % 5)
            .window(Windows::tumbling(Duration::from_millis(100)))
            .count()
            .for_each(|_| {});
    };
    let config = || CheckpointConfig::new(&*dir).interval(Duration::from_millis(5));
    Pipeline::new(PipelineConfig::with_shards(1)).checkpointing(config()).run(build).unwrap();
    let mut parts = 0;
    for chk in std::fs::read_dir(&*dir).unwrap().map(|e| e.unwrap().path()) {
        for part in std::fs::read_dir(&chk).unwrap().map(|e| e.unwrap().path()) {
            if part.extension().is_some_and(|x| x == "part") {
                let mut bytes = std::fs::read(&part).unwrap();
                let last = bytes.len() - 1;
                bytes[last] ^= 0xff;
                std::fs::write(&part, bytes).unwrap();
                parts += 1;
            }
        }
    }
    assert!(parts >= 1);
    let err = Pipeline::new(PipelineConfig::with_shards(1)).checkpointing(config()).spawn(build).unwrap_err();
    assert!(
        matches!(
            &err,
            EngineError::Checkpoint(sluice_engine::dataflow::checkpoint::CheckpointError::NoneReadable { .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("no completed checkpoint can be restored"), "{err}");
}

/// Copies a checkpoint directory, so one checkpoint can be restored twice.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&path, &to.join(entry.file_name()));
        } else {
            std::fs::copy(&path, to.join(entry.file_name())).unwrap();
        }
    }
}

/// What the unaligned tests' external system shows: committed transaction ids, and the
/// results they made visible.
type Visible = Arc<Mutex<(std::collections::HashSet<u64>, Vec<String>)>>;

/// Eight keys that all belong to shard 1 of 2 (with the default 128 key groups): at two
/// shards shard 0 only routes, shard 1 does all the (slow) work, and the ring from 0 to 1
/// stays full.
fn shard_one_keys() -> Vec<u64> {
    use sluice_engine::dataflow::{PipelineConfig as P, key_group, shard_of_group};
    let groups = P::DEFAULT_KEY_GROUPS;
    (0..).filter(|k: &u64| shard_of_group(key_group(k, groups), groups, 2) == 1).take(8).collect()
}

/// Records `0..count` in two splits (split `k` makes the `i` with `i % 2 == k`), read by
/// both shards at two shards and both by one at one: a source that resumes from a
/// checkpoint taken at either count.
struct TwoSplits {
    /// The splits this instance reads, each with its next record.
    splits: Vec<(u64, u64)>,
    count: u64,
    turn: usize,
}

impl TwoSplits {
    fn new(shard: usize, shards: usize, count: u64) -> TwoSplits {
        let splits = (0..2u64).filter(|k| *k as usize % shards == shard).map(|k| (k, k)).collect();
        TwoSplits { splits, count, turn: 0 }
    }
}

impl sluice_engine::dataflow::Source<u64> for TwoSplits {
    fn splits(&self) -> usize {
        self.splits.len()
    }

    fn poll_next(
        &mut self,
        _: &mut std::task::Context<'_>,
        out: &mut Vec<u64>,
        max: usize,
    ) -> std::task::Poll<Option<usize>> {
        let (count, n) = (self.count, self.splits.len());
        // The splits in turn, each keeping its index (and so its watermark).
        for k in 0..n {
            let index = (self.turn + k) % n;
            let next = &mut self.splits[index].1;
            if *next < count {
                while *next < count && out.len() < max {
                    out.push(*next);
                    *next += 2;
                }
                self.turn = index + 1;
                return std::task::Poll::Ready(Some(index));
            }
        }
        std::task::Poll::Ready(None)
    }

    fn positions(&self) -> Option<Vec<(u64, i64)>> {
        Some(self.splits.iter().map(|(k, next)| (*k, *next as i64)).collect())
    }

    fn restore(
        &mut self,
        positions: &std::collections::HashMap<u64, i64>,
    ) -> Result<(), sluice_engine::dataflow::UserError> {
        for (k, next) in &mut self.splits {
            let at = positions.get(k).ok_or_else(|| format!("no position for split {k}"))?;
            *next = u64::try_from(*at).map_err(|_| format!("split {k} at {at}"))?;
        }
        Ok(())
    }
}

/// Runs the backpressured job: records `0..n` (event time `i / 10` ms) keyed on
/// [`shard_one_keys`], a slow map after the exchange, then counts per key in 100 ms
/// windows into a two-phase-commit sink; unaligned checkpoints every 20 ms. Stops after
/// `stop_after` checkpoints if given. Returns the checkpoints' figures and what it
/// restored from.
fn run_backpressured(
    dir: &std::path::Path,
    shards: usize,
    n: u64,
    visible: &Visible,
    stop_after: Option<usize>,
) -> (Vec<sluice_engine::dataflow::CheckpointStats>, Option<CheckpointId>) {
    use sluice_engine::dataflow::CheckpointMode;
    use sluice_engine::ring::RingConfig;

    let keys = shard_one_keys();
    let visible = visible.clone();
    let config = PipelineConfig {
        batch_records: 64,
        ring: RingConfig { ring_capacity_batches: 8, ..RingConfig::default() },
        ..PipelineConfig::with_shards(shards)
    };
    let running = Pipeline::new(config)
        .checkpointing(CheckpointConfig::new(dir).interval(Duration::from_millis(20)).mode(CheckpointMode::Unaligned))
        .spawn(move |scope| {
            let keys = keys.clone();
            scope
                .source(
                    TwoSplits::new(scope.shard(), scope.shards(), n),
                    WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis((*i / 10) as i64)),
                )
                .key_by(move |i| keys[(*i % 8) as usize])
                .into_stream()
                .map(|i| {
                    let until = Instant::now() + Duration::from_micros(10);
                    while Instant::now() < until {}
                    i
                })
                .key_by(|i| i % 8)
                .window(Windows::tumbling(Duration::from_millis(100)))
                .count()
                .map(|r| format!("{}|{}|{}", r.key, r.window.start.millis(), r.value))
                .to_two_phase_commit(Staged { visible: visible.clone() });
        })
        .unwrap();
    finish(running, stop_after)
}

#[test]
fn unaligned_checkpoints_store_in_flight_records_and_restore_them_at_two_and_one_shards() {
    // Shard 1 is the bottleneck, so the ring into it is full whenever a checkpoint begins:
    // its own barrier passes at once and the records queued behind shard 0's barrier are
    // stored. A restore of that checkpoint, at two shards and at one, delivers them again,
    // and every window count is committed exactly once.
    use std::collections::BTreeMap;

    let dir = common::data_dir("checkpoint", "unaligned");
    let n = 60_000u64;
    let mut want: Vec<String> = {
        let mut counts: BTreeMap<(u64, i64), u64> = BTreeMap::new();
        for i in 0..n {
            *counts.entry((i % 8, ((i / 10) / 100 * 100) as i64)).or_default() += 1;
        }
        counts.into_iter().map(|((k, s), c)| format!("{k}|{s}|{c}")).collect()
    };
    want.sort();
    let first = dir.join("first");
    let visible = Visible::default();
    let (stats, restored) = run_backpressured(&first, 2, n, &visible, Some(3));
    assert_eq!(restored, None);
    let last = *stats.last().unwrap();
    assert!(last.inflight_records > 0, "the checkpoint a restore uses stored in-flight records: {stats:?}");
    let partial = visible.lock().unwrap().clone();
    assert!(partial.1.len() < want.len(), "the first run stopped before the end ({} results)", partial.1.len());
    for shards in [2, 1] {
        // The same checkpoint, restored into a copy of the external system as it was.
        let again = dir.join(format!("again-{shards}"));
        copy_dir(&first, &again);
        let visible = Visible::new(Mutex::new(partial.clone()));
        let (_, restored) = run_backpressured(&again, shards, n, &visible, None);
        assert_eq!(restored, Some(last.id), "{shards} shards restore the last checkpoint");
        let mut got = visible.lock().unwrap().1.clone();
        got.sort();
        assert!(got == want, "{shards} shards: {}", checkpoint_job::diff(&got, &want));
    }
}

/// Records of [`LateSplits`] from this one on have late ones among them.
const LATE_FROM: u64 = 1000;
/// How far behind its position a late record's event time is (ms): more than a source
/// batch of records (64, 6.4 ms) and a window (5 ms), so the record is late for the
/// watermark its channel sent before it.
const LATE_BY_MS: i64 = 20;
/// The value of [`LateSplits`]' split 1 marker: its event time is far ahead, so that
/// split never holds the watermark back; it is filtered out before the exchange.
const MARKER: u64 = u64::MAX;

/// Whether record `i` of [`LateSplits`] is late (every 50th from [`LATE_FROM`] on).
fn is_late(i: u64) -> bool {
    i >= LATE_FROM && i % 50 == 49
}

/// Event time of record `i` of [`LateSplits`]: `i / 10` ms, [`LATE_BY_MS`] less for a
/// late one; the marker's is far ahead.
fn late_time(i: &u64) -> EventTime {
    if *i == MARKER {
        return EventTime::from_millis(i64::MAX / 4);
    }
    let on_time = (*i / 10) as i64;
    EventTime::from_millis(if is_late(*i) { on_time - LATE_BY_MS } else { on_time })
}

/// Records `0..count` all in split 0; split 1 emits only [`MARKER`]s, one a poll, until
/// split 0 has ended (so its watermark is far ahead from its first poll on, after a
/// restore too): at two shards only shard 0 reads records, and shard 1's source keeps
/// polling and injecting barriers without ever holding the watermark back, so whether a
/// record is late is decided by split 0's order alone.
struct LateSplits {
    splits: Vec<(u64, u64)>,
    count: u64,
    /// Whether split 1 (if this instance reads it) emits next.
    marker_turn: bool,
    /// Set once split 0 has ended.
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl sluice_engine::dataflow::Source<u64> for LateSplits {
    fn splits(&self) -> usize {
        self.splits.len()
    }

    fn poll_next(
        &mut self,
        _: &mut std::task::Context<'_>,
        out: &mut Vec<u64>,
        max: usize,
    ) -> std::task::Poll<Option<usize>> {
        use std::sync::atomic::Ordering;
        let records = self.splits.iter().position(|(k, next)| *k == 0 && *next < self.count);
        let markers = self.splits.iter().position(|(k, _)| *k == 1).filter(|_| !self.done.load(Ordering::Acquire));
        self.marker_turn = !self.marker_turn;
        match (records, markers) {
            (_, Some(index)) if self.marker_turn || records.is_none() => {
                out.push(MARKER);
                std::task::Poll::Ready(Some(index))
            }
            (Some(index), _) => {
                let next = &mut self.splits[index].1;
                while *next < self.count && out.len() < max {
                    out.push(*next);
                    *next += 1;
                }
                if *next == self.count {
                    self.done.store(true, Ordering::Release);
                }
                std::task::Poll::Ready(Some(index))
            }
            (None, _) => std::task::Poll::Ready(None),
        }
    }

    fn positions(&self) -> Option<Vec<(u64, i64)>> {
        Some(self.splits.iter().map(|(k, next)| (*k, *next as i64)).collect())
    }

    fn restore(
        &mut self,
        positions: &std::collections::HashMap<u64, i64>,
    ) -> Result<(), sluice_engine::dataflow::UserError> {
        for (k, next) in &mut self.splits {
            let at = positions.get(k).ok_or_else(|| format!("no position for split {k}"))?;
            *next = u64::try_from(*at).map_err(|_| format!("split {k} at {at}"))?;
        }
        Ok(())
    }
}

/// Counts records, spending 10 us on each: the slow operator that backs the ring into
/// its shard up.
struct SlowCount;

impl sluice_engine::dataflow::Aggregate<u64> for SlowCount {
    type Acc = u64;
    type Out = u64;
    fn create(&self) -> u64 {
        0
    }
    fn add(&self, acc: &mut u64, _: &u64) {
        let until = Instant::now() + Duration::from_micros(10);
        while Instant::now() < until {}
        *acc += 1;
    }
    fn merge(&self, into: &mut u64, from: u64) {
        *into += from;
    }
    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// A backpressured job over [`LateSplits`]: records keyed on [`shard_one_keys`] (so at
/// two shards the ring into shard 1, of 64 batches, stays full: more than the driver reads
/// of it in one turn, so its barrier is still far back when shard 1's own passes) straight into 5 ms windows whose count
/// is slow ([`SlowCount`]; late records dropped), so the window's watermark is what
/// split 0 sent before each record; unaligned checkpoints every 20 ms.
fn run_late_in_flight(
    dir: &std::path::Path,
    shards: usize,
    n: u64,
    visible: &Visible,
    stop_after: Option<usize>,
) -> (Vec<sluice_engine::dataflow::CheckpointStats>, Option<CheckpointId>) {
    use sluice_engine::dataflow::CheckpointMode;
    use sluice_engine::ring::RingConfig;

    let keys = shard_one_keys();
    let visible = visible.clone();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let config = PipelineConfig {
        batch_records: 64,
        ring: RingConfig { ring_capacity_batches: 64, ..RingConfig::default() },
        ..PipelineConfig::with_shards(shards)
    };
    let running = Pipeline::new(config)
        .checkpointing(CheckpointConfig::new(dir).interval(Duration::from_millis(20)).mode(CheckpointMode::Unaligned))
        .spawn(move |scope| {
            let keys = keys.clone();
            let splits = (0..2u64).filter(|k| *k as usize % scope.shards() == scope.shard()).map(|k| (k, 0)).collect();
            let source = LateSplits { splits, count: n, marker_turn: false, done: done.clone() };
            scope
                .source(source, WatermarkStrategy::monotonous(late_time))
                .filter(|i| *i != MARKER)
                .key_by(move |i| keys[(*i % 8) as usize])
                .window(Windows::tumbling(Duration::from_millis(5)))
                .aggregate(SlowCount)
                .map(|r| format!("{}|{}|{}", r.key, r.window.start.millis(), r.value))
                .to_two_phase_commit(Staged { visible: visible.clone() });
        })
        .unwrap();
    finish(running, stop_after)
}

#[test]
fn unaligned_restores_keep_in_flight_records_late_that_were_late_for_the_watermarks_before_them() {
    // Every 50th record (from LATE_FROM on) comes LATE_BY_MS behind its channel's
    // watermark: the window drops it in the run, whatever the timing (shard 1 reads no
    // records, and its watermark is far ahead). The checkpoint a restore uses stores a
    // ring's worth of records in flight, late ones among them, behind the watermarks that
    // made them late; the window's own restored watermark is the one it had when the
    // first barrier passed, up to a ring and its read-ahead behind, so a restore that
    // delivered them without those watermarks would count them. Restored at two shards
    // and at one, every on-time record is counted once and no late one.
    use std::collections::BTreeMap;

    let dir = common::data_dir("checkpoint", "unaligned-late");
    let n = 60_000u64;
    let keys = shard_one_keys();
    let mut want: Vec<String> = {
        let mut counts: BTreeMap<(u64, i64), u64> = BTreeMap::new();
        for i in (0..n).filter(|i| !is_late(*i)) {
            *counts.entry((keys[(i % 8) as usize], late_time(&i).millis() / 5 * 5)).or_default() += 1;
        }
        counts.into_iter().map(|((k, s), c)| format!("{k}|{s}|{c}")).collect()
    };
    want.sort();
    let first = dir.join("first");
    let visible = Visible::default();
    let (stats, restored) = run_late_in_flight(&first, 2, n, &visible, Some(3));
    assert_eq!(restored, None);
    let last = *stats.last().unwrap();
    // More than 50 consecutive records of split 0: a late one among them.
    assert!(last.inflight_records > 100, "the checkpoint a restore uses stored late records in flight: {stats:?}");
    let partial = visible.lock().unwrap().clone();
    assert!(partial.1.len() < want.len(), "the first run stopped before the end ({} results)", partial.1.len());
    for shards in [2, 1] {
        let again = dir.join(format!("again-{shards}"));
        copy_dir(&first, &again);
        let visible = Visible::new(Mutex::new(partial.clone()));
        let (_, restored) = run_late_in_flight(&again, shards, n, &visible, None);
        assert_eq!(restored, Some(last.id), "{shards} shards restore the last checkpoint");
        let mut got = visible.lock().unwrap().1.clone();
        got.sort();
        assert!(got == want, "{shards} shards: {}", checkpoint_job::diff(&got, &want));
    }
}
