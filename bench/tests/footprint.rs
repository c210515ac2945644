//! `sluice-bench footprint` with tiny parameters, so the workload cannot rot: the topic is
//! created, reopened, and every partition returns its own record (the run fails
//! otherwise); the report carries its documented fields with sane values. Nothing here
//! asserts a timing or a size target.

use clap::Parser;
use sluice_bench::{
    harness::{WorkDir, write_json},
    workloads::footprint::{self, FootprintArgs},
};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: FootprintArgs,
}

fn args(line: &[&str]) -> FootprintArgs {
    Cli::try_parse_from(std::iter::once("footprint").chain(line.iter().copied())).expect("valid arguments").args
}

#[test]
fn twenty_partitions_round_trip_and_report_their_footprint() {
    let out = WorkDir::fresh("sluice-bench-footprint-test", false).expect("temp dir");
    let report = footprint::run(&args(&["--partitions", "20", "--shards", "2"])).expect("footprint workload");
    let path = out.path().join("r.json");
    write_json(&path, &report).expect("write json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read json")).expect("parse json");
    assert_eq!(json["workload"], "footprint");
    assert_eq!((json["partitions"].as_u64(), json["shards"].as_u64()), (Some(20), Some(2)));
    for field in ["create_seconds", "open_seconds", "roundtrip_seconds", "shutdown_seconds"] {
        let v = json[field].as_f64().unwrap_or_else(|| panic!("{field} missing: {json}"));
        assert!(v > 0.0 && v < 600.0, "{field} = {v}");
    }
    let bytes = |field: &str| json[field].as_u64().unwrap_or_else(|| panic!("{field} missing: {json}"));
    // The topic's partitions take room beyond the empty engine's, and a record more after
    // the round trip never takes less.
    assert!(bytes("empty_disk_bytes") > 0);
    assert!(bytes("disk_bytes") > bytes("empty_disk_bytes"), "{json}");
    assert!(bytes("disk_bytes_per_partition") > 0, "{json}");
    assert_eq!(bytes("disk_bytes_per_partition"), (bytes("disk_bytes") - bytes("empty_disk_bytes")) / 20);
    assert!(bytes("disk_bytes_after_roundtrip") > 0, "{json}");
    assert!(bytes("disk_bytes_after_roundtrip_per_partition") > 0, "{json}");
    // Every partition is at least a directory of its own, and holds a file open.
    assert!(bytes("files") >= 20, "{json}");
    assert!(bytes("open_fds_after_create") >= 20 && bytes("open_fds_after_open") >= 20, "{json}");
    assert_eq!(json["fsync"], "interval:5");
    // Resident memory: more than nothing, less than the machine.
    for field in ["rss_before_open_bytes", "rss_bytes", "rss_peak_bytes"] {
        assert!(bytes(field) > 1 << 20 && bytes(field) < 64 << 30, "{field}: {json}");
    }
    assert!(bytes("rss_peak_bytes") >= bytes("rss_bytes"), "{json}");
    let table = report.table().to_string();
    assert!(table.contains("disk after create") && table.contains("target"), "{table}");
}

#[test]
fn a_data_directory_that_is_not_empty_is_refused() {
    let dir = WorkDir::fresh("sluice-bench-footprint-test", false).expect("temp dir");
    std::fs::write(dir.path().join("something"), b"x").expect("write");
    let d = dir.path().to_str().expect("utf-8");
    let err = footprint::run(&args(&["--partitions", "2", "--dir", d])).expect_err("not empty");
    assert!(err.to_string().contains("not empty"), "{err:#}");
}

#[test]
fn the_fsync_policy_is_the_one_asked_for() {
    let report = footprint::run(&args(&["--partitions", "3", "--fsync", "always"])).expect("footprint workload");
    assert_eq!(serde_json::to_value(&report).expect("serializes")["fsync"], "always");
    assert!(report.table().to_string().contains("fsync always"));
}
