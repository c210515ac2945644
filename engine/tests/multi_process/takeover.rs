//! Work that moves between processes (issue 27): the windowed count cut into [`SLOTS`]
//! slots that [`JobMember`]s spread over the job's processes through the consumer group
//! `{job}-slots` (cooperative-sticky), every slot checkpointing into its own directory
//! under one root that all processes share, repartitioning exactly once on fixed
//! partitions, and writing its counts through the exactly-once `KafkaSink` under the
//! slot's transactional ids; the test reads the output `read_committed`.
//!
//! `multi_process_takeover`: three processes share the six slots; once some counts are
//! committed, one process is killed with SIGKILL; the other two must take its slots over
//! (after its six-second session times out), each restored from the slot's last
//! completed checkpoint. Then a fourth process joins and must be given slots, which it
//! restores from their checkpoints while the slots that do not move go on running (the
//! cooperative protocol stops only what moves). Then the first process leaves (scaling in,
//! [`JobMember::leave`]): it stops its slots and leaves the group, and the two left take
//! them over from their checkpoints. The committed output must equal, record
//! for record, the single process's result. It runs on the served listener and on
//! librdkafka's mock cluster; the mock has no `read_committed` (it serves aborted and
//! open transactions' records), so there the check is at least once: every count of
//! the single process is there, none is missing or short, and no window is invented.
//!
//! `multi_process_takeover_broker_restart`: three processes; once some counts are
//! committed the served broker (listener and engine) is restarted on its port and data
//! directory. Its group membership is in memory only, so the members lose their slots and
//! rejoin; the slots restart from their checkpoints (a pipeline failing on the outage is
//! restarted by its member) and the committed output equals the single process's, with no
//! process restarted by the test.
//!
//! Each slot's input is its sixth of the events (event `i` goes to slot `i % 6`), made by
//! a checkpointed [`Generator`] paced to [`RATE`] records a second from the slot's start.

use std::{
    collections::BTreeSet,
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, atomic::AtomicBool},
    time::{Duration, Instant},
};

use futures_lite::future::block_on;
use rdkafka::mocking::MockCluster;
use sluice_engine::{
    connectors::kafka::{
        JobMember, JobMemberConfig, KafkaSinkConfig, KafkaSinkFactory, OutRecord, Repartition, Slot, SlotJob,
    },
    dataflow::{Event, Generator, Pipeline, PipelineConfig, WatermarkStrategy, Windows},
    kafka::KafkaConfig,
};

use super::exactly_once::{Output, Paced, compare};
use super::{Children, Count, EVENTS, PARTITIONS, event, time};
use crate::common::{data_dir, kafka::Served};

pub(super) const CHILD: &str = "SLUICE_MP_SLOT_CHILD";
const JOB: &str = "mp-slots";
const TOPIC: &str = "mp-slots-through";
const OUT: &str = "mp-slots-out";
const SLOTS: u32 = 6;
/// Records a second each slot's input releases: its 1000 events take 25 s.
const RATE: u64 = 40;

type Test = fn();

pub(super) const TESTS: [(&str, Test); 3] = [
    ("multi_process_takeover (served)", || multi_process_takeover("served")),
    ("multi_process_takeover (mock)", || multi_process_takeover("mock")),
    ("multi_process_takeover_broker_restart (served)", multi_process_takeover_broker_restart),
];

/// What one member process printed: the slots it holds, and its slot events.
#[derive(Default)]
struct Seen {
    slots: BTreeSet<u32>,
    /// `(slot, Some(checkpoint))` for a start restored from a checkpoint, `None` afresh.
    started: Vec<(u32, Option<u64>)>,
    stopped: Vec<u32>,
    failed: Vec<String>,
    /// Starts that waited for another process to stop the slot.
    blocked: usize,
}

struct Members {
    bootstrap: String,
    root: std::path::PathBuf,
    seen: Vec<Arc<Mutex<Seen>>>,
    children: Children,
}

impl Members {
    fn start(bootstrap: &str, root: &Path, n: usize) -> Members {
        let mut members = Members {
            bootstrap: bootstrap.into(),
            root: root.into(),
            seen: Vec::new(),
            children: Children(Vec::new()),
        };
        for _ in 0..n {
            members.add();
        }
        members
    }

