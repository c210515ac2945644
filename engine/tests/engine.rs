//! The engine end to end on a real data directory: topics, sends, fetches, restarts.

mod common;

use std::path::Path;
use std::time::Duration;

use futures_lite::future::block_on;
use sluice_engine::{Engine, EngineConfig, EngineError, OwnedRecord, PackedRecords, TopicConfig};
use sluice_io::{BatchMeta, Offset, PartitionId, Timestamp};

fn data_dir(name: &str) -> common::TestDir {
    common::data_dir("engine", name)
}

fn config(dir: &Path, shards: usize) -> EngineConfig {
    EngineConfig { shards: Some(shards), ..EngineConfig::new(dir) }
}

/// Every record of a partition, as (offset, key, value).
fn read_partition(
    engine: &sluice_engine::EngineHandle,
    topic: &str,
    p: PartitionId,
) -> Vec<(u64, Option<Vec<u8>>, Vec<u8>)> {
    block_on(async {
        let mut out = Vec::new();
        let (mut at, end) = engine.offsets(topic, p).await.unwrap();
        while at < end {
            let batches = engine.fetch(topic, p, at, 1 << 20, Duration::ZERO).await.unwrap();
            for r in batches.records() {
                let r = r.unwrap();
                out.push((r.offset().0, r.key().map(<[u8]>::to_vec), r.value_bytes().to_vec()));
            }
            at = batches.next_offset();
        }
        out
    })
}

#[test]
fn topics_sends_and_restarts_across_shards() {
    for shards in [1, 2, 4] {
        let dir = data_dir(&format!("basic{shards}"));
        let engine = block_on(Engine::open(config(&dir, shards))).unwrap();
        let h = engine.handle();
        let desc = block_on(h.create_topic("orders", 6, None)).unwrap();
        assert_eq!(desc.shards.len(), 6);
        assert!(desc.shards.iter().all(|&s| (s as usize) < shards));
        assert!(matches!(block_on(h.create_topic("orders", 1, None)), Err(EngineError::TopicExists(_))));
        // Keyed sends from several threads at once: per-partition order per key.
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let h = h.clone();
                std::thread::spawn(move || {
                    block_on(async {
                        let mut placed = Vec::new();
                        for i in 0..200 {
                            let key = format!("user-{}", (t * 7 + i) % 13);
                            let value = format!("{t}:{i}");
                            let (p, off) =
                                h.send("orders", Some(key.as_bytes()), value.as_bytes(), Timestamp(i)).await.unwrap();
                            placed.push((key, value, p, off));
                        }
                        placed
                    })
                })
            })
            .collect();
        let placed: Vec<_> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        assert_eq!(placed.len(), 800);
        for (key, _, p, _) in &placed {
            assert_eq!(*p, sluice_engine::topic::partitioner::partition_for_key(key.as_bytes(), 6));
        }
        let check = |h: &sluice_engine::EngineHandle| {
            for p in PartitionId::all(6) {
                let got = read_partition(h, "orders", p);
                let mut want: Vec<_> = placed.iter().filter(|x| x.2 == p).collect();
                want.sort_by_key(|x| x.3);
                assert_eq!(got.len(), want.len());
                for (g, w) in got.iter().zip(&want) {
                    assert_eq!(g.0, w.3.0);
                    assert_eq!(g.1.as_deref(), Some(w.0.as_bytes()));
                    assert_eq!(g.2, w.1.as_bytes());
                }
                // Per-writer order within a partition follows offsets.
                for t in 0..4 {
                    let seq: Vec<i64> = got
                        .iter()
                        .filter_map(|g| {
                            let v = String::from_utf8(g.2.clone()).unwrap();
                            let (wt, i) = v.split_once(':').unwrap();
                            (wt == t.to_string()).then(|| i.parse().unwrap())
                        })
                        .collect();
                    assert!(seq.windows(2).all(|w| w[0] < w[1]), "writer {t} out of order in partition {p}");
                }
            }
        };
        check(&h);
        block_on(engine.shutdown()).unwrap();

        // Restart: same placement, same data; appends continue.
        let engine = block_on(Engine::open(config(&dir, shards))).unwrap();
        let h = engine.handle();
        assert_eq!(h.describe_topic("orders").unwrap(), desc);
        check(&h);
        let (p, off) = block_on(h.send("orders", Some(b"user-1"), b"after", Timestamp(1))).unwrap();
        assert_eq!(Some(&(off.0)), Some(&(read_partition(&h, "orders", p).len() as u64 - 1)));
        drop(engine);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn an_engine_opens_a_relative_data_directory() {
    let dir = data_dir("relative");
    std::fs::create_dir_all(&*dir).unwrap();
    // The test directory as seen from the working directory, through "..".
    let cwd = std::env::current_dir().unwrap();
    let abs = dir.canonicalize().unwrap();
    let common = cwd.ancestors().find(|a| abs.starts_with(a)).unwrap();
    let mut relative = std::path::PathBuf::new();
    for _ in cwd.strip_prefix(common).unwrap().components() {
        relative.push("..");
    }
    relative.push(abs.strip_prefix(common).unwrap());
    assert!(relative.is_relative(), "{relative:?}");
    for round in 0..2 {
        let engine = block_on(Engine::open(config(&relative, 1))).unwrap();
        let h = engine.handle();
        if round == 0 {
            block_on(h.create_topic("rel", 2, None)).unwrap();
            block_on(h.send_to("rel", PartitionId(1), OwnedRecord::new(None, b"v".to_vec(), Timestamp(1)))).unwrap();
        }
        assert_eq!(read_partition(&h, "rel", PartitionId(1)), [(0, None, b"v".to_vec())], "round {round}");
        block_on(engine.shutdown()).unwrap();
    }
}

