use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::*;
use sluice_io::PartitionId;

const SESSION: Duration = Duration::from_millis(1000);

fn topics(list: &[(&str, u32)]) -> BTreeMap<String, u32> {
    list.iter().map(|(t, n)| (t.to_string(), *n)).collect()
}

fn tp(t: &str, p: u32) -> TopicPartition {
    TopicPartition::new(t, PartitionId(p))
}

fn join(member: &str) -> ConsumerHeartbeat {
    ConsumerHeartbeat {
        member: MemberId::new(member),
        epoch: 0,
        instance: None,
        rack: None,
        rebalance_timeout: Some(Duration::from_millis(500)),
        topics: Some(vec!["t".into()]),
        regex: None,
        assignor: None,
        owned: Some(Vec::new()),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout: SESSION,
    }
}

fn beat(member: &str, epoch: i32, owned: &[TopicPartition]) -> ConsumerHeartbeat {
    ConsumerHeartbeat { epoch, rebalance_timeout: None, topics: None, owned: Some(owned.to_vec()), ..join(member) }
}

/// A client's view of one member: what it owns and its epoch, updated from answers.
struct Client {
    id: &'static str,
    epoch: i32,
    owned: Vec<TopicPartition>,
}

impl Client {
    fn beat(&mut self, c: &mut ConsumerGroups, t: &BTreeMap<String, u32>, now: Instant) {
        let req = if self.epoch == 0 { join(self.id) } else { beat(self.id, self.epoch, &self.owned) };
        let a = c.heartbeat("g", req, t, now).expect("heartbeat");
        self.epoch = a.epoch;
        if let Some(owned) = a.assignment {
            self.owned = owned;
        }
    }
}

/// No partition owned by two clients, and each client owns what the coordinator thinks.
fn exclusive(clients: &[&Client]) {
    let mut seen = BTreeSet::new();
    for c in clients {
        for p in &c.owned {
            assert!(seen.insert(p.clone()), "{p} owned twice");
        }
    }
}

#[test]
fn a_second_member_gets_partitions_only_after_the_first_revoked_them() {
    let mut c = ConsumerGroups::default();
    let t = topics(&[("t", 4)]);
    let now = Instant::now();
    let mut a = Client { id: "a", epoch: 0, owned: vec![] };
    a.beat(&mut c, &t, now);
    assert_eq!((a.epoch, a.owned.len()), (1, 4));
    let mut b = Client { id: "b", epoch: 0, owned: vec![] };
    b.beat(&mut c, &t, now);
    assert_eq!(b.epoch, 2, "the group epoch moved on");
    assert!(b.owned.is_empty(), "a still holds everything: {:?}", b.owned);
    exclusive(&[&a, &b]);
    assert_eq!(c.describe("g").unwrap().state, "Reconciling");
    // a hears of epoch 2: it must revoke two partitions, keeping its epoch.
    a.beat(&mut c, &t, now);
    assert_eq!((a.epoch, a.owned.len()), (1, 2));
    // b asks again: a has not acknowledged yet (its heartbeat still reported all four).
    b.beat(&mut c, &t, now);
    assert!(b.owned.is_empty());
    // a acknowledges by reporting what it owns now; it moves to epoch 2.
    a.beat(&mut c, &t, now);
    assert_eq!(a.epoch, 2);
    b.beat(&mut c, &t, now);
    assert_eq!(b.owned.len(), 2);
    exclusive(&[&a, &b]);
    let all: BTreeSet<_> = a.owned.iter().chain(&b.owned).cloned().collect();
    assert_eq!(all, (0..4).map(|p| tp("t", p)).collect());
    let d = c.describe("g").unwrap();
    assert_eq!((d.state, d.epoch, d.assignor.as_str()), ("Stable", 2, "uniform"));
    // Commits: current epoch only.
    let m = MemberId::new("a");
    assert_eq!(c.check_offsets("g", Some(&m), 2), Some(Ok(())));
    assert!(matches!(
        c.check_offsets("g", Some(&m), 1),
        Some(Err(GroupError::StaleMemberEpoch { got: 1, current: 2 }))
    ));
    assert!(matches!(c.check_offsets("g", None, -1), Some(Err(GroupError::UnknownMember(_)))));
    assert_eq!(c.check_offsets("other", None, -1), None);
    // b leaves: a gets everything back at a new epoch.
    let left = c.heartbeat("g", beat("b", b.epoch, &b.owned), &t, now).map(|a| a.epoch);
    let left = left.and_then(|_| c.heartbeat("g", beat("b", LEAVE_EPOCH, &[]), &t, now));
    assert_eq!(left.unwrap().epoch, LEAVE_EPOCH);
    a.beat(&mut c, &t, now);
    assert_eq!((a.epoch, a.owned.len()), (3, 4));
    a.epoch = LEAVE_EPOCH;
    c.heartbeat("g", beat("a", LEAVE_EPOCH, &[]), &t, now).unwrap();
    assert!(!c.has_members("g"));
    assert_eq!(c.check_offsets("g", None, -1), Some(Ok(())), "an empty group takes commits from outside");
}

