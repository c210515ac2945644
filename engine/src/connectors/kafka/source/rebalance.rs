//! The consumer-group side of [`KafkaSource`]: the held partitions' state ([`Part`]), the
//! consumer's context (rebalance and commit callbacks, run inside `poll` on the shard's
//! thread), and the in-process handoff of a partition between the shards of one process
//! ([`release`] gives one up, [`KafkaSource::take_handoffs`] picks it up).

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use rdkafka::{
    ClientContext, Offset, TopicPartitionList,
    consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol},
    types::RDKafkaRespErr,
};

use super::{Held, KafkaSource, Shared, lock};

/// A held partition.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Part {
    /// The next offset once known: the restored or handed-over position it was seeked to,
    /// or the offset after the last record emitted.
    pub(super) next: Option<i64>,
    /// Assigned while another shard of this process still holds it: a coordinator may
    /// complete a rebalance before the old owner has heard of it (`sluice serve` does).
    /// The partition stays paused until the old owner gives it up and hands its position
    /// over, so the shards of one process never read a record twice.
    pub(super) waiting: bool,
}

/// The consumer's callbacks: rebalances (seek restored positions on assign, commit on
/// revoke) and commit results. They run inside `poll`, on the shard's thread.
pub(super) struct SourceContext {
    pub(super) shard: usize,
    pub(super) shared: Arc<Shared>,
    pub(super) held: Held,
    pub(super) errors: Arc<Mutex<Vec<String>>>,
    /// A bounded read has ended and the consumer is leaving the group: its positions are
    /// committed already, so a revocation commits asynchronously (a synchronous commit
    /// while the group rebalances may be held until the rebalance ends).
    pub(super) leaving: std::sync::atomic::AtomicBool,
}

impl ClientContext for SourceContext {}

impl ConsumerContext for SourceContext {
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let topic = self.shared.config.topic.clone();
        let cooperative = matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative);
        let result = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let assigned: Vec<i32> = tpl.elements_for_topic(&topic).iter().map(|e| e.partition()).collect();
                let mut pause = TopicPartitionList::new();
                let mut parts = Vec::with_capacity(assigned.len());
                let mut handed = TopicPartitionList::new();
                {
                    let mut progress = lock(&self.shared.progress);
                    for p in assigned {
                        let restored = progress.restored.as_mut().and_then(|r| r.remove(&p));
                        let waiting = progress.owners.insert(p, self.shard).is_some_and(|o| o != self.shard);
                        let handoff = progress.handoff.remove(&p).flatten();
                        if waiting {
                            let _ = pause.add_partition(&topic, p);
                        } else if restored.is_none()
                            && let Some(h) = handoff
                        {
                            let _ = handed.add_partition_offset(&topic, p, Offset::Offset(h));
                        }
                        parts.push((p, Part { next: if waiting { None } else { restored }, waiting }));
                    }
                }
                // A position a shard of this process gave up earlier: start from it, or
                // from the group's committed offset if that is newer (the partition was
                // read elsewhere since) — also when the commit at revocation failed.
                if handed.count() > 0 {
                    let committed = consumer.committed_offsets(handed.clone(), self.shared.config.request_timeout).ok();
                    for e in handed.elements() {
                        let (p, h) = (e.partition(), e.offset().to_raw().unwrap_or(0));
                        let c = committed
                            .as_ref()
                            .and_then(|c| c.find_partition(&topic, p))
                            .and_then(|c| c.offset().to_raw())
                            .unwrap_or(-1);
                        if let Some((_, part)) = parts.iter_mut().find(|(q, _)| *q == p) {
                            part.next = Some(h.max(c));
                        }
                    }
                }
                {
                    let mut held = lock(&self.held);
                    for (p, part) in parts {
                        if let (Some(next), false) = (part.next, part.waiting) {
                            let _ = tpl.set_partition_offset(&topic, p, Offset::Offset(next));
                        }
                        held.insert(p, part);
                    }
                }
                let assigned = if cooperative { consumer.incremental_assign(tpl) } else { consumer.assign(tpl) };
                if pause.count() > 0 { assigned.and_then(|()| consumer.pause(&pause)) } else { assigned }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let revoked: Vec<(i32, Part)> = {
                    let held = lock(&self.held);
                    tpl.elements_for_topic(&topic)
                        .iter()
                        .filter_map(|e| held.get(&e.partition()).map(|part| (e.partition(), *part)))
                        .collect()
                };
                let mut commit = TopicPartitionList::new();
                for (p, part) in &revoked {
                    if let (Some(next), false) = (part.next, part.waiting) {
                        let _ = commit.add_partition_offset(&topic, *p, Offset::Offset(next));
                    }
                }
                let mode = if self.leaving.load(std::sync::atomic::Ordering::Acquire) {
                    CommitMode::Async
                } else {
                    CommitMode::Sync
                };
                if commit.count() > 0
                    && !consumer.assignment_lost()
                    && let Err(e) = consumer.commit(&commit, mode)
                {
                    lock(&self.errors).push(format!("committing revoked partitions: {e}"));
                }
                // Only now, with the commit done, may another shard of this process start
                // from the committed offset; one already assigned gets the position here.
                release(&self.shared, self.shard, &self.held, &revoked);
                if cooperative { consumer.incremental_unassign(tpl) } else { consumer.unassign() }
            }
            other => {
                lock(&self.errors).push(format!("rebalance error {other:?}"));
                let revoked: Vec<(i32, Part)> = lock(&self.held).iter().map(|(&p, &part)| (p, part)).collect();
                release(&self.shared, self.shard, &self.held, &revoked);
                consumer.unassign()
            }
        };
        if let Err(e) = result {
            lock(&self.errors).push(format!("applying a rebalance: {e}"));
        }
    }

    fn commit_callback(&self, result: rdkafka::error::KafkaResult<()>, _offsets: &TopicPartitionList) {
        // A commit that fails (a rebalance in between, a coordinator moving) is superseded
        // by the next one; it is only kept for `errors`.
        if let Err(e) = result {
            let mut errors = lock(&self.errors);
            if errors.len() < 16 {
                errors.push(format!("commit: {e}"));
            }
        }
    }
}

