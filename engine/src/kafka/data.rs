//! Produce, Fetch and ListOffsets.
//!
//! Produce appends each Kafka batch as one sluice batch through
//! [`EngineHandle::append`](crate::EngineHandle::append), which answers once the batch is
//! as durable as the topic's fsync policy says: acks=1 and acks=all (-1) both wait for
//! that (there are no replicas to wait for), acks=0 appends and sends no response.
//! Idempotent producers' id, epoch and base sequence travel with the batch and are checked
//! by the owning shard (duplicates answer with the original offsets).
//!
//! Fetch reads every partition at once without waiting; if that gives less than
//! `min_bytes`, it long-polls all of them until one has data or `max_wait_ms` passes, then
//! reads again. The answer keeps to `max_bytes` and each partition's
//! `partition_max_bytes` as Kafka's does (KIP-74), counted in the bytes sent: the first
//! batch of the first partition with data goes out whole whatever its size, so a client
//! always makes progress; past it, a batch that would take a partition past its limit or
//! the response past `max_bytes` is left for the next fetch. Each batch goes out in the
//! codec the topic's `compression.type` names (with `producer`, the one it arrived in).
//!
//! A batch holding records without a key, sent to a compacted topic, is refused whole
//! with INVALID_RECORD and, from v8, a record error for each such record (its index in
//! the batch and Kafka's message), as Kafka's log validation answers; librdkafka fails
//! those records with INVALID_RECORD and the batch's others with
//! `_INVALID_DIFFERENT_RECORD`.
//!
//! Produce with a transactional id takes transactional batches of that id's current
//! producer id and epoch, to partitions its open transaction added
//! ([`transactions`](super::transactions)); they are stored with the transactional bit.
//!
//! Fetch at isolation level 1 (read_committed) answers only the batches below each
//! partition's last stable offset, with `last_stable_offset` set and the aborted
//! transactions overlapping what it returns ([`stable`](super::stable)); held back by an
//! open transaction, it long-polls until the partition's log grows (its marker, say).
//! Control batches go out as Kafka control batches, which clients skip.
//!
//! From v13 Fetch names topics by id (and answers with the ids): an id no topic has (one
//! of a deleted topic, say) is answered UNKNOWN_TOPIC_ID for each of its partitions, as
//! Kafka's broker does. There are no fetch sessions (every answer has session id 0, so a
//! client sends full fetches), so forgotten topics need no reading.
//!
//! ListOffsets for the latest offset (-1) answers the high watermark at isolation level 0
//! (read_uncommitted) and the last stable offset at level 1 (read_committed), from the
//! same index; a time lookup at level 1 finds only offsets below the last stable one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{
    FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse, ProduceRequest, ProduceResponse,
    ProducerId as WireProducerId,
};
use kafka_protocol::protocol::StrBytes;
use sluice_io::{Offset, OwnedBatches, PartitionId, Timestamp};

use crate::error::EngineError;
use crate::topic::meta::TopicId;

use super::compression;
use super::context::Context;
use super::errors::{self, code};
use super::join::{Boxed, first_of, join_all};
use super::records;
use super::stable::Stable;
use super::transactions::Appending;

fn topic_str(name: &StrBytes) -> &str {
    name.as_str()
}

