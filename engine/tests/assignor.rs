//! The assignors' contract, checked on random groups.
//!
//! Every run prints `SEED=<n>`; `SEED=<n> cargo test -p sluice-engine --test assignor`
//! replays it exactly.

use sluice_io::PartitionId;
use std::collections::{BTreeMap, BTreeSet};

use sluice_engine::group::assignor::{
    ASSIGNOR_NAMES, Assignment, Assignor, MemberId, RangeAssignor, RoundRobinAssignor, StickyAssignor, Subscription,
    TopicPartition, by_name,
};

const CASES: usize = 400;

/// xorshift64*: small, seedable, good enough to shuffle test inputs.
struct Rng(u64);

impl Rng {
    fn from_env() -> (u64, Rng) {
        let seed = std::env::var("SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
        });
        println!("SEED={seed}");
        (seed, Rng(seed ^ 0x9e37_79b9_7f4a_7c15 | 1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

const TOPIC_POOL: [&str; 6] = ["orders", "t0", "t1", "clicks", "z", "a.b-c"];

struct Case {
    sizes: BTreeMap<String, u32>,
    subscriptions: Vec<Subscription>,
}

/// A random group. With `identical`, every member subscribes to the same topics.
fn random_case(rng: &mut Rng, identical: bool) -> Case {
    let mut sizes = BTreeMap::new();
    for topic in TOPIC_POOL {
        // Some topics do not exist, so subscriptions to them must be ignored.
        if rng.chance(75) {
            sizes.insert(topic.to_string(), rng.below(13) as u32);
        }
    }
    let pick_topics = |rng: &mut Rng| -> Vec<String> {
        let mut topics: Vec<String> =
            TOPIC_POOL.iter().filter(|_| rng.chance(50)).map(|topic| topic.to_string()).collect();
        if !topics.is_empty() && rng.chance(10) {
            let again = topics[0].clone();
            topics.push(again);
        }
        topics
    };
    let shared = pick_topics(rng);
    let mut ids: Vec<usize> = (0..100).collect();
    rng.shuffle(&mut ids);
    let members = rng.below(8);
    let mut subscriptions: Vec<Subscription> = ids[..members]
        .iter()
        .map(|id| {
            let topics = if identical { shared.clone() } else { pick_topics(rng) };
            Subscription::new(format!("member-{id}"), topics)
        })
        .collect();
    // Previous ownership: random partitions, some of them invalid or claimed twice.
    for subscription in &mut subscriptions {
        if rng.chance(70) {
            let claims = rng.below(10);
            subscription.owned = (0..claims)
                .map(|_| {
                    TopicPartition::new(TOPIC_POOL[rng.below(TOPIC_POOL.len())], PartitionId(rng.below(15) as u32))
                })
                .collect();
        }
    }
    Case { sizes, subscriptions }
}

/// The same subscriptions in another order, with their lists reordered too.
fn reordered(rng: &mut Rng, subscriptions: &[Subscription]) -> Vec<Subscription> {
    let mut copy = subscriptions.to_vec();
    rng.shuffle(&mut copy);
    for subscription in &mut copy {
        rng.shuffle(&mut subscription.topics);
        rng.shuffle(&mut subscription.owned);
    }
    copy
}

/// Every partition that must be assigned: the existing partitions of subscribed topics.
fn expected_partitions(case: &Case) -> BTreeSet<TopicPartition> {
    let subscribed: BTreeSet<&String> = case.subscriptions.iter().flat_map(|s| &s.topics).collect();
    subscribed
        .into_iter()
        .filter_map(|topic| case.sizes.get(topic).map(|&count| (topic, count)))
        .flat_map(|(topic, count)| (0..count).map(move |p| TopicPartition::new(topic.clone(), PartitionId(p))))
        .collect()
}

fn subscription_of<'a>(case: &'a Case, member: &MemberId) -> &'a Subscription {
    case.subscriptions.iter().find(|s| &s.member == member).expect("assigned member exists")
}

/// The contract every assignor keeps; `context` names the seed and the case.
fn check_contract(assignor: &dyn Assignor, case: &Case, assignment: &Assignment, rng: &mut Rng, context: &str) {
    let name = assignor.name();
    let members: BTreeSet<&MemberId> = case.subscriptions.iter().map(|s| &s.member).collect();
    assert_eq!(assignment.keys().collect::<BTreeSet<_>>(), members, "{name} {context}: members");

    let mut seen: BTreeMap<&TopicPartition, &MemberId> = BTreeMap::new();
    for (member, partitions) in assignment {
        assert!(partitions.windows(2).all(|w| w[0] < w[1]), "{name} {context}: {member}'s list is not sorted");
        let subscription = subscription_of(case, member);
        for tp in partitions {
            assert!(subscription.topics.contains(&tp.topic), "{name} {context}: {tp} to {member}, not subscribed");
            if let Some(other) = seen.insert(tp, member) {
                panic!("{name} {context}: {tp} owned by both {other} and {member}");
            }
        }
    }
    let assigned: BTreeSet<TopicPartition> = seen.keys().map(|&tp| tp.clone()).collect();
    let expected = expected_partitions(case);
    let orphaned: Vec<_> = expected.difference(&assigned).collect();
    let invented: Vec<_> = assigned.difference(&expected).collect();
    assert!(orphaned.is_empty(), "{name} {context}: orphaned {orphaned:?}");
    assert!(invented.is_empty(), "{name} {context}: assigned partitions that do not exist {invented:?}");

    // Deterministic, and blind to the order of the input.
    let sizes = &case.sizes;
    assert_eq!(&assignor.assign(sizes, &case.subscriptions), assignment, "{name} {context}: second run differs");
    let shuffled = reordered(rng, &case.subscriptions);
    assert_eq!(&assignor.assign(sizes, &shuffled), assignment, "{name} {context}: input order changed the result");
}

fn counts(assignment: &Assignment) -> Vec<usize> {
    assignment.values().map(Vec::len).collect()
}

fn spread(counts: &[usize]) -> usize {
    counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0)
}

