//! The classic protocol's state machine, case by case, against Kafka's behaviour.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::*;

const SESSION: Duration = Duration::from_millis(1000);
const REBALANCE: Duration = Duration::from_millis(3000);

fn protocols(list: &[(&str, &str)]) -> Vec<Protocol> {
    list.iter().map(|(n, m)| Protocol { name: (*n).into(), metadata: Bytes::from(m.to_string()) }).collect()
}

fn req(member: Option<&MemberId>, list: &[(&str, &str)]) -> ClassicJoin {
    ClassicJoin {
        member: member.cloned(),
        instance: None,
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout: SESSION,
        rebalance_timeout: REBALANCE,
        protocol_type: "consumer".into(),
        protocols: protocols(list),
        require_known_member: false,
        supports_skip_assignment: false,
        initial_rebalance_delay: Duration::ZERO,
    }
}

fn static_req(instance: &str, list: &[(&str, &str)]) -> ClassicJoin {
    ClassicJoin { instance: Some(instance.into()), ..req(None, list) }
}

/// The state machine and a ticket counter.
struct Fixture {
    c: ClassicGroups,
    next: Ticket,
    now: Instant,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture { c: ClassicGroups::default(), next: 0, now: Instant::now() }
    }

    fn join(&mut self, r: ClassicJoin) -> Ticket {
        self.next += 1;
        self.c.join("g", r, self.next, self.now);
        self.next
    }

    fn sync(&mut self, member: &MemberId, generation: i32, assignments: &[(&MemberId, &str)]) -> Ticket {
        self.next += 1;
        let r = ClassicSync {
            member: member.clone(),
            instance: None,
            generation,
            protocol_type: Some("consumer".into()),
            protocol: None,
            assignments: assignments.iter().map(|(m, a)| ((*m).clone(), Bytes::from(a.to_string()))).collect(),
        };
        self.c.sync("g", r, self.next, self.now);
        self.next
    }

    /// The answers completed since the last call, by ticket.
    fn answers(&mut self) -> HashMap<Ticket, Outcome> {
        self.c.take_completions().into_iter().map(|c| (c.ticket, c.outcome)).collect()
    }

    fn joined(&mut self, ticket: Ticket) -> JoinResult {
        match self.answers().remove(&ticket) {
            Some(Outcome::Join(Ok(r))) => r,
            other => panic!("join {ticket}: {other:?}"),
        }
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        self.c.tick(self.now);
    }

    /// A one-member group, stable at generation 1 with `assignment`.
    fn stable_one(&mut self, r: ClassicJoin, assignment: &str) -> MemberId {
        let t = self.join(r);
        let a = self.joined(t);
        assert_eq!((a.generation, a.leader.as_ref()), (1, Some(&a.member)));
        let t = self.sync(&a.member, 1, &[(&a.member, assignment)]);
        assert!(matches!(self.answers().remove(&t), Some(Outcome::Sync(Ok(_)))));
        a.member
    }
}

fn join_err(o: Option<Outcome>) -> GroupError {
    match o {
        Some(Outcome::Join(Err(e))) => e,
        other => panic!("expected a refused join: {other:?}"),
    }
}

