//! Records through the handle: where a record goes, sends (batched per the partition's
//! linger), appends (owned or packed), transaction markers, fetches, offsets, syncs and
//! producer ids. Each call reaches the partition's owning shard over its bounded queue.

use std::time::Duration;

use sluice_io::{AppendInfo, BatchMeta, Offset, OwnedBatches, PartitionId, Timestamp};

use crate::error::{EngineError, Result};
use crate::record::{AppendRecords, OwnedRecord, PackedRecords};
use crate::shard::Request;
use crate::topic::partitioner::partition_for_key;

use super::{Answer, EngineHandle};

impl EngineHandle {
    /// The partition a record goes to: `murmur2(key) % partitions` for a keyed record
    /// (Kafka's default partitioner), spread evenly otherwise.
    pub fn partition_for(&self, topic: &str, key: Option<&[u8]>) -> Result<PartitionId> {
        let (partitions, batch_records) = {
            let meta = self.inner.meta.read().unwrap_or_else(|e| e.into_inner());
            let t = meta.topics.get(topic).ok_or_else(|| EngineError::UnknownTopic(topic.to_string()))?;
            (t.partitions(), t.config.batch_records as u64)
        };
        Ok(match key {
            Some(k) => partition_for_key(k, partitions),
            None => {
                let n = self.inner.unkeyed_sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                PartitionId(((n / batch_records) % u64::from(partitions)) as u32)
            }
        })
    }

