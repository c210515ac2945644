//! `sluice-bench log`: append and read throughput and append latency of the partition log,
//! set against the [`baseline`](crate::baseline) write speed of the same disk.
//!
//! Each shard appends its share of the records to its own partition log, then reads them
//! back in place ([`log_shard`](super::log_shard)); the baseline writes the same bytes raw.

use std::{fs, path::Path};

use anyhow::Context;
use clap::{Args, builder::RangedU64ValueParser};
use serde::Serialize;
use sluice_io::FsyncPolicy;

use crate::{
    baseline::{self, BaselineResult},
    harness::{LatencyRecorder, LatencySummary, Table, run_on_shards},
    workloads::log_shard::{ShardPlan, run_shard},
};

use super::CommonArgs;

/// Options of `sluice-bench log`.
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// Number of shards, each with its own executor pinned to a core
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub shards: usize,
    /// Records to append in total
    #[arg(long, default_value_t = 2_000_000, value_name = "N",
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
    /// End-to-end mode: send at this offered rate (records/s) through the engine and
    /// report produce-to-consume latency instead of throughput
    #[arg(long, value_name = "RECORDS_PER_SEC")]
    pub rate: Option<u64>,
    /// End-to-end mode: the producer wakes at most once per this many microseconds and
    /// sends every record due by then as one append (0: a wake-up for every record); each
    /// record's latency still runs from its own scheduled send time
    #[arg(long, default_value_t = 100, value_name = "US")]
    pub send_interval_us: u64,
    /// When appends are synced: `always`, `interval:MS` or `never`
    #[arg(long, default_value = "interval:5", value_name = "POLICY")]
    pub fsync: FsyncPolicy,
    #[command(flatten)]
    pub common: CommonArgs,
}

impl LogArgs {
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
    /// `--records`, over all shards.
    pub records: u64,
    /// `--record-bytes`.
    pub record_bytes: usize,
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

/// Runs the log workload in `args.common.dir` (or a fresh temporary directory).
pub fn run(args: &LogArgs) -> anyhow::Result<LogReport> {
    let work_dir = args.common.work_dir("log")?;
    if args.common.keep {
        eprintln!("keeping data in {}", work_dir.path().display());
    }

    let fsync = args.fsync;
    let per_shard = args.records.div_ceil(args.shards as u64);
    let epoch = std::time::Instant::now();
    let plans: Vec<ShardPlan> = (0..args.shards)
        .map(|shard| ShardPlan {
            dir: work_dir.path().join(format!("shard-{shard}")),
            records: per_shard.min(args.records - per_shard * shard as u64),
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
        .collect();
    let outcomes = run_on_shards(args.shards, move |shard| run_shard(plans[shard].clone()))?;
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
        args.common.write_latency(&latency, "log append latency", &format!("log append, fsync {}", args.fsync))?;
    let baseline = run_baseline(args, work_dir.path())?;

    Ok(LogReport {
        workload: "log",
        shards: args.shards,
        records: args.records,
        record_bytes: args.record_bytes,
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

/// Writes the workload's payload volume with [`baseline::baseline_write`] into
/// `dir/baseline/`, deleting the file afterwards unless `--keep`.
fn run_baseline(args: &LogArgs, dir: &Path) -> anyhow::Result<BaselineResult> {
    let dir = dir.join("baseline");
    let result = baseline::baseline_write(
        &dir,
        args.total_bytes(),
        baseline::DEFAULT_CHUNK_BYTES,
        args.fsync,
        args.append_count(),
    )
    .context("baseline write")?;
    if !args.common.keep {
        fs::remove_file(dir.join(baseline::BASELINE_FILE_NAME)).context("removing the baseline file")?;
    }
    Ok(result)
}

impl LogReport {
    /// The human-readable form of the report.
    pub fn table(&self) -> Table {
        let shard_s = if self.shards == 1 { "" } else { "s" };
        let mut table = Table::titled(format!(
            "log: {} shard{shard_s}, {} records x {} B, fsync {}",
            self.shards, self.records, self.record_bytes, self.fsync
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
