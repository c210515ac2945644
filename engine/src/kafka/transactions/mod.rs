//! The listener's transaction coordinator: InitProducerId with a transactional id,
//! AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn.
//!
//! Each transactional id maps to a producer id and epoch, and to the transaction it has
//! open: the partitions it added, and the offsets it wants committed per group. EndTxn
//! writes a commit or abort marker ([`EngineHandle::write_marker`]) to every partition
//! the transaction added, then (on commit) commits its offsets through the engine's group
//! coordinator. A new InitProducerId for a transactional id aborts what it had open and
//! bumps the epoch, which fences the older producer (its batches and requests are
//! refused with INVALID_PRODUCER_EPOCH).
//!
//! **Persisted**, as Kafka's `__transaction_state`: every state change a client is told
//! about is first appended (fsync always) to the internal compacted topic
//! [`TRANSACTION_STATE_TOPIC`], keyed by transactional id: the producer id and epoch
//! (InitProducerId), the partitions a transaction added (AddPartitionsToTxn, before it
//! answers, so a crash cannot leave a partition with an open transaction no one knows
//! of), `prepare_commit` with the offsets to commit (EndTxn, before the first commit
//! marker) and `empty` once it ended. When the listener starts it reads that topic and
//! finishes what a crash interrupted: an ongoing transaction is aborted (markers on every
//! partition it added) and its epoch bumped, which fences the producer that had it open;
//! a `prepare_commit` one is committed again (a second marker for a decided transaction
//! changes nothing, and the offsets are the same).
//!
//! **Timeouts** are enforced: a transaction open longer than the timeout its producer
//! gave InitProducerId is aborted by the listener (checked every
//! [`TIMEOUT_CHECK`](TIMEOUT_CHECK)) and its epoch bumped, so the producer's later
//! requests are refused as from a fenced producer.
//!
//! While a state change is being persisted or markers written, other requests of that
//! transactional id get CONCURRENT_TRANSACTIONS, which clients retry. Markers wait for
//! the transactional produces already checked to finish appending, so no batch of a
//! transaction can land after its marker and leave a *hanging* transaction that holds
//! read_committed readers back forever (the race KIP-890 closes in Kafka).
//!
//! Markers and offsets are not one atomic step: the commit markers are written first,
//! then the offsets, so a failure between them makes a consume-transform-produce loop
//! read some records twice, never lose them.

pub(crate) mod requests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sluice_io::txn::Marker;
use sluice_io::{Offset, PartitionId, ProducerId, Timestamp};

use crate::config::TopicConfig;
use crate::engine::EngineHandle;
use crate::error::EngineError;
use crate::group::coordinator::CommitAuth;
use crate::group::offsets::{CommittedOffset, OffsetCommit};
use crate::record::OwnedRecord;

use super::errors::code;
use super::join::join_all;

pub use crate::topic::names::TRANSACTION_STATE_TOPIC;

/// How often the listener looks for transactions open past their timeout.
pub(crate) const TIMEOUT_CHECK: Duration = Duration::from_secs(1);

/// The longest transaction timeout accepted (Kafka's `transaction.max.timeout.ms`).
pub const TRANSACTION_TIMEOUT_MS_MAX: i32 = 15 * 60 * 1000;

/// The most transactional ids the listener keeps; past it, an id with no transaction
/// open is forgotten to make room, and if every id has one open, InitProducerId for a
/// new id gets COORDINATOR_NOT_AVAILABLE (retriable).
pub const TRANSACTIONAL_IDS_MAX: usize = 65_536;

/// Where a transactional id's transaction is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No transaction open.
    Empty,
    /// Partitions or groups were added.
    Ongoing,
    /// Markers are being written (EndTxn, or InitProducerId aborting); other requests
    /// get CONCURRENT_TRANSACTIONS and retry.
    Ending,
}

/// Offsets a transaction commits for one group (checked against the group's membership
/// when TxnOffsetCommit took them).
#[derive(Debug, Default)]
struct PendingOffsets {
    offsets: BTreeMap<(String, PartitionId), CommittedOffset>,
}

#[derive(Debug)]
struct TxnState {
    producer_id: i64,
    epoch: i16,
    phase: Phase,
    partitions: BTreeSet<(String, PartitionId)>,
    groups: BTreeMap<String, PendingOffsets>,
    /// How the last transaction ended (true: committed), so a retried EndTxn succeeds.
    last_ended: Option<bool>,
    /// The producer's transaction timeout.
    timeout_ms: i32,
    /// When the open transaction began, for its timeout.
    started: Option<Instant>,
    /// A change of this id's state is being persisted.
    persisting: bool,
    /// Transactional produces checked and not yet appended: markers wait for them, so no
    /// batch of a transaction lands after its marker (a hanging transaction).
    appending: usize,
}