#[test]
fn a_second_engine_on_the_same_directory_is_refused() {
    let dir = data_dir("lock");
    let engine = block_on(Engine::open(config(&dir, 1))).unwrap();
    match block_on(Engine::open(config(&dir, 1))) {
        Err(EngineError::Locked { .. }) => {}
        other => panic!("expected Locked, got {other:?}"),
    }
    drop(engine);
    // Released on shutdown.
    let engine = block_on(Engine::open(config(&dir, 1))).unwrap();
    drop(engine);
}

#[test]
fn admin_and_bad_input_get_typed_errors() {
    let dir = data_dir("admin");
    let engine = block_on(Engine::open(config(&dir, 2))).unwrap();
    let h = engine.handle();
    let small = TopicConfig { max_record_bytes: 100, ..TopicConfig::default() };
    block_on(h.create_topic("t", 2, Some(small))).unwrap();
    block_on(h.create_topic("u", 1, None)).unwrap();
    assert_eq!(h.list_topics(), vec!["t".to_string(), "u".to_string()]);
    assert!(matches!(block_on(h.send("nope", None, b"x", Timestamp(0))), Err(EngineError::UnknownTopic(_))));
    assert!(matches!(
        block_on(h.send("t", None, &[0u8; 101], Timestamp(0))),
        Err(EngineError::RecordTooLarge { bytes: 101, limit: 100, .. })
    ));
    let rec = OwnedRecord::new(None, b"v".to_vec(), Timestamp(0));
    assert!(matches!(
        block_on(h.send_to("t", PartitionId(2), rec.clone())),
        Err(EngineError::PartitionOutOfRange { partition: PartitionId(2), partitions: 2, .. })
    ));
    assert!(matches!(block_on(h.create_topic("../x", 1, None)), Err(EngineError::InvalidName(_))));
    assert!(matches!(block_on(h.create_topic("z", 0, None)), Err(EngineError::InvalidPartitions(_))));
    // The fsync policy is typed: "sometimes" does not parse, and a config it cannot hold
    // is one with values out of range.
    assert!("sometimes".parse::<sluice_io::FsyncPolicy>().is_err());
    let bad = TopicConfig { max_record_bytes: 0, ..TopicConfig::default() };
    assert!(matches!(block_on(h.create_topic("z", 1, Some(bad))), Err(EngineError::InvalidConfig(_))));
    block_on(h.send_to("t", PartitionId(1), rec.clone())).unwrap();
    assert!(matches!(
        block_on(h.fetch("t", PartitionId(1), Offset(5), 1000, Duration::ZERO)),
        Err(EngineError::OffsetOutOfRange { requested: Offset(5), .. })
    ));
    // Add partitions, then delete.
    let d = block_on(h.add_partitions("t", 4)).unwrap();
    assert_eq!(d.shards.len(), 4);
    assert!(matches!(block_on(h.add_partitions("t", 3)), Err(EngineError::InvalidPartitions(_))));
    block_on(h.append("t", PartitionId(3), vec![rec.clone(), rec.clone()], BatchMeta::default())).unwrap();
    assert_eq!(block_on(h.offsets("t", PartitionId(3))).unwrap(), (Offset(0), Offset(2)));
    // Packed records: ranges of one buffer, checked against it and against the limit.
    let buf = bytes::Bytes::from(vec![b'k'; 300]);
    let mut packed = PackedRecords::with_capacity(buf.clone(), 3);
    packed.push(Some(0..1), Some(1..4), Timestamp(5)).unwrap();
    packed.push(None, Some(4..4), Timestamp(6)).unwrap();
    // Headers go to the next record pushed; a null value is not an empty one.
    packed.push_header(10..12, Some(12..13)).unwrap();
    packed.push_header(13..14, None).unwrap();
    packed.push(Some(20..21), None, Timestamp(7)).unwrap();
    assert!(matches!(packed.push(None, Some(299..301), Timestamp(7)), Err(EngineError::InvalidConfig(_))));
    assert!(matches!(packed.push_header(299..301, None), Err(EngineError::InvalidConfig(_))));
    assert_eq!(packed.len(), 3);
    let info = block_on(h.append_packed("t", PartitionId(3), packed, BatchMeta::default())).unwrap();
    assert_eq!((info.base_offset, info.last_offset), (Offset(2), Offset(4)));
    let got = block_on(h.fetch("t", PartitionId(3), Offset(2), 1 << 20, Duration::ZERO)).unwrap();
    let got: Vec<OwnedRecord> = got.records().map(|r| OwnedRecord::from_view(&r.unwrap())).collect();
    assert_eq!(
        got,
        vec![
            OwnedRecord::new(Some(b"k".to_vec()), b"kkk".to_vec(), Timestamp(5)),
            OwnedRecord::new(None, Vec::new(), Timestamp(6)),
            OwnedRecord::tombstone(b"k".to_vec(), Timestamp(7))
                .with_header("kk", Some(b"k".to_vec()))
                .with_header("k", None),
        ]
    );
    let mut big = PackedRecords::with_capacity(buf, 1);
    big.push(None, Some(0..101), Timestamp(0)).unwrap();
    assert!(matches!(
        block_on(h.append_packed("t", PartitionId(3), big, BatchMeta::default())),
        Err(EngineError::RecordTooLarge { bytes: 101, limit: 100, .. })
    ));
    let none = PackedRecords::with_capacity(bytes::Bytes::new(), 0);
    assert!(matches!(
        block_on(h.append_packed("t", PartitionId(3), none, BatchMeta::default())),
        Err(EngineError::InvalidConfig(_))
    ));
    block_on(h.delete_topic("t")).unwrap();
    assert!(matches!(h.describe_topic("t"), Err(EngineError::UnknownTopic(_))));
    assert!(!dir.join("topics").join("t-0").exists());
    drop(engine);
    // The deletion and the other topic survive a restart.
    let engine = block_on(Engine::open(config(&dir, 2))).unwrap();
    assert_eq!(engine.handle().list_topics(), vec!["u".to_string()]);
}

