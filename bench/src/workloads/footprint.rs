//! `sluice-bench footprint`: what a topic of many partitions costs before it holds any data.
//!
//! On an empty data directory the engine starts (`--shards`), and then:
//!
//! 1. a topic of `--partitions` partitions (default settings, but `--fsync` if given) is
//!    created, timed (`create_seconds`);
//! 2. the data directory's allocated bytes are summed (`disk_bytes`: `st_blocks * 512` of
//!    every file and directory under it, what `du` counts, preallocated segment space
//!    included);
//! 3. the engine shuts down and a new one opens on the same directory, timed from
//!    `Engine::open`'s call to its return, every partition open (`open_seconds`);
//! 4. the process's resident memory is read (`VmRSS` of `/proc/self/status`: this process
//!    holds the engine, so it is the engine's memory and the harness's few MiB);
//! 5. one record is appended to every partition and read back from every partition, all
//!    partitions at once (`roundtrip_seconds`); a partition that does not return its own
//!    record fails the run;
//! 6. the allocated bytes are summed again (`disk_bytes_after_roundtrip`).
//!
//! The file descriptors the process holds are counted after steps 1 and 3 (each
//! partition holds some; `ulimit -n` bounds them). Each step's figures also go to stderr
//! as they come, so a run that fails later still tells what it measured.
//!
//! The targets are printed beside the figures, not asserted: 1 000 partitions
//! under 100 MiB on disk; 10 000 partitions on two shards created in under 30 s, opened
//! in under 10 s, with under 1 GiB resident.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clap::{Args, builder::RangedU64ValueParser};
use futures_lite::future::block_on;
use serde::Serialize;
use sluice_engine::{Engine, EngineConfig, EngineHandle, OwnedRecord, TopicConfig};
use sluice_io::{BatchMeta, FsyncPolicy, Offset, PartitionId, Timestamp};

use super::DirArgs;
use crate::harness::Table;

/// The topic the workload creates.
const TOPIC: &str = "footprint";

/// Appends and fetches in flight at once per shard in the round trip.
const ROUNDTRIP_INFLIGHT: usize = 256;

/// The disk target: this many bytes per 1 000 partitions.
const DISK_TARGET_PER_1000: u64 = 100 << 20;

