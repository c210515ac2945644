//! Injected faults through `FaultyStorage`: a failed fsync, a full disk, a torn write
//! and a roll that cannot allocate its new segment. In each case no append is
//! acknowledged that is not durable, errors are typed, what was acknowledged stays
//! readable, and a reopen on the real backend finds every acknowledged record intact.

mod common;

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

use common::Rng;
use sluice_io::record::BatchEncoder;
use sluice_io::storage::StorageFile;
use sluice_io::{
    AppendInfo, BatchMeta, FaultPlan, FaultyStorage, FsyncPolicy, Log, LogConfig, LogError, Offset, Record, Storage,
    Timestamp, UringStorage,
};

/// FNV-1a, as the records' checksum.
fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// A record value naming the append attempt it belongs to (`tag`) and its place in it,
/// padded by a length derived from both, with a checksum.
fn encode_value(tag: u64, i: u64) -> Vec<u8> {
    let pad = (tag.wrapping_mul(31).wrapping_add(i.wrapping_mul(7)) % 97) as usize;
    let mut v = Vec::with_capacity(24 + pad);
    v.extend_from_slice(&tag.to_le_bytes());
    v.extend_from_slice(&i.to_le_bytes());
    v.extend((0..pad).map(|k| (tag as u8) ^ (k as u8)));
    let sum = fnv64(&v);
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

fn decode_value(v: &[u8]) -> Option<(u64, u64)> {
    if v.len() < 24 {
        return None;
    }
    let tag = u64::from_le_bytes(v[0..8].try_into().ok()?);
    let i = u64::from_le_bytes(v[8..16].try_into().ok()?);
    (encode_value(tag, i) == v).then_some((tag, i))
}

/// The values of append attempt `tag` with `n` records.
fn batch_values(tag: u64, n: u64) -> Vec<Vec<u8>> {
    (0..n).map(|i| encode_value(tag, i)).collect()
}

fn records(vals: &[Vec<u8>]) -> Vec<Record<'_>> {
    vals.iter().enumerate().map(|(i, v)| Record::unkeyed(v, Timestamp(i as i64))).collect()
}

fn config(segment_bytes_max: u64) -> LogConfig {
    LogConfig {
        fsync: FsyncPolicy::Always,
        segment_bytes_max,
        index_interval_bytes: 1024,
        write_buffer_bytes: 16 << 10,
        ..LogConfig::default()
    }
}

/// An acknowledged append: where it landed and what it held.
#[derive(Clone, Debug)]
struct Acked {
    info: AppendInfo,
    tag: u64,
    n: u64,
}

/// Appends attempt `tag` of `n` records; records it in `acked` if acknowledged.
async fn append<S: Storage>(
    log: &Log<S>,
    tag: u64,
    n: u64,
    acked: &RefCell<Vec<Acked>>,
) -> Result<AppendInfo, LogError> {
    let vals = batch_values(tag, n);
    let result = log.append(&records(&vals)).await;
    if let Ok(info) = &result {
        assert_eq!(info.last_offset.0 - info.base_offset.0 + 1, n);
        acked.borrow_mut().push(Acked { info: *info, tag, n });
    }
    result
}

/// Reads the whole log as readers see it: (offset, tag, index) of every record up to the
/// visible end, checking that offsets are contiguous from 0, that every record is well
/// formed, and that nothing past the visible end is ever served (the appends a failed
/// write or sync left behind are not).
async fn read_all<S: Storage>(log: &Log<S>) -> Vec<(u64, u64)> {
    let end = log.visible_offset().0;
    assert!(end <= log.end_offset().0);
    let past = log.read(Offset(end), 64 << 10).await.unwrap_or_else(|e| panic!("read at the visible end: {e}"));
    assert!(past.is_empty() || log.visible_offset().0 > end, "records past the visible end {end} were served");
    let mut out = Vec::new();
    let mut at = 0;
    while at < end {
        let batches = log.read(Offset(at), 64 << 10).await.unwrap_or_else(|e| panic!("read at {at}: {e}"));
        assert!(!batches.is_empty(), "offset {at} below the end {end} reads nothing");
        for r in batches.records() {
            let r = r.unwrap();
            assert_eq!(r.offset(), Offset(at), "offsets are contiguous");
            let (tag, i) = decode_value(r.value_bytes()).unwrap_or_else(|| panic!("record at {at} is malformed"));
            assert_eq!(r.event_time(), Timestamp(i as i64));
            out.push((tag, i));
            at += 1;
        }
    }
    out
}