#[test]
fn long_poll_fetch_wakes_on_new_data() {
    let dir = data_dir("poll");
    let engine = block_on(Engine::open(config(&dir, 2))).unwrap();
    let h = engine.handle();
    block_on(h.create_topic("events", 1, None)).unwrap();
    let h2 = h.clone();
    let waiter = std::thread::spawn(move || {
        block_on(h2.fetch("events", PartitionId(0), Offset(0), 1 << 20, Duration::from_secs(20))).unwrap()
    });
    std::thread::sleep(Duration::from_millis(50));
    block_on(h.send("events", None, b"hello", Timestamp(7))).unwrap();
    let got = waiter.join().unwrap();
    let r: Vec<_> = got.records().map(|r| r.unwrap().value_bytes().to_vec()).collect();
    assert_eq!(r, vec![b"hello".to_vec()]);
    // With nothing to come, the poll returns empty after its wait.
    let empty = block_on(h.fetch("events", PartitionId(0), Offset(1), 1 << 20, Duration::from_millis(20))).unwrap();
    assert!(empty.is_empty());
}

#[test]
fn consumer_assigns_seeks_and_polls() {
    use sluice_engine::{Consumer, SeekTo};
    let dir = data_dir("consumer");
    let engine = block_on(Engine::open(config(&dir, 2))).unwrap();
    let h = engine.handle();
    block_on(h.create_topic("clicks", 3, None)).unwrap();
    for i in 0..90i64 {
        block_on(h.send("clicks", Some(format!("k{i}").as_bytes()), format!("v{i}").as_bytes(), Timestamp(1000 + i)))
            .unwrap();
    }
    let mut c = Consumer::new(h.clone(), 1 << 20);
    let parts = c.partitions_of("clicks").unwrap();
    block_on(c.assign(&parts, SeekTo::Earliest)).unwrap();
    let mut seen = Vec::new();
    loop {
        let polled = block_on(c.poll(Duration::ZERO)).unwrap();
        if polled.is_empty() {
            break;
        }
        for p in polled {
            for r in p.batches.records() {
                seen.push(String::from_utf8(r.unwrap().value_bytes().to_vec()).unwrap());
            }
        }
    }
    seen.sort();
    let mut want: Vec<String> = (0..90).map(|i| format!("v{i}")).collect();
    want.sort();
    assert_eq!(seen, want);
    // Latest: nothing until something new arrives; a waiting poll sees it.
    block_on(c.assign(&parts, SeekTo::Latest)).unwrap();
    assert!(block_on(c.poll(Duration::ZERO)).unwrap().is_empty());
    let h2 = h.clone();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        block_on(h2.send("clicks", Some(b"late"), b"late-value", Timestamp(5000))).unwrap()
    });
    let polled = block_on(c.poll(Duration::from_secs(20))).unwrap();
    let (p, off) = sender.join().unwrap();
    assert_eq!(polled.len(), 1);
    assert_eq!(polled[0].partition, p);
    assert_eq!(polled[0].batches.records().next().unwrap().unwrap().offset(), off);
    // Seek by timestamp and by offset.
    let p0 = &parts[0];
    block_on(c.seek(&p0.0, p0.1, SeekTo::Timestamp(Timestamp(1000 + 45)))).unwrap();
    let at = c.positions()[p0];
    let first = block_on(h.fetch(&p0.0, p0.1, at, 1 << 20, Duration::ZERO)).unwrap();
    let t = first.records().next().unwrap().unwrap().event_time();
    assert!(t >= Timestamp(1045));
    block_on(c.seek(&p0.0, p0.1, SeekTo::Offset(Offset(1)))).unwrap();
    assert_eq!(c.positions()[p0], Offset(1));
    assert!(matches!(
        block_on(c.seek(&p0.0, p0.1, SeekTo::Offset(Offset(999)))),
        Err(EngineError::OffsetOutOfRange { .. })
    ));
    assert!(block_on(c.seek("clicks", PartitionId(9), SeekTo::Earliest)).is_err());
}

