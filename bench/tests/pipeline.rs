//! `sluice-bench pipeline` with tiny parameters, so the workload cannot rot: both sides
//! must produce every window result with the right count (each run checks them all and
//! fails otherwise), on one shard and on two. The latency mode is held to what its
//! definition implies, not to timing: a window's result waits for the watermark, which
//! trails by the out-of-orderness bound, and an open-loop source cannot beat its schedule.

use clap::Parser;
use sluice_bench::workloads::{
    pipeline::{self, Baseline, PipelineArgs},
    pipeline_job::KEYS,
};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: PipelineArgs,
}

fn args(line: &[&str]) -> PipelineArgs {
    Cli::try_parse_from(std::iter::once("pipeline").chain(line.iter().copied())).expect("valid arguments").args
}

#[test]
fn both_sides_count_every_window_on_one_and_two_shards() {
    // A full window (100 events per key) and a partial one (5 per key).
    // The events split by residue (the default) and on demand, on both sides.
    for (shards, split) in [("1", None), ("2", None), ("2", Some("on-demand"))] {
        let line = [
            "--events",
            "1050000",
            "--shards",
            shards,
            "--rounds",
            "2",
            "--compare",
            "timely",
            "--latency-seconds",
            "0",
        ];
        let split_flag: Vec<&str> = split.map(|s| vec!["--split", s]).unwrap_or_default();
        let report = pipeline::run(&args(&[&line[..], &split_flag].concat())).expect("pipeline workload");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["split"], split.unwrap_or("by-residue"), "{json}");
        // How long the first shard to run dry waited for the last: every round at 2 shards.
        let spreads = &report.round_source_end_spread_ms;
        assert_eq!(spreads.len(), if shards == "2" { 2 } else { 0 }, "{spreads:?}");
        assert!(spreads.iter().all(|ms| ms.is_finite() && *ms >= 0.0), "{spreads:?}");
        assert_eq!(report.workload, "pipeline");
        assert_eq!(report.shards.to_string(), shards);
        assert_eq!((report.events, report.results, report.results_sum), (1_050_000, 2 * KEYS, 1_050_000));
        assert_eq!(report.compare, [Baseline::Timely]);
        assert_eq!((report.round_events_per_sec.len(), report.round_timely_events_per_sec.len()), (2, 2));
        let baseline = report.timely_events_per_sec.expect("a baseline figure");
        assert!(report.events_per_sec > 0.0 && baseline > 0.0, "{report:?}");
        assert_eq!(report.ratio_to_timely, Some(report.events_per_sec / baseline));
        assert_eq!((report.bare_events_per_sec, report.scaling.scaling_efficiency), (None, None));
        assert_eq!(report.latency_us, None);
        let table = report.table().to_string();
        assert!(table.contains("sluice / timely") && table.contains("ok"), "{table}");
    }
}

#[test]
fn fewer_events_than_keys_or_shards_still_add_up() {
    for (events, shards, bound) in [("1", "2", "0"), ("2500", "2", "0"), ("777", "1", "3")] {
        let line = [
            "--events",
            events,
            "--shards",
            shards,
            "--out-of-orderness-ms",
            bound,
            "--rounds",
            "1",
            "--latency-seconds",
            "0",
        ];
        let report = pipeline::run(&args(&[&line[..], &["--compare", "timely,bare"]].concat())).expect("run");
        let events: u64 = events.parse().unwrap();
        assert_eq!((report.results, report.results_sum), (events, events), "{report:?}");
    }
}

#[test]
fn unpinned_shards_count_the_same() {
    let line = ["--events", "30000", "--shards", "2", "--rounds", "1", "--latency-seconds", "0", "--no-pin"];
    let report = pipeline::run(&args(&line)).expect("run");
    assert!(!report.pinned);
    assert_eq!((report.results_sum, serde_json::to_value(&report).unwrap()["pinned"].clone()), (30000, false.into()));
}