/// Checks that every acknowledged append is in `present` exactly where it was
/// acknowledged, and that records nobody acknowledged come whole from attempts that
/// were made (`attempted` tags), each batch's records in order.
fn check_acked(present: &[(u64, u64)], acked: &[Acked], attempted: u64) {
    for a in acked {
        assert!(
            a.info.last_offset.0 < present.len() as u64,
            "acknowledged {a:?} lost: {} records present",
            present.len()
        );
        for i in 0..a.n {
            assert_eq!(present[(a.info.base_offset.0 + i) as usize], (a.tag, i), "{a:?}");
        }
    }
    let mut o = 0;
    while o < present.len() {
        let (tag, first) = present[o];
        assert!(tag < attempted, "offset {o}: tag {tag} was never appended");
        assert_eq!(first, 0, "offset {o}: a batch starts with its first record");
        o += 1;
        let mut i = 1;
        while o < present.len() && present[o] == (tag, i) {
            o += 1;
            i += 1;
        }
    }
}

fn acked_end(acked: &[Acked]) -> u64 {
    acked.iter().map(|a| a.info.last_offset.0 + 1).max().unwrap_or(0)
}

/// Reopens `dir` on the real backend and checks it against `acked`; returns the end.
async fn reopen_and_check(dir: &Path, cfg: LogConfig, acked: &[Acked], attempted: u64) -> u64 {
    let (log, report) = Log::open(UringStorage, dir, cfg).await.expect("reopen on the real backend");
    let present = read_all(&log).await;
    check_acked(&present, acked, attempted);
    eprintln!(
        "  reopened: end {}, acknowledged up to {}, truncated {:?}",
        present.len(),
        acked_end(acked),
        report.truncated.as_ref().map(|t| (t.pos, t.log_end, &t.reason))
    );
    // The log continues from its end on the real backend.
    let end = log.end_offset();
    let vals = batch_values(u64::MAX, 2);
    assert_eq!(log.append(&records(&vals)).await.unwrap().base_offset, end);
    log.close().await.unwrap();
    end.0
}

fn is_log_file(dir: &Path, path: &Path) -> bool {
    path.parent() == Some(dir) && path.extension().is_some_and(|e| e == "log")
}

/// (a) A failed fsync fails every append that waited on it (none is acknowledged),
/// fails later appends, and leaves acknowledged data readable.
#[test]
fn failed_sync_fails_every_waiting_append() {
    let seed = common::seed("failed_sync_fails_every_waiting_append");
    let dir = common::temp_dir("faults-sync");
    let cleanup = dir.clone();
    common::run(move || async move {
        let mut rng = Rng::new(seed);
        let storage = FaultyStorage::new();
        let plan = storage.plan().clone();
        let (log, _) = Log::open(storage, &dir, config(32 << 10)).await.unwrap();
        let acked = Rc::new(RefCell::new(Vec::new()));
        let mut tag = 0;
        for _ in 0..rng.range(5, 60) {
            append(&log, tag, rng.range(1, 30), &acked).await.unwrap();
            tag += 1;
        }
        let durable = log.durable_offset();
        assert_eq!(durable.0, acked_end(&acked.borrow()));

        plan.borrow_mut().fail_syncs = 1;
        let in_flight = rng.range(2, 9);
        let tasks: Vec<_> = (0..in_flight)
            .map(|k| {
                let (log, acked) = (log.clone(), acked.clone());
                let n = rng.range(1, 30);
                glommio::spawn_local(async move { append(&log, tag + k, n, &acked).await })
            })
            .collect();
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await);
        }
        tag += in_flight;
        eprintln!("  {in_flight} appends in flight at the failed sync: {results:?}");
        let (mut sync_failed, mut failed) = (0, false);
        for r in &results {
            match r {
                // Appends made durable before the failed sync (a roll syncs the segment
                // it closes) are acknowledged: only a prefix of the tasks, all of them
                // durable.
                Ok(info) if !failed => {
                    assert!(info.last_offset < log.durable_offset(), "acknowledged, not durable: {info:?}");
                    continue;
                }
                Err(LogError::SyncFailed { path, source }) => {
                    assert!(is_log_file(&dir, path), "{}", path.display());
                    assert_eq!(source.raw_os_error(), Some(libc::EIO));
                    sync_failed += 1;
                }
                Err(LogError::Failed { path, reason }) => {
                    assert_eq!(path, &dir);
                    assert!(reason.contains("fsync failed"), "{reason}");
                }
                other => panic!("an append waiting on a failed sync returned {other:?}"),
            }
            failed = true;
        }
        assert_eq!(sync_failed, 1, "one sync was led, and it failed");
        assert_eq!(plan.borrow().fail_syncs, 0, "the injected failure was used");
        // A roll already under way when the sync failed may still sync the rolled
        // segment, so durability may advance (acknowledging the appends it covered, above).
        assert!(log.durable_offset() >= durable && log.durable_offset() <= log.end_offset());

        // Later appends are refused; reads of acknowledged data still work.
        match append(&log, tag, 3, &acked).await {
            Err(LogError::Failed { reason, .. }) => assert!(reason.contains("fsync failed"), "{reason}"),
            other => panic!("append after a failed sync: {other:?}"),
        }
        tag += 1;
        let present = read_all(&log).await;
        check_acked(&present, &acked.borrow(), tag);
        drop(log);

        let acked = acked.borrow().clone();
        reopen_and_check(&dir, config(32 << 10), &acked, tag).await;
    });
    let _ = std::fs::remove_dir_all(&cleanup);
}

