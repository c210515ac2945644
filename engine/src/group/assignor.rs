//! Consumer-group partition assignors: which member of a group reads which partitions.
//!
//! The group coordinator runs one of these when a generation starts, with the partition
//! count of every topic and each member's subscription. They are pure functions: no I/O, no
//! clock, no randomness, so the same group gives the same assignment on any shard and in any
//! run. Each follows the Kafka consumer assignor of the same name (`range`, `roundrobin`,
//! `sticky`), so a group moved from Kafka reads the partitions it expects.
//!
//! The contract every assignor keeps (tested on random groups in `engine/tests/assignor.rs`):
//!
//! - every partition of every topic that exists and that some member subscribes to is
//!   assigned to exactly one member, and only to a member subscribed to its topic; a topic
//!   that no member subscribes to, or that does not exist, is not assigned;
//! - every member appears in the result, possibly with no partitions, and each member's list
//!   is sorted by topic, then partition;
//! - the result depends on the content of the input only, not on the order of the
//!   subscriptions or of the lists inside them.
//!
//! Members are ordered by id, bytewise. Kafka orders them with Java's `String.compareTo`
//! (UTF-16 code units); the two agree for every id that does not mix characters above
//! U+FFFF with ones in U+E000..U+FFFF, which includes every ASCII id.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use sluice_io::PartitionId;

/// A group member's id, as the coordinator issued it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemberId(String);

