//! `sluice-bench log --rate R`: end-to-end latency through the engine, like Kafka's
//! EndToEndLatency tool but open loop. A producer sends records at a fixed offered rate
//! into a one-partition topic; a consumer on another thread long-polls it; each record's
//! latency runs from its *scheduled* send time to the moment the consumer holds it, so a
//! stall is charged to every record it delayed (coordinated omission corrected).
//!
//! The producer wakes at most once per `--send-interval-us` (100 us by default) and sends
//! every record due by then as one append, as a producer batches what is ready while its
//! last request is on its way. Waking for each record instead (every 7 us at 135 000
//! records/s) made the producer the benchmark's bottleneck: a wake-up of a glommio
//! executor costs more than that on these VMs (timeouts armed and cancelled through
//! io_uring, a membarrier IPI to the other core before each park), so the producer fell
//! behind, never blocked and kept a core busy, and on a 2-core machine the shard and the
//! consumer waited behind it for whole scheduler slices (1.5-3.5 ms, seen with
//! `perf sched`). The wait in the producer is part of each record's latency, like any
//! other delay.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_lite::future::block_on;
use serde::Serialize;
use sluice_engine::{Engine, EngineConfig, OwnedRecord, TopicConfig};
use sluice_io::{FsyncPolicy, Offset, Timestamp};

use crate::harness::{LatencyRecorder, LatencySummary, Table};
use crate::workloads::log::LogArgs;

/// Result of the end-to-end mode; the `--json` schema.
#[derive(Debug, Clone, Serialize)]
pub struct E2eReport {
    /// Always `"log-e2e"`.
    pub workload: &'static str,
    /// Engine shards.
    pub shards: usize,
    /// Offered rate, records per second.
    pub rate: u64,
    /// Records sent.
    pub records: u64,
    /// Payload bytes per record (at least 8: the scheduled send time).
    pub record_bytes: usize,
    /// The least time between two wake-ups of the producer, microseconds.
    pub send_interval_us: u64,
    /// The topic's fsync policy.
    #[serde(serialize_with = "crate::harness::serialize_display")]
    pub fsync: FsyncPolicy,
    /// Records per second actually sent.
    pub achieved_rate: f64,
    /// From each record's scheduled send time to its consumption, microseconds.
    pub e2e_latency_us: LatencySummary,
    /// The same, as a curve for `sluice-bench report --plot`.
    pub e2e_latency_curve: crate::harness::Curve,
}

