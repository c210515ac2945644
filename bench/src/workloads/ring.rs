//! `sluice-bench ring`: records per second from shard 0 to shard 1 through the engine's
//! ring mesh ([`sluice_engine::ring`]), set against a plain chunked `rtrb` ring moving the
//! same records between the same two CPUs.
//!
//! The sluice side runs on two pinned glommio executors ([`run_on_shards`]): shard 0 fills
//! a `Vec` per batch and sends it as one message, shard 1 reads every byte of every
//! record and gives the vector back for reuse (unless `--no-recycle`). The baseline runs on two plain threads pinned to the same CPUs: the producer
//! writes records into the ring's own slots (`write_chunk_uninit`), the consumer reads
//! them in place (`read_chunk`), a chunk being at most one batch, and both busy-wait. Its
//! ring holds as many records as the sluice ring's batches do. Both transfers check the
//! count and a checksum of what arrived.
//!
//! That is the closed loop (`--max`, the default): `--records` per transfer, or
//! `--duration S` (each producer stops after S seconds); `--warmup W` runs one discarded
//! round of W seconds first. With `--rate R` the sluice side is an open loop instead: shard
//! 0 sends batch `k` at `k x batch / R` seconds, shard 1 records each batch's latency from
//! that schedule to its arrival (`--hlog`, `--plot`), the first `--warmup` seconds'
//! batches are not measured, and the baseline is not run; `--find-max-rate` ramps `R`.
//! The closed loop measures no latency: a batch's time in a saturated ring is the ring's
//! length over its throughput, so `--hlog`/`--plot` are refused there. The records are
//! their sequence numbers (so the checksum can be checked): `--seed` is recorded, not
//! used. The transfer is one pair of shards: `--shards` must be 2.

