//! Request frames in, response frames out: the header, the version table, decoding with
//! the `kafka-protocol` crate, the handler, and the encoded response.
//!
//! Versions: the listener advertises, and accepts, only the ranges in [`SUPPORTED`].
//! Topics have ids (Metadata v10-12, Fetch v13-16, CreateTopics v7, DeleteTopics v6 name
//! or answer them); the versions after those the listener handles (OffsetCommit and
//! OffsetFetch v10, Produce v13, which name topics only by id) are not offered. A request at another version, or with an unknown API key, closes
//! the connection, as Kafka's broker does, except ApiVersions: a client asking at a
//! version newer than ours gets an UNSUPPORTED_VERSION reply in the v0 format listing our
//! ranges, from which it retries at a version we speak (KIP-511). Bytes after a request's
//! last field are ignored (librdkafka sends some).
//!
//! Produce is advertised from v0, as Kafka 4.0 does (KAFKA-18659), though only v3 and later
//! are handled: librdkafka before 2.11.1 sends gzip, snappy and lz4 batches uncompressed to a
//! broker whose Produce starts past v0. A Produce request at v0-v2 (message formats 0 and
//! 1) gets UNSUPPORTED_VERSION for each of its partitions, and the connection stays open.

use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use futures_lite::Future;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, ProduceRequest, RequestHeader, RequestKind, ResponseHeader, ResponseKind,
};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::context::Context;
use super::errors::code;
use super::session::Session;
use super::{acls, admin, authz, configs, data, groups, guard, sasl, transactions, users};

/// The encoded response frame (`None` when the request wants none: Produce with acks=0),
/// or why the connection must close.
pub(crate) type Reply = Result<Option<Vec<u8>>, EncodeFailure>;

/// A response that could not be encoded: the connection is closed with this reason.
#[derive(Debug, thiserror::Error)]
#[error("encoding a {api:?} v{version} response{}: {reason}", if *header { " header" } else { "" })]
pub(crate) struct EncodeFailure {
    api: ApiKey,
    version: i16,
    header: bool,
    reason: String,
}

/// What became of a frame.
pub(crate) enum Handled {
    /// The connection must close (a malformed or unsupported request).
    Close(String),
    /// The response, ready at once.
    Ready(Reply),
    /// The response, ready at once; the connection closes once it is written (a failed
    /// SASL login).
    Last(Reply),
    /// The response once the engine has answered.
    Working(Pin<Box<dyn Future<Output = Reply>>>),
    /// A produce request's response once the engine has answered; `queued` closes once
    /// its appends are in their shards' queues, and the connection's next request must
    /// wait for that, so that the connection's appends keep their order.
    Ordered { work: Pin<Box<dyn Future<Output = Reply>>>, queued: async_channel::Receiver<()> },
}

/// The API versions this listener handles, inclusive.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 16),
    (ApiKey::ListOffsets, 1, 6),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::FindCoordinator, 0, 3),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::AddOffsetsToTxn, 0, 3),
    (ApiKey::EndTxn, 0, 3),
    (ApiKey::TxnOffsetCommit, 0, 3),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
];

/// The lowest Produce version advertised (see the module docs); v0 up to the lowest one
/// handled are answered with UNSUPPORTED_VERSION.
pub const PRODUCE_ADVERTISED_MIN: i16 = 0;

fn supported(key: i16) -> Option<(ApiKey, i16, i16)> {
    SUPPORTED.iter().copied().find(|(k, _, _)| *k as i16 == key)
}

fn api_versions_body(error_code: i16) -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.error_code = error_code;
    r.api_keys = SUPPORTED
        .iter()
        .map(|&(k, min, max)| {
            let mut v = ApiVersion::default();
            v.api_key = k as i16;
            v.min_version = if k == ApiKey::Produce { PRODUCE_ADVERTISED_MIN } else { min };
            v.max_version = max;
            v
        })
        .collect();
    r
}