/// Options of `sluice-bench footprint`.
#[derive(Debug, Clone, Args)]
pub struct FootprintArgs {
    /// Partitions of the topic
    #[arg(long, default_value_t = 1000, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub partitions: u32,
    /// Engine shards
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub shards: usize,
    /// The topic's fsync policy, `always`, `interval:MS` or `never` [default: the topic
    /// default, interval:5]. Under `interval:MS` each partition's log syncs on a timer of
    /// its own, idle or not
    #[arg(long, value_name = "POLICY")]
    pub fsync: Option<FsyncPolicy>,
    #[command(flatten)]
    pub dirs: DirArgs,
    /// Also write the report as JSON to this file
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics while the run goes on: the
    /// engine's, per partition and shard (loopback unless told otherwise).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// Result of `sluice-bench footprint`; the `--json` schema. Bytes are bytes allocated on
/// disk (`du`), times seconds.
#[derive(Debug, Clone, Serialize)]
pub struct FootprintReport {
    /// Always `"footprint"`.
    pub workload: &'static str,
    /// `--shards`.
    pub shards: usize,
    /// `--partitions`.
    pub partitions: u32,
    /// The topic's fsync policy.
    #[serde(serialize_with = "crate::harness::serialize_display")]
    pub fsync: FsyncPolicy,
    /// The 1-minute load average when the run started (noisy above the CPU count).
    pub load_average: Option<f64>,
    /// The data directory of the engine just started, before the topic (its lock and
    /// metadata files and the internal `__consumer_offsets` topic).
    pub empty_disk_bytes: u64,
    /// Time to create the topic (`EngineHandle::create_topic`).
    pub create_seconds: f64,
    /// The data directory once the topic is created.
    pub disk_bytes: u64,
    /// `(disk_bytes - empty_disk_bytes) / partitions`.
    pub disk_bytes_per_partition: u64,
    /// Files and directories under the data directory once the topic is created.
    pub files: u64,
    /// File descriptors this process held open once the topic was created.
    pub open_fds_after_create: u64,
    /// Time to shut the engine down.
    pub shutdown_seconds: f64,
    /// Time for `Engine::open` on the directory to return, every partition open.
    pub open_seconds: f64,
    /// This process's resident memory before the engine reopened (`VmRSS`).
    pub rss_before_open_bytes: u64,
    /// This process's resident memory once the engine reopened (`VmRSS`).
    pub rss_bytes: u64,
    /// File descriptors this process held open once the engine reopened.
    pub open_fds_after_open: u64,
    /// The most this process held resident at any point of the run (`VmHWM`, the first
    /// engine's creation included).
    pub rss_peak_bytes: u64,
    /// Time to append one record to every partition and read each back, all at once.
    pub roundtrip_seconds: f64,
    /// The data directory after the round trip.
    pub disk_bytes_after_roundtrip: u64,
    /// `(disk_bytes_after_roundtrip - empty_disk_bytes) / partitions`.
    pub disk_bytes_after_roundtrip_per_partition: u64,
}

/// Runs the footprint workload in `--dir` (which must be empty) or a fresh temporary
/// directory.
///
/// # Errors
///
/// A non-empty `--dir`, an engine call that failed (the error says which step), or a
/// partition that did not return its record.
pub fn run(args: &FootprintArgs) -> anyhow::Result<FootprintReport> {
    let work_dir = args.dirs.work_dir("footprint")?;
    let dir = work_dir.path();
    if args.dirs.keep {
        eprintln!("keeping data in {}", dir.display());
    }
    ensure!(
        std::fs::read_dir(dir).context("reading the data directory")?.next().is_none(),
        "footprint measures an empty data directory: {} is not empty",
        dir.display()
    );
    let load_average = super::load_average();
    let _metrics = crate::harness::metrics::serve(args.metrics_listen)?;
    let n = args.partitions;
    let topic = TopicConfig { fsync: args.fsync.unwrap_or(TopicConfig::default().fsync), ..TopicConfig::default() };
    let config = || EngineConfig { shards: Some(args.shards), ..EngineConfig::new(dir) };
    let engine = block_on(Engine::open(config())).context("starting the engine")?;
    let handle = engine.handle();
    // A scrape gathers what the engine counts (each engine in turn: the source of one
    // that shut down is dropped).
    let source = handle.metric_source();
    crate::harness::metrics::register(&source);
    let empty_disk_bytes = disk_usage(dir)?.bytes;
    let started = Instant::now();
    block_on(handle.create_topic(TOPIC, n, Some(topic.clone()))).with_context(|| {
        format!("creating a topic of {n} partitions (failed after {:.2} s)", started.elapsed().as_secs_f64())
    })?;
    let create_seconds = started.elapsed().as_secs_f64();
    let created = disk_usage(dir)?;
    let open_fds_after_create = open_fds()?;
    // Each step's figures as they come, so that a run failing later still tells them.
    eprintln!(
        "footprint: created {n} partitions in {create_seconds:.2} s, {} bytes on disk, {open_fds_after_create} fds open",
        created.bytes
    );
    drop((handle, source));
    let started = Instant::now();
    block_on(engine.shutdown()).context("shutting the engine down")?;
    let shutdown_seconds = started.elapsed().as_secs_f64();

    let rss_before_open_bytes = proc_status_bytes("VmRSS")?;
    let started = Instant::now();
    let engine = block_on(Engine::open(config()))
        .with_context(|| format!("reopening the engine (failed after {:.2} s)", started.elapsed().as_secs_f64()))?;
    let open_seconds = started.elapsed().as_secs_f64();
    let rss_bytes = proc_status_bytes("VmRSS")?;
    let open_fds_after_open = open_fds()?;
    eprintln!("footprint: reopened in {open_seconds:.2} s, VmRSS {rss_bytes} bytes, {open_fds_after_open} fds open");
    let handle = engine.handle();
    let source = handle.metric_source();
    crate::harness::metrics::register(&source);
    let started = Instant::now();
    roundtrip(&handle, n).context("the round trip through every partition")?;
    let roundtrip_seconds = started.elapsed().as_secs_f64();
    let after = disk_usage(dir)?.bytes;
    drop((handle, source));
    block_on(engine.shutdown()).context("shutting the reopened engine down")?;
    // The kernel's high-water mark is kept from counters it updates lazily: it can read a
    // little under a VmRSS taken earlier.
    let rss_peak_bytes = proc_status_bytes("VmHWM")?.max(rss_bytes);
    let per_partition = |bytes: u64| bytes.saturating_sub(empty_disk_bytes) / u64::from(n);
    Ok(FootprintReport {
        workload: "footprint",
        shards: args.shards,
        partitions: n,
        fsync: topic.fsync,
        load_average,
        empty_disk_bytes,
        create_seconds,
        disk_bytes: created.bytes,
        disk_bytes_per_partition: per_partition(created.bytes),
        files: created.files,
        open_fds_after_create,
        shutdown_seconds,
        open_seconds,
        rss_before_open_bytes,
        rss_bytes,
        open_fds_after_open,
        rss_peak_bytes,
        roundtrip_seconds,
        disk_bytes_after_roundtrip: after,
        disk_bytes_after_roundtrip_per_partition: per_partition(after),
    })
}

/// The file descriptors this process holds open (`/proc/self/fd`, the listing's own left out).
fn open_fds() -> anyhow::Result<u64> {
    let listing = std::fs::read_dir("/proc/self/fd").context("listing /proc/self/fd")?;
    Ok((listing.count() as u64).saturating_sub(1))
}

/// Appends one record (its value names its partition) to every partition of the topic,
/// then fetches each partition from offset 0 and checks it holds exactly that record. Each
/// shard runs its own partitions' calls, [`ROUNDTRIP_INFLIGHT`] at a time.
fn roundtrip(handle: &EngineHandle, partitions: u32) -> anyhow::Result<()> {
    let owners = handle.describe_topic(TOPIC).context("describing the topic")?.shards;
    ensure!(owners.len() == partitions as usize, "the topic has {} partitions, not {partitions}", owners.len());
    let shards = owners.iter().map(|&s| s as usize + 1).max().unwrap_or(0);
    let waiters: Vec<_> = (0..shards)
        .map(|shard| {
            let mine: Vec<u32> = (0..partitions).filter(|&p| owners[p as usize] as usize == shard).collect();
            let handle = handle.clone();
            std::thread::spawn(move || {
                let h = handle.clone();
                block_on(handle.run_on(shard, move || roundtrip_on_shard(h, mine)))
            })
        })
        .collect();
    for waiter in waiters {
        waiter.join().map_err(|_| anyhow::anyhow!("a round-trip thread panicked"))???;
    }
    Ok(())
}

/// One shard's part of [`roundtrip`]: its partitions, [`ROUNDTRIP_INFLIGHT`] at a time.
async fn roundtrip_on_shard(handle: EngineHandle, partitions: Vec<u32>) -> anyhow::Result<u32> {
    let permits = std::rc::Rc::new(glommio::sync::Semaphore::new(ROUNDTRIP_INFLIGHT as u64));
    let mut tasks = Vec::with_capacity(partitions.len());
    for p in partitions {
        let permit = permits.clone().acquire_static_permit(1).await.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let handle = handle.clone();
        tasks.push(glommio::spawn_local(async move {
            let r = roundtrip_one(&handle, PartitionId(p)).await;
            drop(permit);
            r
        }));
    }
    let mut done = 0;
    for t in tasks {
        t.await?;
        done += 1;
    }
    Ok(done)
}

/// Appends one record to `p` and reads it back from offset 0.
async fn roundtrip_one(handle: &EngineHandle, p: PartitionId) -> anyhow::Result<()> {
    let value = format!("footprint partition {}", p.0).into_bytes();
    let record = OwnedRecord::new(None, value.clone(), Timestamp::now());
    let info = handle
        .append(TOPIC, p, vec![record], BatchMeta::default())
        .await
        .with_context(|| format!("appending to partition {}", p.0))?;
    ensure!(info.base_offset == Offset(0), "partition {}: the record went to offset {:?}", p.0, info.base_offset);
    let batches = handle
        .fetch(TOPIC, p, Offset(0), 64 << 10, Duration::ZERO)
        .await
        .with_context(|| format!("fetching partition {}", p.0))?;
    let mut got = Vec::new();
    for r in batches.records() {
        let r = r.with_context(|| format!("reading partition {}", p.0))?;
        got.push((r.offset(), r.value_bytes().to_vec()));
    }
    ensure!(got == [(Offset(0), value)], "partition {} returned {} records, not its one record", p.0, got.len());
    Ok(())
}

/// What `du` counts under a directory.
#[derive(Debug, Clone, Copy, Default)]
struct DiskUsage {
    /// Allocated bytes (`st_blocks * 512`) of every file and directory, the root included.
    bytes: u64,
    /// Files and directories, the root left out.
    files: u64,
}

/// Sums the allocated bytes under `dir` (symbolic links not followed).
fn disk_usage(dir: &Path) -> anyhow::Result<DiskUsage> {
    use std::os::unix::fs::MetadataExt;
    let mut usage = DiskUsage::default();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).with_context(|| format!("stat {}", path.display()))?;
        usage.bytes += meta.blocks() * 512;
        if path != dir {
            usage.files += 1;
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).with_context(|| format!("listing {}", path.display()))? {
                pending.push(entry?.path());
            }
        }
    }
    Ok(usage)
}