    /// Starts one more member process.
    fn add(&mut self) -> usize {
        let member = self.children.0.len();
        let seen = Arc::new(Mutex::new(Seen::default()));
        self.children.0.push(spawn(&self.bootstrap, member, &self.root, &seen));
        self.seen.push(seen);
        member
    }

    fn slots(&self, member: usize) -> BTreeSet<u32> {
        self.seen[member].lock().unwrap().slots.clone()
    }

    fn started(&self, member: usize) -> Vec<(u32, Option<u64>)> {
        self.seen[member].lock().unwrap().started.clone()
    }

    fn check_alive(&mut self, except: &[usize]) {
        for (i, c) in self.children.0.iter_mut().enumerate() {
            if !except.contains(&i) {
                assert!(c.try_wait().expect("wait").is_none(), "member {i} exited early");
            }
        }
    }

    /// Waits until `members` together hold every slot once, each at least one, each slot
    /// started since `since[member]` events, and nothing changes for a second.
    fn wait_spread(&mut self, members: &[usize], what: &str, dead: &[usize], output: &mut Output) {
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut steady: Option<(Instant, Vec<BTreeSet<u32>>)> = None;
        loop {
            self.check_alive(dead);
            let held: Vec<BTreeSet<u32>> = members.iter().map(|&m| self.slots(m)).collect();
            let all: Vec<u32> = held.iter().flatten().copied().collect();
            let running = |m: usize, s: u32| self.started(m).iter().any(|(slot, _)| *slot == s);
            let spread = all.len() == SLOTS as usize
                && all.iter().copied().collect::<BTreeSet<_>>().len() == SLOTS as usize
                && held.iter().all(|h| !h.is_empty())
                && members.iter().zip(&held).all(|(&m, h)| h.iter().all(|&s| running(m, s)));
            match (&steady, spread) {
                (Some((at, was)), true) if *was == held => {
                    if at.elapsed() >= Duration::from_secs(1) {
                        println!("{what}: slots by member {:?}", members.iter().zip(&held).collect::<Vec<_>>());
                        return;
                    }
                }
                (_, true) => steady = Some((Instant::now(), held)),
                (_, false) => steady = None,
            }
            assert!(
                Instant::now() < deadline,
                "{what}: the slots never spread over members {members:?}: {:?}",
                members.iter().map(|&m| (m, self.slots(m))).collect::<Vec<_>>()
            );
            output.poll(Duration::from_millis(100));
        }
    }

    /// How many slot pipelines failed, and how many starts waited for another process.
    fn failures(&self) -> (usize, usize) {
        let seen = self.seen.iter().map(|s| s.lock().unwrap());
        seen.fold((0, 0), |(f, b), s| (f + s.failed.len(), b + s.blocked))
    }
}

/// The broker, the job's topics made, and the checkpoint root.
fn broker(
    kind: &str,
    name: &str,
) -> (Option<Served>, Option<MockCluster<'static, rdkafka::producer::DefaultProducerContext>>, String) {
    if kind == "served" {
        let served = Served::launch("multi_process", name, 1, KafkaConfig::new("127.0.0.1:0".parse().unwrap()));
        block_on(served.handle().create_topic(TOPIC, PARTITIONS, None)).expect("the repartition topic");
        block_on(served.handle().create_topic(OUT, 1, None)).expect("the output topic");
        let bootstrap = served.addr().to_string();
        (Some(served), None, bootstrap)
    } else {
        let mock = MockCluster::new(1).expect("the mock cluster starts");
        mock.create_topic(TOPIC, PARTITIONS as i32, 1).expect("the repartition topic");
        mock.create_topic(OUT, 1, 1).expect("the output topic");
        // The mock cluster answers no CreateTopics (the members make it on `sluice serve`).
        mock.create_topic(&format!("{JOB}-slots"), SLOTS as i32, 1).expect("the slots topic");
        let bootstrap = mock.bootstrap_servers();
        (None, Some(mock), bootstrap)
    }
}

