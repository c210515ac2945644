//! The engine's cleaner: retention, compaction and time-based rolls happen on their own,
//! every `retention_check`, with no call from the test; `clean_topic` does it at once.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use sluice_engine::{Engine, EngineConfig, EngineError, EngineHandle, Isolation, OwnedRecord, TopicConfig};
use sluice_io::{BatchMeta, CleanupPolicy, Offset, PartitionId, Timestamp};

const P0: PartitionId = PartitionId(0);

/// An engine whose cleaner looks every 50 ms, with small internal-topic segments.
fn engine(dir: &Path) -> Engine {
    let config = EngineConfig {
        shards: Some(2),
        retention_check: Duration::from_millis(50),
        internal_segment_bytes: 4096,
        ..EngineConfig::new(dir)
    };
    block_on(Engine::open(config)).unwrap()
}

fn small_segments(cleanup: CleanupPolicy) -> TopicConfig {
    TopicConfig { segment_bytes: 4096, cleanup, ..TopicConfig::default() }
}

/// Appends `n` records, keys `k0..k{keys}` in turn, values numbered from `from`, in
/// batches of 10, stamped `time`.
fn append(h: &EngineHandle, topic: &str, keys: usize, from: usize, n: usize, value: &[u8], time: Timestamp) {
    let records: Vec<OwnedRecord> = (from..from + n)
        .map(|i| {
            OwnedRecord::new(
                Some(format!("k{}", i % keys).into_bytes()),
                [format!("{i}:").as_bytes(), value].concat(),
                time,
            )
        })
        .collect();
    for chunk in records.chunks(10) {
        block_on(h.append(topic, P0, chunk.to_vec(), BatchMeta::default())).unwrap();
    }
}

/// Every record of partition 0 as (offset, key, value).
fn read_all(h: &EngineHandle, topic: &str) -> Vec<(u64, String, Vec<u8>)> {
    let polled = block_on(h.read_to_end(topic, Isolation::ReadUncommitted)).unwrap();
    let mut out = Vec::new();
    for p in polled.iter().filter(|p| p.partition == P0) {
        for r in p.batches.records() {
            let r = r.unwrap();
            out.push((
                r.offset().0,
                String::from_utf8_lossy(r.key().unwrap_or_default()).into_owned(),
                r.value_bytes().to_vec(),
            ));
        }
    }
    out
}

/// Waits up to 20 s for `done`, checking every 20 ms.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn segment_files(dir: &Path, topic: &str) -> usize {
    std::fs::read_dir(dir.join("topics").join(format!("{topic}-0")))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "log"))
        .count()
}

#[test]
fn retention_by_size_deletes_the_oldest_segments_on_its_own() {
    let dir = common::data_dir("cleaning", "size");
    let e = engine(&dir);
    let h = e.handle();
    let config = TopicConfig { retention_bytes: Some(8192), ..small_segments(CleanupPolicy::Delete) };
    block_on(h.create_topic("t", 1, Some(config))).unwrap();
    append(&h, "t", 50, 0, 2000, &[b'x'; 40], Timestamp::now());
    let end = block_on(h.offsets("t", P0)).unwrap().1;
    assert_eq!(end, Offset(2000));
    // Nothing here calls retention: the shard's cleaner does. Each segment holds 40
    // records of 96 bytes (3840 bytes): the oldest go while the rest still hold 8192
    // bytes, so three segments stay (11 520 bytes; a fourth would make 15 360).
    eventually("the size limit applied", || segment_files(&dir, "t") == 3);
    let (start, end) = block_on(h.offsets("t", P0)).unwrap();
    assert_eq!((start, end), (Offset(1880), Offset(2000)), "retention moves the start, never the end");
    let read = read_all(&h, "t");
    assert_eq!(read.first().map(|r| r.0), Some(start.0), "reads begin at the new start");
    assert_eq!(read.len() as u64, end.0 - start.0);
    let stats: u64 = block_on(h.cleaner_stats()).unwrap().iter().map(|s| s.segments_deleted).sum();
    assert!(stats > 0, "the cleaner counted what it deleted");
    block_on(e.shutdown()).unwrap();
}

#[test]
fn retention_by_time_empties_an_idle_partition_active_segment_included() {
    let dir = common::data_dir("cleaning", "time");
    let e = engine(&dir);
    let h = e.handle();
    let config = TopicConfig { retention_ms: Some(60_000), ..small_segments(CleanupPolicy::Delete) };
    block_on(h.create_topic("t", 1, Some(config))).unwrap();
    // Records stamped two minutes ago are past the one-minute retention; fresh ones not.
    let old = Timestamp(Timestamp::now().0 - 120_000);
    append(&h, "t", 7, 0, 300, b"old", old);
    eventually("the old records deleted, the active segment rolled for it", || {
        let (start, end) = block_on(h.offsets("t", P0)).unwrap();
        start == end
    });
    assert_eq!(block_on(h.offsets("t", P0)).unwrap(), (Offset(300), Offset(300)));
    append(&h, "t", 7, 300, 50, b"new", Timestamp::now());
    // A few more checks pass; the fresh records stay.
    std::thread::sleep(Duration::from_millis(300));
    let read = read_all(&h, "t");
    assert_eq!(read.len(), 50);
    assert_eq!(read[0].0, 300);
    block_on(e.shutdown()).unwrap();

    // The new start holds across a restart.
    let e = engine(&dir);
    let h = e.handle();
    assert_eq!(block_on(h.offsets("t", P0)).unwrap(), (Offset(300), Offset(350)));
    block_on(e.shutdown()).unwrap();
}

