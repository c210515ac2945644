//! The `sluice` command line, like Kafka's topic tools and kcat, over a data directory.
//!
//! Every subcommand takes `--data-dir DIR` and starts the engine on it (so it refuses a
//! directory another sluice process holds). Errors print as one line on stderr and the
//! exit status is non-zero.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use futures_lite::future::block_on;
use sluice_engine::{Consumer, Engine, EngineConfig, EngineHandle, SeekTo, TopicConfig};
use sluice_io::{Offset, Timestamp};

#[derive(Debug, Parser)]
#[command(name = "sluice", version, about = "sluice: a thread-per-core streaming engine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create, list, describe, grow and delete topics.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Send stdin to a topic, one record per line: `key<TAB>value`, or a value alone.
    Produce(ProduceArgs),
    /// Print a topic's records as `partition<TAB>offset<TAB>key<TAB>value`.
    Consume(ConsumeArgs),
}

#[derive(Debug, Args)]
struct DataDir {
    /// The data directory.
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
}

#[derive(Debug, Subcommand)]
enum TopicCommand {
    /// Create a topic.
    Create(CreateArgs),
    /// List topics.
    List(DataDir),
    /// Show a topic's settings and its partitions' shards and offsets.
    Describe(TopicArgs),
    /// Delete a topic and its data.
    Delete(TopicArgs),
    /// Grow a topic to more partitions.
    AddPartitions(AddPartitionsArgs),
}

#[derive(Debug, Args)]
struct TopicArgs {
    /// The topic.
    topic: String,
    #[command(flatten)]
    dir: DataDir,
}

#[derive(Debug, Args)]
struct CreateArgs {
    /// The topic.
    topic: String,
    #[command(flatten)]
    dir: DataDir,
    /// Number of partitions.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// Durability of each append: always, interval:MS or never.
    #[arg(long, default_value = "interval:5")]
    fsync: String,
    /// delete or compact.
    #[arg(long, default_value = "delete")]
    cleanup: String,
    /// Delete closed segments older than this many milliseconds.
    #[arg(long)]
    retention_ms: Option<u64>,
    /// Delete the oldest closed segments while a partition is larger than this.
    #[arg(long)]
    retention_bytes: Option<u64>,
    /// Segment size before a roll.
    #[arg(long, default_value_t = 256 << 20)]
    segment_bytes: u64,
    /// The largest record (key plus value) accepted.
    #[arg(long, default_value_t = 1 << 20)]
    max_record_bytes: usize,
}

#[derive(Debug, Args)]
struct AddPartitionsArgs {
    /// The topic.
    topic: String,
    #[command(flatten)]
    dir: DataDir,
    /// The new partition count.
    #[arg(long)]
    partitions: u32,
}

#[derive(Debug, Args)]
struct ProduceArgs {
    /// The topic.
    topic: String,
    #[command(flatten)]
    dir: DataDir,
    /// Print each record's partition and offset.
    #[arg(long)]
    verbose: bool,
}

#[derive(Debug, Args)]
struct ConsumeArgs {
    /// The topic.
    topic: String,
    #[command(flatten)]
    dir: DataDir,
    /// Start at the first offset held (the default is the end: only new records).
    #[arg(long, conflicts_with_all = ["offset", "timestamp"])]
    from_beginning: bool,
    /// Start at this offset (with --partition, or in every partition).
    #[arg(long, conflicts_with = "timestamp")]
    offset: Option<u64>,
    /// Start at the first record at or after this event time (ms since the epoch).
    #[arg(long)]
    timestamp: Option<i64>,
    /// Read only this partition.
    #[arg(long)]
    partition: Option<u32>,
    /// Stop after this many records.
    #[arg(long)]
    max: Option<u64>,
    /// Keep waiting for new records instead of stopping at the end.
    #[arg(long)]
    follow: bool,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Topic(TopicCommand::Create(a)) => with_engine(&a.dir, |h| create(h, &a)),
        Command::Topic(TopicCommand::List(dir)) => with_engine(&dir, |h| {
            for t in h.list_topics() {
                println!("{t}");
            }
            Ok(())
        }),
        Command::Topic(TopicCommand::Describe(a)) => with_engine(&a.dir, |h| describe(h, &a.topic)),
        Command::Topic(TopicCommand::Delete(a)) => with_engine(&a.dir, |h| {
            block_on(h.delete_topic(&a.topic))?;
            println!("deleted topic {}", a.topic);
            Ok(())
        }),
        Command::Topic(TopicCommand::AddPartitions(a)) => with_engine(&a.dir, |h| {
            let d = block_on(h.add_partitions(&a.topic, a.partitions))?;
            println!("topic {} now has {} partitions", a.topic, d.shards.len());
            Ok(())
        }),
        Command::Produce(a) => with_engine(&a.dir, |h| produce(h, &a)),
        Command::Consume(a) => with_engine(&a.dir, |h| consume(h, &a)),
    }
}

