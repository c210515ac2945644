//! The processor on the log: a topic as a source ([`TopicSource`]) and as a sink
//! ([`TopicSink`]).
//!
//! The pipeline's shards are not the engine's: a pipeline reaches the log through the
//! [`EngineHandle`]'s requests, which work from any executor, so a topic is read and
//! written by the engine's shards while the pipeline's shards do the processing.
//!
//! Both ends are opened before the pipeline starts, outside its build function, and then
//! used inside it on every shard: that is where a missing topic or an
//! offset the log does not hold becomes a typed [`EngineError`], instead of a shard that
//! fails while the pipeline runs. The source's starting offsets (and, when bounded, its end
//! offsets) are resolved once there, so every shard reads from the same snapshot.
//!
//! ```no_run
//! use futures_lite::future::block_on;
//! use sluice_engine::dataflow::{
//!     Pipeline, PipelineConfig, WatermarkStrategy,
//!     topic::{StartFrom, TopicRecord, TopicSink, TopicSource},
//! };
//! # fn demo(handle: sluice_engine::EngineHandle) -> sluice_engine::Result<()> {
//! let input = block_on(TopicSource::open(&handle, "orders", StartFrom::Earliest))?.bounded();
//! let output = TopicSink::open(&handle, "orders-upper")?;
//! Pipeline::new(PipelineConfig::with_shards(2)).run(move |scope| {
//!     scope
//!         .topic_source(&input, WatermarkStrategy::monotonous(TopicRecord::event_time))
//!         .map(|r| (r.key, r.value.unwrap_or_default().to_ascii_uppercase()))
//!         .to_topic(&output, |(key, value)| (key, value));
//! })
//! # }
//! ```

mod reader;
mod sink;
mod txn;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use sluice_io::{EventTime, Offset, PartitionId};

pub use reader::TopicReader;
pub use sink::TopicSink;

use super::{Scope, Stream, WatermarkStrategy};
use crate::{
    client::consumer::Isolation,
    client::group_consumer::OffsetReset,
    engine::EngineHandle,
    error::{EngineError, Result},
    record::OwnedHeader,
};

/// One record read from a topic, with where it was read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopicRecord {
    /// The partition it was read from.
    pub partition: PartitionId,
    /// Its offset in that partition.
    pub offset: Offset,
    /// The key, if any.
    pub key: Option<Vec<u8>>,
    /// The value; `None` for a null value (a tombstone), distinct from an empty one.
    pub value: Option<Vec<u8>>,
    /// The event time its producer stamped it with.
    pub time: EventTime,
    /// Its headers, in order.
    pub headers: Vec<OwnedHeader>,
}

impl TopicRecord {
    /// The record's event time: the usual timestamp extractor of a topic source's
    /// [`WatermarkStrategy`].
    #[must_use]
    pub fn event_time(&self) -> EventTime {
        self.time
    }
}

/// Where a [`TopicSource`] starts reading each partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartFrom {
    /// The first offset each partition still holds: a replay of everything.
    Earliest,
    /// Each partition's end when the source is opened: only records written later.
    Latest,
    /// In each partition, the first record at or after this event time (the end if none).
    Timestamp(EventTime),
    /// A chosen offset per partition. Partitions not named start at the earliest offset;
    /// a partition the topic does not have, or an offset its log does not hold, is an
    /// error.
    Offsets(BTreeMap<PartitionId, Offset>),
    /// A consumer group's committed offsets. A partition the group has not committed, or
    /// whose committed offset the log no longer holds, starts where `reset` says (Kafka's
    /// `auto.offset.reset`). The pipeline does not commit on its own.
    Committed {
        /// The group.
        group: String,
        /// Where partitions without a usable committed offset start.
        reset: OffsetReset,
    },
}

/// The first error a topic source or sink met while its pipeline ran, kept for the host:
/// the pipeline itself can only fail the shard (a panic), and its error says no more than
/// that a shard failed. Shared by every clone of the source or sink, so by all shards.
#[derive(Debug, Clone, Default)]
struct Failure(Arc<Mutex<Option<EngineError>>>);

