//! The exactly-once side of a topic sink on one shard: a transaction per generation (the
//! records between two checkpoint barriers), pre-committed when its barrier's generation
//! is all appended *and durable*, committed once that checkpoint completes, and the
//! recovery that settles what an earlier run left.
//!
//! A transaction is a fresh producer id (allocated by the engine, so never reused): its
//! batches are transactional and sequenced per partition, and a commit marker in each
//! partition it wrote ends it. The snapshot of checkpoint *n* lists every transaction
//! pre-committed and not yet known committed, the one of generation *n* included, so
//! restoring *n* commits exactly those; anything else still open in the topic was written
//! after *n* and is aborted.
//!
//! **Durability.** A completed checkpoint records window firings and the like as done, so
//! the records they produced must survive any crash after it. An append is acknowledged
//! as durable as the topic's fsync policy says, which under `interval` and `never` is not
//! at all (the bytes may still be in the segment's write buffer when the process dies).
//! So a transaction is pre-committed (enters the snapshot) only after every partition it
//! wrote is synced ([`EngineHandle::sync`]), and it leaves the snapshots only after its
//! commit markers are synced too: until then, a restore commits it again. Transactions a
//! restore must commit stay in this shard's snapshots until its recovery has committed
//! them durably, so a checkpoint completed during recovery cannot forget them.

use std::{
    cell::RefCell,
    collections::{BTreeSet, HashMap, HashSet, VecDeque},
    future::Future,
    pin::Pin,
    rc::Rc,
    sync::{Arc, atomic::Ordering},
    task::{Context, Poll},
};

use sluice_io::{BatchMeta, CheckpointId, PartitionId, ProducerId, txn::Marker};

use super::{Failure, TopicSink};
use crate::{
    dataflow::checkpoint::{Barrier, CheckpointCoordinator, PendingTxn, ShardCheckpoint, SinkPart},
    engine::EngineHandle,
    error::Result,
};

type Job<T> = Pin<Box<dyn Future<Output = Result<T>>>>;

/// One generation's transaction.
struct Producer {
    id: ProducerId,
    sequences: HashMap<PartitionId, i32>,
    touched: BTreeSet<PartitionId>,
}

enum Recovery {
    Running(Job<()>),
    /// This shard's part is done; waiting for every other shard's.
    Waiting,
    Done,
}

pub(super) struct Transactions {
    handle: EngineHandle,
    topic: Arc<str>,
    checkpoint: Rc<RefCell<ShardCheckpoint>>,
    coordinator: Arc<CheckpointCoordinator>,
    /// This sink's id among the shard's checkpoint participants.
    id: u32,
    producers: HashMap<u64, Producer>,
    allocating: Option<(u64, Job<ProducerId>)>,
    /// Barriers seen, with the generation each closes, not yet pre-committed.
    pub(super) barriers: VecDeque<(Barrier, u64)>,
    /// Pre-committed transactions, with the checkpoint that commits them.
    precommitted: VecDeque<(CheckpointId, PendingTxn)>,
    /// The sync that makes a generation's transaction durable before its pre-commit.
    syncing: Option<(u64, Job<()>)>,
    committing: Option<Job<()>>,
    /// The restored transactions this shard commits in its recovery: listed in its
    /// snapshots until the recovery has made their commits durable.
    restoring: Vec<PendingTxn>,
    recovery: Recovery,
}

