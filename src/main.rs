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
use sluice_engine::topic::configs;
use sluice_engine::{
    Consumer, Engine, EngineConfig, EngineHandle, GroupConsumer, GroupOptions, OffsetReset, OwnedHeader, OwnedRecord,
    SeekTo, TopicConfig,
};
use sluice_io::{Offset, PartitionId, Timestamp};

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
    /// List, describe and reset consumer groups.
    #[command(subcommand)]
    Group(GroupCommand),
    /// Count a topic's records per key in tumbling event-time windows, with a pipeline on
    /// every shard; prints `window_start<TAB>window_end<TAB>key<TAB>count` (ms since the
    /// epoch) as each window closes.
    Count(CountArgs),
    /// Serve the data directory over the Kafka protocol until SIGINT or SIGTERM; prints
    /// `listening on HOST:PORT` once clients can connect.
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
struct ServeArgs {
    #[command(flatten)]
    dir: DataDir,
    /// The address to listen on (loopback unless told otherwise; port 0 picks one).
    #[arg(long, default_value = "127.0.0.1:9092")]
    listen: std::net::SocketAddr,
    /// The `HOST:PORT` clients are told to connect to, if not the listen address.
    #[arg(long, value_name = "HOST:PORT")]
    advertise: Option<String>,
    /// Shards (and listener executors); one per CPU by default.
    #[arg(allow_negative_numbers = true, long)]
    shards: Option<usize>,
    /// Serve connections on the shards' own executors instead of on listener executors of
    /// their own (thread-per-core; see tuning.md for what it measured)
    #[arg(long)]
    on_shards: bool,
    /// How often each shard applies retention, compaction and segment.ms rolls to its
    /// partitions, in milliseconds (Kafka's log.retention.check.interval.ms).
    #[arg(allow_negative_numbers = true, long, value_name = "MS", default_value_t = 300_000, value_parser = clap::value_parser!(u64).range(1..))]
    retention_check_ms: u64,
    /// Partitions of a topic created without a count: auto-created, or by CreateTopics
    /// with -1 (Kafka's num.partitions).
    #[arg(allow_negative_numbers = true, long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    num_partitions: u32,
    /// Whether a client's Metadata request for an unknown topic creates it (Kafka's
    /// auto.create.topics.enable); with false it gets UNKNOWN_TOPIC_OR_PARTITION.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    auto_create_topics: bool,
    /// The longest transaction timeout a transactional producer may ask for, in
    /// milliseconds (Kafka's transaction.max.timeout.ms); a longer one gets
    /// INVALID_TRANSACTION_TIMEOUT.
    #[arg(allow_negative_numbers = true, long, value_name = "MS", default_value_t = 900_000, value_parser = clap::value_parser!(i32).range(1..))]
    transaction_max_timeout_ms: i32,
    /// Serve Prometheus metrics at http://ADDR/metrics (loopback unless told otherwise;
    /// port 0 picks one); printed as `metrics on ADDR` before `listening on`.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
}

#[derive(Debug, Args)]
struct CountArgs {
    /// The topic.
    topic: String,
    #[command(flatten)]
    dir: DataDir,
    /// Window length in milliseconds.
    #[arg(allow_negative_numbers = true, long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    window_ms: u64,
    /// How far out of order records may arrive, in milliseconds.
    #[arg(allow_negative_numbers = true, long, default_value_t = 0)]
    out_of_orderness_ms: u64,
    /// Start at the first record at or after this event time (ms since the epoch);
    /// the default is the first offset held.
    #[arg(allow_negative_numbers = true, long)]
    timestamp: Option<i64>,
    /// Keep counting new records instead of stopping at the end (stop with Ctrl-C).
    #[arg(long)]
    follow: bool,
}

#[derive(Debug, Subcommand)]
enum GroupCommand {
    /// List groups with members or committed offsets.
    List(DataDir),
    /// Show a group's members and, per partition, committed offset, end and lag.
    Describe(GroupArgs),
    /// Move a group's committed offsets for a topic (the group must have no members).
    ResetOffsets(ResetArgs),
}