    /// Sends one record; resolves to its partition and offset once it is as durable as
    /// the topic's fsync policy says. Records sent together are batched per the topic's
    /// linger and batch size.
    pub async fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: &[u8],
        event_time: Timestamp,
    ) -> Result<(PartitionId, Offset)> {
        self.send_record(topic, OwnedRecord::new(key.map(<[u8]>::to_vec), value, event_time)).await
    }

    /// [`send`](Self::send) of a whole record: headers, a null value (a tombstone) and
    /// all. Its key chooses the partition as `send`'s does.
    pub async fn send_record(&self, topic: &str, record: OwnedRecord) -> Result<(PartitionId, Offset)> {
        let partition = self.partition_for(topic, record.key.as_deref())?;
        let offset = self.send_to(topic, partition, record).await?;
        Ok((partition, offset))
    }

    /// Sends one record to a chosen partition.
    pub async fn send_to(&self, topic: &str, partition: PartitionId, record: OwnedRecord) -> Result<Offset> {
        let (shard, rules) = self.owner(topic, partition)?;
        rules.check(topic, std::iter::once(record.size()), std::iter::once(record.key.is_some()))?;
        let topic = topic.to_string();
        self.call(shard, |reply| Request::Send { topic, partition, record, reply }).await
    }

    /// Appends records to one partition as one batch, now, stamped with `meta`.
    pub async fn append(
        &self,
        topic: &str,
        partition: PartitionId,
        records: Vec<OwnedRecord>,
        meta: BatchMeta,
    ) -> Result<AppendInfo> {
        self.append_records(topic, partition, AppendRecords::Owned(records), meta).await
    }

    /// [`append`](Self::append) of records packed in one shared buffer (as a Kafka record
    /// batch arrives): no allocation or copy per record on the way to the log.
    pub async fn append_packed(
        &self,
        topic: &str,
        partition: PartitionId,
        records: PackedRecords,
        meta: BatchMeta,
    ) -> Result<AppendInfo> {
        self.queue_packed(topic, partition, records, meta).await?.get().await
    }

    /// [`append_packed`](Self::append_packed) in two steps: resolves once the append is
    /// in the owning shard's queue (which may wait while that queue is full), to the
    /// future of its outcome. Appends to one partition queued one after another are
    /// appended in that order, however long each waits for room: the Kafka listener
    /// queues a connection's produce requests this way, in the order they arrived.
    pub(crate) async fn queue_packed(
        &self,
        topic: &str,
        partition: PartitionId,
        records: PackedRecords,
        meta: BatchMeta,
    ) -> Result<Answer<AppendInfo>> {
        self.queue_records(topic, partition, AppendRecords::Packed(records), meta).await
    }

    async fn append_records(
        &self,
        topic: &str,
        partition: PartitionId,
        records: AppendRecords,
        meta: BatchMeta,
    ) -> Result<AppendInfo> {
        self.queue_records(topic, partition, records, meta).await?.get().await
    }

    async fn queue_records(
        &self,
        topic: &str,
        partition: PartitionId,
        records: AppendRecords,
        meta: BatchMeta,
    ) -> Result<Answer<AppendInfo>> {
        let (shard, rules) = self.owner(topic, partition)?;
        rules.check(topic, records.sizes(), records.keyed())?;
        if records.is_empty() {
            return Err(EngineError::InvalidConfig("an append needs at least one record".into()));
        }
        let topic = topic.to_string();
        self.queue(shard, |reply| Request::Append { topic, partition, records, meta, reply }).await
    }

    /// Ends `producer`'s open transaction in one partition with a commit or abort marker
    /// (a control batch), as durable as the topic's fsync policy says. A marker for a
    /// producer with no open transaction there changes nothing a reader sees.
    pub async fn write_marker(
        &self,
        topic: &str,
        partition: PartitionId,
        producer: sluice_io::ProducerId,
        marker: sluice_io::txn::Marker,
    ) -> Result<AppendInfo> {
        let record = OwnedRecord::new(Some(marker.key().to_vec()), Vec::new(), Timestamp::now());
        self.append(topic, partition, vec![record], sluice_io::txn::Marker::meta(producer)).await
    }

    /// The transactions still open in a partition (no commit or abort marker yet): each
    /// producer id with the offset of its first batch. Reads the partition from the first
    /// offset held.
    pub async fn open_transactions(
        &self,
        topic: &str,
        partition: PartitionId,
    ) -> Result<std::collections::HashMap<sluice_io::ProducerId, Offset>> {
        let (mut at, end) = self.offsets(topic, partition).await?;
        let mut scan = sluice_io::txn::OpenTransactions::default();
        // Batches before the first transactional one open no transaction.
        at = self.first_transactional(topic, partition, at).await?.unwrap_or(end).max(at);
        while at < end {
            let batches = self.fetch(topic, partition, at, 4 << 20, Duration::ZERO).await?;
            if batches.is_empty() {
                break;
            }
            for batch in batches.batches() {
                scan.observe(&batch.map_err(|e| EngineError::log(topic, partition, e))?)
                    .map_err(|e| EngineError::log(topic, partition, e))?;
            }
            at = batches.next_offset();
        }
        Ok(scan.open().clone())
    }

    /// Reads batches from `offset`, waiting up to `max_wait` for data if there is none
    /// yet (a long poll).
    pub async fn fetch(
        &self,
        topic: &str,
        partition: PartitionId,
        offset: Offset,
        max_bytes: usize,
        max_wait: Duration,
    ) -> Result<OwnedBatches> {
        let (shard, _) = self.owner(topic, partition)?;
        let topic = topic.to_string();
        self.call(shard, |reply| Request::Fetch { topic, partition, offset, max_bytes, wait: max_wait, reply }).await
    }

    /// The first offset still held and the end readers see (Kafka's high watermark):
    /// under `fsync=always` what is fsynced, otherwise everything appended (written out of
    /// the process's buffers first, so a kill cannot take back what a reader is told of).
    /// An append that has resolved is below it.
    pub async fn offsets(&self, topic: &str, partition: PartitionId) -> Result<(Offset, Offset)> {
        let (shard, _) = self.owner(topic, partition)?;
        let topic = topic.to_string();
        self.call(shard, |reply| Request::Offsets { topic, partition, reply }).await
    }

    /// Where a scan of a partition for transactions from `from` must begin: the first
    /// transactional or control batch at or after it as far as the segments tell, or
    /// `None` when nothing from `from` on opens or ends a transaction.
    pub async fn first_transactional(
        &self,
        topic: &str,
        partition: PartitionId,
        from: Offset,
    ) -> Result<Option<Offset>> {
        let (shard, _) = self.owner(topic, partition)?;
        let topic = topic.to_string();
        self.call(shard, |reply| Request::FirstTransactional { topic, partition, from, reply }).await
    }

    /// Makes everything appended to a partition so far durable (written and
    /// fdatasync'd), whatever the topic's fsync policy, and returns the durable end. An
    /// exactly-once sink calls it before a transaction becomes part of a checkpoint, and
    /// after its commit markers, so that a crash cannot take back what a completed
    /// checkpoint relies on.
    pub async fn sync(&self, topic: &str, partition: PartitionId) -> Result<Offset> {
        let (shard, _) = self.owner(topic, partition)?;
        let topic = topic.to_string();
        self.call(shard, |reply| Request::Sync { topic, partition, reply }).await
    }

    /// Makes the records below `before` unreadable (Kafka's DeleteRecords): the
    /// partition's start offset moves there, stored before it takes effect, and the
    /// segments wholly below it are deleted. `before` may be any offset up to the end; at
    /// or below the current start it changes nothing. Returns the new start.
    pub async fn delete_records(&self, topic: &str, partition: PartitionId, before: Offset) -> Result<Offset> {
        let (shard, _) = self.owner(topic, partition)?;
        let topic = topic.to_string();
        self.call(shard, |reply| Request::DeleteRecords { topic, partition, before, reply }).await
    }

    /// The first offset whose record's event time is at or after `time`, if any.
    pub async fn offset_for_time(
        &self,
        topic: &str,
        partition: PartitionId,
        time: Timestamp,
    ) -> Result<Option<Offset>> {
        let (shard, _) = self.owner(topic, partition)?;
        let topic = topic.to_string();
        self.call(shard, |reply| Request::OffsetForTime { topic, partition, time, reply }).await
    }

    /// A new idempotent producer id, unique in this data directory (its allocation is
    /// stored before it is returned).
    pub async fn init_producer_id(&self) -> Result<sluice_io::ProducerId> {
        let _admin = self.inner.admin.acquire().await;
        let mut meta = self.inner.meta.write().unwrap_or_else(|e| e.into_inner());
        let mut alloc = crate::producer_state::ProducerIdAllocator::from_high_water(meta.next_producer_id)
            .ok_or_else(|| EngineError::InvalidConfig("the stored producer id high-water mark is negative".into()))?;
        let id = alloc.next();
        let mut next = meta.clone();
        next.next_producer_id = alloc.high_water();
        next.store(&self.inner.layout)?;
        *meta = next;
        Ok(id)
    }
}
