//! Exactly-once into systems outside sluice: the two-phase-commit sink
//! ([`TwoPhaseCommitSink`], as Flink's `TwoPhaseCommitSinkFunction`) and, built on it,
//! [`Upsert`] for systems that write by key.
//!
//! Between two checkpoint barriers a sink instance writes into one transaction (an
//! *epoch*). At barrier *n* it pre-commits the epoch's transaction (durable, not yet
//! visible) and the transaction becomes part of checkpoint *n*'s snapshot; once
//! checkpoint *n* completes, it is committed. A pipeline restored from checkpoint *n*
//! commits the transactions that snapshot holds again (so `commit` must be idempotent) and
//! replays the input after *n* into new transactions. What was written after the last
//! completed checkpoint and never pre-committed is aborted when the sink instance ends;
//! after a crash it is never committed, and the external system must let it expire (as
//! Kafka expires a transaction a producer abandons).

use std::{
    cell::RefCell,
    collections::VecDeque,
    rc::Rc,
    sync::Arc,
    task::{Context, Poll},
};

use sluice_io::{CheckpointId, EventTime};

use super::{
    Data, Event, Operator, Stream, UserError,
    checkpoint::{Barrier, CheckpointCoordinator, ShardCheckpoint, SinkPart},
    operator::Shared,
    scope::Pending,
};

/// A sink that writes each epoch's records as one transaction of an external system.
///
/// A failure is returned as any error ([`UserError`]); the pipeline then fails with it and
/// its causes ([`EngineError::Pipeline`](crate::EngineError::Pipeline)).
pub trait TwoPhaseCommitSink<T>: 'static {
    /// One transaction, as the checkpoint stores it between pre-commit and commit: what
    /// `commit` needs to finish it, possibly in another process (an id, a staged file's
    /// name, or the records themselves).
    type Txn: Data;
    /// Opens the transaction of a new epoch.
    fn begin(&mut self) -> Result<Self::Txn, UserError>;
    /// Writes one record into the open transaction.
    fn write(&mut self, txn: &mut Self::Txn, record: Event<T>) -> Result<(), UserError>;
    /// The epoch has ended at a barrier: make the transaction durable, still invisible.
    fn pre_commit(&mut self, txn: &mut Self::Txn) -> Result<(), UserError>;
    /// The checkpoint after the transaction completed: make it visible. Called again for
    /// the same transaction after a restore, so it must be idempotent.
    fn commit(&mut self, txn: Self::Txn) -> Result<(), UserError>;
    /// The transaction will never be committed: discard it.
    fn abort(&mut self, txn: Self::Txn) -> Result<(), UserError>;
    /// At every barrier, after `pre_commit`, before the snapshot is taken: a snapshot no
    /// longer holds the transactions `commit` was called for, so a sink whose `commit`
    /// only starts the commit (hands it to another thread) waits here until they are
    /// visible. The default, for a `commit` that finishes before it returns, does nothing.
    fn flush_commits(&mut self) -> Result<(), UserError> {
        Ok(())
    }
}

struct TwoPhase<T, S: TwoPhaseCommitSink<T>> {
    sink: S,
    open: Option<S::Txn>,
    /// Pre-committed transactions and the checkpoint that commits each.
    precommitted: VecDeque<(CheckpointId, S::Txn)>,
    checkpoint: Option<(Rc<RefCell<ShardCheckpoint>>, u32, Arc<CheckpointCoordinator>)>,
    ended: bool,
    _in: std::marker::PhantomData<fn(T)>,
}

fn check<V>(what: &str, r: Result<V, UserError>) -> V {
    r.unwrap_or_else(|e| {
        let mut message = format!("two-phase-commit sink: {what}: {e}");
        let mut cause = e.source();
        while let Some(c) = cause {
            message.push_str(&format!(": {c}"));
            cause = c.source();
        }
        panic!("{message}")
    })
}

impl<T, S: TwoPhaseCommitSink<T>> TwoPhase<T, S> {
    fn encode(txn: &S::Txn) -> Vec<u8> {
        let mut out = Vec::new();
        txn.encode(&mut out);
        out
    }

    /// Commits what completed checkpoints cover.
    fn commit_completed(&mut self) {
        let Some((_, _, coordinator)) = &self.checkpoint else { return };
        let completed = coordinator.completed();
        while self.precommitted.front().is_some_and(|(id, _)| *id <= completed) {
            let (_, txn) = self.precommitted.pop_front().expect("checked");
            check("commit", self.sink.commit(txn));
        }
    }
}

