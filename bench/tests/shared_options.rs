//! The options every workload shares (`--shards`, `--rate`/`--max`, `--duration`,
//! `--warmup`, `--seed`, `--json`, `--hlog`, `--plot`, `--find-max-rate --slo-p99-ms`),
//! exercised on every workload with tiny parameters. Only structure is asserted: the JSON
//! fields, that interval logs parse and charts are written, the search's bookkeeping, and
//! counts that follow from the options. Never a timing.

use std::path::{Path, PathBuf};

use clap::{Args, Parser};
use serde_json::Value;
use sluice_bench::{
    harness::{RateSearch, WorkDir, write_json},
    workloads::{
        checkpoint::{self, CheckpointArgs},
        e2e,
        log::{self, LogArgs},
        nexmark::{self, NexmarkArgs},
        pipeline::{self, PipelineArgs},
        ring::{self, RingArgs},
    },
};

#[derive(Debug, Parser)]
struct Cli<A: Args> {
    #[command(flatten)]
    args: A,
}

fn parse<A: Args>(name: &str, line: &[&str]) -> Result<A, clap::Error> {
    Cli::<A>::try_parse_from(std::iter::once(name).chain(line.iter().copied())).map(|c| c.args)
}

fn args<A: Args>(name: &str, line: &[&str]) -> A {
    parse(name, line).unwrap_or_else(|e| panic!("{name} {line:?}: {e}"))
}

/// A scratch directory and the paths of the three output files in it.
struct Outputs {
    dir: WorkDir,
}

impl Outputs {
    fn new() -> Self {
        Outputs { dir: WorkDir::fresh("sluice-bench-shared", false).expect("temp dir") }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn s(&self, name: &str) -> String {
        self.path(name).to_str().expect("utf-8 path").to_string()
    }

    /// `--json J --plot P --hlog H` under this directory.
    fn flags(&self) -> Vec<String> {
        ["--json", &self.s("r.json"), "--plot", &self.s("r.svg"), "--hlog", &self.s("r.hlog")]
            .map(String::from)
            .to_vec()
    }
}

fn cmd<'a>(fixed: &[&'a str], extra: &'a [String]) -> Vec<&'a str> {
    fixed.iter().copied().chain(extra.iter().map(String::as_str)).collect()
}

/// Writes `report` as `--json` would, reads it back and checks the shared fields (and the
/// search's, for a workload with an open-loop mode).
fn check_json<T: serde::Serialize>(path: &Path, report: &T, workload: &str, seed: u64, warmup: f64) -> Value {
    write_json(path, report).expect("write json");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("read json")).expect("parse json");
    assert_eq!(json["workload"], workload, "{json}");
    assert!(json["shards"].as_u64().is_some_and(|s| s >= 1), "{json}");
    assert_eq!(json["seed"], seed, "{json}");
    assert_eq!(json["warmup"].as_f64(), Some(warmup), "{json}");
    assert!(json.get("duration").is_some(), "{json}");
    // The closed loop of `log` is its own report; `log --rate` has the search's fields.
    if workload != "log" {
        for field in ["slo_p99_ms", "rate_curve", "max_rate_within_slo"] {
            assert!(json.get(field).is_some(), "{field} missing: {json}");
        }
    }
    json
}

/// The chart is an SVG and the interval log has its header and at least one interval.
fn check_latency_files(out: &Outputs) {
    let svg = std::fs::read_to_string(out.path("r.svg")).expect("the --plot chart");
    assert!(svg.starts_with("<svg"), "{svg}");
    let log = std::fs::read_to_string(out.path("r.hlog")).expect("the --hlog log");
    assert!(log.lines().any(|l| l.starts_with("#[StartTime:")), "{log}");
    let intervals: Vec<&str> =
        log.lines().filter(|l| !l.starts_with('#') && !l.starts_with("\"StartTimestamp\"")).collect();
    assert!(!intervals.is_empty(), "{log}");
    for interval in intervals {
        // start,length,max,histogram: four comma-separated fields, the first three numbers.
        let fields: Vec<&str> = interval.split(',').collect();
        assert_eq!(fields.len(), 4, "{interval}");
        assert!(fields[..3].iter().all(|f| f.parse::<f64>().is_ok()), "{interval}");
    }
}

