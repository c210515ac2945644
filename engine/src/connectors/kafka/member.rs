//! One job across many processes, with work that moves: the job is cut into a fixed number
//! of *slots*, and a Kafka consumer group decides which process runs which.
//!
//! A slot is one complete instance of the job's pipeline: instance `slot` of `slots` of a
//! [`Repartition`](super::Repartition) (on fixed partitions: reader `slot * shards +
//! shard`), its own share of the input, its own transactional ids and its own checkpoint
//! directory, `{checkpoint_root}/slot-{slot}`. Slots are what Kafka Streams calls tasks
//! and what Flink restores by key group: the unit that moves, with its state.
//!
//! Every process of the job runs a [`JobMember`]: a member of the consumer group
//! `{job_id}-slots`, subscribed to the topic `{job_id}-slots`, whose partition `s` stands
//! for slot `s` (the topic holds no records; the member creates it with `slots`
//! partitions if it is missing and refuses one with another count). The group's
//! `cooperative-sticky` assignor (KIP-429) spreads the slots over the members and moves
//! only what must move:
//!
//! - **Assigned** a slot, the member builds its pipeline (the closure given to
//!   [`JobMember::start`]), which restores from the slot's last completed checkpoint, if
//!   there is one: its operators' state, its sources' positions, its sinks' pre-committed
//!   epochs (committed again idempotently), so whatever ran the slot before, here or in a
//!   process that died, is continued exactly once.
//! - **Revoked** a slot (another member joined, or this one leaves), the member stops its
//!   pipeline and waits for it, and for the closure given to [`SlotJob::on_stop`], before
//!   the group may give the slot to anyone else (the cooperative protocol's second
//!   rebalance waits for the revocation).
//! - **A member that dies** (`kill -9`, a lost machine) leaves the group when its session
//!   times out ([`JobMemberConfig::session_timeout`]); its slots go to the others, which
//!   restore them. Its producers are fenced by the new owner's (same transactional ids).
//! - **A member cut off from the cluster** longer than its session loses its assignment
//!   (librdkafka reports it lost); it stops those slots.
//! - **A slot's pipeline that fails** (a fenced producer after a broker restart, an outage
//!   longer than a request timeout) is started again from its checkpoint after
//!   [`JobMemberConfig::restart_backoff`], as long as the slot stays assigned here. One that
//!   finishes (bounded input, final checkpoint taken) is not restarted.
//!
//! - **One process per slot at a time**: a member runs a slot only while it holds the
//!   slot's file lock (`{checkpoint_root}/slot-{slot}.lock`, dropped by the system with
//!   the process). A group can give a slot to a new member before the old one noticed it
//!   lost it: a broker that forgets group membership when it restarts (`sluice serve`
//!   does) hands every slot to the first member to rejoin, while the others still run
//!   theirs until their next heartbeat fails. The new owner's start then waits, tried
//!   again after every backoff, until the old owner has stopped it ([`SlotEvent::Blocked`]); two runs of one slot never share its
//!   checkpoint directory.
//!
//! Limits: the slot count is fixed for the life of the job's checkpoints (as Flink's
//! maximum parallelism); every member must reach the same checkpoint root (one machine, or
//! a shared file system with working `flock` locks, as Flink's checkpoint storage must be
//! shared); a slot is the unit of work, so more members than slots leave some idle; a
//! member cut off from the cluster keeps running its slots until its session times out,
//! and the slots it holds wait for it meanwhile.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use rdkafka::{
    ClientContext, TopicPartitionList,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance},
};
use sluice_io::CheckpointId;

use super::{KafkaConnectorError, RepartitionConfig, client_config, validate_group};
use crate::dataflow::{CheckpointConfig, RunningPipeline};