#[test]
fn a_leader_gets_every_members_metadata_and_its_assignment_reaches_each_member() {
    let mut f = Fixture::new();
    let a = f.stable_one(req(None, &[("mine", "a-meta"), ("range", "a-range")]), "a-1");
    // A second member: the group prepares a rebalance; b's join waits for a to rejoin.
    let tb = f.join(req(None, &[("range", "b-range"), ("mine", "b-meta")]));
    assert!(f.answers().is_empty(), "b waits for a");
    assert_eq!(f.c.heartbeat("g", &a, None, 1, f.now), Err(GroupError::RebalanceInProgress));
    assert_eq!(f.c.describe("g").unwrap().state, GroupState::PreparingRebalance);
    let ta = f.join(req(Some(&a), &[("mine", "a-meta"), ("range", "a-range")]));
    let mut answers = f.answers();
    let (Some(Outcome::Join(Ok(ra))), Some(Outcome::Join(Ok(rb)))) = (answers.remove(&ta), answers.remove(&tb)) else {
        panic!("both joins answered");
    };
    // One vote each: the tie goes to the leader's preference.
    assert_eq!((ra.generation, ra.protocol.as_deref(), ra.leader.as_ref()), (2, Some("mine"), Some(&a)));
    assert_eq!((rb.generation, rb.protocol.as_deref(), rb.leader.as_ref()), (2, Some("mine"), Some(&a)));
    let metadata: Vec<(&MemberId, &[u8])> = ra.members.iter().map(|m| (&m.member, &m.metadata[..])).collect();
    let mut want = vec![(&a, &b"a-meta"[..]), (&rb.member, &b"b-meta"[..])];
    want.sort();
    assert_eq!(metadata, want, "the leader sees every member's metadata for the chosen protocol");
    assert!(rb.members.is_empty(), "a follower sees none");
    // b syncs first and waits for the leader's assignment.
    let sb = f.sync(&rb.member, 2, &[]);
    assert!(f.answers().is_empty());
    assert_eq!(f.c.describe("g").unwrap().state, GroupState::CompletingRebalance);
    let sa = f.sync(&a, 2, &[(&a, "a-2"), (&rb.member, "b-2")]);
    let mut answers = f.answers();
    let assignment = |o: Option<Outcome>| match o {
        Some(Outcome::Sync(Ok(r))) => r.assignment,
        other => panic!("{other:?}"),
    };
    assert_eq!(assignment(answers.remove(&sa)), "a-2");
    assert_eq!(assignment(answers.remove(&sb)), "b-2");
    let d = f.c.describe("g").unwrap();
    assert_eq!((d.state, d.protocol.as_deref()), (GroupState::Stable, Some("mine")));
    assert_eq!(f.c.heartbeat("g", &rb.member, None, 2, f.now), Ok(()));
    // A sync after the group is stable answers with the member's share at once.
    let again = f.sync(&rb.member, 2, &[]);
    assert_eq!(assignment(f.answers().remove(&again)), "b-2");
}

#[test]
fn protocols_the_members_do_not_share_are_refused() {
    let mut f = Fixture::new();
    let a = f.stable_one(req(None, &[("custom-one", "")]), "");
    let t = f.join(req(None, &[("range", "")]));
    assert!(matches!(join_err(f.answers().remove(&t)), GroupError::InconsistentProtocol(_)));
    let other_type = ClassicJoin { protocol_type: "connect".into(), ..req(None, &[("custom-one", "")]) };
    let t = f.join(other_type);
    assert!(matches!(join_err(f.answers().remove(&t)), GroupError::InconsistentProtocol(_)));
    // Nothing changed for the member there.
    assert_eq!(f.c.heartbeat("g", &a, None, 1, f.now), Ok(()));
    // An empty group takes any non-empty protocol type and list, and no other.
    let mut f = Fixture::new();
    let t = f.join(req(None, &[]));
    assert!(matches!(join_err(f.answers().remove(&t)), GroupError::InconsistentProtocol(_)));
    let t = f.join(ClassicJoin { protocol_type: String::new(), ..req(None, &[("x", "")]) });
    assert!(matches!(join_err(f.answers().remove(&t)), GroupError::InconsistentProtocol(_)));
}

#[test]
fn a_new_member_fetches_its_id_first_when_asked_to() {
    let mut f = Fixture::new();
    let t = f.join(ClassicJoin { require_known_member: true, ..req(None, &[("p", "")]) });
    let GroupError::MemberIdRequired(id) = join_err(f.answers().remove(&t)) else { panic!("member id required") };
    assert!(id.starts_with("client-"), "{id}");
    let id = MemberId::new(id);
    let t = f.join(ClassicJoin { require_known_member: true, ..req(Some(&id), &[("p", "")]) });
    assert_eq!(f.joined(t).member, id);
    // An id never handed out is unknown.
    let t = f.join(req(Some(&MemberId::new("made-up")), &[("p", "")]));
    assert!(matches!(join_err(f.answers().remove(&t)), GroupError::UnknownMember(_)));
}

