//! Consumer groups through the Kafka listener over raw TCP (requests encoded and
//! responses decoded with the `kafka-protocol` crate): Kafka's classic protocol with an
//! assignor name of this test's own (leader election, the leader's view of every member,
//! SyncGroup waiting for the leader), static members, and every refusal with Kafka's
//! error code: empty group ids, protocols the members do not share, unknown members,
//! wrong generations, fenced instances, oversized metadata, DeleteGroups of a group with
//! members, OffsetDelete of a subscribed topic. Real clients are in `kafka_clients.rs`.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::kafka::{RawClient, Served};
use futures_lite::future::block_on;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use sluice_engine::kafka::KafkaConfig;
use sluice_engine::kafka::groups::encode_subscription;
use sluice_engine::{GroupConsumer, GroupOptions, OwnedRecord};
use sluice_io::{Offset, PartitionId, Timestamp};

const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const OFFSET_METADATA_TOO_LARGE: i16 = 12;
const ILLEGAL_GENERATION: i16 = 22;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const INVALID_GROUP_ID: i16 = 24;
const UNKNOWN_MEMBER_ID: i16 = 25;
const REBALANCE_IN_PROGRESS: i16 = 27;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_ID_NOT_FOUND: i16 = 69;
const MEMBER_ID_REQUIRED: i16 = 79;
const FENCED_INSTANCE_ID: i16 = 82;
const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;

/// The assignor name no broker knows of.
const OWN: &str = "this-tests-own-assignor";

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_string())
}

fn start(name: &str) -> Served {
    let served = Served::launch("kafka_groups", name, 2, KafkaConfig::new("127.0.0.1:0".parse().expect("address")));
    block_on(served.handle().create_topic("t", 2, None)).expect("topic t");
    block_on(served.handle().create_topic("u", 1, None)).expect("topic u");
    served
}

/// A JoinGroup for `group` with `protocols` (name, subscribed topics).
fn join_req(group: &str, member: &str, instance: Option<&str>, protocols: &[(&str, &[&str])]) -> JoinGroupRequest {
    let mut r = JoinGroupRequest::default();
    r.group_id = GroupId(s(group));
    r.session_timeout_ms = 10_000;
    r.rebalance_timeout_ms = 10_000;
    r.member_id = s(member);
    r.group_instance_id = instance.map(s);
    r.protocol_type = s("consumer");
    r.protocols = protocols
        .iter()
        .map(|(name, topics)| {
            let mut p = join_group_request::JoinGroupRequestProtocol::default();
            p.name = s(name);
            p.metadata = encode_subscription(&topics.iter().map(|t| t.to_string()).collect::<Vec<_>>());
            p
        })
        .collect();
    r
}

fn join(c: &mut RawClient, version: i16, r: &JoinGroupRequest) -> JoinGroupResponse {
    c.call(ApiKey::JoinGroup, version, r)
}

fn sync(
    c: &mut RawClient,
    group: &str,
    member: &str,
    instance: Option<&str>,
    generation: i32,
    assignments: &[(&str, &str)],
) -> SyncGroupResponse {
    let mut r = SyncGroupRequest::default();
    r.group_id = GroupId(s(group));
    r.member_id = s(member);
    r.group_instance_id = instance.map(s);
    r.generation_id = generation;
    r.protocol_type = Some(s("consumer"));
    r.protocol_name = Some(s(OWN));
    r.assignments = assignments
        .iter()
        .map(|(m, a)| {
            let mut x = sync_group_request::SyncGroupRequestAssignment::default();
            x.member_id = s(m);
            x.assignment = Bytes::from(a.to_string());
            x
        })
        .collect();
    c.call(ApiKey::SyncGroup, 5, &r)
}

fn heartbeat(c: &mut RawClient, group: &str, member: &str, instance: Option<&str>, generation: i32) -> i16 {
    let mut r = HeartbeatRequest::default();
    r.group_id = GroupId(s(group));
    r.member_id = s(member);
    r.group_instance_id = instance.map(s);
    r.generation_id = generation;
    let resp: HeartbeatResponse = c.call(ApiKey::Heartbeat, 4, &r);
    resp.error_code
}

/// OffsetCommit v8 of (topic, partition, offset, leader epoch, metadata): each error code.
fn commit(
    c: &mut RawClient,
    group: &str,
    member: &str,
    generation: i32,
    parts: &[(&str, i32, i64, i32, &str)],
) -> Vec<i16> {
    commit_as(c, group, member, None, generation, parts)
}