fn multi_process_takeover(kind: &str) {
    let expected = super::single_process();
    let (_served, _mock, bootstrap) = broker(kind, "takeover");
    let root = data_dir("multi_process", &format!("takeover-{kind}-checkpoints"));
    let mut members = Members::start(&bootstrap, &root, 3);
    let mut output = Output::of(&bootstrap, OUT);
    members.wait_spread(&[0, 1, 2], "three members", &[], &mut output);
    let deadline = Instant::now() + Duration::from_secs(120);
    while output.total() < EVENTS / 5 {
        assert!(Instant::now() < deadline, "only {} events counted", output.total());
        members.check_alive(&[]);
        output.poll(Duration::from_millis(100));
    }
    let lost = members.slots(1);
    println!("{} of {EVENTS} events committed: killing member 1, which runs slots {lost:?}", output.total());
    members.children.0[1].kill().expect("SIGKILL");
    members.children.0[1].wait().expect("reaped");
    let before: Vec<usize> = [0, 2].iter().map(|&m| members.started(m).len()).collect();
    members.wait_spread(&[0, 2], "after the kill", &[1], &mut output);
    for slot in &lost {
        let restored = [0, 2]
            .iter()
            .zip(&before)
            .flat_map(|(&m, &b)| members.started(m)[b..].to_vec())
            .find(|(s, _)| s == slot)
            .unwrap_or_else(|| panic!("slot {slot} of the killed member was not started elsewhere"));
        assert!(restored.1.is_some(), "slot {slot} was taken over without its checkpoint: {restored:?}");
    }
    let kept: Vec<BTreeSet<u32>> = [0, 2].iter().map(|&m| members.slots(m)).collect();
    let stopped_before: Vec<usize> = [0, 2].iter().map(|&m| members.seen[m].lock().unwrap().stopped.len()).collect();
    let joined = members.add();
    println!("member {joined} joins");
    members.wait_spread(&[0, 2, joined], "after the join", &[1], &mut output);
    let moved = members.slots(joined);
    assert!(
        members.started(joined).iter().all(|(s, restored)| !moved.contains(s) || restored.is_some()),
        "the joining member started slots without their checkpoints: {:?}",
        members.started(joined)
    );
    for (i, &m) in [0, 2].iter().enumerate() {
        let stopped = members.seen[m].lock().unwrap().stopped[stopped_before[i]..].to_vec();
        assert!(
            stopped.iter().all(|s| moved.contains(s))
                && kept[i].difference(&moved).all(|s| members.slots(m).contains(s)),
            "member {m} stopped {stopped:?} though only {moved:?} moved (cooperative rebalancing)"
        );
    }
    let leaving = 0;
    let given_back = members.slots(leaving);
    println!("member {leaving} leaves, giving back slots {given_back:?}");
    let stdin = members.children.0[leaving].stdin.as_mut().expect("piped");
    writeln!(stdin, "leave").expect("the member reads its stdin");
    let before: Vec<usize> = [2, joined].iter().map(|&m| members.started(m).len()).collect();
    let left = members.children.0[leaving].wait().expect("the member exits");
    assert!(left.success(), "member {leaving} left with {left}");
    members.wait_spread(&[2, joined], "after the leave", &[1, leaving], &mut output);
    for slot in &given_back {
        let taken = [2, joined]
            .iter()
            .zip(&before)
            .flat_map(|(&m, &b)| members.started(m)[b..].to_vec())
            .find(|(s, _)| s == slot)
            .unwrap_or_else(|| panic!("slot {slot} of the member that left was not started elsewhere"));
        assert!(taken.1.is_some(), "slot {slot} was taken over without its checkpoint: {taken:?}");
    }
    // The mock cluster has no `read_committed` (its Fetch answers the end offset as the
    // last stable offset and lists no aborted transactions: rdkafka_mock_handlers.c), so
    // there aborted and replayed output is read too: nothing may be missing, but counts
    // may come more than once or larger.
    let exact = kind == "served";
    let done = |o: &Output| if exact { o.total() >= EVENTS } else { covers(o, &expected).is_ok() };
    while !done(&output) {
        if Instant::now() > deadline {
            if exact {
                compare(&output, &expected);
            }
            covers(&output, &expected).unwrap_or_else(|e| panic!("{e}"));
        }
        members.check_alive(&[1, leaving]);
        output.poll(Duration::from_millis(100));
    }
    let settle = Instant::now() + Duration::from_secs(2);
    while Instant::now() < settle {
        output.poll(Duration::from_millis(100));
    }
    let failures = members.failures();
    drop(members);
    if exact {
        compare(&output, &expected);
        println!(
            "{kind}: {} counts committed, equal to the single process's; (slot failures, starts that waited) on the \
             way: {failures:?}",
            output.counts.len()
        );
    } else {
        covers(&output, &expected).unwrap_or_else(|e| panic!("{e}"));
        println!(
            "{kind}: {} counts written, every one of the single process's {} among them (at least once); (slot \
             failures, starts that waited) on the way: {failures:?}",
            output.counts.len(),
            expected.len()
        );
    }
}

