//! `sluice-bench pipeline --processes N`: the workload's job run as N OS processes whose
//! keys meet through a Kafka repartition topic
//! (`sluice_engine::connectors::kafka::Repartition::key_by_through`), against the
//! single-process job (the plain in-process `key_by`) in the same run.
//!
//! The parent starts the broker (`sluice serve` from beside this binary if it is there,
//! else the engine's Kafka listener in this process over a fresh engine; `--bootstrap` for
//! an existing cluster), then per round creates a fresh repartition topic of
//! `N * shards` partitions and starts N instances of itself in the hidden child mode
//! ([`child`]), each generating its `1/N` of the events. Once every instance is ready the
//! parent says `go` and starts the clock; it stops at the last instance's `DONE` (every
//! window of every instance fired). `results_sum` is the instances' result counts added
//! up, checked as the workload checks its own. The readers are on fixed partitions
//! (`RepartitionConfig::fixed_assignment`: no group to settle). Exactly once by default:
//! each instance checkpoints into a directory of its own every `--checkpoint-interval-ms`,
//! and the repartition's records cross when their checkpoint completes.
//!
//! After the throughput rounds, the latency phase (`--latency-seconds`) runs both sides
//! open-loop at half the N-process best rate: each result's latency runs from its window's
//! last event's scheduled time to the result reaching its sink, as the workload's latency
//! phase defines it (the instances share the schedule's epoch in wall-clock time).
//!
//! Where the time goes: each instance's CPU (user + system, from `wait4` when it exits,
//! less what it had used when it said `READY`), its CPU by thread name (`/proc/self/task`),
//! the broker's CPU over the measured time, and the repartition topic's records and bytes
//! (read back after each round, `read_committed`).

#[cfg(feature = "kafka-client")]
mod broker;
#[cfg(feature = "kafka-client")]
pub mod child;
#[cfg(feature = "kafka-client")]
mod run;

use std::collections::BTreeMap;

use anyhow::ensure;
use clap::{Args, ValueEnum};
use serde::Serialize;

#[cfg(feature = "kafka-client")]
pub use self::run::run;
use super::pipeline::PipelineArgs;
use crate::harness::{LatencySummary, Table};

/// `--processes` and the options that only it takes.
#[derive(Debug, Clone, Default, Args)]
pub struct ProcessesArgs {
    /// Run the job as N OS processes (this binary again, in a hidden child mode) whose keys
    /// meet through a Kafka repartition topic, against the single-process job in the same
    /// run (needs the `kafka-client` feature; one N per run)
    #[arg(long, value_name = "N", value_parser = parse_processes)]
    pub processes: Option<usize>,
    /// With --processes: the broker: `auto` (`sluice serve` if a sluice binary sits beside
    /// this one, else the engine's Kafka listener in this process), `serve` or
    /// `in-process` [default: auto]
    #[arg(long, value_enum)]
    pub broker: Option<BrokerKind>,
    /// With --processes: use this Kafka cluster (HOST:PORT[,...]) instead of starting one
    #[arg(long, value_name = "HOST:PORT")]
    pub bootstrap: Option<String>,
    /// With --processes: repartition at least once (records cross as they are written, no
    /// checkpoints) instead of exactly once
    #[arg(long)]
    pub at_least_once: bool,
    /// With --processes, exactly once: each process's checkpoint interval, in milliseconds:
    /// the repartition's records cross when their checkpoint completes, so this is added to
    /// the result latency [default: 1000, the engine's CheckpointConfig default]
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub checkpoint_interval_ms: Option<u64>,
}

/// `--checkpoint-interval-ms`' default.
pub const DEFAULT_CHECKPOINT_INTERVAL_MS: u64 = 1000;

/// `--events`' default with `--processes`: every record crosses the broker twice.
pub const DEFAULT_PROCESSES_EVENTS: u64 = 5_000_000;

fn parse_processes(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("--processes must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e}")),
    }
}

/// Where `--processes` meets its cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BrokerKind {
    /// `sluice serve` if it sits beside this binary, else `in-process`.
    Auto,
    /// `sluice serve` from beside this binary, as a child process.
    Serve,
    /// The engine's Kafka listener in this process over a fresh engine.
    InProcess,
}

