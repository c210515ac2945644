//! `sluice-bench kafka`: the Kafka listener driven over loopback by a real client
//! library, against the embedded log in the same run.
//!
//! 1. Embedded: `--records` records of `--record-bytes` appended through the engine
//!    handle (batches of `--batch-records`, spread over the partitions, a few in flight per
//!    partition), as host code would.
//! 2. Kafka: the same number and size of records produced through the listener by
//!    `--producers` kcat processes at once (librdkafka, acks=all, its default batching),
//!    each from a file of its share, timed from the first start to the last exit (kcat
//!    waits for every acknowledgement), then checked: the partitions hold them all. One
//!    kcat is the bottleneck otherwise: it spends more CPU per record than the listener.
//!    Or, built with the `rskafka-client` feature (the default client then), rskafka in
//!    this process sends the same batches of `--batch-records` the embedded run appends,
//!    made before the clock starts; or librdkafka in process (`kafka-client`).
//! 3. Latency (unless `--latency-records 0`): confluent-kafka (librdkafka) produces at
//!    `--rate` records per second, open loop, and consumes them through the listener; each
//!    record's latency runs from its scheduled send time to its consumption. A wake-up
//!    probe runs beside it (`--no-wake-probe` leaves it out): the machine's own floor.
//!
//! `--compression C` (none, gzip, snappy, lz4, zstd) has every producing client of the
//! Kafka runs send batches compressed with C: the listener inflates them on produce, and
//! the latency run's consumer gets them compressed again (the topics' `compression.type`
//! is `producer`), so the figures include both.
//!
//! `--security sasl_ssl` adds a SASL_SSL listener (`kafka_security.rs`) and, in each
//! round, right after the plaintext Kafka run, the same kcat producers through it: the
//! cost of TLS and the SCRAM login as a ratio within the run, with the server's CPU per
//! record for both.
//!
//! Both throughput runs use the same engine, topic settings and fsync policy; the
//! listener runs one executor per shard. With `--rounds N` the two throughput runs
//! alternate N times (each round into fresh topics), so both see the same spells of a noisy
//! machine; the report gives each side's median round and the median of the rounds'
//! ratios. `.ci/deps` installs kcat and confluent-kafka.

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clap::Args;
use futures_lite::future::block_on;
use serde::{Deserialize, Serialize};
use sluice_engine::kafka::child::client_command as client;
pub use sluice_engine::kafka::compression::Codec;
use sluice_engine::kafka::{KafkaConfig, KafkaServer};

use super::kafka_security::{Secure, SecureRounds};
pub use super::kafka_security::{SecureFigures, Security};
use sluice_engine::{Engine, EngineConfig, EngineHandle, OwnedRecord, TopicConfig};
use sluice_io::{BatchMeta, FsyncPolicy, PartitionId, Timestamp};

use crate::harness::{LatencyRecorder, LatencySummary, Table, WAKE_ROWS, WakeProbe};
use crate::workloads::CommonArgs;

/// The latency client, run with `python3 -c`.
const LATENCY_SCRIPT: &str = include_str!("kafka_latency.py");