impl TxnState {
    /// A state change is under way: other requests get CONCURRENT_TRANSACTIONS.
    fn busy(&self) -> bool {
        self.phase == Phase::Ending || self.persisting
    }

    fn new(producer_id: i64, epoch: i16, timeout_ms: i32) -> TxnState {
        TxnState {
            producer_id,
            epoch,
            phase: Phase::Empty,
            partitions: BTreeSet::new(),
            groups: BTreeMap::new(),
            last_ended: None,
            timeout_ms,
            started: None,
            persisting: false,
            appending: 0,
        }
    }

    /// The transaction is open from now on, if it was not already.
    fn open(&mut self) {
        if self.phase == Phase::Empty {
            self.started = Some(Instant::now());
        }
        self.phase = Phase::Ongoing;
        self.last_ended = None;
    }
}

/// What [`TRANSACTION_STATE_TOPIC`] holds for a transactional id (JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    producer_id: i64,
    epoch: i16,
    timeout_ms: i32,
    state: StoredState,
    #[serde(default)]
    partitions: Vec<(String, u32)>,
    #[serde(default)]
    offsets: Vec<StoredGroup>,
    #[serde(default)]
    last_ended: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum StoredState {
    /// No transaction open.
    Empty,
    /// A transaction with these partitions is open.
    Ongoing,
    /// EndTxn decided to commit: the markers and offsets may be partly written.
    PrepareCommit,
}

/// Offsets a committing transaction commits for one group.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredGroup {
    group: String,
    /// As the first format wrote them: (topic, partition, offset). Read, not written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    offsets: Vec<(String, u32, u64)>,
    /// With each commit's leader epoch and metadata.
    #[serde(default)]
    committed: Vec<StoredOffset>,
}

/// One partition's offset a committing transaction commits.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredOffset {
    topic: String,
    partition: u32,
    offset: u64,
    #[serde(default)]
    leader_epoch: Option<i32>,
    #[serde(default)]
    metadata: String,
}

impl Stored {
    fn empty(producer_id: i64, epoch: i16, timeout_ms: i32, last_ended: Option<bool>) -> Stored {
        Stored {
            producer_id,
            epoch,
            timeout_ms,
            state: StoredState::Empty,
            partitions: Vec::new(),
            offsets: Vec::new(),
            last_ended,
        }
    }

    fn ongoing(s: &TxnState, partitions: &BTreeSet<(String, PartitionId)>) -> Stored {
        Stored {
            state: StoredState::Ongoing,
            partitions: partitions.iter().map(|(t, p)| (t.clone(), p.get())).collect(),
            ..Stored::empty(s.producer_id, s.epoch, s.timeout_ms, None)
        }
    }

    fn prepare_commit(
        producer_id: i64,
        epoch: i16,
        timeout_ms: i32,
        partitions: &BTreeSet<(String, PartitionId)>,
        groups: &BTreeMap<String, PendingOffsets>,
    ) -> Stored {
        Stored {
            state: StoredState::PrepareCommit,
            partitions: partitions.iter().map(|(t, p)| (t.clone(), p.get())).collect(),
            offsets: groups
                .iter()
                .map(|(group, pending)| StoredGroup {
                    group: group.clone(),
                    offsets: Vec::new(),
                    committed: pending
                        .offsets
                        .iter()
                        .map(|((t, p), c)| StoredOffset {
                            topic: t.clone(),
                            partition: p.get(),
                            offset: c.offset.0,
                            leader_epoch: c.leader_epoch,
                            metadata: c.metadata.clone(),
                        })
                        .collect(),
                })
                .collect(),
            ..Stored::empty(producer_id, epoch, timeout_ms, None)
        }
    }

    fn groups(&self) -> BTreeMap<String, PendingOffsets> {
        self.offsets
            .iter()
            .map(|g| {
                let old =
                    g.offsets.iter().map(|(t, p, o)| ((t.clone(), PartitionId(*p)), CommittedOffset::at(Offset(*o))));
                let new = g.committed.iter().map(|c| {
                    let committed = CommittedOffset {
                        offset: Offset(c.offset),
                        leader_epoch: c.leader_epoch,
                        metadata: c.metadata.clone(),
                    };
                    ((c.topic.clone(), PartitionId(c.partition)), committed)
                });
                let pending = PendingOffsets { offsets: old.chain(new).collect() };
                (g.group.clone(), pending)
            })
            .collect()
    }
}

