//! Basic behaviour of the partition log on the real disk: append, read in place, roll,
//! reopen, seek by time, retention.

mod common;

use sluice_io::{FsyncPolicy, Log, LogConfig, LogError, Offset, Record, Timestamp, UringStorage};

fn value(i: u64) -> Vec<u8> {
    format!("value-{i:06}").into_bytes()
}

async fn append_n<S: sluice_io::Storage>(log: &Log<S>, from: u64, n: u64, per_batch: u64) {
    let mut i = from;
    while i < from + n {
        let vals: Vec<Vec<u8>> = (i..(i + per_batch).min(from + n)).map(value).collect();
        let keys: Vec<Vec<u8>> =
            (i..(i + per_batch).min(from + n)).map(|k| format!("k{}", k % 7).into_bytes()).collect();
        let recs: Vec<Record<'_>> = vals
            .iter()
            .zip(&keys)
            .enumerate()
            .map(|(j, (v, k))| Record::keyed(k, v, Timestamp(1000 + (i + j as u64) as i64 * 10)))
            .collect();
        let info = log.append(&recs).await.unwrap();
        assert_eq!(info.base_offset, Offset(i));
        i += recs.len() as u64;
    }
}

async fn read_all(log: &Log, from: Offset) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = from;
    loop {
        let batches = log.read(at, 64 << 10).await.unwrap();
        if batches.is_empty() {
            return out;
        }
        for r in batches.records() {
            let r = r.unwrap();
            out.push((r.offset().0, r.value_bytes().to_vec()));
        }
        at = batches.next_offset();
    }
}

#[test]
fn append_read_roll_reopen() {
    let dir = common::temp_dir("basic");
    common::run(move || async move {
        let config = LogConfig { segment_bytes_max: 64 << 10, fsync: FsyncPolicy::Always, ..LogConfig::default() };
        let (log, report) = Log::open(UringStorage, &dir, config.clone()).await.unwrap();
        assert_eq!(report.segments, 0);
        append_n(&log, 0, 3000, 50).await;
        assert!(log.segment_count() >= 3, "rolled by size: {}", log.segment_count());
        let all = read_all(&log, Offset(0)).await;
        assert_eq!(all.len(), 3000);
        for (i, (off, v)) in all.iter().enumerate() {
            assert_eq!(*off, i as u64);
            assert_eq!(v, &value(i as u64));
        }
        // Reads from the middle start at the asked offset.
        let mid = read_all(&log, Offset(1234)).await;
        assert_eq!(mid.first().unwrap().0, 1234);
        assert_eq!(mid.len(), 3000 - 1234);
        // Seek by time: record i has time 1000 + 10 i.
        assert_eq!(log.offset_for_time(Timestamp(1000 + 10 * 777)).await.unwrap(), Some(Offset(777)));
        assert_eq!(log.offset_for_time(Timestamp(1000 + 10 * 777 - 5)).await.unwrap(), Some(Offset(777)));
        assert_eq!(log.offset_for_time(Timestamp(0)).await.unwrap(), Some(Offset(0)));
        assert_eq!(log.offset_for_time(Timestamp(10_000_000)).await.unwrap(), None);
        assert!(matches!(log.read(Offset(3001), 100).await, Err(LogError::OffsetOutOfRange { .. })));
        let segments = log.segment_count();
        log.close().await.unwrap();
        drop(log);

        let (log, report) = Log::open(UringStorage, &dir, config.clone()).await.unwrap();
        assert_eq!(report.segments, segments);
        assert!(report.truncated.is_none(), "{report:?}");
        assert!(report.rebuilt_indexes.is_empty(), "{report:?}");
        assert_eq!(log.end_offset(), Offset(3000));
        append_n(&log, 3000, 500, 100).await;
        assert_eq!(read_all(&log, Offset(2900)).await.len(), 600);

        // Indexes deleted: rebuilt on open, same answers.
        let closed_segments = log.segment_count() - 1;
        log.close().await.unwrap();
        drop(log);
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "index") {
                std::fs::remove_file(p).unwrap();
            }
        }
        let (log, report) = Log::open(UringStorage, &dir, config).await.unwrap();
        assert_eq!(report.rebuilt_indexes.len(), closed_segments);
        assert_eq!(read_all(&log, Offset(0)).await.len(), 3500);
        assert_eq!(log.offset_for_time(Timestamp(1000 + 10 * 3333)).await.unwrap(), Some(Offset(3333)));
    });
}