#[test]
fn epochs_are_fenced_and_a_lost_answer_is_forgiven() {
    let mut c = ConsumerGroups::default();
    let t = topics(&[("t", 2)]);
    let now = Instant::now();
    let mut a = Client { id: "a", epoch: 0, owned: vec![] };
    a.beat(&mut c, &t, now);
    let ahead = c.heartbeat("g", beat("a", 5, &a.owned), &t, now);
    assert!(matches!(ahead, Err(GroupError::FencedMemberEpoch { got: 5, current: 1 })));
    // A topic grows: epoch 2. a's answer is "lost"; it comes back at epoch 1 owning a
    // subset of its assignment, which is taken.
    let t3 = topics(&[("t", 3)]);
    let answer = c.heartbeat("g", beat("a", 1, &a.owned), &t3, now).unwrap();
    assert_eq!(answer.epoch, 2);
    let again = c.heartbeat("g", beat("a", 1, &a.owned), &t3, now).unwrap();
    assert_eq!(again.epoch, 2);
    // At epoch 1 but claiming a partition it was never given: fenced.
    let stranger = c.heartbeat("g", beat("a", 1, &[tp("t", 0), tp("x", 9)]), &t3, now);
    assert!(matches!(stranger, Err(GroupError::FencedMemberEpoch { .. })));
    let unknown = c.heartbeat("g", beat("zz", 1, &[]), &t3, now);
    assert!(matches!(unknown, Err(GroupError::UnknownMember(_))));
}

#[test]
fn silent_members_are_fenced_and_their_partitions_reassigned() {
    let mut c = ConsumerGroups::default();
    let t = topics(&[("t", 4)]);
    let t0 = Instant::now();
    let mut a = Client { id: "a", epoch: 0, owned: vec![] };
    let mut b = Client { id: "b", epoch: 0, owned: vec![] };
    a.beat(&mut c, &t, t0);
    b.beat(&mut c, &t, t0);
    for _ in 0..3 {
        a.beat(&mut c, &t, t0);
        b.beat(&mut c, &t, t0);
    }
    assert_eq!((a.owned.len(), b.owned.len()), (2, 2));
    let later = t0 + Duration::from_millis(900);
    a.beat(&mut c, &t, later);
    let gone = c.expire(t0 + SESSION + Duration::from_millis(1));
    assert_eq!(gone, vec![("g".to_string(), MemberId::new("b"))]);
    a.beat(&mut c, &t, later);
    assert_eq!(a.owned.len(), 4);
    // A member that does not revoke within its rebalance timeout is fenced too.
    let mut d = Client { id: "d", epoch: 0, owned: vec![] };
    d.beat(&mut c, &t, later);
    a.beat(&mut c, &t, later);
    assert_eq!(a.owned.len(), 2, "a is told to revoke");
    let gone = c.expire(later + Duration::from_millis(600));
    assert_eq!(gone, vec![("g".to_string(), MemberId::new("a"))]);
}

#[test]
fn a_static_member_comes_back_under_its_instance_id_without_a_rebalance() {
    let mut c = ConsumerGroups::default();
    let t = topics(&[("t", 2)]);
    let now = Instant::now();
    let first = ConsumerHeartbeat { instance: Some("i1".into()), ..join("m1") };
    let a = c.heartbeat("g", first, &t, now).unwrap();
    assert_eq!((a.epoch, a.assignment.as_ref().map(Vec::len)), (1, Some(2)));
    // Another member under the same instance id while m1 is active.
    let clash = c.heartbeat("g", ConsumerHeartbeat { instance: Some("i1".into()), ..join("m2") }, &t, now);
    assert!(matches!(clash, Err(GroupError::UnreleasedInstance(_))));
    let leave = ConsumerHeartbeat { instance: Some("i1".into()), ..beat("m1", STATIC_LEAVE_EPOCH, &[]) };
    assert_eq!(c.heartbeat("g", leave, &t, now).unwrap().epoch, STATIC_LEAVE_EPOCH);
    assert!(c.has_members("g"), "kept until its session times out");
    let back = c.heartbeat("g", ConsumerHeartbeat { instance: Some("i1".into()), ..join("m2") }, &t, now).unwrap();
    assert_eq!((back.epoch, back.assignment.map(|a| a.len())), (1, Some(2)), "same epoch, same partitions");
    assert_eq!(c.describe("g").unwrap().epoch, 1, "no rebalance");
    assert!(matches!(c.heartbeat("g", beat("m1", 1, &[]), &t, now), Err(GroupError::UnknownMember(_))));
}

