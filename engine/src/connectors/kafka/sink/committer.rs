//! The exactly-once committers: one thread per origin shard ([`Committer`], started by
//! [`SinkShared::committer`]) that writes each closed epoch's [`KafkaTxn`] in one Kafka
//! transaction, tagged by the epoch's marker offset, and skips an epoch already marked.

use std::{
    collections::HashMap,
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicU64, Ordering},
        mpsc::{Receiver, SyncSender},
    },
    thread::JoinHandle,
    time::Duration,
};

use rdkafka::{
    Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
    producer::{BaseProducer, Producer},
};

use super::{Counters, KafkaSinkConfig, KafkaTxn, lock, send_with_backpressure};
use crate::connectors::kafka::client_config;

/// The output partition whose offset the marker groups commit.
const MARKER_PARTITION: i32 = 0;

#[derive(Debug)]
pub(super) struct SinkShared {
    pub(super) config: KafkaSinkConfig,
    pub(super) committers: Mutex<HashMap<u32, Arc<Committer>>>,
    pub(super) counters: Arc<Counters>,
}

/// One origin's committer thread and what the shards see of it.
#[derive(Debug)]
pub(super) struct Committer {
    origin: u32,
    pub(super) tx: Mutex<Option<SyncSender<KafkaTxn>>>,
    /// Held while a txn is numbered and sent, so tickets follow the channel's order.
    sending: Mutex<()>,
    pub(super) thread: Mutex<Option<JoinHandle<()>>>,
    state: Mutex<CommitterState>,
    changed: Condvar,
    /// The highest epoch of this origin known: committed (the marker read at start), the
    /// floor of this run's reserved range minus one, restored, or numbered by pre-commit.
    pub(super) highest_epoch: AtomicU64,
}

/// Why a committer (or the sink's producer) failed: what it was doing, and the Kafka
/// client's error when there is one. Cloned to every caller that asks after a failure.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{context}")]
pub struct SinkFailure {
    context: String,
    #[source]
    source: Option<Arc<KafkaError>>,
}

impl SinkFailure {
    pub(crate) fn new(context: impl Into<String>) -> SinkFailure {
        SinkFailure { context: context.into(), source: None }
    }

    /// Wraps a client error with what was being done.
    pub(crate) fn kafka(context: String) -> impl FnOnce(KafkaError) -> SinkFailure {
        move |e| SinkFailure { context, source: Some(Arc::new(e)) }
    }

    /// The same failure, said to have happened while doing `context`.
    fn context(self, context: String) -> SinkFailure {
        SinkFailure { context: format!("{context}: {}", self.context), source: self.source }
    }
}

#[derive(Debug, Default)]
struct CommitterState {
    /// Set once the thread has started its producer and read the marker.
    started: Option<Result<(), SinkFailure>>,
    queued: u64,
    done: u64,
    error: Option<SinkFailure>,
}

impl Committer {
    pub(super) fn error(&self) -> Option<SinkFailure> {
        lock(&self.state).error.clone()
    }

    pub(super) fn wait_started(&self, timeout: Duration) -> Result<(), SinkFailure> {
        let state = lock(&self.state);
        let (state, _) = self
            .changed
            .wait_timeout_while(state, timeout, |s| s.started.is_none())
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state
            .started
            .clone()
            .unwrap_or_else(|| Err(SinkFailure::new(format!("committer {} did not start in {timeout:?}", self.origin))))
    }

    /// Waits until every txn queued so far is committed or skipped (or failed).
    pub(super) fn wait_idle(&self) {
        let state = lock(&self.state);
        drop(self.changed.wait_while(state, |s| s.done < s.queued).unwrap_or_else(std::sync::PoisonError::into_inner));
    }

    /// Hands `txn` to the committer thread; returns its ticket for [`Committer::wait_done`].
    pub(super) fn enqueue(&self, txn: KafkaTxn) -> Result<u64, SinkFailure> {
        if let Some(e) = self.error() {
            return Err(e);
        }
        self.highest_epoch.fetch_max(txn.epoch, Ordering::AcqRel);
        let tx = lock(&self.tx).clone().ok_or_else(|| SinkFailure::new("the Kafka sink has finished"))?;
        // Tickets in the order of the channel, so that `done` counts them in order.
        let _sending = lock(&self.sending);
        let ticket = {
            let mut state = lock(&self.state);
            state.queued += 1;
            state.queued
        };
        tx.send(txn).map_err(|_| {
            let mut state = lock(&self.state);
            state.queued -= 1;
            state.error.clone().unwrap_or_else(|| SinkFailure::new(format!("committer {} stopped", self.origin)))
        })?;
        Ok(ticket)
    }

