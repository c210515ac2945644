//! `sluice-bench <workload> [options]`: parses the command line, runs the workload from the
//! `sluice_bench` library, prints its table and writes `--json` if asked.

use anyhow::Result;
use clap::{Parser, Subcommand};
use sluice_bench::{
    harness::write_json,
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
    /// Several runs' --json reports side by side (and their latency curves on one chart
    /// with --plot)
    Report(sluice_bench::report::ReportArgs),
}

fn main() -> Result<()> {
    match Cli::parse().workload {
        Workload::Log(args) if args.is_e2e() => {
            let report = sluice_bench::workloads::e2e::run(&args)?;
            report.table().print();
            if let Some(path) = &args.run.json {
                write_json(path, &report)?;
            }
        }
        Workload::Log(args) => {
            let report = log::run(&args)?;
            report.table().print();
            if let Some(path) = &args.run.json {
                write_json(path, &report)?;
            }
        }
        Workload::Ring(args) => {
            let report = ring::run(&args)?;
            report.table().print();
            if let Some(path) = &args.run.json {
                write_json(path, &report)?;
            }
        }
        Workload::Report(args) => print!("{}", sluice_bench::report::run(&args)?),
        Workload::Pipeline(args) => {
            let report = pipeline::run(&args)?;
            report.table().print();
            if let Some(path) = &args.run.json {
                write_json(path, &report)?;
            }
        }
        Workload::Checkpoint(args) => {
            let report = sluice_bench::workloads::checkpoint::run(&args)?;
            report.table().print();
            if let Some(path) = &args.run.json {
                write_json(path, &report)?;
            }
        }
        Workload::Nexmark(args) => {
            let report = nexmark::run(&args)?;
            report.table().print();
            if let Some(path) = &args.run.json {
                write_json(path, &report)?;
            }
        }
        Workload::Footprint(args) => {
            let report = footprint::run(&args)?;
            report.table().print();
            if let Some(path) = &args.json {
                write_json(path, &report)?;
            }
        }
        Workload::Cleaning(args) => {
            let report = cleaning::run(&args)?;
            report.table().print();
            if let Some(path) = &args.run.json {
                write_json(path, &report)?;
            }
        }
        Workload::Kafka(args) => {
            let report = kafka::run(&args)?;
            report.table().print();
            if let Some(path) = &args.common.json {
                write_json(path, &report)?;
            }
        }
    }
    Ok(())
}
