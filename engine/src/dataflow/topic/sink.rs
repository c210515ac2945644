//! [`TopicSink`] and [`Stream::to_topic`]: a stream written to a topic.
//!
//! Records are placed as the engine's producers place them (`murmur2(key) % partitions`
//! for keyed records, a partition per batch's worth in turn otherwise), gathered per
//! partition, and appended one batch at a time per partition: the next append of a
//! partition starts when the previous one has been answered, so a partition's records keep
//! their order, and records arriving meanwhile form the next batch (the longer the engine
//! takes, the larger the batches). Appends to different partitions run concurrently.
//!
//! The appends are the sink's pending work: while a partition has a full batch waiting
//! behind its append, the driver pulls no source records, and the pipeline does not
//! finish before every record has been appended (as durably as the topic's fsync policy
//! says). An append the engine refuses fails the pipeline: its shard panics,
//! [`RunningPipeline::join`](crate::dataflow::RunningPipeline::join) reports a failed
//! pipeline, and [`TopicSink::take_error`] has the engine's error.

use std::{
    cell::RefCell,
    collections::VecDeque,
    future::Future,
    pin::Pin,
    rc::Rc,
    sync::Arc,
    task::{Context, Poll},
};

use sluice_io::{AppendInfo, BatchMeta, EventTime, PartitionId};

use super::{Failure, txn::Transactions};
use crate::{
    dataflow::{Event, Operator, Stream, checkpoint::Barrier, scope::Pending},
    engine::EngineHandle,
    error::{EngineError, Result},
    record::OwnedRecord,
    topic::partitioner::partition_for_key,
};

/// The most bytes (keys plus values) the sink puts in one append: the engine's own batch
/// limit for single-record sends. A single larger record still goes, alone.
const APPEND_BYTES_MAX: usize = 1 << 20;

/// A topic to write from a pipeline: opened once with [`TopicSink::open`], then used on
/// every shard with [`Stream::to_topic`].
///
/// Its partition count is read when it is opened; partitions added to the topic later are
/// not written by this sink.
#[derive(Debug, Clone)]
pub struct TopicSink {
    pub(super) handle: EngineHandle,
    pub(super) topic: Arc<str>,
    pub(super) partitions: u32,
    batch_records: usize,
    failure: Failure,
    exactly_once: bool,
}

impl TopicSink {
    /// A sink writing to `topic`, with appends of at most the topic's `batch_records`.
    ///
    /// # Errors
    ///
    /// [`EngineError::UnknownTopic`](crate::EngineError::UnknownTopic).
    pub fn open(handle: &EngineHandle, topic: &str) -> Result<TopicSink> {
        let description = handle.describe_topic(topic)?;
        Ok(TopicSink {
            handle: handle.clone(),
            topic: topic.into(),
            partitions: description.partitions(),
            batch_records: description.config.batch_records.max(1),
            failure: Failure::default(),
            exactly_once: false,
        })
    }

    /// Writes exactly once, when the pipeline checkpoints: what arrives between two
    /// checkpoint barriers is appended as one transaction per shard, committed (a commit
    /// marker in every partition it wrote) once the checkpoint that follows it completes.
    /// A `read_committed` reader sees each record once, however often the pipeline is
    /// killed and restored; transactions a crash left open are aborted when it restarts.
    /// A transaction's partitions are synced before its checkpoint can complete, and again
    /// after its commit markers, whatever the topic's fsync policy (one fdatasync per
    /// partition written, per checkpoint).
    /// Without checkpoints the sink appends plainly.
    #[must_use]
    pub fn exactly_once(mut self) -> Self {
        self.exactly_once = true;
        self
    }

