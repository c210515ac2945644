//! `sluice-bench log`: append and read throughput and append latency of the partition log,
//! set against the [`baseline`](crate::baseline) write speed of the same disk.
//!
//! Each shard appends its share of the records to its own partition log, then reads them
//! back in place ([`log_shard`](super::log_shard)); the baseline writes the same bytes raw.
//!
//! This is the closed loop (`--max`, the default): `--records` fixes the run's size, or
//! `--duration S` stops the appenders after S seconds. `--warmup S` first runs the same
//! appends for S seconds into a separate directory and discards them. `--seed` draws the
//! record payloads. `--rate R` (or `--find-max-rate`) switches to the open-loop
//! end-to-end mode ([`e2e`](super::e2e)).

use std::{fs, path::Path};

use anyhow::Context;
use clap::{Args, builder::RangedU64ValueParser};
use serde::Serialize;
use sluice_io::FsyncPolicy;

use crate::{
    baseline::{self, BaselineResult},
    harness::{LatencyRecorder, LatencySummary, ShardConfig, Table, run_on_shards, run_on_shards_with},
    workloads::log_shard::{ShardPlan, run_shard},
};

use super::DirArgs;
use crate::harness::{RunArgs, RunInfo, fill_seeded};

/// What `log` makes of the shared options (`--help`).
const SHARED_HELP: &str = "Shared options here: --shards defaults to 1. Without --rate the run is the closed loop \
(--max): appends as fast as the log takes them, --records in all or for --duration seconds, after a discarded \
--warmup run into its own directory; --plot and --hlog show the append latency. --rate R is the open loop end to end \
(producer, engine, consumer): R records/s for --records records or --duration seconds, after --warmup seconds whose \
records are sent but not measured; --find-max-rate ramps it (from --rate, default 10 000; steps of --duration, \
default 3 s). --seed draws the record payloads.";

/// Options of `sluice-bench log` (its `--help` says what it makes of the shared ones).
#[derive(Debug, Clone, Args)]
#[command(after_help = SHARED_HELP)]
pub struct LogArgs {
    /// Records to append in total (closed loop), or to send (--rate, unless --duration)
    #[arg(long, default_value_t = 2_000_000, value_name = "N", conflicts_with = "duration",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub records: u64,
    /// Payload bytes per record
    #[arg(long, default_value_t = 100, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub record_bytes: usize,
    /// Records per append call
    #[arg(long, default_value_t = 1000, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub batch_records: usize,
    /// Append calls in flight per shard (appends waiting together share an fsync)
    #[arg(long, default_value_t = 4, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub inflight: usize,
    /// Bytes asked for per read when reading back
    #[arg(long, default_value_t = 4 << 20, value_name = "BYTES")]
    pub read_bytes: usize,
    /// Read back with plain `Log::read` calls instead of a `LogReader` (one read ahead)
    #[arg(long)]
    pub no_read_ahead: bool,
    /// Segment size before a roll (`LogConfig::segment_bytes_max`)
    #[arg(long, default_value_t = 256 << 20, value_name = "BYTES")]
    pub segment_bytes: u64,
    /// Size of each write-behind buffer (`LogConfig::write_buffer_bytes`)
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
    pub write_buffer_bytes: usize,
    /// Write-behind buffers in flight (`LogConfig::write_behind_buffers`)
    #[arg(long, default_value_t = 4, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub write_behind: usize,
    /// Registered I/O memory of each shard's executor (glommio's `io_memory`), bytes
    /// [default: three quarters of the locked-memory limit split over the shards]. Less
    /// than a write buffer makes writes fall back to unregistered buffers
    #[arg(long, value_name = "BYTES", value_parser = RangedU64ValueParser::<usize>::new().range(4096..=(64 << 20)))]
    pub io_memory: Option<usize>,
    /// End-to-end mode: the producer wakes at most once per this many microseconds and
    /// sends every record due by then as one append (0: a wake-up for every record); each
    /// record's latency still runs from its own scheduled send time
    #[arg(long, default_value_t = 100, value_name = "US")]
    pub send_interval_us: u64,
    /// When appends are synced: `always`, `interval:MS` or `never`
    #[arg(long, default_value = "interval:5", value_name = "POLICY")]
    pub fsync: FsyncPolicy,
    /// End-to-end mode: where the producer and the consumer run. `shards`: as tasks on
    /// the engine's shards (`EngineHandle::run_on`), the producer on the shard that owns
    /// the partition and the consumer on another one, as a thread-per-core service
    /// embeds them; `threads`: the producer on an executor thread of its own and the
    /// consumer on a plain thread, as host code outside the engine would call it
    #[arg(long, value_enum, default_value_t = Clients::Shards)]
    pub clients: Clients,
    /// End-to-end mode: run no wake-up probe beside the run (a thread that sleeps 1 ms at
    /// a time and reports how late it woke as `machine_wake_latency_us`, the machine's
    /// floor under the run's latencies)
    #[arg(long)]
    pub no_wake_probe: bool,
    #[command(flatten)]
    pub dirs: DirArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Where the end-to-end mode's producer and consumer run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Clients {
    /// Tasks on the engine's shards.
    Shards,
    /// Threads of their own.
    Threads,
}