/// At least once: every count of `expected` has one at least as large for its key and
/// window in `output`, and `output` has no key and window `expected` lacks.
fn covers(output: &Output, expected: &[Count]) -> Result<(), String> {
    let mut most = std::collections::BTreeMap::<(u64, i64), u64>::new();
    for &(key, start, n) in &output.counts {
        let m = most.entry((key, start)).or_default();
        *m = (*m).max(n);
    }
    let missing: Vec<&Count> = expected.iter().filter(|(k, s, n)| most.get(&(*k, *s)).is_none_or(|m| m < n)).collect();
    let known: BTreeSet<(u64, i64)> = expected.iter().map(|(k, s, _)| (*k, *s)).collect();
    let invented: Vec<&(u64, i64)> = most.keys().filter(|w| !known.contains(w)).collect();
    if missing.is_empty() && invented.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of the {} expected counts are missing or short (first 10: {:?}); windows not expected: {:?}",
            missing.len(),
            expected.len(),
            &missing[..missing.len().min(10)],
            &invented[..invented.len().min(10)]
        ))
    }
}

fn multi_process_takeover_broker_restart() {
    let expected = super::single_process();
    let (served, _, bootstrap) = broker("served", "takeover_broker_restart");
    let mut served = served.expect("served");
    let root = data_dir("multi_process", "takeover-broker-restart-checkpoints");
    let mut members = Members::start(&bootstrap, &root, 3);
    let mut output = Output::of(&bootstrap, OUT);
    members.wait_spread(&[0, 1, 2], "three members", &[], &mut output);
    let deadline = Instant::now() + Duration::from_secs(150);
    while output.total() < EVENTS / 5 {
        assert!(Instant::now() < deadline, "only {} events counted", output.total());
        members.check_alive(&[]);
        output.poll(Duration::from_millis(100));
    }
    println!("{} of {EVENTS} events committed: restarting the broker", output.total());
    served.restart_same_port();
    assert_eq!(served.addr().to_string(), bootstrap, "the listener is back on its port");
    while output.total() < EVENTS {
        if Instant::now() > deadline {
            compare(&output, &expected);
        }
        members.check_alive(&[]);
        output.poll(Duration::from_millis(100));
    }
    let settle = Instant::now() + Duration::from_secs(2);
    while Instant::now() < settle {
        output.poll(Duration::from_millis(100));
    }
    let failures = members.failures();
    drop(members);
    compare(&output, &expected);
    println!(
        "{} counts committed, equal to the single process's; (slot failures, starts that waited): {failures:?}",
        output.counts.len()
    );
}