    /// The topic.
    #[must_use]
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The error that failed a pipeline writing to this sink, if an append did (taken: a
    /// second call returns `None`).
    #[must_use]
    pub fn take_error(&self) -> Option<EngineError> {
        self.failure.take()
    }

    /// The partitions written to.
    #[must_use]
    pub fn partitions(&self) -> u32 {
        self.partitions
    }
}

type AppendFuture = Pin<Box<dyn Future<Output = Result<AppendInfo>>>>;

/// Records waiting for one append, all of one generation (the records between two
/// checkpoint barriers).
#[derive(Default)]
struct Chunk {
    records: Vec<OwnedRecord>,
    bytes: usize,
    generation: u64,
}

/// One partition's side of the sink: batches waiting, and the append in flight (with its
/// generation).
#[derive(Default)]
struct PartitionQueue {
    chunks: VecDeque<Chunk>,
    in_flight: Option<(u64, AppendFuture)>,
}

/// The sink's state on one shard, shared by the operator that fills it and the driver that
/// flushes it.
struct Appender {
    sink: TopicSink,
    queues: Vec<PartitionQueue>,
    /// Unkeyed records placed so far, from a per-shard starting point so shards spread
    /// their unkeyed records over different partitions.
    unkeyed: u64,
    ended: bool,
    /// The generation new records join: bumped by every checkpoint barrier.
    generation: u64,
    /// With exactly-once writes: the transactions.
    txn: Option<Transactions>,
}

impl Appender {
    fn chunk_full(&self, chunk: &Chunk) -> bool {
        chunk.records.len() >= self.sink.batch_records || chunk.bytes >= APPEND_BYTES_MAX
    }

    fn place(&mut self, key: Option<&[u8]>) -> usize {
        let partitions = self.sink.partitions;
        match key {
            Some(key) => partition_for_key(key, partitions).index(),
            None => {
                let n = self.unkeyed;
                self.unkeyed += 1;
                ((n / self.sink.batch_records as u64) % u64::from(partitions)) as usize
            }
        }
    }

    fn push(&mut self, record: OwnedRecord) {
        let partition = self.place(record.key.as_deref());
        let bytes = record.size();
        // A chunk takes the record if that keeps it within both limits; a record larger
        // than the byte limit goes alone.
        let generation = self.generation;
        let open = self.queues[partition].chunks.back().is_some_and(|c| {
            c.generation == generation
                && c.records.len() < self.sink.batch_records
                && (c.records.is_empty() || c.bytes + bytes <= APPEND_BYTES_MAX)
        });
        let queue = &mut self.queues[partition];
        if !open {
            queue.chunks.push_back(Chunk { generation, ..Chunk::default() });
        }
        let chunk = queue.chunks.back_mut().expect("a chunk was just ensured");
        chunk.records.push(record);
        chunk.bytes += bytes;
    }

    fn append(&self, partition: PartitionId, records: Vec<OwnedRecord>, meta: BatchMeta) -> AppendFuture {
        let (handle, topic) = (self.sink.handle.clone(), self.sink.topic.clone());
        Box::pin(async move { handle.append(&topic, partition, records, meta).await })
    }

    /// Whether every record of generations up to `generation` has been appended.
    fn appended_through(&self, generation: u64) -> bool {
        self.queues.iter().all(|q| {
            q.in_flight.as_ref().is_none_or(|(g, _)| *g > generation)
                && q.chunks.front().is_none_or(|c| c.generation > generation)
        })
    }