/// Handles a Produce request; `None` for acks=0. `queued` is dropped once every
/// partition's append is in its shard's queue: the listener reads the connection's next
/// request only then, so a connection's produce requests reach each partition in the
/// order they were sent, even when a shard's queue is full and they wait for room
/// (Kafka's per-connection order).
pub(crate) async fn produce(
    ctx: &Arc<Context>,
    req: ProduceRequest,
    version: i16,
    queued: async_channel::Sender<()>,
) -> Option<ProduceResponse> {
    let acks = req.acks;
    let refuse_all = (!matches!(acks, -1..=1)).then_some(code::INVALID_REQUIRED_ACKS);
    let tid = req.transactional_id.as_ref().map(|t| t.0.as_str());
    let fail = move |mut r: PartitionProduceResponse, code: i16, msg: String| {
        r.error_code = code;
        if version >= 8 {
            r.error_message = Some(StrBytes::from_string(msg));
        }
        r.base_offset = -1;
        r
    };
    // Each partition's append is queued in turn, in request order; the answers are
    // awaited together.
    let mut work: Vec<Boxed<'_, (usize, PartitionProduceResponse)>> = Vec::new();
    let mut topics = Vec::with_capacity(req.topic_data.len());
    for (ti, topic) in req.topic_data.iter().enumerate() {
        let mut t = TopicProduceResponse::default();
        t.name = topic.name.clone();
        topics.push(t);
        for part in &topic.partition_data {
            let name = topic_str(&topic.name.0);
            let mut r = PartitionProduceResponse::default();
            r.index = part.index;
            r.log_append_time_ms = -1;
            r.log_start_offset = -1;
            let failed = |r, code, msg| -> Boxed<'_, _> { Box::pin(std::future::ready((ti, fail(r, code, msg)))) };
            if let Some(code) = refuse_all {
                work.push(failed(r, code, format!("acks must be 0, 1 or -1, not {acks}")));
                continue;
            }
            let (partition, batch, appending) = match admit(ctx, tid, name, part.index, part.records.as_ref()) {
                Ok(admitted) => admitted,
                Err((c, m)) => {
                    work.push(failed(r, c, m));
                    continue;
                }
            };
            let answer = match ctx.engine.queue_packed(name, partition, batch.records, batch.meta).await {
                Ok(answer) => answer,
                Err(e) => {
                    let message = record_errors(&mut r, &e, name, part.index, version).unwrap_or_else(|| e.to_string());
                    work.push(failed(r, errors::of(&e), message));
                    continue;
                }
            };
            work.push(Box::pin(async move {
                let appended = answer.get().await;
                drop(appending);
                match appended {
                    Ok(info) => {
                        r.base_offset = info.base_offset.0 as i64;
                        (ti, r)
                    }
                    Err(e) => (ti, fail(r, errors::of(&e), e.to_string())),
                }
            }));
        }
    }
    drop(queued);
    for (ti, r) in join_all(work).await {
        topics[ti].partition_responses.push(r);
    }
    if acks == 0 {
        return None;
    }
    let mut resp = ProduceResponse::default();
    resp.responses = topics;
    Some(resp)
}

/// Kafka's per-record errors (Produce v8+ `record_errors`) for a refusal that names
/// records of the batch: each keyless record of a batch sent to a compacted topic, with
/// the message Kafka's `LogValidator` gives it. Returns the partition's `error_message`
/// as Kafka words it (the count and the first three record errors), or `None` for an
/// error about the batch as a whole.
fn record_errors(
    r: &mut PartitionProduceResponse,
    e: &EngineError,
    topic: &str,
    partition: i32,
    version: i16,
) -> Option<String> {
    let EngineError::KeyRequired { records, .. } = e else { return None };
    let message = format!("Compacted topic cannot accept message without key in topic partition {topic}-{partition}");
    let shown: Vec<String> =
        records.iter().take(3).map(|i| format!("RecordError(batchIndex={i}, message='{message}')")).collect();
    if version >= 8 {
        r.record_errors = records
            .iter()
            .map(|&i| {
                let mut b = BatchIndexAndErrorMessage::default();
                b.batch_index = i32::try_from(i).unwrap_or(i32::MAX);
                b.batch_index_error_message = Some(StrBytes::from_string(message.clone()));
                b
            })
            .collect();
    }
    Some(format!(
        "One or more records have been rejected due to {} record errors in total, and only showing the first three errors at most: [{}]",
        records.len(),
        shown.join(", ")
    ))
}