/// Runs `check` on `CASES` random groups, identical subscriptions in half of them.
fn for_random_cases(mut check: impl FnMut(&Case, bool, &mut Rng, &str)) {
    let (seed, mut rng) = Rng::from_env();
    for index in 0..CASES {
        let identical = index % 2 == 0;
        let case = random_case(&mut rng, identical);
        check(&case, identical, &mut rng, &format!("(SEED={seed}, case {index})"));
    }
}

#[test]
fn every_assignor_keeps_the_contract() {
    for_random_cases(|case, _, rng, context| {
        for name in ASSIGNOR_NAMES {
            let assignor = by_name(name).expect("known name");
            let assignment = assignor.assign(&case.sizes, &case.subscriptions);
            check_contract(assignor.as_ref(), case, &assignment, rng, context);
        }
    });
}

#[test]
fn range_is_contiguous_in_member_order_and_balanced_per_topic() {
    for_random_cases(|case, _, _, context| {
        let assignment = RangeAssignor.assign(&case.sizes, &case.subscriptions);
        for (topic, &count) in &case.sizes {
            // Subscribers in id order hold consecutive ranges, the longer ones first.
            let mut next = 0;
            let mut sizes = Vec::new();
            for (member, partitions) in &assignment {
                if !subscription_of(case, member).topics.contains(topic) {
                    continue;
                }
                let mine: Vec<u32> =
                    partitions.iter().filter(|tp| &tp.topic == topic).map(|tp| tp.partition.get()).collect();
                assert_eq!(
                    mine,
                    (next..next + mine.len() as u32).collect::<Vec<_>>(),
                    "{context}: {member} on {topic}"
                );
                next += mine.len() as u32;
                sizes.push(mine.len());
            }
            if !sizes.is_empty() {
                assert_eq!(next, count, "{context}: {topic}");
                assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{context}: {topic} extras not first: {sizes:?}");
                assert!(spread(&sizes) <= 1, "{context}: {topic} unbalanced: {sizes:?}");
            }
        }
    });
}

#[test]
fn roundrobin_deals_in_order_and_balances_identical_subscriptions() {
    for_random_cases(|case, identical, _, context| {
        let assignment = RoundRobinAssignor.assign(&case.sizes, &case.subscriptions);
        if !identical || assignment.is_empty() {
            return;
        }
        assert!(spread(&counts(&assignment)) <= 1, "{context}: {:?}", counts(&assignment));
        // With identical subscriptions, the k-th partition in sorted order goes to the
        // (k mod members)-th member in id order.
        let members: Vec<&MemberId> = assignment.keys().collect();
        for (k, tp) in expected_partitions(case).iter().enumerate() {
            let holder = members[k % members.len()];
            assert!(assignment[holder].contains(tp), "{context}: {tp} should go to {holder}");
        }
    });
}