#[test]
fn the_latency_mode_measures_from_the_schedule_and_waits_for_the_watermark() {
    // 25 000 events/s for 2.2 s: two full windows fired by the watermark, and a partial one
    // fired when the source ends.
    let line = ["--events", "55000", "--rate", "25000", "--shards", "2", "--out-of-orderness-ms", "10"];
    let report = pipeline::run(&args(&line)).expect("latency run");
    assert_eq!((report.rate, report.results, report.results_sum), (Some(25_000), 2 * KEYS + 5000, 55_000));
    let latency = report.latency_us.expect("latencies in the latency mode");
    assert_eq!(latency.count, report.results, "one latency per result");
    // Four fifths of the results come from windows that cannot fire before an event 10 ms
    // past their end was sent: at least 10 ms after their last event's schedule.
    assert!(latency.p50 >= 10_000, "{latency:?}");
    assert!(latency.max >= latency.p99 && latency.p99 >= latency.p50, "{latency:?}");
    // An open-loop source never sends ahead of its schedule: 55 000 events take 2.2 s.
    assert!(report.events_per_sec > 0.0 && report.events_per_sec <= 25_000.0 * 1.01, "{report:?}");
    let table = report.table().to_string();
    assert!(table.contains("result latency p99"), "{table}");
}

#[test]
fn a_paused_source_holds_windows_back_unless_idle_and_then_its_late_records_drop() {
    // 20 000 events/s for 3 s on 2 shards; shard 0 sends nothing from 1.5 s to 2.3 s.
    let paused =
        ["--events", "60000", "--rate", "20000", "--shards", "2", "--out-of-orderness-ms", "0", "--pause-ms", "800"];
    // Without an idle timeout the paused split holds the watermark back: nothing is late,
    // and the window ending at 2 s cannot fire before the pause ends, 0.3 s after it.
    let held = pipeline::run(&args(&paused)).expect("paused run");
    assert_eq!((held.late_events, held.results_sum, held.pause_ms), (0, 60_000, 800));
    let latency = held.latency_us.expect("latencies");
    assert!(latency.max >= 300_000, "{latency:?}");
    // With a 100 ms idle timeout the split turns idle, the watermark passes 2 s without it,
    // and its records from 1.5 s to 2 s (5 000 at most) come late and are dropped.
    let idle = pipeline::run(&args(&[&paused[..], &["--idle-timeout-ms", "100"]].concat())).expect("idle run");
    assert!(idle.late_events > 0 && idle.late_events <= 5000, "{} late", idle.late_events);
    assert_eq!(idle.late_events + idle.results_sum, 60_000);
    assert!(idle.table().to_string().contains("late, dropped"));
    // Both only make sense in the open loop.
    let err = pipeline::run(&args(&["--events", "10", "--pause-ms", "10"])).expect_err("a pause without --rate");
    assert!(err.to_string().contains("open loop"), "{err}");
}

#[test]
fn the_baseline_is_a_throughput_comparison_only() {
    let err = pipeline::run(&args(&["--events", "10", "--rate", "1000", "--compare", "timely"]))
        .expect_err("--compare with --rate");
    assert!(err.to_string().contains("without --rate"), "{err}");
    let err = pipeline::run(&args(&["--events", "10", "--rate", "1000", "--scaling", "--shards", "2"]))
        .expect_err("--scaling with --rate");
    assert!(err.to_string().contains("without --rate"), "{err}");
    // The split is the throughput rounds': the open loop splits by residue, and says so.
    for open_loop in [&["--events", "10", "--rate", "1000"][..], &["--find-max-rate", "--duration", "0.1"]] {
        let line = [&["--split", "on-demand"][..], open_loop].concat();
        let err = pipeline::run(&args(&line)).expect_err("--split in the open loop");
        assert!(err.to_string().contains("the open loop") && err.to_string().contains("by residue"), "{err}");
    }
    let err = pipeline::run(&args(&["--events", "10", "--latency-seconds", "0", "--scaling", "--shards", "1"]))
        .expect_err("--scaling to one shard");
    assert!(err.to_string().contains("--shards 2 or more"), "{err}");
}