/// A `kB` line of `/proc/self/status` (`VmRSS`, `VmHWM`), in bytes.
fn proc_status_bytes(field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .with_context(|| format!("no {field} in /proc/self/status"))?;
    let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().with_context(|| format!("{field}: {line}"))?;
    Ok(kib * 1024)
}

impl FootprintReport {
    /// The human-readable form of the report, the targets beside the figures.
    pub fn table(&self) -> Table {
        let mib = |b: u64| format!("{:.1}", b as f64 / f64::from(1 << 20));
        let kib = |b: u64| format!("{:.1}", b as f64 / 1024.0);
        let mut table = Table::titled(format!(
            "footprint: one topic of {} partitions, {} shards, fsync {}, other topic settings default",
            self.partitions, self.shards, self.fsync
        ));
        if let Some(load) = self.load_average {
            table.row("load average at start", format!("{load:.2}"), "(1 min; noisy above the CPU count)");
        }
        table.row("create", format!("{:.2}", self.create_seconds), "s (target: 10 000 on 2 shards < 30 s)");
        let disk_target =
            format!("{:.0}", DISK_TARGET_PER_1000 as f64 * f64::from(self.partitions) / 1000.0 / 1048576.0);
        table.row("disk, empty engine", mib(self.empty_disk_bytes), "MiB");
        table.row(
            "disk after create",
            mib(self.disk_bytes),
            format!("MiB (target: 1 000 partitions < 100 MiB, so < {disk_target} MiB here)"),
        );
        table.row("  per partition", kib(self.disk_bytes_per_partition), "KiB (target < 102.4 KiB)");
        table.row("  files and directories", self.files, "");
        table.row("  open file descriptors", self.open_fds_after_create, "");
        table.row("shutdown", format!("{:.2}", self.shutdown_seconds), "s");
        table.row("open", format!("{:.2}", self.open_seconds), "s (target: 10 000 on 2 shards < 10 s)");
        table.row("rss before open", mib(self.rss_before_open_bytes), "MiB");
        table.row("rss after open", mib(self.rss_bytes), "MiB (target: 10 000 on 2 shards < 1024 MiB)");
        table.row("  open file descriptors", self.open_fds_after_open, "");
        table.row("rss peak (whole run)", mib(self.rss_peak_bytes), "MiB");
        table.row("append + fetch every partition", format!("{:.2}", self.roundtrip_seconds), "s");
        table.row("disk after round trip", mib(self.disk_bytes_after_roundtrip), "MiB");
        table.row("  per partition", kib(self.disk_bytes_after_roundtrip_per_partition), "KiB");
        table
    }
}