/// As [`commit`], from a static member.
fn commit_as(
    c: &mut RawClient,
    group: &str,
    member: &str,
    instance: Option<&str>,
    generation: i32,
    parts: &[(&str, i32, i64, i32, &str)],
) -> Vec<i16> {
    let mut r = OffsetCommitRequest::default();
    r.group_id = GroupId(s(group));
    r.member_id = s(member);
    r.group_instance_id = instance.map(s);
    r.generation_id_or_member_epoch = generation;
    for &(t, p, o, epoch, meta) in parts {
        let mut pr = offset_commit_request::OffsetCommitRequestPartition::default();
        pr.partition_index = p;
        pr.committed_offset = o;
        pr.committed_leader_epoch = epoch;
        pr.committed_metadata = Some(s(meta));
        let mut tr = offset_commit_request::OffsetCommitRequestTopic::default();
        tr.name = TopicName(s(t));
        tr.partitions = vec![pr];
        r.topics.push(tr);
    }
    let resp: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 8, &r);
    resp.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect()
}

/// OffsetFetch v8 of every committed partition of each group: per group, its error and
/// (topic, partition, offset, leader epoch, metadata).
#[allow(clippy::type_complexity)]
fn fetch(c: &mut RawClient, groups: &[&str]) -> Vec<(String, i16, Vec<(String, i32, i64, i32, String)>)> {
    let mut r = OffsetFetchRequest::default();
    r.groups = groups
        .iter()
        .map(|g| {
            let mut x = offset_fetch_request::OffsetFetchRequestGroup::default();
            x.group_id = GroupId(s(g));
            x.topics = None;
            x
        })
        .collect();
    let resp: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, 8, &r);
    resp.groups
        .into_iter()
        .map(|g| {
            let parts = g
                .topics
                .iter()
                .flat_map(|t| {
                    t.partitions.iter().map(|p| {
                        (
                            t.name.0.as_str().to_string(),
                            p.partition_index,
                            p.committed_offset,
                            p.committed_leader_epoch,
                            p.metadata.as_ref().map(|m| m.as_str().to_string()).unwrap_or_default(),
                        )
                    })
                })
                .collect();
            (g.group_id.0.as_str().to_string(), g.error_code, parts)
        })
        .collect()
}

/// InitProducerId v4 for a transactional id: its producer id and epoch (-1 if refused).
fn init_producer(c: &mut RawClient, tid: &str) -> (i64, i16) {
    let mut r = InitProducerIdRequest::default();
    r.transactional_id = Some(TransactionalId(s(tid)));
    r.transaction_timeout_ms = 60_000;
    r.producer_id = ProducerId(-1);
    r.producer_epoch = -1;
    let resp: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &r);
    (resp.producer_id.0, resp.producer_epoch)
}

fn delete_groups(c: &mut RawClient, groups: &[&str]) -> Vec<i16> {
    let mut r = DeleteGroupsRequest::default();
    r.groups_names = groups.iter().map(|g| GroupId(s(g))).collect();
    let resp: DeleteGroupsResponse = c.call(ApiKey::DeleteGroups, 2, &r);
    resp.results.iter().map(|x| x.error_code).collect()
}

/// OffsetDelete: the group's error and each partition's.
fn delete_offsets(c: &mut RawClient, group: &str, parts: &[(&str, i32)]) -> (i16, Vec<i16>) {
    let mut r = OffsetDeleteRequest::default();
    r.group_id = GroupId(s(group));
    for &(t, p) in parts {
        let mut pr = offset_delete_request::OffsetDeleteRequestPartition::default();
        pr.partition_index = p;
        let mut tr = offset_delete_request::OffsetDeleteRequestTopic::default();
        tr.name = TopicName(s(t));
        tr.partitions = vec![pr];
        r.topics.push(tr);
    }
    let resp: OffsetDeleteResponse = c.call(ApiKey::OffsetDelete, 0, &r);
    (resp.error_code, resp.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect())
}

fn describe(c: &mut RawClient, group: &str) -> describe_groups_response::DescribedGroup {
    let mut r = DescribeGroupsRequest::default();
    r.groups = vec![GroupId(s(group))];
    r.include_authorized_operations = true;
    let mut resp: DescribeGroupsResponse = c.call(ApiKey::DescribeGroups, 5, &r);
    resp.groups.remove(0)
}