#[test]
fn retention_by_size_and_time() {
    let dir = common::temp_dir("retention");
    common::run(move || async move {
        let config = LogConfig {
            segment_bytes_max: 16 << 10,
            retention_bytes: Some(64 << 10),
            retention_ms: Some(1_000_000),
            fsync: FsyncPolicy::Never,
            ..LogConfig::default()
        };
        let (log, _) = Log::open(UringStorage, &dir, config).await.unwrap();
        append_n(&log, 0, 4000, 40).await;
        let before = log.size_bytes();
        let report = log.apply_retention(Timestamp(0)).await.unwrap();
        assert!(report.segments_deleted > 0);
        assert!(log.size_bytes() >= 64 << 10 || log.segment_count() == 1);
        assert!(log.size_bytes() < before);
        let start = log.start_offset();
        assert_eq!(report.log_start, start);
        assert!(matches!(log.read(Offset(0), 100).await, Err(LogError::OffsetOutOfRange { .. })));
        let rest = read_all(&log, start).await;
        assert_eq!(rest.len() as u64, 4000 - start.0);
        // By time: everything closed is older than now - 1000 s when now is far ahead.
        let report = log.apply_retention(Timestamp(10_000_000_000)).await.unwrap();
        assert!(report.segments_deleted > 0);
        assert_eq!(log.segment_count(), 1);
        assert_eq!(log.start_offset(), log.segment_bases()[0]);
    });
}

#[test]
fn compaction_keeps_latest_per_key_and_offsets() {
    let dir = common::temp_dir("compact");
    common::run(move || async move {
        let config = LogConfig {
            segment_bytes_max: 8 << 10,
            cleanup: sluice_io::CleanupPolicy::Compact,
            delete_retention_ms: 1000,
            fsync: FsyncPolicy::Never,
            ..LogConfig::default()
        };
        let (log, _) = Log::open(UringStorage, &dir, config.clone()).await.unwrap();
        // 600 records over 7 keys; then a tombstone for key k3.
        append_n(&log, 0, 600, 20).await;
        log.append(&[Record::keyed(b"k3", b"", Timestamp(50_000))]).await.unwrap();
        append_n(&log, 601, 200, 20).await;
        log.roll().await.unwrap();
        let before = read_all(&log, Offset(0)).await;
        let report = log.compact(Timestamp(0)).await.unwrap();
        assert!(report.segments_rewritten > 0, "{report:?}");
        assert!(report.bytes_after < report.bytes_before);
        let after = read_all(&log, Offset(0)).await;
        // Expected: for each key, the last record in the closed segments; offsets kept.
        let keys: Vec<Vec<u8>> =
            (0..801u64).map(|i| if i == 600 { b"k3".to_vec() } else { format!("k{}", i % 7).into_bytes() }).collect();
        let mut last = std::collections::HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            last.insert(k.clone(), i as u64);
        }
        let expect: Vec<_> = before.iter().filter(|(off, _)| last[&keys[*off as usize]] == *off).cloned().collect();
        assert_eq!(after, expect);
        // The tombstone is young (now = 0): still there. Later, it is dropped.
        assert!(after.iter().any(|(o, v)| *o == 600 && v.is_empty()) || last[&b"k3".to_vec()] != 600);
        // Reopen: the compacted segments and their indexes are valid.
        drop(log);
        let (log, report) = Log::open(UringStorage, &dir, config).await.unwrap();
        assert!(report.truncated.is_none() && report.rebuilt_indexes.is_empty(), "{report:?}");
        assert_eq!(read_all(&log, Offset(0)).await, after);
        // Reading from an offset in a gap starts at the next kept record.
        let gap = (1..800u64).find(|o| !after.iter().any(|(x, _)| x == o)).unwrap();
        let from_gap = read_all(&log, Offset(gap)).await;
        assert!(from_gap.first().unwrap().0 > gap);
    });
}

