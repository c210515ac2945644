//! Consumer groups' checks: membership and KIP-848 heartbeats need Read on the group,
//! commits Read on the group and on each topic, offset fetches and descriptions Describe
//! on the group, deletes Delete; FindCoordinator needs Describe on the group or the
//! transactional id; ListGroups lists what the principal may describe (all of them with
//! Describe on the cluster).

use kafka_protocol::messages::{
    ConsumerGroupHeartbeatResponse, FindCoordinatorResponse, HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse,
    OffsetCommitRequest, OffsetDeleteResponse, OffsetFetchResponse, RequestKind, ResponseKind, SyncGroupResponse,
    consumer_group_describe_response, delete_groups_response, describe_groups_response, offset_commit_response,
};

use super::{Authz, Screened, code};
use crate::security::acl::{CLUSTER, Operation, ResourceType};

fn group(authz: &Authz, op: Operation, id: &str) -> bool {
    authz.allows(op, ResourceType::Group, id)
}

fn answer(resp: ResponseKind) -> Screened {
    Screened::Answer(Box::new(resp))
}

fn go(request: RequestKind) -> Screened {
    Screened::Go(Box::new(request), None)
}

/// Screens a group API; `Err` gives back a request of another kind.
pub(super) fn screen(authz: &Authz, request: RequestKind) -> Result<Screened, Box<RequestKind>> {
    use Operation::{Delete, Describe, Read};
    Ok(match request {
        RequestKind::JoinGroup(r) if !group(authz, Read, r.group_id.0.as_str()) => {
            let mut resp = JoinGroupResponse::default();
            resp.error_code = code::GROUP;
            resp.generation_id = -1;
            answer(ResponseKind::JoinGroup(resp))
        }
        RequestKind::SyncGroup(r) if !group(authz, Read, r.group_id.0.as_str()) => {
            let mut resp = SyncGroupResponse::default();
            resp.error_code = code::GROUP;
            answer(ResponseKind::SyncGroup(resp))
        }
        RequestKind::Heartbeat(r) if !group(authz, Read, r.group_id.0.as_str()) => {
            let mut resp = HeartbeatResponse::default();
            resp.error_code = code::GROUP;
            answer(ResponseKind::Heartbeat(resp))
        }
        RequestKind::LeaveGroup(r) if !group(authz, Read, r.group_id.0.as_str()) => {
            let mut resp = LeaveGroupResponse::default();
            resp.error_code = code::GROUP;
            answer(ResponseKind::LeaveGroup(resp))
        }
        RequestKind::ConsumerGroupHeartbeat(r) if !group(authz, Read, r.group_id.0.as_str()) => {
            let mut resp = ConsumerGroupHeartbeatResponse::default();
            resp.error_code = code::GROUP;
            resp.member_epoch = -1;
            answer(ResponseKind::ConsumerGroupHeartbeat(resp))
        }
        RequestKind::OffsetCommit(r) => offset_commit(authz, r),
        RequestKind::OffsetFetch(r) => offset_fetch(authz, r),
        RequestKind::FindCoordinator(r) => {
            let (kind, error) = match r.key_type {
                1 => (ResourceType::TransactionalId, code::TRANSACTIONAL_ID),
                _ => (ResourceType::Group, code::GROUP),
            };
            if authz.allows(Describe, kind, r.key.as_str()) {
                go(RequestKind::FindCoordinator(r))
            } else {
                let mut resp = FindCoordinatorResponse::default();
                resp.error_code = error;
                resp.node_id = kafka_protocol::messages::BrokerId(-1);
                resp.port = -1;
                answer(ResponseKind::FindCoordinator(resp))
            }
        }
        other @ (RequestKind::DescribeGroups(_)
        | RequestKind::ConsumerGroupDescribe(_)
        | RequestKind::ListGroups(_)
        | RequestKind::DeleteGroups(_)) => admin(authz, other),
        RequestKind::OffsetDelete(r) => {
            let topics_ok = r.topics.iter().all(|t| authz.allows(Read, ResourceType::Topic, t.name.0.as_str()));
            if group(authz, Delete, r.group_id.0.as_str()) && topics_ok {
                go(RequestKind::OffsetDelete(r))
            } else {
                let mut resp = OffsetDeleteResponse::default();
                resp.error_code = if topics_ok { code::GROUP } else { code::TOPIC };
                answer(ResponseKind::OffsetDelete(resp))
            }
        }
        other => return Err(Box::new(other)),
    })
}