impl<T: 'static, S: TwoPhaseCommitSink<T>> Operator<T> for TwoPhase<T, S> {
    fn on_batch(&mut self, batch: &mut Vec<Event<T>>) {
        if batch.is_empty() {
            return;
        }
        if self.open.is_none() {
            self.open = Some(check("begin", self.sink.begin()));
        }
        let txn = self.open.as_mut().expect("opened above");
        for event in batch.drain(..) {
            check("write", self.sink.write(txn, event));
        }
    }
    fn on_watermark(&mut self, _: EventTime) {}
    fn on_idle(&mut self, _: bool) {}
    fn on_barrier(&mut self, barrier: Barrier) {
        let Some((shard, id, _)) = &self.checkpoint else { return };
        let (shard, id) = (shard.clone(), *id);
        if let Some(mut txn) = self.open.take() {
            check("pre-commit", self.sink.pre_commit(&mut txn));
            self.precommitted.push_back((barrier.id, txn));
        }
        check("flushing commits", self.sink.flush_commits());
        let opaque = self.precommitted.iter().map(|(_, t)| Self::encode(t)).collect();
        shard.borrow_mut().report_sink(barrier.id, SinkPart { id, pending: Vec::new(), opaque });
    }
    fn on_end(&mut self) {
        self.ended = true;
        self.commit_completed();
        if let Some(mut txn) = self.open.take() {
            if self.checkpoint.is_none() {
                // Without checkpoints, the end of the input is the only commit point.
                check("pre-commit", self.sink.pre_commit(&mut txn));
                check("commit", self.sink.commit(txn));
            } else {
                check("abort", self.sink.abort(txn));
            }
        }
    }
}

impl<T: 'static, S: TwoPhaseCommitSink<T>> Pending for TwoPhase<T, S> {
    /// Commits as checkpoints complete; never holds the sources back.
    fn poll_flush(&mut self, _: &mut Context<'_>) -> Poll<()> {
        self.commit_completed();
        Poll::Ready(())
    }

    fn flush_before_halt(&self) -> bool {
        true
    }
}

impl<T: 'static> Stream<T> {
    /// Writes every record through `sink`, exactly once when the pipeline checkpoints
    /// (see [`TwoPhaseCommitSink`]); without checkpoints, the whole input is one
    /// transaction committed at its end.
    pub fn to_two_phase_commit<S: TwoPhaseCommitSink<T>>(self, mut sink: S) {
        let checkpoint = self.scope.checkpoint().map(|c| {
            let (id, coordinator, shard, shards) = {
                let mut s = c.borrow_mut();
                (s.add_sink(), s.coordinator.clone(), s.shard(), s.shards())
            };
            // Finish what the restored checkpoint pre-committed: every instance takes its
            // share, whatever the shard count was.
            if let Some(restored) = &coordinator.restored {
                let txns = restored.sink_txns.get(&id).map(Vec::as_slice).unwrap_or_default();
                for bytes in txns.iter().skip(shard).step_by(shards.max(1)) {
                    let txn =
                        check("restoring a transaction", S::Txn::decode(&mut &bytes[..]).map_err(UserError::from));
                    check("commit after restore", sink.commit(txn));
                }
            }
            (c, id, coordinator)
        });
        let op = Rc::new(RefCell::new(TwoPhase {
            sink,
            open: None,
            precommitted: VecDeque::new(),
            checkpoint,
            ended: false,
            _in: std::marker::PhantomData,
        }));
        self.scope.add_pending(op.clone());
        self.attach(Shared(op));
    }
}

/// A [`TwoPhaseCommitSink`] for systems that write by key (a key-value store, a table
/// with a primary key): each epoch's `(key, value)` records are held until its checkpoint
/// completes and then written with `upsert`, in order. Writing a key again with the same
/// value changes nothing, so the commit after a restore is harmless, and what readers of
/// the store see is only ever state the pipeline has checkpointed.
pub struct Upsert<K, V, F> {
    upsert: F,
    _kv: std::marker::PhantomData<fn(K, V)>,
}

impl<K, V, F> std::fmt::Debug for Upsert<K, V, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upsert").finish_non_exhaustive()
    }
}

impl<K, V, F: FnMut(K, V) -> Result<(), UserError>> Upsert<K, V, F> {
    /// An upsert sink calling `upsert(key, value)` for each committed record.
    pub fn new(upsert: F) -> Self {
        Upsert { upsert, _kv: std::marker::PhantomData }
    }
}

impl<K: Data, V: Data, F: FnMut(K, V) -> Result<(), UserError> + 'static> TwoPhaseCommitSink<(K, V)>
    for Upsert<K, V, F>
{
    type Txn = Vec<(K, V)>;
    fn begin(&mut self) -> Result<Self::Txn, UserError> {
        Ok(Vec::new())
    }
    fn write(&mut self, txn: &mut Self::Txn, record: Event<(K, V)>) -> Result<(), UserError> {
        txn.push(record.value);
        Ok(())
    }
    fn pre_commit(&mut self, _: &mut Self::Txn) -> Result<(), UserError> {
        Ok(())
    }
    fn commit(&mut self, txn: Self::Txn) -> Result<(), UserError> {
        for (k, v) in txn {
            (self.upsert)(k, v)?;
        }
        Ok(())
    }
    fn abort(&mut self, _: Self::Txn) -> Result<(), UserError> {
        Ok(())
    }
}