#[test]
fn segment_ms_rolls_an_idle_active_segment() {
    let dir = common::data_dir("cleaning", "segment-ms");
    let e = engine(&dir);
    let h = e.handle();
    let config = TopicConfig { segment_ms: Some(100), ..TopicConfig::default() };
    block_on(h.create_topic("t", 1, Some(config))).unwrap();
    append(&h, "t", 3, 0, 10, b"v", Timestamp::now());
    assert_eq!(segment_files(&dir, "t"), 1);
    eventually("a roll by age with no append", || segment_files(&dir, "t") == 2);
    // An empty active segment does not roll again.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(segment_files(&dir, "t"), 2);
    block_on(e.shutdown()).unwrap();
}

#[test]
fn compaction_keeps_the_latest_record_per_key_on_its_own() {
    let dir = common::data_dir("cleaning", "compact");
    let e = engine(&dir);
    let h = e.handle();
    block_on(h.create_topic("t", 1, Some(small_segments(CleanupPolicy::Compact)))).unwrap();
    append(&h, "t", 5, 0, 3000, &[b'y'; 20], Timestamp::now());
    eventually("offset 0 compacted away", || read_all(&h, "t").first().is_some_and(|r| r.0 > 0));
    let read = read_all(&h, "t");
    assert!(read.len() < 3000, "compaction removed records ({} left)", read.len());
    // Offsets keep their numbers and order; each key's latest value is still there.
    assert!(read.windows(2).all(|w| w[0].0 < w[1].0));
    for k in 0..5 {
        let latest = (0..3000).filter(|i| i % 5 == k).max().unwrap();
        let last = read.iter().rev().find(|r| r.1 == format!("k{k}")).unwrap();
        assert_eq!(last.0, latest as u64, "key k{k}'s latest offset");
    }
    assert_eq!(block_on(h.offsets("t", P0)).unwrap().1, Offset(3000));
    block_on(e.shutdown()).unwrap();
}

#[test]
fn a_compacted_topic_refuses_records_without_a_key_whole_until_it_no_longer_compacts() {
    let dir = common::data_dir("cleaning", "keyless");
    let e = engine(&dir);
    let h = e.handle();
    block_on(h.create_topic("t", 1, Some(small_segments(CleanupPolicy::CompactDelete)))).unwrap();
    let now = Timestamp::now();
    let keyed = |k: &str| OwnedRecord::new(Some(k.into()), b"v".to_vec(), now);
    let keyless = || OwnedRecord::new(None, b"v".to_vec(), now);
    // An append holding keyless records is refused whole, naming each of them.
    let mixed = vec![keyed("a"), keyless(), keyed("b"), keyless(), keyed("c")];
    match block_on(h.append("t", P0, mixed.clone(), BatchMeta::default())) {
        Err(EngineError::KeyRequired { topic, records }) => {
            assert_eq!((topic.as_str(), records), ("t", vec![1, 3]));
        }
        other => panic!("expected KeyRequired, got {other:?}"),
    }
    // A single send too, to a chosen partition or not; a tombstone has its key.
    assert!(matches!(block_on(h.send("t", None, b"v", now)), Err(EngineError::KeyRequired { .. })));
    assert!(matches!(block_on(h.send_to("t", P0, keyless())), Err(EngineError::KeyRequired { .. })));
    assert_eq!(block_on(h.offsets("t", P0)).unwrap().1, Offset(0), "nothing stored");
    block_on(h.send("t", Some(b"a"), b"v", now)).unwrap();
    block_on(h.send_record("t", OwnedRecord::tombstone(b"a".to_vec(), now))).unwrap();
    block_on(h.append("t", P0, vec![keyed("b"), keyed("c")], BatchMeta::default())).unwrap();
    assert_eq!(block_on(h.offsets("t", P0)).unwrap().1, Offset(4));
    // Once the topic only deletes, the same append is taken, from the next one on.
    block_on(h.alter_topic_config("t", |c| Ok(TopicConfig { cleanup: CleanupPolicy::Delete, ..c.clone() }), false))
        .unwrap();
    let info = block_on(h.append("t", P0, mixed, BatchMeta::default())).unwrap();
    assert_eq!(info.base_offset, Offset(4));
    let read = read_all(&h, "t");
    assert_eq!(read.len(), 9);
    assert_eq!(read.iter().filter(|r| r.1.is_empty()).count(), 2, "the two keyless records, after the change");
    block_on(e.shutdown()).unwrap();
}