#[test]
fn a_regex_subscription_follows_the_topics_and_range_is_kafkas() {
    let mut c = ConsumerGroups::default();
    let now = Instant::now();
    let t = topics(&[("orders-1", 2), ("other", 2)]);
    let req = ConsumerHeartbeat {
        topics: None,
        regex: Some("orders-.*".into()),
        assignor: Some("range".into()),
        ..join("a")
    };
    let a = c.heartbeat("g", req, &t, now).unwrap();
    // As in Kafka, the regex is resolved after the heartbeat that brought it.
    assert_eq!((a.epoch, a.assignment.unwrap()), (1, vec![]));
    let a = c.heartbeat("g", beat("a", 1, &[]), &t, now).unwrap();
    assert_eq!((a.epoch, a.assignment.unwrap()), (2, vec![tp("orders-1", 0), tp("orders-1", 1)]));
    let t2 = topics(&[("orders-1", 2), ("orders-2", 1), ("other", 2)]);
    let a = c.heartbeat("g", beat("a", 2, &[tp("orders-1", 0), tp("orders-1", 1)]), &t2, now).unwrap();
    assert_eq!(a.epoch, 3, "a new matching topic is a new epoch");
    assert_eq!(a.assignment.unwrap().len(), 3);
    assert_eq!(c.describe("g").unwrap().assignor, "range");
    assert_eq!(c.subscribed("g").unwrap(), vec!["orders-1".to_string(), "orders-2".to_string()]);
}

#[test]
fn malformed_heartbeats_are_refused_and_change_nothing() {
    let mut c = ConsumerGroups::default();
    let t = topics(&[("t", 1)]);
    let now = Instant::now();
    let cases = [
        ConsumerHeartbeat { rebalance_timeout: None, ..join("a") },
        ConsumerHeartbeat { owned: None, ..join("a") },
        ConsumerHeartbeat { owned: Some(vec![tp("t", 0)]), ..join("a") },
        ConsumerHeartbeat { topics: None, ..join("a") },
        ConsumerHeartbeat { member: MemberId::new(""), ..join("a") },
        ConsumerHeartbeat { instance: Some(String::new()), ..join("a") },
        ConsumerHeartbeat { epoch: -3, ..join("a") },
        ConsumerHeartbeat { epoch: STATIC_LEAVE_EPOCH, ..join("a") },
    ];
    for req in cases {
        assert!(matches!(c.heartbeat("g", req, &t, now), Err(GroupError::InvalidRequest(_))));
    }
    let bad_assignor = c.heartbeat("g", ConsumerHeartbeat { assignor: Some("sticky".into()), ..join("a") }, &t, now);
    assert!(matches!(bad_assignor, Err(GroupError::UnsupportedAssignor(_))));
    let bad_regex = c.heartbeat("g", ConsumerHeartbeat { regex: Some("(".into()), ..join("a") }, &t, now);
    assert!(matches!(bad_regex, Err(GroupError::InvalidRegex(_))));
    assert!(matches!(c.heartbeat("", join("a"), &t, now), Err(GroupError::InvalidRequest(_))));
    assert!(!c.contains("g"), "nothing was created");
}

#[test]
fn members_sharing_a_regex_split_topics_created_later_without_revoking() {
    let mut c = ConsumerGroups::default();
    let now = Instant::now();
    let rx = |m: &str| ConsumerHeartbeat { topics: Some(vec![]), regex: Some("^w_.".into()), ..join(m) };
    let none = topics(&[("x", 1)]);
    let mut a = Client { id: "a", epoch: 0, owned: vec![] };
    let mut b = Client { id: "b", epoch: 0, owned: vec![] };
    for (cl, req) in [(&mut a, rx("a")), (&mut b, rx("b"))] {
        let answer = c.heartbeat("g", req, &none, now).unwrap();
        assert_eq!(answer.assignment, Some(vec![]), "nothing matches yet");
        cl.epoch = answer.epoch;
    }
    // The topics appear one after the other; each member hears of them at its own
    // heartbeat. The regex counts for both members at once, so nothing moves twice.
    for t in [topics(&[("x", 1), ("w_1", 2)]), topics(&[("x", 1), ("w_1", 2), ("w_2", 2)])] {
        for _ in 0..3 {
            let before = (a.owned.clone(), b.owned.clone());
            a.beat(&mut c, &t, now);
            b.beat(&mut c, &t, now);
            assert!(before.0.iter().all(|p| a.owned.contains(p)), "a revoked: {before:?} -> {:?}", a.owned);
            assert!(before.1.iter().all(|p| b.owned.contains(p)), "b revoked: {before:?} -> {:?}", b.owned);
            exclusive(&[&a, &b]);
        }
    }
    assert_eq!((a.owned.len(), b.owned.len()), (2, 2));
}
