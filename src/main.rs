//! The `sluice` command line: produce to and consume from a partition log in a data
//! directory, and inspect it.
//!
//! Every subcommand that opens a data directory takes `--data-dir DIR`. A partition
//! lives in `DIR/<topic>-<partition>`, with the topic name validated as Kafka does.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use sluice_io::{FsyncPolicy, Log, LogConfig, Offset, Record, Timestamp, UringStorage};

#[derive(Debug, Parser)]
#[command(name = "sluice", version, about = "sluice: a thread-per-core streaming engine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Work with one partition log directly.
    #[command(subcommand)]
    Log(LogCommand),
}

#[derive(Debug, Subcommand)]
enum LogCommand {
    /// Append lines from stdin, one record each (`key<TAB>value`, or a bare value).
    Produce(ProduceArgs),
    /// Print records as `offset<TAB>event_time<TAB>key<TAB>value`.
    Consume(ConsumeArgs),
    /// Print the partition's offsets, segments, size and what opening it recovered.
    Info(PartitionArgs),
}

#[derive(Debug, Args)]
struct PartitionArgs {
    /// The data directory.
    #[arg(long)]
    data_dir: PathBuf,
    /// The topic.
    #[arg(long)]
    topic: String,
    /// The partition.
    #[arg(long, default_value_t = 0)]
    partition: u32,
}

#[derive(Debug, Args)]
struct ProduceArgs {
    #[command(flatten)]
    partition: PartitionArgs,
    /// Durability of each append: always, interval:MS or never.
    #[arg(long, default_value = "always")]
    fsync: String,
    /// Records per batch.
    #[arg(long, default_value_t = 100)]
    batch: usize,
}

#[derive(Debug, Args)]
struct ConsumeArgs {
    #[command(flatten)]
    partition: PartitionArgs,
    /// Where to start: earliest, latest, an offset, or time:MS (the first record at or
    /// after that event time).
    #[arg(long, default_value = "earliest")]
    from: String,
    /// Stop after this many records.
    #[arg(long)]
    max: Option<u64>,
}

fn partition_dir(args: &PartitionArgs) -> Result<PathBuf> {
    sluice_engine::validate_name("topic", &args.topic)?;
    Ok(args.data_dir.join(format!("{}-{}", args.topic, args.partition)))
}

fn on_executor<T: Send + 'static>(f: impl AsyncFnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(1 << 20)
        .spawn(move || async move { f().await })
        .map_err(|e| anyhow::anyhow!("starting the executor: {e}"))?
        .join()
        .map_err(|e| anyhow::anyhow!("executor thread failed: {e:?}"))?
}

async fn open(dir: &Path, config: LogConfig, must_exist: bool) -> Result<Log> {
    if must_exist && !dir.is_dir() {
        bail!("no such partition: {}", dir.display());
    }
    let (log, report) =
        Log::open(UringStorage, dir, config).await.with_context(|| format!("opening {}", dir.display()))?;
    if let Some(t) = &report.truncated {
        eprintln!("recovery cut {} at {}: {}", t.path.display(), t.pos, t.reason);
    }
    for (path, pos, reason) in &report.damaged_segments {
        eprintln!("damaged segment {} at {pos}: {reason}", path.display());
    }
    Ok(log)
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Log(LogCommand::Produce(args)) => produce(args),
        Command::Log(LogCommand::Consume(args)) => consume(args),
        Command::Log(LogCommand::Info(args)) => info(args),
    }
}

fn produce(args: ProduceArgs) -> Result<()> {
    let dir = partition_dir(&args.partition)?;
    let fsync: FsyncPolicy = args.fsync.parse()?;
    let batch = args.batch.max(1);
    on_executor(async move || {
        let log = open(&dir, LogConfig { fsync, ..LogConfig::default() }, false).await?;
        let stdin = std::io::stdin();
        let mut lines: Vec<String> = Vec::with_capacity(batch);
        let mut first = None;
        let mut last = None;
        let mut input = stdin.lock().lines();
        loop {
            lines.clear();
            for line in input.by_ref().take(batch) {
                lines.push(line.context("reading stdin")?);
            }
            if lines.is_empty() {
                break;
            }
            let now = Timestamp::now();
            let records: Vec<Record<'_>> = lines
                .iter()
                .map(|l| match l.split_once('\t') {
                    Some((k, v)) => Record::keyed(k.as_bytes(), v.as_bytes(), now),
                    None => Record::unkeyed(l.as_bytes(), now),
                })
                .collect();
            let info = log.append(&records).await?;
            first.get_or_insert(info.base_offset);
            last = Some(info.last_offset);
        }
        log.close().await?;
        match (first, last) {
            (Some(f), Some(l)) => println!("appended offsets {f}..={l}"),
            _ => println!("appended nothing"),
        }
        Ok(())
    })
}

fn consume(args: ConsumeArgs) -> Result<()> {
    let dir = partition_dir(&args.partition)?;
    on_executor(async move || {
        let log = open(&dir, LogConfig::default(), true).await?;
        let mut at = match args.from.as_str() {
            "earliest" => log.start_offset(),
            "latest" => log.end_offset(),
            s if s.starts_with("time:") => {
                let ms: i64 = s[5..].parse().with_context(|| format!("bad time in --from {s}"))?;
                log.offset_for_time(Timestamp(ms)).await?.unwrap_or(log.end_offset())
            }
            s => Offset(
                s.parse().with_context(|| format!("--from {s}: expected earliest, latest, an offset or time:MS"))?,
            ),
        };
        let mut left = args.max.unwrap_or(u64::MAX);
        let mut out = std::io::stdout().lock();
        while left > 0 {
            let batches = log.read(at, 1 << 20).await?;
            if batches.is_empty() {
                break;
            }
            for r in batches.records() {
                let r = r?;
                if left == 0 {
                    break;
                }
                let key = r.key().map(String::from_utf8_lossy).unwrap_or_default();
                writeln!(out, "{}\t{}\t{}\t{}", r.offset(), r.event_time().0, key, String::from_utf8_lossy(r.value()))?;
                left -= 1;
            }
            at = batches.next_offset();
        }
        Ok(())
    })
}

fn info(args: PartitionArgs) -> Result<()> {
    let dir = partition_dir(&args)?;
    on_executor(async move || {
        let log = open(&dir, LogConfig::default(), true).await?;
        println!("start_offset\t{}", log.start_offset());
        println!("end_offset\t{}", log.end_offset());
        println!("segments\t{}", log.segment_count());
        println!("bytes\t{}", log.size_bytes());
        Ok(())
    })
}
