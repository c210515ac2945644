//! The shard's side of consumer groups: the requests for the groups it coordinates (the
//! groups whose partition of the offsets topic it owns), the Kafka clients' JoinGroup and
//! SyncGroup requests that wait for their rebalance, and commits and deletions of offsets
//! in that topic.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::time::Instant;

use sluice_io::{BatchMeta, PartitionId, Record};

use super::partition::append;
use super::request::{Reply, Request};
use super::{ShardState, partition};
use crate::error::{EngineError, GroupError, Result};
use crate::group::classic::{CONSUMER_PROTOCOL_TYPE, JoinResult, Outcome, SyncResult, Ticket};
use crate::group::coordinator::{CommitAuth, GroupOverview, GroupView};
use crate::group::offsets::{self, OffsetCommit};
use crate::record::OwnedRecord;

/// The JoinGroup and SyncGroup requests waiting for their answers, by ticket. At most one
/// of each per member: a member's new request answers its older one.
#[derive(Default)]
pub(super) struct Waiters {
    next: Ticket,
    joins: HashMap<Ticket, Reply<JoinResult>>,
    syncs: HashMap<Ticket, Reply<SyncResult>>,
}

impl Waiters {
    fn ticket(&mut self) -> Ticket {
        self.next += 1;
        self.next
    }
}

fn group_error(group: &str) -> impl Fn(GroupError) -> EngineError + '_ {
    move |source| EngineError::Group { group: group.to_string(), source }
}

/// Sends the answers the classic coordinator has completed. A waiting request whose
/// client went away has dropped its receiver; its answer is dropped too.
fn deliver(st: &mut ShardState) {
    for c in st.groups.classic.take_completions() {
        let err = group_error(&c.group);
        match c.outcome {
            Outcome::Join(r) => {
                if let Some(reply) = st.waiters.joins.remove(&c.ticket) {
                    let _ = reply.try_send(r.map_err(&err));
                }
            }
            Outcome::Sync(r) => {
                if let Some(reply) = st.waiters.syncs.remove(&c.ticket) {
                    let _ = reply.try_send(r.map_err(&err));
                }
            }
        }
    }
}

/// The groups' clocks: evicts engine members and Kafka clients whose sessions expired,
/// completes rebalances whose time is up, and forgets empty Kafka groups that hold no
/// offsets.
pub(super) fn tick(state: &Rc<RefCell<ShardState>>) {
    let now = Instant::now();
    let mut st = state.borrow_mut();
    st.groups.expire(now);
    let empty = st.groups.classic.tick(now);
    deliver(&mut st);
    // (`tick` lists only groups nobody is about to join.)
    for g in empty {
        if !st.committed.contains_key(&g) {
            st.groups.classic.forget_if_empty(&g);
        }
    }
    // An emptied KIP-848 group is kept while it holds offsets (it is described as Empty);
    // one that never committed is forgotten.
    let idle: Vec<String> = st
        .groups
        .consumer
        .overview()
        .filter(|(g, state)| *state == "Empty" && !st.committed.contains_key(*g))
        .map(|(g, _)| g.to_string())
        .collect();
    for g in idle {
        st.groups.consumer.forget_if_empty(&g);
    }
}

/// Serves a request of Kafka's classic group protocol; hands any other request back.
async fn serve_classic(state: &Rc<RefCell<ShardState>>, request: Request) -> Option<Request> {
    match request {
        Request::ClassicJoin { group, req, reply } => {
            let mut st = state.borrow_mut();
            let ticket = st.waiters.ticket();
            st.waiters.joins.insert(ticket, reply);
            if let Err(e) = st.groups.classic_join(&group, req, ticket, Instant::now())
                && let Some(reply) = st.waiters.joins.remove(&ticket)
            {
                let _ = reply.try_send(Err(group_error(&group)(e)));
            }
            deliver(&mut st);
        }
        Request::ClassicSync { group, req, reply } => {
            let mut st = state.borrow_mut();
            let ticket = st.waiters.ticket();
            st.waiters.syncs.insert(ticket, reply);
            st.groups.classic.sync(&group, req, ticket, Instant::now());
            deliver(&mut st);
        }
        Request::ClassicHeartbeat { group, member, instance, generation, reply } => {
            let result = state.borrow_mut().groups.classic.heartbeat(
                &group,
                &member,
                instance.as_deref(),
                generation,
                Instant::now(),
            );
            let _ = reply.send(result.map_err(group_error(&group))).await;
        }
        Request::ClassicLeave { group, leaving, reply } => {
            let results = {
                let mut st = state.borrow_mut();
                let results = st.groups.classic.leave(&group, &leaving, Instant::now());
                deliver(&mut st);
                results
            };
            let _ = reply.send(Ok(results)).await;
        }
        other => return Some(other),
    }
    None
}

