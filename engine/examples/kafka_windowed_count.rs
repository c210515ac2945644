//! The windowed count from one Kafka-compatible broker to another, exactly once.
//!
//! Reads `clicks` (key = user, Kafka timestamp = event time) from broker A through the
//! consumer group `windowed-count`, counts clicks per user in 1-second tumbling windows
//! on 2 shards with checkpoints, and writes `user,window_start,count` records to
//! `click-counts` on broker B in Kafka transactions tied to the checkpoints. It first
//! produces a known input to A, and at the end reads B back (`read_committed`) and checks
//! the counts.
//!
//! ```text
//! cargo run -p sluice-engine --features kafka-client --example kafka_windowed_count
//! cargo run -p sluice-engine --features kafka-client --example kafka_windowed_count -- HOST_A:PORT HOST_B:PORT
//! ```
//!
//! With no arguments it starts two in-process `sluice serve` listeners (two engines on
//! temporary directories) as A and B, so it runs standalone. With addresses, the topics
//! `clicks` (4 partitions) and `click-counts` must exist on them.

use std::{
    collections::BTreeMap,
    error::Error,
    time::{Duration, Instant},
};

use futures_lite::future::block_on;
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    producer::{BaseProducer, BaseRecord, Producer},
};
use sluice_engine::{
    Engine, EngineConfig,
    connectors::kafka::{KafkaSinkConfig, KafkaSinkFactory, KafkaSourceConfig, KafkaSourceFactory, OutRecord},
    dataflow::{CheckpointConfig, Event, Pipeline, PipelineConfig, WatermarkStrategy, Windows},
    kafka::{KafkaConfig, KafkaServer},
};
use sluice_io::EventTime;

/// Users in the generated input.
const USERS: u64 = 8;
/// Clicks in the generated input.
const CLICKS: u64 = 4_000;
/// The first click's time; one click every 5 ms after it.
const START_MS: i64 = 1_700_000_000_000;

/// What a run wrote and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// (user, window start) -> count, as read back from broker B.
    pub counts: BTreeMap<(u64, i64), u64>,
    /// Epochs the sink committed.
    pub epochs_committed: u64,
}

/// A `sluice serve` listener on a temporary directory, stopped when dropped.
struct InProcessBroker {
    server: Option<KafkaServer>,
    engine: Option<Engine>,
    dir: std::path::PathBuf,
}

impl InProcessBroker {
    fn start(name: &str, topics: &[(&str, u32)]) -> Result<Self, Box<dyn Error>> {
        let dir = std::env::temp_dir().join(format!("sluice-kafka-example-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut config = EngineConfig::new(&dir);
        config.shards = Some(1);
        let engine = block_on(Engine::open(config))?;
        for (topic, partitions) in topics {
            block_on(engine.handle().create_topic(topic, *partitions, None))?;
        }
        let server = KafkaServer::start(engine.handle(), KafkaConfig::new("127.0.0.1:0".parse()?))?;
        Ok(InProcessBroker { server: Some(server), engine: Some(engine), dir })
    }

    fn address(&self) -> String {
        self.server.as_ref().map(|s| s.local_addr().to_string()).unwrap_or_default()
    }
}

impl Drop for InProcessBroker {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
        if let Some(e) = self.engine.take() {
            let _ = block_on(e.shutdown());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The count the example must produce for the generated input.
#[must_use]
pub fn expected_counts() -> BTreeMap<(u64, i64), u64> {
    let mut want = BTreeMap::new();
    for i in 0..CLICKS {
        let t = START_MS + i as i64 * 5;
        *want.entry((i % USERS, t - t.rem_euclid(1000))).or_default() += 1;
    }
    want
}

fn produce_input(bootstrap: &str) -> Result<(), Box<dyn Error>> {
    let producer: BaseProducer =
        ClientConfig::new().set("bootstrap.servers", bootstrap).set("partitioner", "murmur2_random").create()?;
    for i in 0..CLICKS {
        let key = format!("user-{}", i % USERS);
        let value = format!("click {i}");
        let mut record = BaseRecord::to("clicks").key(&key).payload(&value).timestamp(START_MS + i as i64 * 5);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(30))?;
    Ok(())
}

/// Reads every committed record of `click-counts` on `bootstrap`.
fn read_output(bootstrap: &str) -> Result<BTreeMap<(u64, i64), u64>, Box<dyn Error>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "windowed-count-check")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()?;
    let metadata = consumer.fetch_metadata(Some("click-counts"), Duration::from_secs(10))?;
    let mut tpl = TopicPartitionList::new();
    let mut ends = BTreeMap::new();
    for p in metadata.topics().iter().flat_map(|t| t.partitions()) {
        tpl.add_partition_offset("click-counts", p.id(), Offset::Beginning)?;
        ends.insert(p.id(), consumer.fetch_watermarks("click-counts", p.id(), Duration::from_secs(10))?.1);
    }
    consumer.assign(&tpl)?;
    let mut counts = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let positions = consumer.position()?;
        let done = ends.iter().all(|(&p, &end)| {
            positions.find_partition("click-counts", p).is_some_and(|e| e.offset().to_raw().unwrap_or(-1) >= end)
        });
        if done {
            break;
        }
        if Instant::now() > deadline {
            return Err("reading click-counts back took over 30 s".into());
        }
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m?;
            let text = std::str::from_utf8(m.payload().unwrap_or_default())?;
            let fields: Vec<&str> = text.split(',').collect();
            let [user, start, count] = fields[..] else { return Err(format!("a bad output record {text:?}").into()) };
            let previous = counts.insert((user.parse()?, start.parse()?), count.parse()?);
            if previous.is_some() {
                return Err(format!("window {user},{start} written twice").into());
            }
        }
    }
    Ok(counts)
}

