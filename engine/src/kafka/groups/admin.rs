//! ListGroups, DescribeGroups and DeleteGroups.

use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse, GroupId,
    ListGroupsRequest, ListGroupsResponse,
};

use super::{CONSUMER, encode_assignment, encode_subscription, str_bytes};
use crate::group::classic::GroupState;
use crate::group::coordinator::GroupView;
use crate::kafka::context::Context;
use crate::kafka::errors::{self, code};

/// The client id DescribeGroups shows for the engine's own consumers.
const ENGINE_CLIENT_ID: &str = "sluice-engine";

/// What a client may do to a group, as DescribeGroups v3+ reports it when asked: with no
/// authorizer, everything a group supports (Kafka's READ 3, DELETE 6 and DESCRIBE 8).
const GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8);

/// Handles a ListGroups request: every group with members or committed offsets, filtered
/// by state (v4+, any case) and type (v5+).
pub(crate) async fn list(ctx: &Arc<Context>, req: ListGroupsRequest, version: i16) -> ListGroupsResponse {
    let mut resp = ListGroupsResponse::default();
    let groups = match ctx.engine.group_overviews().await {
        Ok(g) => g,
        Err(e) => {
            resp.error_code = errors::of(&e);
            return resp;
        }
    };
    let states: Vec<String> = req.states_filter.iter().map(|s| s.as_str().to_lowercase()).collect();
    let types: Vec<String> = req.types_filter.iter().map(|s| s.as_str().to_lowercase()).collect();
    for g in groups {
        if version >= 4 && !states.is_empty() && !states.contains(&g.state.to_lowercase()) {
            continue;
        }
        if version >= 5 && !types.is_empty() && !types.iter().any(|t| t == g.group_type) {
            continue;
        }
        let mut lg = ListedGroup::default();
        lg.group_id = GroupId(str_bytes(g.group));
        lg.protocol_type = str_bytes(g.protocol_type);
        if version >= 4 {
            lg.group_state = str_bytes(g.state);
        }
        if version >= 5 {
            lg.group_type = str_bytes(g.group_type);
        }
        resp.groups.push(lg);
    }
    resp
}

/// Fills a DescribeGroups entry from the coordinator's view. A group of Kafka clients is
/// shown as Kafka shows it (members' metadata and assignments only once stable); a group
/// of the engine's own consumers as a stable consumer group whose protocol is its
/// assignor; a group with only committed offsets as empty; no group as dead.
fn describe_one(dg: &mut DescribedGroup, view: GroupView, version: i16) {
    let engine = view.engine.filter(|d| !d.members.is_empty());
    if let Some(d) = engine {
        dg.group_state = str_bytes("Stable");
        dg.protocol_type = str_bytes(CONSUMER);
        dg.protocol_data = str_bytes(d.assignor);
        for (id, topics, assignment) in d.members {
            let mut m = DescribedGroupMember::default();
            m.member_id = str_bytes(id.as_str());
            m.client_id = str_bytes(ENGINE_CLIENT_ID);
            m.member_metadata = encode_subscription(&topics);
            m.member_assignment = encode_assignment(&assignment);
            dg.members.push(m);
        }
        return;
    }
    // A KIP-848 group, as Kafka's DescribeGroups shows one: its state, protocol type
    // `consumer`, its assignor as the protocol, each member's subscription and what it
    // owns in the consumer protocol's encoding.
    if let Some(c) = view.consumer.filter(|c| !c.members.is_empty()) {
        dg.group_state = str_bytes(c.state);
        dg.protocol_type = str_bytes(CONSUMER);
        dg.protocol_data = str_bytes(c.assignor);
        for cm in c.members {
            let (metadata, assignment) = (encode_subscription(&cm.topics), encode_assignment(&cm.assignment));
            let identity = (cm.member.as_str(), cm.instance, cm.client_id, cm.client_host);
            dg.members.push(described_member(version, identity, metadata, assignment));
        }
        return;
    }
    if let Some(c) = view.classic {
        dg.group_state = str_bytes(c.state.name());
        dg.protocol_type = str_bytes(c.protocol_type);
        dg.protocol_data = str_bytes(c.protocol.unwrap_or_default());
        for cm in c.members {
            let identity = (cm.member.as_str(), cm.instance, cm.client_id, cm.client_host);
            dg.members.push(described_member(version, identity, cm.metadata, cm.assignment));
        }
        return;
    }
    dg.group_state = str_bytes(if view.has_offsets { GroupState::Empty.name() } else { "Dead" });
}

/// Handles a DescribeGroups request.
pub(crate) async fn describe(ctx: &Arc<Context>, req: DescribeGroupsRequest, version: i16) -> DescribeGroupsResponse {
    let mut resp = DescribeGroupsResponse::default();
    for g in req.groups {
        let mut dg = DescribedGroup::default();
        if version >= 3 && req.include_authorized_operations {
            dg.authorized_operations = GROUP_OPERATIONS;
        }
        match ctx.engine.group_view(g.0.as_str()).await {
            Ok(view) => describe_one(&mut dg, view, version),
            Err(e) => dg.error_code = errors::of(&e),
        }
        dg.group_id = g;
        resp.groups.push(dg);
    }
    resp
}

/// Handles a DeleteGroups request: each group with no members is deleted with its
/// committed offsets (NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND if there
/// is no such group).
pub(crate) async fn delete(ctx: &Arc<Context>, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let mut resp = DeleteGroupsResponse::default();
    for g in req.groups_names {
        let mut r = DeletableGroupResult::default();
        r.error_code = match ctx.engine.delete_group(g.0.as_str()).await {
            Ok(()) => code::NONE,
            Err(e) => errors::of(&e),
        };
        r.group_id = g;
        resp.results.push(r);
    }
    resp
}

/// A DescribeGroups member: its id, instance id (from v4), client id and host, and its
/// metadata and assignment as the group's protocol encodes them.
fn described_member(
    version: i16,
    (member, instance, client_id, client_host): (&str, Option<String>, String, String),
    metadata: bytes::Bytes,
    assignment: bytes::Bytes,
) -> DescribedGroupMember {
    let mut m = DescribedGroupMember::default();
    m.member_id = str_bytes(member);
    if version >= 4 {
        m.group_instance_id = instance.map(str_bytes);
    }
    m.client_id = str_bytes(client_id);
    m.client_host = str_bytes(client_host);
    m.member_metadata = metadata;
    m.member_assignment = assignment;
    m
}