    /// Waits until the txn of `ticket` (and every one before it) is committed or skipped;
    /// the committer's failure if it failed.
    pub(super) fn wait_done(&self, ticket: u64) -> Result<(), SinkFailure> {
        let state = lock(&self.state);
        let state =
            self.changed.wait_while(state, |s| s.done < ticket).unwrap_or_else(std::sync::PoisonError::into_inner);
        state.error.clone().map_or(Ok(()), Err)
    }
}

impl SinkShared {
    /// The committer of `origin`, started if there is none yet.
    pub(super) fn committer(&self, origin: u32) -> Arc<Committer> {
        let mut committers = lock(&self.committers);
        committers
            .entry(origin)
            .or_insert_with(|| {
                let (tx, rx) = std::sync::mpsc::sync_channel(self.config.commit_queue_txns);
                let committer = Arc::new(Committer {
                    origin,
                    tx: Mutex::new(Some(tx)),
                    sending: Mutex::new(()),
                    thread: Mutex::new(None),
                    state: Mutex::new(CommitterState::default()),
                    changed: Condvar::new(),
                    highest_epoch: AtomicU64::new(0),
                });
                let (c, config, counters) = (committer.clone(), self.config.clone(), self.counters.clone());
                let thread = std::thread::Builder::new()
                    .name(format!("sluice-kafka-commit-{origin}"))
                    .spawn(move || run_committer(&c, &config, &counters, &rx));
                match thread {
                    Ok(t) => *lock(&committer.thread) = Some(t),
                    Err(e) => {
                        let mut state = lock(&committer.state);
                        let e = SinkFailure::new(format!("starting committer {origin}: {e}"));
                        state.started = Some(Err(e.clone()));
                        state.error = Some(e);
                    }
                }
                committer
            })
            .clone()
    }

    pub(super) fn check(&self) -> Result<(), SinkFailure> {
        for c in lock(&self.committers).values() {
            if let Some(e) = c.error() {
                return Err(e);
            }
        }
        Ok(())
    }
}

/// The body of a committer thread: start, then commit txns in order until the channel
/// closes. After a failure it only counts what it is given, so nothing waits forever.
fn run_committer(c: &Committer, config: &KafkaSinkConfig, counters: &Counters, rx: &Receiver<KafkaTxn>) {
    let mut worker = match Worker::start(config, c.origin) {
        Ok((worker, floor)) => {
            c.highest_epoch.fetch_max(floor, Ordering::AcqRel);
            lock(&c.state).started = Some(Ok(()));
            Some(worker)
        }
        Err(e) => {
            let mut state = lock(&c.state);
            state.started = Some(Err(e.clone()));
            state.error = Some(e);
            None
        }
    };
    c.changed.notify_all();
    while let Ok(txn) = rx.recv() {
        if let Some(w) = &mut worker {
            match w.commit(&txn) {
                Ok(true) => {
                    counters.committed.fetch_add(1, Ordering::AcqRel);
                    counters.records.fetch_add(txn.records.len() as u64, Ordering::AcqRel);
                }
                Ok(false) => {
                    counters.skipped.fetch_add(1, Ordering::AcqRel);
                }
                Err(e) => {
                    lock(&c.state).error = Some(e);
                    worker = None;
                }
            }
        }
        lock(&c.state).done += 1;
        c.changed.notify_all();
    }
}

/// A committer's clients: the transactional producer and a consumer of the marker group
/// (never subscribed; it only reads the committed marker and provides group metadata).
struct Worker {
    producer: BaseProducer,
    marker: BaseConsumer,
    topic: String,
    id: String,
    timeout: Duration,
}

impl Worker {
    /// Starts the producer (`init_transactions` fences a previous run's and aborts its
    /// open transaction), reads the marker and reserves this run's epoch range; returns
    /// the highest epoch this run must stay above.
    fn start(config: &KafkaSinkConfig, origin: u32) -> Result<(Worker, u64), SinkFailure> {
        let id = config.id(origin);
        let mut client = config.producer_config();
        client.set("transactional.id", &id).set("client.id", format!("sluice-sink-{origin}"));
        let producer: BaseProducer = client.create().map_err(SinkFailure::kafka(format!("creating producer {id}")))?;
        producer
            .init_transactions(config.request_timeout)
            .map_err(SinkFailure::kafka(format!("init_transactions of {id}")))?;
        let marker: BaseConsumer = client_config(&config.bootstrap_servers, &[])
            .set("group.id", &id)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("client.id", format!("sluice-sink-marker-{origin}"))
            .create()
            .map_err(SinkFailure::kafka(format!("creating the marker consumer of {id}")))?;
        let worker = Worker { producer, marker, topic: config.topic.clone(), id, timeout: config.request_timeout };
        let committed = worker.committed_epoch()?;
        let run = worker.reserve_run(config, origin)?;
        Ok((worker, committed.max((run << 32) - 1)))
    }