/// (b) A full disk: appends fail with `NoSpace` and then `Failed` naming it, never
/// panic, and everything acknowledged stays readable and survives a reopen.
#[test]
fn no_space_fails_appends_and_keeps_acknowledged_data() {
    let seed = common::seed("no_space_fails_appends_and_keeps_acknowledged_data");
    for round in 0..3u64 {
        let dir = common::temp_dir("faults-space");
        let cleanup = dir.clone();
        common::run(move || async move {
            let mut rng = Rng::new(seed.wrapping_add(round));
            let storage = FaultyStorage::new();
            let plan = storage.plan().clone();
            // Segments larger than the test writes: the disk fills on a data write.
            let (log, _) = Log::open(storage, &dir, config(1 << 20)).await.unwrap();
            let acked = Rc::new(RefCell::new(Vec::new()));
            let mut tag = 0;
            for _ in 0..rng.range(1, 30) {
                append(&log, tag, rng.range(1, 30), &acked).await.unwrap();
                tag += 1;
            }
            let slack = rng.range(1, 32 << 10);
            let space = {
                let mut p = plan.borrow_mut();
                p.space_bytes = Some(p.bytes_written + slack);
                p.bytes_written + slack
            };
            eprintln!("round {round}: space {space} bytes ({slack} beyond what was written)");

            // Concurrent writers until each sees an error.
            let writers = rng.range(1, 5);
            let tasks: Vec<_> = (0..writers)
                .map(|w| {
                    let (log, acked) = (log.clone(), acked.clone());
                    let mut rng = Rng::new(rng.next_u64());
                    glommio::spawn_local(async move {
                        let mut k = 0;
                        loop {
                            let t = 1_000_000 * (w + 1) + k;
                            match append(&log, t, rng.range(1, 30), &acked).await {
                                Ok(_) => k += 1,
                                Err(e) => return (k, e),
                            }
                            assert!(k < 100_000, "the disk never filled");
                        }
                    })
                })
                .collect();
            let mut no_space = 0;
            for t in tasks {
                let (_, e) = t.await;
                match &e {
                    LogError::NoSpace { path } => {
                        assert!(is_log_file(&dir, path), "{}", path.display());
                        no_space += 1;
                    }
                    LogError::Failed { path, reason } => {
                        assert_eq!(path, &dir);
                        assert!(reason.to_lowercase().contains("no space left on device"), "{reason}");
                    }
                    other => panic!("append on a full disk: {other:?}"),
                }
            }
            assert_eq!(no_space, 1, "the write that hit the full disk is reported once as NoSpace");
            assert!(plan.borrow().bytes_written <= space, "no write went past the space");
            match append(&log, tag, 1, &acked).await {
                Err(LogError::Failed { reason, .. }) => {
                    assert!(reason.to_lowercase().contains("no space left on device"), "{reason}")
                }
                other => panic!("append after a full disk: {other:?}"),
            }
            // Reads of acknowledged data still work on the failed log.
            let acked = acked.borrow().clone();
            let end = acked_end(&acked);
            assert_eq!(log.durable_offset().0, end);
            let mut at = 0;
            while at < end {
                let batches = log.read(Offset(at), 64 << 10).await.unwrap_or_else(|e| panic!("read at {at}: {e}"));
                for r in batches.records() {
                    let r = r.unwrap();
                    assert_eq!(r.offset(), Offset(at));
                    assert!(decode_value(r.value_bytes()).is_some());
                    at += 1;
                }
            }
            drop(log);
            reopen_and_check(&dir, config(1 << 20), &acked, u64::MAX - 1).await;
        });
        let _ = std::fs::remove_dir_all(&cleanup);
    }
}