/// Starts the engine on the data directory, runs `f` with a handle, and shuts it down.
fn with_engine(dir: &DataDir, f: impl FnOnce(&EngineHandle) -> Result<()>) -> Result<()> {
    let engine = block_on(Engine::open(EngineConfig::new(&dir.data_dir)))
        .with_context(|| format!("opening {}", dir.data_dir.display()))?;
    let result = f(&engine.handle());
    let shutdown = block_on(engine.shutdown()).context("shutting down");
    result.and(shutdown)
}

fn create(h: &EngineHandle, a: &CreateArgs) -> Result<()> {
    let config = TopicConfig {
        fsync: a.fsync.clone(),
        cleanup: a.cleanup.clone(),
        retention_ms: a.retention_ms,
        retention_bytes: a.retention_bytes,
        segment_bytes: a.segment_bytes,
        max_record_bytes: a.max_record_bytes,
        ..TopicConfig::default()
    };
    let d = block_on(h.create_topic(&a.topic, a.partitions, Some(config)))?;
    println!("created topic {} with {} partitions", d.name, d.shards.len());
    Ok(())
}

fn describe(h: &EngineHandle, topic: &str) -> Result<()> {
    let d = h.describe_topic(topic)?;
    let c = &d.config;
    println!(
        "topic {}\tpartitions {}\tfsync {}\tcleanup {}\tsegment_bytes {}\tretention_ms {}\tretention_bytes {}\tmax_record_bytes {}",
        d.name,
        d.shards.len(),
        c.fsync,
        c.cleanup,
        c.segment_bytes,
        c.retention_ms.map_or("none".into(), |v| v.to_string()),
        c.retention_bytes.map_or("none".into(), |v| v.to_string()),
        c.max_record_bytes
    );
    for (p, shard) in d.shards.iter().enumerate() {
        let (start, end) = block_on(h.offsets(topic, p as u32))?;
        println!("partition {p}\tshard {shard}\tstart {start}\tend {end}");
    }
    Ok(())
}

fn produce(h: &EngineHandle, a: &ProduceArgs) -> Result<()> {
    h.describe_topic(&a.topic)?;
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    // Sends go out a window at a time, so that a window shares batches and fsyncs.
    const WINDOW: usize = 1000;
    let mut lines = stdin.lock().lines();
    let mut total = 0u64;
    loop {
        let window: Vec<String> =
            lines.by_ref().take(WINDOW).collect::<std::io::Result<_>>().context("reading stdin")?;
        if window.is_empty() {
            break;
        }
        let now = Timestamp::now();
        let sends = window.iter().map(|line| {
            let (key, value) = match line.split_once('\t') {
                Some((k, v)) => (Some(k.as_bytes()), v.as_bytes()),
                None => (None, line.as_bytes()),
            };
            h.send(&a.topic, key, value, now)
        });
        let results = block_on(join_all(sends.collect()));
        for r in results {
            let (p, off) = r?;
            total += 1;
            if a.verbose {
                writeln!(out, "{p}\t{off}")?;
            }
        }
    }
    if !a.verbose {
        eprintln!("produced {total} records to {}", a.topic);
    }
    Ok(())
}

/// Awaits every future, concurrently, in order.
async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<_> = futures.into_iter().map(|f| Some(Box::pin(f))).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, out) in futures.iter_mut().zip(outputs.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    outputs.into_iter().map(|o| o.expect("every future finished")).collect()
}

fn consume(h: &EngineHandle, a: &ConsumeArgs) -> Result<()> {
    let mut consumer = Consumer::new(h.clone(), 1 << 20);
    let mut parts = consumer.partitions_of(&a.topic)?;
    if let Some(p) = a.partition {
        if !parts.iter().any(|(_, q)| *q == p) {
            bail!("partition {p} out of range: topic {:?} has {} partitions", a.topic, parts.len());
        }
        parts.retain(|(_, q)| *q == p);
    }
    let start = match (a.from_beginning, a.offset, a.timestamp) {
        (true, _, _) => SeekTo::Earliest,
        (_, Some(o), _) => SeekTo::Offset(Offset(o)),
        (_, _, Some(t)) => SeekTo::Timestamp(Timestamp(t)),
        _ => SeekTo::Latest,
    };
    block_on(consumer.assign(&parts, start))?;
    let ends: Vec<(String, u32, Offset)> =
        parts.iter().map(|(t, p)| Ok((t.clone(), *p, block_on(h.offsets(t, *p))?.1))).collect::<Result<_>>()?;
    let mut left = a.max.unwrap_or(u64::MAX);
    let mut out = std::io::stdout().lock();
    while left > 0 {
        let caught_up = ends.iter().all(|(t, p, end)| consumer.positions()[&(t.clone(), *p)] >= *end);
        if caught_up && !a.follow {
            break;
        }
        let wait = if a.follow { Duration::from_millis(500) } else { Duration::ZERO };
        for polled in block_on(consumer.poll(wait))? {
            for r in polled.batches.records() {
                if left == 0 {
                    break;
                }
                let r = r?;
                let key = r.key().map(String::from_utf8_lossy).unwrap_or_default();
                writeln!(out, "{}\t{}\t{}\t{}", polled.partition, r.offset(), key, String::from_utf8_lossy(r.value()))?;
                left -= 1;
            }
        }
    }
    Ok(())
}