impl Transactions {
    pub(super) fn new(sink: &TopicSink, checkpoint: &Rc<RefCell<ShardCheckpoint>>) -> Transactions {
        let (id, coordinator, shard, shards) = {
            let mut c = checkpoint.borrow_mut();
            let id = c.add_sink();
            (id, c.coordinator.clone(), c.shard(), c.shards())
        };
        coordinator.sinks.fetch_add(1, Ordering::AcqRel);
        let restored: Vec<PendingTxn> =
            coordinator.restored.as_ref().and_then(|r| r.sinks.get(&id).cloned()).unwrap_or_default();
        let restoring: Vec<PendingTxn> = restored.iter().skip(shard).step_by(shards.max(1)).cloned().collect();
        let recovery = recover(sink.handle.clone(), sink.topic.clone(), sink.partitions, restored, shard, shards);
        Transactions {
            handle: sink.handle.clone(),
            topic: sink.topic.clone(),
            checkpoint: checkpoint.clone(),
            coordinator,
            id,
            producers: HashMap::new(),
            allocating: None,
            barriers: VecDeque::new(),
            precommitted: VecDeque::new(),
            syncing: None,
            committing: None,
            restoring,
            recovery: Recovery::Running(Box::pin(recovery)),
        }
    }

    /// Drives recovery; true once every shard's sink has settled what the last run left,
    /// so new transactions may be written.
    pub(super) fn poll_recovery(&mut self, cx: &mut Context<'_>, failure: &Failure) -> bool {
        if let Recovery::Running(job) = &mut self.recovery {
            match job.as_mut().poll(cx) {
                Poll::Pending => return false,
                Poll::Ready(Err(e)) => failure.fail(format_args!("exactly-once topic sink: recovering"), e),
                Poll::Ready(Ok(())) => {
                    // Their commit markers are durable: later snapshots need not list them.
                    self.restoring.clear();
                    self.coordinator.sinks_recovered.fetch_add(1, Ordering::AcqRel);
                    self.recovery = Recovery::Waiting;
                }
            }
        }
        if let Recovery::Waiting = self.recovery {
            if !self.coordinator.sinks_ready() {
                return false;
            }
            self.recovery = Recovery::Done;
        }
        true
    }

    /// The batch attributes for `records` records of `generation` to `partition`, or
    /// `None` while the generation's producer id is being allocated.
    pub(super) fn meta(
        &mut self,
        cx: &mut Context<'_>,
        generation: u64,
        partition: PartitionId,
        records: usize,
        failure: &Failure,
    ) -> Option<BatchMeta> {
        if !self.producers.contains_key(&generation) {
            let job = match &mut self.allocating {
                Some((g, job)) if *g == generation => job,
                slot => {
                    let handle = self.handle.clone();
                    &mut slot.insert((generation, Box::pin(async move { handle.init_producer_id().await }))).1
                }
            };
            match job.as_mut().poll(cx) {
                Poll::Pending => return None,
                Poll::Ready(Err(e)) => failure.fail(format_args!("exactly-once topic sink: a producer id"), e),
                Poll::Ready(Ok(id)) => {
                    self.allocating = None;
                    self.producers
                        .insert(generation, Producer { id, sequences: HashMap::new(), touched: BTreeSet::new() });
                }
            }
        }
        let producer = self.producers.get_mut(&generation).expect("inserted above");
        let sequence = producer.sequences.entry(partition).or_insert(0);
        let meta = Marker::data_meta(producer.id, *sequence);
        *sequence = sequence.wrapping_add(i32::try_from(records).unwrap_or(i32::MAX));
        producer.touched.insert(partition);
        Some(meta)
    }

