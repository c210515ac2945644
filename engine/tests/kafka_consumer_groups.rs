//! KIP-848's consumer group protocol through the listener over raw TCP: ConsumerGroupHeartbeat
//! v0 (the listener names a joining member) and v1 (the member names itself), assignments
//! by topic id, the revocation before a partition moves, ConsumerGroupDescribe v0 and v1,
//! OffsetCommit v9 and OffsetFetch v9 checked against member epochs, ListGroups' type
//! filter, fencing of a silent member, and every refusal with Kafka's error code and a
//! message, nothing changed: bad fields, unknown members, epochs ahead, unknown assignors,
//! bad regexes, and group ids of the other (classic) protocol.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::kafka::{RawClient, Served};
use futures_lite::future::block_on;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use sluice_engine::kafka::KafkaConfig;
use uuid::Uuid;

const NONE: i16 = 0;
const UNKNOWN_MEMBER_ID: i16 = 25;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const INVALID_REQUEST: i16 = 42;
const GROUP_ID_NOT_FOUND: i16 = 69;
const FENCED_MEMBER_EPOCH: i16 = 110;
const UNSUPPORTED_ASSIGNOR: i16 = 112;
const STALE_MEMBER_EPOCH: i16 = 113;
const INVALID_REGULAR_EXPRESSION: i16 = 128;

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_string())
}

fn start(name: &str, session: Duration) -> Served {
    let mut kafka = KafkaConfig::new("127.0.0.1:0".parse().expect("address"));
    kafka.consumer_heartbeat_interval = Duration::from_millis(200);
    kafka.consumer_session_timeout = session;
    let served = Served::launch("kafka_consumer_groups", name, 2, kafka);
    block_on(served.handle().create_topic("t", 4, None)).expect("topic t");
    block_on(served.handle().create_topic("u", 1, None)).expect("topic u");
    served
}

fn join(group: &str, member: &str) -> ConsumerGroupHeartbeatRequest {
    let mut r = ConsumerGroupHeartbeatRequest::default();
    r.group_id = GroupId(s(group));
    r.member_id = s(member);
    r.member_epoch = 0;
    r.rebalance_timeout_ms = 10_000;
    r.subscribed_topic_names = Some(vec![TopicName(s("t"))]);
    r.topic_partitions = Some(Vec::new());
    r
}

fn beat(group: &str, member: &str, epoch: i32, owned: &[(Uuid, Vec<i32>)]) -> ConsumerGroupHeartbeatRequest {
    let mut r = ConsumerGroupHeartbeatRequest::default();
    r.group_id = GroupId(s(group));
    r.member_id = s(member);
    r.member_epoch = epoch;
    r.rebalance_timeout_ms = -1;
    r.topic_partitions = Some(
        owned
            .iter()
            .map(|(id, ps)| {
                let mut tp = consumer_group_heartbeat_request::TopicPartitions::default();
                tp.topic_id = *id;
                tp.partitions = ps.clone();
                tp
            })
            .collect(),
    );
    r
}

fn heartbeat(c: &mut RawClient, version: i16, r: &ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse {
    c.call(ApiKey::ConsumerGroupHeartbeat, version, r)
}

/// An assignment as (topic id, partitions).
fn owned(resp: &ConsumerGroupHeartbeatResponse) -> Option<Vec<(Uuid, Vec<i32>)>> {
    resp.assignment.as_ref().map(|a| a.topic_partitions.iter().map(|t| (t.topic_id, t.partitions.clone())).collect())
}

fn count(parts: &[(Uuid, Vec<i32>)]) -> usize {
    parts.iter().map(|(_, p)| p.len()).sum()
}

fn describe(c: &mut RawClient, version: i16, groups: &[&str]) -> ConsumerGroupDescribeResponse {
    let mut r = ConsumerGroupDescribeRequest::default();
    r.group_ids = groups.iter().map(|g| GroupId(s(g))).collect();
    r.include_authorized_operations = true;
    c.call(ApiKey::ConsumerGroupDescribe, version, &r)
}

fn commit(c: &mut RawClient, group: &str, member: &str, epoch: i32, offset: i64) -> i16 {
    let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
    p.partition_index = 0;
    p.committed_offset = offset;
    let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
    t.name = TopicName(s("t"));
    t.partitions = vec![p];
    let mut r = OffsetCommitRequest::default();
    r.group_id = GroupId(s(group));
    r.member_id = s(member);
    r.generation_id_or_member_epoch = epoch;
    r.topics = vec![t];
    let resp: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 9, &r);
    resp.topics[0].partitions[0].error_code
}

