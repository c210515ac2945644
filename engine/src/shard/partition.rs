//! One partition on its shard, and serving it: appends (with the idempotent-producer
//! check), single-record sends batched per the partition's linger, long-poll fetches,
//! and opening, deleting and closing its log. Everything here runs on the owning shard's
//! executor; a `Partition` is `!Send`.

use std::cell::RefCell;
use std::rc::Rc;
use std::task::Waker;
use std::time::Duration;

use sluice_io::{AppendInfo, BatchMeta, Log, Offset, OwnedBatches, PartitionId, Record, UringStorage};

use super::request::{Batching, Reply};
use crate::error::{EngineError, Result};
use crate::producer_state::{KAFKA_CACHED_BATCHES_PER_PRODUCER, ProducerStateTable, SequenceCheck};
use crate::record::OwnedRecord;

/// Wakers of waiting fetches kept per partition before the stale ones are flushed.
const MAX_FETCH_WAITERS: usize = 256;

/// One partition on its shard.
pub(super) struct Partition {
    pub(super) log: Log<UringStorage>,
    batching: Batching,
    pending: Vec<(OwnedRecord, Reply<Offset>)>,
    pending_bytes: usize,
    linger_armed: bool,
    /// Fetches waiting for data past the end.
    waiters: Vec<Waker>,
    /// Idempotent producers' sequence numbers in this partition.
    producers: ProducerStateTable,
    /// Held from an idempotent batch's sequence check until its offsets are recorded,
    /// so that a retry racing its original cannot pass the check twice.
    idempotence: Rc<glommio::sync::Semaphore>,
}

impl Partition {
    /// A partition over an opened log; idempotent producers' state is rebuilt from the
    /// batches of the active segment (older producers must start over, as Kafka's do
    /// once their state has expired).
    pub(super) async fn open(log: Log<UringStorage>, batching: Batching) -> sluice_io::Result<Partition> {
        let mut producers = ProducerStateTable::new(KAFKA_CACHED_BATCHES_PER_PRODUCER);
        let active = *log.segment_bases().last().expect("a log has an active segment");
        let mut reader = log.reader(active.max(log.start_offset()), 1 << 20);
        let mut headers = Vec::new();
        loop {
            let batches = reader.next().await?;
            if batches.is_empty() {
                break;
            }
            for b in batches.batches() {
                headers.push(*b?.header());
            }
        }
        producers.rebuild_from(&headers);
        Ok(Partition {
            log,
            batching,
            pending: Vec::new(),
            pending_bytes: 0,
            linger_armed: false,
            waiters: Vec::new(),
            producers,
            idempotence: Rc::new(glommio::sync::Semaphore::new(1)),
        })
    }
}

/// Reopens a partition whose log failed (a full disk, a failed write), once the device
/// has room again: recovery cuts the log back to what was written, the partition's state
/// is rebuilt from it, and appends resume. Returns false, changing nothing, while a probe
/// file of one write buffer cannot be allocated next to the log. Waiting fetches look
/// again; sends that were waiting on the failed log have had their errors.
pub(super) async fn reopen_if_room(part: &Rc<RefCell<Partition>>) -> sluice_io::Result<bool> {
    let (dir, config, batching) = {
        let pt = part.borrow();
        (pt.log.dir().to_path_buf(), pt.log.config(), pt.batching)
    };
    if !has_room(&dir, config.write_buffer_bytes as u64).await {
        return Ok(false);
    }
    let (log, _report) = Log::open(UringStorage, dir, config).await?;
    let mut fresh = Partition::open(log, batching).await?;
    // Settings changed while the log reopened are the ones to keep.
    let (latest, batching) = {
        let pt = part.borrow();
        (pt.log.config(), pt.batching)
    };
    fresh.log.reconfigure(latest)?;
    fresh.batching = batching;
    let old = std::mem::replace(&mut *part.borrow_mut(), fresh);
    for w in old.waiters {
        w.wake();
    }
    Ok(true)
}

/// Whether `bytes` can be allocated in `dir`: a probe file is allocated and removed.
async fn has_room(dir: &std::path::Path, bytes: u64) -> bool {
    use sluice_io::storage::{Storage, StorageFile};
    let probe = dir.join(".space-probe");
    let room = match UringStorage.open(&probe, true).await {
        Ok(file) => file.allocate(bytes).await.is_ok(),
        Err(_) => false,
    };
    let _ = UringStorage.remove(&probe).await;
    room
}

/// Gives a partition new settings: its log's ([`Log::reconfigure`]) and its batching.
/// Fetches parked at the end look again (under a change away from `always` they may read
/// further now).
pub(super) fn reconfigure(
    part: &Rc<RefCell<Partition>>,
    config: sluice_io::LogConfig,
    batching: Batching,
) -> sluice_io::Result<()> {
    let log = part.borrow().log.clone();
    log.reconfigure(config)?;
    part.borrow_mut().batching = batching;
    wake_all(part);
    Ok(())
}