/// Options of `sluice-bench kafka`.
#[derive(Debug, Clone, Args)]
pub struct KafkaArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Engine shards (and listener executors).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub shards: u64,
    /// Partitions of each topic [default: one per shard]
    #[arg(long)]
    pub partitions: Option<u32>,
    /// Records produced in each throughput run.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: u64,
    /// Rounds of the two throughput runs, alternating (embedded, then the listener), each
    /// into fresh topics; the figures are the medians over the rounds.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub rounds: u64,
    /// Value bytes per record.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(8..=65_536))]
    pub record_bytes: u64,
    /// Producers at once in the Kafka run: kcat processes (each a share of the records),
    /// or rskafka or librdkafka clients.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub producers: u64,
    /// Records per append in the embedded run (and per produce request with rskafka).
    #[arg(long, default_value_t = 1000)]
    pub batch_records: usize,
    /// The topics' fsync policy: always, interval:MS or never.
    #[arg(long, default_value = "interval:5")]
    pub fsync: FsyncPolicy,
    /// Offered rate of the latency run, records per second.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub rate: u64,
    /// Records in the latency run (0 skips it).
    #[arg(long, default_value_t = 10_000)]
    pub latency_records: u64,
    /// Where the listener serves connections: `shards` (on the engine's shard executors,
    /// thread-per-core) or `executors` (executors of its own, one per shard, pinned to the
    /// shards' cores).
    #[arg(long, value_enum, default_value_t = Listener::Executors)]
    pub listener: Listener,
    /// The client of the throughput run: `kcat` processes fed from files; `rskafka`, a
    /// pure-Rust client in this process sending batches of `--batch-records` (needs the
    /// bench's `rskafka-client` feature); or `rdkafka`, librdkafka linked into this
    /// process fed from memory (needs `kafka-client`) [default: rskafka when built with
    /// it, else rdkafka when built with it, else kcat]
    #[arg(long, value_enum, default_value_t = Client::default())]
    pub client: Client,
    /// The codec the producing clients compress their batches with (librdkafka's
    /// `compression.codec`, rskafka's `Compression`).
    #[arg(long, default_value = "none", value_name = "none|gzip|snappy|lz4|zstd")]
    pub compression: Codec,
    /// Run no wake-up probe beside the latency run (a thread that sleeps 1 ms at a time
    /// and reports how late it woke: `machine_wake_latency_us`).
    #[arg(long)]
    pub no_wake_probe: bool,
    /// `sasl_ssl`: each round also produces through a SASL_SSL listener (TLS and a
    /// SCRAM-SHA-512 login, with a certificate made for the run), right after the
    /// plaintext run, and reports both (kcat only).
    #[arg(long, value_enum, default_value_t = Security::Plaintext)]
    pub security: Security,
}

/// Writes a codec in the report by its Kafka name, as `--compression` takes it.
fn codec_name<S: serde::Serializer>(codec: &Codec, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(codec.name())
}

/// The throughput run's Kafka client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Client {
    /// `--producers` kcat processes, each reading its share from a file.
    Kcat,
    /// `--producers` librdkafka producers in this process (the `kafka-client` feature).
    Rdkafka,
    /// `--producers` rskafka clients in this process, sending batches of
    /// `--batch-records` (the `rskafka-client` feature).
    Rskafka,
}

impl Default for Client {
    fn default() -> Client {
        if cfg!(feature = "rskafka-client") {
            Client::Rskafka
        } else if cfg!(feature = "kafka-client") {
            Client::Rdkafka
        } else {
            Client::Kcat
        }
    }
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Client::Kcat => "kcat",
            Client::Rdkafka => "rdkafka",
            Client::Rskafka => "rskafka",
        })
    }
}

/// Where the listener runs (`KafkaConfig::on_shards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Listener {
    /// On the shards' executors.
    Shards,
    /// On executors of its own.
    Executors,
}