impl MemberId {
    /// Wraps an id.
    pub fn new(id: impl Into<String>) -> Self {
        MemberId(id.into())
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for MemberId {
    fn from(id: &str) -> Self {
        MemberId::new(id)
    }
}

impl From<String> for MemberId {
    fn from(id: String) -> Self {
        MemberId(id)
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One partition of one topic. Orders by topic, then partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicPartition {
    /// The topic's name.
    pub topic: String,
    /// The partition's number within the topic.
    #[serde(with = "partition_number")]
    pub partition: PartitionId,
}

/// A partition id in JSON: its bare number, as Kafka's tools write it.
mod partition_number {
    use serde::{Deserialize, Deserializer, Serializer};
    use sluice_io::PartitionId;

    pub(super) fn serialize<S: Serializer>(p: &PartitionId, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(p.get())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PartitionId, D::Error> {
        u32::deserialize(d).map(PartitionId)
    }
}

impl TopicPartition {
    /// Names a partition.
    pub fn new(topic: impl Into<String>, partition: PartitionId) -> Self {
        TopicPartition { topic: topic.into(), partition }
    }
}

impl fmt::Display for TopicPartition {
    /// Kafka's form: `topic-partition`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// What a member brings to a rebalance: the topics it wants, and the partitions it owned in
/// the previous generation (only the sticky assignor reads `owned`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    /// The member.
    pub member: MemberId,
    /// The topics it subscribes to. Duplicates and unknown topics are ignored.
    pub topics: Vec<String>,
    /// The partitions it owned before this rebalance.
    pub owned: Vec<TopicPartition>,
}

impl Subscription {
    /// A member subscribing to `topics` and owning nothing yet.
    pub fn new(member: impl Into<MemberId>, topics: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Subscription { member: member.into(), topics: topics.into_iter().map(Into::into).collect(), owned: Vec::new() }
    }

    /// The same subscription, owning `owned` from the previous generation.
    pub fn with_owned(mut self, owned: impl IntoIterator<Item = TopicPartition>) -> Self {
        self.owned = owned.into_iter().collect();
        self
    }
}

/// Each member's partitions, sorted by topic then partition.
pub type Assignment = BTreeMap<MemberId, Vec<TopicPartition>>;

/// A partition assignment strategy.
pub trait Assignor: fmt::Debug + Send + Sync {
    /// The strategy's name, as members and Kafka call it (`partition.assignment.strategy`).
    fn name(&self) -> &'static str;

    /// Assigns the partitions of the subscribed topics to the members.
    ///
    /// # Panics
    ///
    /// If two subscriptions name the same member: the coordinator keeps one subscription per
    /// member, so a duplicate is a bug in the caller.
    fn assign(&self, partitions_per_topic: &BTreeMap<String, u32>, subscriptions: &[Subscription]) -> Assignment;
}

/// The names [`by_name`] knows, in Kafka's spelling.
pub const ASSIGNOR_NAMES: [&str; 3] = ["range", "roundrobin", "sticky"];

/// The assignor called `name` (`"range"`, `"roundrobin"` or `"sticky"`), if there is one.
pub fn by_name(name: &str) -> Option<Box<dyn Assignor>> {
    match name {
        "range" => Some(Box::new(RangeAssignor)),
        "roundrobin" => Some(Box::new(RoundRobinAssignor)),
        "sticky" => Some(Box::new(StickyAssignor)),
        _ => None,
    }
}

/// The input in the form every assignor works on: members in id order, addressed by index,
/// and each existing, subscribed topic with its partition count and subscribers.
struct Group<'a> {
    members: Vec<&'a Subscription>,
    /// Topic name -> (partition count, indexes of its subscribers, ascending).
    topics: BTreeMap<&'a str, (u32, Vec<usize>)>,
}

impl<'a> Group<'a> {
    fn new(partitions_per_topic: &'a BTreeMap<String, u32>, subscriptions: &'a [Subscription]) -> Self {
        let mut members: Vec<&Subscription> = subscriptions.iter().collect();
        members.sort_by(|a, b| a.member.cmp(&b.member));
        for pair in members.windows(2) {
            assert_ne!(pair[0].member, pair[1].member, "member {} has two subscriptions", pair[0].member);
        }
        let mut topics: BTreeMap<&str, (u32, Vec<usize>)> = BTreeMap::new();
        for (index, subscription) in members.iter().enumerate() {
            for topic in &subscription.topics {
                if let Some((name, &count)) = partitions_per_topic.get_key_value(topic.as_str()) {
                    let subscribers = &mut topics.entry(name.as_str()).or_insert((count, Vec::new())).1;
                    // Members are visited in order, so a repeated topic repeats the last entry.
                    if subscribers.last() != Some(&index) {
                        subscribers.push(index);
                    }
                }
            }
        }
        Group { members, topics }
    }

    fn subscribers(&self, topic: &str) -> &[usize] {
        self.topics.get(topic).map_or(&[], |(_, subscribers)| subscribers)
    }

    /// Whether `tp` exists and member `index` subscribes to its topic.
    fn may_own(&self, index: usize, tp: &TopicPartition) -> bool {
        self.topics.get(tp.topic.as_str()).is_some_and(|(count, subscribers)| {
            tp.partition.get() < *count && subscribers.binary_search(&index).is_ok()
        })
    }

    /// The assignment from each member's partitions, indexed like `members`.
    fn finish(&self, held: Vec<Vec<TopicPartition>>) -> Assignment {
        debug_assert_eq!(held.len(), self.members.len());
        self.members
            .iter()
            .zip(held)
            .map(|(subscription, mut partitions)| {
                partitions.sort_unstable();
                (subscription.member.clone(), partitions)
            })
            .collect()
    }
}

/// Kafka's `range` assignor (`RangeAssignor`): per topic, the partitions in order are cut into
/// contiguous ranges, one per subscribed member in id order; when they do not divide evenly,
/// the first `partitions % members` members get one extra.
///
/// Kafka's example: members C0 and C1, topics t0 and t1 with 3 partitions each, gives
/// C0: [t0p0, t0p1, t1p0, t1p1] and C1: [t0p2, t1p2]. Within a topic the members' counts
/// differ by at most one, but across topics the extras pile up on the first members.
#[derive(Debug, Clone, Copy, Default)]
pub struct RangeAssignor;

impl Assignor for RangeAssignor {
    fn name(&self) -> &'static str {
        "range"
    }

    fn assign(&self, partitions_per_topic: &BTreeMap<String, u32>, subscriptions: &[Subscription]) -> Assignment {
        let group = Group::new(partitions_per_topic, subscriptions);
        let mut held = vec![Vec::new(); group.members.len()];
        for (&topic, (count, subscribers)) in &group.topics {
            let members = subscribers.len() as u32;
            let (per_member, with_extra) = (count / members, count % members);
            for (position, &member) in (0u32..).zip(subscribers) {
                let start = per_member * position + position.min(with_extra);
                let len = per_member + u32::from(position < with_extra);
                held[member]
                    .extend((start..start + len).map(|partition| TopicPartition::new(topic, PartitionId(partition))));
            }
        }
        group.finish(held)
    }
}

/// Kafka's `roundrobin` assignor (`RoundRobinAssignor`): all partitions of the subscribed
/// topics, sorted by topic then partition, are dealt to the members in id order, one at a
/// time; a member not subscribed to a partition's topic is skipped, and the deal goes on from
/// where it stopped (it does not restart for each topic).
///
/// With identical subscriptions the counts differ by at most one. With different ones they
/// can be far apart: Kafka's example gives C0 [t0p0], C1 [t1p0], C2 [t1p1, t2p0, t2p1, t2p2].
#[derive(Debug, Clone, Copy, Default)]
pub struct RoundRobinAssignor;

impl Assignor for RoundRobinAssignor {
    fn name(&self) -> &'static str {
        "roundrobin"
    }

    fn assign(&self, partitions_per_topic: &BTreeMap<String, u32>, subscriptions: &[Subscription]) -> Assignment {
        let group = Group::new(partitions_per_topic, subscriptions);
        let members = group.members.len();
        let mut held = vec![Vec::new(); members];
        let mut next = 0;
        for (&topic, (count, subscribers)) in &group.topics {
            for partition in 0..*count {
                // A topic in `group.topics` has a subscriber, so this stops within one lap.
                while subscribers.binary_search(&next).is_err() {
                    next = (next + 1) % members;
                }
                held[next].push(TopicPartition::new(topic, PartitionId(partition)));
                next = (next + 1) % members;
            }
        }
        group.finish(held)
    }
}

/// Kafka's `sticky` assignor (`StickyAssignor`): balanced first, then as little movement as
/// balance allows.
///
/// Balanced is Kafka's definition: no partition can move from a member to another member
/// subscribed to its topic that holds at least two fewer partitions. When all members
/// subscribe to the same topics, that means their counts differ by at most one.
///
/// The steps:
///
/// 1. Each member keeps the partitions it owned that still exist and whose topic it still
///    subscribes to. A partition claimed by two members is kept by neither and assigned
///    afresh, as Kafka does for two claims in the same generation: one of the claims is
///    stale, and nothing here says which.
/// 2. The other partitions go, those with the fewest possible members first, each to the
///    subscribed member holding the fewest partitions (ties to the lower id).
/// 3. While some partition can move from a member to a subscribed member holding two fewer,
///    one such move is made: from a member holding the most, preferring partitions it did not
///    own before, to the subscribed member holding the fewest. Each move lowers the sum of
///    the squared counts, so this ends, and it ends balanced.
///
/// When all members subscribe to the same topics this keeps the largest number of owned
/// partitions any balanced assignment can keep (`engine/tests/assignor.rs` checks it against
/// the optimum on random groups): a member that leaves has its partitions spread over the
/// others, which keep all of theirs; a member that joins takes only what it must. With
/// different subscriptions the result is balanced, and the movement small but, as in Kafka,
/// not proven minimal.
///
/// Cost: each move sorts the members by load and looks at the most loaded one's partitions
/// until one can go (usually the first); there are at most about as many moves as
/// partitions. Spreading 2000 partitions from one member over 300 took ~15 ms in a release
/// build (an ordinary rebalance of that group, ~1 ms).
#[derive(Debug, Clone, Copy, Default)]
pub struct StickyAssignor;

impl Assignor for StickyAssignor {
    fn name(&self) -> &'static str {
        "sticky"
    }

    fn assign(&self, partitions_per_topic: &BTreeMap<String, u32>, subscriptions: &[Subscription]) -> Assignment {
        let group = Group::new(partitions_per_topic, subscriptions);

        // 1. Valid claims; `None` marks a partition claimed by two members.
        let mut claims: BTreeMap<&TopicPartition, Option<usize>> = BTreeMap::new();
        for (index, subscription) in group.members.iter().enumerate() {
            for tp in subscription.owned.iter().filter(|tp| group.may_own(index, tp)) {
                claims
                    .entry(tp)
                    .and_modify(|claim| {
                        if *claim != Some(index) {
                            *claim = None;
                        }
                    })
                    .or_insert(Some(index));
            }
        }
        let mut held = vec![Holding::default(); group.members.len()];
        for (&tp, claim) in &claims {
            if let Some(index) = *claim {
                held[index].kept.insert(tp.clone());
            }
        }

        // 2. Everything else, the partitions with the fewest possible members first.
        let mut unassigned: Vec<(usize, TopicPartition)> = Vec::new();
        for (&topic, (count, subscribers)) in &group.topics {
            for partition in 0..*count {
                let tp = TopicPartition::new(topic, PartitionId(partition));
                if !matches!(claims.get(&tp), Some(Some(_))) {
                    unassigned.push((subscribers.len(), tp));
                }
            }
        }
        unassigned.sort_unstable();
        for (_, tp) in unassigned {
            let to =
                least_loaded(group.subscribers(&tp.topic), &held, None).expect("a topic in the group has a subscriber");
            held[to].fresh.insert(tp);
        }

        // 3. Balance.
        while let Some((tp, from, to)) = improving_move(&group, &held) {
            let removed = held[from].fresh.remove(&tp) || held[from].kept.remove(&tp);
            debug_assert!(removed, "{tp} moved from a member that does not hold it");
            // A partition can come back to the member that owned it before.
            match claims.get(&tp) {
                Some(Some(owner)) if *owner == to => held[to].kept.insert(tp),
                _ => held[to].fresh.insert(tp),
            };
        }
        group.finish(held.into_iter().map(|holding| holding.kept.into_iter().chain(holding.fresh).collect()).collect())
    }
}

/// One member's partitions while the sticky assignor works: those it owned before, and
/// those it did not (which cost nothing to move again).
#[derive(Debug, Clone, Default)]
struct Holding {
    kept: BTreeSet<TopicPartition>,
    fresh: BTreeSet<TopicPartition>,
}

impl Holding {
    fn len(&self) -> usize {
        self.kept.len() + self.fresh.len()
    }
}

/// Among `candidates` (but `except`), the member holding the fewest partitions, the lowest
/// index on a tie.
fn least_loaded(candidates: &[usize], held: &[Holding], except: Option<usize>) -> Option<usize> {
    candidates.iter().copied().filter(|&c| Some(c) != except).min_by_key(|&c| (held[c].len(), c))
}

/// A move that improves balance (see [`StickyAssignor`], step 3), or `None` if the
/// assignment is balanced.
fn improving_move(group: &Group<'_>, held: &[Holding]) -> Option<(TopicPartition, usize, usize)> {
    let fewest = held.iter().map(Holding::len).min()?;
    let mut sources: Vec<usize> = (0..held.len()).collect();
    sources.sort_unstable_by_key(|&index| (Reverse(held[index].len()), index));
    for from in sources {
        let load = held[from].len();
        if load < fewest + 2 {
            // Sources come most loaded first: no later one can give to anybody either.
            break;
        }
        // Partitions `from` did not own before cost no stickiness to move, so they go first.
        let mut target_for_topic: BTreeMap<&str, Option<usize>> = BTreeMap::new();
        for tp in held[from].fresh.iter().chain(&held[from].kept) {
            let target = *target_for_topic
                .entry(tp.topic.as_str())
                .or_insert_with(|| least_loaded(group.subscribers(&tp.topic), held, Some(from)));
            if let Some(to) = target
                && held[to].len() + 2 <= load
            {
                return Some((tp.clone(), from, to));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics(sizes: &[(&str, u32)]) -> BTreeMap<String, u32> {
        sizes.iter().map(|&(topic, count)| (topic.to_string(), count)).collect()
    }

    /// Parses Kafka's javadoc notation: `t0p1` is partition 1 of topic `t0`.
    fn tps(names: &[&str]) -> Vec<TopicPartition> {
        let mut parsed: Vec<TopicPartition> = names
            .iter()
            .map(|name| {
                let (topic, partition) = name.rsplit_once('p').expect("form tNpM");
                TopicPartition::new(topic, PartitionId(partition.parse().expect("partition number")))
            })
            .collect();
        parsed.sort();
        parsed
    }

    fn expect(members: &[(&str, &[&str])]) -> Assignment {
        members.iter().map(|&(member, names)| (MemberId::from(member), tps(names))).collect()
    }

    fn moved(before: &Assignment, after: &Assignment) -> usize {
        after
            .iter()
            .map(|(member, partitions)| {
                let previous = before.get(member).map_or(&[][..], Vec::as_slice);
                partitions.iter().filter(|tp| !previous.contains(tp)).count()
            })
            .sum()
    }

    fn resubscribe(subscriptions: &[Subscription], previous: &Assignment) -> Vec<Subscription> {
        subscriptions.iter().map(|s| s.clone().with_owned(previous[&s.member].clone())).collect()
    }

    #[test]
    fn by_name_knows_kafkas_names() {
        for name in ASSIGNOR_NAMES {
            assert_eq!(by_name(name).map(|a| a.name()), Some(name));
        }
        assert!(by_name("cooperative-sticky").is_none());
        assert!(by_name("Range").is_none());
    }

    #[test]
    fn display_uses_kafkas_form() {
        assert_eq!(TopicPartition::new("orders", PartitionId(3)).to_string(), "orders-3");
        assert_eq!(MemberId::from("c-1").to_string(), "c-1");
    }

    #[test]
    fn range_javadoc_example() {
        // RangeAssignor javadoc: C0 and C1, t0 and t1 with 3 partitions each.
        let subscriptions = [Subscription::new("C0", ["t0", "t1"]), Subscription::new("C1", ["t0", "t1"])];
        let assignment = RangeAssignor.assign(&topics(&[("t0", 3), ("t1", 3)]), &subscriptions);
        assert_eq!(assignment, expect(&[("C0", &["t0p0", "t0p1", "t1p0", "t1p1"]), ("C1", &["t0p2", "t1p2"])]));
    }

    #[test]
    fn range_gives_the_extras_to_the_first_members_and_skips_non_subscribers() {
        // 7 partitions over 3 members: 3, 2, 2. C9 reads only `u`, which does not exist.
        let subscriptions = [
            Subscription::new("C2", ["t"]),
            Subscription::new("C0", ["t"]),
            Subscription::new("C1", ["t", "t"]),
            Subscription::new("C9", ["u"]),
        ];
        let assignment = RangeAssignor.assign(&topics(&[("t", 7)]), &subscriptions);
        assert_eq!(
            assignment,
            expect(&[("C0", &["tp0", "tp1", "tp2"]), ("C1", &["tp3", "tp4"]), ("C2", &["tp5", "tp6"]), ("C9", &[])])
        );
    }

    #[test]
    fn roundrobin_javadoc_examples() {
        // RoundRobinAssignor javadoc, identical subscriptions.
        let subscriptions = [Subscription::new("C0", ["t0", "t1"]), Subscription::new("C1", ["t0", "t1"])];
        let assignment = RoundRobinAssignor.assign(&topics(&[("t0", 3), ("t1", 3)]), &subscriptions);
        assert_eq!(assignment, expect(&[("C0", &["t0p0", "t0p2", "t1p1"]), ("C1", &["t0p1", "t1p0", "t1p2"])]));

        // The same javadoc, different subscriptions: t0, t1, t2 with 1, 2 and 3 partitions.
        let sizes = topics(&[("t0", 1), ("t1", 2), ("t2", 3)]);
        let subscriptions = [
            Subscription::new("C0", ["t0"]),
            Subscription::new("C1", ["t0", "t1"]),
            Subscription::new("C2", ["t0", "t1", "t2"]),
        ];
        let assignment = RoundRobinAssignor.assign(&sizes, &subscriptions);
        assert_eq!(
            assignment,
            expect(&[("C0", &["t0p0"]), ("C1", &["t1p0"]), ("C2", &["t1p1", "t2p0", "t2p1", "t2p2"])])
        );
    }

    #[test]
    fn sticky_javadoc_example_1_member_leaves() {
        // StickyAssignor javadoc, example 1: C0, C1, C2; t0..t3 with 2 partitions each.
        let sizes = topics(&[("t0", 2), ("t1", 2), ("t2", 2), ("t3", 2)]);
        let all = ["t0", "t1", "t2", "t3"];
        let subscriptions: Vec<Subscription> = ["C0", "C1", "C2"].map(|m| Subscription::new(m, all)).to_vec();
        let first = StickyAssignor.assign(&sizes, &subscriptions);
        assert_eq!(
            first,
            expect(&[("C0", &["t0p0", "t1p1", "t3p0"]), ("C1", &["t0p1", "t2p0", "t3p1"]), ("C2", &["t1p0", "t2p1"])])
        );

        // C1 leaves: the survivors keep theirs, C1's three are spread (the javadoc's result).
        let survivors: Vec<Subscription> =
            resubscribe(&subscriptions, &first).into_iter().filter(|s| s.member.as_str() != "C1").collect();
        let second = StickyAssignor.assign(&sizes, &survivors);
        assert_eq!(
            second,
            expect(&[("C0", &["t0p0", "t1p1", "t3p0", "t2p0"]), ("C2", &["t1p0", "t2p1", "t0p1", "t3p1"])])
        );
    }

    #[test]
    fn sticky_javadoc_example_2_different_subscriptions() {
        // StickyAssignor javadoc, example 2: more balanced than round robin, and after C0
        // leaves, 5 of the 6 assignments are preserved.
        let sizes = topics(&[("t0", 1), ("t1", 2), ("t2", 3)]);
        let subscriptions = vec![
            Subscription::new("C0", ["t0"]),
            Subscription::new("C1", ["t0", "t1"]),
            Subscription::new("C2", ["t0", "t1", "t2"]),
        ];
        let first = StickyAssignor.assign(&sizes, &subscriptions);
        assert_eq!(first, expect(&[("C0", &["t0p0"]), ("C1", &["t1p0", "t1p1"]), ("C2", &["t2p0", "t2p1", "t2p2"])]));

        let survivors: Vec<Subscription> =
            resubscribe(&subscriptions, &first).into_iter().filter(|s| s.member.as_str() != "C0").collect();
        let second = StickyAssignor.assign(&sizes, &survivors);
        assert_eq!(second, expect(&[("C1", &["t1p0", "t1p1", "t0p0"]), ("C2", &["t2p0", "t2p1", "t2p2"])]));
    }

    #[test]
    fn sticky_member_joins_and_only_its_share_moves() {
        let sizes = topics(&[("a", 5), ("b", 4)]);
        let mut subscriptions: Vec<Subscription> =
            ["m0", "m1", "m2"].map(|m| Subscription::new(m, ["a", "b"])).to_vec();
        let before = StickyAssignor.assign(&sizes, &subscriptions);
        assert_eq!(before.values().map(Vec::len).collect::<Vec<_>>(), [3, 3, 3]);

        subscriptions = resubscribe(&subscriptions, &before);
        subscriptions.push(Subscription::new("m3", ["a", "b"]));
        let after = StickyAssignor.assign(&sizes, &subscriptions);
        let counts: Vec<usize> = after.values().map(Vec::len).collect();
        assert_eq!(counts.iter().sum::<usize>(), 9);
        assert!(counts.iter().all(|&c| c == 2 || c == 3), "{counts:?}");
        // 9 over 4 members: the newcomer must take 2, and only those 2 move.
        assert_eq!(after[&MemberId::from("m3")].len(), 2);
        assert_eq!(moved(&before, &after), 2);
        for (member, partitions) in &before {
            assert!(after[member].iter().all(|tp| partitions.contains(tp)), "{member} gained a partition");
        }
    }

    #[test]
    fn sticky_contested_and_invalid_claims() {
        let sizes = topics(&[("a", 2), ("b", 2)]);
        let subscriptions = [
            // Both claim a-0; m0 also claims a partition past the end, a topic it dropped
            // and a topic that is gone.
            Subscription::new("m0", ["a"]).with_owned([
                TopicPartition::new("a", PartitionId(0)),
                TopicPartition::new("a", PartitionId(7)),
                TopicPartition::new("b", PartitionId(0)),
                TopicPartition::new("gone", PartitionId(0)),
            ]),
            Subscription::new("m1", ["a", "b"])
                .with_owned([TopicPartition::new("a", PartitionId(0)), TopicPartition::new("a", PartitionId(1))]),
        ];
        let assignment = StickyAssignor.assign(&sizes, &subscriptions);
        // a-0 is nobody's claim any more; b goes to m1, its only subscriber; a-0 to m0, which
        // holds fewer. m1 would then hold 3 to m0's 1, so balance takes a-1 from m1 as well.
        assert_eq!(assignment, expect(&[("m0", &["ap0", "ap1"]), ("m1", &["bp0", "bp1"])]));
    }

    #[test]
    fn sticky_sheds_what_it_was_just_given_before_what_it_owned() {
        // Filling the unowned partitions leaves m0 with a-2 (owned), a-1 and b-2 (new), and
        // m2 with only a-0. m0 must give one to m2: a-1, which m0 did not own, not a-2.
        let sizes = topics(&[("a", 3), ("b", 3)]);
        let subscriptions = [
            Subscription::new("m0", ["a", "b"]).with_owned([TopicPartition::new("a", PartitionId(2))]),
            Subscription::new("m1", ["b"]).with_owned([TopicPartition::new("b", PartitionId(1))]),
            Subscription::new("m2", ["a"]),
        ];
        let assignment = StickyAssignor.assign(&sizes, &subscriptions);
        assert_eq!(assignment, expect(&[("m0", &["ap2", "bp2"]), ("m1", &["bp0", "bp1"]), ("m2", &["ap0", "ap1"])]));
    }

    #[test]
    fn sticky_sheds_to_balance_but_keeps_the_rest() {
        // m0 owned everything; m1 is new. Balance wins: m0 gives up half, keeps the other.
        let sizes = topics(&[("t", 6)]);
        let subscriptions = [
            Subscription::new("m0", ["t"]).with_owned((0..6).map(|p| TopicPartition::new("t", PartitionId(p)))),
            Subscription::new("m1", ["t"]),
        ];
        let assignment = StickyAssignor.assign(&sizes, &subscriptions);
        assert_eq!(assignment[&MemberId::from("m0")].len(), 3);
        assert_eq!(assignment[&MemberId::from("m1")].len(), 3);
    }

    #[test]
    fn no_members_or_no_topics() {
        for name in ASSIGNOR_NAMES {
            let assignor = by_name(name).expect("known");
            assert!(assignor.assign(&topics(&[("t", 3)]), &[]).is_empty(), "{name}");
            let lonely = assignor.assign(&BTreeMap::new(), &[Subscription::new("m", ["t"])]);
            assert_eq!(lonely, expect(&[("m", &[])]), "{name}");
        }
    }

    #[test]
    #[should_panic(expected = "has two subscriptions")]
    fn duplicate_member_is_a_bug() {
        RangeAssignor.assign(&topics(&[("t", 1)]), &[Subscription::new("m", ["t"]), Subscription::new("m", ["t"])]);
    }
}
