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

use std::collections::BTreeMap;
use std::time::Instant;

use sluice_io::{AppendInfo, BatchMeta, Log, LogConfig, Offset, OwnedBatches, Record, Timestamp, UringStorage};

use crate::assignor::MemberId;
use crate::coordinator::{Coordinator, GroupDescription, JoinRequest, MemberState};
use crate::error::{EngineError, Result};
use crate::offsets::{self, Committed};
use crate::producer_state::{KAFKA_CACHED_BATCHES_PER_PRODUCER, ProducerStateTable, SequenceCheck};

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

/// Records whose keys and values are ranges of one shared buffer, such as a Kafka record
/// batch as it arrived: appended with no allocation or copy per record before the log
/// encodes them. Cheap to clone and to send to another shard (the buffer is shared).
#[derive(Clone, Debug, Default)]
pub struct PackedRecords {
    data: bytes::Bytes,
    records: Vec<PackedRecord>,
}

/// 24 bytes: offsets into the buffer (at most 4 GiB), a key start of `NO_KEY` for none.
#[derive(Clone, Copy, Debug)]
struct PackedRecord {
    key: (u32, u32),
    value: (u32, u32),
    event_time: Timestamp,
}

const NO_KEY: u32 = u32::MAX;

impl PackedRecords {
    /// No records yet, over `data`, with room for `capacity` of them.
    #[must_use]
    pub fn with_capacity(data: bytes::Bytes, capacity: usize) -> Self {
        PackedRecords { data, records: Vec::with_capacity(capacity) }
    }

    /// Adds a record whose key (if any) and value are ranges of the buffer; refused if a
    /// range does not lie within it.
    pub fn push(
        &mut self,
        key: Option<std::ops::Range<usize>>,
        value: std::ops::Range<usize>,
        event_time: Timestamp,
    ) -> Result<()> {
        let len = self.data.len();
        let check = |r: &std::ops::Range<usize>| match (u32::try_from(r.start), u32::try_from(r.end)) {
            (Ok(start), Ok(end)) if start <= end && r.end <= len && start != NO_KEY => Ok((start, end)),
            _ => Err(EngineError::InvalidConfig(format!("record bytes {r:?} lie outside a buffer of {len} bytes"))),
        };
        let key = key.as_ref().map_or(Ok((NO_KEY, NO_KEY)), check)?;
        let value = check(&value)?;
        self.records.push(PackedRecord { key, value, event_time });
        Ok(())
    }

    /// [`push`](Self::push) for ranges the caller took from the buffer itself (slices of
    /// it, as a decoder does), over a buffer shorter than `u32::MAX`: nothing to check.
    #[inline]
    pub(crate) fn push_within(
        &mut self,
        key: Option<std::ops::Range<usize>>,
        value: std::ops::Range<usize>,
        event_time: Timestamp,
    ) {
        debug_assert!(self.data.len() < NO_KEY as usize);
        debug_assert!(key.iter().chain([&value]).all(|r| r.start <= r.end && r.end <= self.data.len()));
        let key = key.map_or((NO_KEY, NO_KEY), |k| (k.start as u32, k.end as u32));
        self.records.push(PackedRecord { key, value: (value.start as u32, value.end as u32), event_time });
    }

    /// How many records.
    #[must_use]
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Each record's key plus value bytes (what the size limit applies to), from its ranges.
    pub(crate) fn sizes(&self) -> impl Iterator<Item = usize> + '_ {
        let len = |(a, b): (u32, u32)| (b - a) as usize;
        self.records.iter().map(move |r| if r.key.0 == NO_KEY { 0 } else { len(r.key) } + len(r.value))
    }

    /// The records, borrowing the buffer.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Record<'_>> {
        let at = |(a, b): (u32, u32)| &self.data[a as usize..b as usize];
        self.records.iter().map(move |r| Record {
            key: (r.key.0 != NO_KEY).then(|| at(r.key)),
            value: at(r.value),
            event_time: r.event_time,
            headers: &[],
        })
    }

    /// The records as owned ones (for tests and for callers that want to keep them).
    #[must_use]
    pub fn to_owned_records(&self) -> Vec<OwnedRecord> {
        self.iter()
            .map(|r| OwnedRecord { key: r.key.map(<[u8]>::to_vec), value: r.value.to_vec(), event_time: r.event_time })
            .collect()
    }
}

/// The records of an append: owned one by one, or packed in one buffer.
#[derive(Debug)]
pub(crate) enum AppendRecords {
    Owned(Vec<OwnedRecord>),
    Packed(PackedRecords),
}