/// Runs the example between `source` and `sink` (starting in-process brokers for those not
/// given), with checkpoints in `checkpoints`.
///
/// # Errors
///
/// A broker that cannot be reached, a failed pipeline, or output that is not the expected
/// count.
pub fn run(
    source: Option<String>,
    sink: Option<String>,
    checkpoints: &std::path::Path,
) -> Result<Summary, Box<dyn Error>> {
    let a = match &source {
        Some(_) => None,
        None => Some(InProcessBroker::start("a", &[("clicks", 4)])?),
    };
    let b = match &sink {
        Some(_) => None,
        None => Some(InProcessBroker::start("b", &[("click-counts", 2)])?),
    };
    let source = source.unwrap_or_else(|| a.as_ref().map(InProcessBroker::address).unwrap_or_default());
    let sink = sink.unwrap_or_else(|| b.as_ref().map(InProcessBroker::address).unwrap_or_default());
    println!("source broker A: {source}; sink broker B: {sink}");
    produce_input(&source)?;

    let _ = std::fs::remove_dir_all(checkpoints);
    let clicks = KafkaSourceFactory::new(KafkaSourceConfig::new(&source, "windowed-count", "clicks").bounded())?;
    let counts = KafkaSinkFactory::new(KafkaSinkConfig::new(&sink, "click-counts", "windowed-count"))?;
    let (clicks_in, counts_in) = (clicks.clone(), counts.clone());
    Pipeline::new(PipelineConfig::with_shards(2))
        .checkpointing(CheckpointConfig::new(checkpoints).interval(Duration::from_millis(100)))
        .run(move |scope| {
            let users = clicks_in
                .instance(scope.shard(), |r| {
                    let user = std::str::from_utf8(r.key.unwrap_or_default())
                        .ok()
                        .and_then(|k| k.strip_prefix("user-"))
                        .and_then(|n| n.parse::<u64>().ok())
                        .unwrap_or(u64::MAX);
                    (user, r.timestamp)
                })
                .expect("the Kafka consumer starts");
            let sink = counts_in
                .instance(scope.shard(), |e: Event<(u64, i64, u64)>| {
                    let (user, start, count) = e.value;
                    OutRecord::new(Some(user.to_string().into_bytes()), format!("{user},{start},{count}").into_bytes())
                        .at(e.time)
                })
                .expect("the Kafka producer starts");
            scope
                // Partitions interleave, so allow the whole input's span of disorder.
                .source(
                    users,
                    WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(60), |r: &(u64, EventTime)| r.1),
                )
                .key_by(|r| r.0)
                .window(Windows::tumbling(Duration::from_secs(1)))
                .count()
                .map(|r| (r.key, r.window.start.millis(), r.value))
                .to_two_phase_commit(sink);
        })?;
    let stats = counts.finish()?;
    let counts = read_output(&sink)?;
    let want = expected_counts();
    if counts != want {
        let wrong: Vec<String> = want
            .iter()
            .filter(|(k, v)| counts.get(k) != Some(v))
            .take(5)
            .map(|(k, v)| format!("{k:?}: {v} expected, {:?} read", counts.get(k)))
            .collect();
        return Err(format!(
            "read back {} windows, expected {}; differing: {}",
            counts.len(),
            want.len(),
            wrong.join("; ")
        )
        .into());
    }
    println!(
        "{} clicks -> {} windows counted on B, in {} committed epochs; every count correct",
        CLICKS,
        counts.len(),
        stats.epochs_committed
    );
    Ok(Summary { counts, epochs_committed: stats.epochs_committed })
}

#[allow(dead_code)] // Also compiled into the tests, which call `run`.
fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let (source, sink) = (args.next(), args.next());
    let checkpoints = std::env::temp_dir().join(format!("sluice-kafka-example-checkpoints-{}", std::process::id()));
    let result = run(source, sink, &checkpoints);
    let _ = std::fs::remove_dir_all(&checkpoints);
    result.map(|_| ())
}