/// Checks one partition's produced data before it is queued: the partition index, the
/// batch, and its transaction. Transactional batches come only with the transactional id
/// whose transaction holds the partition, plain batches only without one; the guard
/// returned holds the transaction's markers back until the append is done. On refusal,
/// the error code and message.
fn admit<'a>(
    ctx: &'a Context,
    tid: Option<&str>,
    name: &str,
    index: i32,
    data: Option<&bytes::Bytes>,
) -> Result<(PartitionId, records::ProducedBatch, Option<Appending<'a>>), (i16, String)> {
    let partition =
        PartitionId::try_from(index).map_err(|_| (code::UNKNOWN_TOPIC_OR_PARTITION, format!("partition {index}")))?;
    // A compressed batch inflates to at most what one of the topic's batches may hold.
    let (_, max_inflated) = ctx.engine.batch_settings(name).map_err(|e| (errors::of(&e), e.to_string()))?;
    let batch =
        records::decode_produced(&data.cloned().unwrap_or_default(), max_inflated).map_err(|e| (e.code, e.message))?;
    let appending = match (tid, batch.meta.attributes.is_transactional()) {
        (Some(tid), true) => {
            Some(ctx.txns.check_produce(tid, batch.meta.producer_id.0, batch.meta.producer_epoch, name, partition)?)
        }
        (None, false) => None,
        (Some(_), false) => return Err((code::INVALID_REQUEST, "a transactional id with a plain batch".into())),
        (None, true) => {
            return Err((code::INVALID_REQUEST, "a transactional batch without a transactional id".into()));
        }
    };
    Ok((partition, batch, appending))
}

/// One partition's share of a fetch.
struct Read {
    result: Result<OwnedBatches, EngineError>,
    bounds: Option<(Offset, Offset)>,
}

async fn read_partition(
    ctx: &Context,
    topic: &str,
    partition: i32,
    offset: i64,
    max_bytes: usize,
    wait: Duration,
) -> Read {
    let Ok(p) = PartitionId::try_from(partition) else {
        return Read { result: Err(EngineError::UnknownTopic(topic.to_string())), bounds: None };
    };
    let Ok(offset) = u64::try_from(offset) else {
        let bounds = ctx.engine.offsets(topic, p).await.ok();
        let (start, end) = bounds.unwrap_or_default();
        let requested = Offset(0);
        let e = EngineError::OffsetOutOfRange { topic: topic.to_string(), partition: p, requested, start, end };
        return Read { result: Err(e), bounds };
    };
    // A stored batch is larger than the same batch sent (rkyv's framing costs some 30 bytes
    // more per record than Kafka's): read half as much again, and let the encoding cut at
    // the limit in bytes sent.
    let read_bytes = max_bytes.saturating_add(max_bytes / 2).max(1);
    let result = ctx.engine.fetch(topic, p, Offset(offset), read_bytes, wait).await;
    let bounds = ctx.engine.offsets(topic, p).await.ok();
    Read { result, bounds }
}

/// A read_committed partition's share, cut at its last stable offset.
struct Committed {
    /// The bytes of the fetched batches below the last stable offset.
    bytes: usize,
    stable: Stable,
    /// Why the partition's transactions could not be read.
    error: Option<i16>,
}

/// The bytes of the batches of `batches` that start below `stable`.
fn bytes_below(batches: &OwnedBatches, stable: Offset) -> usize {
    let mut n = 0;
    for b in batches.batches() {
        match b {
            Ok(view) if view.header().base_offset < stable => n += view.header().stored_len(),
            _ => break,
        }
    }
    n
}