impl LogArgs {
    /// `--shards` (default 1).
    pub fn shards(&self) -> usize {
        self.run.shards_or(1)
    }

    /// Whether the run is the open-loop end-to-end mode (`--rate` or `--find-max-rate`).
    pub fn is_e2e(&self) -> bool {
        self.run.rate.is_some() || self.run.find_max_rate
    }

    /// Payload bytes appended in total.
    pub fn total_bytes(&self) -> u64 {
        self.records.saturating_mul(self.record_bytes as u64)
    }

    /// Number of append calls (the last one possibly short).
    pub fn append_count(&self) -> u64 {
        self.records.div_ceil(self.batch_records as u64)
    }
}

/// Result of `sluice-bench log`; this is the `--json` schema. Rates are per second over all
/// shards, latencies in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct LogReport {
    /// Always `"log"`.
    pub workload: &'static str,
    /// `--shards`.
    pub shards: usize,
    /// `--seed`, `--duration` and `--warmup` as used.
    #[serde(flatten)]
    pub run: RunInfo,
    /// Records appended, over all shards (`--records`, or what `--duration` let through).
    pub records: u64,
    /// `--record-bytes`.
    pub record_bytes: usize,
    /// Registered I/O memory per executor, bytes.
    pub io_memory: usize,
    /// `--fsync`, as given on the command line (e.g. `"interval:5"`).
    #[serde(serialize_with = "crate::harness::serialize_display")]
    pub fsync: FsyncPolicy,
    /// Record payload bytes appended per second.
    pub append_bytes_per_sec: f64,
    /// Records appended per second.
    pub append_records_per_sec: f64,
    /// Records read back per second (in place, every batch's CRC checked).
    pub read_records_per_sec: f64,
    /// Bytes the records occupy on disk (headers and record framing included).
    pub stored_bytes: u64,
    /// Stored bytes read back per second by the log's read path.
    pub read_bytes_per_sec: f64,
    /// The same segment files read raw, sequentially with `O_DIRECT` in reads of
    /// `--read-bytes`, with no log logic: the physical reference for reads.
    pub baseline_read_bytes_per_sec: f64,
    /// Latency of one append call (one batch), from call to durable acknowledgement.
    pub append_latency_us: LatencySummary,
    /// The same, as a curve for `sluice-bench report --plot`.
    pub append_latency_curve: crate::harness::Curve,
    /// [`baseline_write`](crate::baseline::baseline_write) of the same payload volume with
    /// the same fsync cadence, from a single writer.
    pub baseline_write_bytes_per_sec: f64,
}

/// Runs the log workload in `args.dirs.dir` (or a fresh temporary directory): the closed
/// loop; see [`e2e::run`](super::e2e::run) for `--rate`.
pub fn run(args: &LogArgs) -> anyhow::Result<LogReport> {
    anyhow::ensure!(!args.is_e2e(), "--rate and --find-max-rate run the end-to-end mode (e2e::run)");
    args.run.refuse_metrics(
        "the closed-loop log mode appends to bare logs on the harness's shards, not through an engine; \
         give --rate R for the end-to-end mode, whose engine serves its metrics",
    )?;
    let work_dir = args.dirs.work_dir("log")?;
    if args.dirs.keep {
        eprintln!("keeping data in {}", work_dir.path().display());
    }
    let shards = args.shards();
    if args.run.warmup > 0.0 {
        // The same appends for --warmup seconds, into their own directory, discarded.
        let dir = work_dir.path().join("warmup");
        run_on_shards(shards, {
            let plans = plans(args, &dir, Some(args.run.warmup()), std::time::Instant::now());
            move |shard| run_shard(plans[shard].clone())
        })
        .context("the warm-up run")?;
        if !args.dirs.keep {
            fs::remove_dir_all(&dir).context("removing the warm-up data")?;
        }
    }
    let epoch = std::time::Instant::now();
    let plans = plans(args, work_dir.path(), args.run.duration(), epoch);
    let mut executors = ShardConfig::for_shards(shards);
    if let Some(bytes) = args.io_memory {
        executors.io_memory = bytes & !4095;
    }
    let outcomes = run_on_shards_with(executors, shards, move |shard| run_shard(plans[shard].clone()))?;
    let appended: u64 = outcomes.iter().map(|o| o.appended).sum();
    let read: u64 = outcomes.iter().map(|o| o.read).sum();
    // Shards run at once: the slowest one bounds the run.
    let append_secs = outcomes.iter().map(|o| o.append_time.as_secs_f64()).fold(0.0, f64::max);
    let read_secs = outcomes.iter().map(|o| o.read_time.as_secs_f64()).fold(0.0, f64::max);
    let mut latency = LatencyRecorder::with_intervals(epoch, std::time::Duration::from_secs(1));
    for o in &outcomes {
        latency.merge(&o.latency);
    }
    let append_records_per_sec = appended as f64 / append_secs;
    let append_bytes_per_sec = append_records_per_sec * args.record_bytes as f64;
    let read_records_per_sec = read as f64 / read_secs;
    let stored_bytes: u64 = outcomes.iter().map(|o| o.stored_bytes).sum();
    let read_bytes_per_sec = stored_bytes as f64 / read_secs;
    let raw_read_secs = outcomes.iter().map(|o| o.raw_read_time.as_secs_f64()).fold(0.0, f64::max);
    let baseline_read_bytes_per_sec = stored_bytes as f64 / raw_read_secs;
    let append_latency_us = latency.summary();
    let append_latency_curve =
        args.run.write_latency(&latency, "log append latency", &format!("log append, fsync {}", args.fsync))?;
    let appends = outcomes.iter().map(|o| o.appends).sum::<u64>().max(1);
    let baseline = run_baseline(args, work_dir.path(), appended, appends)?;

    Ok(LogReport {
        workload: "log",
        shards,
        run: args.run.info(args.run.duration),
        records: appended,
        record_bytes: args.record_bytes,
        io_memory: executors.io_memory,
        fsync: args.fsync,
        append_bytes_per_sec,
        append_records_per_sec,
        read_records_per_sec,
        stored_bytes,
        read_bytes_per_sec,
        baseline_read_bytes_per_sec,
        append_latency_us,
        append_latency_curve,
        baseline_write_bytes_per_sec: baseline.bytes_per_sec,
    })
}