#[test]
fn a_member_that_does_not_rejoin_is_removed_when_the_rebalance_times_out() {
    let mut f = Fixture::new();
    let a = f.stable_one(req(None, &[("p", "")]), "all");
    // a keeps heartbeating (and is told to rejoin) but never does.
    let tb = f.join(req(None, &[("p", "")]));
    for _ in 0..5 {
        f.advance(REBALANCE / 5 - Duration::from_millis(1));
        if f.c.describe("g").unwrap().state == GroupState::PreparingRebalance {
            assert_eq!(f.c.heartbeat("g", &a, None, 1, f.now), Err(GroupError::RebalanceInProgress));
        }
    }
    assert!(f.answers().is_empty(), "b still waits");
    f.advance(Duration::from_millis(10));
    let rb = f.joined(tb);
    assert_eq!((rb.generation, rb.leader.as_ref(), rb.members.len()), (2, Some(&rb.member), 1));
    assert!(matches!(f.c.heartbeat("g", &a, None, 1, f.now), Err(GroupError::UnknownMember(_))));
}

#[test]
fn a_member_silent_for_its_session_is_removed_and_the_others_rebalance() {
    let mut f = Fixture::new();
    let a = f.stable_one(req(None, &[("p", "")]), "x");
    let tb = f.join(req(None, &[("p", "")]));
    let ta = f.join(req(Some(&a), &[("p", "")]));
    let mut answers = f.answers();
    let (Some(Outcome::Join(Ok(_))), Some(Outcome::Join(Ok(rb)))) = (answers.remove(&ta), answers.remove(&tb)) else {
        panic!("joined");
    };
    f.sync(&a, 2, &[]);
    f.sync(&rb.member, 2, &[]);
    // Only b heartbeats from now on.
    for _ in 0..12 {
        f.advance(SESSION / 10);
        let _ = f.c.heartbeat("g", &rb.member, None, 2, f.now);
    }
    let d = f.c.describe("g").unwrap();
    assert_eq!(d.members.len(), 1, "a was removed: {d:?}");
    assert_eq!(f.c.heartbeat("g", &rb.member, None, 2, f.now), Err(GroupError::RebalanceInProgress));
}

#[test]
fn a_static_member_back_within_its_session_gets_its_assignment_without_a_rebalance() {
    let mut f = Fixture::new();
    let a = f.stable_one(static_req("instance-a", &[("p", "meta")]), "a-share");
    let tb = f.join(req(None, &[("p", "")]));
    let ta = f.join(ClassicJoin { member: Some(a.clone()), ..static_req("instance-a", &[("p", "meta")]) });
    let mut answers = f.answers();
    let (Some(Outcome::Join(Ok(_))), Some(Outcome::Join(Ok(rb)))) = (answers.remove(&ta), answers.remove(&tb)) else {
        panic!("joined");
    };
    let b = rb.member;
    f.sync(&b, 2, &[]);
    f.sync(&a, 2, &[(&a, "a-share"), (&b, "b-share")]);
    f.answers();
    // a restarts: it joins with no member id under its instance id.
    let t = f.join(static_req("instance-a", &[("p", "meta")]));
    let r = f.joined(t);
    assert_ne!(r.member, a, "a new member id");
    assert_eq!(r.generation, 2, "no new generation");
    assert_eq!(r.leader.as_ref(), Some(&a), "before v9 the old leader id is named, so it does not assign");
    assert!(r.members.is_empty() && !r.skip_assignment);
    let t = f.sync(&r.member, 2, &[]);
    match f.answers().remove(&t) {
        Some(Outcome::Sync(Ok(s))) => assert_eq!(s.assignment, "a-share"),
        other => panic!("{other:?}"),
    }
    assert_eq!(f.c.heartbeat("g", &b, None, 2, f.now), Ok(()), "the others saw no rebalance");
    // The old member id is fenced.
    let fenced = GroupError::FencedInstance("instance-a".into());
    assert_eq!(f.c.heartbeat("g", &a, Some("instance-a"), 2, f.now), Err(fenced.clone()));
    assert_eq!(f.c.check_commit("g", Some(&a), Some("instance-a"), 2, f.now), Some(Err(fenced.clone())));
    let t = f.join(ClassicJoin { member: Some(a.clone()), ..static_req("instance-a", &[("p", "meta")]) });
    assert_eq!(join_err(f.answers().remove(&t)), fenced);
    // An administrator removes the static member by its instance id: a rebalance.
    let left = f.c.leave("g", &[Leaving { member: None, instance: Some("instance-a".into()) }], f.now);
    assert_eq!(left, vec![Ok(())]);
    assert_eq!(f.c.heartbeat("g", &b, None, 2, f.now), Err(GroupError::RebalanceInProgress));
    let left = f.c.leave("g", &[Leaving { member: None, instance: Some("instance-a".into()) }], f.now);
    assert!(matches!(left[0], Err(GroupError::UnknownMember(_))));
}