    /// Reserves the next run number of this origin: reads the last one from the group
    /// `{prefix}-{origin}-runs` and commits it plus one (a plain, synchronous commit).
    fn reserve_run(&self, config: &KafkaSinkConfig, origin: u32) -> Result<u64, SinkFailure> {
        let group = config.runs_group(origin);
        let runs: BaseConsumer = client_config(&config.bootstrap_servers, &[])
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .set("client.id", format!("sluice-sink-runs-{origin}"))
            .create()
            .map_err(SinkFailure::kafka(format!("creating the run consumer of {group}")))?;
        let mut tpl = TopicPartitionList::new();
        let _ = tpl.add_partition(&self.topic, MARKER_PARTITION);
        let last = runs
            .committed_offsets(tpl, self.timeout)
            .map_err(SinkFailure::kafka(format!("reading the run number of {group}")))?
            .find_partition(&self.topic, MARKER_PARTITION)
            .and_then(|e| e.offset().to_raw())
            .filter(|&n| n >= 0)
            .unwrap_or(0);
        let run = u64::try_from(last).unwrap_or(0) + 1;
        if run >= 1 << 31 {
            return Err(SinkFailure::new(format!("{group}: run number {run} out of range")));
        }
        let mut next = TopicPartitionList::new();
        next.add_partition_offset(&self.topic, MARKER_PARTITION, Offset::Offset(run as i64))
            .map_err(SinkFailure::kafka("run number offset".into()))?;
        runs.commit(&next, rdkafka::consumer::CommitMode::Sync)
            .map_err(SinkFailure::kafka(format!("reserving run {run} in {group}")))?;
        Ok(run)
    }

    /// The last epoch committed for this origin: the marker group's committed offset.
    fn committed_epoch(&self) -> Result<u64, SinkFailure> {
        let mut tpl = TopicPartitionList::new();
        let _ = tpl.add_partition(&self.topic, MARKER_PARTITION);
        let committed = self
            .marker
            .committed_offsets(tpl, self.timeout)
            .map_err(SinkFailure::kafka(format!("reading the marker of {}", self.id)))?;
        let offset =
            committed.find_partition(&self.topic, MARKER_PARTITION).map(|e| e.offset()).unwrap_or(Offset::Invalid);
        Ok(match offset {
            Offset::Offset(n) => u64::try_from(n).unwrap_or(0),
            _ => 0,
        })
    }

    /// Commits `txn` unless its epoch is already committed; returns whether it wrote.
    fn commit(&mut self, txn: &KafkaTxn) -> Result<bool, SinkFailure> {
        if self.committed_epoch()? >= txn.epoch {
            return Ok(false);
        }
        let id = self.id.clone();
        self.producer.begin_transaction().map_err(SinkFailure::kafka(format!("begin_transaction of {id}")))?;
        match self.write(txn) {
            Ok(()) => Ok(true),
            Err(e) => {
                // Leave nothing open behind; a fatal error makes the producer unusable,
                // which the error already says.
                let _ = self.producer.abort_transaction(self.timeout);
                Err(e.context(format!("transaction of {id} for epoch {}", txn.epoch)))
            }
        }
    }

    fn write(&mut self, txn: &KafkaTxn) -> Result<(), SinkFailure> {
        for r in &txn.records {
            send_with_backpressure(&self.producer, r.to_base_record(&self.topic))
                .map_err(SinkFailure::kafka("producing".into()))?;
        }
        let mut offsets = TopicPartitionList::new();
        let epoch =
            i64::try_from(txn.epoch).map_err(|_| SinkFailure::new(format!("epoch {} out of range", txn.epoch)))?;
        offsets
            .add_partition_offset(&self.topic, MARKER_PARTITION, Offset::Offset(epoch))
            .map_err(SinkFailure::kafka("marker offset".into()))?;
        let group = self.marker.group_metadata().ok_or_else(|| SinkFailure::new("no group metadata for the marker"))?;
        self.producer
            .send_offsets_to_transaction(&offsets, &group, self.timeout)
            .map_err(SinkFailure::kafka("send_offsets_to_transaction".into()))?;
        self.producer.commit_transaction(self.timeout).map_err(SinkFailure::kafka("commit_transaction".into()))
    }
}