#[derive(Debug, Args)]
struct GroupArgs {
    /// The group.
    group: String,
    #[command(flatten)]
    dir: DataDir,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("to").required(true).args(["to_earliest", "to_latest", "to_offset", "to_datetime"])))]
struct ResetArgs {
    /// The group.
    group: String,
    #[command(flatten)]
    dir: DataDir,
    /// The topic whose partitions to reset.
    #[arg(long)]
    topic: String,
    /// To the first offset held.
    #[arg(long)]
    to_earliest: bool,
    /// To the end.
    #[arg(long)]
    to_latest: bool,
    /// To this offset (clamped to what each partition holds).
    #[arg(allow_negative_numbers = true, long)]
    to_offset: Option<u64>,
    /// To the first record at or after this event time (ms since the epoch).
    #[arg(allow_negative_numbers = true, long)]
    to_datetime: Option<i64>,
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
    /// Change a topic's settings by Kafka's names (cleanup.policy, retention.ms,
    /// retention.bytes, segment.bytes, segment.ms, delete.retention.ms,
    /// min.cleanable.dirty.ratio, max.message.bytes, flush.messages, flush.ms, ...); the
    /// others keep their values. A server on the directory must not be running.
    Alter(AlterArgs),
    /// Apply retention and compaction to every partition now (the server does this by
    /// itself every --retention-check-ms); prints what each partition gave back.
    Clean(TopicArgs),
    /// Make a partition's records below an offset unreadable (Kafka's DeleteRecords): its
    /// start offset moves there and the segments wholly below it are deleted.
    Trim(TrimArgs),
}

#[derive(Debug, Args)]
struct TrimArgs {
    /// The topic.
    topic: String,
    #[command(flatten)]
    dir: DataDir,
    /// The partition.
    #[arg(allow_negative_numbers = true, long)]
    partition: u32,
    /// The new start offset (at most the partition's end).
    #[arg(allow_negative_numbers = true, long)]
    before: u64,
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
    #[arg(allow_negative_numbers = true, long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    partitions: u32,
    /// Durability of each append: always, interval:MS or never.
    #[arg(long, default_value = "interval:5")]
    fsync: String,
    /// delete, compact, or compact,delete.
    #[arg(long, default_value = "delete")]
    cleanup: String,
    /// Roll the active segment once it is this many milliseconds old.
    #[arg(allow_negative_numbers = true, long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    segment_ms: Option<u64>,
    /// How long compaction keeps a tombstone (a key with a null value), in milliseconds.
    #[arg(allow_negative_numbers = true, long, value_name = "MS", default_value_t = 86_400_000)]
    delete_retention_ms: u64,
    /// Compact once this share (0 to 1) of the closed segments is new since the last
    /// compaction.
    #[arg(allow_negative_numbers = true, long, value_name = "RATIO", default_value_t = 0.5)]
    min_cleanable_dirty_ratio: f64,
    /// Delete closed segments older than this many milliseconds.
    #[arg(allow_negative_numbers = true, long)]
    retention_ms: Option<u64>,
    /// Delete the oldest closed segments while a partition is larger than this.
    #[arg(allow_negative_numbers = true, long)]
    retention_bytes: Option<u64>,
    /// Segment size before a roll.
    #[arg(allow_negative_numbers = true, long, default_value_t = 256 << 20)]
    segment_bytes: u64,
    /// The largest record (key, value and headers) accepted.
    #[arg(allow_negative_numbers = true, long, default_value_t = 1 << 20)]
    max_record_bytes: usize,
    /// The codec Kafka fetches return batches in: producer (each batch's own), uncompressed,
    /// gzip, snappy, lz4 or zstd (Kafka's compression.type; stored uncompressed).
    #[arg(long, default_value = "producer")]
    compression: String,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("changes").required(true).multiple(true).args(["config", "delete_config"])))]
