//! The slot job the multi-process tests run through [`JobMember`]s: the member process
//! (this test binary again, with [`CHILD`] set), the parent's view of the members, and
//! the end-of-run checks. Included by `engine/tests/multi_process.rs` (its takeover
//! tests) and by the `sluice` package's `tests/serve_job.rs` (the same job on a `sluice
//! serve` process killed with SIGKILL).
//!
//! Each of the [`SLOTS`] slots runs one pipeline instance: its sixth of the events (event
//! `i` goes to slot `i % 6`), made by a checkpointed [`Generator`] paced to [`RATE`]
//! records a second from the slot's start, through the repartition topic [`TOPIC`] (on
//! the slot's fixed partitions), counted per key and second, written exactly once to
//! [`OUT`] under the slot's transactional ids, checkpointing every 300 ms into the slot's
//! directory under the root every member shares.

use std::{
    collections::BTreeSet,
    path::Path,
    process::{Child, Command},
    sync::{Arc, Mutex, atomic::AtomicBool},
    time::{Duration, Instant},
};

use sluice_engine::{
    connectors::kafka::{
        JobMember, JobMemberConfig, KafkaSinkConfig, KafkaSinkFactory, OutRecord, Repartition, Slot, SlotJob,
    },
    dataflow::{Event, Generator, Pipeline, PipelineConfig, WatermarkStrategy, Windows},
};

use crate::job::{Children, Count, EVENTS, Output, PARTITIONS, Paced, compare, event, spawn_reading, this_test, time};

pub const CHILD: &str = "SLUICE_MP_SLOT_CHILD";
pub const JOB: &str = "mp-slots";
pub const TOPIC: &str = "mp-slots-through";
pub const OUT: &str = "mp-slots-out";
pub const SLOTS: u32 = 6;
/// Records a second each slot's input releases: its 1000 events take 25 s.
pub const RATE: u64 = 40;

/// The topics the job needs besides the slots topic (which the members make): the
/// repartition topic and the output, made through the cluster's CreateTopics.
pub fn create_topics(bootstrap: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> =
        rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("an admin client");
    let topics = [
        NewTopic::new(TOPIC, PARTITIONS as i32, TopicReplication::Fixed(1)),
        NewTopic::new(OUT, 1, TopicReplication::Fixed(1)),
    ];
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in futures_lite::future::block_on(admin.create_topics(&topics, &options)).expect("CreateTopics") {
        result.expect("the topic is created");
    }
}

/// What one member process printed: the slots it holds, and its slot events.
#[derive(Default)]
pub struct Seen {
    slots: BTreeSet<u32>,
    /// `(slot, Some(checkpoint))` for a start restored from a checkpoint, `None` afresh.
    started: Vec<(u32, Option<u64>)>,
    pub stopped: Vec<u32>,
    failed: Vec<String>,
    /// Starts that waited for another process to stop the slot.
    blocked: usize,
    /// The latest slot events, for a failure's message.
    history: Vec<String>,
}

pub struct Members {
    bootstrap: String,
    root: std::path::PathBuf,
    pub seen: Vec<Arc<Mutex<Seen>>>,
    /// Dropped (killed) before the launcher, which may own what they run in.
    pub children: Children,
    /// The command a member runs under, by member (say `ip netns exec NS`), if any.
    launcher: Option<Launcher>,
}

/// Makes member `i`'s command prefix.
pub type Launcher = Box<dyn FnMut(usize) -> Vec<String>>;

impl Members {
    pub fn start(bootstrap: &str, root: &Path, n: usize) -> Members {
        Members::start_with(bootstrap, root, n, None)
    }

    /// As [`Members::start`], each member's command run under `launcher`'s prefix.
    pub fn start_with(bootstrap: &str, root: &Path, n: usize, launcher: Option<Launcher>) -> Members {
        let mut members = Members {
            bootstrap: bootstrap.into(),
            root: root.into(),
            seen: Vec::new(),
            children: Children(Vec::new()),
            launcher,
        };
        for _ in 0..n {
            members.add();
        }
        members
    }

    /// Starts one more member process.
    pub fn add(&mut self) -> usize {
        let member = self.children.0.len();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let prefix = self.launcher.as_mut().map(|l| l(member)).unwrap_or_default();
        self.children.0.push(spawn(&self.bootstrap, member, &self.root, &seen, &prefix));
        self.seen.push(seen);
        member
    }

    pub fn slots(&self, member: usize) -> BTreeSet<u32> {
        self.seen[member].lock().unwrap().slots.clone()
    }

    pub fn started(&self, member: usize) -> Vec<(u32, Option<u64>)> {
        self.seen[member].lock().unwrap().started.clone()
    }

    pub fn check_alive(&mut self, except: &[usize]) {
        for (i, c) in self.children.0.iter_mut().enumerate() {
            if !except.contains(&i) {
                assert!(c.try_wait().expect("wait").is_none(), "member {i} exited early");
            }
        }
    }

