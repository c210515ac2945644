//! Integration tests of the harness plumbing: the baseline writer, the shard runner, the
//! `--fsync` parser, latency summaries, the table, JSON output and the `log` subcommand's
//! plumbing. Sizes are tiny and nothing asserts on timing.

use std::{fs, rc::Rc, time::Duration};

use clap::Parser;
use sluice_bench::{
    baseline::{BASELINE_FILE_NAME, baseline_write},
    harness::{LatencyRecorder, ShardConfig, Table, WorkDir, run_on_shards, write_json},
    workloads::log::{self, LogArgs},
};
use sluice_io::FsyncPolicy;

const MIB: u64 = 1 << 20;

fn temp_dir() -> WorkDir {
    WorkDir::fresh("sluice-bench-test", false).expect("create temp dir")
}

// ---- baseline ----------------------------------------------------------------------------

/// Runs the baseline and checks what every mode must satisfy; returns the fdatasync count.
fn check_baseline(total: u64, chunk: usize, fsync: FsyncPolicy, appends: u64) -> u64 {
    let dir = temp_dir();
    let result = baseline_write(dir.path(), total, chunk, fsync, appends).expect("baseline");
    let expected = total.next_multiple_of(4096);
    assert_eq!(result.bytes, expected);
    assert!(result.bytes_per_sec > 0.0, "{result:?}");
    let data = fs::read(dir.path().join(BASELINE_FILE_NAME)).expect("read baseline file");
    assert_eq!(data.len() as u64, expected, "file size");
    // The buffers never contain zero bytes, so a zero means a block was never written.
    assert!(!data.contains(&0), "a block of the file was not written");
    result.fsyncs
}

#[test]
fn baseline_never_syncs_once_at_the_end() {
    assert_eq!(check_baseline(MIB, 256 << 10, FsyncPolicy::Never, 8), 1);
}

#[test]
fn baseline_interval_syncs_at_least_at_the_end() {
    assert!(check_baseline(MIB, 256 << 10, FsyncPolicy::Interval(Duration::from_millis(1)), 8) >= 1);
}

#[test]
fn baseline_always_syncs_once_per_append() {
    // 1 MiB / 8 appends = 128 KiB per append, written as 64 KiB chunks.
    assert_eq!(check_baseline(MIB, 64 << 10, FsyncPolicy::Always, 8), 8);
    // Appends bigger than a chunk and smaller than one: 1 MiB / 3 rounds up to 344 KiB.
    assert_eq!(check_baseline(MIB, 128 << 10, FsyncPolicy::Always, 3), 3);
    assert_eq!(check_baseline(MIB, 1 << 20, FsyncPolicy::Always, 3), 3);
}

#[test]
fn baseline_rounds_odd_totals_up_to_a_page() {
    // 100_000 bytes -> 102_400; appends of ceil(100_000 / 3) rounded to 36_864 bytes.
    assert_eq!(check_baseline(100_000, 64 << 10, FsyncPolicy::Always, 3), 3);
    assert_eq!(check_baseline(1, 4096, FsyncPolicy::Never, 1), 1);
}

#[test]
fn baseline_rejects_bad_parameters() {
    let dir = temp_dir();
    let p = dir.path();
    assert!(baseline_write(p, MIB, 1000, FsyncPolicy::Never, 1).is_err());
    assert!(baseline_write(p, MIB, 0, FsyncPolicy::Never, 1).is_err());
    assert!(baseline_write(p, 0, 4096, FsyncPolicy::Never, 1).is_err());
    assert!(baseline_write(p, MIB, 4096, FsyncPolicy::Always, 0).is_err());
}

// ---- shards ------------------------------------------------------------------------------

#[test]
fn run_on_one_shard() {
    let out = run_on_shards(1, |shard| async move { Ok(shard) }).expect("run");
    assert_eq!(out, vec![0]);
}

#[test]
fn run_on_two_shards_in_shard_order() {
    // The future holds an `Rc` across an await point, so it is not `Send`.
    let out = run_on_shards(2, |shard| async move {
        let local = Rc::new(shard);
        futures_yield().await;
        Ok(*local)
    })
    .expect("run");
    assert_eq!(out, vec![0, 1]);
}

/// Yields to the glommio executor once.
async fn futures_yield() {
    glommio::yield_if_needed().await;
    glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
}

