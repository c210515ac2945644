//! One job across several OS processes (issue 27, first slice): a windowed count whose keys
//! meet through a repartition topic (`Repartition::key_by_through`) on a Kafka-protocol
//! broker, the library's listener over a fresh engine (what `sluice serve` runs), on a
//! loopback port in this process.
//!
//! `multi_process_windowed_count`: three child processes (this binary again, started with
//! `SLUICE_MP_CHILD` set), two shards each, are instances 0..3 of one job. Each reads its
//! own third of the input (event `i` goes to instance `i % 3`), writes it to the
//! repartition topic by key, and reads back the partitions the job's consumer group gives
//! it; the tumbling one-second counts each prints must together equal, record for record,
//! the same job run in one process with a plain `key_by`, every key counted in exactly one
//! process and every process counting some. The children start writing only once every
//! one of the six readers holds a partition (so each starts at the topic's beginning);
//! instance 0 starts a second after the others, so that a reader that did not wait for
//! every writer's watermark would close windows before its records arrive.
//!
//! This test has its own `main` (`harness = false`); `cargo test multi_process` runs it.

mod common;
#[path = "multi_process/exactly_once.rs"]
mod exactly_once;
#[path = "multi_process/job.rs"]
mod job;
#[path = "multi_process/netns.rs"]
mod netns;
#[path = "multi_process/slots.rs"]
mod slots;
#[path = "multi_process/takeover.rs"]
mod takeover;

use std::{
    collections::{BTreeMap, BTreeSet},
    io::Write,
    process::Child,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::kafka::Served;
use futures_lite::future::block_on;
use job::{Children, Count, EVENTS, PARTITIONS, event, single_process, spawn_reading, this_test, time};
use rdkafka::{mocking::MockCluster, producer::DefaultProducerContext};
use sluice_engine::{
    connectors::kafka::{Repartition, RepartitionConfig},
    dataflow::{ChannelSource, Pipeline, PipelineConfig, WatermarkStrategy, Windows},
    kafka::KafkaConfig,
};

const CHILD: &str = "SLUICE_MP_CHILD";
const INSTANCES: u32 = 3;
const SHARDS: usize = 2;
const JOB: &str = "mp-job";
const TOPIC: &str = "mp-through";

/// The partitions each reader holds, by (instance, shard).
type Assignment = BTreeMap<(u32, usize), Vec<i32>>;

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
        return;
    }
    if let Ok(spec) = std::env::var(exactly_once::CHILD) {
        exactly_once::child(&spec);
        return;
    }
    if let Ok(spec) = std::env::var(slots::CHILD) {
        slots::child(&spec);
        return;
    }
    // `cargo test NAME` passes NAME on: run the tests it selects.
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let selected = |name: &str| filter.iter().all(|f| name.contains(f.as_str()));
    let kinds: Vec<String> = match std::env::var("BROKER") {
        Ok(k) => vec![k],
        Err(_) => vec!["served".into(), "mock".into()],
    };
    let mut ran = 0;
    if selected("multi_process_windowed_count") {
        for kind in kinds.iter().map(String::as_str) {
            let started = Instant::now();
            multi_process_windowed_count(kind);
            println!("test multi_process_windowed_count ({kind}) ... ok ({:.1?})", started.elapsed());
            ran += 1;
        }
    }
    for (name, test) in exactly_once::TESTS.into_iter().chain(takeover::TESTS) {
        if selected(name) {
            let started = Instant::now();
            test();
            println!("test {name} ... ok ({:.1?})", started.elapsed());
            ran += 1;
        }
    }
    println!("multi_process: {ran} run");
}

/// The broker the job's processes meet at.
enum Broker {
    Served(Box<Served>),
    Mock(MockCluster<'static, DefaultProducerContext>),
}

impl Broker {
    /// One with the repartition topic.
    fn start(kind: &str) -> Broker {
        match kind {
            "served" => {
                let served = Served::launch(
                    "multi_process",
                    "windowed_count",
                    1,
                    KafkaConfig::new("127.0.0.1:0".parse().unwrap()),
                );
                block_on(served.handle().create_topic(TOPIC, PARTITIONS, None))
                    .expect("the repartition topic is created");
                Broker::Served(Box::new(served))
            }
            _ => {
                let mock = MockCluster::new(1).expect("the mock cluster starts");
                mock.create_topic(TOPIC, PARTITIONS as i32, 1).expect("the repartition topic is created");
                Broker::Mock(mock)
            }
        }
    }

