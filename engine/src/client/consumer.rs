//! A consumer for host code: assigned partitions, a position in each, seeks, and polls
//! that wait efficiently (a long poll on every assigned partition at once) for new data.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use sluice_io::{Offset, OwnedBatches, PartitionId, txn::ReadCommitted};

use crate::engine::EngineHandle;
use crate::error::{EngineError, Result};

pub use crate::topic::SeekTo;

/// Batches polled from one partition.
#[derive(Debug)]
pub struct Polled {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: PartitionId,
    /// The batches, read in place; records before the position are skipped by
    /// [`OwnedBatches::records`].
    pub batches: OwnedBatches,
}

/// Which records of transactions a reader sees (Kafka's `isolation.level`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Every record, including those of transactions still open or aborted.
    #[default]
    ReadUncommitted,
    /// Only records of committed transactions (and non-transactional ones), up to the
    /// last stable offset: the first record of a transaction still open.
    ReadCommitted,
}

/// Reads assigned partitions of an engine's topics.
///
/// Control batches (transaction markers) are never delivered. With
/// [`Isolation::ReadCommitted`] the consumer holds back fetched batches until the
/// transactions in them are decided, and its positions are the last stable offsets.
#[derive(Debug)]
pub struct Consumer {
    engine: EngineHandle,
    positions: BTreeMap<(String, PartitionId), Offset>,
    /// Read committed: per partition, where the next fetch reads and what is held back.
    committed: BTreeMap<(String, PartitionId), (Offset, ReadCommitted)>,
    isolation: Isolation,
    max_bytes: usize,
    next: usize,
}

impl Consumer {
    /// A consumer with nothing assigned, reading up to `max_bytes` per partition per poll.
    #[must_use]
    pub fn new(engine: EngineHandle, max_bytes: usize) -> Consumer {
        Consumer {
            engine,
            positions: BTreeMap::new(),
            committed: BTreeMap::new(),
            isolation: Isolation::ReadUncommitted,
            max_bytes: max_bytes.max(1),
            next: 0,
        }
    }

    /// Sets the isolation level (before assigning partitions, or the next seek applies it).
    #[must_use]
    pub fn with_isolation(mut self, isolation: Isolation) -> Consumer {
        self.isolation = isolation;
        self.committed.clear();
        self
    }

    /// Where the next fetch of a partition reads.
    fn fetch_at(&self, key: &(String, PartitionId)) -> Offset {
        match self.committed.get(key) {
            Some((at, _)) => *at,
            None => self.positions[key],
        }
    }

    /// Takes fetched batches in: the batches to deliver now, if any.
    fn take(&mut self, key: (String, PartitionId), batches: OwnedBatches) -> Result<Option<Polled>> {
        if self.isolation == Isolation::ReadUncommitted {
            if batches.is_empty() {
                return Ok(None);
            }
            self.positions.insert(key.clone(), batches.next_offset());
            return Ok(Some(Polled { topic: key.0, partition: key.1, batches }));
        }
        let position = self.positions[&key];
        let (at, held) = self.committed.entry(key.clone()).or_insert_with(|| (position, ReadCommitted::new(position)));
        if !batches.is_empty() {
            *at = batches.next_offset();
        }
        held.push(batches);
        let out = held.drain().map_err(|e| EngineError::log(&key.0, key.1, e))?;
        self.positions.insert(key.clone(), held.stable());
        Ok((!out.is_empty()).then(|| Polled { topic: key.0, partition: key.1, batches: out }))
    }

    /// Replaces the assignment; each partition starts at `start`.
    pub async fn assign(&mut self, partitions: &[(String, PartitionId)], start: SeekTo) -> Result<()> {
        let mut positions = BTreeMap::new();
        for (topic, p) in partitions {
            let at = self.resolve(topic, *p, start).await?;
            positions.insert((topic.clone(), *p), at);
        }
        self.positions = positions;
        self.committed.clear();
        Ok(())
    }

    /// Every partition of a topic, for [`assign`](Self::assign).
    pub fn partitions_of(&self, topic: &str) -> Result<Vec<(String, PartitionId)>> {
        let n = self.engine.describe_topic(topic)?.partitions();
        Ok(PartitionId::all(n).map(|p| (topic.to_string(), p)).collect())
    }

    /// The assigned partitions and their positions.
    #[must_use]
    pub fn positions(&self) -> &BTreeMap<(String, PartitionId), Offset> {
        &self.positions
    }

    /// Moves one assigned partition's position.
    pub async fn seek(&mut self, topic: &str, partition: PartitionId, to: SeekTo) -> Result<()> {
        let key = (topic.to_string(), partition);
        if !self.positions.contains_key(&key) {
            return Err(EngineError::InvalidConfig(format!("{topic}-{partition} is not assigned to this consumer")));
        }
        let at = self.resolve(topic, partition, to).await?;
        self.committed.remove(&key);
        self.positions.insert(key, at);
        Ok(())
    }