/// Refuses the options that make no sense with `--processes` (or that need it).
///
/// # Errors
///
/// The first such option, named.
pub fn check(args: &PipelineArgs) -> anyhow::Result<()> {
    let p = &args.processes;
    if p.processes.is_none() {
        ensure!(
            p.broker.is_none() && p.bootstrap.is_none() && !p.at_least_once && p.checkpoint_interval_ms.is_none(),
            "--broker, --bootstrap, --at-least-once and --checkpoint-interval-ms apply to --processes"
        );
        return Ok(());
    }
    ensure!(
        cfg!(feature = "kafka-client"),
        "--processes needs sluice-bench built with the kafka-client feature (librdkafka): cargo build --release \
         -p sluice-bench --features kafka-client"
    );
    let opts = &args.run;
    let refused = [
        (!args.compare.is_empty(), "--compare (the comparison with --processes is the single-process job)"),
        (args.scaling, "--scaling"),
        (opts.rate.is_some(), "--rate (the latency phase runs at half the measured rate: --latency-seconds)"),
        (opts.find_max_rate, "--find-max-rate"),
        (opts.duration.is_some(), "--duration (the instances end at --events)"),
        (opts.warmup > 0.0, "--warmup (every round is measured: use --rounds)"),
        (args.two_phase, "--two-phase"),
        (args.split.is_some(), "--split (each instance makes its events by residue)"),
        (args.watermark_interval_us.is_some(), "--watermark-interval-us (the instances' exchanges are not configured)"),
        (opts.hlog.is_some(), "--hlog (the instances keep no interval log)"),
        (opts.live.is_some(), "--live (the events are counted in other processes)"),
        (opts.metrics_listen.is_some(), "--metrics-listen (the job runs in other processes)"),
        (p.at_least_once && p.checkpoint_interval_ms.is_some(), "--checkpoint-interval-ms with --at-least-once"),
        (p.bootstrap.is_some() && p.broker.is_some(), "--broker with --bootstrap"),
    ];
    if let Some((_, what)) = refused.iter().find(|(bad, _)| *bad) {
        anyhow::bail!("--processes does not take {what}");
    }
    Ok(())
}

/// What `--processes` adds to the report (flattened into it).
#[derive(Debug, Clone, Serialize)]
pub struct ProcessesReport {
    /// `--processes`.
    pub processes: usize,
    /// The broker used: `sluice serve (PATH)`, the in-process listener, or `--bootstrap`.
    pub broker: String,
    /// Its address.
    pub bootstrap: String,
    /// `exactly_once` or `at_least_once`.
    pub guarantee: &'static str,
    /// Exactly once: each process's checkpoint interval.
    pub checkpoint_interval_ms: Option<u64>,
    /// The repartition topic's partitions: `processes * shards`.
    pub repartition_partitions: u32,
    /// Seconds from starting the instances to every one being ready, per round.
    pub round_startup_seconds: Vec<f64>,
    /// The single-process job's events per second, best round.
    pub single_process_events_per_sec: f64,
    /// Its rate in every round.
    pub round_single_process_events_per_sec: Vec<f64>,
    /// `events_per_sec / single_process_events_per_sec`.
    pub ratio_to_single_process: f64,
    /// The single-process job's result latency at `latency_rate`.
    pub single_process_latency_us: Option<LatencySummary>,
    /// The repartition topic of the best round.
    pub repartition: TopicCost,
    /// Where the best round's time went.
    pub cpu: CpuReport,
    /// The 1-minute load average when the run started.
    pub load_average: Option<f64>,
}

/// The repartition topic's records and bytes in one round.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TopicCost {
    /// Records read back (`read_committed`): data and watermark records.
    pub records: u64,
    /// Data records (one per event, exactly once).
    pub data_records: u64,
    /// Watermark records.
    pub watermark_records: u64,
    /// Their bytes: keys, values and headers (not the batches' framing).
    pub bytes: u64,
    /// The partitions' end offsets added up (transaction markers take offsets too).
    pub end_offsets: u64,
    /// `records` per second of the round's measured time.
    pub records_per_sec: f64,
    /// `bytes` per second of the round's measured time.
    pub bytes_per_sec: f64,
}