impl Failure {
    /// Keeps `error` (the first one wins) and fails this shard.
    fn fail(&self, context: std::fmt::Arguments<'_>, error: EngineError) -> ! {
        let message = format!("{context}: {error}");
        self.0.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(error);
        panic!("{message}");
    }

    fn take(&self) -> Option<EngineError> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// One partition's share of a source's plan: where it starts, and where the log ended when
/// the source was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PartitionPlan {
    start: Offset,
    end_at_open: Offset,
}

/// A topic to read in a pipeline: the topic, each partition's starting offset, and how to
/// fetch. Opened once with [`TopicSource::open`], then used on every shard with
/// [`Scope::topic_source`]; shard `s` of `n` reads the partitions `p` with `p % n == s`,
/// each as its own split (its own watermark and idleness).
///
/// By default the source follows its partitions forever, long-polling at their ends;
/// [`TopicSource::bounded`] makes it stop at the ends seen when it was opened, for replays
/// and batch jobs.
///
/// A fetch the engine refuses while the pipeline runs fails the pipeline (its shard
/// panics, [`RunningPipeline::join`](super::RunningPipeline::join) reports it, and
/// [`TopicSource::take_error`] has the engine's error), but for one case: an offset the log no longer holds (retention deleted it, for a source that
/// fell behind), where the partition skips to the first offset still held, as a Kafka
/// consumer with `auto.offset.reset = earliest` does.
#[derive(Debug, Clone)]
pub struct TopicSource {
    handle: EngineHandle,
    topic: Arc<str>,
    plans: Arc<[PartitionPlan]>,
    bounded: bool,
    fetch_max_bytes: usize,
    fetch_max_wait: Duration,
    failure: Failure,
    /// The consumer group it started from, to which checkpoints commit its positions.
    group: Option<Arc<str>>,
    isolation: Isolation,
}

impl TopicSource {
    /// Default [`TopicSource::fetch_max_bytes`]: 1 MiB per partition per fetch.
    pub const DEFAULT_FETCH_MAX_BYTES: usize = 1 << 20;
    /// Default [`TopicSource::fetch_max_wait`], Kafka's `fetch.max.wait.ms`.
    pub const DEFAULT_FETCH_MAX_WAIT: Duration = Duration::from_millis(500);

    /// Resolves where every partition of `topic` starts, and where each ends now.
    ///
    /// # Errors
    ///
    /// [`EngineError::UnknownTopic`]; for [`StartFrom::Offsets`],
    /// [`EngineError::PartitionOutOfRange`] or [`EngineError::OffsetOutOfRange`]; and
    /// whatever the engine answers to the offset requests (a shut-down engine, a failed
    /// log). A group id may be any string, as in Kafka.
    pub async fn open(handle: &EngineHandle, topic: &str, start: StartFrom) -> Result<TopicSource> {
        let partitions = handle.describe_topic(topic)?.partitions();
        let committed = match &start {
            StartFrom::Committed { group, .. } => handle.committed_offsets(group).await?,
            _ => BTreeMap::new(),
        };
        if let StartFrom::Offsets(chosen) = &start
            && let Some((&partition, _)) = chosen.range(PartitionId(partitions)..).next()
        {
            return Err(EngineError::PartitionOutOfRange { topic: topic.to_string(), partition, partitions });
        }
        let mut plans = Vec::with_capacity(partitions as usize);
        for p in PartitionId::all(partitions) {
            let (first, end) = handle.offsets(topic, p).await?;
            let start = match &start {
                StartFrom::Earliest => first,
                StartFrom::Latest => end,
                StartFrom::Timestamp(t) => handle.offset_for_time(topic, p, *t).await?.unwrap_or(end),
                StartFrom::Offsets(chosen) => match chosen.get(&p) {
                    None => first,
                    Some(&o) if o >= first && o <= end => o,
                    Some(&requested) => {
                        return Err(EngineError::OffsetOutOfRange {
                            topic: topic.to_string(),
                            partition: p,
                            requested,
                            start: first,
                            end,
                        });
                    }
                },
                StartFrom::Committed { reset, .. } => match committed.get(&(topic.to_string(), p)) {
                    Some(&o) if o >= first && o <= end => o,
                    _ => match reset {
                        OffsetReset::Earliest => first,
                        OffsetReset::Latest => end,
                    },
                },
            };
            plans.push(PartitionPlan { start, end_at_open: end });
        }
        Ok(TopicSource {
            handle: handle.clone(),
            topic: topic.into(),
            plans: plans.into(),
            bounded: false,
            fetch_max_bytes: Self::DEFAULT_FETCH_MAX_BYTES,
            fetch_max_wait: Self::DEFAULT_FETCH_MAX_WAIT,
            failure: Failure::default(),
            group: match &start {
                StartFrom::Committed { group, .. } => Some(group.as_str().into()),
                _ => None,
            },
            isolation: Isolation::ReadUncommitted,
        })
    }