/// The result; the `--json` schema.
#[derive(Debug, Clone, Serialize)]
pub struct KafkaReport {
    /// Always `"kafka"`.
    pub workload: &'static str,
    /// Engine shards and listener executors.
    pub shards: u64,
    /// Partitions per topic.
    pub partitions: u32,
    /// Records per throughput run.
    pub records: u64,
    /// Rounds of the two throughput runs.
    pub rounds: u64,
    /// Producers in the Kafka run (kcat processes, rskafka clients or librdkafka producers).
    pub producers: u64,
    /// The Kafka run's client: `kcat`, `rskafka` or `rdkafka`.
    pub client: Client,
    /// The codec the producing clients compressed their batches with.
    #[serde(serialize_with = "codec_name")]
    pub compression: Codec,
    /// Value bytes per record.
    pub record_bytes: u64,
    /// The topics' fsync policy.
    #[serde(serialize_with = "crate::harness::serialize_display")]
    pub fsync: FsyncPolicy,
    /// Embedded log: records per second appended through the engine handle (the median
    /// round).
    pub embedded_records_per_s: f64,
    /// Through the listener with the client: records per second, acknowledged (the median
    /// round).
    pub kafka_records_per_s: f64,
    /// The median of the rounds' listener / embedded ratios (with one round,
    /// `kafka_records_per_s / embedded_records_per_s`).
    pub kafka_over_embedded: f64,
    /// Every round's embedded rate, in order.
    pub round_embedded_records_per_s: Vec<f64>,
    /// Every round's listener rate, in order.
    pub round_kafka_records_per_s: Vec<f64>,
    /// Where the listener ran: `shards` or `executors`.
    pub listener: Listener,
    /// CPU of this process (engine, and the embedded producer) per record, embedded run,
    /// microseconds.
    pub embedded_cpu_us_per_record: f64,
    /// CPU of this process (engine and listener, and with an in-process client, rskafka
    /// or rdkafka, the client too, from its clock's start) per record, Kafka run,
    /// microseconds.
    pub listener_cpu_us_per_record: f64,
    /// CPU of the kcat processes per record, Kafka run, microseconds (0 with an in-process client).
    pub kcat_cpu_us_per_record: f64,
    /// Offered rate of the latency run.
    pub latency_rate: u64,
    /// Rate the latency producer achieved.
    pub latency_achieved_rate: f64,
    /// Produce-to-consume latency through the listener, microseconds.
    pub produce_to_consume_us: LatencySummary,
    /// The same as a curve, for `sluice-bench report --plot`.
    pub produce_to_consume_curve: Option<crate::harness::Curve>,
    /// How late a 1 ms sleep woke during the latency run, microseconds (the machine's
    /// floor under its latencies). None without a latency run or with `--no-wake-probe`.
    pub machine_wake_latency_us: Option<LatencySummary>,
    /// Which listeners the Kafka run went through.
    pub security: Security,
    /// With `--security sasl_ssl`, the SASL_SSL run's figures.
    #[serde(flatten)]
    pub sasl_ssl: Option<SecureFigures>,
}

#[derive(Deserialize)]
struct LatencyOutput {
    latencies_us: Vec<u64>,
    achieved_rate: f64,
}