#[test]
fn reader_reads_ahead_in_order_and_seeks() {
    let dir = common::temp_dir("reader");
    common::run(move || async move {
        let config = LogConfig { segment_bytes_max: 32 << 10, fsync: FsyncPolicy::Never, ..LogConfig::default() };
        let (log, _) = Log::open(UringStorage, &dir, config).await.unwrap();
        append_n(&log, 0, 2000, 30).await;
        let mut reader = log.reader(Offset(0), 4096);
        let mut seen = Vec::new();
        loop {
            let batches = reader.next().await.unwrap();
            if batches.is_empty() {
                break;
            }
            for r in batches.records() {
                let r = r.unwrap();
                assert_eq!(r.value_bytes(), value(r.offset().0));
                seen.push(r.offset().0);
            }
        }
        assert_eq!(seen, (0..2000).collect::<Vec<_>>());
        assert_eq!(reader.position(), Offset(2000));
        // At the end, new appends become visible to the same reader.
        append_n(&log, 2000, 10, 10).await;
        let more = reader.next().await.unwrap();
        assert_eq!(more.records().next().unwrap().unwrap().offset(), Offset(2000));
        // Seeking cancels the read ahead and restarts at the new place.
        reader.seek(Offset(777));
        let b = reader.next().await.unwrap();
        assert_eq!(b.records().next().unwrap().unwrap().offset(), Offset(777));
    });
}

#[test]
fn group_commit_shares_fsyncs_among_waiting_appends() {
    let dir = common::temp_dir("group-commit");
    common::run(move || async move {
        let storage = sluice_io::FaultyStorage::new();
        let plan = storage.plan().clone();
        let config = LogConfig { fsync: FsyncPolicy::Always, ..LogConfig::default() };
        let (log, _) = Log::open(storage, &dir, config).await.unwrap();
        let syncs_before = plan.borrow().syncs;
        let tasks: Vec<_> = (0..64u64)
            .map(|i| {
                let log = log.clone();
                glommio::spawn_local(async move {
                    let v = value(i);
                    log.append(&[Record::unkeyed(&v, Timestamp(i as i64))]).await.unwrap()
                })
            })
            .collect();
        let mut offsets = Vec::new();
        for t in tasks {
            offsets.push(t.await.last_offset.0);
        }
        offsets.sort_unstable();
        assert_eq!(offsets, (0..64).collect::<Vec<_>>());
        assert_eq!(log.durable_offset(), Offset(64));
        let syncs = plan.borrow().syncs - syncs_before;
        // 64 appends arrived together: far fewer fsyncs than appends covered them.
        assert!((1..32).contains(&syncs), "{syncs} fsyncs for 64 appends");
    });
}

#[test]
fn segments_roll_by_age() {
    let dir = common::temp_dir("roll-age");
    common::run(move || async move {
        let config = LogConfig { segment_ms: Some(30), fsync: FsyncPolicy::Never, ..LogConfig::default() };
        let (log, _) = Log::open(UringStorage, &dir, config).await.unwrap();
        append_n(&log, 0, 10, 10).await;
        assert_eq!(log.segment_count(), 1);
        glommio::timer::sleep(std::time::Duration::from_millis(40)).await;
        append_n(&log, 10, 10, 10).await;
        assert_eq!(log.segment_bases(), vec![Offset(0), Offset(10)]);
        assert_eq!(read_all(&log, Offset(0)).await.len(), 20);
    });
}

#[test]
fn compaction_drops_old_tombstones_only() {
    let dir = common::temp_dir("tombstones");
    common::run(move || async move {
        let config = LogConfig {
            cleanup: sluice_io::CleanupPolicy::Compact,
            delete_retention_ms: 1000,
            fsync: FsyncPolicy::Never,
            ..LogConfig::default()
        };
        let (log, _) = Log::open(UringStorage, &dir, config).await.unwrap();
        log.append(&[
            Record::keyed(b"a", b"1", Timestamp(100)),
            Record::keyed(b"b", b"1", Timestamp(100)),
            Record::keyed(b"c", b"1", Timestamp(100)),
        ])
        .await
        .unwrap();
        log.append(&[Record::tombstone(b"a", Timestamp(200))]).await.unwrap();
        // An empty value is a value, not a delete.
        log.append(&[Record::keyed(b"c", b"", Timestamp(200))]).await.unwrap();
        log.roll().await.unwrap();
        // now - delete_retention (1000) = 0 < the segment's newest time (200): kept.
        let report = log.compact(Timestamp(1000)).await.unwrap();
        assert_eq!((report.records_superseded, report.tombstones_removed), (2, 0));
        let left: Vec<_> = read_all(&log, Offset(0)).await.into_iter().map(|(o, _)| o).collect();
        assert_eq!(left, vec![1, 3, 4]);
        // Much later the tombstone goes too; b and c's empty value stay.
        let report = log.compact(Timestamp(10_000)).await.unwrap();
        assert_eq!((report.records_superseded, report.tombstones_removed), (0, 1));
        let left: Vec<_> = read_all(&log, Offset(0)).await.into_iter().map(|(o, _)| o).collect();
        assert_eq!(left, vec![1, 4]);
        // Compaction on a delete-policy log is refused with a typed error.
        let (plain, _) = Log::open(UringStorage, dir.join("plain"), LogConfig::default()).await.unwrap();
        assert!(matches!(plain.compact(Timestamp(0)).await, Err(LogError::InvalidConfig(_))));
    });
}

