//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup: Kafka's classic protocol, run by the
//! coordinator's classic groups (see the parent module).

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse,
    SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{Client, SESSION_TIMEOUT_MS, member_of, opt_str, str_bytes};
use crate::error::{EngineError, GroupError};
use crate::group::assignor::MemberId;
use crate::group::classic::{ClassicJoin, ClassicSync, Leaving, Protocol};
use crate::kafka::context::Context;
use crate::kafka::errors::{self, code};

/// Handles a JoinGroup request: answered once the group's rebalance completes.
pub(crate) async fn join(
    ctx: &Arc<Context>,
    req: JoinGroupRequest,
    version: i16,
    client: &Client,
) -> JoinGroupResponse {
    let mut resp = JoinGroupResponse::default();
    resp.member_id = req.member_id.clone();
    // From v7 a failed join has no protocol name (null); before, an empty one.
    resp.protocol_name = if version >= 7 { None } else { Some(StrBytes::default()) };
    let group = req.group_id.0.as_str();
    if group.is_empty() {
        resp.error_code = code::INVALID_GROUP_ID;
        return resp;
    }
    if !SESSION_TIMEOUT_MS.contains(&req.session_timeout_ms) {
        resp.error_code = code::INVALID_SESSION_TIMEOUT;
        return resp;
    }
    // Before v1 a join has no rebalance timeout of its own: the session timeout.
    let rebalance_ms = if version >= 1 { req.rebalance_timeout_ms } else { req.session_timeout_ms };
    let instance = if version >= 5 { opt_str(req.group_instance_id.as_ref()) } else { None };
    let join = ClassicJoin {
        member: member_of(&req.member_id),
        require_known_member: version >= 4 && instance.is_none(),
        instance,
        client_id: client.id.clone(),
        client_host: client.host.to_string(),
        session_timeout: Duration::from_millis(req.session_timeout_ms as u64),
        rebalance_timeout: Duration::from_millis(rebalance_ms.max(0) as u64),
        protocol_type: req.protocol_type.as_str().to_string(),
        protocols: req
            .protocols
            .into_iter()
            .map(|p| Protocol { name: p.name.as_str().to_string(), metadata: p.metadata })
            .collect(),
        supports_skip_assignment: version >= 9,
        initial_rebalance_delay: ctx.config.group_initial_rebalance_delay,
    };
    match ctx.engine.classic_join(group, join).await {
        Ok(r) => {
            resp.generation_id = r.generation;
            resp.member_id = str_bytes(r.member.as_str());
            resp.protocol_name = Some(str_bytes(r.protocol.unwrap_or_default()));
            if version >= 7 {
                resp.protocol_type = Some(str_bytes(r.protocol_type));
            }
            resp.leader = str_bytes(r.leader.map(|l| l.to_string()).unwrap_or_default());
            if version >= 9 {
                resp.skip_assignment = r.skip_assignment;
            }
            resp.members = r
                .members
                .into_iter()
                .map(|m| {
                    let mut jm = JoinGroupResponseMember::default();
                    jm.member_id = str_bytes(m.member.as_str());
                    if version >= 5 {
                        jm.group_instance_id = m.instance.map(str_bytes);
                    }
                    jm.metadata = m.metadata;
                    jm
                })
                .collect();
        }
        Err(EngineError::Group { source: GroupError::MemberIdRequired(id), .. }) => {
            resp.error_code = code::MEMBER_ID_REQUIRED;
            resp.member_id = str_bytes(id);
        }
        Err(e) => resp.error_code = errors::of(&e),
    }
    resp
}

/// Handles a SyncGroup request: the member's assignment, once the leader's is in.
pub(crate) async fn sync(ctx: &Arc<Context>, req: SyncGroupRequest, version: i16) -> SyncGroupResponse {
    let mut resp = SyncGroupResponse::default();
    let group = req.group_id.0.as_str();
    if group.is_empty() {
        resp.error_code = code::INVALID_GROUP_ID;
        return resp;
    }
    let Some(member) = member_of(&req.member_id) else {
        resp.error_code = code::UNKNOWN_MEMBER_ID;
        return resp;
    };
    let sync = ClassicSync {
        member,
        instance: if version >= 3 { opt_str(req.group_instance_id.as_ref()) } else { None },
        generation: req.generation_id,
        protocol_type: if version >= 5 { opt_str(req.protocol_type.as_ref()) } else { None },
        protocol: if version >= 5 { opt_str(req.protocol_name.as_ref()) } else { None },
        assignments: req.assignments.into_iter().map(|a| (MemberId::new(a.member_id.as_str()), a.assignment)).collect(),
    };
    match ctx.engine.classic_sync(group, sync).await {
        Ok(r) => {
            resp.assignment = r.assignment;
            if version >= 5 {
                resp.protocol_type = Some(str_bytes(r.protocol_type));
                resp.protocol_name = Some(str_bytes(r.protocol));
            }
        }
        Err(e) => resp.error_code = errors::of(&e),
    }
    resp
}

/// Handles a Heartbeat request: REBALANCE_IN_PROGRESS asks the member to rejoin.
pub(crate) async fn heartbeat(ctx: &Arc<Context>, req: HeartbeatRequest, version: i16) -> HeartbeatResponse {
    let mut resp = HeartbeatResponse::default();
    let group = req.group_id.0.as_str();
    resp.error_code = if group.is_empty() {
        code::INVALID_GROUP_ID
    } else {
        match member_of(&req.member_id) {
            None => code::UNKNOWN_MEMBER_ID,
            Some(member) => {
                let instance = if version >= 3 { req.group_instance_id.as_ref().map(StrBytes::as_str) } else { None };
                match ctx.engine.classic_heartbeat(group, &member, instance, req.generation_id).await {
                    Ok(()) => code::NONE,
                    Err(e) => errors::of(&e),
                }
            }
        }
    };
    resp
}

/// Handles a LeaveGroup request: one member before v3; from v3 a list of members, each by
/// member id or (an administrator's removal of a static member) by instance id alone.
pub(crate) async fn leave(ctx: &Arc<Context>, req: LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
    let mut resp = LeaveGroupResponse::default();
    let group = req.group_id.0.as_str();
    if group.is_empty() {
        resp.error_code = code::INVALID_GROUP_ID;
        return resp;
    }
    let leaving: Vec<Leaving> = if version < 3 {
        vec![Leaving { member: member_of(&req.member_id), instance: None }]
    } else {
        req.members
            .iter()
            .map(|m| Leaving { member: member_of(&m.member_id), instance: opt_str(m.group_instance_id.as_ref()) })
            .collect()
    };
    // Before v3 there is no instance id to name a member by.
    if version < 3 && leaving[0].member.is_none() {
        resp.error_code = code::UNKNOWN_MEMBER_ID;
        return resp;
    }
    let results = match ctx.engine.classic_leave(group, leaving).await {
        Ok(r) => r,
        Err(e) => {
            resp.error_code = errors::of(&e);
            return resp;
        }
    };
    let code_of = |r: &Result<(), GroupError>| match r {
        Ok(()) => code::NONE,
        Err(e) => errors::of_group(e),
    };
    if version < 3 {
        resp.error_code = results.first().map_or(code::UNKNOWN_MEMBER_ID, code_of);
    } else {
        for (m, r) in req.members.into_iter().zip(&results) {
            let mut mr = MemberResponse::default();
            mr.error_code = code_of(r);
            mr.member_id = m.member_id;
            mr.group_instance_id = m.group_instance_id;
            resp.members.push(mr);
        }
    }
    resp
}