/// CPU time (user plus system) used so far by this process (`RUSAGE_SELF`), by the
/// calling thread (`RUSAGE_THREAD`) or by its children that have been waited for
/// (`RUSAGE_CHILDREN`).
pub(super) fn cpu(who: libc::c_int) -> Duration {
    // SAFETY: getrusage writes one `rusage` into the zeroed local it is given; `who` is
    // RUSAGE_SELF, RUSAGE_THREAD or RUSAGE_CHILDREN. Exercised by every run, tests/kafka.rs
    // included.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Fails with a message naming `.ci/deps` when a client is missing.
fn check_clients(latency: bool) -> anyhow::Result<()> {
    let kcat = client("kcat").arg("-V").output().map(|o| o.status.success()).unwrap_or(false);
    ensure!(kcat, "kcat is not installed: run .ci/deps");
    if latency {
        let py = client(python()).args(["-c", "import confluent_kafka"]).output();
        ensure!(
            py.map(|o| o.status.success()).unwrap_or(false),
            "Python confluent-kafka is not installed for {}: run .ci/deps",
            python()
        );
    }
    Ok(())
}

fn python() -> String {
    std::env::var("SLUICE_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

/// Record `i`'s value: its number, zero-padded to `bytes` (the last digits if longer).
fn value(i: u64, bytes: usize) -> Vec<u8> {
    let mut v = vec![b'0'; bytes];
    let digits = i.to_string();
    let d = &digits.as_bytes()[digits.len().saturating_sub(bytes)..];
    v[bytes - d.len()..].copy_from_slice(d);
    v
}

/// Appends `records` records through the handle; returns records per second.
fn embedded(handle: &EngineHandle, topic: &str, args: &KafkaArgs, partitions: u32) -> anyhow::Result<f64> {
    let (records, bytes, batch) = (args.records, args.record_bytes as usize, args.batch_records.max(1) as u64);
    let handle = handle.clone();
    let topic: std::sync::Arc<str> = topic.into();
    let started = Instant::now();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(256 << 10)
        .spawn(move || async move {
            // Up to four appends in flight per partition, batches dealt round robin.
            let mut tasks = Vec::new();
            for p in 0..partitions {
                let (handle, topic) = (handle.clone(), topic.clone());
                tasks.push(glommio::spawn_local(async move {
                    let permits = std::rc::Rc::new(glommio::sync::Semaphore::new(4));
                    let mut inflight = Vec::new();
                    let mut next = u64::from(p) * batch;
                    while next < records {
                        let recs: Vec<OwnedRecord> = (next..(next + batch).min(records))
                            .map(|i| OwnedRecord::new(None, value(i, bytes), Timestamp::now()))
                            .collect();
                        let permit = permits.clone().acquire_static_permit(1).await.expect("semaphore open");
                        let (handle, topic) = (handle.clone(), topic.clone());
                        inflight.push(glommio::spawn_local(async move {
                            let r = handle.append(&topic, PartitionId(p), recs, BatchMeta::default()).await.map(|_| ());
                            drop(permit);
                            r
                        }));
                        next += batch * u64::from(partitions);
                    }
                    for t in inflight {
                        t.await?;
                    }
                    Ok::<(), sluice_engine::EngineError>(())
                }));
            }
            for t in tasks {
                t.await?;
            }
            Ok::<(), sluice_engine::EngineError>(())
        })
        .map_err(|e| anyhow::anyhow!("starting the embedded producer: {e}"))?
        .join()
        .map_err(|e| anyhow::anyhow!("embedded producer: {e:?}"))??;
    Ok(records as f64 / started.elapsed().as_secs_f64())
}

/// Produces the records through the listener with `--producers` kcat processes at once;
/// returns records per second, from the first start to the last exit, and the CPU this
/// thread spent writing kcat's input files before that.
pub(super) fn through_kcat(
    addr: &str,
    topic: &str,
    args: &KafkaArgs,
    dir: &std::path::Path,
    settings: &[String],
) -> anyhow::Result<(f64, Duration)> {
    let producers = args.producers.max(1);
    // Making kcat's input files is this thread's work before the clock starts, not the
    // listener's: its CPU is returned for the caller to leave out.
    let making = cpu(libc::RUSAGE_THREAD);
    let mut inputs = Vec::new();
    for k in 0..producers {
        let path = dir.join(format!("kcat-input-{k}"));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).context("writing kcat's input")?);
        for i in (k..args.records).step_by(producers as usize) {
            f.write_all(&value(i, args.record_bytes as usize))?;
            f.write_all(b"\n")?;
        }
        f.flush()?;
        inputs.push(path);
    }
    let making = cpu(libc::RUSAGE_THREAD).saturating_sub(making);
    let started = Instant::now();
    let mut children = Vec::new();
    for path in &inputs {
        let child = client("kcat")
            .args(["-b", addr, "-P", "-t", topic, "-X", "acks=all", "-X", "queue.buffering.max.messages=1000000"])
            .args(["-X", &format!("compression.codec={}", args.compression)])
            .args(settings)
            .stdin(Stdio::from(std::fs::File::open(path)?))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("running kcat")?;
        children.push(child);
    }
    let mut failed = None;
    for child in children {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            failed.get_or_insert(String::from_utf8_lossy(&out.stderr).into_owned());
        }
    }
    let elapsed = started.elapsed();
    for path in &inputs {
        let _ = std::fs::remove_file(path);
    }
    if let Some(err) = failed {
        bail!("kcat failed: {err}");
    }
    Ok((args.records as f64 / elapsed.as_secs_f64(), making))
}

