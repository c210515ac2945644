//! `sluice-bench checkpoint` with tiny parameters, so the workload cannot rot: both latency
//! runs count every window right (each run checks every result and fails otherwise), the
//! checkpointing run completes checkpoints, the state mode restores exactly what it
//! checkpointed, and the report carries its documented fields. Nothing here asserts a
//! timing.

use clap::Parser;
use sluice_bench::workloads::checkpoint::{self, CheckpointArgs};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: CheckpointArgs,
}

fn args(line: &[&str]) -> CheckpointArgs {
    Cli::try_parse_from(std::iter::once("checkpoint").chain(line.iter().copied())).expect("valid arguments").args
}

#[test]
fn both_latency_runs_report_and_the_checkpointing_one_checkpoints() {
    // Two rounds of 20 000 events/s for 1.2 s over 500 keys, a checkpoint every 100 ms.
    let line = [
        "--rate",
        "20000",
        "--seconds",
        "1.2",
        "--keys",
        "500",
        "--shards",
        "2",
        "--interval-ms",
        "100",
        "--rounds",
        "2",
    ];
    let report = checkpoint::run(&args(&line)).expect("checkpoint workload");
    assert!(report.checkpoints > 0, "{report:?}");
    assert_eq!(report.checkpoint_list.len(), report.checkpoints);
    assert_eq!(report.checkpoint_duration_ms.count, report.checkpoints);
    // Each round checkpoints into a fresh directory, its ids counting from 1.
    let list = &report.checkpoint_list;
    assert!(list.windows(2).all(|w| (w[0].round, w[0].id) < (w[1].round, w[1].id)), "{list:?}");
    assert_eq!((list[0].round, list[list.len() - 1].round), (0, 1), "{list:?}");
    // Windows of up to 500 keys per shard set: no checkpoint can hold more entries than
    // two open windows' keys.
    assert!(report.keys_per_checkpoint.max <= 2 * 500, "{report:?}");
    assert!(report.bytes_per_checkpoint.max > 0, "{report:?}");
    let (with, without) = (report.latency_us.expect("latency"), report.baseline_latency_us.expect("baseline"));
    // One latency per window result: 1.2 s of events over 500 keys are 2 windows' results,
    // in each of 2 rounds; one arrival latency per event.
    assert_eq!((with.count, without.count), (2000, 2000));
    let (arrivals, baseline_arrivals) =
        (report.arrival_latency_us.unwrap(), report.baseline_arrival_latency_us.unwrap());
    assert_eq!((arrivals.count, baseline_arrivals.count), (48_000, 48_000));
    assert_eq!((report.round_p999_ratio.len(), report.round_arrival_p999_ratio.len()), (2, 2));
    assert!(with.p50 <= with.p99 && with.p99 <= with.p999 && with.p999 <= with.max, "{with:?}");
    assert!(report.p999_ratio.is_some_and(|r| r > 0.0), "{report:?}");
    assert_eq!(report.events, Some(24_000));

    let json = serde_json::to_value(&report).expect("serialize");
    for field in [
        "workload",
        "mode",
        "shards",
        "keys",
        "rate",
        "latency_us",
        "baseline_latency_us",
        "checkpoint_duration_ms",
        "alignment_ms",
        "bytes_per_checkpoint",
        "keys_per_checkpoint",
        "arrival_latency_us",
        "baseline_arrival_latency_us",
        "rounds",
    ] {
        assert!(!json[field].is_null(), "missing {field}: {json}");
    }
    for latency in ["latency_us", "baseline_latency_us"] {
        for p in ["p50", "p99", "p999", "max"] {
            assert!(json[latency][p].is_u64(), "{latency}.{p}: {json}");
        }
    }
    assert_eq!((json["workload"].as_str(), json["mode"].as_str()), (Some("checkpoint"), Some("aligned")));
    assert_eq!(
        (json["shards"].as_u64(), json["keys"].as_u64(), json["rate"].as_u64()),
        (Some(2), Some(500), Some(20_000))
    );
    assert!(json["state"].is_null());
    let table = report.table().to_string();
    assert!(table.contains("p99.9 with / without") && table.contains("checkpoint duration"), "{table}");
}

#[test]
fn the_state_mode_checkpoints_every_key_and_restores_them() {
    for shards in ["1", "2"] {
        let line = ["--state-keys", "20000", "--changed-percent", "5", "--shards", shards, "--interval-ms", "20"];
        let report = checkpoint::run(&args(&line)).expect("state mode");
        let state = report.state.as_ref().expect("state figures");
        // The run itself fails unless the restored counts are exactly the input's.
        assert_eq!((state.keys, state.changed_keys), (20_000, 1000));
        assert_eq!((state.restored_results, state.restored_sum), (20_000, 21_000));
        assert_eq!(state.full_checkpoint.keys, 20_000);
        assert!(state.incremental);
        // Incremental snapshots: the checkpoint after the change writes the changed keys.
        assert_eq!(state.changed_checkpoint.keys, 1000);
        assert!(state.full_checkpoint.bytes > 0 && state.changed_checkpoint.bytes < state.full_checkpoint.bytes);
        assert!(state.restored_from >= state.changed_checkpoint.id);
        // The savepoint is whole: every key, whatever the incremental chain.
        assert_eq!(state.savepoint_checkpoint.keys, 20_000);
        assert!(state.savepoint_ms >= state.savepoint_export_ms && state.savepoint_ratio > 0.0);
        assert_eq!(state.restored_from, state.savepoint_checkpoint.id, "the latest checkpoint is the savepoint's");
        assert!(report.checkpoints >= 2 && report.latency_us.is_none());
        let json = serde_json::to_value(&report).expect("serialize");
        assert!(json["state"]["restore_ms"].is_f64(), "{json}");
        let table = report.table().to_string();
        assert!(table.contains("restore from checkpoint") && table.contains("savepoint (20000 keys)"), "{table}");
    }
}