/// OffsetFetch v9 of partition t-0 as `member` at `epoch`: the group's error code and the
/// offset.
fn fetch_offset(c: &mut RawClient, group: &str, member: Option<&str>, epoch: i32) -> (i16, i64) {
    let mut t = offset_fetch_request::OffsetFetchRequestTopics::default();
    t.name = TopicName(s("t"));
    t.partition_indexes = vec![0];
    let mut g = offset_fetch_request::OffsetFetchRequestGroup::default();
    g.group_id = GroupId(s(group));
    g.member_id = member.map(s);
    g.member_epoch = epoch;
    g.topics = Some(vec![t]);
    let mut r = OffsetFetchRequest::default();
    r.groups = vec![g];
    let resp: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, 9, &r);
    let g = &resp.groups[0];
    (g.error_code, g.topics.first().map_or(-2, |t| t.partitions[0].committed_offset))
}

#[test]
fn two_members_reconcile_through_revocation_and_commits_follow_epochs() {
    let served = start("reconcile", Duration::from_secs(30));
    let t_id = served.handle().describe_topic("t").expect("t").id.0;
    let mut c = RawClient::connect(served.addr(), "kip848-test");

    // v0: a joining member sends no id and is given one.
    let a = heartbeat(&mut c, 0, &join("g", ""));
    assert_eq!(a.error_code, NONE, "{:?}", a.error_message);
    let a_id = a.member_id.clone().expect("a member id").as_str().to_string();
    assert!(!a_id.is_empty());
    assert_eq!(a.member_epoch, 1);
    assert_eq!(a.heartbeat_interval_ms, 200);
    let a_owned = owned(&a).expect("a join is answered with the assignment");
    assert_eq!(a_owned, vec![(t_id, vec![0, 1, 2, 3])], "by topic id");

    // v1: the member names itself.
    let b = heartbeat(&mut c, 1, &join("g", "member-b"));
    assert_eq!((b.error_code, b.member_epoch), (NONE, 2));
    assert_eq!(b.member_id.as_ref().map(|m| m.as_str()), Some("member-b"));
    assert_eq!(owned(&b).map(|o| count(&o)), Some(0), "a still owns everything");

    // a is told to revoke two partitions and keeps its epoch until it has.
    let a2 = heartbeat(&mut c, 1, &beat("g", &a_id, 1, &a_owned));
    assert_eq!(a2.member_epoch, 1);
    let a_kept = owned(&a2).expect("a changed assignment is sent");
    assert_eq!(count(&a_kept), 2);
    // A commit at epoch 1 is a's current one; at 2 it is not.
    assert_eq!(commit(&mut c, "g", &a_id, 1, 10), NONE);
    assert_eq!(commit(&mut c, "g", &a_id, 2, 11), STALE_MEMBER_EPOCH);
    assert_eq!(commit(&mut c, "g", "nobody", 1, 11), UNKNOWN_MEMBER_ID);
    assert_eq!(commit(&mut c, "g", "", -1, 11), UNKNOWN_MEMBER_ID, "not from outside while it has members");
    // b cannot have them yet.
    let b2 = heartbeat(&mut c, 1, &beat("g", "member-b", 2, &[]));
    assert_eq!(owned(&b2).map(|o| count(&o)).unwrap_or(0), 0);
    // a acknowledges, moves to epoch 2; b then gets the other two.
    let a3 = heartbeat(&mut c, 1, &beat("g", &a_id, 1, &a_kept));
    assert_eq!(a3.member_epoch, 2);
    let b3 = heartbeat(&mut c, 1, &beat("g", "member-b", 2, &[]));
    let b_owned = owned(&b3).expect("b's new partitions");
    assert_eq!(count(&b_owned), 2);
    let mut all: Vec<i32> = a_kept.iter().chain(&b_owned).flat_map(|(_, p)| p.clone()).collect();
    all.sort();
    assert_eq!(all, vec![0, 1, 2, 3]);
    // An unchanged heartbeat carries no assignment.
    let b4 = heartbeat(&mut c, 1, &beat("g", "member-b", 2, &b_owned));
    assert!(b4.assignment.is_none());

    // OffsetFetch v9 checks the member too.
    assert_eq!(fetch_offset(&mut c, "g", Some(&a_id), 2), (NONE, 10));
    assert_eq!(fetch_offset(&mut c, "g", Some(&a_id), 1).0, STALE_MEMBER_EPOCH);
    assert_eq!(fetch_offset(&mut c, "g", Some("nobody"), 2).0, UNKNOWN_MEMBER_ID);
    assert_eq!(fetch_offset(&mut c, "g", None, -1), (NONE, 10), "an admin's fetch names no member");

    for version in [0, 1] {
        let d = describe(&mut c, version, &["g", "unknown-group"]);
        let g = &d.groups[0];
        assert_eq!(g.error_code, NONE);
        assert_eq!((g.group_state.as_str(), g.group_epoch, g.assignment_epoch), ("Stable", 2, 2));
        assert_eq!(g.assignor_name.as_str(), "uniform");
        assert_eq!(g.members.len(), 2);
        for m in &g.members {
            assert_eq!(m.member_epoch, 2);
            assert_eq!(m.client_id.as_str(), "kip848-test");
            assert_eq!(m.client_host.as_str(), "/127.0.0.1");
            assert_eq!(m.subscribed_topic_names, vec![TopicName(s("t"))]);
            assert_eq!(m.assignment, m.target_assignment);
            assert_eq!(m.assignment.topic_partitions[0].topic_name.0.as_str(), "t");
            assert_eq!(m.assignment.topic_partitions[0].topic_id, t_id);
            assert_eq!(m.member_type, if version >= 1 { 1 } else { -1 });
        }
        assert_eq!(d.groups[1].error_code, GROUP_ID_NOT_FOUND);
        assert!(d.groups[1].error_message.is_some());
    }

    // ListGroups v5: the group is of type consumer.
    let mut lr = ListGroupsRequest::default();
    lr.types_filter = vec![s("consumer")];
    let listed: ListGroupsResponse = c.call(ApiKey::ListGroups, 5, &lr);
    assert_eq!(listed.groups.len(), 1);
    assert_eq!(listed.groups[0].group_type.as_str(), "consumer");
    assert_eq!(listed.groups[0].protocol_type.as_str(), "consumer");
    lr.types_filter = vec![s("classic")];
    let listed: ListGroupsResponse = c.call(ApiKey::ListGroups, 5, &lr);
    assert!(listed.groups.is_empty(), "{listed:?}");

    // b leaves; a is moved to a new epoch with everything.
    let left = heartbeat(&mut c, 1, &beat("g", "member-b", -1, &[]));
    assert_eq!((left.error_code, left.member_epoch), (NONE, -1));
    let a4 = heartbeat(&mut c, 1, &beat("g", &a_id, 2, &a_kept));
    assert_eq!(a4.member_epoch, 3);
    assert_eq!(owned(&a4).map(|o| count(&o)), Some(4));
}

