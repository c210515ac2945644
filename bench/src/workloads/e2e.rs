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
//!
//! `--duration S` sends `R x S` records instead of `--records`; `--warmup W` sends `R x W`
//! more first, whose latencies are discarded and which the achieved rate leaves out;
//! `--seed` draws the payload bytes after the 8-byte send time. `--find-max-rate` runs
//! [`RunArgs::find_max_rate`](crate::harness::RunArgs::find_max_rate) with steps of
//! `--duration` (default 3 s) from `--rate` (default 10 000 records/s) and reports the
//! highest step within the bound.
//!
//! Beside the run, a [`WakeProbe`] thread sleeps 1 ms at a time and reports how late it
//! woke (`machine_wake_latency_us`; `--no-wake-probe` leaves it out): a stall of the
//! machine (a paused VM) shows there as it does in every record scheduled during it.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures_lite::future::block_on;
use serde::Serialize;
use sluice_engine::{Engine, EngineConfig, EngineError, EngineHandle, OwnedRecord, TopicConfig};
use sluice_io::{FsyncPolicy, Offset, PartitionId, Timestamp};

use crate::harness::{LatencyRecorder, LatencySummary, RateSearch, RunInfo, Table, WAKE_ROWS, WakeProbe, fill_seeded};
use crate::workloads::log::{Clients, LogArgs};

/// Seconds of each `--find-max-rate` step without `--duration`.
pub const DEFAULT_STEP_SECONDS: f64 = 3.0;
/// The rate `--find-max-rate` starts from without `--rate`, records per second.
pub const DEFAULT_START_RATE: u64 = 10_000;

/// Result of the end-to-end mode; the `--json` schema.
#[derive(Debug, Clone, Serialize)]
pub struct E2eReport {
    /// Always `"log-e2e"`.
    pub workload: &'static str,
    /// Engine shards.
    pub shards: usize,
    /// `--seed`, `--duration` and `--warmup` as used.
    #[serde(flatten)]
    pub run: RunInfo,
    /// Offered rate, records per second (with `--find-max-rate`, the reported step's).
    pub rate: u64,
    /// Records sent and measured (after the warm-up's).
    pub records: u64,
    /// Payload bytes per record (at least 8: the scheduled send time).
    pub record_bytes: usize,
    /// The least time between two wake-ups of the producer, microseconds.
    pub send_interval_us: u64,
    /// Where the producer and the consumer ran: `shards` or `threads`.
    pub clients: Clients,
    /// The topic's fsync policy.
    #[serde(serialize_with = "crate::harness::serialize_display")]
    pub fsync: FsyncPolicy,
    /// Records per second actually sent.
    pub achieved_rate: f64,
    /// From each record's scheduled send time to its consumption, microseconds.
    pub e2e_latency_us: LatencySummary,
    /// The same, as a curve for `sluice-bench report --plot`.
    pub e2e_latency_curve: crate::harness::Curve,
    /// How late a thread sleeping 1 ms at a time beside the run woke, microseconds: the
    /// machine's floor under the latencies above (a record waits on at least two
    /// wake-ups). None with `--no-wake-probe`.
    pub machine_wake_latency_us: Option<LatencySummary>,
    /// `--find-max-rate`: the bound, every step, and the highest rate within it.
    #[serde(flatten)]
    pub search: RateSearch,
}

/// Runs the end-to-end mode of the log workload: at `--rate`, or `--find-max-rate`.
///
/// # Errors
///
/// Bad options, an engine that failed, or records that did not all arrive.
pub fn run(args: &LogArgs) -> anyhow::Result<E2eReport> {
    let _metrics = args.run.serve_metrics()?;
    let run = &args.run;
    if run.find_max_rate {
        let seconds = run.duration.unwrap_or(DEFAULT_STEP_SECONDS);
        let mut steps: Vec<E2eReport> = Vec::new();
        let title = "log end-to-end latency per offered rate";
        let search = run.find_max_rate(DEFAULT_START_RATE, title, "records/s", |rate| {
            let step = Some(steps.len());
            let (report, latency) = run_at(args, rate, ((rate as f64 * seconds) as u64).max(1), step)?;
            let achieved = report.achieved_rate;
            steps.push(report);
            Ok((achieved, latency))
        })?;
        // The report of the highest rate within the bound, else of the last step.
        let mut report = steps.swap_remove(search.kept_step(&steps, |s| s.rate));
        report.run.duration = Some(seconds);
        report.search = search;
        return Ok(report);
    }
    let rate = run.rate.context("the end-to-end mode needs --rate or --find-max-rate")?;
    let records = match run.duration {
        Some(seconds) => ((rate as f64 * seconds) as u64).max(1),
        None => args.records,
    };
    let (mut report, latency) = run_at(args, rate, records, None)?;
    report.e2e_latency_curve = run.write_latency(
        &latency,
        "log end-to-end latency",
        &format!("log e2e, {rate} records/s, fsync {}", args.fsync),
    )?;
    Ok(report)
}