/// A [`JobMember`]'s settings.
#[derive(Debug, Clone)]
pub struct JobMemberConfig {
    /// librdkafka's `bootstrap.servers`: `host:port[,host:port...]`.
    pub bootstrap_servers: String,
    /// The job id: the group `{job_id}-slots` and its topic `{job_id}-slots`.
    pub job_id: String,
    /// How many slots the job is cut into (at least 1; fixed for the life of its checkpoints).
    pub slots: u32,
    /// The directory holding every slot's checkpoints (`slot-{slot}` in it), the same for
    /// every member of the job.
    pub checkpoint_root: PathBuf,
    /// How long a member may go without heartbeat before the group gives its slots to
    /// others (`session.timeout.ms`; Kafka brokers accept 6 s to 5 min by default).
    /// Default 10 s.
    pub session_timeout: Duration,
    /// How long after a slot's pipeline failed it is started again. Default 1 s.
    pub restart_backoff: Duration,
    /// The longest the slots topic's metadata or creation may take. Default 30 s.
    pub request_timeout: Duration,
    /// Any other librdkafka properties, for the member's consumer.
    pub properties: Vec<(String, String)>,
}

impl JobMemberConfig {
    /// A member of job `job_id`, cut into `slots` slots checkpointing under `checkpoint_root`.
    #[must_use]
    pub fn new(
        bootstrap_servers: impl Into<String>,
        job_id: impl Into<String>,
        slots: u32,
        checkpoint_root: impl Into<PathBuf>,
    ) -> Self {
        JobMemberConfig {
            bootstrap_servers: bootstrap_servers.into(),
            job_id: job_id.into(),
            slots,
            checkpoint_root: checkpoint_root.into(),
            session_timeout: Duration::from_secs(10),
            restart_backoff: Duration::from_secs(1),
            request_timeout: Duration::from_secs(30),
            properties: Vec::new(),
        }
    }

    /// The group and topic that hand out the slots, `{job_id}-slots`.
    #[must_use]
    pub fn slots_topic(&self) -> String {
        format!("{}-slots", self.job_id)
    }

    fn validate(&self) -> Result<(), KafkaConnectorError> {
        super::validate_common(&self.bootstrap_servers, &self.slots_topic(), self.request_timeout)?;
        validate_group("job id", &self.job_id)?;
        if self.slots == 0 || self.slots > i32::MAX as u32 {
            return Err(KafkaConnectorError::Config(format!("a job has 1 to {} slots, not {}", i32::MAX, self.slots)));
        }
        if self.session_timeout < Duration::from_millis(1) || self.session_timeout.as_millis() > i32::MAX as u128 {
            return Err(KafkaConnectorError::Config(format!(
                "the session timeout {:?} is out of range",
                self.session_timeout
            )));
        }
        if self.checkpoint_root.as_os_str().is_empty() {
            return Err(KafkaConnectorError::Config("the checkpoint root is empty".into()));
        }
        Ok(())
    }
}

/// The slot a [`JobMember`] asks its closure to run.
#[derive(Debug, Clone)]
pub struct Slot {
    /// The job's id.
    pub job_id: String,
    /// This slot's number, `0..slots`.
    pub slot: u32,
    /// How many slots the job has.
    pub slots: u32,
    /// The slot's checkpoint directory, `{checkpoint_root}/slot-{slot}`.
    pub checkpoint_dir: PathBuf,
    /// The cluster, as the member's config names it.
    pub bootstrap_servers: String,
}

impl Slot {
    /// Checkpoints into the slot's directory (restoring from its latest completed one).
    #[must_use]
    pub fn checkpoints(&self) -> CheckpointConfig {
        CheckpointConfig::new(&self.checkpoint_dir)
    }

    /// The slot's side of the repartition topic `topic`: instance `slot` of `slots`, its
    /// readers on fixed partitions (the slot, not the process, owns them).
    #[must_use]
    pub fn repartition(&self, topic: impl Into<String>) -> RepartitionConfig {
        let mut config = RepartitionConfig::new(&self.bootstrap_servers, &self.job_id, topic, self.slot, self.slots);
        config.fixed_assignment = true;
        config
    }

    /// The partitions, of a topic with `partitions` partitions, that shard `shard` (of
    /// `shards`) of this slot reads: those `p` with `p % (slots * shards) == slot * shards
    /// + shard`, the split the repartition's readers use. For a Kafka input read with
    /// [`KafkaSourceFactory::instance_fixed`](super::KafkaSourceFactory::instance_fixed),
    /// so an input partition belongs to a slot and moves with it. Empty for a reader
    /// beyond the partitions (give the topic at least `slots * shards`).
    #[must_use]
    pub fn input_partitions(&self, partitions: u32, shards: usize, shard: usize) -> Vec<i32> {
        let readers = u64::from(self.slots) * shards as u64;
        let reader = u64::from(self.slot) * shards as u64 + shard as u64;
        (0..partitions).filter(|p| u64::from(*p) % readers == reader).filter_map(|p| i32::try_from(p).ok()).collect()
    }