    /// Waits until `members` together hold every slot once, each at least one, each slot
    /// started since `since[member]` events, and nothing changes for a second.
    pub fn wait_spread(&mut self, members: &[usize], what: &str, dead: &[usize], output: &mut Output) {
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
    pub fn failures(&self) -> (usize, usize) {
        let seen = self.seen.iter().map(|s| s.lock().unwrap());
        seen.fold((0, 0), |(f, b), s| (f + s.failed.len(), b + s.blocked))
    }
}

impl Members {
    /// How many starts each member has reported so far (for [`Members::assert_restored`]).
    pub fn marks(&self) -> Vec<usize> {
        (0..self.seen.len()).map(|m| self.started(m).len()).collect()
    }

    /// Asserts that each of `slots` was started by one of `by` since `marks`, restored
    /// from a checkpoint.
    pub fn assert_restored(&self, slots: &BTreeSet<u32>, by: &[usize], marks: &[usize], whose: &str) {
        for slot in slots {
            let start = by
                .iter()
                .flat_map(|&m| self.started(m)[marks.get(m).copied().unwrap_or(0)..].to_vec())
                .find(|(s, _)| s == slot)
                .unwrap_or_else(|| panic!("{whose} slot {slot} was not started by {by:?}"));
            assert!(start.1.is_some(), "{whose} slot {slot} was started without its checkpoint: {start:?}");
        }
    }

    /// Waits until `min` events are counted and committed, every member but `dead` alive.
    pub fn wait_committed(&mut self, output: &mut Output, min: u64, deadline: Instant, dead: &[usize]) {
        while output.total() < min {
            assert!(Instant::now() < deadline, "only {} events counted", output.total());
            self.check_alive(dead);
            output.poll(Duration::from_millis(100));
        }
    }

    /// Runs to the end (every event counted: exactly, or with `exact` false at least
    /// once), waits for anything that would come twice, stops the members and checks the
    /// output against `expected`; returns (slot failures, starts that waited).
    pub fn finish(
        mut self,
        output: &mut Output,
        expected: &[Count],
        exact: bool,
        deadline: Instant,
        dead: &[usize],
    ) -> (usize, usize) {
        let done = |o: &Output| if exact { o.total() >= EVENTS } else { covers(o, expected).is_ok() };
        while !done(output) {
            if Instant::now() > deadline {
                for (m, seen) in self.seen.iter().enumerate() {
                    let seen = seen.lock().unwrap();
                    eprintln!("member {m}: holds {:?}; latest events {:?}", seen.slots, seen.history);
                }
                if exact {
                    compare(output, expected);
                }
                covers(output, expected).unwrap_or_else(|e| panic!("{e}"));
            }
            self.check_alive(dead);
            output.poll(Duration::from_millis(100));
        }
        let settle = Instant::now() + Duration::from_secs(2);
        while Instant::now() < settle {
            output.poll(Duration::from_millis(100));
        }
        let failures = self.failures();
        drop(self);
        if exact {
            compare(output, expected);
        } else {
            covers(output, expected).unwrap_or_else(|e| panic!("{e}"));
        }
        failures
    }
}

/// At least once: every count of `expected` has one at least as large for its key and
/// window in `output`, and `output` has no key and window `expected` lacks.
pub fn covers(output: &Output, expected: &[Count]) -> Result<(), String> {
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

/// Starts member process `member`, collecting what it prints into `seen`.
fn spawn(bootstrap: &str, member: usize, root: &Path, seen: &Arc<Mutex<Seen>>, prefix: &[String]) -> Child {
    let spec = format!("{bootstrap},{}", root.display());
    let command = match prefix.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(std::env::current_exe().expect("the test binary")).env(CHILD, spec);
            c
        }
        None => this_test(CHILD, spec),
    };
    let seen = seen.clone();
    spawn_reading(command, move |line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let mut seen = seen.lock().unwrap();
        if f.first() == Some(&"slot") {
            if seen.history.len() == 64 {
                seen.history.remove(0);
            }
            seen.history.push(line.to_string());
        }
        match f[..] {
            ["SLOTS", ref slots @ ..] => seen.slots = slots.iter().map(|s| s.parse().unwrap()).collect(),
            ["slot", s, "started", "from", "checkpoint", id] => {
                seen.started.push((s.parse().unwrap(), Some(id.parse().unwrap())));
            }
            ["slot", s, "started", "afresh"] => seen.started.push((s.parse().unwrap(), None)),
            ["slot", s, "stopped"] => seen.stopped.push(s.parse().unwrap()),
            ["slot", _, "waits:", ..] => seen.blocked += 1,
            ["slot", _, "failed:", ..] => seen.failed.push(line.to_string()),
            _ => {}
        }
        if std::env::var_os("MP_DEBUG").is_some_and(|v| !v.is_empty()) {
            eprintln!("member {member}: {line}");
        }
    })
}

/// A member process (`bootstrap,root`): runs the slots the group gives it, printing
/// `SLOTS s s ...` whenever they change and each slot event (`slot 3 started from
/// checkpoint 12`, ...).
pub fn child(spec: &str) {
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