    fn bootstrap(&self) -> String {
        match self {
            Broker::Served(s) => s.addr().to_string(),
            Broker::Mock(m) => m.bootstrap_servers(),
        }
    }
}

fn multi_process_windowed_count(kind: &str) {
    let expected = single_process();
    assert_eq!(expected.iter().map(|c| c.2).sum::<u64>(), EVENTS);
    let broker = Broker::start(kind);
    let results: Arc<Mutex<Vec<(u32, Count)>>> = Arc::default();
    let assigned: Arc<Mutex<Assignment>> = Arc::default();
    let mut children = Children((0..INSTANCES).map(|i| spawn(&broker.bootstrap(), i, &results, &assigned)).collect());
    wait_assigned(&assigned);
    for c in &mut children.0 {
        writeln!(c.stdin.as_mut().expect("piped"), "go").expect("the child reads its stdin");
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let total = || results.lock().unwrap().iter().map(|(_, c)| c.2).sum::<u64>();
    while total() < EVENTS && Instant::now() < deadline {
        for c in &mut children.0 {
            assert!(c.try_wait().expect("wait").is_none(), "a child exited early");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Anything counted twice would come now.
    std::thread::sleep(Duration::from_millis(500));
    drop(children);
    let results = std::mem::take(&mut *results.lock().unwrap());
    let mut got: Vec<Count> = results.iter().map(|(_, c)| *c).collect();
    got.sort_unstable();
    if got != expected {
        let (g, e): (BTreeSet<Count>, BTreeSet<Count>) =
            (got.iter().copied().collect(), expected.iter().copied().collect());
        let missing: Vec<&Count> = e.difference(&g).take(10).collect();
        let extra: Vec<&Count> = g.difference(&e).take(10).collect();
        panic!(
            "{kind}: the processes' {} counts differ from the single process's {}; missing (first 10): {missing:?}; \
             not expected (first 10): {extra:?}",
            got.len(),
            expected.len()
        );
    }
    let mut owner: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for (instance, (key, _, _)) in &results {
        owner.entry(*key).or_default().insert(*instance);
    }
    assert!(owner.values().all(|o| o.len() == 1), "a key was counted in two processes: {owner:?}");
    let mut keys = BTreeMap::<u32, usize>::new();
    for o in owner.values().flatten() {
        *keys.entry(*o).or_default() += 1;
    }
    assert_eq!(keys.len(), INSTANCES as usize, "keys by process: {owner:?}");
    println!("{} counts from {} processes; keys per process {keys:?}", results.len(), INSTANCES);
}

/// Starts instance `instance`, collecting its result lines into `results`.
fn spawn(
    bootstrap: &str,
    instance: u32,
    results: &Arc<Mutex<Vec<(u32, Count)>>>,
    assigned: &Arc<Mutex<Assignment>>,
) -> Child {
    let (results, assigned) = (results.clone(), assigned.clone());
    spawn_reading(this_test(CHILD, format!("{bootstrap},{instance}")), move |line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f[..] {
            ["RESULT", key, start, count] => {
                let c = (key.parse().unwrap(), start.parse().unwrap(), count.parse().unwrap());
                results.lock().unwrap().push((instance, c));
            }
            ["ASSIGNED", ref shards @ ..] => note_assigned(&mut assigned.lock().unwrap(), instance, shards),
            _ => {}
        }
    })
}

/// Takes an `ASSIGNED shard:p,p shard:p ...` line's fields after the word, of `instance`.
fn note_assigned(assigned: &mut Assignment, instance: u32, shards: &[&str]) {
    for shard in shards {
        let (s, ps) = shard.split_once(':').expect("shard:partitions");
        let ps = ps.split(',').filter(|p| !p.is_empty()).map(|p| p.parse().unwrap()).collect();
        assigned.insert((instance, s.parse().unwrap()), ps);
    }
}

/// Waits until every reader (each shard of each process) holds a partition of the
/// repartition topic and together they hold each once, unchanged for a second (a reader
/// holding none would hold back the watermark of the `key_by` after it).
fn wait_assigned(assigned: &Mutex<Assignment>) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut since: Option<(Instant, Assignment)> = None;
    loop {
        let now = assigned.lock().unwrap().clone();
        let mut all: Vec<i32> = now.values().flatten().copied().collect();
        all.sort_unstable();
        let every_reader = now.len() == INSTANCES as usize * SHARDS && now.values().all(|ps| !ps.is_empty());
        if every_reader && all == (0..PARTITIONS as i32).collect::<Vec<_>>() {
            match &since {
                Some((at, was)) if *was == now => {
                    if at.elapsed() >= Duration::from_secs(1) {
                        return;
                    }
                }
                _ => since = Some((Instant::now(), now)),
            }
        } else {
            since = None;
        }
        assert!(
            Instant::now() < deadline,
            "the readers never held every partition once: {:?}",
            assigned.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A child: instance `instance` of the job, writing its share of the input once its stdin
/// says `go`, printing every count as `RESULT key start count`.
fn child(spec: &str) {
    let (bootstrap, instance) = spec.rsplit_once(',').expect("bootstrap,instance");
    let instance: u32 = instance.parse().expect("an instance number");
    // Short group timeouts: a member whose SyncGroup failed rejoins under a new member id,
    // and librdkafka's mock coordinator waits for the old id until its session times out
    // before the next generation forms (45 s by default, seen as a 90 s stall on a loaded
    // machine). The consumers' warning that the producer ignores these is harmless.
    let config = RepartitionConfig::new(bootstrap, JOB, TOPIC, instance, INSTANCES)
        .at_least_once()
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500");
    let through = Repartition::new(config).expect("the repartition topic is there");
    let (tx, rx) = async_channel::bounded(1024);
    std::thread::spawn(move || {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).expect("stdin");
        if instance == 0 {
            // A writer behind the others: without the minimum over writers, their
            // watermarks would close windows before its records arrive.
            std::thread::sleep(Duration::from_secs(1));
        }
        for i in (u64::from(instance)..EVENTS).step_by(INSTANCES as usize) {
            tx.send_blocking(event(i)).expect("the job runs");
        }
    });
    let reported = through.clone();
    std::thread::spawn(move || exactly_once::report(reported, instance));
    Pipeline::new(PipelineConfig::with_shards(SHARDS))
        .run(move |scope| {
            let input = scope.source(
                ChannelSource::new(rx.clone()),
                WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(1), time),
            );
            through
                .key_by_through(input, |r: &(u64, u64)| r.0)
                .expect("the repartition producer and consumer start")
                .window(Windows::tumbling(Duration::from_secs(1)))
                .count()
                .for_each(|e| println!("RESULT {} {} {}", e.value.key, e.value.window.start.0, e.value.value));
        })
        .expect("the job runs");
}