    /// Reads only committed records of transactions (what an exactly-once sink wrote),
    /// holding back what follows a transaction still open. A bounded source then ends at
    /// the last stable offset below its end offsets.
    #[must_use]
    pub fn read_committed(mut self) -> Self {
        self.isolation = Isolation::ReadCommitted;
        self
    }

    /// Stops each partition at the end it had when the source was opened: the stream ends
    /// once everything written before then has been read. The ends are part of every
    /// checkpoint: a pipeline restored from one stops where the interrupted run would
    /// have, whatever was appended since.
    #[must_use]
    pub fn bounded(mut self) -> Self {
        self.bounded = true;
        self
    }

    /// The most bytes one fetch returns per partition (at least one batch is returned
    /// whatever its size). Bounds the memory a partition holds: one decoded fetch and one
    /// in flight.
    #[must_use]
    pub fn fetch_max_bytes(mut self, bytes: usize) -> Self {
        self.fetch_max_bytes = bytes.max(1);
        self
    }

    /// How long a fetch at a partition's end waits for new records before answering
    /// empty (a long poll). Only an unbounded source waits at the end.
    #[must_use]
    pub fn fetch_max_wait(mut self, wait: Duration) -> Self {
        self.fetch_max_wait = wait;
        self
    }

    /// The topic.
    #[must_use]
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Whether the source stops at the ends seen when it was opened.
    #[must_use]
    pub fn is_bounded(&self) -> bool {
        self.bounded
    }

    /// Each partition's starting offset, by partition.
    #[must_use]
    pub fn start_offsets(&self) -> Vec<Offset> {
        self.plans.iter().map(|p| p.start).collect()
    }

    /// Each partition's end offset when the source was opened, by partition: where a
    /// bounded source stops.
    #[must_use]
    pub fn end_offsets(&self) -> Vec<Offset> {
        self.plans.iter().map(|p| p.end_at_open).collect()
    }

    /// The error that failed a pipeline reading this source, if a fetch did (taken: a
    /// second call returns `None`).
    #[must_use]
    pub fn take_error(&self) -> Option<EngineError> {
        self.failure.take()
    }

    /// The instance shard `shard` of `shards` runs: the partitions `p` with
    /// `p % shards == shard`.
    #[must_use]
    pub fn reader(&self, shard: usize, shards: usize) -> TopicReader {
        let shards = shards.max(1);
        let partitions =
            (0..self.plans.len()).filter(|p| p % shards == shard).map(|p| (PartitionId(p as u32), self.plans[p]));
        TopicReader::new(self, partitions)
    }
}

impl Scope {
    /// The records of `source`'s partitions that this shard reads, stamped and
    /// watermarked by `strategy` (usually from [`TopicRecord::event_time`]).
    pub fn topic_source<E>(
        &self,
        source: &TopicSource,
        strategy: WatermarkStrategy<TopicRecord, E>,
    ) -> Stream<TopicRecord>
    where
        E: Fn(&TopicRecord) -> EventTime + 'static,
    {
        self.source(source.reader(self.shard(), self.shards()), strategy)
    }
}