    /// A transactional-id prefix unique to this slot and stable wherever it runs,
    /// `{job_id}-{name}-{slot}`, for the slot's exactly-once sinks.
    #[must_use]
    pub fn transactional_id(&self, name: &str) -> String {
        format!("{}-{name}-{}", self.job_id, self.slot)
    }
}

/// A slot's running pipeline, and what to do once it has stopped (finish its sinks'
/// committers, for example).
pub struct SlotJob {
    pipeline: RunningPipeline,
    on_stop: Option<Box<dyn FnOnce() -> Result<(), String> + Send>>,
}

impl std::fmt::Debug for SlotJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotJob").field("pipeline", &self.pipeline).finish_non_exhaustive()
    }
}

impl SlotJob {
    /// The slot's pipeline, started (with [`Slot::checkpoints`]).
    #[must_use]
    pub fn new(pipeline: RunningPipeline) -> Self {
        SlotJob { pipeline, on_stop: None }
    }

    /// Runs `f` after the pipeline has stopped (its threads joined), before the slot may
    /// run anywhere else; its error is reported as the slot's.
    #[must_use]
    pub fn on_stop(mut self, f: impl FnOnce() -> Result<(), String> + Send + 'static) -> Self {
        self.on_stop = Some(Box::new(f));
        self
    }

    /// Waits for the pipeline, then runs the stop closure.
    fn join(self) -> Result<(), String> {
        let ran = self.pipeline.join().map_err(|e| e.to_string());
        let stopped = self.on_stop.map_or(Ok(()), |f| f());
        ran.and(stopped)
    }
}

/// What happened to a slot in this member, oldest first ([`JobMember::events`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotEvent {
    /// The slot's pipeline started, restored from that checkpoint if it did.
    Started {
        /// The slot.
        slot: u32,
        /// The checkpoint restored.
        restored_from: Option<CheckpointId>,
    },
    /// The slot was revoked (moved to another member, or this one left) and stopped.
    Stopped {
        /// The slot.
        slot: u32,
    },
    /// The slot's pipeline ended: its input is done and its final checkpoint taken.
    Finished {
        /// The slot.
        slot: u32,
    },
    /// The slot was assigned here, but another process still runs it (it holds the slot's
    /// lock): it starts once that one has stopped it. Noted once per wait.
    Blocked {
        /// The slot.
        slot: u32,
    },
    /// The slot's pipeline could not start, or failed (it is started again while assigned).
    Failed {
        /// The slot.
        slot: u32,
        /// Why.
        error: String,
    },
}

impl SlotEvent {
    /// The slot it is about.
    #[must_use]
    pub fn slot(&self) -> u32 {
        match self {
            SlotEvent::Started { slot, .. }
            | SlotEvent::Stopped { slot }
            | SlotEvent::Finished { slot }
            | SlotEvent::Blocked { slot }
            | SlotEvent::Failed { slot, .. } => *slot,
        }
    }
}

impl std::fmt::Display for SlotEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlotEvent::Started { slot, restored_from: Some(id) } => {
                write!(f, "slot {slot} started from checkpoint {}", id.get())
            }
            SlotEvent::Started { slot, restored_from: None } => write!(f, "slot {slot} started afresh"),
            SlotEvent::Stopped { slot } => write!(f, "slot {slot} stopped"),
            SlotEvent::Finished { slot } => write!(f, "slot {slot} finished"),
            SlotEvent::Blocked { slot } => write!(f, "slot {slot} waits: another process still runs it"),
            SlotEvent::Failed { slot, error } => write!(f, "slot {slot} failed: {error}"),
        }
    }
}

type Build = dyn Fn(&Slot) -> Result<SlotJob, String> + Send + Sync;

/// A slot this member holds.
enum Held {
    /// Its pipeline, and the slot's lock while it runs.
    Running(SlotJob, std::fs::File),
    /// To be started once the instant has passed.
    Waiting(Instant),
    /// Its pipeline finished.
    Done,
}

