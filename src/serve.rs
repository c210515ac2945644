//! `sluice serve`: the engine and its Kafka listener over a data directory.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use futures_lite::future::block_on;
use sluice_engine::{Engine, EngineConfig};

use crate::{DataDir, signals};

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
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
    /// How long an empty consumer group's first rebalance waits for more members, in
    /// milliseconds (Kafka's group.initial.rebalance.delay.ms, whose built-in default is
    /// 3000); 0 answers a lone consumer at once.
    #[arg(allow_negative_numbers = true, long, value_name = "MS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=i32::MAX as u64))]
    group_initial_rebalance_delay_ms: u64,
    /// Serve Prometheus metrics at http://ADDR/metrics (loopback unless told otherwise;
    /// port 0 picks one); printed as `metrics on ADDR` before `listening on`.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
}

/// `sluice serve`: the engine and its Kafka listener, until SIGINT or SIGTERM.
pub(crate) fn serve(a: &ServeArgs) -> Result<()> {
    use sluice_engine::kafka::{KafkaConfig, KafkaServer};
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
    kafka.group_initial_rebalance_delay = Duration::from_millis(a.group_initial_rebalance_delay_ms);
    let server = match KafkaServer::start(engine.handle(), kafka) {
        Ok(s) => s,
        Err(e) => {
            let _ = block_on(engine.shutdown());
            return Err(e.into());
        }
    };
    let metrics = match a.metrics_listen.map(|addr| engine.handle().serve_metrics(addr)).transpose() {
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
