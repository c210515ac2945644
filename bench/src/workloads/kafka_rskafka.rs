//! `sluice-bench kafka --client rskafka`: the throughput run's records produced through the
//! listener by rskafka (InfluxData's pure-Rust Kafka client) in this process, on one
//! current-thread tokio runtime: one client per `--producers`, each owning a share of the
//! partitions (partition `p` goes to client `p % producers`); each partition gets
//! batches of `--batch-records` records in turn, with up to four produce requests in
//! flight per partition (acks=all, rskafka's only setting). Built with the bench's
//! `rskafka-client` feature.
//!
//! The records are made before the clock starts, as kcat's input files are. rskafka
//! hands the listener a batch per call instead of queueing each record as librdkafka
//! does, so it spends less CPU per record than kcat (measured: 0.53-0.62 us against
//! 1.2-1.55 us), and on two cores the listener then has more of the machine. The client's
//! CPU is this process's: the report's CPU per record covers client, listener and engine.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use anyhow::Context;
use rskafka::client::ClientBuilder;
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::record::Record;

/// Requests in flight per partition.
const IN_FLIGHT: usize = 4;

/// Produces `records` records of `value(i)` to `topic`'s `partitions` partitions through
/// the listener at `addr` (record `i` to partition `i % partitions`), in batches of
/// `batch` records compressed with `codec`; returns records per second from the first send
/// to the last acknowledgement, and the CPU this process spent before the clock started.
#[allow(clippy::too_many_arguments)]
pub fn produce(
    addr: &str,
    topic: &str,
    records: u64,
    partitions: u32,
    producers: u64,
    batch: usize,
    codec: super::kafka::Codec,
    value: impl Fn(u64) -> Vec<u8>,
) -> anyhow::Result<(f64, std::time::Duration)> {
    use super::kafka::Codec;
    let compression = match codec {
        Codec::None => Compression::NoCompression,
        Codec::Gzip => Compression::Gzip,
        Codec::Snappy => Compression::Snappy,
        Codec::Lz4 => Compression::Lz4,
        Codec::Zstd => Compression::Zstd,
    };
    let cpu_at_start = super::kafka::cpu(libc::RUSAGE_SELF);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("a tokio runtime")?;
    let batch = batch.max(1);
    let now = chrono::Utc::now();
    // Each partition's records, in batches, made before the clock starts.
    let record = |i: u64| Record { key: None, value: Some(value(i)), headers: BTreeMap::new(), timestamp: now };
    let batches: Vec<Vec<Vec<Record>>> = (0..u64::from(partitions))
        .map(|p| {
            let mine: Vec<u64> = (p..records).step_by(partitions as usize).collect();
            mine.chunks(batch).map(|c| c.iter().map(|&i| record(i)).collect()).collect()
        })
        .collect();
    runtime.block_on(async move {
        let mut made = Vec::new();
        for _ in 0..producers.max(1) {
            made.push(ClientBuilder::new(vec![addr.to_string()]).build().await.context("connecting rskafka")?);
        }
        let mut parts = Vec::new();
        for p in 0..partitions {
            let client = &made[p as usize % made.len()];
            let pc = client
                .partition_client(topic, p as i32, UnknownTopicHandling::Retry)
                .await
                .with_context(|| format!("rskafka's client of partition {p}"))?;
            parts.push(Rc::new(pc));
        }
        let before_clock = super::kafka::cpu(libc::RUSAGE_SELF).saturating_sub(cpu_at_start);
        let started = Instant::now();
        let local = tokio::task::LocalSet::new();
        let acked = local
            .run_until(async {
                let mut tasks = Vec::new();
                for (pc, batches) in parts.iter().zip(batches) {
                    let pc = pc.clone();
                    tasks.push(tokio::task::spawn_local(async move {
                        let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
                        let mut sends = Vec::new();
                        for b in batches {
                            let permit = permits.clone().acquire_owned().await.context("the in-flight limit")?;
                            let pc = pc.clone();
                            sends.push(tokio::task::spawn_local(async move {
                                let offsets = pc.produce(b, compression).await;
                                drop(permit);
                                offsets.map(|o| o.len() as u64)
                            }));
                        }
                        let mut n = 0;
                        for s in sends {
                            n += s.await.context("a produce task")?.context("a produce request")?;
                        }
                        Ok::<u64, anyhow::Error>(n)
                    }));
                }
                let mut n = 0;
                for t in tasks {
                    n += t.await.context("a partition's task")??;
                }
                Ok::<u64, anyhow::Error>(n)
            })
            .await?;
        let elapsed = started.elapsed();
        anyhow::ensure!(acked == records, "{acked} of {records} records acknowledged");
        Ok((records as f64 / elapsed.as_secs_f64(), before_clock))
    })
}
