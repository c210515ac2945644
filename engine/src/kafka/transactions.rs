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
//! Not persisted: the map lives in the listener's memory and is lost on restart. A
//! transaction open at that moment is never ended: no marker for its producer id is
//! written, and it holds back read_committed readers of its partitions from its first
//! batch on.
//! Transaction timeouts are validated but not enforced: a producer that dies mid
//! transaction keeps it open until its transactional id is initialized again.
//!
//! Markers and offsets are not one atomic step: the commit markers are written first,
//! then the offsets, so a failure between them makes a consume-transform-produce loop
//! read some records twice, never lose them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    EndTxnRequest, EndTxnResponse, InitProducerIdRequest, InitProducerIdResponse, ProducerId as WireProducerId,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use sluice_io::txn::Marker;
use sluice_io::{Offset, ProducerId};

use crate::assignor::MemberId;
use crate::engine::EngineHandle;
use crate::error::EngineError;
use crate::names::validate_name;

use super::data::join_all;
use super::errors::{self, code};
use super::listener::Context;

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

/// Offsets a transaction commits for one group.
#[derive(Debug, Default)]
struct PendingOffsets {
    member: Option<(MemberId, u32)>,
    offsets: BTreeMap<(String, u32), Offset>,
}

#[derive(Debug)]
struct TxnState {
    producer_id: i64,
    epoch: i16,
    phase: Phase,
    partitions: BTreeSet<(String, u32)>,
    groups: BTreeMap<String, PendingOffsets>,
    /// How the last transaction ended (true: committed), so a retried EndTxn succeeds.
    last_ended: Option<bool>,
}

/// Every transactional id the listener knows (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Coordinator {
    txns: Mutex<HashMap<String, TxnState>>,
}

fn fenced(version_has_fenced: bool) -> i16 {
    if version_has_fenced { code::PRODUCER_FENCED } else { code::INVALID_PRODUCER_EPOCH }
}

impl Coordinator {
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

    /// Whether a transactional batch of `tid` may be written to `topic`/`partition`.
    pub(crate) fn check_produce(
        &self,
        tid: &str,
        producer_id: i64,
        epoch: i16,
        topic: &str,
        partition: u32,
    ) -> Result<(), (i16, String)> {
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
        Ok(())
    }
}

async fn write_markers(
    engine: &EngineHandle,
    producer_id: i64,
    partitions: &BTreeSet<(String, u32)>,
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

fn validate_tid(tid: &str) -> Result<(), i16> {
    if tid.is_empty() { Err(code::INVALID_REQUEST) } else { Ok(()) }
}

/// Handles an InitProducerId request with a transactional id.
pub(crate) async fn init_producer_id(
    ctx: &Arc<Context>,
    req: &InitProducerIdRequest,
    tid: &str,
    version: i16,
) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse::default();
    resp.producer_id = WireProducerId(-1);
    resp.producer_epoch = -1;
    match init(ctx, req, tid, version).await {
        Ok((id, epoch)) => {
            resp.producer_id = WireProducerId(id);
            resp.producer_epoch = epoch;
        }
        Err(c) => resp.error_code = c,
    }
    resp
}

async fn init(ctx: &Arc<Context>, req: &InitProducerIdRequest, tid: &str, version: i16) -> Result<(i64, i16), i16> {
    validate_tid(tid)?;
    if !(1..=TRANSACTION_TIMEOUT_MS_MAX).contains(&req.transaction_timeout_ms) {
        return Err(code::INVALID_TRANSACTION_TIMEOUT);
    }
    let coordinator = &ctx.txns;
    let (given_id, given_epoch) = (req.producer_id.0, req.producer_epoch);
    // Take what the id has open, and keep others out while it is aborted.
    let (open, producer_id, new_id) = {
        let mut txns = coordinator.lock();
        match txns.get_mut(tid) {
            None => {
                if txns.len() >= TRANSACTIONAL_IDS_MAX {
                    // Forget an id with nothing open (its producer, if it comes back, is
                    // still fenced: its producer id no longer maps to anything).
                    let idle = txns.iter().find(|(_, s)| s.phase == Phase::Empty).map(|(k, _)| k.clone());
                    match idle {
                        Some(k) => txns.remove(&k),
                        None => return Err(code::COORDINATOR_NOT_AVAILABLE),
                    };
                }
                (None, -1, true)
            }
            Some(s) => {
                if s.phase == Phase::Ending {
                    return Err(code::CONCURRENT_TRANSACTIONS);
                }
                if given_id != -1 && (given_id != s.producer_id || given_epoch != s.epoch) {
                    return Err(fenced(version >= 4));
                }
                let open = (s.phase == Phase::Ongoing).then(|| std::mem::take(&mut s.partitions));
                s.phase = Phase::Ending;
                (open, s.producer_id, s.epoch >= i16::MAX - 1)
            }
        }
    };
    let result: Result<Option<i64>, EngineError> = async {
        if let Some(parts) = &open {
            write_markers(&ctx.engine, producer_id, parts, Marker::Abort).await?;
        }
        if new_id { Ok(Some(ctx.engine.init_producer_id().await?.0)) } else { Ok(None) }
    }
    .await;
    let mut txns = coordinator.lock();
    match result {
        Err(e) => {
            if let Some(s) = txns.get_mut(tid) {
                if let Some(parts) = open {
                    s.partitions = parts;
                    s.phase = Phase::Ongoing;
                } else {
                    s.phase = Phase::Empty;
                }
            }
            eprintln!("sluice kafka listener: InitProducerId for transactional id {tid:?}: {e}");
            Err(errors::of(&e))
        }
        Ok(fresh) => {
            let s = txns.entry(tid.to_string()).or_insert(TxnState {
                producer_id: -1,
                epoch: -1,
                phase: Phase::Empty,
                partitions: BTreeSet::new(),
                groups: BTreeMap::new(),
                last_ended: None,
            });
            match fresh {
                Some(id) => {
                    s.producer_id = id;
                    s.epoch = 0;
                }
                None => s.epoch += 1,
            }
            s.phase = Phase::Empty;
            s.partitions.clear();
            s.groups.clear();
            s.last_ended = None;
            Ok((s.producer_id, s.epoch))
        }
    }
}