#[test]
fn tail_reads_are_served_from_the_write_behind_buffers_and_never_show_what_was_not_written() {
    let dir = common::temp_dir("tail-memory");
    common::run(move || async move {
        let storage = sluice_io::FaultyStorage::new();
        let plan = storage.plan().clone();
        let config = LogConfig { fsync: FsyncPolicy::Never, ..LogConfig::default() };
        let (log, _) = Log::open(storage, &dir, config).await.unwrap();
        append_n(&log, 0, 300, 30).await;
        assert_eq!(log.make_visible().await.unwrap(), Offset(300));
        // From here the disk refuses every write: what a tail reader gets must come from
        // the appender's buffers, and be exact; and records appended now, which never
        // reach the disk, are never read.
        plan.borrow_mut().crashed = true;
        for i in 300..330 {
            let v = value(i);
            let _ = log.append(&[Record::keyed(b"k", &v, Timestamp(0))]).await;
        }
        assert_eq!(log.visible_offset(), Offset(300));
        let mut at = Offset(0);
        let mut n = 0;
        loop {
            let batches = log.read(at, 4096).await.unwrap();
            if batches.is_empty() {
                break;
            }
            for r in batches.records() {
                let r = r.unwrap();
                assert_eq!(r.value_bytes(), value(r.offset().0));
                n += 1;
            }
            at = batches.next_offset();
        }
        assert_eq!(n, 300);
        assert_eq!(at, Offset(300), "the reader stops at the visible end");
    });
}

#[test]
fn delete_records_moves_the_start_inside_a_segment_and_it_holds_across_reopen() {
    let dir = common::temp_dir("delete-records");
    common::run(move || async move {
        let config = LogConfig { segment_bytes_max: 16 << 10, fsync: FsyncPolicy::Always, ..LogConfig::default() };
        let (log, _) = Log::open(UringStorage, &dir, config.clone()).await.unwrap();
        append_n(&log, 0, 3000, 40).await;
        let bases = log.segment_bases();
        assert!(bases.len() >= 4, "{bases:?}");
        // Inside the third segment: the first two go, the third stays and starts mid-way.
        let before = Offset(bases[2].0 + 5);
        assert_eq!(log.delete_records_before(before).await.unwrap(), before);
        assert_eq!(log.start_offset(), before);
        assert_eq!(log.segment_bases()[0], bases[2]);
        assert!(matches!(log.read(Offset(bases[2].0 + 4), 100).await, Err(LogError::OffsetOutOfRange { .. })));
        let rest = read_all(&log, before).await;
        assert_eq!(rest.first().map(|r| r.0), Some(before.0), "records below the start are not handed out");
        assert_eq!(rest.len() as u64, 3000 - before.0);
        // Backwards changes nothing; past the end is refused.
        assert_eq!(log.delete_records_before(Offset(3)).await.unwrap(), before);
        assert!(matches!(
            log.delete_records_before(Offset(3001)).await,
            Err(LogError::OffsetOutOfRange { requested: Offset(3001), .. })
        ));
        log.close().await.unwrap();
        let (log, _) = Log::open(UringStorage, &dir, config.clone()).await.unwrap();
        assert_eq!(log.start_offset(), before, "the start holds across a reopen");
        // Up to the end: every closed segment goes; the log is empty and appends go on.
        assert_eq!(log.delete_records_before(Offset(3000)).await.unwrap(), Offset(3000));
        assert_eq!(log.segment_count(), 1);
        append_n(&log, 3000, 10, 10).await;
        assert_eq!(read_all(&log, Offset(3000)).await.len(), 10);
        log.close().await.unwrap();
        let (log, _) = Log::open(UringStorage, &dir, config).await.unwrap();
        assert_eq!((log.start_offset(), log.end_offset()), (Offset(3000), Offset(3010)));
        // Only the active segment: the start moves inside it.
        assert_eq!(log.segment_count(), 1);
        assert_eq!(log.delete_records_before(Offset(3004)).await.unwrap(), Offset(3004));
        assert_eq!(read_all(&log, Offset(3004)).await.len(), 6);
    });
}