#[test]
fn a_static_leader_back_at_v9_is_told_it_leads_and_not_to_assign() {
    let mut f = Fixture::new();
    let a = f.stable_one(static_req("lead", &[("p", "m")]), "share");
    let t = f.join(ClassicJoin { supports_skip_assignment: true, ..static_req("lead", &[("p", "m")]) });
    let r = f.joined(t);
    assert_ne!(r.member, a);
    assert_eq!((r.generation, r.leader.as_ref(), r.skip_assignment), (1, Some(&r.member), true));
    assert_eq!(r.members.len(), 1, "the leader still sees the members");
}

#[test]
fn a_static_member_that_stays_away_past_its_session_is_removed() {
    let mut f = Fixture::new();
    let a = f.stable_one(static_req("gone", &[("p", "")]), "x");
    f.advance(SESSION + Duration::from_millis(1));
    assert!(matches!(f.c.heartbeat("g", &a, Some("gone"), 1, f.now), Err(GroupError::UnknownMember(_))));
    assert_eq!(f.c.describe("g").unwrap().state, GroupState::Empty);
}

#[test]
fn a_member_that_never_syncs_is_removed_and_the_group_rebalances() {
    let mut f = Fixture::new();
    let a = f.stable_one(req(None, &[("p", "")]), "x");
    let tb = f.join(req(None, &[("p", "")]));
    let ta = f.join(req(Some(&a), &[("p", "")]));
    let answers = f.answers();
    assert_eq!(answers.len(), 2);
    let Some(Outcome::Join(Ok(rb))) = answers.get(&tb).cloned() else { panic!("b joined") };
    assert!(matches!(answers.get(&ta), Some(Outcome::Join(Ok(_)))));
    // The leader syncs; b heartbeats (so its session lives) but never syncs.
    let sa = f.sync(&a, 2, &[(&a, "a"), (&rb.member, "b")]);
    assert!(matches!(f.answers().remove(&sa), Some(Outcome::Sync(Ok(_)))));
    for _ in 0..10 {
        f.advance(REBALANCE / 10);
        let _ = f.c.heartbeat("g", &a, None, 2, f.now);
        let _ = f.c.heartbeat("g", &rb.member, None, 2, f.now);
    }
    f.advance(Duration::from_millis(5));
    let d = f.c.describe("g").unwrap();
    assert!(d.members.iter().all(|m| m.member != rb.member), "b was removed: {d:?}");
    assert_ne!(d.state, GroupState::Stable, "the group rebalances without b");
}