/// Brings the stable-offset index up to date for every read_committed partition read
/// (all at once), and cuts each read at its last stable offset.
async fn stable_views(ctx: &Context, wanted: &[Wanted], reads: &[Read]) -> Vec<Option<Committed>> {
    let work: Vec<Boxed<'_, Option<Committed>>> = wanted
        .iter()
        .zip(reads)
        .map(|((topic, partition, offset, _), read)| {
            Box::pin(async move {
                let (Ok(batches), Ok(p), Ok(from)) =
                    (&read.result, PartitionId::try_from(*partition), u64::try_from(*offset))
                else {
                    return None;
                };
                let from = Offset(from);
                let bounds = match read.bounds {
                    Some(b) => Ok(b),
                    None => ctx.engine.offsets(topic, p).await,
                };
                let updated = match bounds {
                    Ok(bounds) => ctx.stable.update(&ctx.engine, topic, p, bounds, batches).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = updated {
                    ctx.errors.report(format_args!("transactions of {topic}-{p}: {e}"));
                    let stable = Stable { offset: from, aborted: Vec::new() };
                    return Some(Committed { bytes: 0, stable, error: Some(errors::of(&e)) });
                }
                let lso = ctx.stable.view(topic, p, from, from).offset;
                let bytes = bytes_below(batches, lso);
                let upper = batches.next_offset().min(lso);
                Some(Committed { bytes, stable: ctx.stable.view(topic, p, from, upper), error: None })
            }) as Boxed<'_, Option<Committed>>
        })
        .collect();
    join_all(work).await
}

type Wanted = (String, i32, i64, usize);

/// Handles a Fetch request.
pub(crate) async fn fetch(ctx: &Arc<Context>, req: FetchRequest, version: i16) -> FetchResponse {
    let started = Instant::now();
    let max_wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0)).min(ctx.config.max_fetch_wait);
    let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0).max(1);
    let max_bytes = if version >= 3 { usize::try_from(req.max_bytes).unwrap_or(0) } else { usize::MAX };
    let read_committed = req.isolation_level == 1;
    let mut wanted: Vec<Wanted> = Vec::new();
    // From v13 topics are named by id: each wanted partition's topic id, and its name
    // when the id is known (an unknown one reads as the empty name, which no topic has,
    // and is answered UNKNOWN_TOPIC_ID).
    let mut ids: Vec<Option<TopicId>> = Vec::new();
    for t in &req.topics {
        let (name, id) = if version >= 13 {
            let id = TopicId(t.topic_id);
            (ctx.engine.topic_name(id).unwrap_or_default(), Some(id))
        } else {
            (topic_str(&t.topic.0).to_string(), None)
        };
        for p in &t.partitions {
            // No partition's share of the response can be larger than the response.
            let pmax = usize::try_from(p.partition_max_bytes).unwrap_or(0).min(max_bytes);
            wanted.push((name.clone(), p.partition, p.fetch_offset, pmax));
            ids.push(id);
        }
    }
    let read_all = |wait: Duration| {
        let futures: Vec<Boxed<'_, Read>> = wanted
            .iter()
            .map(|(t, p, o, m)| Box::pin(read_partition(ctx, t, *p, *o, *m, wait)) as Boxed<'_, Read>)
            .collect();
        join_all(futures)
    };
    let mut reads = read_all(Duration::ZERO).await;
    let mut committed: Vec<Option<Committed>> = Vec::new();
    let mut waited = false;
    loop {
        if read_committed {
            committed = stable_views(ctx, &wanted, &reads).await;
        }
        let bytes_in: usize = reads
            .iter()
            .zip(committed.iter().map(Some).chain(std::iter::repeat(None)))
            .map(|(r, c)| match (c, &r.result) {
                (Some(Some(c)), _) => c.bytes,
                (_, Ok(b)) => b.bytes().len(),
                (_, Err(_)) => 0,
            })
            .sum();
        let any_error = reads.iter().any(|r| r.result.is_err())
            || committed.iter().any(|c| c.as_ref().is_some_and(|c| c.error.is_some()));
        let left = max_wait.saturating_sub(started.elapsed());
        if bytes_in >= min_bytes || any_error || wanted.is_empty() || left.is_zero() || (waited && !read_committed) {
            break;
        }
        waited = true;
        wait_for_more(ctx, &wanted, &reads, read_committed, left).await;
        reads = read_all(Duration::ZERO).await;
    }
    let mut committed = committed.into_iter();
    let mut budget = Budget { left: max_bytes, first_data: true, scratch: BytesMut::new() };
    let mut topics: Vec<FetchableTopicResponse> = Vec::new();
    for (((topic, partition, _, pmax), read), id) in wanted.iter().zip(reads).zip(ids) {
        let stable = committed.next().flatten();
        let mut pd = partition_data(ctx, topic, *partition, read, stable, *pmax, &mut budget);
        if id.is_some() && topic.is_empty() {
            pd.error_code = code::UNKNOWN_TOPIC_ID;
        }
        let wire_id = id.unwrap_or(TopicId::NONE).0;
        match topics.last_mut() {
            Some(t) if t.topic.0.as_str() == topic && t.topic_id == wire_id => t.partitions.push(pd),
            _ => {
                let mut t = FetchableTopicResponse::default();
                t.topic = StrBytes::from_string(topic.clone()).into();
                t.topic_id = wire_id;
                t.partitions.push(pd);
                topics.push(t);
            }
        }
    }
    let mut resp = FetchResponse::default();
    resp.responses = topics;
    resp
}