struct Shared {
    config: JobMemberConfig,
    build: Box<Build>,
    held: Mutex<BTreeMap<u32, Held>>,
    events: Mutex<Vec<SlotEvent>>,
    /// Every event so far, by kind: started afresh, started restored, stopped, finished,
    /// blocked, failed.
    counts: [AtomicU64; 6],
    /// Problems of the member's consumer, the latest few.
    problems: Mutex<Vec<String>>,
}

/// The most events a member keeps (the oldest go first).
const MAX_EVENTS: usize = 4096;

impl Shared {
    fn note(&self, event: SlotEvent) {
        let kind = match &event {
            SlotEvent::Started { restored_from: None, .. } => 0,
            SlotEvent::Started { restored_from: Some(_), .. } => 1,
            SlotEvent::Stopped { .. } => 2,
            SlotEvent::Finished { .. } => 3,
            SlotEvent::Blocked { .. } => 4,
            SlotEvent::Failed { .. } => 5,
        };
        self.counts[kind].fetch_add(1, Ordering::Relaxed);
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if events.len() == MAX_EVENTS {
            events.remove(0);
        }
        events.push(event);
    }

    fn slot(&self, slot: u32) -> Slot {
        Slot {
            job_id: self.config.job_id.clone(),
            slot,
            slots: self.config.slots,
            checkpoint_dir: self.config.checkpoint_root.join(format!("slot-{slot}")),
            bootstrap_servers: self.config.bootstrap_servers.clone(),
        }
    }

    fn take(&self, slot: u32) -> Option<Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).remove(&slot)
    }

    fn put(&self, slot: u32, held: Held) {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).insert(slot, held);
    }

    /// Takes the slot's lock, `{checkpoint_root}/slot-{slot}.lock` (an advisory file lock
    /// the system drops with the process that held it): only one process runs a slot at a
    /// time, also when the group has already given it to this member while the member
    /// that ran it has not yet noticed it lost it (after a broker forgot the group, say).
    fn lock(&self, slot: u32) -> Result<Option<std::fs::File>, String> {
        let root = &self.config.checkpoint_root;
        let path = root.join(format!("slot-{slot}.lock"));
        std::fs::create_dir_all(root).map_err(|e| format!("making the checkpoint root {}: {e}", root.display()))?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("opening the slot's lock {}: {e}", path.display()))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(format!("locking {}: {e}", path.display())),
        }
    }

    /// Stops `slots` (revoked, or the member leaves) and waits for them: all are told to
    /// stop first and joined side by side, so that slots whose committers wait out a
    /// request timeout (a broker that is down) do not wait one after another.
    fn release(&self, slots: &[u32]) {
        let mut running = Vec::new();
        for &slot in slots {
            if let Some(Held::Running(job, lock)) = self.take(slot) {
                job.pipeline.stop(false);
                running.push((slot, job, lock));
            }
        }
        std::thread::scope(|scope| {
            for (slot, job, lock) in running {
                scope.spawn(move || {
                    match job.join() {
                        Ok(()) => self.note(SlotEvent::Stopped { slot }),
                        Err(error) => self.note(SlotEvent::Failed { slot, error }),
                    }
                    drop(lock);
                });
            }
        });
    }

    /// Starts what is due, notes what ended.
    fn tick(&self) {
        let slots: Vec<u32> = self.held.lock().unwrap_or_else(PoisonError::into_inner).keys().copied().collect();
        for slot in slots {
            let Some(held) = self.take(slot) else { continue };
            let next = match held {
                Held::Running(job, lock) if job.pipeline.is_finished() => {
                    let joined = job.join();
                    drop(lock);
                    match joined {
                        Ok(()) => {
                            self.note(SlotEvent::Finished { slot });
                            Held::Done
                        }
                        Err(error) => {
                            self.note(SlotEvent::Failed { slot, error });
                            Held::Waiting(Instant::now() + self.config.restart_backoff)
                        }
                    }
                }
                Held::Waiting(at) if Instant::now() >= at => self.start(slot),
                other => other,
            };
            self.put(slot, next);
        }
    }

    fn start(&self, slot: u32) -> Held {
        let lock = match self.lock(slot) {
            Ok(Some(lock)) => lock,
            Ok(None) => {
                let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
                let last = events.iter().rev().find(|e| e.slot() == slot).cloned();
                drop(events);
                if last != Some(SlotEvent::Blocked { slot }) {
                    self.note(SlotEvent::Blocked { slot });
                }
                return Held::Waiting(Instant::now() + self.config.restart_backoff);
            }
            Err(error) => {
                self.note(SlotEvent::Failed { slot, error });
                return Held::Waiting(Instant::now() + self.config.restart_backoff);
            }
        };
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.build)(&self.slot(slot))));
        match built {
            Ok(Ok(job)) => {
                self.note(SlotEvent::Started { slot, restored_from: job.pipeline.restored_from() });
                Held::Running(job, lock)
            }
            Ok(Err(error)) => {
                self.note(SlotEvent::Failed { slot, error });
                Held::Waiting(Instant::now() + self.config.restart_backoff)
            }
            Err(_) => {
                self.note(SlotEvent::Failed { slot, error: "the slot's build closure panicked".into() });
                Held::Waiting(Instant::now() + self.config.restart_backoff)
            }
        }
    }
}

