//! The broker of `sluice-bench pipeline --processes N`, and what the parent does with
//! the repartition topic on it: create it, read it back (its records and bytes), delete
//! it.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use futures_lite::future::block_on;
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::{BaseConsumer, Consumer},
    message::Headers,
};
use sluice_engine::{
    Engine, EngineConfig,
    connectors::kafka::repartition::WATERMARK_HEADER,
    kafka::{KafkaConfig, KafkaServer},
};

use super::{BrokerKind, TopicCost};
use crate::harness::WorkDir;

/// The cluster the instances meet at.
pub(super) enum Broker {
    /// `sluice serve` run as a child process on a fresh data directory.
    Serve { child: Child, path: PathBuf, addr: String, _dir: WorkDir },
    /// The engine's Kafka listener in this process over a fresh engine (what `sluice
    /// serve` runs).
    InProcess { server: Option<KafkaServer>, engine: Option<Engine>, _dir: WorkDir },
    /// `--bootstrap`: an existing cluster.
    External(String),
}

impl Broker {
    /// The broker `kind` (and `--bootstrap`) ask for.
    pub(super) fn start(kind: BrokerKind, bootstrap: Option<&str>) -> anyhow::Result<Broker> {
        if let Some(b) = bootstrap {
            return Ok(Broker::External(b.to_string()));
        }
        let beside = std::env::current_exe().context("finding this binary")?.with_file_name("sluice");
        match kind {
            BrokerKind::Serve => {
                ensure!(beside.is_file(), "--broker serve: no sluice binary at {}: build it", beside.display());
                Broker::serve(beside)
            }
            BrokerKind::Auto if beside.is_file() => Broker::serve(beside),
            _ => Broker::in_process(),
        }
    }

    fn serve(path: PathBuf) -> anyhow::Result<Broker> {
        let dir = WorkDir::fresh("sluice-bench-pipeline-broker", false)?;
        let mut child = Command::new(&path)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {} serve", path.display()))?;
        let mut out = BufReader::new(child.stdout.take().context("sluice serve's stdout")?);
        let mut line = String::new();
        let addr = loop {
            line.clear();
            if out.read_line(&mut line).unwrap_or(0) == 0 {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{} serve exited before listening", path.display());
            }
            if let Some(addr) = line.trim().strip_prefix("listening on ") {
                break addr.to_string();
            }
        };
        // Keep draining its stdout so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in out.lines() {});
        Ok(Broker::Serve { child, path, addr, _dir: dir })
    }

    fn in_process() -> anyhow::Result<Broker> {
        let dir = WorkDir::fresh("sluice-bench-pipeline-broker", false)?;
        let engine = block_on(Engine::open(EngineConfig::new(dir.path()))).context("starting the broker's engine")?;
        let mut config = KafkaConfig::new("127.0.0.1:0".parse()?);
        config.executors = engine.shards();
        let server = KafkaServer::start(engine.handle(), config).context("starting the Kafka listener")?;
        Ok(Broker::InProcess { server: Some(server), engine: Some(engine), _dir: dir })
    }

    /// `bootstrap.servers` for the clients.
    pub(super) fn bootstrap(&self) -> String {
        match self {
            Broker::Serve { addr, .. } => addr.clone(),
            Broker::InProcess { server, .. } => server.as_ref().map(|s| s.local_addr().to_string()).unwrap_or_default(),
            Broker::External(b) => b.clone(),
        }
    }

    /// Which broker, for the report.
    pub(super) fn describe(&self) -> String {
        match self {
            Broker::Serve { path, .. } => format!("sluice serve ({})", path.display()),
            Broker::InProcess { .. } => "the engine's Kafka listener in the parent process".to_string(),
            Broker::External(b) => format!("--bootstrap {b}"),
        }
    }