#[test]
fn the_bare_loop_and_the_scaling_rounds_run_beside_sluice() {
    // Both flag spellings: a list, and the flag repeated (a repeat counts once).
    let repeated = ["--compare", "bare", "--compare", "timely", "--compare", "bare", "--latency-seconds", "0"];
    let report = pipeline::run(&args(&[&repeated[..], &["--events", "5000", "--rounds", "1"]].concat())).expect("run");
    assert_eq!(report.compare, [Baseline::Bare, Baseline::Timely]);
    {
        let line = ["--events", "1050000", "--shards", "2", "--rounds", "2", "--latency-seconds", "0", "--scaling"];
        let report = pipeline::run(&args(&[&line[..], &["--compare", "timely,bare"]].concat())).expect("run");
        assert_eq!(report.compare.len(), 2, "{:?}", report.compare);
        assert_eq!((report.results, report.results_sum), (2 * KEYS, 1_050_000));
        let rounds = |rates: &[f64]| rates.len() == 2 && rates.iter().all(|r| *r > 0.0);
        assert!(rounds(&report.round_bare_events_per_sec) && rounds(&report.round_timely_events_per_sec));
        let scaling = &report.scaling;
        assert!(rounds(&scaling.round_single_shard_events_per_sec), "{scaling:?}");
        let (bare, one) = (report.bare_events_per_sec.unwrap(), scaling.single_shard_events_per_sec.unwrap());
        assert_eq!(report.ratio_to_bare, Some(report.events_per_sec / (2.0 * bare)));
        assert_eq!(report.single_shard_ratio_to_bare, Some(one / bare));
        assert_eq!(scaling.scaling_efficiency, Some(report.events_per_sec / (2.0 * one)));
        assert_eq!((scaling.scaling_shards, scaling.round_scaling_efficiency.len()), (Some(2), 2));
        // Two copies of the bare loop ran at once, one on each shard's CPU.
        let by_cpu = &report.bare_events_per_sec_by_cpu;
        assert!(by_cpu.len() == 2 && by_cpu.iter().all(|r| *r > 0.0), "{by_cpu:?}");
        assert_eq!(report.bare_slowest_cpu_ratio, Some(by_cpu[0].min(by_cpu[1]) / bare));
        assert_eq!(report.bare_mean_cpu_ratio, Some((by_cpu[0] + by_cpu[1]) / 2.0 / bare));
        let json = serde_json::to_value(&report).unwrap();
        for field in [
            "bare_events_per_sec",
            "scaling_efficiency",
            "round_scaling_efficiency",
            "timely_events_per_sec",
            "bare_events_per_sec_by_cpu",
            "bare_slowest_cpu_ratio",
            "bare_mean_cpu_ratio",
        ] {
            assert!(json[field].is_number() || json[field].is_array(), "{field}: {json}");
        }
        let table = report.table().to_string();
        assert!(table.contains("bare loop") && table.contains("scaling efficiency, 1 -> 2 shards"), "{table}");
        assert!(table.contains("rounds (sluice/timely/bare/1 shard)"), "{table}");
        assert!(table.contains("bare loop on every shard's CPU at once"), "{table}");
        assert!(table.contains("(the scaling the machine allows --split by-residue)"), "{table}");
        assert!(table.contains("rounds: first shard dry to last (2 shards)"), "{table}");
    }
}