struct AlterArgs {
    /// The topic.
    topic: String,
    #[command(flatten)]
    dir: DataDir,
    /// A setting to change, as NAME=VALUE (repeatable).
    #[arg(long, value_name = "NAME=VALUE")]
    config: Vec<String>,
    /// A setting to put back to its default (repeatable).
    #[arg(long, value_name = "NAME")]
    delete_config: Vec<String>,
}

#[derive(Debug, Args)]
struct AddPartitionsArgs {
    /// The topic.
    topic: String,
    #[command(flatten)]
    dir: DataDir,
    /// The new partition count.
    #[arg(allow_negative_numbers = true, long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
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
    /// A header every record gets: NAME=VALUE, or NAME alone for a null value (as kcat's
    /// -H). Repeatable; names may repeat.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    headers: Vec<String>,
    /// A line with an empty value (`key<TAB>`) sends a null value: a tombstone, which
    /// compaction removes with the key's earlier records.
    #[arg(long)]
    null_empty: bool,
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
    #[arg(allow_negative_numbers = true, long, conflicts_with = "timestamp")]
    offset: Option<u64>,
    /// Start at the first record at or after this event time (ms since the epoch).
    #[arg(allow_negative_numbers = true, long)]
    timestamp: Option<i64>,
    /// Read only this partition.
    #[arg(allow_negative_numbers = true, long)]
    partition: Option<u32>,
    /// Stop after this many records.
    #[arg(allow_negative_numbers = true, long)]
    max: Option<u64>,
    /// Keep waiting for new records instead of stopping at the end.
    #[arg(long)]
    follow: bool,
    /// Consume as a member of this group: its partitions start at the group's committed
    /// offsets (else per --from-beginning), and the positions are committed at the end.
    #[arg(long, conflicts_with_all = ["offset", "timestamp", "partition"])]
    group: Option<String>,
    /// Print each record's headers as a fifth column: NAME=VALUE pairs joined by ','
    /// (NAME alone for a null value).
    #[arg(long)]
    headers: bool,
    /// Print this for a null key or value (the default prints nothing, as for an empty one).
    #[arg(long, value_name = "TEXT")]
    null: Option<String>,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line, as every other error: clap's first paragraph names the problem.
            let text = e.render().to_string();
            let first: Vec<&str> = text.lines().take_while(|l| !l.trim().is_empty()).map(str::trim).collect();
            eprintln!("{} (see --help)", first.join(" "));
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that went away (`sluice consume ... | head -1`) ends the output, not in
        // an error.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, each cause once: an error whose message already
/// quotes its source (as the engine's do) is not followed by that source again.
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Topic(TopicCommand::Create(a)) => with_new_engine(&a.dir, |h| create(h, &a)),
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
        Command::Topic(TopicCommand::Alter(a)) => with_engine(&a.dir, |h| alter(h, &a)),
        Command::Topic(TopicCommand::Clean(a)) => with_engine(&a.dir, |h| clean(h, &a.topic)),
        Command::Topic(TopicCommand::Trim(a)) => with_engine(&a.dir, |h| {
            let start = block_on(h.delete_records(&a.topic, PartitionId(a.partition), Offset(a.before)))?;
            println!("partition {}\tstart {start}", a.partition);
            Ok(())
        }),
        Command::Produce(a) => with_engine(&a.dir, |h| produce(h, &a)),
        Command::Consume(a) if a.group.is_some() => {
            // Blocked before the engine's threads start, so that SIGINT and SIGTERM reach
            // the loop below (which commits what was printed) instead of ending the process.
            let signals = signals::block_termination()?;
            with_engine(&a.dir, |h| consume_group(h, &a, &signals))
        }
        Command::Consume(a) => with_engine(&a.dir, |h| consume(h, &a)),
        Command::Count(a) => with_engine(&a.dir, |h| count(h, &a)),
        Command::Serve(a) => serve(&a),
        Command::Group(GroupCommand::List(dir)) => with_engine(&dir, |h| {
            for g in block_on(h.list_groups())? {
                println!("{g}");
            }
            Ok(())
        }),
        Command::Group(GroupCommand::Describe(a)) => with_engine(&a.dir, |h| describe_group(h, &a.group)),
        Command::Group(GroupCommand::ResetOffsets(a)) => with_engine(&a.dir, |h| {
            let to = match (a.to_earliest, a.to_latest, a.to_offset, a.to_datetime) {
                (true, ..) => SeekTo::Earliest,
                (_, true, ..) => SeekTo::Latest,
                (_, _, Some(o), _) => SeekTo::Offset(Offset(o)),
                (_, _, _, Some(t)) => SeekTo::Timestamp(Timestamp(t)),
                _ => unreachable!("clap requires one target"),
            };
            for (topic, p, offset) in block_on(h.reset_offsets(&a.group, &a.topic, to))? {
                println!("{topic}\t{p}\t{offset}");
            }
            Ok(())
        }),
    }
}

