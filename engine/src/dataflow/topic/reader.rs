//! [`TopicReader`]: one shard's instance of a topic source, reading its partitions with
//! fetches to the engine's shards.
//!
//! Each partition keeps the records of one answered fetch, decoded, and one fetch in
//! flight behind them (read-ahead), so the engine reads the next batches while the
//! pipeline works on the current ones; a partition never holds more than that, which is
//! what bounds the source's memory. Fetches are futures polled on this shard's driver
//! task: an answer wakes the driver, which pulls the source again.

use std::{
    collections::VecDeque,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use sluice_io::{Offset, OwnedBatches, PartitionId, txn::ReadCommitted};

use super::{Failure, PartitionPlan, TopicRecord, TopicSource};
use crate::{
    client::consumer::Isolation,
    dataflow::{RestoreError, Source, UserError},
    engine::EngineHandle,
    error::{EngineError, Result},
    record::OwnedHeader,
};

type FetchFuture = Pin<Box<dyn Future<Output = Result<OwnedBatches>>>>;

/// What a shard's partitions fetch from: shared by all of them.
struct Fetcher {
    handle: EngineHandle,
    topic: std::sync::Arc<str>,
    max_bytes: usize,
    max_wait: Duration,
    failure: Failure,
}

impl Fetcher {
    fn fetch(&self, partition: PartitionId, at: Offset) -> FetchFuture {
        let (handle, topic, max_bytes, max_wait) =
            (self.handle.clone(), self.topic.clone(), self.max_bytes, self.max_wait);
        Box::pin(async move { handle.fetch(&topic, partition, at, max_bytes, max_wait).await })
    }
}

/// A partition's fetch: none, one in flight, or one answered before its records were
/// wanted.
enum Fetch {
    Idle,
    InFlight(FetchFuture),
    Answered(Result<OwnedBatches>),
}

/// One partition (one split) of a reader.
struct PartitionReader {
    partition: PartitionId,
    /// The offset to fetch from next: one past the last record decoded.
    next: Offset,
    /// Where a bounded source stops.
    end: Option<Offset>,
    records: VecDeque<TopicRecord>,
    fetch: Fetch,
    /// Reading committed records only: the batches held back, and the stable offset.
    committed: Option<ReadCommitted>,
}

impl PartitionReader {
    /// Whether every record up to the bound has been fetched (never, when unbounded).
    fn fetched_all(&self) -> bool {
        self.end.is_some_and(|end| self.next >= end)
    }

    /// Whether the partition has nothing more to give.
    fn finished(&self) -> bool {
        self.records.is_empty() && matches!(self.fetch, Fetch::Idle) && self.fetched_all()
    }

    /// Makes records available if it can: `true` when some are. With none, any fetch the
    /// partition waits on has been polled with `cx`, so its answer wakes the driver.
    fn poll_records(&mut self, cx: &mut Context<'_>, fetcher: &Fetcher) -> bool {
        loop {
            if !self.records.is_empty() {
                return true;
            }
            let answer = match std::mem::replace(&mut self.fetch, Fetch::Idle) {
                Fetch::Answered(answer) => answer,
                Fetch::InFlight(mut fetch) => match fetch.as_mut().poll(cx) {
                    Poll::Ready(answer) => answer,
                    Poll::Pending => {
                        self.fetch = Fetch::InFlight(fetch);
                        return false;
                    }
                },
                Fetch::Idle if self.fetched_all() => return false,
                Fetch::Idle => {
                    self.fetch = Fetch::InFlight(fetcher.fetch(self.partition, self.next));
                    continue;
                }
            };
            self.accept(answer, fetcher);
            if !self.fetched_all() {
                // Read ahead: the request goes out now (the first poll sends it), and its
                // answer waits until these records are taken.
                let mut fetch = fetcher.fetch(self.partition, self.next);
                self.fetch = match fetch.as_mut().poll(cx) {
                    Poll::Ready(answer) => Fetch::Answered(answer),
                    Poll::Pending => Fetch::InFlight(fetch),
                };
            }
        }
    }

    /// Decodes a fetch's answer into records and moves the position past them.
    fn accept(&mut self, answer: Result<OwnedBatches>, fetcher: &Fetcher) {
        let topic = &*fetcher.topic;
        let batches = match answer {
            Ok(batches) => batches,
            // The log no longer holds the position (retention moved its start past a
            // reader that fell behind): go on from what it holds, as Kafka's consumer does
            // with `auto.offset.reset = earliest`.
            Err(EngineError::OffsetOutOfRange { requested, start, end, .. }) => {
                self.next = if requested < start { start } else { end };
                return;
            }
            Err(e) => fetcher
                .failure
                .fail(format_args!("topic source: fetching {topic}-{} at {}", self.partition, self.next), e),
        };
        let fetched_next = batches.next_offset();
        let batches = match &mut self.committed {
            None => batches,
            Some(held) => {
                held.push(batches);
                held.drain().unwrap_or_else(|e| {
                    let error = EngineError::log(topic, self.partition, e);
                    fetcher.failure.fail(format_args!("topic source: reading committed records"), error)
                })
            }
        };
        let from = self.next;
        // Control batches (transaction markers) are skipped by `records`.
        for record in batches.records() {
            let record = record.unwrap_or_else(|e| {
                let error = EngineError::log(topic, self.partition, e);
                fetcher.failure.fail(format_args!("topic source: reading at {from}"), error)
            });
            let offset = record.offset();
            if self.end.is_some_and(|end| offset >= end) {
                break;
            }
            self.records.push_back(TopicRecord {
                partition: self.partition,
                offset,
                key: record.key().map(<[u8]>::to_vec),
                value: record.value().map(<[u8]>::to_vec),
                time: record.event_time(),
                headers: record.headers().map(|h| OwnedHeader::from_header(&h)).collect(),
            });
        }
        self.next = self.next.max(fetched_next);
    }
}

/// One shard's instance of a [`TopicSource`]: its partitions, each a split.
pub struct TopicReader {
    fetcher: Fetcher,
    group: Option<std::sync::Arc<str>>,
    partitions: Vec<PartitionReader>,
    /// The split to look at first on the next pull, so no partition starves the others.
    next_split: usize,
}

impl std::fmt::Debug for TopicReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let positions: Vec<(PartitionId, Offset)> = self.partitions.iter().map(|p| (p.partition, p.next)).collect();
        f.debug_struct("TopicReader").field("topic", &self.fetcher.topic).field("positions", &positions).finish()
    }
}

