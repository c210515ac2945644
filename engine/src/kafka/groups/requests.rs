//! The classic consumer-group requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! OffsetCommit, OffsetFetch, ListGroups, DescribeGroups) over the engine's group
//! coordinator and the join barriers in the parent module.

use super::*;
use crate::kafka::context::Context;
use sluice_io::PartitionId;

/// Handles a JoinGroup request.
pub(crate) async fn join(ctx: &Arc<Context>, req: JoinGroupRequest, version: i16) -> JoinGroupResponse {
    let mut resp = JoinGroupResponse::default();
    resp.generation_id = -1;
    resp.member_id = req.member_id.clone();
    let outcome: Result<(String, crate::group::coordinator::MemberState), i16> = async {
        if req.protocol_type.as_str() != CONSUMER {
            return Err(code::INCONSISTENT_GROUP_PROTOCOL);
        }
        if !SESSION_TIMEOUT_MS.contains(&req.session_timeout_ms) {
            return Err(code::INVALID_SESSION_TIMEOUT);
        }
        let protocol = req
            .protocols
            .iter()
            .find(|p| ASSIGNOR_NAMES.contains(&p.name.as_str()))
            .ok_or(code::INCONSISTENT_GROUP_PROTOCOL)?;
        let topics = parse_subscription(&protocol.metadata).map_err(|_| code::INCONSISTENT_GROUP_PROTOCOL)?;
        let join = JoinRequest {
            member: member_of(&req.member_id),
            topics,
            session_timeout: Duration::from_millis(req.session_timeout_ms as u64),
            assignor: protocol.name.as_str().to_string(),
        };
        let group = req.group_id.0.as_str();
        let code_of = |e: EngineError| match e {
            EngineError::InvalidConfig(_) => code::INCONSISTENT_GROUP_PROTOCOL,
            e => errors::of(&e),
        };
        let state = ctx.engine.join_group(group, join.clone()).await.map_err(code_of)?;
        // Before v1 a join has no rebalance timeout of its own: the session timeout.
        let limit = if version >= 1 { req.rebalance_timeout_ms } else { req.session_timeout_ms };
        let limit = Duration::from_millis(limit.clamp(0, MAX_REBALANCE_TIMEOUT_MS) as u64);
        let state = await_rejoins(ctx, group, join, state, limit).await.map_err(code_of)?;
        Ok((protocol.name.as_str().to_string(), state))
    }
    .await;
    match outcome {
        Ok((protocol, state)) => {
            resp.generation_id = state.generation as i32;
            resp.member_id = str_bytes(state.member.as_str());
            resp.protocol_name = Some(str_bytes(protocol));
            if version >= 7 {
                resp.protocol_type = Some(str_bytes(CONSUMER));
            }
            // No leader: the coordinator assigns (see the module docs).
            resp.leader = StrBytes::default();
        }
        Err(c) => resp.error_code = c,
    }
    resp
}

/// Holds a join until every member of its generation has joined at that generation, as
/// Kafka's coordinator does before it completes a rebalance: a member that was in the
/// group rejoins only after its heartbeat told it of the rebalance and it gave its
/// partitions up (committing its positions), so a member answered here never starts on
/// a partition another still reads. If the group moves to a newer generation meanwhile
/// (a member left, was evicted or joined), the join is renewed at that one. After
/// `limit` (the client's rebalance timeout) the join completes anyway; members that did
/// not rejoin keep their session until it times out. The waiting member's session is
/// kept alive, as its client does not heartbeat while its join is pending.
async fn await_rejoins(
    ctx: &Context,
    group: &str,
    join: JoinRequest,
    mut state: crate::group::coordinator::MemberState,
    limit: Duration,
) -> Result<crate::group::coordinator::MemberState, EngineError> {
    let deadline = std::time::Instant::now() + limit;
    let arrive = |s: &crate::group::coordinator::MemberState| {
        ctx.joins().entry(group.to_string()).or_default().arrive(&s.member, s.generation)
    };
    let mut current = arrive(&state);
    loop {
        let Some(d) = ctx.engine.describe_group(group).await? else { return Ok(state) };
        if d.generation != state.generation || !current {
            let again = JoinRequest { member: Some(state.member.clone()), ..join.clone() };
            state = ctx.engine.join_group(group, again).await?;
            current = arrive(&state);
            continue;
        }
        let members: Vec<MemberId> = d.members.into_iter().map(|(m, _, _)| m).collect();
        let complete = ctx.joins().get_mut(group).is_none_or(|b| b.complete(&members));
        if complete || std::time::Instant::now() >= deadline {
            return Ok(state);
        }
        glommio::timer::sleep(REJOIN_POLL).await;
        ctx.engine.heartbeat(group, &state.member, &join.topics).await?;
    }
}

/// A stale generation in a sync or heartbeat means "rejoin".
fn rejoin_code(e: &EngineError) -> i16 {
    match e {
        EngineError::StaleGeneration { .. } => code::REBALANCE_IN_PROGRESS,
        e => errors::of(e),
    }
}