/// What is left of a fetch response's `max_bytes` as its partitions are encoded.
struct Budget {
    /// Bytes of record batches the response may still take.
    left: usize,
    /// No partition has data yet: the next batch goes out whatever its size (KIP-74).
    first_data: bool,
    /// Where a batch is encoded before it is compressed.
    scratch: BytesMut,
}

/// One partition's part of a fetch response: its offsets, the stable view of a
/// read_committed reader, and its batches re-encoded as Kafka's (compressed as the
/// topic's `compression.type` says), within `partition_max` bytes and what is left of
/// the response's budget; the first batch of the first partition with data always goes.
fn partition_data(
    ctx: &Context,
    topic: &str,
    partition: i32,
    read: Read,
    stable: Option<Committed>,
    partition_max: usize,
    budget: &mut Budget,
) -> PartitionData {
    let mut pd = PartitionData::default();
    pd.partition_index = partition;
    if let Some((start, end)) = read.bounds {
        pd.high_watermark = end.0 as i64;
        pd.last_stable_offset = end.0 as i64;
        pd.log_start_offset = start.0 as i64;
    } else {
        pd.high_watermark = -1;
    }
    if let Some(c) = &stable {
        if let Some(e) = c.error {
            pd.error_code = e;
        }
        // The index may have read past this fetch's read (the log grew meanwhile):
        // never a stable offset above the high watermark reported with it.
        pd.last_stable_offset = match read.bounds {
            Some((_, end)) => c.stable.offset.min(end).0 as i64,
            None => c.stable.offset.0 as i64,
        };
        pd.aborted_transactions = Some(
            c.stable
                .aborted
                .iter()
                .map(|a| {
                    let mut t = AbortedTransaction::default();
                    t.producer_id = WireProducerId(a.producer.0);
                    t.first_offset = a.first.0 as i64;
                    t
                })
                .collect(),
        );
    }
    let stable_end = stable.as_ref().map_or(Offset(u64::MAX), |c| c.stable.offset);
    let limit = partition_max.min(budget.left);
    let mut out = BytesMut::new();
    match read.result {
        // Nothing can go out but a first batch of the response.
        Ok(_) if limit == 0 && !budget.first_data => {}
        Ok(batches) => {
            let compression = ctx.engine.batch_settings(topic).map_or_else(|_| Default::default(), |(c, _)| c);
            for b in batches.batches() {
                match b {
                    Ok(view) if view.header().base_offset >= stable_end => break,
                    Ok(view) => {
                        let before = out.len();
                        let codec = compression::for_fetch(compression, view.header().attributes);
                        records::encode_compressed(view, codec, &mut budget.scratch, &mut out);
                        if out.len() > limit && !(budget.first_data && before == 0) {
                            out.truncate(before);
                            break;
                        }
                    }
                    Err(e) => {
                        pd.error_code = code::KAFKA_STORAGE_ERROR;
                        ctx.errors.report(format_args!("fetch of {topic}-{partition}: {e}"));
                        break;
                    }
                }
            }
            if !out.is_empty() {
                budget.left = budget.left.saturating_sub(out.len());
                budget.first_data = false;
            }
        }
        Err(e) => pd.error_code = errors::of(&e),
    }
    pd.records = Some(out.freeze());
    pd
}

