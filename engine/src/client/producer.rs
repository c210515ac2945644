//! An idempotent producer: a producer id plus per-partition sequence numbers, so that a
//! batch sent again after a lost acknowledgement (a timeout, a dropped connection) is
//! written once and answered with its original offsets.

use std::collections::HashMap;

use sluice_io::{AppendInfo, BatchMeta, PartitionId, ProducerId};

use crate::engine::EngineHandle;
use crate::error::Result;
use crate::producer_state::increment_sequence;
use crate::record::OwnedRecord;

/// Sends batches to partitions with sequence numbers.
#[derive(Debug)]
pub struct IdempotentProducer {
    engine: EngineHandle,
    id: ProducerId,
    epoch: i16,
    /// Per (topic, partition): the base sequence of the last batch sent, and the next.
    sequences: HashMap<(String, PartitionId), (i32, i32)>,
}

impl IdempotentProducer {
    /// A producer with a fresh id.
    pub async fn new(engine: EngineHandle) -> Result<IdempotentProducer> {
        let id = engine.init_producer_id().await?;
        Ok(IdempotentProducer { engine, id, epoch: 0, sequences: HashMap::new() })
    }

    /// The producer's id.
    #[must_use]
    pub fn id(&self) -> ProducerId {
        self.id
    }

    /// The sequence number the next batch to `topic`/`partition` will carry.
    #[must_use]
    pub fn next_sequence(&self, topic: &str, partition: PartitionId) -> i32 {
        self.sequences.get(&(topic.to_string(), partition)).map_or(0, |s| s.1)
    }

    /// Sends `records` as one batch with the next sequence number. If this returns an
    /// error that may have hidden a success (the engine shut down mid-request, say), call
    /// [`retry`](Self::retry) with the same records: the batch is written at most once.
    pub async fn send(&mut self, topic: &str, partition: PartitionId, records: Vec<OwnedRecord>) -> Result<AppendInfo> {
        let sequence = self.next_sequence(topic, partition);
        let count = records.len() as i32;
        // The sequence is spent even if the send fails: a retry reuses it.
        self.sequences.insert((topic.to_string(), partition), (sequence, increment_sequence(sequence, count)));
        self.send_at(topic, partition, records, sequence).await
    }

    /// Sends `records` again as the batch that last went to `topic`/`partition`: if it
    /// was written, the answer is its original offsets and nothing is written again.
    pub async fn retry(
        &mut self,
        topic: &str,
        partition: PartitionId,
        records: Vec<OwnedRecord>,
    ) -> Result<AppendInfo> {
        let sequence = self.sequences.get(&(topic.to_string(), partition)).map_or(0, |s| s.0);
        self.send_at(topic, partition, records, sequence).await
    }

    async fn send_at(
        &self,
        topic: &str,
        partition: PartitionId,
        records: Vec<OwnedRecord>,
        sequence: i32,
    ) -> Result<AppendInfo> {
        let meta = BatchMeta {
            producer_id: self.id,
            producer_epoch: self.epoch,
            base_sequence: sequence,
            ..BatchMeta::default()
        };
        self.engine.append(topic, partition, records, meta).await
    }
}