/// A `--find-max-rate` line: from `rate`, steps of `duration` seconds, at most two
/// doublings, within a bound no step misses, then `more` and `out`'s output flags.
fn search_line<'a>(rate: &'a str, duration: &'a str, more: &[&'a str], out: &'a [String]) -> Vec<&'a str> {
    let fixed =
        ["--find-max-rate", "--slo-p99-ms", "10000", "--rate", rate, "--duration", duration, "--ramp-steps", "2"];
    cmd(&[&fixed[..], more].concat(), out)
}

/// What a `--find-max-rate` run must show: its search (bound 10 s), its JSON
/// and the latency files.
fn check_search_run<T: serde::Serialize>(out: &Outputs, report: &T, search: &RateSearch, workload: &str) -> Value {
    check_search(search, 10_000.0);
    let json = check_json(&out.path("r.json"), report, workload, 0, 0.0);
    check_latency_files(out);
    json
}

/// The search ran, tried at least one rate, and its answer is a step within the bound.
fn check_search(search: &RateSearch, slo_ms: f64) {
    assert_eq!(search.slo_p99_ms, Some(slo_ms));
    assert!(!search.rate_curve.is_empty());
    if let Some(best) = search.max_rate_within_slo {
        let step = search.rate_curve.iter().find(|s| s.rate == best && s.within_slo).expect("the best step");
        assert!(step.latency_us.p99 as f64 <= slo_ms * 1000.0, "{step:?}");
    }
    for step in &search.rate_curve {
        assert_eq!(
            step.within_slo,
            step.latency_us.count > 0
                && step.latency_us.p99 as f64 <= slo_ms * 1000.0
                && step.achieved >= 0.9 * step.rate as f64
        );
    }
}

// ---- parsing -------------------------------------------------------------------------------

