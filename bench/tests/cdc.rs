//! `sluice-bench cdc` with tiny parameters, so the workload cannot rot: PostgreSQL starts,
//! both readers read the backlog (the run fails if pg_recvlogical writes nothing or the
//! table does not hold every row), and the report carries its fields. Nothing here
//! asserts a rate or a latency target.

use clap::Parser;
use sluice_bench::{
    harness::{WorkDir, write_json},
    workloads::cdc::{self, CdcArgs},
};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: CdcArgs,
}

#[test]
fn postgres_cdc_bench_tiny_run_reports_both_readers() {
    let line = ["cdc", "--changes", "3000", "--txn-rows", "500", "--latency-txns", "30", "--rate", "500"];
    let args = Cli::try_parse_from(line).expect("valid arguments").args;
    let report = cdc::run(&args).expect("cdc workload");
    let out = WorkDir::fresh("sluice-bench-cdc-test", false).expect("temp dir");
    let path = out.path().join("r.json");
    write_json(&path, &report).expect("write json");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    assert_eq!(json["workload"], "cdc");
    assert_eq!((json["changes"].as_u64(), json["latency_txns"].as_u64()), (Some(3000), Some(30)));
    for field in ["recvlogical_changes_per_s", "sluice_changes_per_s", "ratio"] {
        let v = json[field].as_f64().unwrap_or_else(|| panic!("{field} missing: {json}"));
        assert!(v > 0.0 && v.is_finite(), "{field} = {v}");
    }
    for side in ["recvlogical", "recvlogical_server", "sluice", "sluice_server"] {
        let v = json["cpu_us_per_change"][side].as_f64().unwrap_or_else(|| panic!("cpu {side} missing: {json}"));
        assert!(v >= 0.0 && v.is_finite(), "cpu {side} = {v}");
    }
    // sluice's own CPU time covers at least its pipeline's work on 3000 changes.
    assert!(json["rounds"][0]["sluice_cpu_seconds"].as_f64().unwrap() > 0.0, "{json}");
    // Every update's latency was recorded, and none is negative or absurd (an hour).
    assert_eq!(json["latency_us"]["count"].as_u64(), Some(30), "{json}");
    assert!(json["latency_us"]["max"].as_u64().unwrap() < 3_600_000_000, "{json}");
}