#[test]
fn shard_errors_and_panics_are_reported_with_the_shard() {
    let err = run_on_shards(2, |shard| async move {
        anyhow::ensure!(shard != 1, "boom");
        Ok(shard)
    })
    .expect_err("shard 1 fails");
    assert!(format!("{err:#}").contains("shard 1"), "{err:#}");
    assert!(format!("{err:#}").contains("boom"), "{err:#}");

    let err = run_on_shards(1, |_| async move {
        if true {
            panic!("kaboom");
        }
        Ok(())
    })
    .expect_err("shard 0 panics");
    assert!(format!("{err:#}").contains("kaboom"), "{err:#}");

    assert!(run_on_shards(0, |_| async move { Ok(()) }).is_err());
}

#[test]
fn shard_config_fits_memlock() {
    const LIMIT: u64 = 8 << 20;
    for shards in [1, 2, 3, 4, 8, 23] {
        let c = ShardConfig::for_memlock_limit(shards, LIMIT);
        assert!(c.memlock_bytes(shards) <= LIMIT * 3 / 4, "{shards}: {c:?}");
        assert!(c.memlock_bytes(shards) >= 3 * shards as u64 * c.io_memory as u64);
        assert_eq!(c.io_memory % 4096, 0);
        assert_eq!(c.ring_depth, 128);
    }
    let io_memory = |shards, limit| ShardConfig::for_memlock_limit(shards, limit).io_memory;
    assert_eq!(io_memory(1, LIMIT), 2024 << 10);
    assert_eq!(io_memory(2, LIMIT), 1000 << 10);
    assert_eq!(io_memory(4, LIMIT), 488 << 10);
    assert_eq!(io_memory(24, LIMIT), 64 << 10);
    assert_eq!(io_memory(1000, LIMIT), 64 << 10);
    assert_eq!(io_memory(1, u64::MAX), 10 << 20);
    // This process's real limit (getrlimit) gives something in glommio's range.
    let c = ShardConfig::for_shards(2);
    assert!((64 << 10..=10 << 20).contains(&c.io_memory), "{c:?}");
}

// ---- --fsync -----------------------------------------------------------------------------

#[test]
fn fsync_flag_is_the_log_policy_and_round_trips_to_json() {
    for text in ["always", "never", "interval:5", "interval:1000"] {
        let a = log_args(&["--fsync", text]).unwrap();
        assert_eq!(a.fsync.to_string(), text);
        let json = serde_json::to_value(DisplayOnly(a.fsync)).unwrap();
        assert_eq!(json, serde_json::Value::String(text.to_owned()));
    }
    for bad in ["", "sometimes", "interval:0", "interval:+5", "interval:5ms"] {
        assert!(log_args(&["--fsync", bad]).is_err(), "{bad:?}");
    }
}

#[derive(serde::Serialize)]
struct DisplayOnly(#[serde(serialize_with = "sluice_bench::harness::serialize_display")] FsyncPolicy);

// ---- latency, table, JSON ----------------------------------------------------------------

#[test]
fn latency_summary_in_microseconds() {
    let mut rec = LatencyRecorder::new();
    assert!(rec.is_empty());
    assert_eq!(rec.summary(), Default::default());
    for us in 1..=1000 {
        rec.record(std::time::Duration::from_micros(us));
    }
    let s = rec.summary();
    assert_eq!(s.count, 1000);
    assert_eq!(s.p50, 500);
    assert_eq!(s.p99, 990);
    assert_eq!(s.p999, 999);
    assert_eq!(s.max, 1000);

    // Auto-resizing: far beyond the first value recorded, and sub-microsecond as 0.
    let mut other = LatencyRecorder::default();
    other.record(std::time::Duration::from_secs(3600));
    other.record(std::time::Duration::from_nanos(10));
    rec.merge(&other);
    assert_eq!(rec.len(), 1002);
    let max = rec.summary().max;
    assert!(max.abs_diff(3_600_000_000) <= 3_600_000, "{max}");

    let json = serde_json::to_value(rec.summary()).unwrap();
    let mut keys: Vec<_> = json.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["count", "max", "p50", "p99", "p999"]);
}

#[test]
fn table_aligns_columns() {
    let mut t = Table::titled("title");
    t.row("a", "1.5", "MB/s");
    t.row("longer name", 12345, "us");
    t.row("no unit", 7, "");
    assert_eq!(t.to_string(), "title\n  a              1.5 MB/s\n  longer name  12345 us\n  no unit          7\n");
    assert_eq!(Table::new().to_string(), "");
}

