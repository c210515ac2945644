//! `sluice topic`: create, list, describe, alter, grow, clean, trim and delete topics.

use std::io::Write;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use futures_lite::future::block_on;
use sluice_engine::topic::configs;
use sluice_engine::{EngineHandle, TopicConfig};
use sluice_io::{Offset, PartitionId};

use crate::{DataDir, with_engine, with_new_engine};

#[derive(Debug, Subcommand)]
pub(crate) enum TopicCommand {
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
pub(crate) struct TrimArgs {
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
pub(crate) struct TopicArgs {
    /// The topic.
    topic: String,
    #[command(flatten)]
    dir: DataDir,
}

#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
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
pub(crate) struct AlterArgs {
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
pub(crate) struct AddPartitionsArgs {
    /// The topic.
    topic: String,
    #[command(flatten)]
    dir: DataDir,
    /// The new partition count.
    #[arg(allow_negative_numbers = true, long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    partitions: u32,
}

/// Runs a `sluice topic` subcommand.
pub(crate) fn run(command: TopicCommand) -> Result<()> {
    match command {
        TopicCommand::Create(a) => with_new_engine(&a.dir, |h| create(h, &a)),
        TopicCommand::List(dir) => with_engine(&dir, |h| {
            for t in h.list_topics() {
                println!("{t}");
            }
            Ok(())
        }),
        TopicCommand::Describe(a) => with_engine(&a.dir, |h| describe(h, &a.topic)),
        TopicCommand::Delete(a) => with_engine(&a.dir, |h| {
            block_on(h.delete_topic(&a.topic))?;
            println!("deleted topic {}", a.topic);
            Ok(())
        }),
        TopicCommand::AddPartitions(a) => with_engine(&a.dir, |h| {
            let d = block_on(h.add_partitions(&a.topic, a.partitions))?;
            println!("topic {} now has {} partitions", a.topic, d.shards.len());
            Ok(())
        }),
        TopicCommand::Alter(a) => with_engine(&a.dir, |h| alter(h, &a)),
        TopicCommand::Clean(a) => with_engine(&a.dir, |h| clean(h, &a.topic)),
        TopicCommand::Trim(a) => with_engine(&a.dir, |h| {
            let start = block_on(h.delete_records(&a.topic, PartitionId(a.partition), Offset(a.before)))?;
            println!("partition {}\tstart {start}", a.partition);
            Ok(())
        }),
    }
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