impl AppendRecords {
    /// Each record's key plus value bytes, which the size limit applies to.
    pub(crate) fn sizes(&self) -> impl Iterator<Item = usize> + '_ {
        let (owned, packed) = match self {
            AppendRecords::Owned(v) => (Some(v.iter().map(OwnedRecord::size)), None),
            AppendRecords::Packed(p) => (None, Some(p.sizes())),
        };
        owned.into_iter().flatten().chain(packed.into_iter().flatten())
    }

    pub(crate) fn is_empty(&self) -> bool {
        match self {
            AppendRecords::Owned(v) => v.is_empty(),
            AppendRecords::Packed(p) => p.is_empty(),
        }
    }

    fn as_records(&self) -> Vec<Record<'_>> {
        match self {
            AppendRecords::Owned(v) => v.iter().map(OwnedRecord::as_record).collect(),
            AppendRecords::Packed(p) => p.iter().collect(),
        }
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
    Append { topic: String, partition: u32, records: AppendRecords, meta: BatchMeta, reply: Reply<AppendInfo> },
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
    /// Make everything appended so far durable (written and fdatasync'd), whatever the
    /// partition's fsync policy; answers the durable end.
    Sync { topic: String, partition: u32, reply: Reply<Offset> },
    /// The first offset at or after a time.
    OffsetForTime { topic: String, partition: u32, time: Timestamp, reply: Reply<Option<Offset>> },
    /// A member joins a group this shard coordinates.
    GroupJoin { group: String, req: JoinRequest, partitions: BTreeMap<String, u32>, reply: Reply<MemberState> },
    /// A member fetches its assignment for a generation.
    GroupSync { group: String, member: MemberId, generation: u32, reply: Reply<MemberState> },
    /// A member's heartbeat.
    GroupHeartbeat { group: String, member: MemberId, partitions: BTreeMap<String, u32>, reply: Reply<MemberState> },
    /// A member leaves.
    GroupLeave { group: String, member: MemberId, reply: Reply<()> },
    /// Commit offsets to the group's partition of the offsets topic.
    GroupCommit {
        group: String,
        member: Option<(MemberId, u32)>,
        offsets_partition: u32,
        offsets: Vec<(String, u32, Offset)>,
        reply: Reply<()>,
    },
    /// A group's committed offsets.
    GroupOffsets { group: String, reply: Reply<Committed> },
    /// A group's members and assignment.
    GroupDescribe { group: String, reply: Reply<Option<GroupDescription>> },
    /// The groups this shard coordinates or holds offsets of.
    GroupList { reply: Reply<Vec<String>> },
    /// Run host code on this shard's executor ([`EngineHandle::run_on`]).
    ///
    /// [`EngineHandle::run_on`]: crate::EngineHandle::run_on
    Run { task: LocalTask },
    /// Flush and close every log, then stop.
    Shutdown { reply: Reply<()> },
}

/// A task sent to a shard: built on the shard's thread, then polled there.
pub(crate) type LocalTask = Box<dyn FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> + Send>;