/// Runs the end-to-end mode of the log workload at `rate` records per second.
pub fn run(args: &LogArgs, rate: u64) -> anyhow::Result<E2eReport> {
    anyhow::ensure!(rate > 0, "--rate must be positive");
    let work_dir = args.common.work_dir("log-e2e")?;
    let records = args.records;
    let record_bytes = args.record_bytes.max(8);
    let send_interval = Duration::from_micros(args.send_interval_us);
    let engine =
        block_on(Engine::open(EngineConfig { shards: Some(args.shards), ..EngineConfig::new(work_dir.path()) }))
            .context("starting the engine")?;
    let handle = engine.handle();
    let topic = TopicConfig {
        fsync: args.fsync.to_string(),
        segment_bytes: args.segment_bytes,
        linger_ms: 0,
        ..TopicConfig::default()
    };
    block_on(handle.create_topic("e2e", 1, Some(topic))).context("creating the topic")?;

    let epoch = Arc::new(Instant::now() + Duration::from_millis(50));
    let consumer = {
        let (handle, epoch) = (handle.clone(), epoch.clone());
        std::thread::spawn(move || -> anyhow::Result<LatencyRecorder> {
            let mut latency = LatencyRecorder::with_intervals(*epoch, Duration::from_secs(1));
            let progress = crate::harness::Progress::start("log e2e");
            let mut at = Offset(0);
            let mut received = 0;
            let deadline =
                Instant::now() + Duration::from_secs(60) + Duration::from_secs_f64(records as f64 / rate as f64);
            while received < records {
                anyhow::ensure!(Instant::now() < deadline, "only {received} of {records} records arrived");
                let batches = block_on(handle.fetch("e2e", 0, at, 1 << 20, Duration::from_millis(100)))?;
                let now = Instant::now();
                for r in batches.records() {
                    let r = r?;
                    let scheduled = u64::from_le_bytes(r.value()[..8].try_into().expect("8 bytes"));
                    latency.record_at(now, now.saturating_duration_since(*epoch + Duration::from_nanos(scheduled)));
                    received += 1;
                }
                at = batches.next_offset();
                if progress.is_drawn() {
                    progress.update(received, Some(latency.summary().p99));
                }
            }
            progress.finish();
            Ok(latency)
        })
    };

    // The producer: an executor that sends each record at its scheduled time without
    // waiting for earlier sends to be acknowledged (open loop).
    let sent_in = {
        let (handle, epoch) = (handle.clone(), epoch.clone());
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .io_memory(256 << 10)
            .spawn(move || async move {
                let interval = Duration::from_secs_f64(1.0 / rate as f64);
                let mut tasks = Vec::new();
                let mut i = 0;
                let mut woke: Option<Instant> = None;
                while i < records {
                    // Wake when the next record is due, but no sooner than one send
                    // interval after the previous wake-up.
                    let due = *epoch + interval.mul_f64(i as f64);
                    let wake = woke.map_or(due, |w| due.max(w + send_interval));
                    let now = Instant::now();
                    if wake > now {
                        glommio::timer::sleep(wake - now).await;
                    }
                    woke = Some(wake);
                    // Every record due by now goes out in one request, as a producer with
                    // no linger batches what is ready; each keeps its own scheduled time.
                    let now = Instant::now();
                    let mut batch = Vec::new();
                    while i < records {
                        let scheduled = interval.mul_f64(i as f64);
                        if *epoch + scheduled > now && !batch.is_empty() {
                            break;
                        }
                        let mut value = vec![0u8; record_bytes];
                        value[..8].copy_from_slice(&(scheduled.as_nanos() as u64).to_le_bytes());
                        batch.push(OwnedRecord { key: None, value, event_time: Timestamp::now() });
                        i += 1;
                    }
                    let handle = handle.clone();
                    tasks.push(glommio::spawn_local(async move {
                        handle.append("e2e", 0, batch, sluice_io::BatchMeta::default()).await.map(|_| ())
                    }));
                }
                for t in tasks {
                    t.await?;
                }
                Ok::<Duration, sluice_engine::EngineError>(epoch.elapsed())
            })
            .map_err(|e| anyhow::anyhow!("starting the producer: {e}"))?
            .join()
            .map_err(|e| anyhow::anyhow!("producer thread: {e:?}"))??
    };
    let latency = consumer.join().map_err(|_| anyhow::anyhow!("consumer thread panicked"))??;
    block_on(engine.shutdown())?;
    let curve = args.common.write_latency(
        &latency,
        "log end-to-end latency",
        &format!("log e2e, {rate} records/s, fsync {}", args.fsync),
    )?;
    Ok(E2eReport {
        workload: "log-e2e",
        shards: args.shards,
        rate,
        records,
        record_bytes,
        send_interval_us: args.send_interval_us,
        fsync: args.fsync,
        achieved_rate: records as f64 / sent_in.as_secs_f64(),
        e2e_latency_us: latency.summary(),
        e2e_latency_curve: curve,
    })
}

impl E2eReport {
    /// The human-readable form of the report.
    pub fn table(&self) -> Table {
        let mut table = Table::titled(format!(
            "log end to end: {} shards, {} records/s offered, {} records x {} B, fsync {}, sent every {} us",
            self.shards, self.rate, self.records, self.record_bytes, self.fsync, self.send_interval_us
        ));
        table.row("achieved rate", format!("{:.0}", self.achieved_rate), "records/s");
        table.latency_rows("e2e latency", &self.e2e_latency_us);
        table
    }
}