/// Handles a SyncGroup request: the member's assignment from the coordinator.
pub(crate) async fn sync(ctx: &Arc<Context>, req: SyncGroupRequest, version: i16) -> SyncGroupResponse {
    let mut resp = SyncGroupResponse::default();
    let Some(member) = member_of(&req.member_id) else {
        resp.error_code = code::UNKNOWN_MEMBER_ID;
        return resp;
    };
    let generation = u32::try_from(req.generation_id).unwrap_or(u32::MAX);
    let group = req.group_id.0.as_str();
    match ctx.engine.sync_group(group, &member, generation).await {
        Ok(state) => {
            resp.assignment = encode_assignment(&state.assignment);
            ctx.joins().entry(group.to_string()).or_default().synced.insert(member, state.assignment);
            if version >= 5 {
                resp.protocol_type = req.protocol_type.clone().or_else(|| Some(str_bytes(CONSUMER)));
                resp.protocol_name = req.protocol_name.clone();
            }
        }
        Err(e) => resp.error_code = rejoin_code(&e),
    }
    resp
}

/// Handles a Heartbeat request: REBALANCE_IN_PROGRESS once the group has a newer
/// generation than the member's.
pub(crate) async fn heartbeat(ctx: &Arc<Context>, req: HeartbeatRequest) -> HeartbeatResponse {
    let mut resp = HeartbeatResponse::default();
    resp.error_code = match heartbeat_code(ctx, &req).await {
        Ok(c) => c,
        Err(e) => rejoin_code(&e),
    };
    resp
}

async fn heartbeat_code(ctx: &Context, req: &HeartbeatRequest) -> Result<i16, EngineError> {
    let group = req.group_id.0.as_str();
    let Some(member) = member_of(&req.member_id) else { return Ok(code::UNKNOWN_MEMBER_ID) };
    // The engine's heartbeat wants the member's topics (to notice new partitions).
    let topics = match ctx.engine.describe_group(group).await? {
        Some(d) => match d.members.into_iter().find(|(m, _, _)| *m == member) {
            Some((_, topics, _)) => topics,
            None => return Ok(code::UNKNOWN_MEMBER_ID),
        },
        None => return Ok(code::UNKNOWN_MEMBER_ID),
    };
    let state = ctx.engine.heartbeat(group, &member, &topics).await?;
    let same_generation = i64::from(state.generation) == i64::from(req.generation_id);
    let handed_more = {
        let joins = ctx.joins();
        let synced = joins.get(group).and_then(|b| b.synced.get(&member));
        synced.is_some_and(|had| state.assignment.iter().any(|tp| !had.contains(tp)))
    };
    Ok(if same_generation && !handed_more { code::NONE } else { code::REBALANCE_IN_PROGRESS })
}

/// Handles a LeaveGroup request (one member before v3, a list from v3).
pub(crate) async fn leave(ctx: &Arc<Context>, req: LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
    let mut resp = LeaveGroupResponse::default();
    let group = req.group_id.0.as_str();
    let leave_one = |id: StrBytes| async move {
        match member_of(&id) {
            None => code::UNKNOWN_MEMBER_ID,
            Some(m) => match ctx.engine.leave_group(group, &m).await {
                Ok(()) => code::NONE,
                Err(e) => errors::of(&e),
            },
        }
    };
    if version < 3 {
        resp.error_code = leave_one(req.member_id.clone()).await;
    } else {
        for m in req.members {
            let mut r = MemberResponse::default();
            r.error_code = leave_one(m.member_id.clone()).await;
            r.member_id = m.member_id;
            r.group_instance_id = m.group_instance_id;
            resp.members.push(r);
        }
    }
    resp
}