/// Where the batch of attempt `tag` with `n` records lies: its stored length.
fn stored_len(tag: u64, n: u64, base: Offset) -> u64 {
    let vals = batch_values(tag, n);
    let mut enc = BatchEncoder::new();
    enc.encode(&records(&vals), &BatchMeta::default(), base).unwrap().0.len() as u64
}

/// The acknowledged batches in the segment starting at `base`, as (base offset, file
/// position, end position), assuming a single appender (so they lie back to back).
fn spans_in_segment(acked: &[Acked], base: Offset) -> Vec<(u64, u64, u64)> {
    let mut pos = 0;
    let mut spans = Vec::new();
    for a in acked.iter().filter(|a| a.info.base_offset >= base) {
        let len = stored_len(a.tag, a.n, a.info.base_offset);
        spans.push((a.info.base_offset.0, pos, pos + len));
        pos += len;
    }
    spans
}

/// (c) A torn write, cut cleanly (zeros) or with garbage: the reopened log ends at a
/// batch boundary, every record in it is intact and every acknowledged append is there.
/// The first rounds tear at a random byte; the last two tear inside the block a write
/// rewrites, where the acknowledged bytes must survive the torn rewrite.
#[test]
fn torn_write_recovers_to_a_batch_boundary() {
    let seed = common::seed("torn_write_recovers_to_a_batch_boundary");
    for round in 0..8u64 {
        let fill = if round % 2 == 0 { 0 } else { 0xAB };
        let in_rewritten_block = round >= 6;
        let dir = common::temp_dir("faults-torn");
        let cleanup = dir.clone();
        common::run(move || async move {
            let mut rng = Rng::new(seed.wrapping_add(round));
            let storage = FaultyStorage::new();
            let plan: Rc<RefCell<FaultPlan>> = storage.plan().clone();
            let align = {
                let probe = storage.open(&dir.join("align-probe"), true).await.unwrap();
                probe.alignment()
            };
            let cfg = config(if in_rewritten_block { 1 << 20 } else { 32 << 10 });
            let (log, _) = Log::open(storage.clone(), &dir, cfg.clone()).await.unwrap();
            let acked = RefCell::new(Vec::new());
            let mut tag = 0;
            let tear_at = if in_rewritten_block {
                // Acknowledge a few appends, then tear the next write within the
                // acknowledged bytes of the partial block it starts by rewriting.
                let mut tail = 0;
                while tag < 3 || tail == 0 {
                    append(&log, tag, rng.range(1, 40), &acked).await.unwrap();
                    tag += 1;
                    let spans = spans_in_segment(&acked.borrow(), *log.segment_bases().last().unwrap());
                    tail = spans.last().map_or(0, |s| s.2) % align;
                }
                plan.borrow().bytes_written + rng.range(0, tail)
            } else {
                rng.range(0, 400 << 10)
            };
            {
                let mut p = plan.borrow_mut();
                p.tear_at_byte = Some(tear_at);
                p.tear_fill = fill;
            }
            let err = loop {
                let n = rng.range(1, 40);
                let result = append(&log, tag, n, &acked).await;
                tag += 1;
                if let Err(e) = result {
                    break e;
                }
                assert!(tag < 100_000, "the write never tore");
            };
            assert!(plan.borrow().crashed);
            assert!(
                matches!(err, LogError::Io { .. } | LogError::Failed { .. } | LogError::SyncFailed { .. }),
                "{err:?}"
            );
            let acked = acked.into_inner();
            drop(log);
            // Writes submitted before the tear may still land, as on a real machine until
            // it died: recovery reads the file only after them.
            storage.settled().await;

            // Past the tear the disk keeps what it held, so the acknowledged bytes of a
            // rewritten partial block survive: nothing acknowledged may be lost.
            let may_lose_from = acked_end(&acked);
            let (log, report) = Log::open(UringStorage, &dir, cfg.clone()).await.unwrap();
            let present = read_all(&log).await;
            let end = present.len() as u64;
            eprintln!(
                "round {round}: fill {fill:#x}, tear at byte {tear_at}, {} appends acknowledged up to {}, \
                 may lose from {may_lose_from}, reopened end {end}, truncated {:?}",
                acked.len(),
                acked_end(&acked),
                report.truncated.as_ref().map(|t| (t.pos, t.log_end, &t.reason))
            );
            if let Some(t) = &report.truncated {
                assert_eq!(t.log_end, Offset(end));
                assert!(is_log_file(&dir, &t.path));
            }
            assert!(end >= may_lose_from, "acknowledged appends lost below {may_lose_from}: the log ends at {end}");
            let kept: Vec<Acked> = acked.iter().filter(|a| a.info.last_offset.0 < end).cloned().collect();
            check_acked(&present, &kept, tag);
            drop(log);

            // A second reopen finds the cut durable, and the log continues.
            let (log, report) = Log::open(UringStorage, &dir, cfg.clone()).await.unwrap();
            assert!(report.truncated.is_none(), "{report:?}");
            assert_eq!(log.end_offset(), Offset(end));
            drop(log);
            reopen_and_check(&dir, cfg, &kept, tag).await;
        });
        let _ = std::fs::remove_dir_all(&cleanup);
    }
}

