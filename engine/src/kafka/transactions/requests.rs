//! The transactional requests (InitProducerId with a transactional id,
//! AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn) and the timeout check,
//! over the coordinator's state in the parent module.

use std::sync::Arc;
use std::time::{Duration, Instant};

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
use sluice_io::{Offset, PartitionId};

use super::*;
use crate::group::assignor::MemberId;
use crate::group::offsets::METADATA_MAX_BYTES;
use crate::kafka::context::Context;
use crate::kafka::errors::{self, code};

/// Aborts every transaction open longer than its timeout, and fences its producer.
pub(crate) async fn expire(ctx: &Arc<Context>) {
    let now = Instant::now();
    let expired: Vec<(String, i64, i16, i32, Partitions)> = {
        let mut txns = ctx.txns.lock();
        txns.iter_mut()
            .filter(|(_, s)| {
                s.phase == Phase::Ongoing
                    && !s.persisting
                    && s.started.is_some_and(|t| {
                        now.saturating_duration_since(t) > Duration::from_millis(s.timeout_ms.max(0) as u64)
                    })
            })
            .map(|(tid, s)| {
                s.phase = Phase::Ending;
                (tid.clone(), s.producer_id, s.epoch, s.timeout_ms, s.partitions.clone())
            })
            .collect()
    };
    for (tid, producer_id, epoch, timeout_ms, partitions) in expired {
        ctx.txns.drained(&tid).await;
        let result = abort_and_fence(&ctx.engine, &tid, producer_id, epoch, timeout_ms, &partitions).await;
        let mut txns = ctx.txns.lock();
        let Some(s) = txns.get_mut(&tid) else { continue };
        match result {
            Ok((id, epoch)) => {
                eprintln!(
                    "sluice kafka listener: transactional id {tid:?}: transaction open longer than its \
                     {timeout_ms} ms timeout aborted; producer {producer_id} fenced"
                );
                *s = TxnState::new(id, epoch, timeout_ms);
                s.last_ended = Some(false);
                crate::kafka::observe::transaction_ended(false, true);
            }
            Err(e) => {
                // Tried again at the next check.
                eprintln!("sluice kafka listener: aborting transactional id {tid:?}'s timed-out transaction: {e}");
                s.phase = Phase::Ongoing;
            }
        }
    }
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
    let timeout_ms = req.transaction_timeout_ms;
    if !(1..=ctx.config.transaction_max_timeout_ms).contains(&timeout_ms) {
        return Err(code::INVALID_TRANSACTION_TIMEOUT);
    }
    let coordinator = &ctx.txns;
    let (given_id, given_epoch) = (req.producer_id.0, req.producer_epoch);
    // Take what the id has open, and keep others out while it is aborted and the new
    // epoch persisted (a new id holds a placeholder meanwhile).
    let (open, producer_id, epoch) = {
        let mut txns = coordinator.lock();
        match txns.get_mut(tid) {
            None => {
                if txns.len() >= TRANSACTIONAL_IDS_MAX {
                    // Forget an id with nothing open (its producer, if it comes back, is
                    // still fenced: its producer id no longer maps to anything).
                    let idle = txns.iter().find(|(_, s)| s.phase == Phase::Empty && !s.busy()).map(|(k, _)| k.clone());
                    match idle {
                        Some(k) => txns.remove(&k),
                        None => return Err(code::COORDINATOR_NOT_AVAILABLE),
                    };
                }
                let mut placeholder = TxnState::new(-1, -1, timeout_ms);
                placeholder.phase = Phase::Ending;
                txns.insert(tid.to_string(), placeholder);
                (None, -1, -1)
            }
            Some(s) => {
                if s.busy() {
                    return Err(code::CONCURRENT_TRANSACTIONS);
                }
                if given_id != -1 && (given_id != s.producer_id || given_epoch != s.epoch) {
                    return Err(fenced(version >= 4));
                }
                let open = (s.phase == Phase::Ongoing).then(|| std::mem::take(&mut s.partitions));
                s.phase = Phase::Ending;
                (open, s.producer_id, s.epoch)
            }
        }
    };
    coordinator.drained(tid).await;
    let result: Result<(i64, i16), EngineError> = async {
        if let Some(parts) = &open {
            write_markers(&ctx.engine, producer_id, parts, Marker::Abort).await?;
        }
        let (id, epoch) = if producer_id == -1 || epoch >= i16::MAX - 1 {
            (ctx.engine.init_producer_id().await?.0, 0)
        } else {
            (producer_id, epoch + 1)
        };
        persist(&ctx.engine, tid, &Stored::empty(id, epoch, timeout_ms, None)).await?;
        Ok((id, epoch))
    }
    .await;
    let mut txns = coordinator.lock();
    match result {
        Err(e) => {
            if producer_id == -1 {
                txns.remove(tid);
            } else if let Some(s) = txns.get_mut(tid) {
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
        Ok((id, epoch)) => {
            txns.insert(tid.to_string(), TxnState::new(id, epoch, timeout_ms));
            Ok((id, epoch))
        }
    }
}

/// Handles an AddPartitionsToTxn request (versions 0-3: one transaction). New partitions
/// are persisted before the answer.
pub(crate) async fn add_partitions(ctx: &Arc<Context>, req: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse {
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
    let all_known = codes.iter().all(|c| c.2 == code::NONE);
    // Err: a code for every partition. Ok(Some): the state to persist first.
    let decided: Result<Option<(Stored, Partitions)>, i16> = {
        let mut txns = ctx.txns.lock();
        match TransactionCoordinator::verify(
            &mut txns,
            tid,
            req.v3_and_below_producer_id.0,
            req.v3_and_below_producer_epoch,
        ) {
            Err(c) => Err(c),
            Ok(s) if s.busy() => Err(code::CONCURRENT_TRANSACTIONS),
            Ok(_) if !all_known => {
                for c in &mut codes {
                    if c.2 == code::NONE {
                        c.2 = code::OPERATION_NOT_ATTEMPTED;
                    }
                }
                Ok(None)
            }
            Ok(s) => {
                let mut partitions = s.partitions.clone();
                for (ti, p, _) in &codes {
                    partitions
                        .insert((req.v3_and_below_topics[*ti].name.0.as_str().to_string(), PartitionId(*p as u32)));
                }
                if codes.is_empty() {
                    Ok(None)
                } else if partitions == s.partitions {
                    s.open();
                    Ok(None)
                } else {
                    s.persisting = true;
                    Ok(Some((Stored::ongoing(s, &partitions), partitions)))
                }
            }
        }
    };
    let shared = match decided {
        Err(c) => Some(c),
        Ok(None) => None,
        Ok(Some((stored, partitions))) => {
            let result = persist(&ctx.engine, tid, &stored).await;
            let mut txns = ctx.txns.lock();
            let s = txns.get_mut(tid).expect("a persisting id is never removed");
            s.persisting = false;
            match result {
                Ok(()) => {
                    s.partitions = partitions;
                    s.open();
                    None
                }
                Err(e) => {
                    eprintln!("sluice kafka listener: persisting transactional id {tid:?}'s partitions: {e}");
                    Some(errors::of(&e))
                }
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
    if group.is_empty() {
        resp.error_code = code::INVALID_GROUP_ID;
        return resp;
    }
    let mut txns = ctx.txns.lock();
    resp.error_code = match TransactionCoordinator::verify(
        &mut txns,
        req.transactional_id.0.as_str(),
        req.producer_id.0,
        req.producer_epoch,
    ) {
        Err(c) => c,
        Ok(s) if s.busy() => code::CONCURRENT_TRANSACTIONS,
        Ok(s) => {
            s.groups.entry(group.to_string()).or_default();
            s.open();
            code::NONE
        }
    };
    resp
}

/// Handles a TxnOffsetCommit request: the offsets, with their metadata and leader
/// epochs, are kept until EndTxn. From v3 a request naming a member (its id, generation
/// or instance id) is checked against the group as an OffsetCommit is (Kafka's fencing
/// of zombie consumers, KIP-447); one naming none is not.
pub(crate) async fn txn_offset_commit(
    ctx: &Arc<Context>,
    req: TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    let group = req.group_id.0.as_str();
    let mut codes: Vec<(usize, i32, i16)> = Vec::new();
    let mut offsets = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        let count = ctx.engine.describe_topic(t.name.0.as_str()).map(|d| d.shards.len()).ok();
        for p in &t.partitions {
            let i = p.partition_index;
            let metadata = p.committed_metadata.as_ref().map(|m| m.as_str().to_string()).unwrap_or_default();
            let c = match (count, PartitionId::try_from(i), u64::try_from(p.committed_offset)) {
                (_, _, Err(_)) => code::INVALID_REQUEST,
                (Some(n), Ok(pi), Ok(_)) if pi.index() < n && metadata.len() > METADATA_MAX_BYTES => {
                    code::OFFSET_METADATA_TOO_LARGE
                }
                (Some(n), Ok(pi), Ok(o)) if pi.index() < n => {
                    let leader_epoch =
                        (version >= 2 && p.committed_leader_epoch >= 0).then_some(p.committed_leader_epoch);
                    offsets.push((
                        (t.name.0.as_str().to_string(), pi),
                        CommittedOffset { offset: Offset(o), leader_epoch, metadata },
                    ));
                    code::NONE
                }
                _ => code::UNKNOWN_TOPIC_OR_PARTITION,
            };
            codes.push((ti, i, c));
        }
    }
    let instance = if version >= 3 { req.group_instance_id.as_ref().map(|i| i.as_str().to_string()) } else { None };
    let member_check = if group.is_empty() {
        Some(code::INVALID_GROUP_ID)
    } else if version >= 3 && (!req.member_id.is_empty() || req.generation_id >= 0 || instance.is_some()) {
        let auth = CommitAuth::Member {
            member: MemberId::new(req.member_id.as_str()),
            generation: req.generation_id,
            instance,
        };
        ctx.engine.check_commit(group, auth).await.err().map(|e| errors::of(&e))
    } else {
        None
    };
    let shared = member_check.or_else(|| {
        let mut txns = ctx.txns.lock();
        match TransactionCoordinator::verify(
            &mut txns,
            req.transactional_id.0.as_str(),
            req.producer_id.0,
            req.producer_epoch,
        ) {
            Err(c) => Some(c),
            Ok(s) if s.busy() => Some(code::CONCURRENT_TRANSACTIONS),
            Ok(s) => match s.groups.get_mut(group) {
                None => Some(code::INVALID_TXN_STATE),
                Some(pending) => {
                    pending.offsets.extend(offsets);
                    None
                }
            },
        }
    });
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
    let (producer_id, epoch, timeout_ms, partitions, groups) = {
        let mut txns = ctx.txns.lock();
        let s = TransactionCoordinator::verify(&mut txns, tid, req.producer_id.0, req.producer_epoch)?;
        if s.busy() {
            return Err(code::CONCURRENT_TRANSACTIONS);
        }
        match s.phase {
            // A retry of an EndTxn that completed succeeds; anything else has nothing
            // to end.
            Phase::Empty if s.last_ended == Some(commit) => return Ok(()),
            Phase::Empty => return Err(code::INVALID_TXN_STATE),
            Phase::Ongoing | Phase::Ending => {}
        }
        s.phase = Phase::Ending;
        (s.producer_id, s.epoch, s.timeout_ms, s.partitions.clone(), std::mem::take(&mut s.groups))
    };
    let marker = if commit { Marker::Commit } else { Marker::Abort };
    ctx.txns.drained(tid).await;
    let result: Result<(), EngineError> = async {
        if commit {
            // Decided: from here on a restart completes the commit.
            persist(&ctx.engine, tid, &Stored::prepare_commit(producer_id, epoch, timeout_ms, &partitions, &groups))
                .await?;
        }
        write_markers(&ctx.engine, producer_id, &partitions, marker).await?;
        if commit {
            commit_group_offsets(&ctx.engine, &groups).await?;
        }
        Ok(())
    }
    .await;
    let result = match result {
        // Ended: an abort that is not recorded as ended is aborted again after a restart,
        // and a commit completed again; both change nothing more.
        Ok(()) => persist(&ctx.engine, tid, &Stored::empty(producer_id, epoch, timeout_ms, Some(commit)))
            .await
            .map_err(|e| {
                eprintln!("sluice kafka listener: recording transactional id {tid:?}'s end: {e}");
            })
            .or(Ok(())),
        Err(e) => Err(e),
    };
    let mut txns = ctx.txns.lock();
    let s = txns.get_mut(tid);
    match result {
        Ok(()) => {
            if let Some(s) = s {
                s.phase = Phase::Empty;
                s.partitions.clear();
                s.started = None;
                s.last_ended = Some(commit);
            }
            crate::kafka::observe::transaction_ended(commit, false);
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