/// `--live`: the page counts the records appended to the topics, from a scrape a second
/// (none without `--live`).
fn watch_appended(handle: &EngineHandle) {
    let watched = handle.clone();
    crate::harness::live::watch("records appended", None, move || appended(&watched));
}

/// Records appended to the topics (not the internal ones) so far; 0 once the engine has
/// shut down.
fn appended(handle: &EngineHandle) -> u64 {
    let Ok(families) = block_on(handle.metrics()) else { return 0 };
    let user =
        |labels: &sluice_engine::metrics::Labels| labels.iter().any(|(k, v)| *k == "topic" && !v.starts_with("__"));
    families
        .series("sluice_log_records_appended_total")
        .filter(|(labels, _)| user(labels))
        .filter_map(|(_, value)| match value {
            sluice_engine::metrics::Value::Counter(n) => Some(n.as_f64() as u64),
            _ => None,
        })
        .sum()
}

pub(super) fn stored(handle: &EngineHandle, topic: &str, partitions: u32) -> anyhow::Result<u64> {
    let mut n = 0;
    for p in 0..partitions {
        let (start, end) = block_on(handle.offsets(topic, PartitionId(p)))?;
        n += end.0 - start.0;
    }
    Ok(n)
}

/// Whether a stored batch of `topic` arrived compressed with `codec` (each batch keeps
/// its producer's codec): the check that `--compression` took effect. Clients send a batch
/// uncompressed when compressing would not shrink it, so not every batch need say so.
fn arrived_compressed(handle: &EngineHandle, topic: &str, partitions: u32, codec: Codec) -> anyhow::Result<bool> {
    let id = codec.id();
    for p in 0..partitions {
        let (mut at, end) = block_on(handle.offsets(topic, PartitionId(p)))?;
        while at < end {
            let batches = block_on(handle.fetch(topic, PartitionId(p), at, 4 << 20, Duration::ZERO))?;
            for b in batches.batches() {
                if b?.header().attributes.codec() == id {
                    return Ok(true);
                }
            }
            at = batches.next_offset();
        }
    }
    Ok(false)
}