/// Appends `tid`'s new state to [`TRANSACTION_STATE_TOPIC`]; resolves once it is durable.
async fn persist(engine: &EngineHandle, tid: &str, stored: &Stored) -> Result<(), EngineError> {
    let value = serde_json::to_vec(stored).map_err(|e| EngineError::InvalidConfig(e.to_string()))?;
    let record = OwnedRecord::new(Some(tid.as_bytes().to_vec()), value, Timestamp::now());
    engine.send_to(TRANSACTION_STATE_TOPIC, PartitionId(0), record).await.map(|_| ())
}

/// Partitions of a transaction, as (topic, partition).
type Partitions = BTreeSet<(String, PartitionId)>;

/// Every transactional id the listener knows (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct TransactionCoordinator {
    txns: Mutex<HashMap<String, TxnState>>,
}

fn fenced(version_has_fenced: bool) -> i16 {
    if version_has_fenced { code::PRODUCER_FENCED } else { code::INVALID_PRODUCER_EPOCH }
}

impl TransactionCoordinator {
    /// Transactions open now (ongoing or ending), for the metrics.
    pub(crate) fn open_count(&self) -> usize {
        self.lock().values().filter(|s| s.phase != Phase::Empty).count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, TxnState>> {
        self.txns.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The state of `tid` if `producer_id` and `epoch` are its current ones.
    fn verify<'a>(
        txns: &'a mut HashMap<String, TxnState>,
        tid: &str,
        producer_id: i64,
        epoch: i16,
    ) -> Result<&'a mut TxnState, i16> {
        let s = txns.get_mut(tid).ok_or(code::INVALID_PRODUCER_ID_MAPPING)?;
        if s.producer_id != producer_id {
            return Err(code::INVALID_PRODUCER_ID_MAPPING);
        }
        if s.epoch != epoch {
            return Err(code::INVALID_PRODUCER_EPOCH);
        }
        Ok(s)
    }

    /// Whether a transactional batch of `tid` may be written to `topic`/`partition`. The
    /// guard marks the append as under way until it is dropped: hold it until the batch is
    /// appended, since the transaction's markers wait for it.
    pub(crate) fn check_produce(
        &self,
        tid: &str,
        producer_id: i64,
        epoch: i16,
        topic: &str,
        partition: PartitionId,
    ) -> Result<Appending<'_>, (i16, String)> {
        let mut txns = self.lock();
        let s = Self::verify(&mut txns, tid, producer_id, epoch).map_err(|c| {
            (c, format!("producer {producer_id} epoch {epoch} is not the current one of transactional id {tid:?}"))
        })?;
        if s.phase != Phase::Ongoing || !s.partitions.contains(&(topic.to_string(), partition)) {
            return Err((
                code::INVALID_TXN_STATE,
                format!("{topic}-{partition} was not added to transactional id {tid:?}'s transaction"),
            ));
        }
        s.appending += 1;
        Ok(Appending { coordinator: self, tid: tid.to_string() })
    }

    /// Waits until no checked transactional produce of `tid` is still appending (its phase
    /// is `Ending` by now, so no new one is let through).
    async fn drained(&self, tid: &str) {
        while self.lock().get(tid).is_some_and(|s| s.appending > 0) {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// A transactional produce between its check and its append ([`TransactionCoordinator::check_produce`]).
#[derive(Debug)]
pub(crate) struct Appending<'a> {
    coordinator: &'a TransactionCoordinator,
    tid: String,
}

impl Drop for Appending<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.coordinator.lock().get_mut(&self.tid) {
            s.appending = s.appending.saturating_sub(1);
        }
    }
}