#[test]
fn shutdown_appends_and_answers_sends_still_lingering() {
    let dir = data_dir("linger");
    let engine = block_on(Engine::open(config(&dir, 1))).unwrap();
    let h = engine.handle();
    // A long linger: the sends wait in the shard's batch when the engine shuts down.
    let slow = TopicConfig { linger_ms: 30_000, ..TopicConfig::default() };
    block_on(h.create_topic("slow", 1, Some(slow))).unwrap();
    let senders: Vec<_> = (0..3)
        .map(|i| {
            let h = h.clone();
            std::thread::spawn(move || block_on(h.send("slow", None, format!("v{i}").as_bytes(), Timestamp(i))))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    block_on(engine.shutdown()).unwrap();
    let mut offsets: Vec<u64> = senders.into_iter().map(|s| s.join().unwrap().unwrap().1.0).collect();
    offsets.sort_unstable();
    assert_eq!(offsets, vec![0, 1, 2], "every lingering send was appended and acknowledged");
    let engine = block_on(Engine::open(config(&dir, 1))).unwrap();
    assert_eq!(block_on(engine.handle().offsets("slow", PartitionId(0))).unwrap().1, Offset(3));
}

#[test]
fn run_on_runs_host_tasks_on_each_shard_and_they_use_the_handle() {
    let dir = data_dir("run_on");
    let engine = block_on(Engine::open(config(&dir, 2))).unwrap();
    let handle = engine.handle();
    block_on(handle.create_topic("t", 2, None)).unwrap();
    for shard in 0..2 {
        // The task runs on the shard's own thread, and may await the handle there: here it
        // appends to partition 1 (whichever shard owns it) and reads it back.
        let h = handle.clone();
        let (thread, read) = block_on(handle.run_on(shard, move || async move {
            let thread = std::thread::current().name().map(str::to_string);
            let record = OwnedRecord::new(None, format!("from {shard}").into_bytes(), Timestamp(1));
            let info = h.append("t", PartitionId(1), vec![record], BatchMeta::default()).await.unwrap();
            let batches = h.fetch("t", PartitionId(1), info.base_offset, 1 << 20, Duration::ZERO).await.unwrap();
            let value = batches.records().next().unwrap().unwrap().value_bytes().to_vec();
            (thread, value)
        }))
        .unwrap();
        // glommio names the thread after the executor: `sluice-shard-{shard}-{executor id}`.
        let thread = thread.unwrap_or_default();
        assert!(thread.starts_with(&format!("sluice-shard-{shard}-")), "shard {shard} ran on {thread}");
        assert_eq!(read, format!("from {shard}").into_bytes());
    }
    let err = block_on(handle.run_on(2, || async {})).unwrap_err();
    assert!(matches!(err, EngineError::InvalidConfig(ref m) if m.contains("no shard 2")), "{err}");
    block_on(engine.shutdown()).unwrap();
}

#[test]
fn an_engine_opened_again_in_the_same_process_does_not_keep_the_last_ones_files_open() {
    let dir = data_dir("descriptors");
    let open_fds = || std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
    let e = block_on(Engine::open(config(&dir, 2))).unwrap();
    block_on(e.handle().create_topic("many", 200, None)).unwrap();
    block_on(e.shutdown()).unwrap();
    let before = open_fds();
    for _ in 0..3 {
        let e = block_on(Engine::open(config(&dir, 2))).unwrap();
        block_on(e.shutdown()).unwrap();
    }
    let after = open_fds();
    // Other tests of this binary run beside it: allow some slack, far below 200 a run.
    assert!(after < before + 100, "descriptors grew from {before} to {after} over three runs of 200 partitions");
}