#[test]
fn the_unaligned_mode_runs_and_the_report_names_it() {
    let err = Cli::try_parse_from(["checkpoint", "--mode", "sideways"]).expect_err("no such mode");
    assert!(err.to_string().contains("expected `aligned` or `unaligned`"), "{err}");
    let a = args(&[]);
    assert_eq!((a.rate(), a.seconds(), a.keys, a.interval_ms, a.state_keys), (200_000, 10.0, 10_000, 1000, None));
    assert_eq!(serde_json::to_value(a.mode).unwrap(), "aligned");
    let line = ["--mode", "unaligned", "--rate", "20000", "--seconds", "0.6", "--keys", "500", "--shards", "2"];
    let report = checkpoint::run(&args(&[&line[..], &["--interval-ms", "50"]].concat())).expect("unaligned run");
    assert!(report.checkpoints > 0, "{report:?}");
    let json = serde_json::to_value(&report).expect("serialize");
    assert_eq!(json["mode"].as_str(), Some("unaligned"), "{json}");
    assert!(json["inflight_records_per_checkpoint"]["max"].is_u64(), "{json}");
    assert!(report.table().to_string().contains("unaligned checkpoints every 50 ms"));
}

#[test]
fn the_latency_mode_plots_both_runs_and_writes_an_interval_log() {
    let dir = std::env::temp_dir().join(format!("sluice-ckbench-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (plot, hlog) = (dir.join("c.svg"), dir.join("c.hlog"));
    let line = ["--rate", "20000", "--seconds", "1", "--keys", "500", "--interval-ms", "100"];
    let line: Vec<&str> =
        line.into_iter().chain(["--plot", plot.to_str().unwrap(), "--hlog", hlog.to_str().unwrap()]).collect();
    let report = checkpoint::run(&args(&line)).expect("latency mode");
    assert!(report.latency_curve.is_some() && report.baseline_latency_curve.is_some());
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.contains("checkpoints every second") && svg.contains("no checkpoints"));
    assert!(std::fs::read_to_string(&hlog).unwrap().contains("#[StartTime:"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_join_job_checkpoints_its_buffered_records_and_reports_every_pair() {
    // 20 000 events/s for 1.2 s over 500 keys: 40 events per key per window, 20 a side,
    // so 400 pairs per key per full window. The run fails unless every pair is right and
    // they add up to the job's.
    let line = ["--job", "join", "--rate", "20000", "--seconds", "1.2", "--keys", "500", "--shards", "2"];
    let report = checkpoint::run(&args(&[&line[..], &["--interval-ms", "100"]].concat())).expect("join job");
    assert!(report.checkpoints > 0, "{report:?}");
    // The join's state is its buffered records, one entry per key and open window (at
    // most two are open); a delta adds a tombstone per key of the window that fired since
    // the last checkpoint (at most one in 100 ms).
    assert!(report.keys_per_checkpoint.max > 0 && report.keys_per_checkpoint.max <= 3 * 500, "{report:?}");
    let (with, without) = (report.latency_us.expect("latency"), report.baseline_latency_us.expect("baseline"));
    // Window 0 holds 20 000 events (40 a key), window 1 the last 4 000 (8 a key): 500 keys
    // times 20 * 20 and 4 * 4 pairs.
    assert_eq!((with.count, without.count), (500 * (400 + 16), 500 * (400 + 16)));
    let arrivals = report.arrival_latency_us.expect("arrivals");
    assert_eq!(arrivals.count, 24_000, "one arrival per event");
    assert!(report.machine_wake_latency_us.is_some_and(|w| w.count > 0), "{report:?}");
    let json = serde_json::to_value(&report).expect("serialize");
    assert_eq!((json["job"].as_str(), json["workload"].as_str()), (Some("join"), Some("checkpoint")));
    for field in ["p999_ratio", "arrival_p999_ratio", "machine_wake_latency_us", "checkpoint_duration_ms"] {
        assert!(!json[field].is_null(), "missing {field}: {json}");
    }
    let table = report.table().to_string();
    assert!(table.contains("window join of two keyed streams") && table.contains("1 ms sleep late by"), "{table}");
    let refused = checkpoint::run(&args(&["--job", "join", "--state-keys", "100"])).expect_err("join in state mode");
    assert!(refused.to_string().contains("takes no --job join"), "{refused}");
}