/// Creates [`TRANSACTION_STATE_TOPIC`] if it is missing, reads it, and finishes what the
/// last run left undone (see the module docs). Returns the coordinator and a line for the
/// log when something had to be finished.
pub(crate) async fn recover(engine: &EngineHandle) -> Result<(TransactionCoordinator, Option<String>), EngineError> {
    if matches!(engine.describe_topic(TRANSACTION_STATE_TOPIC), Err(EngineError::UnknownTopic(_))) {
        // Durable before a state change is acknowledged, compacted to the latest state.
        let config = TopicConfig {
            fsync: sluice_io::FsyncPolicy::Always,
            cleanup: sluice_io::CleanupPolicy::Compact,
            segment_bytes: engine.internal_segment_bytes(),
            linger_ms: 0,
            ..TopicConfig::default()
        };
        match engine.create_topic(TRANSACTION_STATE_TOPIC, 1, Some(config)).await {
            Ok(_) | Err(EngineError::TopicExists(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let mut latest: HashMap<String, Stored> = HashMap::new();
    let (mut at, end) = engine.offsets(TRANSACTION_STATE_TOPIC, PartitionId(0)).await?;
    let mut unreadable = 0usize;
    while at < end {
        let batches = engine.fetch(TRANSACTION_STATE_TOPIC, PartitionId(0), at, 4 << 20, Duration::ZERO).await?;
        if batches.is_empty() {
            break;
        }
        for r in batches.records() {
            let r = r.map_err(|e| EngineError::log(TRANSACTION_STATE_TOPIC, PartitionId(0), e))?;
            let tid = r.key().and_then(|k| std::str::from_utf8(k).ok());
            match (tid, serde_json::from_slice::<Stored>(r.value_bytes())) {
                (Some(tid), Ok(stored)) => {
                    latest.insert(tid.to_string(), stored);
                }
                _ => unreadable += 1,
            }
        }
        at = batches.next_offset();
    }
    let (mut aborted, mut committed) = (0, 0);
    let mut txns = HashMap::with_capacity(latest.len());
    for (tid, stored) in latest {
        let partitions: BTreeSet<(String, PartitionId)> =
            stored.partitions.iter().map(|(t, p)| (t.clone(), PartitionId(*p))).collect();
        let state = match stored.state {
            StoredState::Empty => {
                let mut s = TxnState::new(stored.producer_id, stored.epoch, stored.timeout_ms);
                s.last_ended = stored.last_ended;
                s
            }
            StoredState::Ongoing => {
                let (id, epoch) =
                    abort_and_fence(engine, &tid, stored.producer_id, stored.epoch, stored.timeout_ms, &partitions)
                        .await?;
                aborted += 1;
                let mut s = TxnState::new(id, epoch, stored.timeout_ms);
                s.last_ended = Some(false);
                s
            }
            StoredState::PrepareCommit => {
                write_markers(engine, stored.producer_id, &partitions, Marker::Commit).await?;
                commit_group_offsets(engine, &stored.groups()).await?;
                persist(engine, &tid, &Stored::empty(stored.producer_id, stored.epoch, stored.timeout_ms, Some(true)))
                    .await?;
                committed += 1;
                let mut s = TxnState::new(stored.producer_id, stored.epoch, stored.timeout_ms);
                s.last_ended = Some(true);
                s
            }
        };
        txns.insert(tid, state);
    }
    let note = (aborted + committed + unreadable > 0).then(|| {
        format!(
            "sluice kafka listener: {} transactional ids restored; {aborted} open transactions aborted, \
             {committed} decided commits completed, {unreadable} unreadable state records skipped",
            txns.len()
        )
    });
    Ok((TransactionCoordinator { txns: Mutex::new(txns) }, note))
}

/// Aborts `producer_id`'s transaction in `partitions`, bumps the epoch (a new producer id
/// once the epoch runs out) and persists the id's state as empty. Returns the new producer
/// id and epoch.
async fn abort_and_fence(
    engine: &EngineHandle,
    tid: &str,
    producer_id: i64,
    epoch: i16,
    timeout_ms: i32,
    partitions: &BTreeSet<(String, PartitionId)>,
) -> Result<(i64, i16), EngineError> {
    write_markers(engine, producer_id, partitions, Marker::Abort).await?;
    let (id, epoch) =
        if epoch >= i16::MAX - 1 { (engine.init_producer_id().await?.0, 0) } else { (producer_id, epoch + 1) };
    persist(engine, tid, &Stored::empty(id, epoch, timeout_ms, Some(false))).await?;
    Ok((id, epoch))
}

/// Commits a committing transaction's group offsets. The commit is decided, so it is not
/// checked against the group's membership again (as Kafka writes a committed
/// transaction's offsets): a member that has left since, or a group that rebalanced, does
/// not undo it.
async fn commit_group_offsets(
    engine: &EngineHandle,
    groups: &BTreeMap<String, PendingOffsets>,
) -> Result<(), EngineError> {
    for (group, pending) in groups {
        let offsets: Vec<OffsetCommit> = pending.offsets.iter().map(|((t, p), c)| (t.clone(), *p, c.clone())).collect();
        if offsets.is_empty() {
            continue;
        }
        engine.commit_offsets_as(group, CommitAuth::Transaction, offsets).await?;
    }
    Ok(())
}

async fn write_markers(
    engine: &EngineHandle,
    producer_id: i64,
    partitions: &BTreeSet<(String, PartitionId)>,
    marker: Marker,
) -> Result<(), EngineError> {
    type Write<'a> = std::pin::Pin<Box<dyn futures_lite::Future<Output = Result<(), EngineError>> + 'a>>;
    let work: Vec<Write<'_>> = partitions
        .iter()
        .map(|(t, p)| {
            Box::pin(async move { engine.write_marker(t, *p, ProducerId(producer_id), marker).await.map(|_| ()) })
                as Write<'_>
        })
        .collect();
    join_all(work).await.into_iter().collect()
}