/// `sluice count`: a pipeline from the topic through a per-key tumbling window count to
/// stdout.
fn count(h: &EngineHandle, a: &CountArgs) -> Result<()> {
    use sluice_engine::dataflow::{
        Pipeline, PipelineConfig, WatermarkStrategy, Windows,
        topic::{StartFrom, TopicRecord, TopicSource},
    };
    let start = a.timestamp.map_or(StartFrom::Earliest, |t| StartFrom::Timestamp(Timestamp(t)));
    let mut source = block_on(TopicSource::open(h, &a.topic, start))?;
    if !a.follow {
        source = source.bounded();
    }
    let (window, bound) = (Duration::from_millis(a.window_ms), Duration::from_millis(a.out_of_orderness_ms));
    let errors = source.clone();
    Pipeline::new(PipelineConfig::default())
        .run(move |scope| {
            // Partitions with nothing new stop holding the windows back after a second.
            let strategy = WatermarkStrategy::bounded_out_of_orderness(bound, TopicRecord::event_time)
                .with_idle_timeout(Duration::from_secs(1));
            scope
                .topic_source(&source, strategy)
                .key_by(|r: &TopicRecord| {
                    r.key.as_deref().map(|k| String::from_utf8_lossy(k).into_owned()).unwrap_or_default()
                })
                .window(Windows::tumbling(window))
                .count()
                .map(|r| format!("{}\t{}\t{}\t{}", r.window.start.millis(), r.window.end.millis(), r.key, r.value))
                .print();
        })
        .map_err(|e| errors.take_error().map_or(e, Into::into))?;
    Ok(())
}

/// `sluice serve`: the engine and its Kafka listener, until SIGINT or SIGTERM.
fn serve(a: &ServeArgs) -> Result<()> {
    use sluice_engine::kafka::{KafkaConfig, KafkaServer};
    use sluice_engine::metrics::http::MetricsServer;
    let advertise = match &a.advertise {
        None => None,
        Some(s) => {
            let (host, port) = s.rsplit_once(':').with_context(|| format!("--advertise {s:?} is not HOST:PORT"))?;
            let port: u16 = port.parse().with_context(|| format!("--advertise {s:?}: bad port"))?;
            Some((host.to_string(), port))
        }
    };
    // Before any thread starts, so every thread inherits the mask and only the wait
    // below sees these signals.
    let signals = signals::block_termination()?;
    let mut config = EngineConfig::new(&a.dir.data_dir);
    config.shards = a.shards;
    config.retention_check = Duration::from_millis(a.retention_check_ms);
    let engine = block_on(Engine::open(config)).with_context(|| format!("opening {}", a.dir.data_dir.display()))?;
    let mut kafka = KafkaConfig::new(a.listen);
    kafka.advertise = advertise;
    kafka.executors = engine.shards();
    kafka.on_shards = a.on_shards;
    kafka.num_partitions = a.num_partitions;
    kafka.auto_create_topics = a.auto_create_topics;
    kafka.transaction_max_timeout_ms = a.transaction_max_timeout_ms;
    let server = match KafkaServer::start(engine.handle(), kafka) {
        Ok(s) => s,
        Err(e) => {
            let _ = block_on(engine.shutdown());
            return Err(e.into());
        }
    };
    let metrics = match a.metrics_listen.map(|addr| MetricsServer::for_engine(addr, engine.handle())).transpose() {
        Ok(m) => m,
        Err(e) => {
            server.shutdown();
            let _ = block_on(engine.shutdown());
            return Err(e).context("starting the metrics endpoint");
        }
    };
    if let Some(m) = &metrics {
        println!("metrics on {}", m.local_addr());
    }
    println!("listening on {}", server.local_addr());
    std::io::stdout().flush()?;
    let signal = signals::wait(&signals)?;
    eprintln!("sluice serve: signal {signal}, shutting down");
    server.shutdown();
    // The metrics endpoint answers 503 while the engine shuts down, then stops.
    let stopped = block_on(engine.shutdown()).context("shutting down");
    drop(metrics);
    stopped
}

