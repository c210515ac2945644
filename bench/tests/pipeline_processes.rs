//! `sluice-bench pipeline --processes N` with tiny parameters, run as the binary (its
//! instances are the binary again): the instances' results must add up to the events
//! sent, every window counted right (the run checks each result and fails otherwise), and
//! the report must carry the `--processes` figures: the single-process job beside, the
//! repartition topic's records and bytes, the CPU of each process. The broker is the
//! engine's listener in the parent (`--broker in-process`), except in the at-least-once
//! test (`--broker auto`: `sluice serve` when the workspace's binary sits beside, as
//! `cargo test --workspace` builds it). Options that make no sense with `--processes` are
//! refused.

use std::process::Command;

#[cfg(feature = "kafka-client")]
use serde_json::Value;

fn bench(line: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sluice-bench"))
        .arg("pipeline")
        .args(line)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("sluice-bench runs")
}

fn refused(line: &[&str], says: &str) {
    let out = bench(line);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains(says), "{line:?}: {stderr}");
}

#[cfg(feature = "kafka-client")]
fn report(line: &[&str]) -> Value {
    report_on(line, "in-process")
}

/// The report of a run on the broker `broker` (`--broker`).
#[cfg(feature = "kafka-client")]
fn report_on(line: &[&str], broker: &str) -> Value {
    // A directory per run: the tests run at once.
    let name = line.join("_").replace(['-', ' '], "");
    let dir = std::env::temp_dir().join(format!("sluice-bench-test-processes-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let json = dir.join("report.json");
    let path = json.to_str().expect("utf-8");
    let out = bench(&[line, &["--broker", broker, "--json", path]].concat());
    assert!(out.status.success(), "{line:?}: {}", String::from_utf8_lossy(&out.stderr));
    let report = serde_json::from_slice(&std::fs::read(&json).expect("the JSON report")).expect("JSON");
    let _ = std::fs::remove_dir_all(&dir);
    report
}

#[cfg(feature = "kafka-client")]
#[test]
fn two_processes_exactly_once_count_every_event_with_latency() {
    let r =
        report(&["--processes", "2", "--shards", "1", "--events", "30000", "--rounds", "1", "--latency-seconds", "1"]);
    assert_eq!((r["workload"].as_str(), r["processes"].as_u64()), (Some("pipeline"), Some(2)), "{r}");
    assert_eq!((r["events"].as_u64(), r["results_sum"].as_u64()), (Some(30_000), Some(30_000)), "{r}");
    assert_eq!(r["results"].as_u64(), Some(10_000), "every key has events in the one window: {r}");
    assert_eq!((r["guarantee"].as_str(), r["checkpoint_interval_ms"].as_u64()), (Some("exactly_once"), Some(1000)));
    assert_eq!(r["repartition_partitions"].as_u64(), Some(2));
    assert!(r["broker"].as_str().is_some_and(|b| b.contains("parent process")), "{r}");
    for rate in ["events_per_sec", "single_process_events_per_sec", "ratio_to_single_process"] {
        assert!(r[rate].as_f64().is_some_and(|v| v > 0.0), "{rate}: {r}");
    }
    let topic = &r["repartition"];
    assert_eq!(topic["data_records"].as_u64(), Some(30_000), "every event crossed once: {r}");
    assert!(topic["watermark_records"].as_u64().is_some_and(|w| w >= 2), "a watermark per writer at least: {r}");
    assert!(topic["bytes"].as_u64().is_some_and(|b| b >= 30_000 * 16), "{r}");
    assert!(topic["records_per_sec"].as_f64().is_some_and(|v| v > 0.0), "{r}");
    let cpu = &r["cpu"];
    assert_eq!(cpu["process_cpu_seconds"].as_array().map(Vec::len), Some(2), "{r}");
    // Exactly once, records cross only with a completed checkpoint.
    let checkpoints = cpu["process_checkpoints"].as_array().cloned().unwrap_or_default();
    assert!(checkpoints.len() == 2 && checkpoints.iter().all(|n| n.as_u64() >= Some(1)), "{r}");
    assert!(cpu["broker_cpu_seconds"].as_f64().is_some_and(|s| s > 0.0), "{r}");
    assert!(
        cpu["cpu_by_thread"].as_object().is_some_and(|t| t.keys().any(|k| k.starts_with("sluice-pipeline"))),
        "{r}"
    );
    // The latency phase ran on both sides, at half the measured rate.
    let half = (r["events_per_sec"].as_f64().unwrap_or(0.0) / 2.0) as u64;
    assert_eq!(r["latency_rate"].as_u64(), Some(half.max(1)), "{r}");
    assert!(r["latency_us"]["count"].as_u64().is_some_and(|n| n > 0), "{r}");
    assert!(r["single_process_latency_us"]["count"].as_u64().is_some_and(|n| n > 0), "{r}");
    // A result cannot beat the watermark bound (10 ms) past its window's last event.
    assert!(r["latency_us"]["p50"].as_u64().is_some_and(|p| p >= 10_000), "{r}");
}

#[cfg(feature = "kafka-client")]
#[test]
fn three_processes_at_least_once_add_up_on_two_shards() {
    let line = ["--processes", "3", "--shards", "2", "--events", "12345", "--rounds", "2", "--latency-seconds", "0"];
    // `auto`: `sluice serve` if the workspace's sluice binary sits beside sluice-bench (as
    // `cargo test --workspace` builds it), else the listener in the parent.
    let r = report_on(&[&line[..], &["--at-least-once"]].concat(), "auto");
    let beside = std::path::Path::new(env!("CARGO_BIN_EXE_sluice-bench")).with_file_name("sluice");
    let broker = r["broker"].as_str().unwrap_or_default();
    if beside.is_file() {
        assert_eq!(broker, format!("sluice serve ({})", beside.display()), "{r}");
        assert!(r["cpu"]["broker_cpu_seconds"].as_f64().is_some_and(|s| s > 0.0), "sluice serve's CPU: {r}");
    } else {
        assert!(broker.contains("parent process"), "{r}");
    }
    assert_eq!((r["processes"].as_u64(), r["results_sum"].as_u64()), (Some(3), Some(12_345)), "{r}");
    assert_eq!((r["guarantee"].as_str(), r["checkpoint_interval_ms"].as_u64()), (Some("at_least_once"), None));
    assert_eq!(r["repartition_partitions"].as_u64(), Some(6));
    assert_eq!(r["round_events_per_sec"].as_array().map(Vec::len), Some(2), "{r}");
    assert_eq!(r["round_single_process_events_per_sec"].as_array().map(Vec::len), Some(2), "{r}");
    assert_eq!(r["cpu"]["process_cpu_seconds"].as_array().map(Vec::len), Some(3), "{r}");
    assert!(r["repartition"]["data_records"].as_u64().is_some_and(|n| n >= 12_345), "{r}");
    assert!(r["latency_us"].is_null(), "{r}");
}

#[cfg(feature = "kafka-client")]
#[test]
fn processes_refuse_what_makes_no_sense_there() {
    refused(&["--processes", "0"], "--processes must be at least 1");
    refused(&["--processes", "2", "--compare", "timely"], "does not take --compare");
    refused(&["--processes", "2", "--scaling"], "does not take --scaling");
    refused(&["--processes", "2", "--rate", "1000"], "does not take --rate");
    refused(&["--processes", "2", "--watermark-interval-us", "100"], "does not take --watermark-interval-us");
    refused(&["--processes", "2", "--split", "on-demand"], "does not take --split");
    refused(&["--processes", "2", "--at-least-once", "--checkpoint-interval-ms", "5"], "--checkpoint-interval-ms");
    refused(&["--bootstrap", "127.0.0.1:9092"], "apply to --processes");
}

#[cfg(not(feature = "kafka-client"))]
#[test]
fn processes_need_the_kafka_client_feature() {
    refused(&["--processes", "2"], "kafka-client feature");
    refused(&["--processes", "0"], "--processes must be at least 1");
}
