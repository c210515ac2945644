//! A shard: one glommio executor pinned to a CPU, owning the partition logs assigned to
//! it. It serves requests from the engine handle (which any thread may hold) one task per
//! request, so appends that arrive together share a group commit.
//!
//! Contract: only this shard's executor touches its logs; everything in [`ShardState`]
//! is `!Send` and lives on that executor. Requests and replies cross threads through
//! bounded channels; records cross as owned bytes.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::task::Waker;
use std::time::Duration;

use sluice_io::{AppendInfo, BatchMeta, Log, LogConfig, Offset, OwnedBatches, Record, Timestamp, UringStorage};

use crate::error::{EngineError, Result};

/// A record handed to the engine: owned, so it can cross threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedRecord {
    /// The key, if any.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Vec<u8>,
    /// When the event happened.
    pub event_time: Timestamp,
}

impl OwnedRecord {
    /// Key plus value bytes, the size limits apply to.
    #[must_use]
    pub fn size(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len) + self.value.len()
    }

    fn as_record(&self) -> Record<'_> {
        Record { key: self.key.as_deref(), value: &self.value, event_time: self.event_time, headers: &[] }
    }
}

/// A reply channel for one request.
pub(crate) type Reply<T> = async_channel::Sender<Result<T>>;

/// How a partition batches single-record sends.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Batching {
    pub(crate) linger: Duration,
    pub(crate) max_records: usize,
    pub(crate) max_bytes: usize,
}

/// What the handle asks of a shard.
pub(crate) enum Request {
    /// Open (creating if needed) a partition log.
    Open { topic: String, partition: u32, dir: PathBuf, config: LogConfig, batching: Batching, reply: Reply<()> },
    /// Close a partition log and delete its directory.
    Delete { topic: String, partition: u32, reply: Reply<()> },
    /// Append one record, batched with others per the partition's linger.
    Send { topic: String, partition: u32, record: OwnedRecord, reply: Reply<Offset> },
    /// Append records as one batch, now.
    Append { topic: String, partition: u32, records: Vec<OwnedRecord>, meta: BatchMeta, reply: Reply<AppendInfo> },
    /// Read batches from an offset, waiting up to `wait` for data at the end of the log.
    Fetch {
        topic: String,
        partition: u32,
        offset: Offset,
        max_bytes: usize,
        wait: Duration,
        reply: Reply<OwnedBatches>,
    },
    /// The log start and end offsets.
    Offsets { topic: String, partition: u32, reply: Reply<(Offset, Offset)> },
    /// The first offset at or after a time.
    OffsetForTime { topic: String, partition: u32, time: Timestamp, reply: Reply<Option<Offset>> },
    /// Flush and close every log, then stop.
    Shutdown { reply: Reply<()> },
}

/// One partition on its shard.
struct Partition {
    log: Log<UringStorage>,
    batching: Batching,
    pending: Vec<(OwnedRecord, Reply<Offset>)>,
    pending_bytes: usize,
    linger_armed: bool,
    /// Fetches waiting for data past the end.
    waiters: Vec<Waker>,
}

type Key = (String, u32);

/// Everything a shard owns.
#[derive(Default)]
struct ShardState {
    partitions: HashMap<Key, Rc<RefCell<Partition>>>,
}

/// Runs a shard until it is told to shut down or every sender is gone.
pub(crate) async fn run(requests: async_channel::Receiver<Request>) {
    let state = Rc::new(RefCell::new(ShardState::default()));
    while let Ok(request) = requests.recv().await {
        if let Request::Shutdown { reply } = request {
            let result = shutdown(&state).await;
            let _ = reply.send(result).await;
            return;
        }
        let state = state.clone();
        glommio::spawn_local(async move { handle(&state, request).await }).detach();
    }
    let _ = shutdown(&state).await;
}

fn partition(state: &Rc<RefCell<ShardState>>, topic: &str, p: u32) -> Result<Rc<RefCell<Partition>>> {
    state
        .borrow()
        .partitions
        .get(&(topic.to_string(), p))
        .cloned()
        .ok_or_else(|| EngineError::UnknownTopic(topic.to_string()))
}