    /// Sends each partition's next chunks while nothing is in flight for it.
    fn send(&mut self, cx: &mut Context<'_>) {
        for partition in 0..self.queues.len() {
            loop {
                let queue = &mut self.queues[partition];
                if let Some((_, append)) = &mut queue.in_flight {
                    match append.as_mut().poll(cx) {
                        Poll::Pending => break,
                        Poll::Ready(Ok(_)) => queue.in_flight = None,
                        Poll::Ready(Err(e)) => self.sink.failure.fail(format_args!("topic sink: appending"), e),
                    }
                }
                let Some(generation) = queue.chunks.front().map(|c| c.generation) else { break };
                let meta = match &mut self.txn {
                    None => BatchMeta::default(),
                    Some(txn) => {
                        let records = queue.chunks.front().map_or(0, |c| c.records.len());
                        match txn.meta(cx, generation, PartitionId(partition as u32), records, &self.sink.failure) {
                            Some(meta) => meta,
                            None => break,
                        }
                    }
                };
                let chunk = self.queues[partition].chunks.pop_front().expect("checked above");
                let append = self.append(PartitionId(partition as u32), chunk.records, meta);
                self.queues[partition].in_flight = Some((generation, append));
            }
        }
    }
}

impl Pending for Appender {
    /// Moves every partition's appends along; `Ready` while the sink keeps up (no full
    /// batch waits behind an append) and, once the stream has ended, only when everything
    /// has been appended.
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let ready = match &mut self.txn {
            None => true,
            Some(txn) => txn.poll_recovery(cx, &self.sink.failure),
        };
        if ready {
            self.send(cx);
        }
        let mut txn_busy = false;
        if let Some(mut txn) = self.txn.take() {
            // Barriers whose generation is all appended: once durable, the transaction is
            // pre-committed.
            while let Some(&(barrier, generation)) = txn.barriers.front() {
                if !self.appended_through(generation)
                    || !txn.poll_precommit(cx, barrier, generation, &self.sink.failure)
                {
                    break;
                }
                txn.barriers.pop_front();
            }
            txn_busy = txn.poll_commits(cx, &self.sink.failure, self.ended);
            self.txn = Some(txn);
        }
        let mut behind = txn_busy;
        for partition in 0..self.queues.len() {
            let queue = &self.queues[partition];
            behind |= if self.ended {
                queue.in_flight.is_some() || !queue.chunks.is_empty()
            } else {
                queue.chunks.len() > 1 || queue.chunks.front().is_some_and(|c| self.chunk_full(c))
            };
        }
        if behind { Poll::Pending } else { Poll::Ready(()) }
    }
    /// Its transactions commit what a stopping savepoint covers.
    fn flush_before_halt(&self) -> bool {
        true
    }
}

/// The operator end of the sink: encodes records into the shared [`Appender`].
struct ToTopic<F> {
    appender: Rc<RefCell<Appender>>,
    encode: F,
}

impl<T, F: FnMut(T, EventTime) -> OwnedRecord> Operator<T> for ToTopic<F> {
    fn on_batch(&mut self, batch: &mut Vec<Event<T>>) {
        let mut appender = self.appender.borrow_mut();
        for event in batch.drain(..) {
            appender.push((self.encode)(event.value, event.time));
        }
    }
    fn on_watermark(&mut self, _: EventTime) {}
    fn on_idle(&mut self, _: bool) {}
    fn on_end(&mut self) {
        self.appender.borrow_mut().ended = true;
    }
    fn on_barrier(&mut self, barrier: Barrier) {
        let mut appender = self.appender.borrow_mut();
        let generation = appender.generation;
        appender.generation += 1;
        if let Some(txn) = &mut appender.txn {
            txn.barriers.push_back((barrier, generation));
        }
    }
}

impl<T: 'static> Stream<T> {
    /// Writes every record to `sink`'s topic as the key and value `encode` makes of it,
    /// with the record's event time; the stream ends here. Each key's records keep their
    /// order in the topic.
    pub fn to_topic(self, sink: &TopicSink, mut encode: impl FnMut(T) -> (Option<Vec<u8>>, Vec<u8>) + 'static) {
        self.to_topic_records(sink, move |value, time| {
            let (key, value) = encode(value);
            OwnedRecord::new(key, value, time)
        });
    }

    /// Writes every element to `sink`'s topic as the whole record `encode` makes of it
    /// and its event time: headers, a null value (a tombstone for a compacted topic) and
    /// the stored time are the record's. The stream ends here; each key's records keep
    /// their order in the topic.
    pub fn to_topic_records(self, sink: &TopicSink, encode: impl FnMut(T, EventTime) -> OwnedRecord + 'static) {
        let txn = match self.scope.checkpoint() {
            Some(c) if sink.exactly_once => Some(Transactions::new(sink, &c)),
            _ => None,
        };
        let appender = Rc::new(RefCell::new(Appender {
            sink: sink.clone(),
            queues: (0..sink.partitions).map(|_| PartitionQueue::default()).collect(),
            unkeyed: self.scope.shard() as u64 * sink.batch_records as u64,
            ended: false,
            generation: 0,
            txn,
        }));
        self.scope.add_pending(appender.clone());
        self.attach(ToTopic { appender, encode });
    }
}