/// Serves a group request; hands any other request back.
pub(super) async fn serve(state: &Rc<RefCell<ShardState>>, request: Request) -> Option<Request> {
    let request = serve_classic(state, request).await?;
    if matches!(
        request,
        Request::GroupView { .. }
            | Request::GroupList { .. }
            | Request::GroupDelete { .. }
            | Request::GroupDeleteOffsets { .. }
    ) {
        // An admin request sees the groups as their clocks stand now, as Kafka's timers
        // would: a session that ran out since the last check (every 25 ms) is over, so a
        // DeleteGroups sent just after a member's session timeout finds the group empty.
        tick(state);
    }
    match request {
        Request::GroupJoin { group, req, partitions, reply } => {
            let result = state.borrow_mut().groups.join(&group, req, partitions, Instant::now());
            let _ = reply.send(result).await;
        }
        Request::GroupSync { group, member, generation, reply } => {
            let result = state.borrow_mut().groups.sync(&group, &member, generation, Instant::now());
            let _ = reply.send(result).await;
        }
        Request::GroupHeartbeat { group, member, partitions, reply } => {
            let result = state.borrow_mut().groups.heartbeat(&group, &member, partitions, Instant::now());
            let _ = reply.send(result).await;
        }
        Request::GroupLeave { group, member, reply } => {
            let result = state.borrow_mut().groups.leave(&group, &member);
            let _ = reply.send(result).await;
        }
        Request::ConsumerHeartbeat { group, req, topics, reply } => {
            let result = state.borrow_mut().groups.consumer_heartbeat(&group, req, &topics, Instant::now());
            let _ = reply.send(result.map_err(group_error(&group))).await;
        }
        Request::GroupCommit { group, auth, offsets_partition, offsets, reply } => {
            let result = commit(state, &group, &auth, offsets_partition, offsets).await;
            let _ = reply.send(result).await;
        }
        Request::GroupCheckCommit { group, auth, reply } => {
            let result = state.borrow_mut().groups.check_commit(&group, &auth, Instant::now());
            let _ = reply.send(result).await;
        }
        Request::GroupOffsets { group, reply } => {
            let committed = state.borrow().committed.get(&group).cloned().unwrap_or_default();
            let _ = reply.send(Ok(committed)).await;
        }
        Request::GroupView { group, reply } => {
            let view = {
                let st = state.borrow();
                GroupView {
                    engine: st.groups.describe(&group),
                    classic: st.groups.classic.describe(&group),
                    consumer: st.groups.consumer.describe(&group),
                    has_offsets: st.committed.contains_key(&group),
                }
            };
            let _ = reply.send(Ok(view)).await;
        }
        Request::GroupList { reply } => {
            let list = overview(&state.borrow());
            let _ = reply.send(Ok(list)).await;
        }
        Request::GroupDelete { group, offsets_partition, reply } => {
            let result = delete_group(state, &group, offsets_partition).await;
            let _ = reply.send(result).await;
        }
        Request::GroupDeleteOffsets { group, offsets_partition, partitions, reply } => {
            let result = delete_offsets(state, &group, offsets_partition, partitions).await;
            let _ = reply.send(result).await;
        }
        other => return Some(other),
    }
    None
}

/// Every group this shard knows, each once: the Kafka clients' groups, then the engine
/// consumers' groups, then groups that only hold offsets.
fn overview(st: &ShardState) -> Vec<GroupOverview> {
    let mut out: Vec<GroupOverview> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut add = |group: &str, state: &'static str, protocol_type: &str, out: &mut Vec<GroupOverview>| {
        if seen.insert(group.to_string()) {
            let group_type = if st.groups.consumer.contains(group) { "consumer" } else { "classic" };
            out.push(GroupOverview {
                group: group.to_string(),
                state,
                protocol_type: protocol_type.to_string(),
                group_type,
            });
        }
    };
    // KIP-848 groups with members first: an id is of one kind while it has members.
    let consumer: Vec<(&str, &'static str)> = st.groups.consumer.overview().collect();
    for (g, state) in consumer.iter().filter(|(_, s)| *s != "Empty") {
        add(g, state, CONSUMER_PROTOCOL_TYPE, &mut out);
    }
    // A group of one kind with members hides an empty one of the other.
    let mut classic: Vec<_> = st.groups.classic.overview().collect();
    classic.sort_by_key(|(_, state, _)| *state == crate::group::classic::GroupState::Empty);
    let engine: Vec<(String, bool)> = st
        .groups
        .groups()
        .map(|g| (g.to_string(), st.groups.describe(g).is_some_and(|d| !d.members.is_empty())))
        .collect();
    for (g, _) in engine.iter().filter(|(_, members)| *members) {
        add(g, "Stable", CONSUMER_PROTOCOL_TYPE, &mut out);
    }
    for (g, state, protocol_type) in classic {
        add(g, state.name(), protocol_type, &mut out);
    }
    for (g, _) in engine.iter().filter(|(_, members)| !*members) {
        add(g, "Empty", CONSUMER_PROTOCOL_TYPE, &mut out);
    }
    for (g, _) in consumer.iter().filter(|(_, s)| *s == "Empty") {
        add(g, "Empty", CONSUMER_PROTOCOL_TYPE, &mut out);
    }
    for g in st.committed.keys() {
        add(g, "Empty", "", &mut out);
    }
    out
}