#[test]
fn commits_are_checked_as_kafka_checks_them() {
    let mut f = Fixture::new();
    assert_eq!(f.c.check_commit("g", None, None, -1, f.now), None, "no such group here");
    let a = f.stable_one(req(None, &[("p", "")]), "x");
    assert_eq!(f.c.check_commit("g", Some(&a), None, 1, f.now), Some(Ok(())));
    assert!(matches!(f.c.check_commit("g", None, None, -1, f.now), Some(Err(GroupError::UnknownMember(_)))));
    assert_eq!(
        f.c.check_commit("g", Some(&a), None, 0, f.now),
        Some(Err(GroupError::IllegalGeneration { got: 0, current: 1 }))
    );
    // While a rebalance is prepared the members still commit (giving partitions up) ...
    let tb = f.join(req(None, &[("p", "")]));
    assert_eq!(f.c.check_commit("g", Some(&a), None, 1, f.now), Some(Ok(())));
    // ... but not between the join and the assignment.
    f.join(req(Some(&a), &[("p", "")]));
    assert!(matches!(f.answers().remove(&tb), Some(Outcome::Join(Ok(_)))));
    assert_eq!(f.c.check_commit("g", Some(&a), None, 2, f.now), Some(Err(GroupError::RebalanceInProgress)));
    // Once every member left, commits from outside are accepted again.
    let b = f.c.describe("g").unwrap().members.into_iter().find(|m| m.member != a).unwrap().member;
    let left = f.c.leave(
        "g",
        &[Leaving { member: Some(a.clone()), instance: None }, Leaving { member: Some(b), instance: None }],
        f.now,
    );
    assert_eq!(left, vec![Ok(()), Ok(())]);
    f.advance(Duration::from_millis(1));
    assert_eq!(f.c.describe("g").unwrap().state, GroupState::Empty);
    assert_eq!(f.c.check_commit("g", None, None, -1, f.now), Some(Ok(())));
}

#[test]
fn a_leave_during_a_rebalance_completes_it_for_the_others() {
    let mut f = Fixture::new();
    let a = f.stable_one(req(None, &[("p", "")]), "x");
    let tb = f.join(req(None, &[("p", "")]));
    assert!(f.answers().is_empty());
    assert_eq!(f.c.leave("g", &[Leaving { member: Some(a), instance: None }], f.now), vec![Ok(())]);
    let rb = f.joined(tb);
    assert_eq!((rb.generation, rb.leader.as_ref()), (2, Some(&rb.member)));
}

#[test]
fn stale_and_unknown_requests_get_kafkas_errors() {
    let mut f = Fixture::new();
    let a = f.stable_one(req(None, &[("p", "")]), "x");
    let nobody = MemberId::new("nobody");
    assert!(matches!(f.c.heartbeat("g", &nobody, None, 1, f.now), Err(GroupError::UnknownMember(_))));
    assert!(matches!(f.c.heartbeat("other", &a, None, 1, f.now), Err(GroupError::UnknownMember(_))));
    assert_eq!(f.c.heartbeat("g", &a, None, 7, f.now), Err(GroupError::IllegalGeneration { got: 7, current: 1 }));
    let t = f.sync(&a, 7, &[]);
    assert!(matches!(f.answers().remove(&t), Some(Outcome::Sync(Err(GroupError::IllegalGeneration { .. })))));
    let t = f.sync(&nobody, 1, &[]);
    assert!(matches!(f.answers().remove(&t), Some(Outcome::Sync(Err(GroupError::UnknownMember(_))))));
    let left = f.c.leave("g", &[Leaving { member: Some(nobody), instance: None }], f.now);
    assert!(matches!(left[0], Err(GroupError::UnknownMember(_))));
    // A known member asking for an instance id no one holds is unknown too.
    assert!(matches!(f.c.heartbeat("g", &a, Some("not-mine"), 1, f.now), Err(GroupError::UnknownMember(_))));
}

#[test]
fn the_group_size_is_bounded() {
    let mut f = Fixture::new();
    let mut last = None;
    for _ in 0..GROUP_MEMBERS_MAX {
        last = Some(f.join(ClassicJoin { require_known_member: true, ..req(None, &[("p", "")]) }));
    }
    assert!(matches!(join_err(f.answers().remove(&last.unwrap())), GroupError::MemberIdRequired(_)));
    let t = f.join(ClassicJoin { require_known_member: true, ..req(None, &[("p", "")]) });
    assert_eq!(join_err(f.answers().remove(&t)), GroupError::MaxSize(GROUP_MEMBERS_MAX));
    // Pending members that never come back expire after their session.
    f.advance(SESSION);
    let t = f.join(req(None, &[("p", "")]));
    assert_eq!(f.joined(t).generation, 1);
}

