//! `sluice-bench ring` with tiny parameters, so the workload cannot rot: both transfers
//! must deliver every record (the run checks a checksum too) at a positive rate. Nothing
//! asserts on timing.

use clap::Parser;
use sluice_bench::workloads::ring::{self, RingArgs};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: RingArgs,
}

fn args(line: &[&str]) -> RingArgs {
    Cli::try_parse_from(std::iter::once("ring").chain(line.iter().copied())).expect("valid arguments").args
}

#[test]
fn the_ring_workload_moves_every_record_through_both_rings() {
    for (bytes, recycle) in [("16", true), ("100", true), ("100", false)] {
        let mut line =
            vec!["--records", "10000", "--record-bytes", bytes, "--batch", "64", "--capacity", "4", "--rounds", "2"];
        if !recycle {
            line.push("--no-recycle");
        }
        let report = ring::run(&args(&line)).expect("ring workload");
        assert_eq!(report.workload, "ring");
        assert_eq!(report.record_bytes.to_string(), bytes);
        assert_eq!(report.recycle, recycle);
        assert_eq!(
            (report.records, report.received_records, report.baseline_received_records),
            (10_000, 10_000, Some(10_000))
        );
        assert!(report.records_per_sec > 0.0 && report.baseline_records_per_sec > Some(0.0), "{report:?}");
        assert_eq!((report.round_records_per_sec.len(), report.round_baseline_records_per_sec.len()), (2, 2));
        let table = report.table().to_string();
        assert!(table.contains("sluice / baseline"), "{table}");
    }
}

#[test]
fn a_batch_that_does_not_divide_the_records_is_sent_short() {
    let line = ["--records", "1001", "--record-bytes", "8", "--batch", "100", "--rounds", "1"];
    let report = ring::run(&args(&line)).expect("run");
    assert_eq!((report.received_records, report.baseline_received_records), (1001, Some(1001)));
}

#[test]
fn the_default_moves_a_gibibyte_per_transfer_whatever_the_record_size() {
    assert_eq!(args(&["--record-bytes", "16"]).records(), (1 << 30) / 16);
    assert_eq!(args(&["--record-bytes", "100"]).records(), (1 << 30) / 100);
    assert_eq!(args(&["--record-bytes", "100", "--records", "7"]).records(), 7);
}

#[test]
fn unsupported_record_sizes_are_refused_with_the_supported_list() {
    let err = Cli::try_parse_from(["ring", "--record-bytes", "17"]).expect_err("17 is not compiled in");
    assert!(err.to_string().contains("supported record sizes"), "{err}");
}

#[test]
fn the_json_report_has_the_documented_fields() {
    let report = ring::run(&args(&["--records", "1000", "--record-bytes", "16", "--rounds", "1"])).expect("run");
    let json = serde_json::to_value(&report).expect("serialize");
    for field in ["workload", "record_bytes", "records", "records_per_sec", "baseline_records_per_sec"] {
        assert!(json.get(field).is_some(), "missing {field}: {json}");
    }
    assert_eq!(json["workload"], "ring");
}
