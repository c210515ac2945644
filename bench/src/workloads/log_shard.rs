//! What one shard does in `sluice-bench log`: append `records` records (or as many as
//! `limit` lets through) to its own partition log with `inflight` appenders in flight (so
//! group commit has company), then read them all back in place, checking every batch's
//! CRC on the way.

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Context;
use sluice_io::{Log, LogConfig, Offset, Record, Timestamp, UringStorage};

use crate::harness::LatencyRecorder;

/// One shard's measurements.
#[derive(Debug)]
pub struct ShardOutcome {
    /// Records appended.
    pub appended: u64,
    /// Append calls made.
    pub appends: u64,
    /// Time from the first append call to the last acknowledgement and a final flush.
    pub append_time: Duration,
    /// Records read back.
    pub read: u64,
    /// Time to read them all.
    pub read_time: Duration,
    /// Latency of each append call, call to acknowledgement.
    pub latency: LatencyRecorder,
    /// Bytes of batches on disk.
    pub stored_bytes: u64,
    /// Time to read the segment files raw (no log logic), the physical reference.
    pub raw_read_time: Duration,
}

/// The shard's work, given its own directory.
#[derive(Clone, Debug)]
pub struct ShardPlan {
    /// The partition directory.
    pub dir: PathBuf,
    /// Records to append.
    pub records: u64,
    /// If given, no append call starts once this much time has passed since the first.
    pub limit: Option<Duration>,
    /// Every record's value (`record_bytes` long).
    pub value: Vec<u8>,
    /// Value bytes per record.
    pub record_bytes: usize,
    /// Records per append call.
    pub batch_records: usize,
    /// The log's configuration.
    pub config: LogConfig,
    /// Append calls in flight at once.
    pub inflight: usize,
    /// Bytes asked for per read.
    pub read_bytes: usize,
    /// Read through a `LogReader` (one read ahead) rather than plain `Log::read` calls.
    pub read_ahead: bool,
    /// The instant the run's latency intervals count from (shared by every shard).
    pub epoch: Instant,
}

/// Runs the plan on the current executor.
pub async fn run_shard(plan: ShardPlan) -> anyhow::Result<ShardOutcome> {
    let (log, _) = Log::open(UringStorage, &plan.dir, plan.config.clone()).await.context("opening the shard's log")?;
    anyhow::ensure!(plan.value.len() == plan.record_bytes, "the value must be record_bytes long");
    let value: Rc<Vec<u8>> = Rc::new(plan.value.clone());
    let calls = plan.records.div_ceil(plan.batch_records as u64);
    let next_call = Rc::new(Cell::new(0u64));
    let latency = Rc::new(RefCell::new(LatencyRecorder::with_intervals(plan.epoch, Duration::from_secs(1))));
    let start = Instant::now();
    let until = plan.limit.map(|limit| start + limit);
    let mut tasks = Vec::new();
    for _ in 0..plan.inflight.max(1) {
        let (log, value, next_call, latency) = (log.clone(), value.clone(), next_call.clone(), latency.clone());
        let plan = plan.clone();
        tasks.push(glommio::spawn_local(async move {
            loop {
                let call = next_call.get();
                if call >= calls || until.is_some_and(|until| Instant::now() >= until) {
                    return Ok::<_, anyhow::Error>(());
                }
                next_call.set(call + 1);
                let first = call * plan.batch_records as u64;
                let n = (plan.records - first).min(plan.batch_records as u64);
                let now = Timestamp::now();
                let records: Vec<Record<'_>> = (0..n).map(|_| Record::unkeyed(&value, now)).collect();
                let t = Instant::now();
                log.append(&records).await.context("append")?;
                let done = Instant::now();
                latency.borrow_mut().record_at(done, done.saturating_duration_since(t));
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    log.flush().await.context("final flush")?;
    let append_time = start.elapsed();
    let appended = log.end_offset().0;
    let appends = next_call.get();

    let start = Instant::now();
    let mut reader = log.reader(Offset(0), plan.read_bytes);
    let mut at = Offset(0);
    let mut read = 0u64;
    let mut bytes = 0usize;
    loop {
        let batches = if plan.read_ahead {
            reader.next().await.context("read")?
        } else {
            let b = log.read(at, plan.read_bytes).await.context("read")?;
            at = b.next_offset();
            b
        };
        if batches.is_empty() {
            break;
        }
        for record in batches.records() {
            bytes += record?.value_bytes().len();
            read += 1;
        }
    }
    let read_time = start.elapsed();
    anyhow::ensure!(read == appended, "read back {read} records of {appended}");
    anyhow::ensure!(bytes == read as usize * plan.record_bytes, "read back the wrong bytes");
    let stored_bytes = log.size_bytes();
    log.close().await.context("close")?;
    let raw_read_time = raw_read(&plan.dir, stored_bytes, plan.read_bytes).await?;
    let latency = Rc::try_unwrap(latency).map_err(|_| anyhow::anyhow!("appenders still running"))?.into_inner();
    Ok(ShardOutcome { appended, appends, append_time, read, read_time, latency, stored_bytes, raw_read_time })
}

/// Reads the segment files of `dir` in order, sequentially with `O_DIRECT`, `chunk`
/// bytes at a time (as the log's reads ask for), until `bytes` have been read (the
/// active segment is preallocated beyond its data, so its length is no guide).
async fn raw_read(dir: &std::path::Path, bytes: u64, chunk: usize) -> anyhow::Result<Duration> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    files.sort();
    let start = Instant::now();
    let mut left = bytes;
    for path in files {
        let file =
            glommio::io::DmaFile::open(&path).await.map_err(|e| anyhow::anyhow!("open {}: {e}", path.display()))?;
        let len = file.file_size().await.map_err(|e| anyhow::anyhow!("stat: {e}"))?.min(left);
        left -= len;
        let mut pos = 0;
        while pos < len {
            let buf = file.read_at_aligned(pos, chunk).await.map_err(|e| anyhow::anyhow!("read: {e}"))?;
            if buf.is_empty() {
                break;
            }
            std::hint::black_box(buf[0]);
            pos += buf.len() as u64;
        }
        file.close().await.map_err(|e| anyhow::anyhow!("close: {e}"))?;
    }
    Ok(start.elapsed())
}