/// Encodes a response frame: size, header, body.
pub(crate) fn encode(api: ApiKey, version: i16, correlation_id: i32, body: &ResponseKind) -> Reply {
    super::observe::response(api, body);
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    header.encode(&mut buf, api.response_header_version(version)).map_err(|e| EncodeFailure {
        api,
        version,
        header: true,
        reason: e.to_string(),
    })?;
    body.encode(&mut buf, version).map_err(|e| EncodeFailure { api, version, header: false, reason: e.to_string() })?;
    let len = i32::try_from(buf.len() - 4).map_err(|_| EncodeFailure {
        api,
        version,
        header: false,
        reason: format!("{} bytes do not fit a frame", buf.len()),
    })?;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(Some(buf.to_vec()))
}

/// Parses a frame from the connection of `session` and starts its handler. A request the
/// session may not make yet (before its SASL login) closes the connection unanswered.
pub(crate) fn handle(ctx: &Arc<Context>, frame: Bytes, session: &Rc<Session>) -> Handled {
    if session.raw_tokens() {
        // After a SaslHandshake v0, frames are the mechanism's bare messages.
        return sasl::raw_token(ctx, session, &frame);
    }
    match parse(frame) {
        Ok((api, version, header, request)) => {
            if let Some(reason) = session.refusal(api) {
                super::observe::refused(super::observe::Refusal::Unauthenticated);
                return Handled::Close(reason);
            }
            super::observe::request(api, start(ctx, api, version, header, request, session))
        }
        Err(handled) => super::observe::unparsed(handled),
    }
}

/// A frame's API, version, header and request; or, for a frame that is not one this
/// listener answers, what to do instead (close the connection, or ApiVersions' v0 error
/// reply).
fn parse(frame: Bytes) -> Result<(ApiKey, i16, RequestHeader, RequestKind), Handled> {
    if frame.len() < 8 {
        return Err(Handled::Close(format!("a request of {} bytes has no header", frame.len())));
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let Some((api, min, max)) = supported(key) else {
        return Err(Handled::Close(format!("unsupported API key {key}")));
    };
    if api == ApiKey::ApiVersions && version > max {
        let body = ResponseKind::ApiVersions(api_versions_body(code::UNSUPPORTED_VERSION));
        return Err(Handled::Ready(encode(api, 0, correlation_id, &body)));
    }
    if api == ApiKey::Produce && (PRODUCE_ADVERTISED_MIN..min).contains(&version) {
        return Err(old_produce(frame, version, correlation_id));
    }
    if version < min || version > max {
        return Err(Handled::Close(format!(
            "unsupported version {version} of {api:?} (this listener handles {min}..={max})"
        )));
    }
    let mut bytes = frame;
    let header = match RequestHeader::decode(&mut bytes, api.request_header_version(version)) {
        Ok(h) => h,
        Err(e) => return Err(Handled::Close(format!("malformed {api:?} v{version} request header: {e}"))),
    };
    if let Err(e) = guard::check_body(key, version, &bytes) {
        return Err(Handled::Close(format!("malformed {api:?} v{version} request: {e}")));
    }
    let request = match RequestKind::decode(api, &mut bytes, version) {
        Ok(r) => r,
        Err(e) => return Err(Handled::Close(format!("malformed {api:?} v{version} request: {e}"))),
    };
    // Anything left in `bytes` is ignored on purpose (see the module docs).
    Ok((api, version, header, request))
}

/// A Produce request at v0-v2: UNSUPPORTED_VERSION for each partition, in the response
/// format of its version (none for acks=0). Its body is v3's without the transactional
/// id, so it is checked and decoded as one with a null id put in front.
fn old_produce(frame: Bytes, version: i16, correlation_id: i32) -> Handled {
    let mut bytes = frame;
    if let Err(e) = RequestHeader::decode(&mut bytes, ApiKey::Produce.request_header_version(version)) {
        return Handled::Close(format!("malformed Produce v{version} request header: {e}"));
    }
    let mut body = BytesMut::with_capacity(bytes.len() + 2);
    body.put_i16(-1);
    body.extend_from_slice(&bytes);
    if let Err(e) = guard::check_body(ApiKey::Produce as i16, 3, &body) {
        return Handled::Close(format!("malformed Produce v{version} request: {e}"));
    }
    let req = match ProduceRequest::decode(&mut body.freeze(), 3) {
        Ok(r) => r,
        Err(e) => return Handled::Close(format!("malformed Produce v{version} request: {e}")),
    };
    if req.acks == 0 {
        return Handled::Ready(Ok(None));
    }
    let mut out = BytesMut::with_capacity(64);
    out.put_i32(0);
    out.put_i32(correlation_id);
    out.put_i32(req.topic_data.len() as i32);
    for t in &req.topic_data {
        out.put_i16(t.name.0.len() as i16);
        out.put_slice(t.name.0.as_bytes());
        out.put_i32(t.partition_data.len() as i32);
        for p in &t.partition_data {
            out.put_i32(p.index);
            out.put_i16(code::UNSUPPORTED_VERSION);
            out.put_i64(-1); // base offset
            if version >= 2 {
                out.put_i64(-1); // log append time
            }
        }
    }
    if version >= 1 {
        out.put_i32(0); // throttle time
    }
    let len = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&len.to_be_bytes());
    Handled::Ready(Ok(Some(out.to_vec())))
}