/// Appends a batch and waits until it is as durable as the topic's policy says; the time
/// this takes is the shard's append latency (`sluice_log_append_duration_seconds`).
pub(super) async fn append(
    part: &Rc<RefCell<Partition>>,
    topic: &str,
    p: PartitionId,
    recs: &[Record<'_>],
    meta: &BatchMeta,
) -> Result<AppendInfo> {
    let started = std::time::Instant::now();
    let result = append_checked(part, topic, p, recs, meta).await;
    if result.is_ok() {
        crate::metrics::ShardCells::with(|c| c.append.record(started.elapsed()));
    }
    result
}

async fn append_checked(
    part: &Rc<RefCell<Partition>>,
    topic: &str,
    p: PartitionId,
    recs: &[Record<'_>],
    meta: &BatchMeta,
) -> Result<AppendInfo> {
    let log = part.borrow().log.clone();
    let err = |e| EngineError::log(topic, p, e);
    // Plain batches, and transaction markers (which carry their transaction's producer
    // id but no sequence), skip the idempotence check.
    if meta.producer_id == sluice_io::ProducerId::NONE || meta.attributes.is_control() {
        let info = log.append_with(recs, meta).await.map_err(err)?;
        wake_all(part);
        return Ok(info);
    }
    // An idempotent batch: check its sequence, append, and record it, with no other
    // idempotent batch of this partition in between; then wait for durability.
    let gate = part.borrow().idempotence.clone();
    let permit = gate.acquire_permit(1).await.map_err(|_| EngineError::ShutDown)?;
    let count = recs.len() as u32;
    let check = part.borrow().producers.check(meta.producer_id, meta.producer_epoch, meta.base_sequence, count);
    let info = match check {
        Err(source) => return Err(EngineError::Sequence { topic: topic.to_string(), partition: p, source }),
        Ok(SequenceCheck::Duplicate(info)) => {
            drop(permit);
            // The original may still be waiting for its fsync: so does the retry.
            log.wait_durable(info).await.map_err(err)?;
            return Ok(info);
        }
        Ok(SequenceCheck::Append) => {
            let info = log.append_unsynced(recs, meta).await.map_err(err)?;
            part.borrow_mut().producers.record(
                meta.producer_id,
                meta.producer_epoch,
                meta.base_sequence,
                count,
                info.base_offset,
                info.last_offset,
            );
            info
        }
    };
    drop(permit);
    wake_all(part);
    log.wait_durable(info).await.map_err(err)?;
    Ok(info)
}

/// Queues one record; the batch goes out when it is full or its linger ends.
pub(super) async fn enqueue(
    part: Rc<RefCell<Partition>>,
    topic: String,
    p: PartitionId,
    record: OwnedRecord,
    reply: Reply<Offset>,
) {
    let (flush_now, arm) = {
        let mut pt = part.borrow_mut();
        pt.pending_bytes += record.size();
        pt.pending.push((record, reply));
        let full = pt.pending.len() >= pt.batching.max_records || pt.pending_bytes >= pt.batching.max_bytes;
        let arm = !full && !pt.linger_armed && !pt.batching.linger.is_zero();
        if arm {
            pt.linger_armed = true;
        }
        (full || pt.batching.linger.is_zero(), arm.then_some(pt.batching.linger))
    };
    if flush_now {
        flush_pending(&part, &topic, p).await;
    } else if let Some(linger) = arm {
        glommio::spawn_local(async move {
            glommio::timer::sleep(linger).await;
            part.borrow_mut().linger_armed = false;
            flush_pending(&part, &topic, p).await;
        })
        .detach();
    }
}

pub(super) async fn flush_pending(part: &Rc<RefCell<Partition>>, topic: &str, p: PartitionId) {
    let batch = {
        let mut pt = part.borrow_mut();
        pt.pending_bytes = 0;
        std::mem::take(&mut pt.pending)
    };
    if batch.is_empty() {
        return;
    }
    let (records, replies): (Vec<OwnedRecord>, Vec<Reply<Offset>>) = batch.into_iter().unzip();
    let mut headers = Vec::new();
    let recs: Vec<Record<'_>> = OwnedRecord::as_records(&records, &mut headers);
    match append(part, topic, p, &recs, &BatchMeta::default()).await {
        Ok(info) => {
            for (i, reply) in replies.into_iter().enumerate() {
                let _ = reply.send(Ok(info.base_offset.plus(i as u64))).await;
            }
        }
        Err(e) => {
            let message = e.to_string();
            for reply in replies {
                let err = EngineError::Log {
                    topic: topic.to_string(),
                    partition: p,
                    source: sluice_io::LogError::Failed {
                        path: part.borrow().log.dir().to_path_buf(),
                        reason: message.clone(),
                    },
                };
                let _ = reply.send(Err(err)).await;
            }
        }
    }
}

pub(super) async fn fetch(
    part: &Rc<RefCell<Partition>>,
    topic: &str,
    p: PartitionId,
    offset: Offset,
    max_bytes: usize,
    wait: Duration,
) -> Result<OwnedBatches> {
    let log = part.borrow().log.clone();
    // Appends wake this once what they wrote is readable (under fsync=always, once synced).
    if offset >= log.readable_end() && offset <= log.end_offset() && !wait.is_zero() {
        let deadline = glommio::timer::sleep(wait);
        let arrived = std::future::poll_fn(|cx| {
            if log.readable_end() > offset {
                return std::task::Poll::Ready(());
            }
            let mut pt = part.borrow_mut();
            // Fetches that timed out leave their wakers behind until the next append: on
            // an idle partition, bound the list by waking them all (a spurious wake-up
            // only makes a waiting fetch look again).
            if pt.waiters.len() >= MAX_FETCH_WAITERS {
                for w in pt.waiters.drain(..) {
                    w.wake();
                }
            }
            if !pt.waiters.iter().any(|w| w.will_wake(cx.waker())) {
                pt.waiters.push(cx.waker().clone());
            }
            std::task::Poll::Pending
        });
        futures_lite::future::or(arrived, deadline).await;
    }
    let batches = log.read(offset, max_bytes).await.map_err(|e| EngineError::log(topic, p, e))?;
    Ok(batches.to_owned_batches())
}

pub(super) fn wake_all(part: &Rc<RefCell<Partition>>) {
    let waiters = std::mem::take(&mut part.borrow_mut().waiters);
    for w in waiters {
        w.wake();
    }
}