#[test]
fn bad_heartbeats_get_kafkas_error_codes_and_change_nothing() {
    let served = start("refusals", Duration::from_secs(30));
    let mut c = RawClient::connect(served.addr(), "kip848-test");
    let mut cases: Vec<(ConsumerGroupHeartbeatRequest, i16, i16)> = Vec::new();
    cases.push((join("", "m"), 1, INVALID_REQUEST));
    cases.push((join("g", ""), 1, INVALID_REQUEST));
    let mut r = join("g", "m");
    r.rebalance_timeout_ms = -1;
    cases.push((r, 1, INVALID_REQUEST));
    let mut r = join("g", "m");
    r.subscribed_topic_names = None;
    cases.push((r, 1, INVALID_REQUEST));
    let mut r = join("g", "m");
    r.topic_partitions = None;
    cases.push((r, 1, INVALID_REQUEST));
    let mut r = join("g", "m");
    r.server_assignor = Some(s("cooperative-sticky"));
    cases.push((r, 1, UNSUPPORTED_ASSIGNOR));
    let mut r = join("g", "m");
    r.subscribed_topic_regex = Some(s("t(["));
    cases.push((r, 1, INVALID_REGULAR_EXPRESSION));
    cases.push((beat("g", "m", 3, &[]), 1, UNKNOWN_MEMBER_ID));
    let mut r = beat("g", "m", -2, &[]);
    r.instance_id = None;
    cases.push((r, 1, INVALID_REQUEST));
    for (req, version, code) in cases {
        let resp = heartbeat(&mut c, version, &req);
        assert_eq!(resp.error_code, code, "{req:?}");
        assert!(resp.error_message.is_some_and(|m| !m.is_empty()));
    }
    assert_eq!(describe(&mut c, 1, &["g"]).groups[0].error_code, GROUP_ID_NOT_FOUND, "nothing was created");

    // A member's epoch ahead of its own is fenced.
    let a = heartbeat(&mut c, 1, &join("g", "a"));
    assert_eq!(a.member_epoch, 1);
    let ahead = heartbeat(&mut c, 1, &beat("g", "a", 7, &[]));
    assert_eq!(ahead.error_code, FENCED_MEMBER_EPOCH);
    let still = heartbeat(&mut c, 1, &beat("g", "a", 1, &owned(&a).unwrap()));
    assert_eq!((still.error_code, still.member_epoch), (NONE, 1), "the fenced request changed nothing");

    // The classic protocol cannot join a KIP-848 group with members, nor KIP-848 a
    // classic group with members.
    let mut jg = JoinGroupRequest::default();
    jg.group_id = GroupId(s("g"));
    jg.session_timeout_ms = 10_000;
    jg.rebalance_timeout_ms = 10_000;
    jg.protocol_type = s("consumer");
    let mut p = join_group_request::JoinGroupRequestProtocol::default();
    p.name = s("range");
    p.metadata = Bytes::from_static(&[0, 0, 0, 0, 0, 0]);
    jg.protocols = vec![p];
    let joined: JoinGroupResponse = c.call(ApiKey::JoinGroup, 3, &jg);
    assert_eq!(joined.error_code, INCONSISTENT_GROUP_PROTOCOL);
    jg.group_id = GroupId(s("classic"));
    let joined: JoinGroupResponse = c.call(ApiKey::JoinGroup, 3, &jg);
    assert_eq!(joined.error_code, NONE);
    let refused = heartbeat(&mut c, 1, &join("classic", "x"));
    assert_eq!(refused.error_code, GROUP_ID_NOT_FOUND);
    assert!(refused.error_message.is_some_and(|m| m.as_str().contains("not a consumer group")));
    assert_eq!(describe(&mut c, 1, &["classic"]).groups[0].error_code, GROUP_ID_NOT_FOUND);
}