/// OffsetCommit: Read on the group (else every partition GROUP_AUTHORIZATION_FAILED) and
/// on each topic (else its partitions TOPIC_AUTHORIZATION_FAILED).
fn offset_commit(authz: &Authz, mut r: OffsetCommitRequest) -> Screened {
    let group_ok = group(authz, Operation::Read, r.group_id.0.as_str());
    let mut denied = Vec::new();
    r.topics.retain(|t| {
        let ok = group_ok && authz.allows(Operation::Read, ResourceType::Topic, t.name.0.as_str());
        if !ok {
            let error = if group_ok { code::TOPIC } else { code::GROUP };
            denied.push((t.name.clone(), t.partitions.iter().map(|p| p.partition_index).collect::<Vec<_>>(), error));
        }
        ok
    });
    if denied.is_empty() {
        return Screened::Go(Box::new(RequestKind::OffsetCommit(r)), None);
    }
    let patch = move |resp: &mut ResponseKind| {
        let ResponseKind::OffsetCommit(resp) = resp else { return };
        for (name, partitions, error) in denied {
            let mut t = offset_commit_response::OffsetCommitResponseTopic::default();
            t.name = name;
            t.partitions = partitions
                .into_iter()
                .map(|index| {
                    let mut p = offset_commit_response::OffsetCommitResponsePartition::default();
                    p.partition_index = index;
                    p.error_code = error;
                    p
                })
                .collect();
            resp.topics.push(t);
        }
    };
    Screened::Go(Box::new(RequestKind::OffsetCommit(r)), Some(Box::new(patch)))
}

/// OffsetFetch: one group (before v8) or several, each needing Describe; a group denied is
/// answered GROUP_AUTHORIZATION_FAILED, and only topics the principal may describe are
/// shown.
fn offset_fetch(authz: &Authz, r: kafka_protocol::messages::OffsetFetchRequest) -> Screened {
    use Operation::Describe;
    let single = (!r.group_id.0.is_empty()).then(|| r.group_id.0.to_string());
    let single_ok = single.as_ref().is_none_or(|g| group(authz, Describe, g));
    let denied: Vec<String> =
        r.groups.iter().map(|g| g.group_id.0.to_string()).filter(|g| !group(authz, Describe, g)).collect();
    let filter = authz.clone();
    let patch = move |resp: &mut ResponseKind| {
        let ResponseKind::OffsetFetch(resp) = resp else { return };
        let visible = |t: &str| filter.quietly_allows(Describe, ResourceType::Topic, t);
        if !single_ok {
            *resp = OffsetFetchResponse::default();
            resp.error_code = code::GROUP;
        }
        resp.topics.retain(|t| visible(t.name.0.as_str()));
        for g in &mut resp.groups {
            if denied.iter().any(|d| d.as_str() == g.group_id.0.as_str()) {
                g.topics.clear();
                g.error_code = code::GROUP;
            }
            g.topics.retain(|t| visible(t.name.0.as_str()));
        }
    };
    Screened::Go(Box::new(RequestKind::OffsetFetch(r)), Some(Box::new(patch)))
}

/// DescribeGroups, ConsumerGroupDescribe (Describe per group), ListGroups (the groups the
/// principal may describe), DeleteGroups (Delete per group).
fn admin(authz: &Authz, request: RequestKind) -> Screened {
    use Operation::{Delete, Describe};
    match request {
        RequestKind::DescribeGroups(mut r) => {
            let mut denied = Vec::new();
            r.groups.retain(|g| group(authz, Describe, g.0.as_str()) || (denied.push(g.clone()), false).1);
            let patch = move |resp: &mut ResponseKind| {
                let ResponseKind::DescribeGroups(resp) = resp else { return };
                for g in denied {
                    let mut d = describe_groups_response::DescribedGroup::default();
                    d.error_code = code::GROUP;
                    d.group_id = g;
                    resp.groups.push(d);
                }
            };
            Screened::Go(Box::new(RequestKind::DescribeGroups(r)), Some(Box::new(patch)))
        }
        RequestKind::ConsumerGroupDescribe(mut r) => {
            let mut denied = Vec::new();
            r.group_ids.retain(|g| group(authz, Describe, g.0.as_str()) || (denied.push(g.clone()), false).1);
            let patch = move |resp: &mut ResponseKind| {
                let ResponseKind::ConsumerGroupDescribe(resp) = resp else { return };
                for g in denied {
                    let mut d = consumer_group_describe_response::DescribedGroup::default();
                    d.error_code = code::GROUP;
                    d.group_id = g;
                    resp.groups.push(d);
                }
            };
            Screened::Go(Box::new(RequestKind::ConsumerGroupDescribe(r)), Some(Box::new(patch)))
        }
        RequestKind::ListGroups(r) => {
            let all = authz.quietly_allows(Describe, ResourceType::Cluster, CLUSTER);
            let filter = authz.clone();
            let patch = move |resp: &mut ResponseKind| {
                let ResponseKind::ListGroups(resp) = resp else { return };
                if !all {
                    resp.groups.retain(|g| filter.quietly_allows(Describe, ResourceType::Group, g.group_id.0.as_str()));
                }
            };
            Screened::Go(Box::new(RequestKind::ListGroups(r)), Some(Box::new(patch)))
        }
        RequestKind::DeleteGroups(mut r) => {
            let mut denied = Vec::new();
            r.groups_names.retain(|g| group(authz, Delete, g.0.as_str()) || (denied.push(g.clone()), false).1);
            let patch = move |resp: &mut ResponseKind| {
                let ResponseKind::DeleteGroups(resp) = resp else { return };
                for g in denied {
                    let mut d = delete_groups_response::DeletableGroupResult::default();
                    d.group_id = g;
                    d.error_code = code::GROUP;
                    resp.results.push(d);
                }
            };
            Screened::Go(Box::new(RequestKind::DeleteGroups(r)), Some(Box::new(patch)))
        }
        other => go(other),
    }
}