    /// Everything before `barrier` is appended: once the partitions its generation's
    /// transaction wrote are synced, the transaction is pre-committed and the shard gets
    /// this sink's part of the snapshot. True once that is done.
    pub(super) fn poll_precommit(
        &mut self,
        cx: &mut Context<'_>,
        barrier: Barrier,
        generation: u64,
        failure: &Failure,
    ) -> bool {
        if let Some(p) = self.producers.get(&generation) {
            let job = match &mut self.syncing {
                Some((g, job)) if *g == generation => job,
                slot => {
                    let (handle, topic) = (self.handle.clone(), self.topic.clone());
                    let partitions: Vec<PartitionId> = p.touched.iter().copied().collect();
                    &mut slot.insert((generation, Box::pin(sync_all(handle, topic, partitions)))).1
                }
            };
            match job.as_mut().poll(cx) {
                Poll::Pending => return false,
                Poll::Ready(Err(e)) => {
                    failure.fail(format_args!("exactly-once topic sink: making a transaction durable"), e)
                }
                Poll::Ready(Ok(())) => self.syncing = None,
            }
        }
        if let Some(p) = self.producers.remove(&generation) {
            let txn =
                PendingTxn { producer: p.id.0, partitions: p.touched.into_iter().map(PartitionId::get).collect() };
            self.precommitted.push_back((barrier.id, txn));
        }
        let pending = self.restoring.iter().chain(self.precommitted.iter().map(|(_, t)| t)).cloned().collect();
        self.checkpoint.borrow_mut().report_sink(barrier.id, SinkPart { id: self.id, pending, opaque: Vec::new() });
        true
    }

    /// Commits the transactions whose checkpoint has completed, one at a time; true while
    /// there is commit work to wait for (after the end: only what can still complete).
    pub(super) fn poll_commits(&mut self, cx: &mut Context<'_>, failure: &Failure, ended: bool) -> bool {
        loop {
            if let Some(job) = &mut self.committing {
                match job.as_mut().poll(cx) {
                    Poll::Pending => return true,
                    Poll::Ready(Err(e)) => failure.fail(format_args!("exactly-once topic sink: committing"), e),
                    Poll::Ready(Ok(())) => {
                        self.committing = None;
                        self.precommitted.pop_front();
                    }
                }
            }
            let completed = self.coordinator.completed();
            let Some((checkpoint, txn)) = self.precommitted.front() else { return !self.barriers.is_empty() && !ended };
            if *checkpoint > completed {
                return false;
            }
            let (handle, topic, txn) = (self.handle.clone(), self.topic.clone(), txn.clone());
            self.committing = Some(Box::pin(async move {
                let partitions: Vec<PartitionId> = txn.partitions.iter().copied().map(PartitionId).collect();
                for &p in &partitions {
                    handle.write_marker(&topic, p, ProducerId(txn.producer), Marker::Commit).await?;
                }
                // Only a durable commit may leave the snapshots (popped once this is done).
                sync_all(handle, topic, partitions).await
            }));
        }
    }
}

/// Settles what an earlier run left in the topic: commits the transactions the restored
/// checkpoint pre-committed (this shard takes every `shards`-th), and aborts every other
/// transaction still open in the partitions this shard looks after.
async fn recover(
    handle: EngineHandle,
    topic: Arc<str>,
    partitions: u32,
    restored: Vec<PendingTxn>,
    shard: usize,
    shards: usize,
) -> Result<()> {
    let keep: HashSet<i64> = restored.iter().map(|t| t.producer).collect();
    let mut committed = BTreeSet::new();
    for txn in restored.iter().skip(shard).step_by(shards.max(1)) {
        for p in txn.partitions.iter().copied().map(PartitionId) {
            handle.write_marker(&topic, p, ProducerId(txn.producer), Marker::Commit).await?;
            committed.insert(p);
        }
    }
    sync_all(handle.clone(), topic.clone(), committed.into_iter().collect()).await?;
    for p in PartitionId::all(partitions).filter(|p| p.index() % shards.max(1) == shard) {
        let mut open: Vec<ProducerId> = handle.open_transactions(&topic, p).await?.into_keys().collect();
        open.sort();
        for producer in open.into_iter().filter(|id| !keep.contains(&id.0)) {
            handle.write_marker(&topic, p, producer, Marker::Abort).await?;
        }
    }
    Ok(())
}

/// Syncs each of `partitions` of `topic` ([`EngineHandle::sync`]).
async fn sync_all(handle: EngineHandle, topic: Arc<str>, partitions: Vec<PartitionId>) -> Result<()> {
    for p in partitions {
        handle.sync(&topic, p).await?;
    }
    Ok(())
}
