//! What a reader saw is never taken back. Under random fsync policies and random faults
//! (a failed fsync, a full disk, a torn write standing for a kill mid-write, or a plain
//! kill), with appenders and a reader running together, after every recovery each offset
//! any reader was given still holds the record it held, and none has vanished.
//!
//! Replay a failure with `SEED=<seed> cargo test -p sluice-io --test no_reuse`.

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use common::Rng;
use sluice_io::{FaultyStorage, FsyncPolicy, Log, LogConfig, Offset, Record, Timestamp};

/// What readers were given: each offset's value.
type Seen = Rc<RefCell<BTreeMap<u64, Vec<u8>>>>;

const ROUNDS: u64 = 12;

fn config(rng: &mut Rng) -> LogConfig {
    let fsync = match rng.range(0, 3) {
        0 => FsyncPolicy::Always,
        1 => FsyncPolicy::Interval(Duration::from_millis(rng.range(1, 6))),
        _ => FsyncPolicy::Never,
    };
    LogConfig {
        fsync,
        segment_bytes_max: rng.range(16, 256) << 10,
        index_interval_bytes: 1024,
        write_buffer_bytes: 16 << 10,
        ..LogConfig::default()
    }
}

/// Checks that every offset in `seen` reads back the same value.
async fn verify(log: &Log<FaultyStorage>, seen: &BTreeMap<u64, Vec<u8>>, when: &str) {
    let end = log.visible_offset().0;
    for (&offset, value) in seen {
        assert!(offset < end, "{when}: offset {offset}, which a reader was given, is gone (the log ends at {end})");
        let batches = log.read(Offset(offset), 1).await.unwrap_or_else(|e| panic!("{when}: read at {offset}: {e}"));
        let r = batches.records().next().unwrap_or_else(|| panic!("{when}: offset {offset} reads nothing")).unwrap();
        assert_eq!(r.offset(), Offset(offset), "{when}: offset {offset} was compacted or skipped");
        assert_eq!(r.value_bytes(), &value[..], "{when}: offset {offset} now holds another record");
    }
}

/// Reads from `at` to the visible end, recording every record in `seen` (a value seen
/// twice must be the same); returns where it stopped.
async fn read_on(log: &Log<FaultyStorage>, mut at: u64, seen: &Seen) -> u64 {
    loop {
        let Ok(batches) = log.read(Offset(at), 8 << 10).await else { return at };
        if batches.is_empty() {
            return at;
        }
        for r in batches.records() {
            let r = r.expect("a served record is whole");
            let mut s = seen.borrow_mut();
            let old = s.insert(r.offset().0, r.value_bytes().to_vec());
            assert!(old.is_none_or(|v| v == r.value_bytes()), "offset {} changed under a reader", r.offset());
        }
        at = batches.next_offset().0;
    }
}

/// Plans this round's fault, counted from what the storage has written so far.
fn plan_fault(rng: &mut Rng, storage: &FaultyStorage) -> &'static str {
    let mut p = storage.plan().borrow_mut();
    let at = p.bytes_written + rng.range(1, 96 << 10);
    match rng.range(0, 4) {
        0 => {
            p.fail_syncs = 1;
            "a failed fsync"
        }
        1 => {
            p.space_bytes = Some(at);
            "a full disk"
        }
        2 => {
            p.tear_at_byte = Some(at);
            p.tear_fill = rng.range(0, 2) as u8 * 0xa5;
            "a torn write"
        }
        _ => "a kill",
    }
}

#[test]
fn no_offset_a_reader_saw_changes_or_vanishes_across_faults_and_recoveries() {
    let seed = common::seed("no_offset_a_reader_saw_changes_or_vanishes_across_faults_and_recoveries");
    let dir = common::temp_dir("no-reuse");
    let cleanup = dir.clone();
    common::run(move || async move {
        let mut rng = Rng::new(seed);
        let seen: Seen = Rc::default();
        let mut tag = 0u64;
        for round in 0..ROUNDS {
            let config = config(&mut rng);
            let storage = FaultyStorage::new();
            let (log, _) = Log::open(storage.clone(), &dir, config.clone()).await.expect("recovers");
            let when = format!("round {round} (seed {seed}), after recovery");
            let snapshot = seen.borrow().clone();
            verify(&log, &snapshot, &when).await;
            let fault = plan_fault(&mut rng, &storage);
            eprintln!("round {round}: {:?}, {fault}", config.fsync);
            // Appenders until each fails or has done its share; a reader beside them.
            let writers: Vec<_> = (0..rng.range(1, 4))
                .map(|_| {
                    let (log, appends, first) = (log.clone(), rng.range(20, 200), tag);
                    tag += 1000;
                    glommio::spawn_local(async move {
                        for k in 0..appends {
                            let vals: Vec<Vec<u8>> = (0..1 + k % 7)
                                .map(|i| format!("{first}-{k}-{i}:{}", "x".repeat(40)).into_bytes())
                                .collect();
                            let recs: Vec<Record<'_>> =
                                vals.iter().map(|v| Record::keyed(b"k", v, Timestamp(k as i64))).collect();
                            if log.append(&recs).await.is_err() {
                                return;
                            }
                        }
                    })
                })
                .collect();
            let reading = Rc::new(std::cell::Cell::new(true));
            let reader = {
                let (log, seen, reading) = (log.clone(), seen.clone(), reading.clone());
                let start = seen.borrow().keys().next_back().map_or(0, |o| o + 1);
                glommio::spawn_local(async move {
                    let mut at = start;
                    while reading.get() {
                        at = read_on(&log, at, &seen).await;
                        glommio::timer::sleep(Duration::from_micros(200)).await;
                    }
                    read_on(&log, at, &seen).await;
                })
            };
            for w in writers {
                w.await;
            }
            reading.set(false);
            reader.await;
            // The process dies here: the log is dropped unclosed, and the writes already
            // handed to the disk land before the next open looks.
            drop(log);
            storage.settled().await;
        }
        let (log, _) = Log::open(FaultyStorage::new(), &dir, LogConfig::default()).await.expect("recovers");
        let snapshot = seen.borrow().clone();
        verify(&log, &snapshot, &format!("at the end (seed {seed})")).await;
        assert!(seen.borrow().len() > 100, "readers saw {} records: the test tested little", seen.borrow().len());
    });
    let _ = std::fs::remove_dir_all(&cleanup);
}
