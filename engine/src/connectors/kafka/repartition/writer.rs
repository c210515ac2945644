//! [`RepartitionWriter`]: the operator that turns a stream's records, and its watermarks,
//! into the repartition topic's records, which a [`KafkaSink`](super::super::KafkaSink)
//! then writes (exactly once: in the Kafka transaction of their epoch, committed after the
//! checkpoint completes).

use std::sync::Arc;

use sluice_io::EventTime;

use super::{Shared, WATERMARK_HEADER};
use crate::connectors::kafka::OutRecord;
use crate::dataflow::{Barrier, Data, Event, Operator, Port};
use crate::record::OwnedHeader;
use crate::topic::partitioner::partition_for_key;

/// One shard's writer to the repartition topic (made by
/// [`Repartition::key_by_through`](super::Repartition::key_by_through)): each record
/// becomes an [`OutRecord`] for the partition of its key, and whenever the watermark
/// advances, a watermark record for every partition follows the records before it.
pub struct RepartitionWriter<T, KS> {
    shared: Arc<Shared>,
    key: KS,
    /// This writer's id, as the watermark header carries it.
    id: String,
    /// The last watermark written to every partition.
    sent: EventTime,
    out: Port<OutRecord>,
    buf: Vec<Event<OutRecord>>,
    key_buf: Vec<u8>,
    _in: std::marker::PhantomData<fn(T)>,
}

impl<T, KS> std::fmt::Debug for RepartitionWriter<T, KS> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepartitionWriter").field("id", &self.id).field("sent", &self.sent).finish_non_exhaustive()
    }
}

impl<T, KS> RepartitionWriter<T, KS> {
    pub(super) fn new(shared: Arc<Shared>, id: u64, key: KS, out: Port<OutRecord>) -> Self {
        RepartitionWriter {
            shared,
            key,
            id: id.to_string(),
            sent: EventTime::MIN,
            out,
            buf: Vec::new(),
            key_buf: Vec::new(),
            _in: std::marker::PhantomData,
        }
    }

    /// Emits a watermark record at `watermark` for every partition, then the watermark.
    fn send_watermark(&mut self, watermark: EventTime) {
        if watermark <= self.sent {
            return;
        }
        self.sent = watermark;
        let value = watermark.0.to_le_bytes().to_vec();
        for p in 0..self.shared.partitions {
            let mark = OutRecord::new(None, value.clone())
                .with_header(WATERMARK_HEADER, Some(self.id.as_bytes().to_vec()))
                .to_partition(p as i32);
            self.buf.push(Event { time: watermark, value: mark });
        }
        let mut out = self.out.borrow_mut();
        out.push(&mut self.buf);
        out.watermark_to(watermark);
    }
}

/// The record of `value` at `time` for the partition of `key` (encoded into `key_buf`).
fn data_record<T: Data>(key_buf: &[u8], value: &T, time: EventTime, partitions: u32) -> OutRecord {
    let mut bytes = Vec::with_capacity(16);
    bytes.extend_from_slice(&time.0.to_le_bytes());
    value.encode(&mut bytes);
    let p = partition_for_key(key_buf, partitions).0;
    OutRecord {
        key: Some(key_buf.to_vec()),
        value: Some(bytes),
        timestamp: None,
        headers: Vec::<OwnedHeader>::new(),
        partition: Some(p as i32),
    }
}

impl<T: Data, K: Data, KS: Fn(&T) -> K> Operator<T> for RepartitionWriter<T, KS> {
    fn on_batch(&mut self, batch: &mut Vec<Event<T>>) {
        let partitions = self.shared.partitions;
        for e in batch.drain(..) {
            self.key_buf.clear();
            (self.key)(&e.value).encode(&mut self.key_buf);
            let record = data_record(&self.key_buf, &e.value, e.time, partitions);
            self.buf.push(Event { time: e.time, value: record });
        }
        self.out.borrow_mut().push(&mut self.buf);
    }

    fn on_watermark(&mut self, watermark: EventTime) {
        self.send_watermark(watermark);
    }

    fn on_idle(&mut self, idle: bool) {
        self.out.borrow_mut().set_idle(idle);
    }

    fn on_end(&mut self) {
        self.send_watermark(EventTime::MAX);
        self.out.borrow_mut().end();
    }

    fn on_barrier(&mut self, barrier: Barrier) {
        self.out.borrow_mut().barrier(barrier);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_record_carries_its_time_and_goes_to_its_keys_partition() {
        let mut key = Vec::new();
        7u64.encode(&mut key);
        let r = data_record(&key, &(7u64, 9u64), EventTime::from_millis(42), 6);
        assert_eq!(r.partition, Some(partition_for_key(&key, 6).0 as i32));
        let value = r.value.expect("a value");
        let (time, mut rest) = value.split_first_chunk::<8>().expect("a time");
        assert_eq!(i64::from_le_bytes(*time), 42);
        assert_eq!(<(u64, u64)>::decode(&mut rest).unwrap(), (7, 9));
        assert_eq!(r.key, Some(key));
    }
}
