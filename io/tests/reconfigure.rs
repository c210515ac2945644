//! `Log::reconfigure`: an open log's settings change at once (segment size at the next
//! append, the batch limit at the next append, retention at the next pass, the fsync
//! policy's flusher and visibility), and a refused change changes nothing.

mod common;

use std::time::Duration;

use sluice_io::{
    BatchMeta, CleanTrigger, CleanupPolicy, FsyncPolicy, Log, LogConfig, LogError, Offset, Record, Timestamp,
    UringStorage,
};

async fn append(log: &Log, n: usize, bytes: usize) -> Offset {
    let value = vec![b'v'; bytes];
    let mut last = Offset(0);
    for _ in 0..n {
        last = log.append(&[Record::unkeyed(&value, Timestamp(1_000))]).await.unwrap().last_offset;
    }
    last
}

#[test]
fn segment_size_batch_limit_and_retention_change_at_once() {
    let dir = common::temp_dir("reconfigure-sizes");
    common::run(move || async move {
        let (log, _) = Log::open(UringStorage, &dir, LogConfig::default()).await.unwrap();
        append(&log, 20, 1000).await;
        assert_eq!(log.segment_count(), 1, "256 MiB segments: no roll yet");

        // Smaller segments: the next appends roll.
        let small = LogConfig { segment_bytes_max: 8192, ..log.config() };
        log.reconfigure(small.clone()).unwrap();
        assert_eq!(log.config().segment_bytes_max, 8192);
        append(&log, 20, 1000).await;
        let segments = log.segment_count();
        assert!(segments >= 3, "rolled by the new size: {segments} segments");

        // A smaller batch limit refuses the next large append.
        log.reconfigure(LogConfig { max_batch_bytes: 512, ..small.clone() }).unwrap();
        let big = vec![b'x'; 2000];
        let refused = log.append(&[Record::unkeyed(&big, Timestamp(1_000))]).await;
        assert!(matches!(refused, Err(LogError::BatchTooLarge { limit: 512, .. })), "{refused:?}");
        log.reconfigure(LogConfig { max_batch_bytes: 8 << 20, ..small.clone() }).unwrap();
        log.append(&[Record::unkeyed(&big, Timestamp(1_000))]).await.unwrap();

        // Retention by size, set now, removes closed segments at the next pass.
        let before = log.start_offset();
        log.reconfigure(LogConfig { retention_bytes: Some(4096), ..small }).unwrap();
        let report = log.clean(Timestamp::now(), CleanTrigger::Scheduled).await.unwrap();
        assert!(report.retention.segments_deleted > 0, "{report:?}");
        assert!(log.start_offset() > before);
        log.close().await.unwrap();
    });
}

#[test]
fn fixed_settings_and_bad_values_are_refused_and_change_nothing() {
    let dir = common::temp_dir("reconfigure-refused");
    common::run(move || async move {
        let (log, _) = Log::open(UringStorage, &dir, LogConfig::default()).await.unwrap();
        let before = log.config();
        for bad in [
            LogConfig { write_buffer_bytes: 64 << 10, ..before.clone() },
            LogConfig { index_interval_bytes: 1, ..before.clone() },
            LogConfig { preallocate: false, ..before.clone() },
            LogConfig { segment_bytes_max: 10, ..before.clone() },
            LogConfig { min_cleanable_dirty_ratio: 2.0, ..before.clone() },
        ] {
            let result = log.reconfigure(bad.clone());
            assert!(matches!(result, Err(LogError::InvalidConfig(_))), "{bad:?}: {result:?}");
            assert_eq!(format!("{:?}", log.config()), format!("{before:?}"), "nothing changed");
        }
        log.close().await.unwrap();
        assert!(matches!(log.reconfigure(before), Err(LogError::Closed { .. })), "a closed log");
    });
}

#[test]
fn the_fsync_policy_changes_the_flusher_and_never_moves_the_visible_end_back() {
    let dir = common::temp_dir("reconfigure-fsync");
    common::run(move || async move {
        let never = LogConfig { fsync: FsyncPolicy::Never, ..LogConfig::default() };
        let (log, _) = Log::open(UringStorage, &dir, never.clone()).await.unwrap();
        let last = append(&log, 5, 100).await;
        glommio::timer::sleep(Duration::from_millis(100)).await;
        assert!(log.durable_offset() <= last, "never: nothing syncs by itself");

        // To interval: a flusher starts and makes the appends durable.
        let interval = LogConfig { fsync: FsyncPolicy::Interval(Duration::from_millis(10)), ..never.clone() };
        log.reconfigure(interval.clone()).unwrap();
        let last = append(&log, 5, 100).await;
        wait_until(|| log.durable_offset() > last).await;

        // Back to never: the flusher ends (appends stay unsynced well past the interval).
        log.reconfigure(never.clone()).unwrap();
        let last = append(&log, 5, 100).await;
        glommio::timer::sleep(Duration::from_millis(200)).await;
        assert!(log.durable_offset() <= last, "the interval flusher stopped");

        // To always: what readers saw stays visible; a new append is visible only once
        // fsynced.
        let seen = log.make_visible().await.unwrap();
        assert_eq!(seen, last.plus(1));
        log.reconfigure(LogConfig { fsync: FsyncPolicy::Always, ..never.clone() }).unwrap();
        assert_eq!(log.visible_offset(), seen, "the high watermark did not move back");
        let value = b"after";
        let info = log.append_unsynced(&[Record::unkeyed(value, Timestamp(2_000))], &BatchMeta::default()).await;
        let info = info.unwrap();
        assert_eq!(log.visible_offset(), seen, "not visible before its fsync");
        log.wait_durable(info).await.unwrap();
        assert_eq!(log.visible_offset(), info.last_offset.plus(1), "visible once fsynced");
        assert!(log.durable_offset() > info.last_offset);

        // And away from always, to interval again: appends are durable within the interval.
        log.reconfigure(interval).unwrap();
        let last = append(&log, 3, 100).await;
        wait_until(|| log.durable_offset() > last).await;
        log.close().await.unwrap();
    });
}

/// Waits (up to 5 s) for `cond`.
async fn wait_until(cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "condition not met within 5 s");
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn a_cleanup_policy_change_reaches_the_next_pass() {
    let dir = common::temp_dir("reconfigure-cleanup");
    common::run(move || async move {
        let config = LogConfig { segment_bytes_max: 8192, ..LogConfig::default() };
        let (log, _) = Log::open(UringStorage, &dir, config.clone()).await.unwrap();
        let value = vec![b'v'; 500];
        for i in 0..60u32 {
            let key = format!("k{}", i % 3).into_bytes();
            log.append(&[Record::keyed(&key, &value, Timestamp(1_000))]).await.unwrap();
        }
        let report = log.clean(Timestamp::now(), CleanTrigger::Now).await.unwrap();
        assert!(report.compaction.is_none(), "delete policy: no compaction");
        log.reconfigure(LogConfig { cleanup: CleanupPolicy::Compact, ..config }).unwrap();
        let report = log.clean(Timestamp::now(), CleanTrigger::Now).await.unwrap();
        let compaction = report.compaction.expect("compacted once the policy says so");
        assert!(compaction.records_superseded > 0, "{compaction:?}");
        log.close().await.unwrap();
    });
}