impl TopicReader {
    pub(super) fn new(source: &TopicSource, partitions: impl Iterator<Item = (PartitionId, PartitionPlan)>) -> Self {
        let bounded = source.bounded;
        TopicReader {
            group: source.group.clone(),
            fetcher: Fetcher {
                handle: source.handle.clone(),
                topic: source.topic.clone(),
                max_bytes: source.fetch_max_bytes,
                max_wait: source.fetch_max_wait,
                failure: source.failure.clone(),
            },
            partitions: partitions
                .map(|(partition, plan)| PartitionReader {
                    partition,
                    next: plan.start,
                    end: bounded.then_some(plan.end_at_open),
                    records: VecDeque::new(),
                    fetch: Fetch::Idle,
                    committed: (source.isolation == Isolation::ReadCommitted).then(|| ReadCommitted::new(plan.start)),
                })
                .collect(),
            next_split: 0,
        }
    }

    /// The partitions this instance reads, in split order.
    #[must_use]
    pub fn partitions(&self) -> Vec<PartitionId> {
        self.partitions.iter().map(|p| p.partition).collect()
    }
}

impl Source<TopicRecord> for TopicReader {
    fn splits(&self) -> usize {
        self.partitions.len()
    }

    fn poll_next(&mut self, cx: &mut Context<'_>, out: &mut Vec<TopicRecord>, max: usize) -> Poll<Option<usize>> {
        let n = self.partitions.len();
        let mut running = false;
        for k in 0..n {
            let split = (self.next_split + k) % n;
            let partition = &mut self.partitions[split];
            if partition.poll_records(cx, &self.fetcher) {
                let take = max.min(partition.records.len());
                out.extend(partition.records.drain(..take));
                self.next_split = (split + 1) % n;
                return Poll::Ready(Some(split));
            }
            running |= !partition.finished();
        }
        if running { Poll::Pending } else { Poll::Ready(None) }
    }