#[test]
fn an_empty_groups_first_rebalance_waits_the_initial_delay_longer_while_members_keep_joining() {
    let mut f = Fixture::new();
    let delay = Duration::from_millis(3000);
    let slow = |member| ClassicJoin {
        initial_rebalance_delay: delay,
        rebalance_timeout: Duration::from_millis(10_000),
        ..req(member, &[("range", "")])
    };
    let ta = f.join(slow(None));
    f.advance(Duration::from_millis(1000));
    let tb = f.join(slow(None));
    // Both have joined, yet the first generation waits for the delay.
    f.advance(Duration::from_millis(1999));
    assert!(f.answers().is_empty(), "nothing before the initial delay");
    assert_eq!(f.c.describe("g").unwrap().state, GroupState::PreparingRebalance);
    // b joined during the delay: it is extended by the delay (within the 7 s the
    // rebalance timeout leaves), and a third member joins meanwhile.
    f.advance(Duration::from_millis(1));
    assert!(f.answers().is_empty(), "extended for the member that joined");
    f.advance(Duration::from_millis(1000));
    let tc = f.join(slow(None));
    f.advance(Duration::from_millis(1999));
    assert!(f.answers().is_empty());
    f.advance(Duration::from_millis(1));
    assert!(f.answers().is_empty(), "extended again for c");
    // The last extension: the 4 s left, capped at the delay, then no one new: one
    // generation for all three.
    f.advance(Duration::from_millis(3000));
    let mut answers = f.answers();
    let mut generation = |t| match answers.remove(&t) {
        Some(Outcome::Join(Ok(r))) => (r.generation, r.leader),
        other => panic!("join {t}: {other:?}"),
    };
    let (a, b, c) = (generation(ta), generation(tb), generation(tc));
    assert_eq!((a.0, b.0, c.0), (1, 1, 1));
    assert!(a.1.is_some() && a.1 == b.1 && b.1 == c.1, "one leader");
    assert_eq!(f.c.describe("g").unwrap().members.len(), 3);
}

#[test]
fn a_lone_member_waits_the_initial_delay_once_and_later_rebalances_do_not() {
    let mut f = Fixture::new();
    let delay = Duration::from_millis(500);
    let r = |member| ClassicJoin { initial_rebalance_delay: delay, ..req(member, &[("range", "")]) };
    let t = f.join(r(None));
    f.advance(Duration::from_millis(499));
    assert!(f.answers().is_empty());
    f.advance(Duration::from_millis(1));
    let a = f.joined(t);
    assert_eq!(a.generation, 1);
    let s = f.sync(&a.member, 1, &[(&a.member, "all")]);
    assert!(matches!(f.answers().remove(&s), Some(Outcome::Sync(Ok(_)))));
    // A second member of a stable group: the usual rebalance, answered once a rejoins.
    let tb = f.join(r(None));
    let ta = f.join(r(Some(&a.member)));
    let mut answers = f.answers();
    assert!(matches!(answers.remove(&ta), Some(Outcome::Join(Ok(j))) if j.generation == 2));
    assert!(matches!(answers.remove(&tb), Some(Outcome::Join(Ok(j))) if j.generation == 2));
}

#[test]
fn a_stable_group_whose_last_member_leaves_is_empty_when_the_leave_is_answered() {
    let mut f = Fixture::new();
    let a = f.stable_one(req(None, &[("range", "")]), "all");
    assert_eq!(f.c.leave("g", &[Leaving { member: Some(a), instance: None }], f.now), vec![Ok(())]);
    // No clock tick between: ListGroups right after the consumer closed sees it Empty.
    let d = f.c.describe("g").unwrap();
    assert_eq!((d.state, d.generation, d.members.len()), (GroupState::Empty, 2, 0));
}