#[test]
fn a_silent_member_is_fenced_and_the_other_takes_its_partitions() {
    let session = Duration::from_millis(1500);
    let served = start("session", session);
    let mut c = RawClient::connect(served.addr(), "kip848-test");
    let a = heartbeat(&mut c, 1, &join("g", "a"));
    let mut a_owned = owned(&a).unwrap();
    let mut a_epoch = a.member_epoch;
    let b = heartbeat(&mut c, 1, &join("g", "b"));
    assert_eq!(b.error_code, NONE);
    // a keeps heartbeating (and revokes as told); b stays silent.
    let started = Instant::now();
    let mut revoked = false;
    while started.elapsed() < session * 3 && !(revoked && count(&a_owned) == 4) {
        let r = heartbeat(&mut c, 1, &beat("g", "a", a_epoch, &a_owned));
        assert_eq!(r.error_code, NONE, "{:?}", r.error_message);
        a_epoch = r.member_epoch;
        if let Some(o) = owned(&r) {
            a_owned = o;
        }
        revoked |= count(&a_owned) < 4;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(revoked, "a gave partitions up for b");
    assert_eq!(count(&a_owned), 4, "a took b's partitions back once b was fenced");
    assert!(started.elapsed() >= session, "not before b's session was up");
    let gone = heartbeat(&mut c, 1, &beat("g", "b", b.member_epoch, &[]));
    assert_eq!(gone.error_code, UNKNOWN_MEMBER_ID);
    let d = describe(&mut c, 1, &["g"]);
    assert_eq!(d.groups[0].members.len(), 1);
}

#[test]
fn membership_ends_with_a_restart_and_members_rejoin_at_their_committed_offsets() {
    let mut served = start("restart", Duration::from_secs(30));
    let mut c = RawClient::connect(served.addr(), "kip848-test");
    let a = heartbeat(&mut c, 1, &join("g", "a"));
    assert_eq!(commit(&mut c, "g", "a", a.member_epoch, 42), NONE);
    served.restart();
    let mut c = RawClient::connect(served.addr(), "kip848-test");
    // The member is not known any more: Kafka's answer that makes a client rejoin.
    let stale = heartbeat(&mut c, 1, &beat("g", "a", a.member_epoch, &owned(&a).unwrap()));
    assert_eq!(stale.error_code, UNKNOWN_MEMBER_ID);
    // The group is gone but its offsets are not: an admin's fetch sees them.
    assert_eq!(fetch_offset(&mut c, "g", None, -1), (NONE, 42));
    let again = heartbeat(&mut c, 1, &join("g", "a"));
    assert_eq!((again.error_code, again.member_epoch), (NONE, 1));
    assert_eq!(owned(&again).map(|o| count(&o)), Some(4));
    assert_eq!(fetch_offset(&mut c, "g", Some("a"), 1), (NONE, 42));
}