/// Appends `records` to the group's partition of the offsets topic (as durable as that
/// topic's policy: `always`).
async fn append_offsets(
    state: &Rc<RefCell<ShardState>>,
    offsets_partition: PartitionId,
    records: &[OwnedRecord],
) -> Result<()> {
    let part = partition(state, offsets::TOPIC, offsets_partition)?;
    let mut headers = Vec::new();
    let recs: Vec<Record<'_>> = OwnedRecord::as_records(records, &mut headers);
    append(&part, offsets::TOPIC, offsets_partition, &recs, &BatchMeta::default()).await?;
    Ok(())
}

/// Checks a commit against the group, appends it to the offsets topic, then makes it
/// visible.
async fn commit(
    state: &Rc<RefCell<ShardState>>,
    group: &str,
    auth: &CommitAuth,
    offsets_partition: PartitionId,
    offsets: Vec<OffsetCommit>,
) -> Result<()> {
    state.borrow_mut().groups.check_commit(group, auth, Instant::now())?;
    append_offsets(state, offsets_partition, &offsets::records(group, &offsets)).await?;
    let mut st = state.borrow_mut();
    let committed = st.committed.entry(group.to_string()).or_default();
    for (topic, p, c) in offsets {
        committed.insert((topic, p), c);
    }
    Ok(())
}

/// Removes the given offsets from memory once their tombstones are durable.
fn forget_offsets(st: &mut ShardState, group: &str, partitions: &[(String, PartitionId)]) {
    if let Some(committed) = st.committed.get_mut(group) {
        for tp in partitions {
            committed.remove(tp);
        }
        if committed.is_empty() {
            st.committed.remove(group);
        }
    }
}

/// Kafka's DeleteGroups for one group: only with no members; its committed offsets are
/// deleted from the offsets topic (tombstones) and the coordinator forgets it.
async fn delete_group(state: &Rc<RefCell<ShardState>>, group: &str, offsets_partition: PartitionId) -> Result<()> {
    let err = group_error(group);
    let partitions: Vec<(String, PartitionId)> = {
        let mut st = state.borrow_mut();
        if st.groups.has_members(group) {
            return Err(err(GroupError::NonEmpty));
        }
        if !st.groups.knows(group) && !st.committed.contains_key(group) {
            return Err(err(GroupError::NotFound));
        }
        st.groups.forget(group);
        st.committed.get(group).map(|c| c.keys().cloned().collect()).unwrap_or_default()
    };
    if !partitions.is_empty() {
        append_offsets(state, offsets_partition, &offsets::tombstones(group, &partitions)).await?;
        forget_offsets(&mut state.borrow_mut(), group, &partitions);
    }
    Ok(())
}

/// Kafka's OffsetDelete: deletes a group's committed offsets of partitions whose topics
/// its members do not subscribe to (GROUP_SUBSCRIBED_TO_TOPIC for the others). A group of
/// Kafka clients whose protocol is not the consumer one cannot tell what it consumes: it
/// must be empty.
async fn delete_offsets(
    state: &Rc<RefCell<ShardState>>,
    group: &str,
    offsets_partition: PartitionId,
    partitions: Vec<(String, PartitionId)>,
) -> Result<Vec<Result<(), GroupError>>> {
    let err = group_error(group);
    let (results, doomed) = {
        let st = state.borrow();
        if !st.groups.knows(group) && !st.committed.contains_key(group) {
            return Err(err(GroupError::NotFound));
        }
        // `None`: every topic counts as subscribed.
        let subscribed: Option<BTreeSet<String>> = if st.groups.consumer.has_members(group) {
            st.groups.consumer.subscribed(group).map(|t| t.into_iter().collect())
        } else if st.groups.classic.has_members(group) {
            let d = st.groups.classic.describe(group).expect("a group with members");
            if d.protocol_type != CONSUMER_PROTOCOL_TYPE {
                return Err(err(GroupError::NonEmpty));
            }
            d.subscribed
        } else {
            let topics = st.groups.describe(group).map(|d| d.members.into_iter().flat_map(|(_, t, _)| t).collect());
            Some(topics.unwrap_or_default())
        };
        let held = st.committed.get(group);
        let mut doomed = Vec::new();
        let results: Vec<Result<(), GroupError>> = partitions
            .into_iter()
            .map(|(topic, p)| {
                if subscribed.as_ref().is_none_or(|s| s.contains(&topic)) {
                    return Err(GroupError::SubscribedToTopic(topic));
                }
                if held.is_some_and(|h| h.contains_key(&(topic.clone(), p))) {
                    doomed.push((topic, p));
                }
                Ok(())
            })
            .collect();
        (results, doomed)
    };
    if !doomed.is_empty() {
        append_offsets(state, offsets_partition, &offsets::tombstones(group, &doomed)).await?;
        forget_offsets(&mut state.borrow_mut(), group, &doomed);
    }
    Ok(results)
}