fn latency(addr: &str, args: &KafkaArgs, partitions: u32) -> anyhow::Result<(f64, LatencyRecorder)> {
    let limit = Duration::from_secs(120) + Duration::from_secs_f64(args.latency_records as f64 / args.rate as f64);
    let mut child = client(python())
        .args(["-c", LATENCY_SCRIPT, addr, "latency"])
        .args([partitions.to_string(), args.rate.to_string(), args.latency_records.to_string()])
        .arg(args.record_bytes.to_string())
        .arg(args.compression.name())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running the latency client")?;
    // Its output is read while it runs: it is larger than a pipe holds.
    let pipe = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let stdout = pipe(Box::new(child.stdout.take().context("the client's stdout")?));
    let stderr = pipe(Box::new(child.stderr.take().context("the client's stderr")?));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the latency client ran past {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (stdout.join().unwrap_or_default(), stderr.join().unwrap_or_default());
    ensure!(status.success(), "the latency client failed: {}", String::from_utf8_lossy(&stderr));
    let parsed: LatencyOutput = serde_json::from_slice(&stdout).context("reading the latency client's output")?;
    ensure!(
        parsed.latencies_us.len() as u64 == args.latency_records,
        "{} of {} latency records arrived",
        parsed.latencies_us.len(),
        args.latency_records
    );
    let mut rec = LatencyRecorder::new();
    for us in parsed.latencies_us {
        rec.record(Duration::from_micros(us));
    }
    Ok((parsed.achieved_rate, rec))
}

/// Produces `--records` records into `topic` through the listener at `addr` with
/// `--client`: the records per second, and the client's CPU time before its clock started
/// (making the records; zero for kcat, whose input files are made beforehand).
// `partitions` is rskafka's only.
#[cfg_attr(not(feature = "rskafka-client"), allow(unused_variables))]
fn produce_via_listener(
    args: &KafkaArgs,
    addr: &str,
    topic: &str,
    partitions: u32,
    work_dir: &std::path::Path,
) -> anyhow::Result<(f64, Duration)> {
    Ok(match args.client {
        Client::Kcat => through_kcat(addr, topic, args, work_dir, &[])?,
        #[cfg(feature = "kafka-client")]
        Client::Rdkafka => {
            let bytes = args.record_bytes as usize;
            let codec = args.compression.name();
            super::kafka_rdkafka::produce(addr, topic, args.records, args.producers, codec, |i| value(i, bytes))?
        }
        #[cfg(not(feature = "kafka-client"))]
        Client::Rdkafka => bail!("--client rdkafka needs sluice-bench built with --features kafka-client"),
        #[cfg(feature = "rskafka-client")]
        Client::Rskafka => {
            let bytes = args.record_bytes as usize;
            let (records, batch) = (args.records, args.batch_records);
            let (producers, codec) = (args.producers, args.compression);
            super::kafka_rskafka::produce(addr, topic, records, partitions, producers, batch, codec, |i| {
                value(i, bytes)
            })?
        }
        #[cfg(not(feature = "rskafka-client"))]
        Client::Rskafka => bail!("--client rskafka needs sluice-bench built with --features rskafka-client"),
    })
}

/// Refuses options the workload cannot honour, before anything starts.
fn check_args(args: &KafkaArgs) -> anyhow::Result<()> {
    ensure!(args.records > 0, "--records must be positive");
    check_clients(args.latency_records > 0)?;
    ensure!(
        args.security == Security::Plaintext || args.client == Client::Kcat,
        "--security sasl_ssl measures kcat only (--client kcat)"
    );
    // The latencies come from the Python client, without the times they were taken at.
    anyhow::ensure!(
        args.common.hlog.is_none(),
        "kafka: the latencies come from the Python client without their times, so there is no interval log (--hlog)"
    );
    Ok(())
}

/// Runs the workload.
pub fn run(args: &KafkaArgs) -> anyhow::Result<KafkaReport> {
    check_args(args)?;
    let work_dir = args.common.work_dir("kafka")?;
    let _metrics = crate::harness::metrics::serve(args.common.metrics_listen)?;
    let shards = args.shards as usize;
    let partitions = args.partitions.unwrap_or(args.shards as u32).max(1);
    let engine = block_on(Engine::open(EngineConfig { shards: Some(shards), ..EngineConfig::new(work_dir.path()) }))
        .context("starting the engine")?;
    let handle = engine.handle();
    // The listener registers with the engine, so the engine's source serves both.
    let metrics = handle.metric_source();
    crate::harness::metrics::register(&metrics);
    watch_appended(&handle);
    let topic = TopicConfig { fsync: args.fsync, ..TopicConfig::default() };
    block_on(handle.create_topic("latency", partitions, Some(topic.clone())))?;
    let mut config = KafkaConfig::new("127.0.0.1:0".parse()?);
    config.executors = shards;
    config.on_shards = args.listener == Listener::Shards;
    let secure = match args.security {
        Security::SaslSsl => Some(Secure::set_up(work_dir.path(), &mut config)?),
        Security::Plaintext => None,
    };
    let server = KafkaServer::start(handle.clone(), config)?;
    let addr = server.local_addr().to_string();
    let mut secure_rounds = SecureRounds::default();

    let per_record = |d: Duration| d.as_secs_f64() * 1e6 / (args.records * args.rounds) as f64;
    let (mut embedded_rates, mut kafka_rates) = (Vec::new(), Vec::new());
    let (mut embedded_cpu, mut listener_cpu, mut kcat_cpu) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for round in 0..args.rounds {
        // Fresh topics every round: each run starts from empty partitions, and its count
        // of stored records is its own.
        let (embedded_topic, kafka_topic) = match round {
            0 => ("embedded".to_string(), "kafka".to_string()),
            r => (format!("embedded-{r}"), format!("kafka-{r}")),
        };
        for name in [&embedded_topic, &kafka_topic] {
            block_on(handle.create_topic(name, partitions, Some(topic.clone())))?;
        }
        let self_before = cpu(libc::RUSAGE_SELF);
        embedded_rates.push(embedded(&handle, &embedded_topic, args, partitions)?);
        embedded_cpu += cpu(libc::RUSAGE_SELF).saturating_sub(self_before);
        ensure!(stored(&handle, &embedded_topic, partitions)? == args.records, "the embedded run lost records");
        let (self_before, children_before) = (cpu(libc::RUSAGE_SELF), cpu(libc::RUSAGE_CHILDREN));
        // An in-process client's CPU before its clock starts (making the records, as
        // kcat's input files are made): not the listener's.
        let (rate, before_clock) = produce_via_listener(args, &addr, &kafka_topic, partitions, work_dir.path())?;
        kafka_rates.push(rate);
        listener_cpu += cpu(libc::RUSAGE_SELF).saturating_sub(self_before).saturating_sub(before_clock);
        kcat_cpu += cpu(libc::RUSAGE_CHILDREN).saturating_sub(children_before);
        let got = stored(&handle, &kafka_topic, partitions)?;
        ensure!(got == args.records, "{} produced {got} of {} records", args.client, args.records);
        if args.compression != Codec::None {
            let compressed = arrived_compressed(&handle, &kafka_topic, partitions, args.compression)?;
            ensure!(compressed, "{} sent no {} batch", args.client, args.compression);
        }
        if let Some(secure) = &secure {
            secure.round(&handle, &server, (round, partitions), args, &topic, work_dir.path(), &mut secure_rounds)?;
        }
    }
    let (embedded_cpu, listener_cpu, kcat_cpu) =
        (per_record(embedded_cpu), per_record(listener_cpu), per_record(kcat_cpu));
    let ratios: Vec<f64> = kafka_rates.iter().zip(&embedded_rates).map(|(k, e)| k / e).collect();
    let sasl_ssl = secure.map(|_| secure_rounds.figures(&kafka_rates, args.records));
    let (latency_achieved_rate, produce_to_consume_us, produce_to_consume_curve, machine_wake_latency_us) =
        latency_phase(args, &addr, partitions)?;
    crate::harness::live::unwatch();
    server.shutdown();
    block_on(engine.shutdown())?;
    Ok(KafkaReport {
        workload: "kafka",
        shards: args.shards,
        partitions,
        records: args.records,
        rounds: args.rounds,
        producers: args.producers,
        client: args.client,
        compression: args.compression,
        record_bytes: args.record_bytes,
        fsync: args.fsync,
        embedded_records_per_s: crate::harness::median(&embedded_rates),
        kafka_records_per_s: crate::harness::median(&kafka_rates),
        kafka_over_embedded: crate::harness::median(&ratios),
        round_embedded_records_per_s: embedded_rates,
        round_kafka_records_per_s: kafka_rates,
        listener: args.listener,
        embedded_cpu_us_per_record: embedded_cpu,
        listener_cpu_us_per_record: listener_cpu,
        kcat_cpu_us_per_record: kcat_cpu,
        latency_rate: args.rate,
        latency_achieved_rate,
        produce_to_consume_us,
        produce_to_consume_curve,
        machine_wake_latency_us,
        security: args.security,
        sasl_ssl,
    })
}

/// The latency run, if asked for: the achieved rate, the latencies and their curve, and
/// the wake-up probe beside it.
fn latency_phase(
    args: &KafkaArgs,
    addr: &str,
    partitions: u32,
) -> anyhow::Result<(f64, LatencySummary, Option<crate::harness::Curve>, Option<LatencySummary>)> {
    let ((latency_achieved_rate, recorder), machine_wake_latency_us) = if args.latency_records > 0 {
        crate::harness::live::offer(Some(args.rate));
        WakeProbe::around(!args.no_wake_probe, || latency(addr, args, partitions))?
    } else {
        ((0.0, LatencyRecorder::new()), None)
    };
    let produce_to_consume_us = recorder.summary();
    let produce_to_consume_curve = if recorder.is_empty() {
        anyhow::ensure!(args.common.plot.is_none(), "--plot needs a latency run (--latency-records > 0)");
        None
    } else {
        let label = format!("kafka produce to consume, {} records/s", args.rate);
        Some(args.common.write_latency(&recorder, "Kafka listener: produce-to-consume latency", &label)?)
    };
    Ok((latency_achieved_rate, produce_to_consume_us, produce_to_consume_curve, machine_wake_latency_us))
}

impl KafkaReport {
    /// The human-readable form of the report.
    pub fn table(&self) -> Table {
        let mut table = Table::titled(format!(
            "kafka listener: {} shards, {} partitions, {} records x {} B, fsync {}, {} {} producers{}{}",
            self.shards,
            self.partitions,
            self.records,
            self.record_bytes,
            self.fsync,
            self.producers,
            self.client,
            match self.compression {
                Codec::None => String::new(),
                c => format!(", {c} batches"),
            },
            if self.rounds > 1 { format!(", median of {} rounds", self.rounds) } else { String::new() }
        ));
        let mb = |rate: f64| rate * self.record_bytes as f64 / 1e6;
        table.row("embedded append", format!("{:.0}", self.embedded_records_per_s), "records/s");
        table.row("embedded append", format!("{:.1}", mb(self.embedded_records_per_s)), "MB/s");
        let via = format!("{} produce via listener", self.client);
        table.row(via.as_str(), format!("{:.0}", self.kafka_records_per_s), "records/s");
        table.row(via, format!("{:.1}", mb(self.kafka_records_per_s)), "MB/s");
        table.row("listener / embedded", format!("{:.2}", self.kafka_over_embedded), "");
        if self.rounds > 1 {
            let rounds = self
                .round_kafka_records_per_s
                .iter()
                .zip(&self.round_embedded_records_per_s)
                .map(|(k, e)| format!("{:.2}/{:.2}", k / 1e6, e / 1e6))
                .collect::<Vec<_>>()
                .join(" ");
            table.row("rounds (listener/embedded)", rounds, "M records/s");
        }
        table.row("cpu, embedded run", format!("{:.3}", self.embedded_cpu_us_per_record), "us/record");
        match self.client {
            Client::Kcat => {
                table.row("cpu, listener + engine", format!("{:.3}", self.listener_cpu_us_per_record), "us/record");
                table.row("cpu, kcat", format!("{:.3}", self.kcat_cpu_us_per_record), "us/record");
            }
            Client::Rdkafka | Client::Rskafka => {
                let cpu = format!("{:.3}", self.listener_cpu_us_per_record);
                table.row("cpu, client + listener + engine", cpu, "us/record");
            }
        }
        if self.produce_to_consume_us.count > 0 {
            table.row("latency run offered", self.latency_rate, "records/s");
            table.row("latency run achieved", format!("{:.0}", self.latency_achieved_rate), "records/s");
            table.latency_rows("produce to consume", &self.produce_to_consume_us);
        }
        if let Some(s) = &self.sasl_ssl {
            s.rows(&mut table);
        }
        if let Some(m) = &self.machine_wake_latency_us {
            table.latency_rows(WAKE_ROWS, m);
        }
        table
    }
}