#[test]
fn a_tombstone_outlives_its_key_then_goes_after_delete_retention() {
    let dir = common::data_dir("cleaning", "tombstone");
    let e = engine(&dir);
    let h = e.handle();
    let config = TopicConfig { delete_retention_ms: 1500, ..small_segments(CleanupPolicy::Compact) };
    block_on(h.create_topic("t", 1, Some(config))).unwrap();
    let now = Timestamp::now();
    let rec = |key: &str, value: &[u8]| OwnedRecord::new(Some(key.into()), value.to_vec(), now);
    block_on(h.append("t", P0, vec![rec("gone", b"v1"), rec("gone", b"v2")], BatchMeta::default())).unwrap();
    // The tombstone: a null value.
    let tombstone = OwnedRecord::tombstone(b"gone".to_vec(), Timestamp::now());
    block_on(h.append("t", P0, vec![tombstone], BatchMeta::default())).unwrap();
    // Other keys fill segments, so the tombstone's segment closes.
    append(&h, "t", 4, 0, 1000, &[b'z'; 20], now);
    let gone = |h: &EngineHandle| read_all(h, "t").into_iter().filter(|r| r.1 == "gone").collect::<Vec<_>>();
    eventually("the key's values compacted away, its tombstone kept", || {
        let g = gone(&h);
        g.len() == 1 && g[0].2.is_empty()
    });
    assert_eq!(gone(&h)[0].0, 2, "the tombstone keeps its offset");
    // No new writes: the tombstone goes once delete_retention_ms has passed since its
    // segment's newest record, with nothing dirty to trigger a compaction.
    eventually("the tombstone removed after delete.retention.ms", || gone(&h).is_empty());
    assert!(Timestamp::now().0 - now.0 >= 1500, "not before delete.retention.ms");
    block_on(e.shutdown()).unwrap();
}

#[test]
fn consumer_offsets_are_compacted_and_the_latest_commit_survives_a_restart() {
    let dir = common::data_dir("cleaning", "offsets");
    let e = engine(&dir);
    let h = e.handle();
    block_on(h.create_topic("t", 1, None)).unwrap();
    for i in 0..400u64 {
        block_on(h.commit_offsets("g", None, &[("t".into(), P0, Offset(i))])).unwrap();
    }
    // Every commit record the offsets topic still holds, over its partitions.
    let held = |h: &EngineHandle| -> usize {
        let polled = block_on(h.read_to_end("__consumer_offsets", Isolation::ReadUncommitted)).unwrap();
        polled.iter().map(|x| x.batches.records().count()).sum()
    };
    let ends: u64 = PartitionId::all(h.describe_topic("__consumer_offsets").unwrap().partitions())
        .map(|p| block_on(h.offsets("__consumer_offsets", p)).unwrap().1.0)
        .sum();
    assert!(ends >= 400, "every commit is a record ({ends})");
    eventually("the offsets topic compacted", || held(&h) < 100);
    let compactions: u64 = block_on(h.cleaner_stats()).unwrap().iter().map(|s| s.compactions).sum();
    assert!(compactions > 0);
    block_on(e.shutdown()).unwrap();
    let e = engine(&dir);
    let h = e.handle();
    let committed = block_on(h.committed_offsets("g")).unwrap();
    assert_eq!(committed.get(&("t".to_string(), P0)), Some(&Offset(399)));
    block_on(e.shutdown()).unwrap();
}

#[test]
fn clean_topic_applies_retention_and_compaction_now() {
    let dir = common::data_dir("cleaning", "now");
    // A cleaner that would not look for an hour: only the explicit call cleans.
    let config =
        EngineConfig { shards: Some(1), retention_check: Duration::from_secs(3600), ..EngineConfig::new(&*dir) };
    let e = block_on(Engine::open(config)).unwrap();
    let h = e.handle();
    block_on(h.create_topic("c", 1, Some(small_segments(CleanupPolicy::Compact)))).unwrap();
    let config = TopicConfig { retention_bytes: Some(4096), ..small_segments(CleanupPolicy::Delete) };
    block_on(h.create_topic("d", 1, Some(config))).unwrap();
    append(&h, "c", 2, 0, 500, &[b'c'; 20], Timestamp::now());
    append(&h, "d", 2, 0, 500, &[b'd'; 20], Timestamp::now());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(read_all(&h, "c").len(), 500, "nothing cleaned before the call");
    assert_eq!(block_on(h.offsets("d", P0)).unwrap().0, Offset(0));
    let c = block_on(h.clean_topic("c")).unwrap();
    let compaction = c[0].1.compaction.clone().expect("compacted");
    assert!(compaction.records_superseded > 0);
    assert!(read_all(&h, "c").len() < 500);
    let d = block_on(h.clean_topic("d")).unwrap();
    assert!(d[0].1.retention.segments_deleted > 0);
    assert_eq!(block_on(h.offsets("d", P0)).unwrap().0, d[0].1.retention.log_start);
    assert!(d[0].1.bytes_reclaimed() > 0);
    block_on(e.shutdown()).unwrap();
}