/// The member's consumer context: rebalances start and stop slots.
struct Context {
    shared: Arc<Shared>,
}

impl ClientContext for Context {}

impl ConsumerContext for Context {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            self.shared.release(&slots_of(tpl));
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let now = Instant::now();
                let mut held = self.shared.held.lock().unwrap_or_else(PoisonError::into_inner);
                for slot in slots_of(tpl) {
                    held.entry(slot).or_insert(Held::Waiting(now));
                }
            }
            Rebalance::Error(e) => self.shared.problem(format!("rebalance: {e}")),
            Rebalance::Revoke(_) => {}
        }
    }
}

impl Shared {
    fn problem(&self, problem: String) {
        let mut problems = self.problems.lock().unwrap_or_else(PoisonError::into_inner);
        if problems.last() != Some(&problem) {
            if problems.len() == 16 {
                problems.remove(0);
            }
            problems.push(problem);
        }
    }
}

fn slots_of(tpl: &TopicPartitionList) -> Vec<u32> {
    tpl.elements().iter().filter_map(|e| u32::try_from(e.partition()).ok()).collect()
}

/// This process's membership in a job cut into slots: see the [module](self).
pub struct JobMember {
    shared: Arc<Shared>,
    leave: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for JobMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobMember").field("config", &self.shared.config).finish_non_exhaustive()
    }
}

impl JobMember {
    /// Joins the job: makes sure the slots topic exists with `slots` partitions, joins the
    /// group, and from then on runs the slots the group gives this process, each through
    /// `build` (which must start the slot's pipeline checkpointing into
    /// [`Slot::checkpoints`], and should use the slot's repartition config and
    /// transactional ids).
    ///
    /// # Errors
    ///
    /// A bad config, a slots topic with another partition count, a cluster that does not
    /// answer within the request timeout, or librdkafka refusing the consumer.
    pub fn start<F>(config: JobMemberConfig, build: F) -> Result<JobMember, KafkaConnectorError>
    where
        F: Fn(&Slot) -> Result<SlotJob, String> + Send + Sync + 'static,
    {
        config.validate()?;
        ensure_topic(&config)?;
        let shared = Arc::new(Shared {
            config,
            build: Box::new(build),
            held: Mutex::default(),
            events: Mutex::default(),
            counts: Default::default(),
            problems: Mutex::default(),
        });
        let c = &shared.config;
        let mut client = client_config(&c.bootstrap_servers, &[]);
        client
            .set("group.id", c.slots_topic())
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("session.timeout.ms", c.session_timeout.as_millis().to_string())
            .set("heartbeat.interval.ms", (c.session_timeout.as_millis() / 4).max(1).to_string())
            .set("enable.auto.commit", "false");
        for (k, v) in &c.properties {
            client.set(k, v);
        }
        let consumer: BaseConsumer<Context> = client
            .create_with_context(Context { shared: shared.clone() })
            .map_err(|e| KafkaConnectorError::client("creating the job member's consumer", e))?;
        consumer
            .subscribe(&[&c.slots_topic()])
            .map_err(|e| KafkaConnectorError::client("joining the job's slots group", e))?;
        let leave = Arc::new(AtomicBool::new(false));
        let (member, leaving) = (shared.clone(), leave.clone());
        let thread = std::thread::Builder::new()
            .name(format!("{}-member", c.job_id))
            .spawn(move || supervise(&member, &consumer, &leaving))
            .map_err(|e| KafkaConnectorError::Config(format!("starting the member's thread: {e}")))?;
        Ok(JobMember { shared, leave, thread: Some(thread) })
    }