/// (d) A roll that cannot allocate its new segment: a typed `NoSpace` naming the new
/// segment, the log refuses appends but stays readable, and a reopen finds every
/// acknowledged record and continues.
#[test]
fn failed_roll_is_typed_and_leaves_the_log_readable() {
    let seed = common::seed("failed_roll_is_typed_and_leaves_the_log_readable");
    // By size (an append that needs a roll) and by an explicit roll.
    for explicit in [false, true] {
        let dir = common::temp_dir("faults-roll");
        let cleanup = dir.clone();
        common::run(move || async move {
            let mut rng = Rng::new(seed.wrapping_add(u64::from(explicit)));
            let segment_bytes_max = 64 << 10;
            let storage = FaultyStorage::new();
            let plan = storage.plan().clone();
            let cfg = config(segment_bytes_max);
            let (log, _) = Log::open(storage, &dir, cfg.clone()).await.unwrap();
            let acked = RefCell::new(Vec::new());
            let mut tag = 0;
            for _ in 0..rng.range(1, 20) {
                if plan.borrow().bytes_written > 24 << 10 {
                    break;
                }
                append(&log, tag, rng.range(1, 10), &acked).await.unwrap();
                tag += 1;
            }
            // Room for the rolled segment's last flush and its index files, not for the
            // new segment's preallocation.
            let space = plan.borrow().bytes_written + (16 << 10);
            assert!(space < segment_bytes_max, "the new segment's allocation must not fit");
            plan.borrow_mut().space_bytes = Some(space);
            let end = acked_end(&acked.borrow());
            let err = if explicit {
                log.roll().await.unwrap_err()
            } else {
                // One record that fits only in an empty segment.
                let big = vec![7u8; (segment_bytes_max - 200) as usize];
                let rec = Record::unkeyed(&big, Timestamp(0));
                log.append(&[rec]).await.unwrap_err()
            };
            let new_segment = dir.join(format!("{end:020}.log"));
            match &err {
                LogError::NoSpace { path } => assert_eq!(path, &new_segment),
                other => panic!("failed roll: {other:?}"),
            }
            assert_eq!(log.end_offset(), Offset(end), "the failed append got no offset");
            match append(&log, tag, 1, &acked).await {
                Err(LogError::Failed { reason, .. }) => {
                    assert!(reason.contains("roll failed") && reason.contains("no space"), "{reason}")
                }
                other => panic!("append after a failed roll: {other:?}"),
            }
            tag += 1;
            let present = read_all(&log).await;
            assert_eq!(present.len() as u64, end);
            check_acked(&present, &acked.borrow(), tag);
            drop(log);

            let acked = acked.into_inner();
            let reopened_end = reopen_and_check(&dir, cfg.clone(), &acked, tag).await;
            assert_eq!(reopened_end, end, "nothing unacknowledged survived");
            // With space again, the big append rolls fine.
            let (log, _) = Log::open(UringStorage, &dir, cfg).await.unwrap();
            let big = vec![7u8; (segment_bytes_max - 200) as usize];
            let before = log.segment_count();
            let info = log.append(&[Record::unkeyed(&big, Timestamp(0))]).await.unwrap();
            assert_eq!(info.base_offset, Offset(end + 2));
            assert!(log.segment_count() > before);
        });
        let _ = std::fs::remove_dir_all(&cleanup);
    }
}
