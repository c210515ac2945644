//! `sluice cdc postgres`: PostgreSQL's changes, through logical replication, into
//! Debezium-format change topics in the data directory, exactly once.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use futures_lite::future::block_on;
use sluice_engine::{
    EngineError, EngineHandle, OwnedRecord,
    connectors::{
        debezium::Form,
        postgres::{Change, Dsn, PostgresConfig, PostgresSource},
    },
    dataflow::{CheckpointConfig, Pipeline, PipelineConfig, WatermarkStrategy, topic::TopicSink},
    validate_name,
};
use sluice_io::EventTime;

use crate::{DataDir, signals, with_new_engine};

#[derive(Debug, Subcommand)]
pub(crate) enum CdcCommand {
    /// Stream PostgreSQL tables' changes (a snapshot, then logical replication with
    /// pgoutput) into Debezium-format topics `<prefix>.<schema>.<table>`, exactly once,
    /// until SIGINT or SIGTERM; a restart resumes from the last checkpoint.
    Postgres(PostgresArgs),
}

#[derive(Debug, Args)]
pub(crate) struct PostgresArgs {
    /// The database: `host=... port=... user=... password=... dbname=...` or
    /// `postgres://user:password@host:port/dbname` (a host starting with `/` is the
    /// directory of the server's Unix socket).
    #[arg(long)]
    dsn: String,
    /// The tables, comma-separated: `table` (schema public) or `schema.table`.
    #[arg(long)]
    tables: String,
    /// The topics' prefix (Debezium's logical server name, also its `source.name`).
    #[arg(long)]
    topic_prefix: String,
    #[command(flatten)]
    dir: DataDir,
    /// The replication slot (default `sluice_<prefix>`); made if missing, and made
    /// again with a new snapshot when there is no checkpoint to resume from.
    #[arg(long)]
    slot: Option<String>,
    /// The publication (default: the slot's name); made for the tables if missing, and
    /// the tables it lacks are added.
    #[arg(long)]
    publication: Option<String>,
    /// Partitions of each change topic this command creates (an existing topic keeps
    /// its own).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    partitions: u32,
    /// Write keys and values with Kafka Connect's schema (`{"schema":..,"payload":..}`),
    /// as Debezium's JSON converter does by default; without, the payload alone.
    #[arg(long)]
    with_schemas: bool,
    /// The job's checkpoints (default `<data-dir>/cdc/<slot>`); a start resumes from the
    /// last one there.
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
    /// How often a checkpoint commits the change topics' transaction and confirms the
    /// position to PostgreSQL: the latency to visible (read_committed) changes.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    checkpoint_interval_ms: u64,
}

/// Runs `sluice cdc`.
pub(crate) fn run(command: CdcCommand) -> Result<()> {
    match command {
        CdcCommand::Postgres(a) => {
            let config = a.config()?;
            // Blocked before the engine starts its threads, so that only the loop takes them.
            let signals = signals::block_termination()?;
            with_new_engine(&a.dir, |h| postgres(h, &a, config, &signals))
        }
    }
}

impl PostgresArgs {
    fn config(&self) -> Result<PostgresConfig> {
        let dsn = Dsn::parse(&self.dsn)?;
        let tables = PostgresConfig::parse_tables(&self.tables)?;
        validate_name("topic prefix", &self.topic_prefix)?;
        let slot = self.slot.clone().unwrap_or_else(|| {
            let prefix: String = self
                .topic_prefix
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
                .collect();
            format!("sluice_{prefix}")
        });
        if slot.is_empty()
            || slot.len() > 63
            || !slot.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            bail!("slot name {slot:?}: PostgreSQL takes 1 to 63 lower-case letters, digits and underscores");
        }
        let publication = self.publication.clone().unwrap_or_else(|| slot.clone());
        Ok(PostgresConfig { dsn, tables, slot, publication })
    }
}

fn postgres(h: &EngineHandle, a: &PostgresArgs, config: PostgresConfig, signals: &libc::sigset_t) -> Result<()> {
    let source = PostgresSource::new(config.clone());
    source.check()?;
    let mut sinks = Vec::new();
    for (schema, table) in &config.tables {
        let topic = format!("{}.{schema}.{table}", a.topic_prefix);
        validate_name("topic", &topic)?;
        match block_on(h.create_topic(&topic, a.partitions, None)) {
            Ok(_) | Err(EngineError::TopicExists(_)) => {}
            Err(e) => return Err(e).with_context(|| format!("creating topic {topic}")),
        }
        sinks.push(TopicSink::open(h, &topic)?.exactly_once());
    }
    let checkpoints = a.checkpoint_dir.clone().unwrap_or_else(|| a.dir.data_dir.join("cdc").join(&config.slot));
    let tables = config.tables.clone();
    let (prefix, db) = (a.topic_prefix.clone(), config.dsn.dbname.clone());
    let form = if a.with_schemas { Form::WithSchema } else { Form::SchemaLess };
    let errors = source.clone();
    let interval = Duration::from_millis(a.checkpoint_interval_ms);
    let pipeline = Pipeline::new(PipelineConfig::with_shards(1))
        .checkpointing(CheckpointConfig::new(checkpoints).interval(interval));
    let topic_sinks = sinks.clone();
    let running = pipeline.spawn(move |scope| {
        let (prefix, db, tables) = (prefix.clone(), db.clone(), tables.clone());
        let time = |c: &Change| EventTime::from_millis(c.commit_us / 1000);
        let messages = scope
            .source(source.reader(scope.shard()), WatermarkStrategy::monotonous(time))
            .uid("postgres")
            .flat_map(move |c: Change| {
                let table = tables.iter().position(|(s, t)| *s == c.table.schema && *t == c.table.name);
                let messages = c.messages(&prefix, &db, form);
                messages.into_iter().filter_map(move |(key, value)| Some((table?, key, value)))
            });
        for (i, sink) in topic_sinks.iter().enumerate() {
            messages.clone().filter(move |(table, ..)| *table == i).to_topic_records(sink, |(_, key, value), time| {
                OwnedRecord { key, value, event_time: time, headers: Vec::new() }
            });
        }
    });
    let running = running?;
    let topics: Vec<&str> = sinks.iter().map(TopicSink::topic).collect();
    eprintln!("sluice cdc postgres: streaming into {}", topics.join(", "));
    while !running.is_finished() {
        if let Some(signal) = signals::pending(signals)? {
            eprintln!("sluice cdc postgres: signal {signal}: stopping (a restart resumes from the last checkpoint)");
            running.stop(false);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let result = running.join();
    if let Some(e) = errors.take_error() {
        return Err(e.into());
    }
    if let Some(e) = sinks.iter().find_map(TopicSink::take_error) {
        return Err(e.into());
    }
    Ok(result?)
}