/// CPU time of one round (seconds), against its wall time.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CpuReport {
    /// The N-process round's measured wall time (go to the last result).
    pub wall_seconds: f64,
    /// Each instance's CPU from `READY` to its exit.
    pub process_cpu_seconds: Vec<f64>,
    /// Checkpoints each instance completed (exactly once).
    pub process_checkpoints: Vec<u64>,
    /// The broker's CPU over the measured time (none for `--bootstrap`; for the
    /// in-process listener, the parent's whole CPU).
    pub broker_cpu_seconds: Option<f64>,
    /// The instances' CPU (their whole life) by thread name, added up.
    pub cpu_by_thread: BTreeMap<String, f64>,
    /// Instances and broker: CPU microseconds per event.
    pub cpu_us_per_event: f64,
    /// The single-process job of the same round: its wall time.
    pub single_process_wall_seconds: f64,
    /// Its CPU (the parent's, which runs it).
    pub single_process_cpu_seconds: f64,
    /// Its CPU microseconds per event.
    pub single_process_cpu_us_per_event: f64,
}

/// User plus system CPU seconds from a `/proc/.../stat` line (fields 14 and 15).
#[cfg(feature = "kafka-client")]
pub(crate) fn stat_cpu_seconds(stat: &str) -> Option<f64> {
    // The command name (field 2) may hold spaces: count from its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let (utime, stime): (u64, u64) = (fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?);
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then(|| (utime + stime) as f64 / ticks as f64)
}

impl ProcessesReport {
    /// Its rows in the workload's table.
    pub fn rows(&self, table: &mut Table, events_per_sec: f64) {
        let mode = match self.checkpoint_interval_ms {
            Some(ms) => format!("{}, checkpoints every {ms} ms", self.guarantee),
            None => self.guarantee.to_string(),
        };
        table.row("processes", self.processes, &mode);
        table.row("broker", &self.bootstrap, &self.broker);
        table.row(
            "single process (in-process key_by)",
            format!("{:.0}", self.single_process_events_per_sec),
            "events/s",
        );
        table.row(
            format!("{} processes / single process", self.processes),
            format!("{:.3}", events_per_sec / self.single_process_events_per_sec.max(1e-9)),
            "x",
        );
        let r = &self.repartition;
        table.row(
            "repartition topic",
            format!("{:.0}", r.records_per_sec),
            format!(
                "records/s, {:.2} MB/s ({} data + {} watermark records, {} bytes)",
                r.bytes_per_sec / 1e6,
                r.data_records,
                r.watermark_records,
                r.bytes
            ),
        );
        let c = &self.cpu;
        let per: Vec<String> = c.process_cpu_seconds.iter().map(|s| format!("{s:.2}")).collect();
        table.row("CPU per process", per.join(" "), format!("s over {:.2} s wall", c.wall_seconds));
        if self.checkpoint_interval_ms.is_some() {
            let done: Vec<String> = c.process_checkpoints.iter().map(u64::to_string).collect();
            table.row("checkpoints per process", done.join(" "), "");
        }
        if let Some(b) = c.broker_cpu_seconds {
            table.row("CPU of the broker", format!("{b:.2}"), "s");
        }
        let threads: Vec<String> =
            c.cpu_by_thread.iter().filter(|(_, s)| **s >= 0.005).map(|(n, s)| format!("{n} {s:.2}")).collect();
        let all: f64 = c.cpu_by_thread.values().sum();
        table.row("CPU by thread (processes' lives)", format!("{all:.2}"), format!("s: {}", threads.join(", ")));
        table.row("CPU per event", format!("{:.2}", c.cpu_us_per_event), "us (processes and broker)");
        table.row("CPU per event, single process", format!("{:.3}", c.single_process_cpu_us_per_event), "us");
        if let Some(l) = &self.single_process_latency_us {
            table.latency_rows("single-process result latency", l);
        }
    }
}

#[cfg(all(test, feature = "kafka-client"))]
mod tests {
    use super::stat_cpu_seconds;

    #[test]
    fn stat_lines_give_user_plus_system_time() {
        // The command name may hold spaces and parentheses; fields 14 and 15 follow it.
        let ten = stat_cpu_seconds("1 (a) b) S 0 0 0 0 0 0 0 0 0 0 250 150 0 0").expect("a stat line");
        let one = stat_cpu_seconds("1 (a) b) S 0 0 0 0 0 0 0 0 0 0 25 15 0 0").expect("a stat line");
        assert!(one > 0.0 && (ten / one - 10.0).abs() < 1e-9, "{ten} {one}");
        let own = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
        assert!(stat_cpu_seconds(&own).is_some_and(|s| s >= 0.0));
        assert_eq!(stat_cpu_seconds("1 (x) S 0"), None);
    }
}