/// Every shard's plan: its share of `--records` (or records without end when bounded by
/// `limit`), under `dir`.
fn plans(args: &LogArgs, dir: &Path, limit: Option<std::time::Duration>, epoch: std::time::Instant) -> Vec<ShardPlan> {
    let shards = args.shards();
    let records = if limit.is_some() { u64::MAX / 2 } else { args.records };
    let per_shard = records.div_ceil(shards as u64);
    let fsync = args.fsync;
    let mut value = vec![0u8; args.record_bytes];
    fill_seeded(args.run.seed, &mut value);
    (0..shards)
        .map(|shard| ShardPlan {
            dir: dir.join(format!("shard-{shard}")),
            records: per_shard.min(records - per_shard * shard as u64),
            limit,
            value: value.clone(),
            record_bytes: args.record_bytes,
            batch_records: args.batch_records,
            config: sluice_io::LogConfig {
                fsync,
                segment_bytes_max: args.segment_bytes,
                write_buffer_bytes: args.write_buffer_bytes,
                write_behind_buffers: args.write_behind,
                ..sluice_io::LogConfig::default()
            },
            inflight: args.inflight,
            read_bytes: args.read_bytes,
            read_ahead: !args.no_read_ahead,
            epoch,
        })
        .collect()
}

/// Writes the payload volume of `records` records appended in `appends` calls with
/// [`baseline::baseline_write`] into `dir/baseline/`, deleting the file afterwards unless
/// `--keep`.
fn run_baseline(args: &LogArgs, dir: &Path, records: u64, appends: u64) -> anyhow::Result<BaselineResult> {
    let dir = dir.join("baseline");
    let result = baseline::baseline_write(
        &dir,
        records.saturating_mul(args.record_bytes as u64).max(1),
        baseline::DEFAULT_CHUNK_BYTES,
        args.fsync,
        appends,
    )
    .context("baseline write")?;
    if !args.dirs.keep {
        fs::remove_file(dir.join(baseline::BASELINE_FILE_NAME)).context("removing the baseline file")?;
    }
    Ok(result)
}

impl LogReport {
    /// The human-readable form of the report.
    pub fn table(&self) -> Table {
        let shard_s = if self.shards == 1 { "" } else { "s" };
        let mut table = Table::titled(format!(
            "log: {} shard{shard_s}, {} records x {} B, fsync {}, {} KiB of I/O memory per shard, {}",
            self.shards,
            self.records,
            self.record_bytes,
            self.fsync,
            self.io_memory >> 10,
            self.run.describe()
        ));
        table.row("append throughput", format!("{:.1}", self.append_bytes_per_sec / 1e6), "MB/s");
        table.row("append throughput", format!("{:.0}", self.append_records_per_sec), "records/s");
        table.row("read throughput", format!("{:.0}", self.read_records_per_sec), "records/s");
        table.row("read throughput", format!("{:.1}", self.read_bytes_per_sec / 1e6), "MB/s stored");
        table.row("baseline read", format!("{:.1}", self.baseline_read_bytes_per_sec / 1e6), "MB/s");
        if self.baseline_read_bytes_per_sec > 0.0 {
            table.row(
                "read / baseline",
                format!("{:.1}", 100.0 * self.read_bytes_per_sec / self.baseline_read_bytes_per_sec),
                "%",
            );
        }
        table.latency_rows("append latency", &self.append_latency_us);
        table.row("baseline write", format!("{:.1}", self.baseline_write_bytes_per_sec / 1e6), "MB/s");
        if self.baseline_write_bytes_per_sec > 0.0 {
            table.row(
                "append / baseline",
                format!("{:.1}", 100.0 * self.append_bytes_per_sec / self.baseline_write_bytes_per_sec),
                "%",
            );
        }
        table
    }
}