    async fn resolve(&self, topic: &str, partition: PartitionId, to: SeekTo) -> Result<Offset> {
        let (start, end) = self.engine.offsets(topic, partition).await?;
        Ok(match to {
            SeekTo::Earliest => start,
            SeekTo::Latest => end,
            SeekTo::Offset(o) => {
                if o < start || o > end {
                    return Err(EngineError::OffsetOutOfRange {
                        topic: topic.to_string(),
                        partition,
                        requested: o,
                        start,
                        end,
                    });
                }
                o
            }
            SeekTo::Timestamp(t) => self.engine.offset_for_time(topic, partition, t).await?.unwrap_or(end),
        })
    }

    /// Reads every assigned partition from its position up to the end the partition has
    /// as this is called (its log end offset then), and returns what a `poll` loop would
    /// have delivered by then; records appended meanwhile are left for later polls. With
    /// [`Isolation::ReadCommitted`] it stops at the last stable offset below that end:
    /// records of a transaction still open there, and everything after them, are not
    /// returned (the positions stay at the first of them, as a Kafka consumer's do).
    ///
    /// # Errors
    ///
    /// Whatever a fetch answers (an unknown topic, a failed log, a shut-down engine).
    pub async fn read_to_end(&mut self) -> Result<Vec<Polled>> {
        let mut ends = BTreeMap::new();
        for (topic, p) in self.positions.keys() {
            ends.insert((topic.clone(), *p), self.engine.offsets(topic, *p).await?.1);
        }
        let mut out = Vec::new();
        for (key, end) in ends {
            loop {
                let at = self.fetch_at(&key);
                if at >= end {
                    break;
                }
                // Below the end there is always something to read, but under a lazy fsync
                // policy the newest bytes may need a moment to become readable.
                let batches = self.engine.fetch(&key.0, key.1, at, self.max_bytes, Duration::from_millis(100)).await?;
                if let Some(polled) = self.take(key.clone(), batches)? {
                    out.push(polled);
                }
            }
        }
        Ok(out)
    }

    /// Batches from the assigned partitions that have data, advancing their positions.
    /// When none has any, waits up to `max_wait` for the first that gets some.
    pub async fn poll(&mut self, max_wait: Duration) -> Result<Vec<Polled>> {
        let keys: Vec<(String, PartitionId)> = self.positions.keys().cloned().collect();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        // Start each poll at the next partition, so none is starved.
        let n = keys.len();
        for i in 0..n {
            let key = keys[(self.next + i) % n].clone();
            let at = self.fetch_at(&key);
            let batches = self.engine.fetch(&key.0, key.1, at, self.max_bytes, Duration::ZERO).await?;
            if let Some(polled) = self.take(key, batches)? {
                out.push(polled);
            }
        }
        self.next = (self.next + 1) % n;
        if !out.is_empty() || max_wait.is_zero() {
            return Ok(out);
        }
        // Nothing anywhere: long-poll every partition at once, take the first answer.
        type Fetch<'a> = Pin<Box<dyn Future<Output = (String, PartitionId, Result<OwnedBatches>)> + Send + 'a>>;
        let waits: Vec<Fetch<'_>> = keys
            .iter()
            .map(|key| {
                let at = self.fetch_at(key);
                let engine = self.engine.clone();
                let (topic, p, max_bytes) = (key.0.clone(), key.1, self.max_bytes);
                Box::pin(async move {
                    let r = engine.fetch(&topic, p, at, max_bytes, max_wait).await;
                    (topic, p, r)
                }) as Fetch<'_>
            })
            .collect();
        let first = waits.into_iter().reduce(|a, b| Box::pin(futures_lite::future::or(a, b))).expect("one or more");
        let (topic, p, batches) = first.await;
        if let Some(polled) = self.take((topic, p), batches?)? {
            out.push(polled);
        }
        Ok(out)
    }
}

/// Reading a whole topic, for host code and tests that need "everything written so far"
/// (defined here, with the consumer it uses, so that the engine does not depend on its
/// clients).
impl EngineHandle {
    /// Every partition of `topic` read from its first offset held up to the end it has
    /// now, as a [`Consumer`] with `isolation` would deliver it: with
    /// [`Isolation::ReadCommitted`], only committed
    /// records, up to each partition's last stable offset. Batches of one partition come
    /// in offset order, partitions one after another.
    ///
    /// # Errors
    ///
    /// [`EngineError::UnknownTopic`], or whatever a fetch answers.
    pub async fn read_to_end(&self, topic: &str, isolation: Isolation) -> Result<Vec<Polled>> {
        let mut consumer = Consumer::new(self.clone(), 1 << 20).with_isolation(isolation);
        let partitions = consumer.partitions_of(topic)?;
        consumer.assign(&partitions, SeekTo::Earliest).await?;
        consumer.read_to_end().await
    }
}