fn list(c: &mut RawClient, version: i16, states: &[&str], types: &[&str]) -> Vec<(String, String, String)> {
    let mut r = ListGroupsRequest::default();
    r.states_filter = states.iter().map(|x| s(x)).collect();
    r.types_filter = types.iter().map(|x| s(x)).collect();
    let resp: ListGroupsResponse = c.call(ApiKey::ListGroups, version, &r);
    assert_eq!(resp.error_code, NONE);
    resp.groups
        .into_iter()
        .map(|g| (g.group_id.0.as_str().to_string(), g.group_state.as_str().to_string(), g.group_type.to_string()))
        .collect()
}

#[test]
fn a_client_leader_assigns_with_an_assignor_of_its_own_and_every_refusal_has_kafkas_code() {
    let served = start("leader");
    let addr = served.addr();
    let group = "roundrobin,range"; // a group id no topic could be named
    let mut c1 = RawClient::connect(addr, "member-1");
    let mut c2 = RawClient::connect(addr, "member-2");
    let mut admin = RawClient::connect(addr, "admin");

    // JoinGroup v5 with no member id: first fetch the member id (KIP-394).
    let first = join(&mut c1, 5, &join_req(group, "", None, &[(OWN, &["t"])]));
    assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
    let m1 = first.member_id.as_str().to_string();
    assert!(m1.starts_with("member-1-"), "{m1}");
    let j1 = join(&mut c1, 5, &join_req(group, &m1, None, &[(OWN, &["t"])]));
    assert_eq!((j1.error_code, j1.generation_id, j1.leader.as_str()), (NONE, 1, m1.as_str()));
    assert_eq!(j1.protocol_name.as_ref().map(StrBytes::as_str), Some(OWN), "a protocol name no broker knows of");
    assert_eq!(j1.members.len(), 1);
    let s1 = sync(&mut c1, group, &m1, None, 1, &[(&m1, "all-of-it")]);
    assert_eq!((s1.error_code, &s1.assignment[..]), (NONE, &b"all-of-it"[..]));

    // A second member (JoinGroup v3: no member id round trip) waits for the first to rejoin.
    std::thread::scope(|scope| {
        let second = scope.spawn(|| join(&mut c2, 3, &join_req(group, "", None, &[("other", &["t"]), (OWN, &["t"])])));
        std::thread::sleep(Duration::from_millis(300));
        assert!(!second.is_finished(), "answered before the first member rejoined");
        assert_eq!(heartbeat(&mut c1, group, &m1, None, 1), REBALANCE_IN_PROGRESS);
        assert_eq!(describe(&mut admin, group).group_state.as_str(), "PreparingRebalance");
        // Committing while the rebalance is prepared is how a member gives partitions up.
        assert_eq!(commit(&mut c1, group, &m1, 1, &[("t", 0, 3, 2, "given up")]), vec![NONE]);
        let j1 = join(&mut c1, 5, &join_req(group, &m1, None, &[(OWN, &["t"])]));
        let j2 = second.join().expect("second join");
        assert_eq!((j1.error_code, j2.error_code), (NONE, NONE));
        assert_eq!((j1.generation_id, j2.generation_id), (2, 2));
        assert_eq!((j1.leader.as_str(), j2.leader.as_str()), (m1.as_str(), m1.as_str()), "the leader rejoined: kept");
        assert_eq!(j2.protocol_name.as_ref().map(StrBytes::as_str), Some(OWN), "the only protocol both support");
        let mut seen: Vec<&str> = j1.members.iter().map(|m| m.member_id.as_str()).collect();
        seen.sort_unstable();
        let mut want = vec![m1.as_str(), j2.member_id.as_str()];
        want.sort_unstable();
        assert_eq!(seen, want, "the leader sees every member");
        assert!(j2.members.is_empty(), "a follower sees none");
    });
    let m2 = {
        let d = describe(&mut admin, group);
        d.members.iter().map(|m| m.member_id.as_str().to_string()).find(|m| *m != m1).expect("second member")
    };
    // The follower's SyncGroup waits for the leader's assignment.
    std::thread::scope(|scope| {
        let follower = scope.spawn(|| sync(&mut c2, group, &m2, None, 2, &[]));
        std::thread::sleep(Duration::from_millis(300));
        assert!(!follower.is_finished(), "the follower's sync waits for the leader's");
        assert_eq!(commit(&mut c1, group, &m1, 2, &[("t", 0, 4, -1, "")]), vec![REBALANCE_IN_PROGRESS]);
        let s1 = sync(&mut c1, group, &m1, None, 2, &[(&m1, "p0"), (&m2, "p1")]);
        let s2 = follower.join().expect("follower sync");
        assert_eq!((s1.error_code, &s1.assignment[..]), (NONE, &b"p0"[..]));
        assert_eq!((s2.error_code, &s2.assignment[..]), (NONE, &b"p1"[..]));
        assert_eq!(s2.protocol_name.as_ref().map(StrBytes::as_str), Some(OWN));
    });

    // Members that share no protocol, or another protocol type, are refused; an empty
    // group id is invalid.
    let mut c3 = RawClient::connect(addr, "member-3");
    assert_eq!(
        join(&mut c3, 3, &join_req(group, "", None, &[("range", &["t"])])).error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    let mut other_type = join_req(group, "", None, &[(OWN, &["t"])]);
    other_type.protocol_type = s("connect");
    assert_eq!(join(&mut c3, 3, &other_type).error_code, INCONSISTENT_GROUP_PROTOCOL);
    assert_eq!(join(&mut c3, 5, &join_req("", "", None, &[(OWN, &["t"])])).error_code, INVALID_GROUP_ID);
    assert_eq!(heartbeat(&mut c3, "", &m1, None, 2), INVALID_GROUP_ID);
    // Unknown members and wrong generations.
    assert_eq!(heartbeat(&mut c3, group, "nobody", None, 2), UNKNOWN_MEMBER_ID);
    assert_eq!(heartbeat(&mut c1, group, &m1, None, 1), ILLEGAL_GENERATION);
    assert_eq!(heartbeat(&mut c1, group, &m1, None, 2), NONE);
    assert_eq!(sync(&mut c1, group, &m1, None, 7, &[]).error_code, ILLEGAL_GENERATION);
    assert_eq!(sync(&mut c3, group, "nobody", None, 2, &[]).error_code, UNKNOWN_MEMBER_ID);
    assert_eq!(commit(&mut c1, group, &m1, 1, &[("t", 0, 5, -1, "")]), vec![ILLEGAL_GENERATION]);
    assert_eq!(commit(&mut c3, group, "nobody", 2, &[("t", 0, 5, -1, "")]), vec![UNKNOWN_MEMBER_ID]);
    assert_eq!(commit(&mut admin, group, "", -1, &[("t", 0, 5, -1, "")]), vec![UNKNOWN_MEMBER_ID], "standalone");

    // Commits keep their metadata and leader epoch; bad partitions fail alone.
    let long = "m".repeat(4097);
    assert_eq!(
        commit(
            &mut c1,
            group,
            &m1,
            2,
            &[
                ("t", 0, 7, 3, "the metadata ✓"),
                ("t", 1, 9, -1, ""),
                ("u", 0, 2, 1, "u"),
                ("t", 5, 1, -1, ""),
                ("t", 1, 1, -1, &long)
            ]
        ),
        vec![NONE, NONE, NONE, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE]
    );
    let fetched = fetch(&mut admin, &[group, "never-committed"]);
    assert_eq!(fetched.len(), 2);
    assert_eq!(
        fetched[0],
        (
            group.to_string(),
            NONE,
            vec![
                ("t".into(), 0, 7, 3, "the metadata ✓".into()),
                ("t".into(), 1, 9, -1, String::new()),
                ("u".into(), 0, 2, 1, "u".into())
            ]
        )
    );
    assert_eq!(fetched[1], ("never-committed".to_string(), NONE, vec![]));

    // DescribeGroups: state, protocol, and each member's client id, host, metadata and
    // assignment.
    let d = describe(&mut admin, group);
    assert_eq!(
        (d.error_code, d.group_state.as_str(), d.protocol_type.as_str(), d.protocol_data.as_str()),
        (NONE, "Stable", "consumer", OWN)
    );
    assert_eq!(d.authorized_operations, (1 << 3) | (1 << 6) | (1 << 8), "READ, DELETE, DESCRIBE");
    let mut members: Vec<(String, String, String, Bytes, Bytes)> = d
        .members
        .iter()
        .map(|m| {
            (
                m.member_id.as_str().to_string(),
                m.client_id.as_str().to_string(),
                m.client_host.as_str().to_string(),
                m.member_metadata.clone(),
                m.member_assignment.clone(),
            )
        })
        .collect();
    members.sort();
    let meta = encode_subscription(&["t".to_string()]);
    let mut want = vec![
        (m1.clone(), "member-1".to_string(), "/127.0.0.1".to_string(), meta.clone(), Bytes::from("p0")),
        (m2.clone(), "member-2".to_string(), "/127.0.0.1".to_string(), meta, Bytes::from("p1")),
    ];
    want.sort();
    assert_eq!(members, want);

    // ListGroups: state filters (any case) from v4, the type from v5.
    let listed = list(&mut admin, 5, &["stable"], &[]);
    assert_eq!(listed, vec![(group.to_string(), "Stable".to_string(), "classic".to_string())]);
    assert!(list(&mut admin, 4, &["Empty"], &[]).is_empty());
    assert!(list(&mut admin, 5, &[], &["consumer"]).is_empty());
    assert_eq!(list(&mut admin, 5, &[], &["Classic"]).len(), 1);

    // A group with members is not deleted; a subscribed topic's offsets are not either.
    assert_eq!(delete_groups(&mut admin, &[group, "no-such-group"]), vec![NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND]);
    assert_eq!(
        delete_offsets(&mut admin, group, &[("t", 0), ("u", 0), ("nope", 0)]),
        (NONE, vec![GROUP_SUBSCRIBED_TO_TOPIC, NONE, UNKNOWN_TOPIC_OR_PARTITION])
    );
    assert_eq!(delete_offsets(&mut admin, "no-such-group", &[("u", 0)]), (GROUP_ID_NOT_FOUND, vec![]));
    assert_eq!(delete_offsets(&mut admin, "", &[("u", 0)]).0, INVALID_GROUP_ID);
    assert_eq!(fetch(&mut admin, &[group])[0].2.len(), 2, "u-0's offset deleted, t's kept");

    // Both leave in one LeaveGroup (v3+); then the empty group is deleted with its offsets.
    let mut r = LeaveGroupRequest::default();
    r.group_id = GroupId(s(group));
    r.members = [&m1, &m2, &"nobody".to_string()]
        .iter()
        .map(|m| {
            let mut x = leave_group_request::MemberIdentity::default();
            x.member_id = s(m);
            x
        })
        .collect();
    let left: LeaveGroupResponse = admin.call(ApiKey::LeaveGroup, 5, &r);
    assert_eq!(left.members.iter().map(|m| m.error_code).collect::<Vec<_>>(), vec![NONE, NONE, UNKNOWN_MEMBER_ID]);
    assert_eq!(describe(&mut admin, group).group_state.as_str(), "Empty");
    assert_eq!(commit(&mut admin, group, "", -1, &[("t", 1, 10, -1, "standalone")]), vec![NONE]);
    assert_eq!(delete_groups(&mut admin, &[group]), vec![NONE]);
    assert_eq!(fetch(&mut admin, &[group])[0].2, vec![]);
    assert_eq!(delete_groups(&mut admin, &[group]), vec![GROUP_ID_NOT_FOUND]);
    assert_eq!(describe(&mut admin, group).group_state.as_str(), "Dead");
    assert!(block_on(served.handle().committed_offsets(group)).expect("committed").is_empty());
}

#[test]
fn a_static_member_back_under_its_instance_id_keeps_its_place_and_fences_the_old_id() {
    let served = start("static");
    let addr = served.addr();
    let group = "a/b";
    let (mut c1, mut c2, mut admin) =
        (RawClient::connect(addr, "one"), RawClient::connect(addr, "two"), RawClient::connect(addr, "admin"));
    // A static member skips the member id round trip, whatever the version.
    let j1 = join(&mut c1, 5, &join_req(group, "", Some("instance-1"), &[(OWN, &["t"])]));
    assert_eq!((j1.error_code, j1.generation_id), (NONE, 1));
    let m1 = j1.member_id.as_str().to_string();
    assert!(m1.starts_with("instance-1-"), "{m1}");
    sync(&mut c1, group, &m1, Some("instance-1"), 1, &[(&m1, "a1")]);
    let (m2, generation) = std::thread::scope(|scope| {
        let second = scope.spawn(|| join(&mut c2, 5, &join_req(group, "", Some("instance-2"), &[(OWN, &["t"])])));
        std::thread::sleep(Duration::from_millis(200));
        let j1 = join(&mut c1, 5, &join_req(group, &m1, Some("instance-1"), &[(OWN, &["t"])]));
        let j2 = second.join().expect("second");
        assert_eq!((j1.generation_id, j2.generation_id), (2, 2));
        (j2.member_id.as_str().to_string(), j2.generation_id)
    });
    std::thread::scope(|scope| {
        let follower = scope.spawn(|| sync(&mut c2, group, &m2, Some("instance-2"), generation, &[]));
        sync(&mut c1, group, &m1, Some("instance-1"), generation, &[(&m1, "mine"), (&m2, "yours")]);
        assert_eq!(&follower.join().expect("sync").assignment[..], b"yours");
    });

    // Instance 1 restarts (no LeaveGroup): its join under the same instance id gets a new
    // member id, the same generation and its assignment, with no rebalance.
    let mut restarted = RawClient::connect(addr, "one-again");
    let j = join(&mut restarted, 5, &join_req(group, "", Some("instance-1"), &[(OWN, &["t"])]));
    assert_eq!((j.error_code, j.generation_id), (NONE, generation));
    let m1_again = j.member_id.as_str().to_string();
    assert_ne!(m1_again, m1);
    assert_eq!(j.leader.as_str(), m1, "before JoinGroup v9 the old leader id is named, so it does not assign");
    let back = sync(&mut restarted, group, &m1_again, Some("instance-1"), generation, &[]);
    assert_eq!((back.error_code, &back.assignment[..]), (NONE, &b"mine"[..]));
    assert_eq!(heartbeat(&mut c2, group, &m2, Some("instance-2"), generation), NONE, "no rebalance for the others");
    // The old member id is fenced wherever it shows up.
    assert_eq!(heartbeat(&mut c1, group, &m1, Some("instance-1"), generation), FENCED_INSTANCE_ID);
    assert_eq!(sync(&mut c1, group, &m1, Some("instance-1"), generation, &[]).error_code, FENCED_INSTANCE_ID);
    assert_eq!(
        join(&mut c1, 5, &join_req(group, &m1, Some("instance-1"), &[(OWN, &["t"])])).error_code,
        FENCED_INSTANCE_ID
    );
    let part = [("t", 0, 1, -1, "")];
    assert_eq!(commit_as(&mut c1, group, &m1, Some("instance-1"), generation, &part), vec![FENCED_INSTANCE_ID]);
    assert_eq!(commit_as(&mut restarted, group, &m1_again, Some("instance-1"), generation, &part), vec![NONE]);
    // DescribeGroups shows the instance ids (v4+).
    let d = describe(&mut admin, group);
    let mut instances: Vec<(String, Option<String>)> = d
        .members
        .iter()
        .map(|m| (m.member_id.as_str().to_string(), m.group_instance_id.as_ref().map(|i| i.as_str().to_string())))
        .collect();
    instances.sort();
    let mut want =
        vec![(m1_again.clone(), Some("instance-1".to_string())), (m2.clone(), Some("instance-2".to_string()))];
    want.sort();
    assert_eq!(instances, want);
    // An administrator removes instance 2 by its instance id alone (LeaveGroup v3+).
    let mut r = LeaveGroupRequest::default();
    r.group_id = GroupId(s(group));
    let mut who = leave_group_request::MemberIdentity::default();
    who.group_instance_id = Some(s("instance-2"));
    let mut stranger = leave_group_request::MemberIdentity::default();
    stranger.group_instance_id = Some(s("instance-9"));
    r.members = vec![who, stranger];
    let left: LeaveGroupResponse = admin.call(ApiKey::LeaveGroup, 4, &r);
    assert_eq!(left.members.iter().map(|m| m.error_code).collect::<Vec<_>>(), vec![NONE, UNKNOWN_MEMBER_ID]);
    assert_eq!(heartbeat(&mut restarted, group, &m1_again, Some("instance-1"), generation), REBALANCE_IN_PROGRESS);
}

#[test]
fn engine_consumers_and_kafka_clients_do_not_share_a_group() {
    let served = start("mixed");
    let h = served.handle();
    let member =
        block_on(GroupConsumer::join(h.clone(), "mixed", &["t"], GroupOptions::default(), None)).expect("joins");
    let mut c = RawClient::connect(served.addr(), "kafka-client");
    assert_eq!(
        join(&mut c, 3, &join_req("mixed", "", None, &[("range", &["t"])])).error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    // The engine's group is described to Kafka clients as a stable consumer group.
    let d = describe(&mut c, "mixed");
    assert_eq!((d.group_state.as_str(), d.protocol_data.as_str(), d.members.len()), ("Stable", "range", 1));
    assert_eq!(delete_groups(&mut c, &["mixed"]), vec![NON_EMPTY_GROUP]);
    assert_eq!(delete_offsets(&mut c, "mixed", &[("t", 0), ("u", 0)]), (NONE, vec![GROUP_SUBSCRIBED_TO_TOPIC, NONE]));
    block_on(member.leave()).expect("leaves");
    // Emptied, the group takes the Kafka client, and then refuses engine consumers.
    let j = join(&mut c, 3, &join_req("mixed", "", None, &[("range", &["t"])]));
    assert_eq!((j.error_code, j.generation_id), (NONE, 1));
    let refused = block_on(GroupConsumer::join(h, "mixed", &["t"], GroupOptions::default(), None));
    assert!(refused.is_err(), "{refused:?}");
}

#[test]
fn commit_metadata_and_leader_epochs_survive_a_restart_and_the_first_format_still_reads() {
    let mut served = start("restart");
    let h = served.handle();
    // A commit as the first offsets format wrote it: `group/topic/partition` -> 8 bytes.
    let offsets = "__consumer_offsets";
    let p = h.partition_for(offsets, Some(b"old-group")).expect("partition");
    let old = OwnedRecord::new(Some(b"old-group/t/1".to_vec()), 42u64.to_le_bytes(), Timestamp(0));
    block_on(h.send_to(offsets, p, old)).expect("old record");
    let mut c = RawClient::connect(served.addr(), "committer");
    for group in ["old-group", "..", "grüppe ✓", "x/../../y"] {
        assert_eq!(commit(&mut c, group, "", -1, &[("t", 0, 11, 4, "kept ✓")]), vec![NONE], "{group:?}");
    }
    // A deleted group stays deleted after the restart.
    assert_eq!(commit(&mut c, "deleted", "", -1, &[("t", 0, 1, -1, "")]), vec![NONE]);
    assert_eq!(delete_groups(&mut c, &["deleted"]), vec![NONE]);
    // A transactional id is any non-empty string too, kept across the restart by its
    // bytes (the key of its record in `__transaction_state`), never as a path.
    let tid = "tx/../y ✓";
    let (producer, epoch) = init_producer(&mut c, tid);
    assert_eq!(epoch, 0);
    assert_eq!(init_producer(&mut c, "").0, -1, "an empty transactional id is refused");
    drop(c);
    served.restart();
    let mut c = RawClient::connect(served.addr(), "reader");
    assert_eq!(init_producer(&mut c, tid), (producer, 1), "the same producer id at the next epoch");
    let fetched = fetch(&mut c, &["old-group", "..", "grüppe ✓", "x/../../y", "deleted"]);
    assert_eq!(fetched[0].2, vec![("t".into(), 0, 11, 4, "kept ✓".into()), ("t".into(), 1, 42, -1, String::new())]);
    for (group, _, parts) in &fetched[1..4] {
        assert_eq!(parts, &vec![("t".to_string(), 0, 11, 4, "kept ✓".to_string())], "{group:?}");
    }
    assert_eq!(fetched[4].2, vec![], "deleted before the restart");
    let engine_committed = block_on(served.handle().committed_offsets("x/../../y")).expect("committed");
    assert_eq!(engine_committed.get(&("t".to_string(), PartitionId(0))), Some(&Offset(11)));
    // None of those ids became a path: nothing but the engine's own entries, anywhere.
    let mut names = Vec::new();
    let mut dirs = vec![served.dir().to_path_buf(), served.dir().parent().expect("parent").to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            names.push(e.file_name().to_string_lossy().into_owned());
            if e.path().is_dir() && e.path().starts_with(served.dir()) {
                dirs.push(e.path());
            }
        }
    }
    for bad in ["y", "y ✓", "grüppe ✓", "old-group", "deleted"] {
        assert!(!names.iter().any(|n| n == bad || n.starts_with(&format!("{bad}-"))), "{bad:?} in {names:?}");
    }
}

#[test]
fn a_transactions_offsets_are_checked_against_the_member_and_keep_their_metadata() {
    let served = start("txn");
    let group = "txn-group";
    let mut c = RawClient::connect(served.addr(), "txn");
    let j = join(&mut c, 3, &join_req(group, "", None, &[(OWN, &["t"])]));
    let member = j.member_id.as_str().to_string();
    assert_eq!(sync(&mut c, group, &member, None, 1, &[(&member, "")]).error_code, NONE);
    let (producer, epoch) = init_producer(&mut c, "txn-id");
    let mut add = AddOffsetsToTxnRequest::default();
    add.transactional_id = TransactionalId(s("txn-id"));
    add.producer_id = ProducerId(producer);
    add.producer_epoch = epoch;
    add.group_id = GroupId(s(group));
    let added: AddOffsetsToTxnResponse = c.call(ApiKey::AddOffsetsToTxn, 3, &add);
    assert_eq!(added.error_code, NONE);
    let txn_commit = |c: &mut RawClient, member: &str, generation: i32, offset: i64, meta: &str| -> i16 {
        let mut p = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
        p.partition_index = 1;
        p.committed_offset = offset;
        p.committed_leader_epoch = 2;
        p.committed_metadata = Some(s(meta));
        let mut t = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
        t.name = TopicName(s("t"));
        t.partitions = vec![p];
        let mut r = TxnOffsetCommitRequest::default();
        r.transactional_id = TransactionalId(s("txn-id"));
        r.group_id = GroupId(s(group));
        r.producer_id = ProducerId(producer);
        r.producer_epoch = epoch;
        r.member_id = s(member);
        r.generation_id = generation;
        r.topics = vec![t];
        let resp: TxnOffsetCommitResponse = c.call(ApiKey::TxnOffsetCommit, 3, &r);
        resp.topics[0].partitions[0].error_code
    };
    assert_eq!(txn_commit(&mut c, &member, 0, 5, "stale"), ILLEGAL_GENERATION);
    assert_eq!(txn_commit(&mut c, "nobody", 1, 5, "unknown"), UNKNOWN_MEMBER_ID);
    assert_eq!(txn_commit(&mut c, &member, 1, 5, &"m".repeat(4097)), OFFSET_METADATA_TOO_LARGE);
    assert_eq!(txn_commit(&mut c, &member, 1, 6, "in the transaction"), NONE);
    assert_eq!(fetch(&mut c, &[group])[0].2, vec![], "nothing before the commit");
    let mut end = EndTxnRequest::default();
    end.transactional_id = TransactionalId(s("txn-id"));
    end.producer_id = ProducerId(producer);
    end.producer_epoch = epoch;
    end.committed = true;
    let ended: EndTxnResponse = c.call(ApiKey::EndTxn, 3, &end);
    assert_eq!(ended.error_code, NONE);
    assert_eq!(fetch(&mut c, &[group])[0].2, vec![("t".to_string(), 1, 6, 2, "in the transaction".to_string())]);
}

#[test]
fn delete_groups_right_after_a_static_members_session_ran_out_finds_the_group_empty() {
    let served = start("session_ran_out");
    let mut c = RawClient::connect(served.addr(), "quiet");
    let mut r = join_req("g", "", Some("instance-q"), &[(OWN, &["t"])]);
    r.session_timeout_ms = 1000;
    let j = join(&mut c, 5, &r);
    assert_eq!(j.error_code, NONE);
    let member = j.member_id.as_str().to_string();
    assert_eq!(sync(&mut c, "g", &member, Some("instance-q"), j.generation_id, &[(&member, "t-0")]).error_code, NONE);
    // Its last word: a commit, which keeps the session as a heartbeat does (and keeps
    // the group once empty). A static member that stops sends no LeaveGroup.
    assert_eq!(heartbeat(&mut c, "g", &member, Some("instance-q"), j.generation_id), NONE);
    let committed = commit_as(&mut c, "g", &member, Some("instance-q"), j.generation_id, &[("t", 0, 5, -1, "")]);
    assert_eq!(committed, vec![NONE]);
    std::thread::sleep(Duration::from_millis(1002));
    // The coordinator's clock runs every 25 ms; an admin request does not wait for it.
    assert_eq!(delete_groups(&mut c, &["g"]), vec![NONE], "the session is over: the group is empty");
    assert_eq!(describe(&mut c, "g").group_state.as_str(), "Dead");
}