#[test]
fn two_phase_counts_every_window_in_both_modes() {
    // Throughput rounds at one and two shards, beside timely's two-phase job, then the open
    // loop, whose results wait for partials sent as each shard's watermark passes the window.
    for shards in ["1", "2"] {
        let line =
            ["--events", "1050000", "--shards", shards, "--rounds", "1", "--latency-seconds", "0", "--two-phase"];
        let report = pipeline::run(&args(&[&line[..], &["--compare", "timely"]].concat())).expect("two-phase pipeline");
        assert!(report.two_phase, "{report:?}");
        // Timely's two-phase job checked its own results against the job, as sluice's did.
        assert!(report.timely_events_per_sec.is_some_and(|r| r > 0.0), "{report:?}");
        assert_eq!((report.results, report.results_sum), (2 * KEYS, 1_050_000), "{shards} shards");
    }
    // The exchanges holding watermarks back (`PipelineConfig::watermark_interval`) count
    // the same, in both modes.
    let line = ["--events", "1050000", "--shards", "2", "--rounds", "1", "--latency-seconds", "0", "--two-phase"];
    let report = pipeline::run(&args(&[&line[..], &["--watermark-interval-us", "200"]].concat())).expect("held");
    assert_eq!((report.results, report.results_sum), (2 * KEYS, 1_050_000));
    let line = ["--events", "55000", "--rate", "25000", "--shards", "2", "--two-phase", "--no-wake-probe"];
    for interval in ["0", "200"] {
        let report = pipeline::run(&args(&[&line[..], &["--watermark-interval-us", interval]].concat())).expect("held");
        assert_eq!((report.results, report.results_sum), (2 * KEYS + 5000, 55_000), "interval {interval} us");
    }
    let report = pipeline::run(&args(&line)).expect("two-phase latency run");
    assert_eq!((report.results, report.results_sum), (2 * KEYS + 5000, 55_000));
    let latency = report.latency_us.expect("latencies in the latency mode");
    assert_eq!(latency.count, report.results, "one latency per result");
    assert!(latency.p50 >= 10_000, "results wait for the watermark: {latency:?}");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["two_phase"], serde_json::Value::Bool(true), "{json}");
}

#[test]
fn the_defaults_are_the_specified_job() {
    let a = args(&[]);
    let cores = core_affinity::get_core_ids().map_or(1, |ids| ids.len().max(1));
    assert_eq!((a.events(), a.shards(), a.run.rate, a.compare, a.scaling), (1_000_000_000, cores, None, vec![], false));
    // With --processes every event crosses a broker twice: fewer by default.
    assert_eq!(args(&["--processes", "2"]).events(), 5_000_000);
    assert_eq!(args(&["--processes", "2", "--events", "7"]).events(), 7);
    assert!(a.latency_seconds > 0.0, "the default run also reports latency");
    assert!(Cli::try_parse_from(["pipeline", "--compare", "flink"]).is_err());
    assert!(Cli::try_parse_from(["pipeline", "--shards", "0"]).is_err());
}

#[test]
fn the_json_report_has_the_documented_fields() {
    let line = ["--events", "5000", "--rounds", "1", "--compare", "timely", "--latency-seconds", "0"];
    let report = pipeline::run(&args(&line)).expect("run");
    let json = serde_json::to_value(&report).expect("serialize");
    for field in ["workload", "shards", "events", "events_per_sec", "latency_us", "timely_events_per_sec"] {
        assert!(json.get(field).is_some(), "missing {field}: {json}");
    }
    assert_eq!(json["workload"], "pipeline");
    assert_eq!(json["compare"], serde_json::json!(["timely"]));
    assert_eq!(
        (&json["split"], &json["watermark_interval_us"]),
        (&serde_json::json!("by-residue"), &serde_json::Value::Null)
    );
    assert!(json["latency_us"].is_null(), "{json}");
}