/// Starts member process `member`, collecting what it prints into `seen`.
fn spawn(bootstrap: &str, member: usize, root: &Path, seen: &Arc<Mutex<Seen>>) -> Child {
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .env(CHILD, format!("{bootstrap},{}", root.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the child starts");
    let stdout = child.stdout.take().expect("piped");
    let seen = seen.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let mut seen = seen.lock().unwrap();
            match f[..] {
                ["SLOTS", ref slots @ ..] => seen.slots = slots.iter().map(|s| s.parse().unwrap()).collect(),
                ["slot", s, "started", "from", "checkpoint", id] => {
                    seen.started.push((s.parse().unwrap(), Some(id.parse().unwrap())));
                }
                ["slot", s, "started", "afresh"] => seen.started.push((s.parse().unwrap(), None)),
                ["slot", s, "stopped"] => seen.stopped.push(s.parse().unwrap()),
                ["slot", _, "waits:", ..] => seen.blocked += 1,
                ["slot", _, "failed:", ..] => seen.failed.push(line.clone()),
                _ => {}
            }
            if std::env::var_os("MP_DEBUG").is_some_and(|v| !v.is_empty()) {
                eprintln!("member {member}: {line}");
            }
        }
    });
    child
}

/// A member process (`bootstrap,root`): runs the slots the group gives it, printing
/// `SLOTS s s ...` whenever they change and each slot event (`slot 3 started from
/// checkpoint 12`, ...).
pub(super) fn child(spec: &str) {
    let (bootstrap, root) = spec.split_once(',').expect("bootstrap,root");
    let mut config = JobMemberConfig::new(bootstrap, JOB, SLOTS, root);
    config.session_timeout = Duration::from_secs(6);
    config.restart_backoff = Duration::from_millis(500);
    let out = bootstrap.to_string();
    let member = JobMember::start(config, move |slot| run_slot(slot, &out)).expect("the member joins");
    let leave = Arc::new(AtomicBool::new(false));
    let told = leave.clone();
    std::thread::spawn(move || {
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line).is_ok() && line.trim() == "leave" {
            told.store(true, std::sync::atomic::Ordering::Release);
        }
    });
    let (mut shown, mut held) = (0, None);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        if leave.load(std::sync::atomic::Ordering::Acquire) {
            member.leave();
            println!("LEFT");
            return;
        }
        let events = member.events();
        for e in &events[shown.min(events.len())..] {
            println!("{e}");
        }
        shown = events.len();
        let now = member.slots();
        if held.as_ref() != Some(&now) {
            println!("SLOTS {}", now.iter().map(u32::to_string).collect::<Vec<_>>().join(" "));
            held = Some(now);
        }
    }
}

/// Slot `slot`'s pipeline: its share of the input, through the repartition topic, counted
/// per key and second, written exactly once to [`OUT`].
fn run_slot(slot: &Slot, bootstrap: &str) -> Result<SlotJob, String> {
    let through = Repartition::new(slot.repartition(TOPIC)).map_err(|e| e.to_string())?;
    let out = KafkaSinkFactory::new(KafkaSinkConfig::new(bootstrap, OUT, slot.transactional_id("out")))
        .map_err(|e| e.to_string())?;
    let mut checkpoints = slot.checkpoints();
    checkpoints.interval = Duration::from_millis(300);
    let (s, go) = (slot.slot, Arc::new(AtomicBool::new(true)));
    let (writers, sinks) = (through.clone(), out.clone());
    let running = Pipeline::new(PipelineConfig { pin: false, ..PipelineConfig::with_shards(1) })
        .checkpointing(checkpoints)
        .spawn(move |scope| {
            let make = move |j: u64| event(j * u64::from(SLOTS) + u64::from(s));
            let generator = Generator::new(0, 1, EVENTS / u64::from(SLOTS), make);
            let input = scope.source(
                Paced::new(generator, go.clone(), RATE),
                WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(1), time),
            );
            let sink = out
                .instance(scope.shard(), move |e: Event<Count>| {
                    OutRecord::new(None, format!("{} {} {} {s}", e.value.0, e.value.1, e.value.2).into_bytes())
                })
                .expect("the output sink starts");
            through
                .key_by_through(input, |r: &(u64, u64)| r.0)
                .expect("the repartition producer and consumer start")
                .window(Windows::tumbling(Duration::from_secs(1)))
                .count()
                .map(|r| (r.key, r.window.start.0, r.value))
                .to_two_phase_commit(sink);
        })
        .map_err(|e| e.to_string())?;
    Ok(SlotJob::new(running).on_stop(move || {
        writers.finish().map_err(|e| e.to_string())?;
        sinks.finish().map(drop).map_err(|e| e.to_string())
    }))
}