/// One end-to-end run at `rate` records per second: `records` measured records after the
/// warm-up's. A `--find-max-rate` step `n` keeps its data in `step-n` of the work directory
/// (each step's topic is new).
fn run_at(
    args: &LogArgs,
    rate: u64,
    records: u64,
    step: Option<usize>,
) -> anyhow::Result<(E2eReport, LatencyRecorder)> {
    anyhow::ensure!(rate > 0, "--rate must be positive");
    let work_dir = args.dirs.work_dir("log-e2e")?;
    let data = match step {
        Some(n) => work_dir.path().join(format!("step-{n}")),
        None => work_dir.path().to_path_buf(),
    };
    let warmup = args.run.warmup();
    let warmup_records = (rate as f64 * args.run.warmup) as u64;
    let measured = records;
    let records = warmup_records + measured;
    let record_bytes = args.record_bytes.max(8);
    let mut payload = vec![0u8; record_bytes];
    fill_seeded(args.run.seed, &mut payload);
    let send_interval = Duration::from_micros(args.send_interval_us);
    let engine = block_on(Engine::open(EngineConfig { shards: Some(args.shards()), ..EngineConfig::new(&data) }))
        .context("starting the engine")?;
    let handle = engine.handle();
    let metrics = handle.metric_source();
    crate::harness::metrics::register(&metrics);
    let topic =
        TopicConfig { fsync: args.fsync, segment_bytes: args.segment_bytes, linger_ms: 0, ..TopicConfig::default() };
    block_on(handle.create_topic("e2e", 1, Some(topic))).context("creating the topic")?;

    let probe = if args.no_wake_probe { None } else { Some(WakeProbe::start().context("starting the wake-up probe")?) };
    let epoch = Instant::now() + Duration::from_millis(50);
    let (sent_in, latency) = match args.clients {
        Clients::Shards => {
            // The producer runs on the shard that owns the partition, the consumer on
            // another one (the same one when there is only one), each a task beside the
            // shard's own work on its pinned thread.
            let owner = handle.describe_topic("e2e").context("describing the topic")?.shards[0] as usize;
            let consumer_shard = (owner + 1) % engine.shards();
            let consumer = {
                let handle = handle.clone();
                std::thread::spawn(move || {
                    let h = handle.clone();
                    block_on(handle.run_on(consumer_shard, move || consume(h, epoch, records, rate, warmup)))
                })
            };
            let producer = {
                let h = handle.clone();
                block_on(handle.run_on(owner, move || produce(h, epoch, rate, records, payload, send_interval)))
            };
            let latency = consumer.join().map_err(|_| anyhow::anyhow!("consumer thread panicked"))?;
            (producer??, latency??)
        }
        Clients::Threads => {
            // The producer on an executor of its own, the consumer on a plain thread.
            let consumer = {
                let handle = handle.clone();
                std::thread::spawn(move || block_on(consume(handle, epoch, records, rate, warmup)))
            };
            let handle = handle.clone();
            let sent_in = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
                .io_memory(256 << 10)
                .spawn(move || produce(handle, epoch, rate, records, payload, send_interval))
                .map_err(|e| anyhow::anyhow!("starting the producer: {e}"))?
                .join()
                .map_err(|e| anyhow::anyhow!("producer thread: {e:?}"))??;
            let latency = consumer.join().map_err(|_| anyhow::anyhow!("consumer thread panicked"))??;
            (sent_in, latency)
        }
    };
    let machine = probe.map(WakeProbe::finish);
    block_on(engine.shutdown())?;
    let curve = latency.curve(&format!("log e2e, {rate} records/s, fsync {}", args.fsync));
    let measured_in = sent_in.saturating_sub(warmup).as_secs_f64().max(1e-9);
    let report = E2eReport {
        workload: "log-e2e",
        shards: args.shards(),
        run: args.run.info(args.run.duration.or(Some(measured as f64 / rate as f64))),
        rate,
        records: measured,
        record_bytes,
        send_interval_us: args.send_interval_us,
        clients: args.clients,
        fsync: args.fsync,
        achieved_rate: measured as f64 / measured_in,
        e2e_latency_us: latency.summary(),
        e2e_latency_curve: curve,
        machine_wake_latency_us: machine,
        search: RateSearch::default(),
    };
    Ok((report, latency))
}