/// Gives up `revoked` partitions of `shard`: forgets them, and hands each one another
/// shard of this process was already given over to it (waking that shard).
pub(super) fn release(shared: &Shared, shard: usize, held: &Mutex<BTreeMap<i32, Part>>, revoked: &[(i32, Part)]) {
    let mut held = lock(held);
    let mut progress = lock(&shared.progress);
    for (p, part) in revoked {
        held.remove(p);
        match progress.owners.get(p).copied() {
            Some(owner) if owner == shard => {
                progress.owners.remove(p);
                // For the next shard of this process given it (see the assignment).
                if !part.waiting && part.next.is_some() {
                    progress.handoff.insert(*p, part.next);
                }
            }
            Some(owner) if !part.waiting => {
                progress.handoff.insert(*p, part.next);
                if let Some(w) = progress.wakers.get(&owner).and_then(|w| lock(w).take()) {
                    w.wake();
                }
            }
            _ => {}
        }
    }
}

impl<T, F> KafkaSource<T, F> {
    /// Resumes the waiting partitions whose old owner has handed them over, from the
    /// position it gave; returns how many.
    pub(super) fn take_handoffs(&self) -> usize {
        let topic = &self.shared.config.topic;
        let mut held = lock(&self.held);
        if !held.values().any(|p| p.waiting) {
            return 0;
        }
        let mut progress = lock(&self.shared.progress);
        let mut resumed = 0;
        for (&p, part) in held.iter_mut().filter(|(_, part)| part.waiting) {
            let Some(next) = progress.handoff.remove(&p) else { continue };
            *part = Part { next, waiting: false };
            if let Some(n) = next
                && let Err(e) = self.consumer.seek(topic, p, Offset::Offset(n), Duration::from_secs(1))
            {
                panic!("Kafka source on {topic}: seeking partition {p} to {n} after a handoff: {e}");
            }
            let mut tpl = TopicPartitionList::new();
            let _ = tpl.add_partition(topic, p);
            if let Err(e) = self.consumer.resume(&tpl) {
                panic!("Kafka source on {topic}: resuming partition {p}: {e}");
            }
            resumed += 1;
        }
        resumed
    }

    /// Takes the partitions of [`KafkaSourceFactory::instance_fixed`](super::KafkaSourceFactory::instance_fixed)
    /// once, at the first poll (after a restore): each from its restored position, or
    /// from the group's committed offset (else the earliest).
    pub(super) fn assign_fixed(&mut self) {
        let Some(partitions) = self.fixed.take() else { return };
        let topic = self.shared.config.topic.clone();
        let mut tpl = TopicPartitionList::new();
        {
            let mut progress = lock(&self.shared.progress);
            let mut held = lock(&self.held);
            for p in partitions {
                let restored = progress.restored.as_mut().and_then(|r| r.remove(&p));
                progress.owners.insert(p, self.shard);
                let offset = restored.map_or(Offset::Stored, Offset::Offset);
                let _ = tpl.add_partition_offset(&topic, p, offset);
                held.insert(p, Part { next: restored, waiting: false });
            }
        }
        if let Err(e) = self.consumer.assign(&tpl) {
            panic!("Kafka source on {topic}: assigning its fixed partitions: {e}");
        }
    }
}
