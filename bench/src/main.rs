//! `sluice-bench <workload> [options]`: parses the command line, runs the workload from the
//! `sluice_bench` library, prints its table and writes `--json` if asked.

use std::path::Path;

use anyhow::Result;
use clap::{Parser, Subcommand};
use serde::Serialize;
use sluice_bench::{
    harness::{Table, live, write_json},
    workloads::{cleaning, footprint, kafka, log, nexmark, pipeline, ring},
};

/// sluice's load and latency harness.
#[derive(Debug, Parser)]
#[command(name = "sluice-bench", version)]
struct Cli {
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Debug, Subcommand)]
enum Workload {
    /// Append and read throughput and append latency of the partition log, against a raw
    /// O_DIRECT write baseline
    Log(log::LogArgs),
    /// Records per second from shard 0 to shard 1 through the ring mesh, against a plain
    /// chunked rtrb ring
    Ring(ring::RingArgs),
    /// Events per second and result latency of a windowed keyed count through the
    /// processor, against the same job written with timely dataflow (--compare timely)
    Pipeline(pipeline::PipelineArgs),
    // Events per second and result latency of a Nexmark query (the queries of the table,
    // `Query::ALL`, listed: q0-q9, ...).
    #[command(about = nexmark::about())]
    Nexmark(nexmark::NexmarkArgs),
    /// Produce throughput through the Kafka listener with kcat (librdkafka) against the
    /// embedded log, and produce-to-consume latency with confluent-kafka at a fixed rate
    Kafka(kafka::KafkaArgs),
    /// Result latency of the windowed keyed count with checkpoints every second against
    /// none, and (--state-keys N) the time to checkpoint, savepoint and restore N keys of state
    Checkpoint(sluice_bench::workloads::checkpoint::CheckpointArgs),
    /// Time to create and to reopen a topic of many partitions, its bytes on disk and the
    /// resident memory it holds, and a record through every partition
    Footprint(footprint::FootprintArgs),
    /// Append latency while the cleaner compacts the partition, against none
    Cleaning(cleaning::CleaningArgs),
    /// Changes per second from PostgreSQL into a materialized table against pg_recvlogical
    /// reading the same slot output, and the commit-to-visible latency
    Cdc(sluice_bench::workloads::cdc::CdcArgs),
    /// Several runs' --json reports side by side (and their latency curves on one chart
    /// with --plot)
    Report(sluice_bench::report::ReportArgs),
    /// One instance of `pipeline --processes N`, started by it (not for users).
    #[cfg(feature = "kafka-client")]
    #[command(hide = true)]
    PipelineChild(sluice_bench::workloads::pipeline_procs::child::ChildArgs),
}

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<()> {
    match Cli::parse().workload {
        Workload::Log(args) if args.is_e2e() => {
            let live = Shown::new(args.run.live()?, "log", "records", args.run.rate);
            live.run(args.run.json.as_deref(), || sluice_bench::workloads::e2e::run(&args), |r| r.table())
        }
        Workload::Log(args) => {
            let live = Shown::new(args.run.live()?, "log", "appends", None);
            live.run(args.run.json.as_deref(), || log::run(&args), |r| r.table())
        }
        Workload::Ring(args) => {
            args.run.refuse_live("ring measures a bare mesh between two threads and reports only its end")?;
            Shown::none().run(args.run.json.as_deref(), || ring::run(&args), |r| r.table())
        }
        Workload::Report(args) => {
            print!("{}", sluice_bench::report::run(&args)?);
            Ok(())
        }
        Workload::Pipeline(args) => {
            let live = Shown::new(args.run.live()?, "pipeline", "results", args.run.rate);
            live.run(args.run.json.as_deref(), || pipeline::run(&args), |r| r.table())
        }
        Workload::Checkpoint(args) => {
            let live = Shown::new(args.run.live()?, "checkpoint", "results", Some(args.rate()));
            let run = || sluice_bench::workloads::checkpoint::run(&args);
            live.run(args.run.json.as_deref(), run, |r| r.table())
        }
        Workload::Nexmark(args) => {
            let live = Shown::new(args.run.live()?, "nexmark", "results", args.run.rate);
            live.run(args.run.json.as_deref(), || nexmark::run(&args), |r| r.table())
        }
        Workload::Footprint(args) => Shown::none().run(args.json.as_deref(), || footprint::run(&args), |r| r.table()),
        Workload::Cleaning(args) => {
            args.run.refuse_live("cleaning compares two whole runs and reports only their ends")?;
            Shown::none().run(args.run.json.as_deref(), || cleaning::run(&args), |r| r.table())
        }
        Workload::Cdc(args) => {
            let run = || sluice_bench::workloads::cdc::run(&args);
            Shown::none().run(args.json.as_deref(), run, |r| r.table())
        }
        #[cfg(feature = "kafka-client")]
        Workload::PipelineChild(args) => sluice_bench::workloads::pipeline_procs::child::run(&args),
        Workload::Kafka(args) => {
            let options = live::options(args.common.live, args.common.live_linger)?;
            let live = Shown::new(options, "kafka", "records appended", None);
            live.run(args.common.json.as_deref(), || kafka::run(&args), |r| r.table())
        }
    }
}

/// A run's `--live` page, if asked: what it is fed before the workload sets its own.
struct Shown<'a> {
    options: Option<live::LiveOptions>,
    workload: &'a str,
    unit: &'a str,
    offered: Option<u64>,
}

impl<'a> Shown<'a> {
    fn new(options: Option<live::LiveOptions>, workload: &'a str, unit: &'a str, offered: Option<u64>) -> Self {
        Shown { options, workload, unit, offered }
    }

    fn none() -> Self {
        Shown { options: None, workload: "", unit: "", offered: None }
    }

    /// Runs `run` with the page served from its start; prints the report's table, writes
    /// `--json`, then hands the report to the page (which stays for `--live-linger`).
    fn run<R: Serialize>(
        self,
        json: Option<&Path>,
        run: impl FnOnce() -> Result<R>,
        table: impl FnOnce(&R) -> Table,
    ) -> Result<()> {
        let page = self.options.map(|o| live::Live::start(o, self.workload, self.unit, self.offered)).transpose()?;
        let report = match run() {
            Ok(report) => report,
            Err(e) => {
                if let Some(page) = page {
                    page.fail(&e);
                }
                return Err(e);
            }
        };
        table(&report).print();
        if let Some(path) = json {
            write_json(path, &report)?;
        }
        if let Some(page) = page {
            page.finish(&report)?;
        }
        Ok(())
    }
}