/// Each member's valid claims that nobody else makes: what stickiness may keep.
fn sole_valid_claims(case: &Case) -> BTreeMap<TopicPartition, MemberId> {
    let mut claimants: BTreeMap<TopicPartition, BTreeSet<&MemberId>> = BTreeMap::new();
    for subscription in &case.subscriptions {
        for tp in &subscription.owned {
            let exists = case.sizes.get(&tp.topic).is_some_and(|&count| tp.partition.get() < count);
            if exists && subscription.topics.contains(&tp.topic) {
                claimants.entry(tp.clone()).or_default().insert(&subscription.member);
            }
        }
    }
    claimants
        .into_iter()
        .filter(|(_, members)| members.len() == 1)
        .map(|(tp, members)| (tp, members.into_iter().next().expect("one").clone()))
        .collect()
}

#[test]
fn sticky_is_balanced_and_keeps_the_most_that_balance_allows() {
    for_random_cases(|case, identical, _, context| {
        let assignment = StickyAssignor.assign(&case.sizes, &case.subscriptions);
        let load: BTreeMap<&MemberId, usize> = assignment.iter().map(|(m, p)| (m, p.len())).collect();

        // Kafka's balance: no partition can move to a subscribed member holding 2 fewer.
        for (member, partitions) in &assignment {
            for tp in partitions {
                for other in &case.subscriptions {
                    if other.topics.contains(&tp.topic) {
                        assert!(
                            load[&other.member] + 2 > load[member],
                            "{context}: {tp} could move from {member} ({}) to {} ({})",
                            load[member],
                            other.member,
                            load[&other.member]
                        );
                    }
                }
            }
        }

        let claims = sole_valid_claims(case);
        let retained = assignment
            .iter()
            .flat_map(|(member, partitions)| partitions.iter().map(move |tp| (tp, member)))
            .filter(|(tp, member)| claims.get(*tp) == Some(*member))
            .count();
        if identical && !assignment.is_empty() {
            assert!(spread(&counts(&assignment)) <= 1, "{context}: {:?}", counts(&assignment));
            // The optimum: members end with q or q+1 partitions, r of them with q+1; each
            // keeps up to its quota, and the r larger quotas go to members that owned more.
            let total = expected_partitions(case).len();
            let (q, r) = (total / assignment.len(), total % assignment.len());
            let owned: Vec<usize> = assignment.keys().map(|m| claims.values().filter(|c| *c == m).count()).collect();
            let optimum =
                owned.iter().map(|&o| o.min(q)).sum::<usize>() + r.min(owned.iter().filter(|&&o| o > q).count());
            assert_eq!(retained, optimum, "{context}: kept {retained} of the owned partitions, could keep {optimum}");
        }
    });
}

#[test]
fn sticky_fed_its_own_output_changes_nothing() {
    for_random_cases(|case, _, _, context| {
        let first = StickyAssignor.assign(&case.sizes, &case.subscriptions);
        let again: Vec<Subscription> =
            case.subscriptions.iter().map(|s| s.clone().with_owned(first[&s.member].clone())).collect();
        assert_eq!(StickyAssignor.assign(&case.sizes, &again), first, "{context}");
    });
}

#[test]
fn sticky_leave_and_join_move_only_what_they_must() {
    for_random_cases(|case, identical, rng, context| {
        if !identical || case.subscriptions.is_empty() {
            return;
        }
        let stable = StickyAssignor.assign(&case.sizes, &case.subscriptions);
        let owning: Vec<Subscription> =
            case.subscriptions.iter().map(|s| s.clone().with_owned(stable[&s.member].clone())).collect();

        // A member leaves: every survivor keeps all it had.
        let mut survivors = owning.clone();
        let leaver = survivors.remove(rng.below(survivors.len()));
        let after_leave = StickyAssignor.assign(&case.sizes, &survivors);
        for (member, partitions) in &after_leave {
            let before = &stable[member];
            assert!(
                before.iter().all(|tp| partitions.contains(tp)),
                "{context}: {member} lost a partition when {} left",
                leaver.member
            );
        }

        // A member joins: only the partitions it receives move.
        let mut joined = owning;
        joined.push(Subscription::new("member-new", case.subscriptions[0].topics.clone()));
        let after_join = StickyAssignor.assign(&case.sizes, &joined);
        let newcomer = after_join[&MemberId::from("member-new")].len();
        let total = expected_partitions(case).len();
        assert!(
            newcomer == total / joined.len() || newcomer == total.div_ceil(joined.len()),
            "{context}: newcomer got {newcomer}"
        );
        let moved: usize = after_join
            .iter()
            .map(|(member, partitions)| {
                let before = stable.get(member).map_or(&[][..], Vec::as_slice);
                partitions.iter().filter(|tp| !before.contains(tp)).count()
            })
            .sum();
        assert_eq!(moved, newcomer, "{context}: partitions moved beyond the newcomer's share");
    });
}