#[test]
fn a_throughput_run_ends_with_a_latency_phase_at_half_its_rate() {
    let line = ["--events", "20000", "--rounds", "1", "--shards", "2", "--latency-seconds", "0.2"];
    let report = pipeline::run(&args(&line)).expect("run");
    let rate = report.latency_rate.expect("the latency phase's rate");
    assert_eq!(rate, ((report.events_per_sec / 2.0) as u64).max(1));
    let latency = report.latency_us.expect("latency percentiles");
    assert!(latency.p50 <= latency.p99 && latency.p99 <= latency.max, "{latency:?}");
    assert!(report.table().to_string().contains("result latency p99"));
    // The wake-up probe ran beside the latency phase, and only there.
    let machine = report.machine_wake_latency_us.expect("the probe beside the latency phase");
    assert!(machine.count > 0 && machine.p50 <= machine.max, "{machine:?}");
    assert!(report.table().to_string().contains("machine: 1 ms sleep late by p99"));
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["machine_wake_latency_us"]["p999"].is_u64());
    let without: Vec<&str> = line.into_iter().chain(["--no-wake-probe"]).collect();
    assert_eq!(pipeline::run(&args(&without)).expect("run").machine_wake_latency_us, None);
}

#[test]
fn find_max_rate_reports_every_step_and_writes_its_files() {
    // An SLO no run can meet (1 us) fails the first step and every lower one the search
    // then tries; a generous one (10 s) lets doublings pass. Timings are not asserted,
    // only the search's bookkeeping.
    let dir = std::env::temp_dir().join(format!("sluice-find-max-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tight = pipeline::run(&args(&[
        "--find-max-rate",
        "--slo-p99-ms",
        "0.001",
        "--rate",
        "20000",
        "--latency-seconds",
        "0.2",
        "--shards",
        "1",
    ]))
    .expect("find-max-rate");
    let tried: Vec<u64> = tight.search.rate_curve.iter().map(|s| s.rate).collect();
    assert_eq!(tried, [20_000, 10_000, 5_000, 2_500], "halving below the first failure");
    assert!(tight.search.rate_curve.iter().all(|s| !s.within_slo));
    assert_eq!(tight.search.max_rate_within_slo, None);
    let plot = dir.join("steps.svg");
    let json = dir.join("steps.json");
    let mut line = vec!["--find-max-rate", "--slo-p99-ms", "10000", "--rate", "20000", "--latency-seconds", "0.2"];
    line.extend(["--shards", "2", "--plot", plot.to_str().unwrap()]);
    let loose = pipeline::run(&args(&line)).expect("find-max-rate");
    assert!(loose.search.rate_curve.len() >= 2, "{:?}", loose.search.rate_curve);
    let rates: Vec<u64> = loose.search.rate_curve.iter().map(|s| s.rate).collect();
    assert_eq!(&rates[..2], &[20_000, 40_000], "the ramp doubles");
    if let Some(best) = loose.search.max_rate_within_slo {
        assert!(loose.search.rate_curve.iter().any(|s| s.rate == best && s.within_slo));
    }
    sluice_bench::harness::write_json(&json, &loose).unwrap();
    let text = std::fs::read_to_string(&json).unwrap();
    assert!(text.contains("\"rate_curve\"") && text.contains("\"max_rate_within_slo\""), "{text}");
    assert!(std::fs::read_to_string(&plot).unwrap().contains("20000 events/s"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_latency_run_writes_its_plot_and_interval_log() {
    let dir = std::env::temp_dir().join(format!("sluice-plot-hlog-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (plot, hlog) = (dir.join("l.svg"), dir.join("l.hlog"));
    let line = ["--events", "200000", "--rate", "200000", "--shards", "2", "--plot", plot.to_str().unwrap()];
    let line: Vec<&str> = line.into_iter().chain(["--hlog", hlog.to_str().unwrap()]).collect();
    let report = pipeline::run(&args(&line)).expect("latency run");
    assert!(report.latency_curve.as_ref().is_some_and(|c| !c.points.is_empty()));
    assert!(std::fs::read_to_string(&plot).unwrap().starts_with("<svg"));
    let log = std::fs::read_to_string(&hlog).unwrap();
    assert!(log.lines().any(|l| l.starts_with("#[StartTime:")), "{log}");
    assert!(log.lines().filter(|l| !l.starts_with('#') && !l.starts_with("\"StartTimestamp\"")).count() >= 1, "{log}");
    std::fs::remove_dir_all(&dir).unwrap();
}