mod signals {
    //! Waiting for SIGINT or SIGTERM without a handler: the signals are blocked in every
    //! thread and taken synchronously with `sigwait`.

    /// SIGINT and SIGTERM, blocked in the calling thread (and so in threads it starts).
    pub(super) fn block_termination() -> anyhow::Result<libc::sigset_t> {
        // SAFETY: `set` is a local the libc calls initialise before use (sigemptyset
        // first); pthread_sigmask only changes this thread's mask. Covered by the
        // `serve` test in tests/kafka_serve.rs, which stops the server with SIGTERM.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            if rc != 0 {
                anyhow::bail!("blocking SIGINT and SIGTERM: {}", std::io::Error::from_raw_os_error(rc));
            }
            Ok(set)
        }
    }

    /// One of the blocked signals, if one is pending; does not wait.
    pub(super) fn pending(set: &libc::sigset_t) -> anyhow::Result<Option<i32>> {
        let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `set` was filled by `block_termination`; a null info pointer is allowed;
        // `zero` is a valid timeout. Covered by tests/cli.rs, which stops a following group
        // consumer with SIGTERM.
        let rc = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &zero) };
        if rc >= 0 {
            return Ok(Some(rc));
        }
        match std::io::Error::last_os_error() {
            e if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR)) => Ok(None),
            e => anyhow::bail!("checking for a signal: {e}"),
        }
    }

    /// Waits for one of the blocked signals; returns its number.
    pub(super) fn wait(set: &libc::sigset_t) -> anyhow::Result<i32> {
        let mut signal = 0;
        // SAFETY: `set` was filled by `block_termination`; `signal` is a valid out-pointer.
        let rc = unsafe { libc::sigwait(set, &mut signal) };
        if rc != 0 {
            anyhow::bail!("waiting for a signal: {}", std::io::Error::from_raw_os_error(rc));
        }
        Ok(signal)
    }
}

/// [`with_new_engine`] on a data directory that must exist already: a mistyped path is
/// an error, not a new empty store.
fn with_engine(dir: &DataDir, f: impl FnOnce(&EngineHandle) -> Result<()>) -> Result<()> {
    let path = &dir.data_dir;
    if !path.is_dir() {
        bail!("data directory {} does not exist (sluice topic create makes one; check --data-dir)", path.display());
    }
    with_new_engine(dir, f)
}

/// Starts the engine on the data directory (creating it if needed), runs `f` with a
/// handle, and shuts it down.
fn with_new_engine(dir: &DataDir, f: impl FnOnce(&EngineHandle) -> Result<()>) -> Result<()> {
    let engine = block_on(Engine::open(EngineConfig::new(&dir.data_dir)))
        .with_context(|| format!("opening {}", dir.data_dir.display()))?;
    let result = f(&engine.handle());
    let shutdown = block_on(engine.shutdown()).context("shutting down");
    result.and(shutdown)
}