/// Handles an OffsetCommit request, from a member (its id and generation) or standalone
/// (generation -1, no member id) while the group has no members.
pub(crate) async fn offset_commit(ctx: &Arc<Context>, req: OffsetCommitRequest) -> OffsetCommitResponse {
    let group = req.group_id.0.as_str();
    let member = member_of(&req.member_id);
    let generation = req.generation_id_or_member_epoch;
    let mut offsets = Vec::new();
    let mut invalid = Vec::new();
    for t in &req.topics {
        for p in &t.partitions {
            match (PartitionId::try_from(p.partition_index), u64::try_from(p.committed_offset)) {
                (Ok(pi), Ok(o)) => offsets.push((t.name.0.as_str().to_string(), pi, Offset(o))),
                _ => invalid.push((t.name.0.as_str().to_string(), p.partition_index)),
            }
        }
    }
    let result = match (&member, generation) {
        (None, -1) => ctx.engine.commit_offsets(group, None, &offsets).await,
        (Some(m), g) if g >= 0 => match ctx.engine.commit_offsets(group, Some((m, g as u32)), &offsets).await {
            // The engine starts a new generation as soon as membership changes, where
            // Kafka's coordinator first waits for every member to rejoin, accepting the
            // commits members make as they give up their partitions. A member still in
            // the group committing at its older generation is doing just that: let it
            // through (at worst records are read twice, never skipped).
            Err(EngineError::StaleGeneration { got, current, .. }) if got < current => {
                ctx.engine.commit_offsets(group, Some((m, current)), &offsets).await
            }
            other => other,
        },
        (None, _) => Err(EngineError::UnknownMember { group: group.to_string(), member: String::new() }),
        (Some(m), _) => {
            Err(EngineError::StaleGeneration { group: group.into(), member: m.to_string(), got: 0, current: 0 })
        }
    };
    let shared = match &result {
        Ok(()) => code::NONE,
        Err(EngineError::InvalidConfig(_)) => code::UNKNOWN_MEMBER_ID,
        Err(e) => errors::of(e),
    };
    let mut resp = OffsetCommitResponse::default();
    for t in req.topics {
        let mut tr = OffsetCommitResponseTopic::default();
        for p in &t.partitions {
            let mut pr = OffsetCommitResponsePartition::default();
            pr.partition_index = p.partition_index;
            let bad = invalid.iter().any(|(n, i)| n == t.name.0.as_str() && *i == p.partition_index);
            pr.error_code = if bad { code::INVALID_REQUEST } else { shared };
            tr.partitions.push(pr);
        }
        tr.name = t.name;
        resp.topics.push(tr);
    }
    resp
}

/// Handles an OffsetFetch request (one group, versions before 8).
pub(crate) async fn offset_fetch(ctx: &Arc<Context>, req: OffsetFetchRequest) -> OffsetFetchResponse {
    let mut resp = OffsetFetchResponse::default();
    let committed = match ctx.engine.committed_offsets(req.group_id.0.as_str()).await {
        Ok(c) => c,
        Err(e) => {
            resp.error_code = errors::of(&e);
            return resp;
        }
    };
    let asked: Vec<(String, Vec<i32>)> = match req.topics {
        Some(ts) => ts.into_iter().map(|t| (t.name.0.as_str().to_string(), t.partition_indexes)).collect(),
        None => {
            let mut all: Vec<(String, Vec<i32>)> = Vec::new();
            for (topic, p) in committed.keys() {
                match all.last_mut() {
                    Some((t, ps)) if t == topic => ps.push(p.get() as i32),
                    _ => all.push((topic.clone(), vec![p.get() as i32])),
                }
            }
            all
        }
    };
    for (topic, partitions) in asked {
        let mut tr = OffsetFetchResponseTopic::default();
        for p in partitions {
            let mut pr = OffsetFetchResponsePartition::default();
            pr.partition_index = p;
            pr.committed_offset = PartitionId::try_from(p)
                .ok()
                .and_then(|pi| committed.get(&(topic.clone(), pi)))
                .map_or(-1, |o| o.0 as i64);
            pr.metadata = Some(StrBytes::default());
            tr.partitions.push(pr);
        }
        tr.name = TopicName(str_bytes(topic));
        resp.topics.push(tr);
    }
    resp
}

fn state_name(members: usize) -> &'static str {
    if members == 0 { "Empty" } else { "Stable" }
}

/// Handles a ListGroups request.
pub(crate) async fn list(ctx: &Arc<Context>, _req: ListGroupsRequest, version: i16) -> ListGroupsResponse {
    let mut resp = ListGroupsResponse::default();
    match ctx.engine.list_groups().await {
        Ok(groups) => {
            for g in groups {
                let mut lg = ListedGroup::default();
                if version >= 4 {
                    let members = ctx.engine.describe_group(&g).await.ok().flatten().map_or(0, |d| d.members.len());
                    lg.group_state = str_bytes(state_name(members));
                }
                lg.group_id = GroupId(str_bytes(g));
                lg.protocol_type = str_bytes(CONSUMER);
                resp.groups.push(lg);
            }
        }
        Err(e) => resp.error_code = errors::of(&e),
    }
    resp
}

/// Handles a DescribeGroups request.
pub(crate) async fn describe(ctx: &Arc<Context>, req: DescribeGroupsRequest, _version: i16) -> DescribeGroupsResponse {
    let mut resp = DescribeGroupsResponse::default();
    for g in req.groups {
        let mut dg = DescribedGroup::default();
        match ctx.engine.describe_group(g.0.as_str()).await {
            Ok(None) => dg.group_state = str_bytes("Dead"),
            Ok(Some(d)) => {
                dg.group_state = str_bytes(state_name(d.members.len()));
                dg.protocol_type = str_bytes(CONSUMER);
                dg.protocol_data = str_bytes(d.assignor.clone());
                for (id, topics, assignment) in d.members {
                    let mut m = DescribedGroupMember::default();
                    m.member_id = str_bytes(id.as_str());
                    m.member_metadata = encode_subscription(&topics);
                    m.member_assignment = encode_assignment(&assignment);
                    dg.members.push(m);
                }
            }
            Err(e) => dg.error_code = errors::of(&e),
        }
        dg.group_id = g;
        resp.groups.push(dg);
    }
    resp
}
