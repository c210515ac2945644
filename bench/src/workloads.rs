//! The workloads, one module per `sluice-bench <workload>` subcommand, and the options they
//! all share.
//!
//! A workload module owns its clap arguments, a `run` function returning a serializable
//! report, and the report's [`Table`](crate::harness::Table). Printing and `--json` output
//! are left to the binary.

pub mod cdc;
pub mod checkpoint;
pub mod cleaning;
pub mod e2e;
pub mod footprint;
pub mod kafka;
#[cfg(feature = "kafka-client")]
pub mod kafka_rdkafka;
#[cfg(feature = "rskafka-client")]
pub mod kafka_rskafka;
mod kafka_security;
pub mod log;
pub mod log_shard;
pub mod nexmark;
pub mod pipeline;
pub mod pipeline_procs;
pub mod pipeline_sluice;
pub mod ring;

// The job, and its timely baseline, live in their own crate (see its documentation).
pub use sluice_bench_timely::{job as pipeline_job, timely_job as pipeline_timely};

use std::{io, path::PathBuf};

use clap::Args;

use crate::harness::WorkDir;

/// Where a workload that writes data writes it (`--dir`, `--keep`); flattened beside
/// [`RunArgs`](crate::harness::RunArgs), the options every workload shares.
#[derive(Debug, Clone, Default, Args)]
pub struct DirArgs {
    /// Directory to write data into (created if missing, never deleted) [default: a fresh
    /// directory under /tmp, deleted at the end unless --keep]
    #[arg(long, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// Keep the data written (the temporary directory, and files a workload would delete)
    #[arg(long)]
    pub keep: bool,
}

impl DirArgs {
    /// The directory `--dir` names, or a fresh `/tmp/sluice-bench-<workload>-...` directory.
    pub fn work_dir(&self, workload: &str) -> io::Result<WorkDir> {
        match &self.dir {
            Some(dir) => WorkDir::at(dir),
            None => WorkDir::fresh(&format!("sluice-bench-{workload}"), self.keep),
        }
    }
}

/// The options of `sluice-bench kafka`'s work directory and outputs (the other workloads
/// take [`DirArgs`] and [`RunArgs`](crate::harness::RunArgs)).
#[derive(Debug, Clone, Default, Args)]
pub struct CommonArgs {
    /// Directory to write data into (created if missing, never deleted) [default: a fresh
    /// directory under /tmp, deleted at the end unless --keep]
    #[arg(long, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// Also write the report as JSON to this file
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Keep the data written (the temporary directory, and files a workload would delete)
    #[arg(long)]
    pub keep: bool,
    /// Write the latency-by-percentile chart (SVG) of a latency run to this file
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
    /// Write a latency run's HdrHistogram interval log (1 s intervals) to this file
    #[arg(long, value_name = "PATH")]
    pub hlog: Option<PathBuf>,
    /// Serve the run's metrics (the engine's and its Kafka listener's) at
    /// http://ADDR/metrics while it goes on; printed as `metrics on ADDR` on stderr
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Serve a live page of the run at http://ADDR/ (a bare port: loopback) from its
    /// start (records appended per
    /// second; at the end the report and the latency curve); printed as `live page on ...`
    #[arg(long, value_name = "ADDR", value_parser = crate::harness::live::parse_addr)]
    pub live: Option<std::net::SocketAddr>,
    /// Seconds the --live page stays served after the run ends [default: 0]
    #[arg(long, value_name = "SECONDS", value_parser = parse_linger)]
    pub live_linger: Option<f64>,
}

fn parse_linger(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() && v >= 0.0 { Ok(v) } else { Err("seconds must be 0 or more".into()) }
}

impl CommonArgs {
    /// Writes `--plot` and `--hlog` for `latency`, if asked; its curve, for the report.
    pub fn write_latency(
        &self,
        latency: &crate::harness::LatencyRecorder,
        title: &str,
        label: &str,
    ) -> anyhow::Result<crate::harness::Curve> {
        let curve = latency.curve(label);
        if let Some(path) = &self.plot {
            crate::harness::write_percentile_plot(path, title, std::slice::from_ref(&curve))?;
        }
        if let Some(path) = &self.hlog {
            latency.write_hlog(path)?;
        }
        Ok(curve)
    }

    /// The directory `--dir` names, or a fresh `/tmp/sluice-bench-<workload>-...` directory.
    pub fn work_dir(&self, workload: &str) -> io::Result<WorkDir> {
        match &self.dir {
            Some(dir) => WorkDir::at(dir),
            None => WorkDir::fresh(&format!("sluice-bench-{workload}"), self.keep),
        }
    }
}

/// The 1-minute load average (`/proc/loadavg`), for a report to say how busy the machine
/// was when its run started.
pub(crate) fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}
