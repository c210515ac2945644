//! `sluice-bench cleaning` with tiny parameters, so the workload cannot rot: both phases
//! land every record (the run checks the partition's end), the phase with the cleaner
//! compacts at least once (the run fails otherwise), and the report carries its documented
//! fields. Nothing here asserts a timing.

use clap::Parser;
use sluice_bench::{
    harness::{WorkDir, write_json},
    workloads::cleaning::{self, CleaningArgs},
};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: CleaningArgs,
}

fn args(line: &[&str]) -> CleaningArgs {
    Cli::try_parse_from(std::iter::once("cleaning").chain(line.iter().copied())).expect("valid arguments").args
}

#[test]
fn one_round_measures_both_phases_and_compacts() {
    // 5 000 records of ~100 B in 64 KiB segments, over 2 s: several rolls, and time for
    // the cleaner (checked every 100 ms) to compact them while the phase runs.
    let line = ["--records", "5000", "--rounds", "1", "--rate", "2500", "--segment-bytes", "65536", "--keys", "50"];
    let report = cleaning::run(&args(&line)).expect("cleaning workload");
    let out = WorkDir::fresh("sluice-bench-cleaning-test", false).expect("temp dir");
    let path = out.path().join("r.json");
    write_json(&path, &report).expect("write json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read json")).expect("parse json");
    assert_eq!(json["workload"], "cleaning");
    assert_eq!(
        (json["records"].as_u64(), json["rounds"].as_u64(), json["rate"].as_u64()),
        (Some(5000), Some(1), Some(2500))
    );
    for side in ["without_cleaner_latency_us", "with_cleaner_latency_us"] {
        let l = &json[side];
        assert_eq!(l["count"].as_u64(), Some(5000), "{side}: {json}");
        let p = |q: &str| l[q].as_u64().unwrap_or_else(|| panic!("{side}.{q} missing: {json}"));
        assert!(p("p50") <= p("p99") && p("p99") <= p("p999") && p("p999") <= p("max"), "{side}: {json}");
    }
    let ratio = json["p99_ratio"].as_f64().expect("p99_ratio");
    assert!(ratio > 0.0 && ratio.is_finite(), "{json}");
    assert_eq!(json["round_p99_ratio"].as_array().map(Vec::len), Some(1));
    assert_eq!(json["median_round_p99_ratio"], json["round_p99_ratio"][0], "one round is its own median");
    assert!(json["compactions"].as_u64().is_some_and(|c| c >= 1), "{json}");
    assert!(json["bytes_reclaimed"].as_u64().is_some_and(|b| b > 0), "{json}");
    assert!(json["records_removed"].as_u64().is_some_and(|r| r > 0), "{json}");
    for field in ["with_cleaner_records_per_sec", "without_cleaner_records_per_sec"] {
        assert!(json[field].as_f64().is_some_and(|r| r > 0.0), "{field}: {json}");
    }
    let phases = json["phases"].as_array().expect("phases");
    assert_eq!(phases.len(), 2);
    assert_eq!((phases[0]["cleaner"].as_bool(), phases[1]["cleaner"].as_bool()), (Some(false), Some(true)));
    // Nothing to compact without the cleaner, and a probe beside each phase.
    assert_eq!(phases[0]["compactions"].as_u64(), Some(0), "{json}");
    assert!(phases.iter().all(|p| p["machine_wake_latency_us"]["count"].as_u64().is_some_and(|c| c > 0)), "{json}");
    for curve in ["with_cleaner_latency_curve", "without_cleaner_latency_curve"] {
        assert!(json[curve]["points"].as_array().is_some_and(|p| !p.is_empty()), "{curve}: {json}");
    }
    let table = report.table().to_string();
    assert!(table.contains("p99 with / without") && table.contains("target <= 1.5"), "{table}");
}

#[test]
fn closed_loop_options_are_refused() {
    let err = cleaning::run(&args(&["--max", "--records", "10"])).expect_err("open loop only");
    assert!(err.to_string().contains("--max"), "{err:#}");
    let err = cleaning::run(&args(&["--find-max-rate", "--records", "10"])).expect_err("one rate");
    assert!(err.to_string().contains("--find-max-rate"), "{err:#}");
    assert!(Cli::try_parse_from(["cleaning", "--records", "10", "--duration", "1"]).is_err());
}