    /// The slots this member holds now (running, about to start, or finished), ascending.
    #[must_use]
    pub fn slots(&self) -> Vec<u32> {
        self.shared.held.lock().unwrap_or_else(PoisonError::into_inner).keys().copied().collect()
    }

    /// What happened to slots here so far, oldest first (the latest 4096).
    #[must_use]
    pub fn events(&self) -> Vec<SlotEvent> {
        self.shared.events.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The member's metrics (prefix `sluice_job_member_`, label `job`): the slots it holds
    /// and runs, and counters of slot starts (label `restored`), stops, finishes, waits
    /// for another process and failures. A slot's pipeline metrics are its
    /// `RunningPipeline`'s, inside the closure that built it.
    #[must_use]
    pub fn metric_families(&self) -> crate::metrics::Families {
        let mut out = crate::metrics::Families::default();
        let job = || vec![("job", self.shared.config.job_id.clone())];
        let (held, running) = {
            let held = self.shared.held.lock().unwrap_or_else(PoisonError::into_inner);
            (held.len(), held.values().filter(|h| matches!(h, Held::Running(..))).count())
        };
        out.gauge("sluice_job_member_slots", "Slots the group gives this member.", job(), held);
        out.gauge("sluice_job_member_slots_running", "Slots whose pipeline runs in this member.", job(), running);
        let count = |i: usize| self.shared.counts[i].load(Ordering::Relaxed);
        for (restored, i) in [("false", 0), ("true", 1)] {
            let mut labels = job();
            labels.push(("restored", restored.to_string()));
            out.counter(
                "sluice_job_member_slot_starts",
                "Slot pipelines started, restored from a checkpoint or not.",
                labels,
                count(i),
            );
        }
        out.counter(
            "sluice_job_member_slot_stops",
            "Slots stopped because the group moved them or the member left.",
            job(),
            count(2),
        );
        out.counter("sluice_job_member_slot_finishes", "Slot pipelines that ended with their input.", job(), count(3));
        out.counter(
            "sluice_job_member_slot_waits",
            "Slot starts that waited for another process to stop the slot.",
            job(),
            count(4),
        );
        out.counter(
            "sluice_job_member_slot_failures",
            "Slot pipelines that failed to start or failed while running.",
            job(),
            count(5),
        );
        out
    }

    /// [`JobMember::metric_families`] in the Prometheus text format, or OpenMetrics with
    /// `openmetrics`.
    #[must_use]
    pub fn render_metrics(&self, openmetrics: bool) -> String {
        self.metric_families().render(openmetrics)
    }

    /// The latest problems of the member's group consumer (errors librdkafka reported).
    #[must_use]
    pub fn problems(&self) -> Vec<String> {
        self.shared.problems.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Leaves the job (scaling in): stops this member's slots and leaves the group, whose
    /// other members then take them over from their checkpoints. Returns once done.
    pub fn leave(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.leave.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for JobMember {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The member's thread: polls the group (rebalances run in the poll), starts and restarts
/// slots; on leaving, gives its slots back and stops what is left.
fn supervise(shared: &Shared, consumer: &BaseConsumer<Context>, leave: &AtomicBool) {
    while !leave.load(Ordering::Acquire) {
        if let Some(Err(e)) = consumer.poll(Duration::from_millis(100)) {
            shared.problem(format!("group: {e}"));
        }
        shared.tick();
    }
    consumer.unsubscribe();
    let deadline = Instant::now() + shared.config.request_timeout;
    while Instant::now() < deadline && consumer.assignment().is_ok_and(|a| a.count() > 0) {
        let _ = consumer.poll(Duration::from_millis(100));
    }
    let slots: Vec<u32> = shared.held.lock().unwrap_or_else(PoisonError::into_inner).keys().copied().collect();
    shared.release(&slots);
}

/// Makes the slots topic if it is missing; refuses one with another partition count.
fn ensure_topic(config: &JobMemberConfig) -> Result<(), KafkaConnectorError> {
    let topic = config.slots_topic();
    let consumer: BaseConsumer = client_config(&config.bootstrap_servers, &config.properties)
        .set("allow.auto.create.topics", "false")
        .create()
        .map_err(|e| KafkaConnectorError::client("creating a metadata client", e))?;
    let found = match super::source::partitions(&consumer, &topic, config.request_timeout) {
        Ok(p) => Some(p.len()),
        Err(KafkaConnectorError::Topic { .. }) => None,
        Err(e) => return Err(e),
    };
    let found = match found {
        Some(n) => n,
        None => {
            create_topic(config, &topic)?;
            // A new topic's metadata can lag its creation.
            let deadline = Instant::now() + config.request_timeout;
            loop {
                match super::source::partitions(&consumer, &topic, config.request_timeout) {
                    Ok(p) => break p.len(),
                    Err(e) if Instant::now() >= deadline => return Err(e),
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        }
    };
    if found != config.slots as usize {
        return Err(KafkaConnectorError::Topic {
            topic,
            detail: format!(
                "has {found} partitions: the job was started with {found} slots, and this member asks for {}",
                config.slots
            ),
        });
    }
    Ok(())
}

fn create_topic(config: &JobMemberConfig, topic: &str) -> Result<(), KafkaConnectorError> {
    let admin: AdminClient<DefaultClientContext> = client_config(&config.bootstrap_servers, &config.properties)
        .create()
        .map_err(|e| KafkaConnectorError::client("creating an admin client", e))?;
    let partitions = i32::try_from(config.slots).unwrap_or(i32::MAX);
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(-1));
    let options = AdminOptions::new().operation_timeout(Some(config.request_timeout));
    let results = futures_lite::future::block_on(admin.create_topics([&new], &options))
        .map_err(|e| KafkaConnectorError::client(format!("creating the slots topic {topic:?}"), e))?;
    for result in results {
        match result {
            Ok(_) | Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => {
                return Err(KafkaConnectorError::Topic {
                    topic: topic.into(),
                    detail: format!("could not be created: {code}"),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_refuses_what_cannot_work() {
        let ok = JobMemberConfig::new("127.0.0.1:9092", "job", 6, "/tmp/cp");
        assert!(ok.validate().is_ok());
        assert_eq!(ok.slots_topic(), "job-slots");
        let none = JobMemberConfig { slots: 0, ..ok.clone() };
        assert!(matches!(none.validate(), Err(KafkaConnectorError::Config(m)) if m.contains("slots")));
        let bad_id = JobMemberConfig { job_id: "a/b".into(), ..ok.clone() };
        assert!(bad_id.validate().is_err(), "a job id Kafka would refuse as a topic name");
        let no_root = JobMemberConfig { checkpoint_root: PathBuf::new(), ..ok.clone() };
        assert!(no_root.validate().is_err());
        let zero = JobMemberConfig { session_timeout: Duration::ZERO, ..ok };
        assert!(zero.validate().is_err());
    }

    #[test]
    fn a_slot_has_its_own_directory_partitions_and_ids() {
        let shared = Slot {
            job_id: "j".into(),
            slot: 4,
            slots: 6,
            checkpoint_dir: PathBuf::from("/cp/slot-4"),
            bootstrap_servers: "b:1".into(),
        };
        let r = shared.repartition("through");
        assert_eq!((r.instance, r.instances, r.fixed_assignment, r.job_id.as_str()), (4, 6, true, "j"));
        assert_eq!(shared.transactional_id("out"), "j-out-4");
        assert_eq!(shared.input_partitions(24, 2, 1), vec![9, 21], "reader 4 * 2 + 1 of 12");
        let every: Vec<i32> = (0..6)
            .flat_map(|slot| {
                let s = Slot { slot, ..shared.clone() };
                (0..2).flat_map(move |shard| s.input_partitions(13, 2, shard))
            })
            .collect();
        assert_eq!(every.len(), 13, "each partition read by one reader: {every:?}");
        assert_eq!(shared.checkpoints().dir, PathBuf::from("/cp/slot-4"));
        let event = SlotEvent::Failed { slot: 4, error: "x".into() };
        assert_eq!(event.to_string(), "slot 4 failed: x");
    }
}