fn create(h: &EngineHandle, a: &CreateArgs) -> Result<()> {
    let config = TopicConfig {
        fsync: a.fsync.parse().with_context(|| format!("--fsync {}", a.fsync))?,
        cleanup: a.cleanup.parse().with_context(|| format!("--cleanup {}", a.cleanup))?,
        retention_ms: a.retention_ms,
        retention_bytes: a.retention_bytes,
        segment_bytes: a.segment_bytes,
        segment_ms: a.segment_ms,
        delete_retention_ms: a.delete_retention_ms,
        min_cleanable_dirty_ratio: a.min_cleanable_dirty_ratio,
        max_record_bytes: a.max_record_bytes,
        compression: a.compression.parse().with_context(|| format!("--compression {}", a.compression))?,
        ..TopicConfig::default()
    };
    let d = block_on(h.create_topic(&a.topic, a.partitions, Some(config)))?;
    println!("created topic {} with {} partitions", d.name, d.shards.len());
    Ok(())
}

fn describe(h: &EngineHandle, topic: &str) -> Result<()> {
    let d = h.describe_topic(topic)?;
    let c = &d.config;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "topic {}\tpartitions {}\tfsync {}\tcleanup {}\tsegment_bytes {}\tretention_ms {}\tretention_bytes {}\tmax_record_bytes {}\tsegment_ms {}\tdelete_retention_ms {}\tmin_cleanable_dirty_ratio {}\tcompression {}",
        d.name,
        d.shards.len(),
        c.fsync,
        c.cleanup,
        c.segment_bytes,
        c.retention_ms.map_or("none".into(), |v| v.to_string()),
        c.retention_bytes.map_or("none".into(), |v| v.to_string()),
        c.max_record_bytes,
        c.segment_ms.map_or("none".into(), |v| v.to_string()),
        c.delete_retention_ms,
        c.min_cleanable_dirty_ratio,
        c.compression
    )?;
    for c in configs::describe(&d.config, &h.topic_defaults()) {
        let source = if c.is_default() { "default" } else { "topic" };
        writeln!(out, "config {}\tvalue {}\tsource {source}", c.def.name, c.value)?;
    }
    for (p, shard) in PartitionId::all(d.partitions()).zip(&d.shards) {
        let (start, end) = block_on(h.offsets(topic, p))?;
        writeln!(out, "partition {p}\tshard {shard}\tstart {start}\tend {end}")?;
    }
    Ok(())
}

/// `sluice topic alter`: the changes are checked as a whole (a refused one changes
/// nothing), stored, and printed as each setting now reads.
fn alter(h: &EngineHandle, a: &AlterArgs) -> Result<()> {
    let mut changes = Vec::with_capacity(a.config.len() + a.delete_config.len());
    for c in &a.config {
        let (name, value) = c.split_once('=').with_context(|| format!("--config {c:?} is not NAME=VALUE"))?;
        changes.push((name.trim().to_string(), configs::ConfigOp::Set(value.to_string())));
    }
    for name in &a.delete_config {
        changes.push((name.trim().to_string(), configs::ConfigOp::Delete));
    }
    let defaults = h.topic_defaults();
    let change = |current: &TopicConfig| {
        configs::apply(current, &defaults, &changes).map_err(|e| sluice_engine::EngineError::InvalidConfig(e.message))
    };
    let d = block_on(h.alter_topic_config(&a.topic, change, false))?;
    let shown: Vec<String> = changes
        .iter()
        .filter_map(|(name, _)| configs::find(name))
        .map(|def| format!("{}={}", def.name, (def.get)(&d.config)))
        .collect();
    println!("altered topic {}: {}", d.name, shown.join(", "));
    Ok(())
}

/// `sluice topic clean`: one line per partition with what the pass gave back and where
/// the partition now starts.
fn clean(h: &EngineHandle, topic: &str) -> Result<()> {
    for (p, r) in block_on(h.clean_topic(topic))? {
        let (records_removed, compacted) = r
            .compaction
            .as_ref()
            .map_or((0, 0), |c| (c.records_superseded + c.tombstones_removed, c.segments_rewritten));
        println!(
            "partition {p}\tsegments_deleted {}\tsegments_compacted {compacted}\trecords_removed {records_removed}\tbytes_reclaimed {}\tstart {}",
            r.retention.segments_deleted,
            r.bytes_reclaimed(),
            block_on(h.offsets(topic, p))?.0,
        );
    }
    Ok(())
}