/// Handles an AddPartitionsToTxn request (versions 0-3: one transaction).
pub(crate) fn add_partitions(ctx: &Arc<Context>, req: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse {
    let tid = req.v3_and_below_transactional_id.0.as_str();
    // Every partition must exist; otherwise none is added.
    let mut codes: Vec<(usize, i32, i16)> = Vec::new();
    for (ti, t) in req.v3_and_below_topics.iter().enumerate() {
        let count = ctx.engine.describe_topic(t.name.0.as_str()).map(|d| d.shards.len()).ok();
        for &p in &t.partitions {
            let ok = count.is_some_and(|n| usize::try_from(p).is_ok_and(|p| p < n));
            codes.push((ti, p, if ok { code::NONE } else { code::UNKNOWN_TOPIC_OR_PARTITION }));
        }
    }
    let shared = {
        let mut txns = ctx.txns.lock();
        match Coordinator::verify(&mut txns, tid, req.v3_and_below_producer_id.0, req.v3_and_below_producer_epoch) {
            Err(c) => Some(c),
            Ok(s) if s.phase == Phase::Ending => Some(code::CONCURRENT_TRANSACTIONS),
            Ok(s) => {
                if codes.iter().all(|c| c.2 == code::NONE) {
                    for (ti, p, _) in &codes {
                        let name = req.v3_and_below_topics[*ti].name.0.as_str().to_string();
                        s.partitions.insert((name, *p as u32));
                    }
                    if !codes.is_empty() {
                        s.phase = Phase::Ongoing;
                        s.last_ended = None;
                    }
                } else {
                    for c in &mut codes {
                        if c.2 == code::NONE {
                            c.2 = code::OPERATION_NOT_ATTEMPTED;
                        }
                    }
                }
                None
            }
        }
    };
    let mut resp = AddPartitionsToTxnResponse::default();
    for (ti, t) in req.v3_and_below_topics.iter().enumerate() {
        let mut tr = AddPartitionsToTxnTopicResult::default();
        tr.name = t.name.clone();
        for &(_, p, c) in codes.iter().filter(|c| c.0 == ti) {
            let mut pr = AddPartitionsToTxnPartitionResult::default();
            pr.partition_index = p;
            pr.partition_error_code = shared.unwrap_or(c);
            tr.results_by_partition.push(pr);
        }
        resp.results_by_topic_v3_and_below.push(tr);
    }
    resp
}

/// Handles an AddOffsetsToTxn request: the group's offsets will be committed with the
/// transaction.
pub(crate) fn add_offsets(ctx: &Arc<Context>, req: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse {
    let mut resp = AddOffsetsToTxnResponse::default();
    let group = req.group_id.0.as_str();
    if validate_name("group", group).is_err() {
        resp.error_code = code::INVALID_GROUP_ID;
        return resp;
    }
    let mut txns = ctx.txns.lock();
    resp.error_code =
        match Coordinator::verify(&mut txns, req.transactional_id.0.as_str(), req.producer_id.0, req.producer_epoch) {
            Err(c) => c,
            Ok(s) if s.phase == Phase::Ending => code::CONCURRENT_TRANSACTIONS,
            Ok(s) => {
                s.groups.entry(group.to_string()).or_default();
                s.phase = Phase::Ongoing;
                s.last_ended = None;
                code::NONE
            }
        };
    resp
}

/// Handles a TxnOffsetCommit request: the offsets are kept until EndTxn.
pub(crate) fn txn_offset_commit(ctx: &Arc<Context>, req: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse {
    let group = req.group_id.0.as_str();
    let member = (!req.member_id.is_empty() && req.generation_id >= 0)
        .then(|| (MemberId::new(req.member_id.as_str()), req.generation_id as u32));
    let mut codes: Vec<(usize, i32, i16)> = Vec::new();
    let mut offsets = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        let count = ctx.engine.describe_topic(t.name.0.as_str()).map(|d| d.shards.len()).ok();
        for p in &t.partitions {
            let i = p.partition_index;
            let c = match (count, u32::try_from(i), u64::try_from(p.committed_offset)) {
                (Some(n), Ok(pi), Ok(o)) if (pi as usize) < n => {
                    offsets.push(((t.name.0.as_str().to_string(), pi), Offset(o)));
                    code::NONE
                }
                (_, _, Err(_)) => code::INVALID_REQUEST,
                _ => code::UNKNOWN_TOPIC_OR_PARTITION,
            };
            codes.push((ti, i, c));
        }
    }
    let shared = {
        let mut txns = ctx.txns.lock();
        match Coordinator::verify(&mut txns, req.transactional_id.0.as_str(), req.producer_id.0, req.producer_epoch) {
            Err(c) => Some(c),
            Ok(s) if s.phase == Phase::Ending => Some(code::CONCURRENT_TRANSACTIONS),
            Ok(s) => match s.groups.get_mut(group) {
                None => Some(code::INVALID_TXN_STATE),
                Some(pending) => {
                    pending.member = member;
                    pending.offsets.extend(offsets);
                    None
                }
            },
        }
    };
    let mut resp = TxnOffsetCommitResponse::default();
    for (ti, t) in req.topics.iter().enumerate() {
        let mut tr = TxnOffsetCommitResponseTopic::default();
        tr.name = t.name.clone();
        for &(_, i, c) in codes.iter().filter(|c| c.0 == ti) {
            let mut pr = TxnOffsetCommitResponsePartition::default();
            pr.partition_index = i;
            pr.error_code = shared.unwrap_or(c);
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    resp
}

/// Handles an EndTxn request: markers to every partition, then the offsets on commit.
pub(crate) async fn end_txn(ctx: &Arc<Context>, req: EndTxnRequest) -> EndTxnResponse {
    let mut resp = EndTxnResponse::default();
    resp.producer_id = WireProducerId(-1);
    resp.producer_epoch = -1;
    resp.error_code = match end(ctx, &req).await {
        Ok(()) => code::NONE,
        Err(c) => c,
    };
    resp
}

async fn end(ctx: &Arc<Context>, req: &EndTxnRequest) -> Result<(), i16> {
    let tid = req.transactional_id.0.as_str();
    let commit = req.committed;
    let (producer_id, partitions, groups) = {
        let mut txns = ctx.txns.lock();
        let s = Coordinator::verify(&mut txns, tid, req.producer_id.0, req.producer_epoch)?;
        match s.phase {
            Phase::Ending => return Err(code::CONCURRENT_TRANSACTIONS),
            // A retry of an EndTxn that completed succeeds; anything else has nothing
            // to end.
            Phase::Empty if s.last_ended == Some(commit) => return Ok(()),
            Phase::Empty => return Err(code::INVALID_TXN_STATE),
            Phase::Ongoing => {}
        }
        s.phase = Phase::Ending;
        (s.producer_id, s.partitions.clone(), std::mem::take(&mut s.groups))
    };
    let marker = if commit { Marker::Commit } else { Marker::Abort };
    let result: Result<(), EngineError> = async {
        write_markers(&ctx.engine, producer_id, &partitions, marker).await?;
        if commit {
            for (group, pending) in &groups {
                let offsets: Vec<(String, u32, Offset)> =
                    pending.offsets.iter().map(|((t, p), o)| (t.clone(), *p, *o)).collect();
                if offsets.is_empty() {
                    continue;
                }
                let member = pending.member.as_ref().map(|(m, g)| (m, *g));
                match ctx.engine.commit_offsets(group, member, &offsets).await {
                    // As OffsetCommit does: a member committing at the generation before
                    // the current one is let through.
                    Err(EngineError::StaleGeneration { got, current, .. }) if got < current => {
                        let member = pending.member.as_ref().map(|(m, _)| (m, current));
                        ctx.engine.commit_offsets(group, member, &offsets).await?;
                    }
                    other => other?,
                }
            }
        }
        Ok(())
    }
    .await;
    let mut txns = ctx.txns.lock();
    let s = txns.get_mut(tid);
    match result {
        Ok(()) => {
            if let Some(s) = s {
                s.phase = Phase::Empty;
                s.partitions.clear();
                s.last_ended = Some(commit);
            }
            Ok(())
        }
        Err(e) => {
            eprintln!("sluice kafka listener: ending transactional id {tid:?}'s transaction: {e}");
            if let Some(s) = s {
                // The client retries, or aborts; the markers written so far are kept
                // (a second marker for a decided transaction changes nothing).
                s.phase = Phase::Ongoing;
                s.groups = groups;
            }
            Err(errors::of(&e))
        }
    }
}