use std::{
    sync::{
        Arc, Barrier, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use clap::{Args, builder::RangedU64ValueParser};
use serde::Serialize;
use sluice_engine::ring::{Inbox, Mesh, Message, Outbox, RingConfig};

use crate::harness::{self, LatencyRecorder, LatencySummary, RateSearch, RunArgs, RunInfo, Table, run_on_shards};

/// Record sizes the workload is compiled for (each is its own `[u8; N]` record type).
pub const RECORD_BYTES: [usize; 9] = [8, 16, 32, 64, 100, 128, 256, 512, 1024];

/// What `ring` makes of the shared options (`--help`).
const SHARED_HELP: &str = "Shared options here: --shards must be 2 (shard 0 sends to shard 1). Without --rate the run \
is the closed loop (--max): --rounds transfers of --records records (or of --duration seconds each), after one \
discarded round of --warmup seconds; it measures throughput only, so --hlog and --plot need --rate. --rate R paces the \
sluice ring at R records/s (for --duration seconds, default 1) and measures each batch's latency from its scheduled \
send time, not counting the first --warmup seconds; the baseline is not run. --find-max-rate ramps --rate (default \
1 000 000). --seed is recorded only: the records are their sequence numbers, so the checksum can be checked.";

/// Options of `sluice-bench ring` (its `--help` says what it makes of the shared ones).
#[derive(Debug, Clone, Args)]
#[command(after_help = SHARED_HELP)]
pub struct RingArgs {
    /// Records to move in each transfer of each round [default: 1 GiB of payload, e.g.
    /// 67108864 records of 16 bytes; with --rate, 1 s worth]
    #[arg(long, value_name = "N", conflicts_with = "duration", value_parser = clap::value_parser!(u64).range(1..))]
    pub records: Option<u64>,
    /// Payload bytes per record: 8, 16, 32, 64, 100, 128, 256, 512 or 1024
    #[arg(long, default_value_t = 100, value_name = "N", value_parser = parse_record_bytes)]
    pub record_bytes: usize,
    /// Records per batch: one ring message, and the baseline's largest chunk
    #[arg(long, default_value_t = 256, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub batch: usize,
    /// Ring capacity in batches (`ring_capacity_batches`); the baseline holds
    /// capacity x batch records
    #[arg(long, default_value_t = RingConfig::DEFAULT_CAPACITY_BATCHES, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub capacity: usize,
    /// How long a waiting side spins before it parks (`spin_before_park`), in microseconds
    #[arg(long, default_value_t = RingConfig::DEFAULT_SPIN_BEFORE_PARK.as_micros() as u64, value_name = "US")]
    pub spin_us: u64,
    /// Rounds, each moving the records through the sluice ring and then the baseline; each
    /// side's best round is its figure
    #[arg(long, default_value_t = 3, value_name = "N",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub rounds: usize,
    /// Allocate every batch afresh instead of refilling the vectors the receiver gives
    /// back (`Inbox::recycle` / `Outbox::recycled`)
    #[arg(long)]
    pub no_recycle: bool,
    #[command(flatten)]
    pub run: RunArgs,
}

impl RingArgs {
    /// `--records`, or as many as make [`DEFAULT_PAYLOAD_BYTES`] (with `--rate`, one
    /// second's; with `--duration`, as many as the time lets through).
    pub fn records(&self) -> u64 {
        match (self.records, self.run.rate, self.run.duration) {
            (Some(records), _, _) => records,
            (None, Some(rate), duration) => ((rate as f64 * duration.unwrap_or(1.0)) as u64).max(1),
            (None, None, Some(_)) => UNBOUNDED_RECORDS,
            (None, None, None) => DEFAULT_PAYLOAD_BYTES / self.record_bytes as u64,
        }
    }
}

/// The shard count of the transfer: one pair.
pub const SHARDS: usize = 2;

/// Records enough that no `--duration` transfer reaches them.
const UNBOUNDED_RECORDS: u64 = 1 << 50;

/// Payload moved per transfer by default: with three rounds, under a second to a few
/// seconds in all on a 2-vCPU machine, whatever the record size.
pub const DEFAULT_PAYLOAD_BYTES: u64 = 1 << 30;

fn parse_record_bytes(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    if RECORD_BYTES.contains(&n) { Ok(n) } else { Err(format!("supported record sizes: {RECORD_BYTES:?}")) }
}

/// Result of `sluice-bench ring`; this is the `--json` schema. Rates are per second.
#[derive(Debug, Clone, Serialize)]
pub struct RingReport {
    /// Always `"ring"`.
    pub workload: &'static str,
    /// Always 2: shard 0 sends, shard 1 receives.
    pub shards: usize,
    /// `--seed`, `--duration` and `--warmup` as used.
    #[serde(flatten)]
    pub run: RunInfo,
    /// `--rate`: the sluice ring's offered records per second (open loop), if paced.
    pub rate: Option<u64>,
    /// `--record-bytes`.
    pub record_bytes: usize,
    /// `--records`, sent in each transfer of each round (with `--duration`, what the
    /// last sluice transfer sent; with `--warmup` and `--rate`, the warm-up's included).
    pub records: u64,
    /// Records that arrived through the sluice ring in the last round (equal to what was
    /// sent, or the run fails).
    pub received_records: u64,
    /// Records that arrived through the baseline ring in the last round (none with
    /// `--rate`).
    pub baseline_received_records: Option<u64>,
    /// `--rounds`.
    pub rounds: usize,
    /// `--batch`.
    pub batch_records: usize,
    /// `--capacity`: the sluice ring's `ring_capacity_batches`.
    pub ring_capacity_batches: usize,
    /// `--spin-us`.
    pub spin_before_park_us: u64,
    /// Whether batch allocations went back to the sender for reuse (not `--no-recycle`).
    pub recycle: bool,
    /// Records per second through the sluice ring, first send to last receive, in the best
    /// round.
    pub records_per_sec: f64,
    /// Record payload bytes per second through the sluice ring.
    pub bytes_per_sec: f64,
    /// Records per second through the plain chunked `rtrb` ring, in its best round (none
    /// with `--rate`).
    pub baseline_records_per_sec: Option<f64>,
    /// `records_per_sec / baseline_records_per_sec`.
    pub ratio_to_baseline: Option<f64>,
    /// The sluice ring's records per second in every round, in order.
    pub round_records_per_sec: Vec<f64>,
    /// The baseline's records per second in every round, in order.
    pub round_baseline_records_per_sec: Vec<f64>,
    /// With `--rate`: each batch's latency from its scheduled send time to its arrival,
    /// microseconds.
    pub batch_latency_us: Option<LatencySummary>,
    /// The same, as a curve for `sluice-bench report --plot`.
    pub batch_latency_curve: Option<harness::Curve>,
    /// `--find-max-rate`: the bound, every step, and the highest rate within it.
    #[serde(flatten)]
    pub search: RateSearch,
}

/// One transfer's outcome.
#[derive(Debug, Clone)]
struct Transfer {
    received: u64,
    elapsed: Duration,
    /// With `--rate`: batch latencies after the warm-up.
    latency: Option<LatencyRecorder>,
}

/// What one transfer does: how many records, for how long at most, at what pace.
#[derive(Debug, Clone, Copy)]
struct Plan {
    records: u64,
    limit: Option<Duration>,
    /// Records per second and the warm-up not measured, for a paced transfer.
    pacing: Option<(u64, Duration)>,
}

/// Runs `--rounds` rounds, each moving [`RingArgs::records`] records through the sluice
/// ring and then through the baseline; with `--rate`, one paced transfer through the
/// sluice ring; with `--find-max-rate`, paced transfers at rising rates.
///
/// The machine is shared and noisy, and noise only ever slows a transfer down, so each
/// side's figure is its best round; interleaving the two sides exposes both to the same
/// spells of noise. Every round's rate is in the report.
///
/// # Errors
///
/// Bad options, or a transfer that lost or corrupted records.
pub fn run(args: &RingArgs) -> anyhow::Result<RingReport> {
    let opts = &args.run;
    opts.refuse_metrics("ring measures a bare mesh between two threads: no engine or pipeline to serve metrics of")?;
    ensure!(
        opts.shards_or(SHARDS) == SHARDS,
        "ring measures one pair of shards (shard 0 -> shard 1): --shards must be {SHARDS}"
    );
    let rate_of = |t: &Transfer| t.received as f64 / t.elapsed.as_secs_f64().max(1e-9);
    let mut report = RingReport {
        workload: "ring",
        shards: SHARDS,
        run: opts.info(opts.duration),
        rate: opts.rate,
        record_bytes: args.record_bytes,
        records: args.records(),
        received_records: 0,
        baseline_received_records: None,
        rounds: args.rounds,
        batch_records: args.batch,
        ring_capacity_batches: args.capacity,
        spin_before_park_us: args.spin_us,
        recycle: !args.no_recycle,
        records_per_sec: 0.0,
        bytes_per_sec: 0.0,
        baseline_records_per_sec: None,
        ratio_to_baseline: None,
        round_records_per_sec: Vec::new(),
        round_baseline_records_per_sec: Vec::new(),
        batch_latency_us: None,
        batch_latency_curve: None,
        search: RateSearch::default(),
    };
    if opts.find_max_rate {
        let seconds = opts.duration.unwrap_or(1.0);
        let mut steps: Vec<(u64, Transfer)> = Vec::new();
        report.search = opts.find_max_rate(1_000_000, "ring: batch latency per offered rate", "records/s", |rate| {
            let records = ((rate as f64 * seconds) as u64).max(1);
            let t = paced_transfer(args, rate, records)?;
            let latency = t.latency.clone().unwrap_or_default();
            let achieved = (records as f64) / t.elapsed.saturating_sub(opts.warmup()).as_secs_f64().max(1e-9);
            steps.push((rate, t));
            Ok((achieved, latency))
        })?;
        let (rate, t) = steps.swap_remove(report.search.kept_step(&steps, |s| s.0));
        report.rate = Some(rate);
        report.run.duration = Some(seconds);
        report.rounds = 1;
        report.records = t.received;
        report.received_records = t.received;
        report.records_per_sec = report.search.best_achieved();
        report.bytes_per_sec = report.records_per_sec * args.record_bytes as f64;
        report.batch_latency_us = t.latency.as_ref().map(LatencyRecorder::summary);
        return Ok(report);
    }
    if let Some(rate) = opts.rate {
        let records = args.records();
        let t = paced_transfer(args, rate, records)?;
        let latency = t.latency.clone().context("a paced transfer records latencies")?;
        let label = format!("ring, {rate} records/s, batches of {}", args.batch);
        report.batch_latency_curve = Some(opts.write_latency(&latency, "ring: batch latency", &label)?);
        report.batch_latency_us = Some(latency.summary());
        report.rounds = 1;
        report.records = t.received;
        report.received_records = t.received;
        let warmup_records = t.received - records;
        report.records_per_sec =
            (t.received - warmup_records) as f64 / t.elapsed.saturating_sub(opts.warmup()).as_secs_f64().max(1e-9);
        report.round_records_per_sec.push(report.records_per_sec);
        report.bytes_per_sec = report.records_per_sec * args.record_bytes as f64;
        return Ok(report);
    }
    opts.refuse_latency_files(
        "the closed loop (--max) measures none: a batch's time in a saturated ring is its length over \
         its throughput; give --rate R to measure batch latency at an offered rate",
    )?;
    if opts.warmup > 0.0 {
        // One discarded round of --warmup seconds.
        let warmup = Plan { records: UNBOUNDED_RECORDS, limit: Some(opts.warmup()), pacing: None };
        run_sized_any(args, warmup, 1).context("the warm-up round")?;
    }
    let plan = Plan { records: args.records(), limit: opts.duration(), pacing: None };
    let rounds = run_sized_any(args, plan, args.rounds)?;
    let round_records_per_sec: Vec<f64> = rounds.iter().map(|(sluice, _)| rate_of(sluice)).collect();
    let round_baseline_records_per_sec: Vec<f64> =
        rounds.iter().filter_map(|(_, baseline)| baseline.as_ref().map(rate_of)).collect();
    let best = |rates: &[f64]| rates.iter().copied().fold(0.0, f64::max);
    let (records_per_sec, baseline_records_per_sec) =
        (best(&round_records_per_sec), best(&round_baseline_records_per_sec));
    let (sluice, baseline) = rounds.last().cloned().context("at least one round")?;
    report.records = sluice.received;
    report.received_records = sluice.received;
    report.baseline_received_records = baseline.map(|b| b.received);
    report.records_per_sec = records_per_sec;
    report.bytes_per_sec = records_per_sec * args.record_bytes as f64;
    report.baseline_records_per_sec = Some(baseline_records_per_sec);
    report.ratio_to_baseline = Some(records_per_sec / baseline_records_per_sec);
    report.round_records_per_sec = round_records_per_sec;
    report.round_baseline_records_per_sec = round_baseline_records_per_sec;
    Ok(report)
}

/// One paced transfer through the sluice ring: `records` measured records after the
/// `--warmup`'s, at `rate` records per second.
fn paced_transfer(args: &RingArgs, rate: u64, records: u64) -> anyhow::Result<Transfer> {
    let warmup_records = (rate as f64 * args.run.warmup) as u64;
    let plan = Plan { records: records + warmup_records, limit: None, pacing: Some((rate, args.run.warmup())) };
    let (sluice, _) = run_sized_any(args, plan, 1)?.pop().context("one transfer")?;
    Ok(sluice)
}

/// `rounds` rounds of `plan` at the record size of `--record-bytes`.
fn run_sized_any(args: &RingArgs, plan: Plan, rounds: usize) -> anyhow::Result<Vec<(Transfer, Option<Transfer>)>> {
    match args.record_bytes {
        8 => run_sized::<8>(args, plan, rounds),
        16 => run_sized::<16>(args, plan, rounds),
        32 => run_sized::<32>(args, plan, rounds),
        64 => run_sized::<64>(args, plan, rounds),
        100 => run_sized::<100>(args, plan, rounds),
        128 => run_sized::<128>(args, plan, rounds),
        256 => run_sized::<256>(args, plan, rounds),
        512 => run_sized::<512>(args, plan, rounds),
        1024 => run_sized::<1024>(args, plan, rounds),
        n => bail!("unsupported record size {n}; supported: {RECORD_BYTES:?}"),
    }
}

/// A record of `N` payload bytes, all equal to the low byte of its sequence number.
#[derive(Debug, Clone, Copy)]
struct Rec<const N: usize>([u8; N]);

impl<const N: usize> Rec<N> {
    fn new(seq: u64) -> Self {
        Rec([seq as u8; N])
    }

    /// The sum of its bytes: reading it touches every byte.
    fn checksum(&self) -> u64 {
        self.0.iter().map(|&b| u64::from(b)).sum()
    }
}

/// The sum of the checksums of records `0..records`.
fn expected_checksum(records: u64, record_bytes: usize) -> u64 {
    let (cycles, rest) = (records / 256, records % 256);
    let sum_below = |n: u64| n * n.saturating_sub(1) / 2;
    (cycles * sum_below(256) + sum_below(rest)) * record_bytes as u64
}

/// Every round's (sluice, baseline) transfers, each checked for count and checksum; a
/// paced plan runs no baseline.
fn run_sized<const N: usize>(
    args: &RingArgs,
    plan: Plan,
    rounds: usize,
) -> anyhow::Result<Vec<(Transfer, Option<Transfer>)>> {
    let cpus: Vec<usize> = core_affinity::get_core_ids()
        .filter(|ids| !ids.is_empty())
        .context("reading the CPUs this process may run on")?
        .into_iter()
        .map(|core| core.id)
        .collect();
    let check = |what: &str, sent: u64, (received, checksum): (u64, u64)| {
        let expected = expected_checksum(sent, N);
        ensure!(received == sent, "{what}: {received} of {sent} records arrived");
        ensure!(checksum == expected, "{what}: checksum {checksum}, expected {expected}");
        Ok(())
    };
    (0..rounds)
        .map(|_| {
            let (sluice, sent, sums) = sluice_transfer::<N>(args, plan)?;
            check("sluice ring", sent, (sluice.received, sums))?;
            if plan.pacing.is_some() {
                return Ok((sluice, None));
            }
            let (baseline, sent, sums) = baseline_transfer::<N>(args, plan, [cpus[0], cpus[1 % cpus.len()]])?;
            check("baseline ring", sent, (baseline.received, sums))?;
            Ok((sluice, Some(baseline)))
        })
        .collect()
}

/// What each shard reports: when it started or finished, and what it sent or received.
struct ShardEnd {
    at: Instant,
    /// Records sent (shard 0) or received (shard 1).
    records: u64,
    checksum: u64,
    latency: Option<LatencyRecorder>,
}

/// How long after both shards are up a paced schedule starts.
const PACED_START_DELAY: Duration = Duration::from_millis(20);

/// Shard 0 sends `plan`'s records to shard 1 through a two-shard [`Mesh`]; returns the
/// transfer, the records sent and the checksum of those received.
fn sluice_transfer<const N: usize>(args: &RingArgs, plan: Plan) -> anyhow::Result<(Transfer, u64, u64)> {
    let config =
        RingConfig { ring_capacity_batches: args.capacity, spin_before_park: Duration::from_micros(args.spin_us) };
    let rings: Vec<_> =
        Mesh::new(2).config(config).build::<Rec<N>>().into_iter().map(|r| Mutex::new(Some(r))).collect();
    let rings = Arc::new(rings);
    // Both executors are up before the clock starts.
    let start = Arc::new(Barrier::new(2));
    let (batch, recycle) = (args.batch, !args.no_recycle);
    // Set once both shards are up, for the paced schedule.
    let epoch: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let ends = run_on_shards(SHARDS, move |shard| {
        let taken = rings[shard].lock().ok().and_then(|mut r| r.take());
        let (start, epoch) = (start.clone(), epoch.clone());
        async move {
            let rings = taken.context("each shard takes its rings once")?;
            if start.wait().is_leader()
                && let Ok(mut e) = epoch.lock()
            {
                *e = Some(Instant::now() + PACED_START_DELAY);
            }
            start.wait();
            let epoch = epoch.lock().ok().and_then(|e| *e).context("the schedule's start")?;
            match shard {
                0 => produce(rings.outbox, plan, batch, epoch).await,
                _ => Ok(consume(rings.inbox, recycle, plan, epoch).await),
            }
        }
    })?;
    // The producer's `at` is its start (the schedule's, when paced).
    let (first, last) = (&ends[0], &ends[1]);
    let transfer = Transfer { received: last.records, elapsed: last.at - first.at, latency: last.latency.clone() };
    Ok((transfer, first.records, last.checksum))
}

/// When the batch starting at record `first` is due, paced at `rate` records per second.
fn due(epoch: Instant, first: u64, rate: u64) -> Instant {
    epoch
        + Duration::from_nanos(u64::try_from(u128::from(first) * 1_000_000_000 / u128::from(rate)).unwrap_or(u64::MAX))
}

async fn produce<const N: usize>(
    mut outbox: Outbox<Rec<N>>,
    plan: Plan,
    batch: usize,
    epoch: Instant,
) -> anyhow::Result<ShardEnd> {
    let at = if plan.pacing.is_some() { epoch } else { Instant::now() };
    let until = plan.limit.map(|limit| at + limit);
    let records = plan.records;
    let mut sent = 0;
    while sent < records {
        if let Some((rate, _)) = plan.pacing {
            let due = due(epoch, sent, rate);
            let now = Instant::now();
            if due > now {
                glommio::timer::sleep(due - now).await;
            }
        }
        if until.is_some_and(|until| Instant::now() >= until) {
            break;
        }
        let end = (sent + batch as u64).min(records);
        let mut records = outbox.recycled(1).unwrap_or_else(|| Vec::with_capacity(batch));
        records.extend((sent..end).map(Rec::new));
        outbox.send(1, Message::data(records)).await.context("shard 1 closed its ring")?;
        sent = end;
    }
    outbox.send(1, Message::EndOfStream).await.context("shard 1 closed its ring")?;
    Ok(ShardEnd { at, records: sent, checksum: 0, latency: None })
}

async fn consume<const N: usize>(mut inbox: Inbox<Rec<N>>, recycle: bool, plan: Plan, epoch: Instant) -> ShardEnd {
    let (mut received, mut checksum) = (0, 0);
    let mut latency = plan.pacing.map(|_| LatencyRecorder::with_intervals(epoch, Duration::from_secs(1)));
    while let Some((from, message)) = inbox.recv_any().await {
        match message {
            Message::Data(batch) => {
                if let (Some(latency), Some((rate, warmup))) = (&mut latency, plan.pacing) {
                    // Batches arrive in order and all but the last are full: this one's
                    // first record is `received`.
                    let due = due(epoch, received, rate);
                    if due >= epoch + warmup {
                        let now = Instant::now();
                        latency.record_at(now, now.saturating_duration_since(due));
                    }
                }
                received += batch.len() as u64;
                checksum += batch.iter().map(Rec::checksum).sum::<u64>();
                if recycle {
                    inbox.recycle(from, batch.into_vec());
                }
            }
            Message::EndOfStream => break,
            _ => {}
        }
    }
    ShardEnd { at: Instant::now(), records: received, checksum, latency }
}

/// The same records through a plain `rtrb` ring of `capacity x batch` records between two
/// threads pinned to `cpus`, in chunks of at most `batch` records.
fn baseline_transfer<const N: usize>(
    args: &RingArgs,
    plan: Plan,
    cpus: [usize; 2],
) -> anyhow::Result<(Transfer, u64, u64)> {
    let capacity = args.capacity.checked_mul(args.batch).context("capacity x batch overflows")?;
    let (mut producer, mut consumer) = rtrb::RingBuffer::<Rec<N>>::new(capacity);
    let (records, batch) = (plan.records, args.batch);
    // The producer's count, once it has stopped (--duration): the consumer's target.
    let target = Arc::new(AtomicU64::new(u64::MAX));
    let consumer_target = target.clone();
    let limit = plan.limit;
    let start = Arc::new(Barrier::new(2));
    let producer = {
        let start = start.clone();
        thread::spawn(move || {
            pin(cpus[0]);
            start.wait();
            let at = Instant::now();
            let until = limit.map(|limit| at + limit);
            let mut sent = 0;
            let mut idle = Idle::default();
            while sent < records {
                if let Some(until) = until
                    && Instant::now() >= until
                {
                    break;
                }
                let n = (producer.slots() as u64).min(batch as u64).min(records - sent);
                if n == 0 {
                    idle.wait();
                    continue;
                }
                let chunk = producer.write_chunk_uninit(n as usize).expect("slots() said there is room");
                chunk.fill_from_iter((sent..sent + n).map(Rec::new));
                sent += n;
            }
            target.store(sent, Ordering::Release);
            (at, sent)
        })
    };
    let consumer = thread::spawn(move || {
        pin(cpus[1]);
        start.wait();
        let (mut received, mut checksum) = (0, 0);
        let mut idle = Idle::default();
        while received < records {
            let n = consumer.slots().min(batch);
            if n == 0 {
                // A producer bounded by time may stop short of `records`.
                if limit.is_some() && received >= consumer_target.load(Ordering::Acquire) {
                    break;
                }
                idle.wait();
                continue;
            }
            let chunk = consumer.read_chunk(n).expect("slots() said there are records");
            let (a, b) = chunk.as_slices();
            checksum += a.iter().chain(b).map(Rec::checksum).sum::<u64>();
            received += n as u64;
            chunk.commit_all();
        }
        ShardEnd { at: Instant::now(), records: received, checksum, latency: None }
    });
    let (started, sent) = producer.join().map_err(|_| anyhow::anyhow!("baseline producer panicked"))?;
    let end = consumer.join().map_err(|_| anyhow::anyhow!("baseline consumer panicked"))?;
    Ok((Transfer { received: end.records, elapsed: end.at - started, latency: None }, sent, end.checksum))
}

fn pin(cpu: usize) {
    // Best effort, like glommio's placement: an unpinned baseline is still correct.
    let _ = core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
}

/// The baseline's wait: a busy spin, yielding now and then in case both threads share a
/// CPU.
#[derive(Default)]
struct Idle(u32);

impl Idle {
    fn wait(&mut self) {
        self.0 = self.0.wrapping_add(1);
        if self.0.is_multiple_of(1024) {
            thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

impl RingReport {
    /// The human-readable form of the report.
    pub fn table(&self) -> Table {
        let Self { records, record_bytes, rounds, batch_records, ring_capacity_batches, spin_before_park_us, .. } =
            self;
        let recycling = if self.recycle { "" } else { ", no recycling" };
        let mode = match self.rate {
            Some(rate) => format!("{rate} records/s offered"),
            None => format!("best of {rounds} rounds"),
        };
        let mut table = Table::titled(format!(
            "ring: shard 0 -> shard 1, {records} records x {record_bytes} B, batches of {batch_records}, \
             {ring_capacity_batches} batches per ring, spin {spin_before_park_us} us{recycling}, {mode}, {}",
            self.run.describe()
        ));
        let name = if self.rate.is_some() { "sluice ring (achieved)" } else { "sluice ring" };
        table.row(name, format!("{:.0}", self.records_per_sec), "records/s");
        table.row(name, format!("{:.1}", self.bytes_per_sec / 1e6), "MB/s");
        if let (Some(baseline), Some(ratio)) = (self.baseline_records_per_sec, self.ratio_to_baseline) {
            table.row("baseline (rtrb chunked)", format!("{baseline:.0}"), "records/s");
            table.row("sluice / baseline", format!("{:.1}", 100.0 * ratio), "%");
            let rounds: Vec<String> = (self.round_records_per_sec.iter().zip(&self.round_baseline_records_per_sec))
                .map(|(sluice, baseline)| format!("{:.0}/{:.0}", sluice / 1e6, baseline / 1e6))
                .collect();
            table.row("rounds (sluice/baseline)", rounds.join(" "), "M records/s");
        }
        if let Some(l) = &self.batch_latency_us {
            table.latency_rows("batch latency", l);
        }
        self.search.rows(&mut table, "records/s");
        table
    }
}
