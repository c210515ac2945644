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

use std::{
    path::PathBuf,
    sync::{Arc, Barrier, Mutex},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use clap::{Args, builder::RangedU64ValueParser};
use serde::Serialize;
use sluice_engine::ring::{Inbox, Mesh, Message, Outbox, RingConfig};

use crate::harness::{Table, run_on_shards};

/// Record sizes the workload is compiled for (each is its own `[u8; N]` record type).
pub const RECORD_BYTES: [usize; 9] = [8, 16, 32, 64, 100, 128, 256, 512, 1024];

/// Options of `sluice-bench ring`.
#[derive(Debug, Clone, Args)]
pub struct RingArgs {
    /// Records to move in each transfer of each round [default: 1 GiB of payload, e.g.
    /// 67108864 records of 16 bytes]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
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
    /// Also write the report as JSON to this file
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

impl RingArgs {
    /// `--records`, or as many as make [`DEFAULT_PAYLOAD_BYTES`].
    pub fn records(&self) -> u64 {
        self.records.unwrap_or(DEFAULT_PAYLOAD_BYTES / self.record_bytes as u64)
    }
}

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
    /// `--record-bytes`.
    pub record_bytes: usize,
    /// `--records`, sent in each transfer of each round.
    pub records: u64,
    /// Records that arrived through the sluice ring in each round (equal to `records`, or
    /// the run fails).
    pub received_records: u64,
    /// Records that arrived through the baseline ring in each round.
    pub baseline_received_records: u64,
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
    /// Records per second through the plain chunked `rtrb` ring, in its best round.
    pub baseline_records_per_sec: f64,
    /// `records_per_sec / baseline_records_per_sec`.
    pub ratio_to_baseline: f64,
    /// The sluice ring's records per second in every round, in order.
    pub round_records_per_sec: Vec<f64>,
    /// The baseline's records per second in every round, in order.
    pub round_baseline_records_per_sec: Vec<f64>,
}

/// One transfer's outcome.
#[derive(Debug, Clone, Copy)]
struct Transfer {
    received: u64,
    elapsed: Duration,
}

/// Runs `--rounds` rounds, each moving [`RingArgs::records`] records through the sluice
/// ring and then through the baseline.
///
/// The machine is shared and noisy, and noise only ever slows a transfer down, so each
/// side's figure is its best round; interleaving the two sides exposes both to the same
/// spells of noise. Every round's rate is in the report.
pub fn run(args: &RingArgs) -> anyhow::Result<RingReport> {
    let rounds = match args.record_bytes {
        8 => run_sized::<8>(args)?,
        16 => run_sized::<16>(args)?,
        32 => run_sized::<32>(args)?,
        64 => run_sized::<64>(args)?,
        100 => run_sized::<100>(args)?,
        128 => run_sized::<128>(args)?,
        256 => run_sized::<256>(args)?,
        512 => run_sized::<512>(args)?,
        1024 => run_sized::<1024>(args)?,
        n => bail!("unsupported record size {n}; supported: {RECORD_BYTES:?}"),
    };
    let rate = |t: &Transfer| t.received as f64 / t.elapsed.as_secs_f64().max(1e-9);
    let round_records_per_sec: Vec<f64> = rounds.iter().map(|(sluice, _)| rate(sluice)).collect();
    let round_baseline_records_per_sec: Vec<f64> = rounds.iter().map(|(_, baseline)| rate(baseline)).collect();
    let best = |rates: &[f64]| rates.iter().copied().fold(0.0, f64::max);
    let (records_per_sec, baseline_records_per_sec) =
        (best(&round_records_per_sec), best(&round_baseline_records_per_sec));
    let (sluice, baseline) = rounds.last().copied().context("at least one round")?;
    Ok(RingReport {
        workload: "ring",
        record_bytes: args.record_bytes,
        records: args.records(),
        received_records: sluice.received,
        baseline_received_records: baseline.received,
        rounds: args.rounds,
        batch_records: args.batch,
        ring_capacity_batches: args.capacity,
        spin_before_park_us: args.spin_us,
        recycle: !args.no_recycle,
        records_per_sec,
        bytes_per_sec: records_per_sec * args.record_bytes as f64,
        baseline_records_per_sec,
        ratio_to_baseline: records_per_sec / baseline_records_per_sec,
        round_records_per_sec,
        round_baseline_records_per_sec,
    })
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

/// Every round's (sluice, baseline) transfers, each checked for count and checksum.
fn run_sized<const N: usize>(args: &RingArgs) -> anyhow::Result<Vec<(Transfer, Transfer)>> {
    let cpus: Vec<usize> = core_affinity::get_core_ids()
        .filter(|ids| !ids.is_empty())
        .context("reading the CPUs this process may run on")?
        .into_iter()
        .map(|core| core.id)
        .collect();
    let records = args.records();
    let expected = expected_checksum(records, N);
    let check = |what: &str, (received, checksum): (u64, u64)| {
        ensure!(received == records, "{what}: {received} of {records} records arrived");
        ensure!(checksum == expected, "{what}: checksum {checksum}, expected {expected}");
        Ok(())
    };
    (0..args.rounds)
        .map(|_| {
            let (sluice, sums) = sluice_transfer::<N>(args)?;
            check("sluice ring", (sluice.received, sums))?;
            let (baseline, sums) = baseline_transfer::<N>(args, [cpus[0], cpus[1 % cpus.len()]])?;
            check("baseline ring", (baseline.received, sums))?;
            Ok((sluice, baseline))
        })
        .collect()
}

/// What each shard reports: when it started or finished, and what it received.
struct ShardEnd {
    at: Instant,
    received: u64,
    checksum: u64,
}

/// Shard 0 sends [`RingArgs::records`] records to shard 1 through a two-shard [`Mesh`].
fn sluice_transfer<const N: usize>(args: &RingArgs) -> anyhow::Result<(Transfer, u64)> {
    let config =
        RingConfig { ring_capacity_batches: args.capacity, spin_before_park: Duration::from_micros(args.spin_us) };
    let rings: Vec<_> =
        Mesh::new(2).config(config).build::<Rec<N>>().into_iter().map(|r| Mutex::new(Some(r))).collect();
    let rings = Arc::new(rings);
    // Both executors are up before the clock starts.
    let start = Arc::new(Barrier::new(2));
    let (records, batch, recycle) = (args.records(), args.batch, !args.no_recycle);
    let ends = run_on_shards(2, move |shard| {
        let taken = rings[shard].lock().ok().and_then(|mut r| r.take());
        let start = start.clone();
        async move {
            let rings = taken.context("each shard takes its rings once")?;
            start.wait();
            match shard {
                0 => produce(rings.outbox, records, batch).await,
                _ => Ok(consume(rings.inbox, recycle).await),
            }
        }
    })?;
    let (first, last) = (&ends[0], &ends[1]);
    Ok((Transfer { received: last.received, elapsed: last.at - first.at }, last.checksum))
}

async fn produce<const N: usize>(mut outbox: Outbox<Rec<N>>, records: u64, batch: usize) -> anyhow::Result<ShardEnd> {
    let at = Instant::now();
    let mut sent = 0;
    while sent < records {
        let end = (sent + batch as u64).min(records);
        let mut records = outbox.recycled(1).unwrap_or_else(|| Vec::with_capacity(batch));
        records.extend((sent..end).map(Rec::new));
        outbox.send(1, Message::data(records)).await.context("shard 1 closed its ring")?;
        sent = end;
    }
    outbox.send(1, Message::EndOfStream).await.context("shard 1 closed its ring")?;
    Ok(ShardEnd { at, received: 0, checksum: 0 })
}

async fn consume<const N: usize>(mut inbox: Inbox<Rec<N>>, recycle: bool) -> ShardEnd {
    let (mut received, mut checksum) = (0, 0);
    while let Some((from, message)) = inbox.recv_any().await {
        match message {
            Message::Data(batch) => {
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
    ShardEnd { at: Instant::now(), received, checksum }
}

/// The same records through a plain `rtrb` ring of `capacity x batch` records between two
/// threads pinned to `cpus`, in chunks of at most `batch` records.
fn baseline_transfer<const N: usize>(args: &RingArgs, cpus: [usize; 2]) -> anyhow::Result<(Transfer, u64)> {
    let capacity = args.capacity.checked_mul(args.batch).context("capacity x batch overflows")?;
    let (mut producer, mut consumer) = rtrb::RingBuffer::<Rec<N>>::new(capacity);
    let (records, batch) = (args.records(), args.batch);
    let start = Arc::new(Barrier::new(2));
    let producer = {
        let start = start.clone();
        thread::spawn(move || {
            pin(cpus[0]);
            start.wait();
            let at = Instant::now();
            let mut sent = 0;
            let mut idle = Idle::default();
            while sent < records {
                let n = (producer.slots() as u64).min(batch as u64).min(records - sent);
                if n == 0 {
                    idle.wait();
                    continue;
                }
                let chunk = producer.write_chunk_uninit(n as usize).expect("slots() said there is room");
                chunk.fill_from_iter((sent..sent + n).map(Rec::new));
                sent += n;
            }
            at
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
                idle.wait();
                continue;
            }
            let chunk = consumer.read_chunk(n).expect("slots() said there are records");
            let (a, b) = chunk.as_slices();
            checksum += a.iter().chain(b).map(Rec::checksum).sum::<u64>();
            received += n as u64;
            chunk.commit_all();
        }
        ShardEnd { at: Instant::now(), received, checksum }
    });
    let started = producer.join().map_err(|_| anyhow::anyhow!("baseline producer panicked"))?;
    let end = consumer.join().map_err(|_| anyhow::anyhow!("baseline consumer panicked"))?;
    Ok((Transfer { received: end.received, elapsed: end.at - started }, end.checksum))
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
        let mut table = Table::titled(format!(
            "ring: shard 0 -> shard 1, {records} records x {record_bytes} B, batches of {batch_records}, \
             {ring_capacity_batches} batches per ring, spin {spin_before_park_us} us{recycling}, best of {rounds} rounds"
        ));
        table.row("sluice ring", format!("{:.0}", self.records_per_sec), "records/s");
        table.row("sluice ring", format!("{:.1}", self.bytes_per_sec / 1e6), "MB/s");
        table.row("baseline (rtrb chunked)", format!("{:.0}", self.baseline_records_per_sec), "records/s");
        table.row("sluice / baseline", format!("{:.1}", 100.0 * self.ratio_to_baseline), "%");
        let rounds: Vec<String> = (self.round_records_per_sec.iter().zip(&self.round_baseline_records_per_sec))
            .map(|(sluice, baseline)| format!("{:.0}/{:.0}", sluice / 1e6, baseline / 1e6))
            .collect();
        table.row("rounds (sluice/baseline)", rounds.join(" "), "M records/s");
        table
    }
}