#[test]
fn the_scan_for_transactions_skips_segments_without_one_also_after_reopen() {
    let dir = common::temp_dir("first-txn");
    common::run(move || async move {
        use sluice_io::ProducerId;
        use sluice_io::txn::Marker;
        let config = LogConfig { segment_bytes_max: 64 << 10, fsync: FsyncPolicy::Always, ..LogConfig::default() };
        let (log, _) = Log::open(UringStorage, &dir, config.clone()).await.unwrap();
        append_n(&log, 0, 3000, 50).await;
        assert_eq!(log.first_transactional_from(Offset(0)), None, "no transactional batch yet");
        let v = value(0);
        let rec = [Record::keyed(b"k", &v, Timestamp(1))];
        let txn = log.append_with(&rec, &Marker::data_meta(ProducerId(9), 0)).await.unwrap().base_offset;
        assert_eq!(txn, Offset(3000));
        let commit = Marker::Commit.key();
        let marker = [Record::keyed(&commit, b"", Timestamp(1))];
        log.append_with(&marker, &Marker::meta(ProducerId(9))).await.unwrap();
        append_n(&log, 3002, 3000, 50).await;
        assert!(log.segment_count() >= 4, "rolled by size: {}", log.segment_count());
        let check = |log: &Log| {
            // From any offset before the transaction, the scan starts at it: the segments
            // before hold none, and in its own segment it is the first one.
            for from in [0, 1, 1500, 2999, 3000] {
                assert_eq!(log.first_transactional_from(Offset(from)), Some(Offset(3000)), "from {from}");
            }
            // Past it, in its own segment, the index cannot tell: the scan starts where asked.
            assert_eq!(log.first_transactional_from(Offset(3001)), Some(Offset(3001)));
            // In a later segment without one: nothing to scan.
            let bases = log.segment_bases();
            let later = bases.iter().find(|b| b.0 > 3001).copied().expect("a segment after the transaction's");
            assert_eq!(log.first_transactional_from(later), None, "segments {bases:?}");
        };
        check(&log);
        log.close().await.unwrap();
        // Reopened: the closed segments' facts come from their index files.
        let (log, _) = Log::open(UringStorage, &dir, config).await.unwrap();
        check(&log);
        log.close().await.unwrap();
    });
}

/// Appends made one after another, each in a task of its own (as a shard serves a
/// connection's produce requests), land in the order they were made, also those that
/// come while the log rolls or right after.
#[test]
fn concurrent_appends_keep_their_order_across_rolls() {
    let dir = common::temp_dir("append-order");
    common::run(move || async move {
        let config = LogConfig { segment_bytes_max: 64 << 10, fsync: FsyncPolicy::Never, ..LogConfig::default() };
        let (log, _) = Log::open(UringStorage, &dir, config).await.unwrap();
        let log = std::rc::Rc::new(log);
        let mut tasks = Vec::new();
        for i in 0..3000u64 {
            let log = log.clone();
            // Requests arriving one after another, some while a roll is under way and some
            // just after, before the appends that waited for it have run again.
            tasks.push(glommio::spawn_local(async move {
                glommio::timer::sleep(std::time::Duration::from_micros(i * 20)).await;
                let v = value(i);
                let pad = vec![b'x'; 900];
                log.append(&[Record::keyed(&pad, &v, Timestamp(1))]).await.unwrap();
            }));
        }
        for t in tasks {
            t.await;
        }
        assert!(log.segment_count() > 20, "rolled often: {}", log.segment_count());
        let all = read_all(&log, Offset(0)).await;
        assert_eq!(all.len(), 3000);
        let out_of_order: Vec<u64> =
            all.iter().enumerate().filter(|(i, (_, v))| v != &value(*i as u64)).map(|(i, _)| i as u64).collect();
        assert!(
            out_of_order.is_empty(),
            "{} appends out of order, the first at {:?}",
            out_of_order.len(),
            out_of_order.first()
        );
        log.close().await.unwrap();
    });
}
