//! A crash in the middle of a roll: the new, empty segment was created, but the old one's
//! last batch was never written (it was unacknowledged: appends are acknowledged once
//! durable) and its index files were not either. Seen in the SIGKILL test as offsets
//! below the log's end that no read could return. The reopened log must end after the
//! last batch on disk, as Kafka truncates to its last valid batch, with no gap.

mod common;

use std::path::{Path, PathBuf};

use sluice_io::record::{BatchError, HeaderError, check_batch};
use sluice_io::{FsyncPolicy, Log, LogConfig, Offset, Record, RecoveryMode, Timestamp, UringStorage};

fn config() -> LogConfig {
    LogConfig {
        fsync: FsyncPolicy::Always,
        segment_bytes_max: 16 << 10,
        index_interval_bytes: 4096,
        write_buffer_bytes: 16 << 10,
        ..LogConfig::default()
    }
}

fn segment_logs(dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list the log")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs
}

/// (position, base offset) of each batch in a segment file.
fn batches(path: &Path) -> Vec<(usize, u64, usize)> {
    let bytes = std::fs::read(path).expect("read segment");
    let (mut pos, mut out) = (0usize, Vec::new());
    while pos < bytes.len() {
        match check_batch(&bytes[pos..]) {
            Ok(h) => {
                out.push((pos, h.base_offset.0, h.stored_len()));
                pos += h.stored_len();
            }
            Err(BatchError::Header(HeaderError::Zero | HeaderError::Short)) => break,
            Err(e) => panic!("{} has a bad batch at {pos}: {e}", path.display()),
        }
    }
    out
}

/// Builds a log of several segments ending with a roll (and, if `after`, one batch in the
/// new segment), then puts it in the state a crash mid-roll leaves.
async fn crashed_mid_roll(dir: PathBuf, after: bool) -> (u64, u64) {
    let (log, _) = Log::open(UringStorage, &dir, config()).await.expect("open");
    let value = vec![7u8; 200];
    let records: Vec<Record<'_>> = (0..5).map(|i| Record::unkeyed(&value, Timestamp(i))).collect();
    while segment_logs(&dir).len() < 3 {
        log.append(&records).await.expect("append");
    }
    log.roll().await.expect("roll");
    if after {
        log.append(&records).await.expect("append after the roll");
    }
    log.close().await.expect("close");
    let logs = segment_logs(&dir);
    let old = &logs[logs.len() - 2];
    let (pos, lost_from, len) = *batches(old).last().expect("the old segment has batches");
    // Its last batch never reached the device, nor did its index files.
    let file = std::fs::OpenOptions::new().write(true).open(old).expect("open the old segment");
    std::os::unix::fs::FileExt::write_all_at(&file, &vec![0u8; len], pos as u64).expect("zero the last batch");
    for ext in ["index", "timeindex"] {
        let _ = std::fs::remove_file(old.with_extension(ext));
    }
    let next_base = logs.last().expect("the new segment").file_stem().and_then(|s| s.to_str()).expect("name");
    (lost_from, next_base.parse().expect("a base offset"))
}

#[test]
fn a_batch_lost_in_a_roll_is_cut_rather_than_left_as_a_gap() {
    // Tail recovery rebuilds the missing index; full recovery scans every segment anyway.
    for mode in [RecoveryMode::Tail, RecoveryMode::Full] {
        cut_after_a_lost_batch(mode);
    }
}

fn cut_after_a_lost_batch(mode: RecoveryMode) {
    let dir = common::temp_dir("roll-crash");
    let (lost_from, next_base) = common::run({
        let dir = dir.clone();
        move || crashed_mid_roll(dir, false)
    });
    assert!(lost_from < next_base);
    let segments = segment_logs(&dir).len();
    common::run(move || async move {
        let (log, report) =
            Log::open(UringStorage, &dir, LogConfig { recovery: mode, ..config() }).await.expect("reopen");
        let cut = report.truncated.unwrap_or_else(|| panic!("{mode:?}: the lost batch is reported as a cut"));
        assert_eq!(cut.log_end, Offset(lost_from), "{}", cut.reason);
        assert_eq!(log.end_offset(), Offset(lost_from), "the log ends after its last batch on disk");
        assert_eq!(segment_logs(&dir).len(), segments - 1, "the empty segment after the cut is gone");
        // Every offset below the end reads, in order.
        let mut at = 0;
        while at < lost_from {
            let read = log.read(Offset(at), 1 << 20).await.expect("read");
            assert!(!read.is_empty(), "offset {at} below the end {lost_from} reads nothing");
            for r in read.records() {
                assert_eq!(r.expect("a record").offset(), Offset(at));
                at += 1;
            }
        }
        // Appends continue from there, with no gap.
        let value = [1u8; 10];
        let info = log.append(&[Record::unkeyed(&value, Timestamp(0))]).await.expect("append");
        assert_eq!(info.base_offset, Offset(lost_from));
        log.close().await.expect("close");
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn records_after_a_gap_are_kept_and_readers_skip_the_gap() {
    let dir = common::temp_dir("roll-crash-kept");
    let (lost_from, next_base) = common::run({
        let dir = dir.clone();
        move || crashed_mid_roll(dir, true)
    });
    common::run(move || async move {
        let (log, report) = Log::open(UringStorage, &dir, config()).await.expect("reopen");
        assert!(report.truncated.is_none(), "{:?}", report.truncated.map(|t| t.reason));
        assert_eq!(log.end_offset(), Offset(next_base + 5));
        let read = log.read(Offset(lost_from), 1 << 20).await.expect("read in the gap");
        let first = read.records().next().expect("the batch after the gap").expect("a record");
        assert_eq!(first.offset(), Offset(next_base));
        log.close().await.expect("close");
        let _ = std::fs::remove_dir_all(&dir);
    });
}