#[test]
fn every_workload_takes_the_shared_options_and_refuses_rate_with_max() {
    let shared = [
        "--shards",
        "2",
        "--rate",
        "1000",
        "--duration",
        "0.5",
        "--warmup",
        "0.1",
        "--seed",
        "7",
        "--json",
        "j",
        "--hlog",
        "h",
        "--plot",
        "p",
        "--slo-p99-ms",
        "3",
    ];
    let with = |extra: &[&'static str]| extra.iter().copied().chain(shared).collect::<Vec<_>>();
    let log: LogArgs = args("log", &shared);
    let ring: RingArgs = args("ring", &shared);
    let pipeline: PipelineArgs = args("pipeline", &shared);
    let checkpoint: CheckpointArgs = args("checkpoint", &shared);
    let nexmark: NexmarkArgs = args("nexmark", &with(&["--query", "q1"]));
    for run in [&log.run, &ring.run, &pipeline.run, &checkpoint.run, &nexmark.run] {
        assert_eq!(
            (run.shards, run.rate, run.max, run.duration, run.warmup, run.seed),
            (Some(2), Some(1000), false, Some(0.5), 0.1, 7)
        );
        assert_eq!(
            (run.json.as_deref(), run.hlog.as_deref(), run.plot.as_deref()),
            (Some(Path::new("j")), Some(Path::new("h")), Some(Path::new("p")))
        );
        assert_eq!(run.slo_p99_ms, 3.0);
    }
    let conflicts = ["--rate", "10", "--max"];
    assert!(parse::<LogArgs>("log", &conflicts).is_err());
    assert!(parse::<RingArgs>("ring", &conflicts).is_err());
    assert!(parse::<PipelineArgs>("pipeline", &conflicts).is_err());
    assert!(parse::<CheckpointArgs>("checkpoint", &conflicts).is_err());
    assert!(parse::<NexmarkArgs>("nexmark", &["--query", "q0", "--rate", "10", "--max"]).is_err());
    // A fixed count and a duration bound the same run two ways.
    assert!(parse::<LogArgs>("log", &["--records", "5", "--duration", "1"]).is_err());
    assert!(parse::<PipelineArgs>("pipeline", &["--events", "5", "--duration", "1"]).is_err());
    assert!(parse::<NexmarkArgs>("nexmark", &["--query", "q0", "--events", "5", "--duration", "1"]).is_err());
    assert!(parse::<RingArgs>("ring", &["--records", "5", "--duration", "1"]).is_err());
    // Bad values.
    for bad in [
        &["--duration", "0"][..],
        &["--duration", "-1"],
        &["--warmup", "-1"],
        &["--shards", "0"],
        &["--slo-p99-ms", "0"],
    ] {
        assert!(parse::<PipelineArgs>("pipeline", bad).is_err(), "{bad:?}");
    }
    // The old names still work: checkpoint --seconds is --duration.
    let old: CheckpointArgs = args("checkpoint", &["--seconds", "3"]);
    assert_eq!(old.seconds(), 3.0);
    assert!(parse::<CheckpointArgs>("checkpoint", &["--seconds", "3", "--duration", "3"]).is_err());
    // Defaults differ by workload and are documented in --help.
    assert_eq!(
        (args::<LogArgs>("log", &[]).shards(), args::<NexmarkArgs>("nexmark", &["--query", "q0"]).shards()),
        (1, 1)
    );
}

// ---- log -----------------------------------------------------------------------------------

#[test]
fn log_closed_loop_honours_duration_warmup_seed_and_outputs() {
    let out = Outputs::new();
    let extra = out.flags();
    let fixed = [
        "--max",
        "--duration",
        "0.2",
        "--warmup",
        "0.1",
        "--seed",
        "7",
        "--shards",
        "2",
        "--record-bytes",
        "64",
        "--batch-records",
        "20",
        "--fsync",
        "never",
    ];
    let mut line = cmd(&fixed, &extra);
    let data = out.s("data");
    line.extend(["--dir", &data]);
    let a: LogArgs = args("log", &line);
    let report = log::run(&a).expect("log --duration");
    assert!(report.records > 0, "the appenders ran until the duration ended");
    // Unbounded by count, every append call is a full batch of 20, and each is timed.
    assert_eq!(report.append_latency_us.count * 20, report.records);
    assert!(!Path::new(&data).join("warmup").exists(), "the warm-up's data is removed");
    let json = check_json(&out.path("r.json"), &report, "log", 7, 0.1);
    assert_eq!(json["duration"].as_f64(), Some(0.2));
    check_latency_files(&out);
}

#[test]
fn log_open_loop_discards_the_warmup_and_finds_a_max_rate() {
    let out = Outputs::new();
    let extra = out.flags();
    let line =
        cmd(&["--rate", "2000", "--duration", "0.2", "--warmup", "0.1", "--seed", "3", "--fsync", "never"], &extra);
    let a: LogArgs = args("log", &line);
    assert!(a.is_e2e());
    let report = e2e::run(&a).expect("log --rate");
    // 400 measured records after the warm-up's 200, each timed once.
    assert_eq!((report.records, report.e2e_latency_us.count), (400, 400));
    check_json(&out.path("r.json"), &report, "log-e2e", 3, 0.1);
    check_latency_files(&out);

    let out = Outputs::new();
    let extra = out.flags();
    let line = search_line("1000", "0.2", &["--fsync", "never"], &extra);
    let report = e2e::run(&args::<LogArgs>("log", &line)).expect("log --find-max-rate");
    let json = check_search_run(&out, &report, &report.search, "log-e2e");
    assert!(json["rate_curve"].as_array().is_some_and(|c| !c.is_empty()));
}

// ---- ring ----------------------------------------------------------------------------------

#[test]
fn ring_closed_loop_honours_duration_and_warmup_and_refuses_latency_files() {
    let out = Outputs::new();
    let json = out.s("r.json");
    let a: RingArgs = args(
        "ring",
        &[
            "--max",
            "--duration",
            "0.05",
            "--warmup",
            "0.02",
            "--seed",
            "5",
            "--record-bytes",
            "16",
            "--rounds",
            "1",
            "--json",
            &json,
        ],
    );
    let report = ring::run(&a).expect("ring --duration");
    assert!(report.records > 0);
    assert_eq!(report.received_records, report.records, "every record sent arrived");
    assert!(report.baseline_received_records.is_some_and(|n| n > 0));
    let json = check_json(&out.path("r.json"), &report, "ring", 5, 0.02);
    assert_eq!(json["shards"], 2);

    let plot = out.s("r.svg");
    let err =
        ring::run(&args("ring", &["--records", "100", "--plot", &plot])).expect_err("no latency in the closed loop");
    assert!(format!("{err:#}").contains("--rate"), "{err:#}");
    let err = ring::run(&args("ring", &["--records", "100", "--shards", "3"])).expect_err("one pair");
    assert!(format!("{err:#}").contains("--shards must be 2"), "{err:#}");
}

#[test]
fn ring_open_loop_measures_batch_latency_and_finds_a_max_rate() {
    let out = Outputs::new();
    let extra = out.flags();
    let line = cmd(
        &["--rate", "100000", "--duration", "0.1", "--warmup", "0.05", "--batch", "64", "--record-bytes", "16"],
        &extra,
    );
    let report = ring::run(&args("ring", &line)).expect("ring --rate");
    // 10 000 measured records after the warm-up's 5000, in batches of 64.
    assert_eq!(report.received_records, 15_000);
    let latency = report.batch_latency_us.expect("batch latency");
    let batches = 15_000u64.div_ceil(64);
    assert!(latency.count > 0 && latency.count < batches, "{latency:?}: the warm-up's batches are not measured");
    assert_eq!(report.baseline_records_per_sec, None, "the open loop has no baseline");
    check_json(&out.path("r.json"), &report, "ring", 0, 0.05);
    check_latency_files(&out);

    let out = Outputs::new();
    let extra = out.flags();
    let line = search_line("50000", "0.05", &["--record-bytes", "16"], &extra);
    let report = ring::run(&args("ring", &line)).expect("ring --find-max-rate");
    check_search_run(&out, &report, &report.search, "ring");
}

// ---- pipeline ------------------------------------------------------------------------------

#[test]
fn pipeline_honours_every_shared_option() {
    // Closed loop bounded by time, a discarded warm-up round, and the latency phase's files.
    let out = Outputs::new();
    let extra = out.flags();
    let line = cmd(
        &[
            "--max",
            "--duration",
            "0.1",
            "--warmup",
            "0.05",
            "--seed",
            "5",
            "--rounds",
            "1",
            "--shards",
            "2",
            "--latency-seconds",
            "0.2",
        ],
        &extra,
    );
    let report = pipeline::run(&args("pipeline", &line)).expect("pipeline --duration");
    assert!(report.events > 0);
    assert_eq!(report.results_sum, report.events, "every event sent was counted once");
    let json = check_json(&out.path("r.json"), &report, "pipeline", 5, 0.05);
    assert_eq!(json["duration"].as_f64(), Some(0.1));
    check_latency_files(&out);

    // Open loop: the warm-up's events are sent and counted but not measured.
    let out = Outputs::new();
    let extra = out.flags();
    let line = cmd(&["--rate", "20000", "--duration", "0.3", "--warmup", "0.2", "--shards", "1"], &extra);
    let report = pipeline::run(&args("pipeline", &line)).expect("pipeline --rate");
    assert_eq!((report.events, report.results_sum), (10_000, 10_000));
    assert!(report.latency_us.is_some_and(|l| l.count > 0));
    check_json(&out.path("r.json"), &report, "pipeline", 0, 0.2);
    check_latency_files(&out);

    let out = Outputs::new();
    let extra = out.flags();
    let line = search_line("5000", "0.2", &["--shards", "1"], &extra);
    let report = pipeline::run(&args("pipeline", &line)).expect("pipeline --find-max-rate");
    check_search_run(&out, &report, &report.search, "pipeline");
}

// ---- checkpoint ----------------------------------------------------------------------------

#[test]
fn checkpoint_honours_every_shared_option() {
    let out = Outputs::new();
    let extra = out.flags();
    let fixed = [
        "--rate",
        "20000",
        "--duration",
        "0.5",
        "--warmup",
        "0.2",
        "--seed",
        "9",
        "--keys",
        "500",
        "--interval-ms",
        "100",
        "--shards",
        "2",
    ];
    let report = checkpoint::run(&args("checkpoint", &cmd(&fixed, &extra))).expect("checkpoint");
    // 0.7 s of events at 20 000/s, the warm-up's included.
    assert_eq!(report.events, Some(14_000));
    assert!(report.checkpoints > 0);
    let json = check_json(&out.path("r.json"), &report, "checkpoint", 9, 0.2);
    assert_eq!(json["duration"].as_f64(), Some(0.5));
    check_latency_files(&out);

    let out = Outputs::new();
    let extra = out.flags();
    let line = search_line("5000", "0.3", &["--keys", "100", "--interval-ms", "100", "--shards", "1"], &extra);
    let report = checkpoint::run(&args("checkpoint", &line)).expect("checkpoint --find-max-rate");
    check_search_run(&out, &report, &report.search, "checkpoint");

    let err = checkpoint::run(&args("checkpoint", &["--max"])).expect_err("an open loop only");
    assert!(format!("{err:#}").contains("--max"), "{err:#}");
    let err = checkpoint::run(&args("checkpoint", &["--state-keys", "10", "--rate", "5"]))
        .expect_err("no rate in the state mode");
    assert!(format!("{err:#}").contains("state mode"), "{err:#}");
}

// ---- nexmark -------------------------------------------------------------------------------

#[test]
fn nexmark_honours_every_shared_option() {
    let out = Outputs::new();
    let extra = out.flags();
    let fixed = [
        "--query",
        "q1",
        "--max",
        "--duration",
        "0.1",
        "--warmup",
        "0.05",
        "--seed",
        "11",
        "--event-rate",
        "100000",
        "--latency-seconds",
        "0.2",
        "--shards",
        "2",
    ];
    let report = nexmark::run(&args("nexmark", &cmd(&fixed, &extra))).expect("nexmark --duration");
    assert!(report.events > 0 && report.results > 0);
    let json = check_json(&out.path("r.json"), &report, "nexmark", 11, 0.05);
    assert_eq!(json["query"], "q1");
    check_latency_files(&out);

    let out = Outputs::new();
    let extra = out.flags();
    let fixed = ["--query", "q0", "--rate", "4000", "--duration", "0.3", "--warmup", "0.2", "--seed", "11"];
    let report = nexmark::run(&args("nexmark", &cmd(&fixed, &extra))).expect("nexmark --rate");
    assert_eq!(report.events, 2000, "0.5 s at 4000/s, the warm-up's included");
    let latency = report.latency_us.expect("a latency summary");
    assert!(latency.count > 0 && latency.count < report.results, "the warm-up's results are not measured");
    check_json(&out.path("r.json"), &report, "nexmark", 11, 0.2);
    check_latency_files(&out);

    let out = Outputs::new();
    let extra = out.flags();
    let line = search_line("2000", "0.2", &["--query", "q0"], &extra);
    let report = nexmark::run(&args("nexmark", &line)).expect("nexmark --find-max-rate");
    check_search_run(&out, &report, &report.search, "nexmark");
}