/// One partition on its shard.
struct Partition {
    log: Log<UringStorage>,
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
    async fn open(log: Log<UringStorage>, batching: Batching) -> sluice_io::Result<Partition> {
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

type Key = (String, u32);

/// Everything a shard owns.
#[derive(Default)]
struct ShardState {
    partitions: HashMap<Key, Rc<RefCell<Partition>>>,
    /// The consumer groups whose offsets-topic partition lives here.
    coordinator: Coordinator,
    /// Committed offsets by group, as read from and written to the offsets topic.
    committed: HashMap<String, Committed>,
}

/// Wakers of waiting fetches kept per partition before the stale ones are flushed.
const MAX_FETCH_WAITERS: usize = 256;

/// How often a shard looks for members whose session timed out.
const EXPIRY_CHECK: Duration = Duration::from_millis(25);

/// Runs a shard until it is told to shut down or every sender is gone.
pub(crate) async fn run(requests: async_channel::Receiver<Request>) {
    let state = Rc::new(RefCell::new(ShardState::default()));
    let expiry = Rc::downgrade(&state);
    glommio::spawn_local(async move {
        loop {
            glommio::timer::sleep(EXPIRY_CHECK).await;
            let Some(state) = expiry.upgrade() else { return };
            state.borrow_mut().coordinator.expire(Instant::now());
        }
    })
    .detach();
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
                Ok((log, _report)) if topic == offsets::TOPIC => match offsets::load(&log).await {
                    Ok(loaded) => match Partition::open(log, batching).await {
                        Ok(part) => {
                            let mut st = state.borrow_mut();
                            for (group, offsets) in loaded {
                                st.committed.entry(group).or_default().extend(offsets);
                            }
                            st.partitions.insert((topic, p), Rc::new(RefCell::new(part)));
                            Ok(())
                        }
                        Err(e) => Err(EngineError::log(&topic, p, e)),
                    },
                    Err(e) => Err(EngineError::log(&topic, p, e)),
                },
                Ok((log, _report)) => match Partition::open(log, batching).await {
                    Ok(part) => {
                        state.borrow_mut().partitions.insert((topic, p), Rc::new(RefCell::new(part)));
                        Ok(())
                    }
                    Err(e) => Err(EngineError::log(&topic, p, e)),
                },
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
                Ok(part) => append(&part, &topic, p, &records.as_records(), &meta).await,
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
        Request::Sync { topic, partition: p, reply } => {
            let result = match partition(state, &topic, p) {
                Err(e) => Err(e),
                Ok(part) => {
                    let log = part.borrow().log.clone();
                    log.flush().await.map(|()| log.durable_offset()).map_err(|e| EngineError::log(&topic, p, e))
                }
            };
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
        Request::GroupJoin { group, req, partitions, reply } => {
            let result = state.borrow_mut().coordinator.join(&group, req, partitions, Instant::now());
            let _ = reply.send(result).await;
        }
        Request::GroupSync { group, member, generation, reply } => {
            let result = state.borrow_mut().coordinator.sync(&group, &member, generation, Instant::now());
            let _ = reply.send(result).await;
        }
        Request::GroupHeartbeat { group, member, partitions, reply } => {
            let result = state.borrow_mut().coordinator.heartbeat(&group, &member, partitions, Instant::now());
            let _ = reply.send(result).await;
        }
        Request::GroupLeave { group, member, reply } => {
            let result = state.borrow_mut().coordinator.leave(&group, &member);
            let _ = reply.send(result).await;
        }
        Request::GroupCommit { group, member, offsets_partition, offsets, reply } => {
            let result = commit(state, &group, member, offsets_partition, offsets).await;
            let _ = reply.send(result).await;
        }
        Request::GroupOffsets { group, reply } => {
            let committed = state.borrow().committed.get(&group).cloned().unwrap_or_default();
            let _ = reply.send(Ok(committed)).await;
        }
        Request::GroupDescribe { group, reply } => {
            let described = state.borrow().coordinator.describe(&group);
            let _ = reply.send(Ok(described)).await;
        }
        Request::GroupList { reply } => {
            let mut groups: Vec<String> = {
                let st = state.borrow();
                st.coordinator.groups().map(str::to_string).chain(st.committed.keys().cloned()).collect()
            };
            groups.sort();
            groups.dedup();
            let _ = reply.send(Ok(groups)).await;
        }
        Request::Run { task } => task().await,
        Request::Shutdown { .. } => unreachable!("handled by the loop"),
    }
}

/// Checks a commit against the group's generation, appends it to the offsets topic (as
/// durable as that topic's policy: `always`), then makes it visible.
async fn commit(
    state: &Rc<RefCell<ShardState>>,
    group: &str,
    member: Option<(MemberId, u32)>,
    offsets_partition: u32,
    offsets: Vec<(String, u32, Offset)>,
) -> Result<()> {
    state.borrow().coordinator.check_commit(group, member.as_ref().map(|(m, g)| (m, *g)))?;
    let part = partition(state, offsets::TOPIC, offsets_partition)?;
    let records = offsets::records(group, &offsets);
    let recs: Vec<Record<'_>> = records.iter().map(OwnedRecord::as_record).collect();
    append(&part, offsets::TOPIC, offsets_partition, &recs, &BatchMeta::default()).await?;
    let mut st = state.borrow_mut();
    let committed = st.committed.entry(group.to_string()).or_default();
    for (topic, p, offset) in offsets {
        committed.insert((topic, p), offset);
    }
    Ok(())
}

async fn append(
    part: &Rc<RefCell<Partition>>,
    topic: &str,
    p: u32,
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
    let recs: Vec<Record<'_>> = records.iter().map(OwnedRecord::as_record).collect();
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
        // Sends still lingering are appended and answered before the log closes.
        flush_pending(&part, &topic, p).await;
        let log = part.borrow().log.clone();
        if let Err(e) = log.close().await {
            first_error.get_or_insert(EngineError::log(&topic, p, e));
        }
        wake_all(&part);
    }
    first_error.map_or(Ok(()), Err)
}