/// Starts the handler of a parsed request: its answer now, or the work that makes it.
fn start(
    ctx: &Arc<Context>,
    api: ApiKey,
    version: i16,
    header: RequestHeader,
    request: RequestKind,
    session: &Rc<Session>,
) -> Handled {
    let ctx = ctx.clone();
    let client = groups::Client {
        id: header.client_id.as_ref().map(|c| c.as_str().to_string()).unwrap_or_default(),
        host: session.host.clone(),
    };
    // The ACLs first: what the principal may not do is answered without its handler.
    let (request, patch) = match authz::screen(&authz::Authz::new(&ctx, session), request) {
        authz::Screened::Go(request, patch) => (*request, patch),
        authz::Screened::Answer(resp) => return Handled::Ready(encode(api, version, header.correlation_id, &resp)),
        authz::Screened::Close(reason) => return Handled::Close(reason),
    };
    let done = move |mut body: ResponseKind| {
        if let Some(patch) = patch {
            patch(&mut body);
        }
        encode(api, version, header.correlation_id, &body)
    };
    let last = |(reply, after)| match after {
        sasl::After::Continue => Handled::Ready(reply),
        sasl::After::Close => Handled::Last(reply),
    };
    match request {
        RequestKind::ApiVersions(_) => Handled::Ready(done(ResponseKind::ApiVersions(api_versions_body(0)))),
        RequestKind::SaslHandshake(req) => {
            let (resp, after) = sasl::handshake(&ctx, session, &req, version);
            last((done(ResponseKind::SaslHandshake(resp)), after))
        }
        RequestKind::CreateAcls(req) => Handled::Ready(done(ResponseKind::CreateAcls(acls::create(&ctx, &req)))),
        RequestKind::DescribeAcls(req) => {
            Handled::Ready(done(ResponseKind::DescribeAcls(acls::describe(&ctx, &req, version))))
        }
        RequestKind::DeleteAcls(req) => {
            Handled::Ready(done(ResponseKind::DeleteAcls(acls::delete(&ctx, &req, version))))
        }
        RequestKind::DescribeUserScramCredentials(req) => {
            Handled::Ready(done(ResponseKind::DescribeUserScramCredentials(users::describe(&ctx, &req))))
        }
        RequestKind::AlterUserScramCredentials(req) => {
            Handled::Ready(done(ResponseKind::AlterUserScramCredentials(users::alter(&ctx, &req))))
        }
        RequestKind::SaslAuthenticate(req) => {
            let (resp, after) = sasl::authenticate(&ctx, session, &req);
            last((done(ResponseKind::SaslAuthenticate(resp)), after))
        }
        RequestKind::Produce(req) => {
            let (signal, queued) = async_channel::bounded(1);
            let work = Box::pin(async move {
                match data::produce(&ctx, req, version, signal).await {
                    Some(resp) => done(ResponseKind::Produce(resp)),
                    None => Ok(None),
                }
            });
            Handled::Ordered { work, queued }
        }
        RequestKind::Fetch(req) => {
            Handled::Working(Box::pin(async move { done(ResponseKind::Fetch(data::fetch(&ctx, req, version).await)) }))
        }
        RequestKind::ListOffsets(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::ListOffsets(data::list_offsets(&ctx, req, version).await))
        })),
        RequestKind::Metadata(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::Metadata(admin::metadata(&ctx, req, version).await))
        })),
        RequestKind::CreateTopics(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::CreateTopics(admin::create_topics(&ctx, req, version).await))
        })),
        RequestKind::DeleteTopics(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::DeleteTopics(admin::delete_topics(&ctx, req, version).await))
        })),
        RequestKind::DeleteRecords(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::DeleteRecords(admin::delete_records(&ctx, req).await))
        })),
        RequestKind::CreatePartitions(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::CreatePartitions(admin::create_partitions(&ctx, req).await))
        })),
        RequestKind::DescribeCluster(req) => {
            Handled::Ready(done(ResponseKind::DescribeCluster(admin::describe_cluster(&ctx, req))))
        }
        RequestKind::DescribeConfigs(req) => {
            Handled::Ready(done(ResponseKind::DescribeConfigs(configs::describe_configs(&ctx, req))))
        }
        RequestKind::AlterConfigs(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::AlterConfigs(configs::alter_configs(&ctx, req).await))
        })),
        RequestKind::IncrementalAlterConfigs(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::IncrementalAlterConfigs(configs::incremental_alter_configs(&ctx, req).await))
        })),
        RequestKind::FindCoordinator(req) => {
            Handled::Ready(done(ResponseKind::FindCoordinator(admin::find_coordinator(&ctx, req, version))))
        }
        RequestKind::InitProducerId(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::InitProducerId(admin::init_producer_id(&ctx, req, version).await))
        })),
        RequestKind::AddPartitionsToTxn(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::AddPartitionsToTxn(transactions::requests::add_partitions(&ctx, req).await))
        })),
        RequestKind::AddOffsetsToTxn(req) => {
            Handled::Ready(done(ResponseKind::AddOffsetsToTxn(transactions::requests::add_offsets(&ctx, req))))
        }
        RequestKind::TxnOffsetCommit(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::TxnOffsetCommit(transactions::requests::txn_offset_commit(&ctx, req, version).await))
        })),
        RequestKind::EndTxn(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::EndTxn(transactions::requests::end_txn(&ctx, req).await))
        })),
        RequestKind::JoinGroup(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::JoinGroup(groups::membership::join(&ctx, req, version, &client).await))
        })),
        RequestKind::SyncGroup(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::SyncGroup(groups::membership::sync(&ctx, req, version).await))
        })),
        RequestKind::Heartbeat(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::Heartbeat(groups::membership::heartbeat(&ctx, req, version).await))
        })),
        RequestKind::LeaveGroup(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::LeaveGroup(groups::membership::leave(&ctx, req, version).await))
        })),
        RequestKind::OffsetCommit(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::OffsetCommit(groups::offsets::commit(&ctx, req, version).await))
        })),
        RequestKind::OffsetFetch(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::OffsetFetch(groups::offsets::fetch(&ctx, req, version).await))
        })),
        RequestKind::OffsetDelete(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::OffsetDelete(groups::offsets::delete(&ctx, req).await))
        })),
        RequestKind::ConsumerGroupHeartbeat(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::ConsumerGroupHeartbeat(groups::consumer::heartbeat(&ctx, req, version, &client).await))
        })),
        RequestKind::ConsumerGroupDescribe(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::ConsumerGroupDescribe(groups::consumer::describe(&ctx, req, version).await))
        })),
        RequestKind::ListGroups(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::ListGroups(groups::admin::list(&ctx, req, version).await))
        })),
        RequestKind::DescribeGroups(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::DescribeGroups(groups::admin::describe(&ctx, req, version).await))
        })),
        RequestKind::DeleteGroups(req) => Handled::Working(Box::pin(async move {
            done(ResponseKind::DeleteGroups(groups::admin::delete(&ctx, req).await))
        })),
        _ => Handled::Close(format!("no handler for {api:?}")),
    }
}