    /// CPU seconds the broker has used so far: `sluice serve`'s from /proc, the whole
    /// parent's for the in-process listener (its instances are other processes), none for
    /// an external cluster.
    pub(super) fn cpu_seconds(&self) -> Option<f64> {
        match self {
            Broker::Serve { child, .. } => std::fs::read_to_string(format!("/proc/{}/stat", child.id()))
                .ok()
                .and_then(|s| super::stat_cpu_seconds(&s)),
            Broker::InProcess { .. } => Some(super::super::kafka::cpu(libc::RUSAGE_SELF).as_secs_f64()),
            Broker::External(_) => None,
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        match self {
            Broker::Serve { child, .. } => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Broker::InProcess { server, engine, .. } => {
                if let Some(s) = server.take() {
                    s.shutdown();
                }
                if let Some(e) = engine.take() {
                    let _ = block_on(e.shutdown());
                }
            }
            Broker::External(_) => {}
        }
    }
}

fn admin(bootstrap: &str) -> anyhow::Result<AdminClient<DefaultClientContext>> {
    ClientConfig::new().set("bootstrap.servers", bootstrap).create().context("creating a Kafka admin client")
}

fn admin_options() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))).request_timeout(Some(Duration::from_secs(30)))
}

/// Creates `topic` with `partitions` partitions (replication factor 1).
pub(super) fn create_topic(bootstrap: &str, topic: &str, partitions: u32) -> anyhow::Result<()> {
    let admin = admin(bootstrap)?;
    let count = i32::try_from(partitions).context("too many partitions")?;
    let new = NewTopic::new(topic, count, TopicReplication::Fixed(1));
    let results = block_on(admin.create_topics(&[new], &admin_options()))
        .with_context(|| format!("creating the repartition topic {topic} at {bootstrap}"))?;
    for r in results {
        r.map_err(|(t, e)| anyhow::anyhow!("creating the repartition topic {t} at {bootstrap}: {e}"))?;
    }
    Ok(())
}

/// Deletes `topic`; a failure is only printed (the run's figures are already taken).
pub(super) fn delete_topic(bootstrap: &str, topic: &str) {
    let deleted = admin(bootstrap).and_then(|a| {
        let results = block_on(a.delete_topics(&[topic], &admin_options()))?;
        for r in results {
            r.map_err(|(t, e)| anyhow::anyhow!("{t}: {e}"))?;
        }
        Ok(())
    });
    if let Err(e) = deleted {
        eprintln!("sluice-bench: deleting the repartition topic {topic}: {e:#}");
    }
}

/// Reads `topic` back from its start (`read_committed`): its records (data and
/// watermark records) and their bytes (key, value and headers).
pub(super) fn read_back(bootstrap: &str, topic: &str, partitions: u32) -> anyhow::Result<TopicCost> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("{topic}-read-back"))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
        .context("creating the read-back consumer")?;
    let mut tpl = TopicPartitionList::new();
    let mut ends = Vec::new();
    for p in 0..partitions as i32 {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
        let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(30))?;
        ends.push(high);
    }
    consumer.assign(&tpl)?;
    let mut cost =
        TopicCost { end_offsets: ends.iter().map(|&e| u64::try_from(e).unwrap_or(0)).sum(), ..TopicCost::default() };
    let mut quiet = Instant::now();
    let deadline = quiet + Duration::from_secs(600);
    // Done once every partition's position is at its end offset, or (a transaction a
    // process left open when it exited holds read_committed back) nothing came for 5 s.
    while quiet.elapsed() < Duration::from_secs(5) {
        ensure!(Instant::now() < deadline, "reading the repartition topic back took over 10 minutes");
        let Some(m) = consumer.poll(Duration::from_millis(100)) else {
            let positions = consumer.position()?;
            let at_end = (0..partitions as i32).all(|p| {
                matches!(positions.find_partition(topic, p).map(|e| e.offset()), Some(Offset::Offset(o)) if o >= ends[p as usize])
            });
            if at_end {
                break;
            }
            continue;
        };
        let m = m.context("reading the repartition topic back")?;
        quiet = Instant::now();
        let headers: usize =
            m.headers().map_or(0, |h| h.iter().map(|h| h.key.len() + h.value.map_or(0, <[u8]>::len)).sum());
        cost.bytes += (m.key().map_or(0, <[u8]>::len) + m.payload().map_or(0, <[u8]>::len) + headers) as u64;
        let watermark = m.headers().is_some_and(|h| h.iter().any(|h| h.key == WATERMARK_HEADER));
        if watermark {
            cost.watermark_records += 1;
        } else {
            cost.data_records += 1;
        }
    }
    cost.records = cost.data_records + cost.watermark_records;
    Ok(cost)
}
