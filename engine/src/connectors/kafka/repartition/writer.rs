//! [`RepartitionWriter`]: the operator that sends a stream's records, and its watermarks,
//! to the repartition topic.

use std::{sync::Arc, time::Duration};

use rdkafka::{
    ClientContext,
    message::{DeliveryResult, Header, OwnedHeaders},
    producer::{BaseProducer, BaseRecord, Producer, ProducerContext},
};
use sluice_io::EventTime;

use super::{KafkaConnectorError, Shared, WATERMARK_HEADER, client_config};
use crate::dataflow::{Barrier, Data, Event, Operator};
use crate::topic::partitioner::partition_for_key;

/// Failed deliveries go to the [`Repartition`](super::Repartition)'s errors.
struct Deliveries(Arc<Shared>);

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.0.report(format!("repartition writer: delivering a record: {e}"));
        }
    }
}

/// One shard's writer to the repartition topic (made by
/// [`Repartition::key_by_through`](super::Repartition::key_by_through)): an idempotent
/// producer sending each record to the partition of its key, and a watermark record to
/// every partition whenever the watermark advances.
pub struct RepartitionWriter<T, KS> {
    shared: Arc<Shared>,
    producer: BaseProducer<Deliveries>,
    key: KS,
    /// This writer's id, as the watermark header carries it.
    id: String,
    /// The last watermark written to every partition.
    sent: EventTime,
    key_buf: Vec<u8>,
    value_buf: Vec<u8>,
    _in: std::marker::PhantomData<fn(T)>,
}

impl<T, KS> std::fmt::Debug for RepartitionWriter<T, KS> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepartitionWriter").field("id", &self.id).field("sent", &self.sent).finish_non_exhaustive()
    }
}

impl<T, KS> RepartitionWriter<T, KS> {
    pub(super) fn new(shared: Arc<Shared>, shard: usize, shards: usize, key: KS) -> Result<Self, KafkaConnectorError> {
        let config = &shared.config;
        let id = u64::from(config.instance) * shards as u64 + shard as u64;
        let mut client = client_config(&config.bootstrap_servers, &[]);
        client.set("enable.idempotence", "true").set("linger.ms", "5");
        for (k, v) in &config.properties {
            client.set(k, v);
        }
        client.set("client.id", format!("sluice-repartition-{id}"));
        let producer = client
            .create_with_context(Deliveries(shared.clone()))
            .map_err(|e| KafkaConnectorError::client("creating the repartition producer", e))?;
        Ok(RepartitionWriter {
            shared,
            producer,
            key,
            id: id.to_string(),
            sent: EventTime::MIN,
            key_buf: Vec::new(),
            value_buf: Vec::new(),
            _in: std::marker::PhantomData,
        })
    }

    fn send(&self, record: BaseRecord<'_, [u8], [u8]>) {
        if let Err(e) = super::super::sink::send_with_backpressure(&self.producer, record) {
            self.shared.report(format!("repartition writer {}: sending a record: {e}", self.id));
        }
    }

    /// Appends a watermark record at `watermark` to every partition.
    fn send_watermark(&mut self, watermark: EventTime) {
        if watermark <= self.sent {
            return;
        }
        self.sent = watermark;
        let value = watermark.0.to_le_bytes();
        let topic = self.shared.config.topic.clone();
        for p in 0..self.shared.partitions {
            let headers = OwnedHeaders::new().insert(Header { key: WATERMARK_HEADER, value: Some(self.id.as_bytes()) });
            let record = BaseRecord::to(&topic).partition(p as i32).payload(&value[..]).headers(headers);
            self.send(record);
        }
        self.producer.poll(Duration::ZERO);
    }

    /// Waits until everything sent is acknowledged (up to the request timeout).
    fn flush(&self) {
        if let Err(e) = self.producer.flush(self.shared.config.request_timeout) {
            self.shared.report(format!("repartition writer {}: flushing: {e}", self.id));
        }
    }
}

impl<T: Data, K: Data, KS: Fn(&T) -> K> Operator<T> for RepartitionWriter<T, KS> {
    fn on_batch(&mut self, batch: &mut Vec<Event<T>>) {
        let partitions = self.shared.partitions;
        let (mut key_buf, mut value_buf) = (std::mem::take(&mut self.key_buf), std::mem::take(&mut self.value_buf));
        for e in batch.iter() {
            key_buf.clear();
            (self.key)(&e.value).encode(&mut key_buf);
            value_buf.clear();
            value_buf.extend_from_slice(&e.time.0.to_le_bytes());
            e.value.encode(&mut value_buf);
            let p = partition_for_key(&key_buf, partitions).0;
            let record =
                BaseRecord::to(&self.shared.config.topic).partition(p as i32).key(&key_buf[..]).payload(&value_buf[..]);
            self.send(record);
        }
        (self.key_buf, self.value_buf) = (key_buf, value_buf);
        self.producer.poll(Duration::ZERO);
    }

    fn on_watermark(&mut self, watermark: EventTime) {
        self.send_watermark(watermark);
    }

    fn on_idle(&mut self, idle: bool) {
        let _ = idle;
    }

    fn on_end(&mut self) {
        self.send_watermark(EventTime::MAX);
        self.flush();
    }

    fn on_barrier(&mut self, barrier: Barrier) {
        let _ = barrier;
        self.flush();
    }
}
