//! Kafka's `uniform` server-side assignor for a group whose members all subscribe to the
//! same topics (Kafka's `UniformHomogeneousAssignmentBuilder`): every member gets the
//! same number of partitions, give or take one, and keeps what it had up to that quota,
//! lowest partitions first; the partitions let go of, and new ones, go to the members
//! below their quota, in order. Members subscribed to different topics are assigned by
//! the engine's sticky assignor instead (Kafka has a heterogeneous builder of its own).

use std::collections::BTreeSet;

use crate::group::assignor::{Assignment, MemberId, TopicPartition};
use sluice_io::PartitionId;

/// One member: its id, the topics it subscribes to (that exist) and its last target.
pub(super) type Input<'a> = (&'a MemberId, &'a [String], Vec<TopicPartition>);

/// The assignment, or `None` when the members do not all subscribe to the same topics.
pub(super) fn assign(counts: &std::collections::BTreeMap<String, u32>, members: &[Input<'_>]) -> Option<Assignment> {
    let (_, topics, _) = members.first()?;
    if members.iter().any(|(_, t, _)| t != topics) {
        return None;
    }
    let all: Vec<TopicPartition> = topics
        .iter()
        .filter_map(|t| counts.get(t).map(|&n| (t, n)))
        .flat_map(|(t, n)| (0..n).map(move |p| TopicPartition::new(t.clone(), PartitionId(p))))
        .collect();
    let valid: BTreeSet<&TopicPartition> = all.iter().collect();
    let min = all.len() / members.len();
    let mut extras = all.len() % members.len();
    let mut out: Assignment = members.iter().map(|(m, _, _)| ((*m).clone(), Vec::new())).collect();
    let mut taken: BTreeSet<TopicPartition> = BTreeSet::new();
    // What each member keeps: its lowest partitions up to the quota, one more while
    // there are extra partitions to share out.
    for (m, _, old) in members {
        let retained: BTreeSet<&TopicPartition> = old.iter().filter(|tp| valid.contains(tp)).collect();
        let mut keep = retained.len().min(min);
        if retained.len() > min && extras > 0 {
            keep += 1;
            extras -= 1;
        }
        for tp in retained.into_iter().take(keep) {
            taken.insert(tp.clone());
            out.get_mut(*m).expect("every member").push(tp.clone());
        }
    }
    let mut free = all.iter().filter(|tp| !taken.contains(*tp)).cloned();
    // Members below the quota first, filled in order; then one extra each while extras
    // remain.
    for (m, _, _) in members {
        let list = out.get_mut(*m).expect("every member");
        while list.len() < min {
            match free.next() {
                Some(tp) => list.push(tp),
                None => break,
            }
        }
    }
    for (m, _, _) in members {
        let list = out.get_mut(*m).expect("every member");
        if extras > 0
            && list.len() == min
            && let Some(tp) = free.next()
        {
            list.push(tp);
            extras -= 1;
        }
    }
    for list in out.values_mut() {
        list.sort();
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tps(ps: &[u32]) -> Vec<TopicPartition> {
        ps.iter().map(|&p| TopicPartition::new("t", PartitionId(p))).collect()
    }

    #[test]
    fn members_keep_their_lowest_partitions_and_newcomers_get_the_rest() {
        // librdkafka's 0113 x_incremental_rebalances expects these choices of Kafka's.
        let counts = [("t".to_string(), 6)].into_iter().collect();
        let topics = vec!["t".to_string()];
        let (c0, c1, c2) = (MemberId::new("c0"), MemberId::new("c1"), MemberId::new("c2"));
        let two = assign(&counts, &[(&c0, &topics, tps(&[0, 1, 2, 3, 4, 5])), (&c1, &topics, vec![])]).unwrap();
        assert_eq!((two[&c0].clone(), two[&c1].clone()), (tps(&[0, 1, 2]), tps(&[3, 4, 5])));
        let three = assign(
            &counts,
            &[(&c0, &topics, two[&c0].clone()), (&c1, &topics, two[&c1].clone()), (&c2, &topics, vec![])],
        )
        .unwrap();
        assert_eq!(three[&c0], tps(&[0, 1]));
        assert_eq!(three[&c1], tps(&[3, 4]));
        assert_eq!(three[&c2], tps(&[2, 5]));
        // Uneven: 7 partitions over 3 members, 3-2-2, nothing orphaned or doubled.
        let counts7 = [("t".to_string(), 7)].into_iter().collect();
        let seven = assign(
            &counts7,
            &[(&c0, &topics, tps(&[0, 1, 2, 3, 4, 5, 6])), (&c1, &topics, vec![]), (&c2, &topics, vec![])],
        )
        .unwrap();
        let mut all: Vec<TopicPartition> = seven.values().flatten().cloned().collect();
        all.sort();
        assert_eq!(all, tps(&[0, 1, 2, 3, 4, 5, 6]));
        assert_eq!(seven[&c0], tps(&[0, 1, 2]));
        // Different subscriptions: not this builder's.
        let other = vec!["u".to_string()];
        assert!(assign(&counts, &[(&c0, &topics, vec![]), (&c1, &other, vec![])]).is_none());
    }
}