/// A line of `sluice produce`'s input: `key<TAB>value`, or a value alone.
fn key_value(line: &str) -> (Option<&[u8]>, &[u8]) {
    match line.split_once('\t') {
        Some((k, v)) => (Some(k.as_bytes()), v.as_bytes()),
        None => (None, line.as_bytes()),
    }
}

/// `sluice produce`. Each line is checked before anything after it is sent: a bad line
/// stops the run with every line before it written and none after, and the error names
/// the line and how many records were written, so a retry can start after them.
fn produce(h: &EngineHandle, a: &ProduceArgs) -> Result<()> {
    let limit = h.describe_topic(&a.topic)?.config.max_record_bytes;
    let headers: Vec<OwnedHeader> = a
        .headers
        .iter()
        .map(|h| match h.split_once('=') {
            Some((k, v)) => OwnedHeader::new(k, v),
            None => OwnedHeader { key: h.clone(), value: None },
        })
        .collect();
    let header_bytes: usize = headers.iter().map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len)).sum();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    // Sends go out a window at a time, so that a window shares batches and fsyncs.
    const WINDOW: usize = 1000;
    let mut lines = stdin.lock().lines();
    let mut written = 0u64;
    loop {
        let first_line = written + 1;
        let window: Vec<String> = lines
            .by_ref()
            .take(WINDOW)
            .collect::<std::io::Result<_>>()
            .with_context(|| format!("reading stdin after line {written} ({written} records written)"))?;
        if window.is_empty() {
            break;
        }
        let size = |line: &str| {
            let (k, v) = key_value(line);
            k.map_or(0, <[u8]>::len) + v.len() + header_bytes
        };
        let bad = window.iter().position(|l| size(l) > limit);
        let now = Timestamp::now();
        let sends = window[..bad.unwrap_or(window.len())].iter().map(|line| {
            let (key, value) = key_value(line);
            let value = (!(a.null_empty && value.is_empty())).then(|| value.to_vec());
            let record = OwnedRecord { key: key.map(<[u8]>::to_vec), value, event_time: now, headers: headers.clone() };
            h.send_record(&a.topic, record)
        });
        let results = block_on(join_all(sends.collect()));
        let failed = results.iter().position(Result::is_err);
        for (p, off) in results.iter().filter_map(|r| r.as_ref().ok()) {
            written += 1;
            if a.verbose {
                writeln!(out, "{p}\t{off}")?;
            }
        }
        if let Some(i) = failed {
            let e = results.into_iter().nth(i).and_then(Result::err).expect("an error at i");
            bail!("line {}: {e}; {written} records written", first_line + i as u64);
        }
        if let Some(i) = bad {
            bail!(
                "line {}: a record of {} bytes exceeds topic {:?}'s limit of {limit} bytes; {written} records written (every line before it), none after",
                first_line + i as u64,
                size(&window[i]),
                a.topic
            );
        }
    }
    if !a.verbose {
        eprintln!("produced {written} records to {}", a.topic);
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
    if let Some(p) = a.partition.map(PartitionId) {
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
    let ends: Vec<(String, PartitionId, Offset)> =
        parts.iter().map(|(t, p)| Ok((t.clone(), *p, block_on(h.offsets(t, *p))?.1))).collect::<Result<_>>()?;
    let mut left = a.max.unwrap_or(u64::MAX);
    let mut out = std::io::stdout().lock();
    while left > 0 {
        let caught_up = ends.iter().all(|(t, p, end)| consumer.positions()[&(t.clone(), *p)] >= *end);
        if caught_up && !a.follow {
            break;
        }
        let wait = if a.follow { Duration::from_millis(500) } else { Duration::ZERO };
        print_records(&mut out, a, &block_on(consumer.poll(wait))?, &mut left, &mut Default::default())?;
    }
    Ok(())
}

fn describe_group(h: &EngineHandle, group: &str) -> Result<()> {
    let lag = block_on(h.group_lag(group))?;
    let description = block_on(h.describe_group(group))?;
    if lag.is_empty() && description.is_none() {
        bail!("unknown group {group:?}");
    }
    match description {
        Some(d) if !d.members.is_empty() => {
            println!(
                "group {}\tgeneration {}\tassignor {}\tmembers {}",
                d.group,
                d.generation,
                d.assignor,
                d.members.len()
            );
            for (member, topics, parts) in &d.members {
                let parts: Vec<String> = parts.iter().map(ToString::to_string).collect();
                println!("member {member}\ttopics {}\tpartitions {}", topics.join(","), parts.join(","));
            }
        }
        _ => println!("group {group}\tmembers 0"),
    }
    for l in lag {
        println!("{}\t{}\tcommitted {}\tend {}\tlag {}", l.topic, l.partition, l.committed, l.end, l.lag);
    }
    Ok(())
}

/// `sluice consume --group`: prints records and commits the position after the last one
/// printed when it stops: at the end (without --follow), after --max records, on SIGINT or
/// SIGTERM, and when stdout closes.
fn consume_group(h: &EngineHandle, a: &ConsumeArgs, signals: &libc::sigset_t) -> Result<()> {
    let group = a.group.as_deref().expect("called with a group");
    let options = GroupOptions {
        reset: if a.from_beginning { OffsetReset::Earliest } else { OffsetReset::Latest },
        ..GroupOptions::default()
    };
    let mut member = block_on(GroupConsumer::join(h.clone(), group, &[a.topic.as_str()], options, None))?;
    let mut left = a.max.unwrap_or(u64::MAX);
    let mut out = std::io::stdout().lock();
    // The next offset after the last record printed, per partition: what gets committed.
    let mut done = std::collections::BTreeMap::new();
    let mut read = || -> Result<()> {
        while left > 0 {
            if let Some(signal) = signals::pending(signals)? {
                eprintln!("sluice consume: signal {signal}, committing and leaving the group");
                break;
            }
            let mut caught_up = true;
            for (t, p, at) in member.positions() {
                caught_up &= at >= block_on(h.offsets(&t, p))?.1;
            }
            if caught_up && !a.follow {
                break;
            }
            let wait = if a.follow { Duration::from_millis(500) } else { Duration::ZERO };
            print_records(&mut out, a, &block_on(member.poll(wait))?, &mut left, &mut done)?;
        }
        Ok(())
    };
    // What was printed is committed however the reading ended (a closed stdout too).
    let result = read();
    let offsets: Vec<(String, PartitionId, Offset)> = done.into_iter().map(|((t, p), o)| (t, p, o)).collect();
    block_on(member.commit_offsets(&offsets))?;
    block_on(member.leave())?;
    result
}

/// Prints polled records as `partition<TAB>offset<TAB>key<TAB>value` (and headers with
/// `--headers`), at most `left` of
/// them, noting in `done` the offset after the last one printed per partition.
fn print_records(
    out: &mut impl Write,
    a: &ConsumeArgs,
    polled: &[sluice_engine::Polled],
    left: &mut u64,
    done: &mut std::collections::BTreeMap<(String, PartitionId), Offset>,
) -> Result<()> {
    for p in polled {
        for r in p.batches.records() {
            if *left == 0 {
                return Ok(());
            }
            let r = r?;
            let null = a.null.as_deref().unwrap_or_default();
            let text =
                |b: Option<&[u8]>| b.map_or_else(|| null.to_string(), |b| String::from_utf8_lossy(b).into_owned());
            write!(out, "{}\t{}\t{}\t{}", p.partition, r.offset(), text(r.key()), text(r.value()))?;
            if a.headers {
                let headers: Vec<String> = r
                    .headers()
                    .map(|h| match h.value {
                        Some(v) => format!("{}={}", h.key, String::from_utf8_lossy(v)),
                        None => h.key.to_string(),
                    })
                    .collect();
                write!(out, "\t{}", headers.join(","))?;
            }
            writeln!(out)?;
            done.insert((p.topic.clone(), p.partition), r.offset().plus(1));
            *left -= 1;
        }
    }
    Ok(())
}