#[test]
fn write_json_writes_pretty_json() {
    let dir = temp_dir();
    let path = dir.path().join("out.json");
    write_json(&path, &serde_json::json!({"a": 1, "b": [1, 2]})).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.ends_with("}\n"), "{text}");
    let back: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(back["b"][1], 2);
    assert!(write_json(dir.path().join("missing/x.json"), &1).is_err());
}

#[test]
fn fresh_work_dirs_are_removed_unless_kept() {
    let dir = WorkDir::fresh("sluice-bench-test", false).unwrap();
    let path = dir.path().to_owned();
    assert!(path.starts_with("/tmp") && path.is_dir() && dir.is_temporary());
    fs::write(path.join("f"), b"x").unwrap();
    drop(dir);
    assert!(!path.exists());

    let kept = WorkDir::fresh("sluice-bench-test", true).unwrap();
    let path = kept.path().to_owned();
    drop(kept);
    assert!(path.is_dir());
    let at = WorkDir::at(path.join("sub/dir")).unwrap();
    assert!(!at.is_temporary());
    drop(at);
    assert!(path.join("sub/dir").is_dir());
    fs::remove_dir_all(path).unwrap();
}

// ---- the log subcommand ------------------------------------------------------------------

#[derive(Debug, Parser)]
struct LogCli {
    #[command(flatten)]
    args: LogArgs,
}

fn log_args(argv: &[&str]) -> Result<LogArgs, clap::Error> {
    LogCli::try_parse_from(std::iter::once("log").chain(argv.iter().copied())).map(|c| c.args)
}