/// Long poll: waits until some partition has data past what was read (for a
/// read_committed reader held back by an open transaction, that includes its marker), or
/// `left` passes.
async fn wait_for_more(ctx: &Context, wanted: &[Wanted], reads: &[Read], read_committed: bool, left: Duration) {
    let waits: Vec<Boxed<'_, ()>> = wanted
        .iter()
        .zip(reads)
        .map(|((t, p, _, m), r)| {
            let at = r.result.as_ref().map_or(Offset(0), OwnedBatches::next_offset);
            // A read_committed reader waits for the log to grow past its end: what
            // lies past the stable offset is there already.
            let at = match r.bounds {
                Some((_, end)) if read_committed => at.max(end),
                _ => at,
            };
            Box::pin(async move {
                if let Ok(p) = PartitionId::try_from(*p) {
                    let _ = ctx.engine.fetch(t, p, at, (*m).max(1), left).await;
                }
            }) as Boxed<'_, ()>
        })
        .collect();
    let mut waits = waits;
    waits.push(Box::pin(glommio::timer::sleep(left)));
    first_of(waits).await;
}

/// Handles a ListOffsets request: -2 earliest, -1 latest (the last stable offset for
/// read_committed), otherwise the first record at or after a time.
pub(crate) async fn list_offsets(ctx: &Arc<Context>, req: ListOffsetsRequest, _version: i16) -> ListOffsetsResponse {
    let read_committed = req.isolation_level == 1;
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let name = topic_str(&t.name.0);
        let mut tr = ListOffsetsTopicResponse::default();
        tr.name = t.name.clone();
        for p in &t.partitions {
            let mut pr = ListOffsetsPartitionResponse::default();
            pr.partition_index = p.partition_index;
            match list_one(ctx, name, p.partition_index, p.timestamp, read_committed).await {
                Ok((offset, timestamp)) => {
                    pr.offset = offset;
                    pr.timestamp = timestamp;
                }
                Err(e) => pr.error_code = e,
            }
            tr.partitions.push(pr);
        }
        topics.push(tr);
    }
    let mut resp = ListOffsetsResponse::default();
    resp.topics = topics;
    resp
}

async fn list_one(
    ctx: &Context,
    topic: &str,
    partition: i32,
    timestamp: i64,
    read_committed: bool,
) -> Result<(i64, i64), i16> {
    let p = PartitionId::try_from(partition).map_err(|_| code::UNKNOWN_TOPIC_OR_PARTITION)?;
    let engine = &ctx.engine;
    let (start, end) = engine.offsets(topic, p).await.map_err(|e| errors::of(&e))?;
    // What a reader at this isolation level may read up to (Kafka's last fetchable
    // offset); the earliest offset does not depend on it.
    let fetchable = if read_committed && timestamp != -2 {
        let scanned = ctx.stable.update(engine, topic, p, (start, end), &OwnedBatches::empty(start)).await;
        scanned.map_err(|e| errors::of(&e))?;
        ctx.stable.view(topic, p, end, end).offset.min(end)
    } else {
        end
    };
    match timestamp {
        -2 => Ok((start.0 as i64, -1)),
        -1 => Ok((fetchable.0 as i64, -1)),
        t if t < 0 => Err(code::INVALID_REQUEST),
        t => match engine.offset_for_time(topic, p, Timestamp(t)).await.map_err(|e| errors::of(&e))? {
            None => Ok((-1, -1)),
            Some(o) if o >= fetchable => Ok((-1, -1)),
            Some(o) => {
                // The time of the record found, as Kafka answers.
                let batches = engine.fetch(topic, p, o, 1, Duration::ZERO).await.map_err(|e| errors::of(&e))?;
                let time = batches
                    .records()
                    .filter_map(Result::ok)
                    .find(|r| r.offset() >= o)
                    .map_or(t, |r| r.event_time().millis());
                Ok((o.0 as i64, time))
            }
        },
    }
}
