//! `sluice-bench kafka --client rdkafka`: the throughput run's records produced through the
//! listener by librdkafka linked into this process (the `rdkafka` crate), one producer
//! per `--producers` thread, acks=all, librdkafka's default batching. Built with the
//! bench's `kafka-client` feature.
//!
//! kcat reads each record from a line of its input and spends more CPU per record than
//! the listener does; a producer fed from memory measures the listener rather than the
//! client's input parsing. The producer's CPU is this process's, so the report's CPU per
//! record then covers the client, the listener and the engine together.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};

/// Acknowledged records and the first failure, shared by every producer's context.
#[derive(Debug, Default)]
struct Tally {
    ok: AtomicU64,
    first_error: Mutex<Option<String>>,
}

/// A producer's context: counts into the shared [`Tally`].
#[derive(Debug, Clone, Default)]
struct Acks(Arc<Tally>);

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.0.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                let mut first = self.0.first_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                first.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// Produces `records` records of `value(i)` to `topic` through the listener at `addr`
/// from `producers` threads at once (record `i` from thread `i % producers`), batches
/// compressed with `codec` (librdkafka's `compression.codec`: a codec this build of
/// librdkafka lacks fails here, as gzip and zstd do without the crate's `libz` and
/// `zstd` features); returns
/// records per second from the first send to the last acknowledgement, and the CPU this
/// process spent before the clock started (making the producers and the values).
pub fn produce(
    addr: &str,
    topic: &str,
    records: u64,
    producers: u64,
    codec: &str,
    value: impl Fn(u64) -> Vec<u8> + Sync,
) -> anyhow::Result<(f64, Duration)> {
    let cpu_at_start = super::kafka::cpu(libc::RUSAGE_SELF);
    let producers = producers.max(1);
    let acks = Acks::default();
    let made: Vec<BaseProducer<Acks>> = (0..producers)
        .map(|_| {
            ClientConfig::new()
                .set("bootstrap.servers", addr)
                .set("acks", "all")
                .set("queue.buffering.max.messages", "1000000")
                .set("compression.codec", codec)
                .create_with_context(acks.clone())
                .with_context(|| format!("creating a librdkafka producer (compression.codec {codec})"))
        })
        .collect::<anyhow::Result<_>>()?;
    // The values are made before the clock starts, as kcat's input files are.
    let values: Vec<Vec<Vec<u8>>> =
        (0..producers).map(|k| (k..records).step_by(producers as usize).map(&value).collect()).collect();
    let before_clock = super::kafka::cpu(libc::RUSAGE_SELF).saturating_sub(cpu_at_start);
    let started = Instant::now();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let mut threads = Vec::new();
        for (producer, values) in made.iter().zip(&values) {
            threads.push(scope.spawn(move || -> anyhow::Result<()> {
                for v in values {
                    let mut record = BaseRecord::<[u8], [u8], ()>::to(topic).payload(v.as_slice());
                    loop {
                        match producer.send(record) {
                            Ok(()) => break,
                            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                                record = back;
                                producer.poll(Duration::from_millis(1));
                            }
                            Err((e, _)) => bail!("sending a record: {e}"),
                        }
                    }
                    producer.poll(Duration::ZERO);
                }
                producer.flush(Duration::from_secs(120)).context("waiting for the acknowledgements")?;
                Ok(())
            }));
        }
        for t in threads {
            t.join().map_err(|_| anyhow::anyhow!("a producer thread panicked"))??;
        }
        Ok(())
    })?;
    let elapsed = started.elapsed();
    if let Some(e) = acks.0.first_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
        bail!("a record was not acknowledged: {e}");
    }
    let ok = acks.0.ok.load(Ordering::Relaxed);
    if ok != records {
        bail!("{ok} of {records} records acknowledged");
    }
    Ok((records as f64 / elapsed.as_secs_f64(), before_clock))
}