async fn handle(state: &Rc<RefCell<ShardState>>, request: Request) {
    match request {
        Request::Open { topic, partition: p, dir, config, batching, reply } => {
            let result = match Log::open(UringStorage, dir, config).await {
                Ok((log, _report)) => {
                    let part = Partition {
                        log,
                        batching,
                        pending: Vec::new(),
                        pending_bytes: 0,
                        linger_armed: false,
                        waiters: Vec::new(),
                    };
                    state.borrow_mut().partitions.insert((topic, p), Rc::new(RefCell::new(part)));
                    Ok(())
                }
                Err(e) => Err(EngineError::log(&topic, p, e)),
            };
            let _ = reply.send(result).await;
        }
        Request::Delete { topic, partition: p, reply } => {
            let removed = state.borrow_mut().partitions.remove(&(topic.clone(), p));
            let result = match removed {
                None => Ok(()),
                Some(part) => {
                    let log = part.borrow().log.clone();
                    let dir = log.dir().to_path_buf();
                    let _ = log.close().await;
                    wake_all(&part);
                    std::fs::remove_dir_all(&dir).map_err(|source| EngineError::Io {
                        op: "deleting",
                        path: dir,
                        source,
                    })
                }
            };
            let _ = reply.send(result).await;
        }
        Request::Send { topic, partition: p, record, reply } => match partition(state, &topic, p) {
            Err(e) => {
                let _ = reply.send(Err(e)).await;
            }
            Ok(part) => enqueue(part, topic, p, record, reply).await,
        },
        Request::Append { topic, partition: p, records, meta, reply } => {
            let result = match partition(state, &topic, p) {
                Err(e) => Err(e),
                Ok(part) => append(&part, &topic, p, &records, &meta).await,
            };
            let _ = reply.send(result).await;
        }
        Request::Fetch { topic, partition: p, offset, max_bytes, wait, reply } => {
            let result = match partition(state, &topic, p) {
                Err(e) => Err(e),
                Ok(part) => fetch(&part, &topic, p, offset, max_bytes, wait).await,
            };
            let _ = reply.send(result).await;
        }
        Request::Offsets { topic, partition: p, reply } => {
            let result = partition(state, &topic, p).map(|part| {
                let log = &part.borrow().log;
                (log.start_offset(), log.end_offset())
            });
            let _ = reply.send(result).await;
        }
        Request::OffsetForTime { topic, partition: p, time, reply } => {
            let result = match partition(state, &topic, p) {
                Err(e) => Err(e),
                Ok(part) => {
                    let log = part.borrow().log.clone();
                    log.offset_for_time(time).await.map_err(|e| EngineError::log(&topic, p, e))
                }
            };
            let _ = reply.send(result).await;
        }
        Request::Shutdown { .. } => unreachable!("handled by the loop"),
    }
}

async fn append(
    part: &Rc<RefCell<Partition>>,
    topic: &str,
    p: u32,
    records: &[OwnedRecord],
    meta: &BatchMeta,
) -> Result<AppendInfo> {
    let log = part.borrow().log.clone();
    let recs: Vec<Record<'_>> = records.iter().map(OwnedRecord::as_record).collect();
    let info = log.append_with(&recs, meta).await.map_err(|e| EngineError::log(topic, p, e))?;
    wake_all(part);
    Ok(info)
}

/// Queues one record; the batch goes out when it is full or its linger ends.
async fn enqueue(part: Rc<RefCell<Partition>>, topic: String, p: u32, record: OwnedRecord, reply: Reply<Offset>) {
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

async fn flush_pending(part: &Rc<RefCell<Partition>>, topic: &str, p: u32) {
    let batch = {
        let mut pt = part.borrow_mut();
        pt.pending_bytes = 0;
        std::mem::take(&mut pt.pending)
    };
    if batch.is_empty() {
        return;
    }
    let (records, replies): (Vec<OwnedRecord>, Vec<Reply<Offset>>) = batch.into_iter().unzip();
    match append(part, topic, p, &records, &BatchMeta::default()).await {
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

async fn fetch(
    part: &Rc<RefCell<Partition>>,
    topic: &str,
    p: u32,
    offset: Offset,
    max_bytes: usize,
    wait: Duration,
) -> Result<OwnedBatches> {
    let log = part.borrow().log.clone();
    if offset == log.end_offset() && !wait.is_zero() {
        let deadline = glommio::timer::sleep(wait);
        let arrived = std::future::poll_fn(|cx| {
            if log.end_offset() > offset {
                return std::task::Poll::Ready(());
            }
            part.borrow_mut().waiters.push(cx.waker().clone());
            std::task::Poll::Pending
        });
        futures_lite::future::or(arrived, deadline).await;
    }
    let batches = log.read(offset, max_bytes).await.map_err(|e| EngineError::log(topic, p, e))?;
    Ok(batches.to_owned_batches())
}

fn wake_all(part: &Rc<RefCell<Partition>>) {
    let waiters = std::mem::take(&mut part.borrow_mut().waiters);
    for w in waiters {
        w.wake();
    }
}

async fn shutdown(state: &Rc<RefCell<ShardState>>) -> Result<()> {
    let parts: Vec<(Key, Rc<RefCell<Partition>>)> = state.borrow_mut().partitions.drain().collect();
    let mut first_error = None;
    for ((topic, p), part) in parts {
        let log = part.borrow().log.clone();
        if let Err(e) = log.close().await {
            first_error.get_or_insert(EngineError::log(&topic, p, e));
        }
        wake_all(&part);
    }
    first_error.map_or(Ok(()), Err)
}