/// Long-polls the partition from offset 0 until `records` have arrived, recording the
/// latency of each one scheduled after the warm-up from its scheduled send time (carried in
/// its first 8 bytes).
async fn consume(
    handle: EngineHandle,
    epoch: Instant,
    records: u64,
    rate: u64,
    warmup: Duration,
) -> anyhow::Result<LatencyRecorder> {
    let mut latency = LatencyRecorder::with_intervals(epoch, Duration::from_secs(1));
    let progress = crate::harness::Progress::start("log e2e");
    let mut at = Offset(0);
    let mut received = 0;
    let deadline = Instant::now() + Duration::from_secs(60) + Duration::from_secs_f64(records as f64 / rate as f64);
    while received < records {
        anyhow::ensure!(Instant::now() < deadline, "only {received} of {records} records arrived");
        let batches = handle.fetch("e2e", PartitionId(0), at, 1 << 20, Duration::from_millis(100)).await?;
        let now = Instant::now();
        for r in batches.records() {
            let r = r?;
            let scheduled = u64::from_le_bytes(r.value_bytes()[..8].try_into().expect("8 bytes"));
            let scheduled = Duration::from_nanos(scheduled);
            // The warm-up's records are received but not measured.
            if scheduled >= warmup {
                latency.record_at(now, now.saturating_duration_since(epoch + scheduled));
            }
            received += 1;
        }
        at = batches.next_offset();
        if progress.is_drawn() {
            progress.update(received, Some(latency.summary().p99));
        }
    }
    progress.finish();
    Ok(latency)
}

/// Sends each record at its scheduled time without waiting for earlier sends to be
/// acknowledged (open loop); resolves to the time from `epoch` to the last acknowledgement.
async fn produce(
    handle: EngineHandle,
    epoch: Instant,
    rate: u64,
    records: u64,
    payload: Vec<u8>,
    send_interval: Duration,
) -> Result<Duration, EngineError> {
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let mut tasks = Vec::new();
    let mut i = 0;
    let mut woke: Option<Instant> = None;
    while i < records {
        // Wake when the next record is due, but no sooner than one send interval after the
        // previous wake-up.
        let due = epoch + interval.mul_f64(i as f64);
        let wake = woke.map_or(due, |w| due.max(w + send_interval));
        let now = Instant::now();
        if wake > now {
            glommio::timer::sleep(wake - now).await;
        }
        woke = Some(wake);
        // Every record due by now goes out in one request, as a producer with no linger
        // batches what is ready; each keeps its own scheduled time.
        let now = Instant::now();
        let mut batch = Vec::new();
        while i < records {
            let scheduled = interval.mul_f64(i as f64);
            if epoch + scheduled > now && !batch.is_empty() {
                break;
            }
            let mut value = payload.clone();
            value[..8].copy_from_slice(&(scheduled.as_nanos() as u64).to_le_bytes());
            batch.push(OwnedRecord::new(None, value, Timestamp::now()));
            i += 1;
        }
        let handle = handle.clone();
        tasks.push(glommio::spawn_local(async move {
            handle.append("e2e", PartitionId(0), batch, sluice_io::BatchMeta::default()).await.map(|_| ())
        }));
    }
    for t in tasks {
        t.await?;
    }
    Ok(epoch.elapsed())
}

impl E2eReport {
    /// The human-readable form of the report.
    pub fn table(&self) -> Table {
        let mut table = Table::titled(format!(
            "log end to end: {} shards, {} records/s offered, {} records x {} B, fsync {}, sent every {} us, clients on {}, {}",
            self.shards,
            self.rate,
            self.records,
            self.record_bytes,
            self.fsync,
            self.send_interval_us,
            match self.clients {
                Clients::Shards => "the shards",
                Clients::Threads => "threads",
            },
            self.run.describe()
        ));
        table.row("achieved rate", format!("{:.0}", self.achieved_rate), "records/s");
        table.latency_rows("e2e latency", &self.e2e_latency_us);
        if let Some(m) = &self.machine_wake_latency_us {
            table.latency_rows(WAKE_ROWS, m);
        }
        self.search.rows(&mut table, "records/s");
        table
    }
}