    /// A partition's position is the offset of its next record not yet emitted.
    fn positions(&self) -> Option<Vec<(u64, i64)>> {
        Some(
            self.partitions
                .iter()
                .map(|p| {
                    let next = p
                        .records
                        .front()
                        .map(|r| r.offset)
                        .or_else(|| p.committed.as_ref().map(ReadCommitted::stable))
                        .unwrap_or(p.next);
                    (u64::from(p.partition.get()), next.0 as i64)
                })
                .collect(),
        )
    }

    /// Resumes each partition the checkpoint names at its position (the records read
    /// ahead are dropped); partitions it does not name keep their starting offsets.
    fn restore(&mut self, positions: &std::collections::HashMap<u64, i64>) -> Result<(), UserError> {
        for p in &mut self.partitions {
            if let Some(&at) = positions.get(&u64::from(p.partition.get())) {
                let at = u64::try_from(at).map_err(|_| RestoreError::NegativePosition {
                    source_name: "topic source",
                    split: u64::from(p.partition.get()),
                    position: at,
                })?;
                p.next = Offset(at);
                p.records.clear();
                p.fetch = Fetch::Idle;
                if p.committed.is_some() {
                    p.committed = Some(ReadCommitted::new(Offset(at)));
                }
            }
        }
        Ok(())
    }

    /// A bounded source's ends: where each partition stops.
    fn bounds(&self) -> Option<Vec<(u64, i64)>> {
        let ends: Vec<(u64, i64)> =
            self.partitions.iter().filter_map(|p| Some((u64::from(p.partition.get()), p.end?.0 as i64))).collect();
        (!ends.is_empty()).then_some(ends)
    }

    /// Stops each partition the checkpoint names where the interrupted run would have:
    /// not at the end the log has now.
    fn restore_bounds(&mut self, bounds: &std::collections::HashMap<u64, i64>) -> Result<(), UserError> {
        for p in &mut self.partitions {
            let Some(&end) = bounds.get(&u64::from(p.partition.get())) else { continue };
            if p.end.is_none() {
                return Err(RestoreError::Split {
                    source_name: "topic source",
                    detail: format!(
                        "the checkpoint was taken by a bounded source and this one is unbounded (partition {})",
                        p.partition
                    ),
                }
                .into());
            }
            let end = u64::try_from(end).map_err(|_| RestoreError::NegativePosition {
                source_name: "topic source",
                split: u64::from(p.partition.get()),
                position: end,
            })?;
            p.end = Some(Offset(end));
        }
        Ok(())
    }

    /// Commits the positions of a completed checkpoint to the group the source started
    /// from, if it did.
    fn checkpoint_completed(&mut self, positions: &[(u64, i64)]) {
        let Some(group) = self.group.clone() else { return };
        let offsets: Vec<(String, PartitionId, Offset)> = positions
            .iter()
            .map(|&(p, at)| (self.fetcher.topic.to_string(), PartitionId(p as u32), Offset(at.max(0) as u64)))
            .collect();
        let handle = self.fetcher.handle.clone();
        glommio::spawn_local(async move {
            if let Err(e) = handle.commit_offsets(&group, None, &offsets).await {
                eprintln!("sluice: committing checkpointed offsets to group {group}: {e}");
            }
        })
        .detach();
    }
}