#[test]
fn log_args_defaults_and_validation() {
    let a = log_args(&[]).unwrap();
    assert_eq!(
        (a.shards(), a.records, a.record_bytes, a.batch_records, a.fsync),
        (1, 2_000_000, 100, 1000, FsyncPolicy::Interval(Duration::from_millis(5)))
    );
    assert_eq!((a.dirs.dir, a.run.json, a.dirs.keep), (None, None, false));

    let a = log_args(&["--shards", "2", "--fsync", "always", "--keep", "--dir", "/x"]).unwrap();
    assert_eq!((a.shards(), a.fsync, a.dirs.keep), (2, FsyncPolicy::Always, true));
    assert_eq!(a.dirs.dir.as_deref(), Some(std::path::Path::new("/x")));

    for bad in [
        &["--fsync", "interval:abc"][..],
        &["--fsync", "sometimes"],
        &["--shards", "0"],
        &["--records", "0"],
        &["--record-bytes", "-1"],
    ] {
        assert!(log_args(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn log_run_reports_the_baseline_and_cleans_up() {
    let dir = temp_dir();
    let json = dir.path().join("report.json");
    let data = dir.path().join("data");
    let args = log_args(&[
        "--records",
        "10000",
        "--batch-records",
        "100",
        "--fsync",
        "always",
        "--dir",
        data.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ])
    .unwrap();
    let report = log::run(&args).unwrap();
    assert_eq!(report.workload, "log");
    assert!(report.baseline_write_bytes_per_sec > 0.0);
    assert!(report.append_records_per_sec > 0.0 && report.read_records_per_sec > 0.0);
    assert!(report.baseline_read_bytes_per_sec > 0.0);
    // Every record is stored with its framing: more bytes on disk than payload.
    assert!(report.stored_bytes > 10_000 * 100, "{}", report.stored_bytes);
    // One latency sample per append call.
    assert_eq!(report.append_latency_us.count, 100);
    assert!(!data.join("baseline").join(BASELINE_FILE_NAME).exists());
    assert!(report.table().to_string().contains("baseline write"));

    write_json(&json, &report).unwrap();
    let back: serde_json::Value = serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(back["workload"], "log");
    assert_eq!(back["fsync"], "always");
    assert_eq!(back["records"], 10000);
    for key in [
        "shards",
        "record_bytes",
        "append_bytes_per_sec",
        "append_records_per_sec",
        "read_records_per_sec",
        "baseline_write_bytes_per_sec",
        "baseline_read_bytes_per_sec",
        "stored_bytes",
    ] {
        assert!(back.get(key).is_some(), "{key}");
    }
    assert!(back["append_latency_us"]["p999"].is_u64());
}

#[test]
fn log_run_on_two_shards_splits_the_records() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let args = log_args(&[
        "--shards",
        "2",
        "--records",
        "5001",
        "--batch-records",
        "50",
        "--fsync",
        "interval:2",
        "--segment-bytes",
        "65536",
        "--dir",
        data.to_str().unwrap(),
    ])
    .unwrap();
    let report = log::run(&args).unwrap();
    assert_eq!(report.shards, 2);
    // 2501 + 2500 records in 50-record calls: 51 + 50 append calls.
    assert_eq!(report.append_latency_us.count, 101);
    assert!(report.read_records_per_sec > 0.0);
}

#[test]
fn log_run_takes_the_executors_io_memory() {
    // Less registered memory than a write buffer: writes fall back to unregistered
    // buffers, and every record is still written and read back.
    let dir = temp_dir();
    let data = dir.path().join("data");
    let args = log_args(&["--records", "3000", "--io-memory", "65536", "--dir", data.to_str().unwrap()]).unwrap();
    let report = log::run(&args).unwrap();
    assert_eq!(report.io_memory, 65536);
    assert_eq!(report.records, 3000);
    assert!(report.table().to_string().contains("64 KiB of I/O memory"));
    assert!(log_args(&["--io-memory", "100"]).is_err(), "below a page");
}

#[test]
fn log_end_to_end_mode_runs_and_reports_latency() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let args = log_args(&[
        "--shards",
        "2",
        "--rate",
        "2000",
        "--records",
        "200",
        "--fsync",
        "interval:5",
        "--dir",
        data.to_str().unwrap(),
        "--plot",
        dir.path().join("e2e.svg").to_str().unwrap(),
        "--hlog",
        dir.path().join("e2e.hlog").to_str().unwrap(),
    ])
    .unwrap();
    let report = sluice_bench::workloads::e2e::run(&args).unwrap();
    assert!(std::fs::read_to_string(dir.path().join("e2e.svg")).unwrap().starts_with("<svg"));
    assert!(std::fs::read_to_string(dir.path().join("e2e.hlog")).unwrap().contains("#[StartTime:"));
    assert!(!report.e2e_latency_curve.points.is_empty());
    assert_eq!((report.workload, report.records, report.shards), ("log-e2e", 200, 2));
    assert_eq!(report.e2e_latency_us.count, 200, "every record was consumed and timed");
    assert!(report.achieved_rate > 0.0);
    assert_eq!(report.send_interval_us, 100, "the default send interval");
    let machine = report.machine_wake_latency_us.expect("the probe ran");
    assert!(machine.count > 0, "the machine's wake-ups sampled beside the run");
    assert!(machine.p50 <= machine.p99 && machine.p99 <= machine.max, "{machine:?}");
    let json = serde_json::to_value(&report).unwrap();
    for key in ["p50", "p99", "p999", "max"] {
        assert!(json["e2e_latency_us"][key].is_u64(), "{key}");
        assert!(json["machine_wake_latency_us"][key].is_u64(), "{key}");
    }
    assert!(report.table().to_string().contains("machine: 1 ms sleep late by p99"));
}

#[test]
fn log_end_to_end_mode_sends_every_record_whatever_the_send_interval() {
    // Records due faster than the producer wakes go out together; none is lost or timed
    // twice, with or without the send interval.
    for interval in ["0", "100", "2000"] {
        let dir = temp_dir();
        let data = dir.path().join("data");
        let args = log_args(&[
            "--shards",
            "1",
            "--rate",
            "100000",
            "--records",
            "3000",
            "--send-interval-us",
            interval,
            "--fsync",
            "never",
            "--no-wake-probe",
            "--dir",
            data.to_str().unwrap(),
        ])
        .unwrap();
        let report = sluice_bench::workloads::e2e::run(&args).unwrap();
        assert_eq!(report.e2e_latency_us.count, 3000, "send interval {interval} us");
        assert_eq!(report.send_interval_us, interval.parse::<u64>().unwrap());
        assert_eq!(report.machine_wake_latency_us, None, "no probe asked for");
    }
}

#[test]
fn log_end_to_end_mode_runs_its_clients_on_the_shards_or_on_threads() {
    for (shards, clients) in [("1", "shards"), ("2", "shards"), ("2", "threads")] {
        let dir = temp_dir();
        let data = dir.path().join("data");
        let args = log_args(&[
            "--shards",
            shards,
            "--rate",
            "50000",
            "--records",
            "2000",
            "--clients",
            clients,
            "--dir",
            data.to_str().unwrap(),
        ])
        .unwrap();
        let report = sluice_bench::workloads::e2e::run(&args).unwrap();
        assert_eq!(report.e2e_latency_us.count, 2000, "{shards} shards, clients on {clients}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["clients"], clients);
        assert!(report.table().to_string().contains("clients on"));
    }
}
