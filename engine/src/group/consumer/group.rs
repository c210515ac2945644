//! One KIP-848 group: its epoch, target assignment and members, and each member's
//! reconciliation towards its target (see the module above for the rules).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use regex::Regex;

use super::{
    ConsumerAnswer, ConsumerGroupDescription, ConsumerHeartbeat, ConsumerMemberDescription, DEFAULT_ASSIGNOR,
    LEAVE_EPOCH, STATIC_LEAVE_EPOCH, engine_assignor,
};
use crate::error::GroupError;
use crate::group::assignor::{MemberId, Subscription, TopicPartition, by_name};

/// A subscription's regular expression, matched against whole topic names (Kafka takes
/// RE2/J syntax; the `regex` crate's is the same for the expressions topic names need:
/// no backreferences or lookaround in either).
pub(super) fn compile(re: &str) -> Result<Regex, GroupError> {
    Regex::new(&format!("^(?:{re})$")).map_err(|e| GroupError::InvalidRegex(format!("{re:?}: {e}")))
}

/// Where a member is in its reconciliation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// It owns its target (or all of it no one else holds) at the target epoch.
    Stable,
    /// It must revoke `revoking` first; its epoch stays until it has.
    Revoking,
    /// It is at the target epoch, waiting for others to release some of its target.
    Unreleased,
}

#[derive(Debug)]
struct Member {
    epoch: i32,
    previous_epoch: i32,
    step: Step,
    assigned: BTreeSet<TopicPartition>,
    revoking: BTreeSet<TopicPartition>,
    topics: Vec<String>,
    regex: Option<(String, Regex)>,
    /// The topics the subscription resolves to, among those that exist.
    resolved: Vec<String>,
    assignor: Option<String>,
    instance: Option<String>,
    rack: Option<String>,
    client_id: String,
    client_host: String,
    rebalance_timeout: Duration,
    session_timeout: Duration,
    last_seen: Instant,
    /// When a member told to revoke is fenced if it has not.
    revoke_by: Option<Instant>,
}

impl Member {
    fn resolve(&self, topics: &BTreeMap<String, u32>, resolved: &BTreeSet<String>) -> Vec<String> {
        let mut r: BTreeSet<String> = self.topics.iter().filter(|t| topics.contains_key(*t)).cloned().collect();
        if let Some((_, re)) = self.regex.as_ref().filter(|(text, _)| resolved.contains(text)) {
            r.extend(topics.keys().filter(|t| re.is_match(t)).cloned());
        }
        r.into_iter().collect()
    }
}

#[derive(Debug, Default)]
pub(super) struct Group {
    epoch: i32,
    assignment_epoch: i32,
    assignor: String,
    members: BTreeMap<MemberId, Member>,
    target: BTreeMap<MemberId, BTreeSet<TopicPartition>>,
    /// The partition counts of the topics the members subscribe to, as last seen.
    partitions: BTreeMap<String, u32>,
    /// The regexes the group resolves against the topics. As Kafka resolves regexes
    /// asynchronously, for the whole group, a new one is resolved from the group's next
    /// heartbeat (of any member), not in the one that brought it: a member's named
    /// topics are assigned first.
    regexes: BTreeSet<String>,
    /// Regexes brought by the heartbeat being handled, resolved from the next one.
    regexes_new: BTreeSet<String>,
}

impl Group {
    pub(super) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub(super) fn epoch_of(&self, member: &MemberId) -> Option<i32> {
        self.members.get(member).map(|m| m.epoch)
    }

    pub(super) fn subscribed(&self) -> Vec<String> {
        self.partitions.keys().cloned().collect()
    }

    pub(super) fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.assignment_epoch < self.epoch {
            "Assigning"
        } else if self.members.values().all(|m| m.step == Step::Stable && m.epoch == self.assignment_epoch) {
            "Stable"
        } else {
            "Reconciling"
        }
    }

    pub(super) fn heartbeat(
        &mut self,
        req: ConsumerHeartbeat,
        topics: &BTreeMap<String, u32>,
        now: Instant,
    ) -> Result<ConsumerAnswer, GroupError> {
        let id = req.member.clone();
        if req.epoch == LEAVE_EPOCH || req.epoch == STATIC_LEAVE_EPOCH {
            return self.leave(&id, req.epoch, req.instance.as_deref());
        }
        let full =
            req.rebalance_timeout.is_some() && (req.topics.is_some() || req.regex.is_some()) && req.owned.is_some();
        let mut changed = false;
        if req.epoch == 0 {
            changed |= self.join(&req, now)?;
        } else {
            let m = self.members.get(&id).ok_or_else(|| GroupError::UnknownMember(id.to_string()))?;
            if req.instance.is_some() && m.instance != req.instance {
                return Err(GroupError::FencedInstance(req.instance.clone().unwrap_or_default()));
            }
            if req.epoch > m.epoch {
                return Err(GroupError::FencedMemberEpoch { got: req.epoch, current: m.epoch });
            }
            if req.epoch < m.epoch {
                // Its previous epoch is taken when what it owns is within its assignment:
                // the answer that moved it on was lost.
                let within = req.owned.as_ref().is_some_and(|o| o.iter().all(|tp| m.assigned.contains(tp)));
                if req.epoch != m.previous_epoch || !within {
                    return Err(GroupError::FencedMemberEpoch { got: req.epoch, current: m.epoch });
                }
            }
        }
        // Regexes brought by earlier heartbeats are resolved by now.
        let earlier = std::mem::take(&mut self.regexes_new);
        self.regexes.extend(earlier);
        let m = self.members.get_mut(&id).expect("joined or found");
        m.last_seen = now;
        m.session_timeout = req.session_timeout;
        m.client_id = req.client_id;
        m.client_host = req.client_host;
        if let Some(t) = req.rebalance_timeout {
            m.rebalance_timeout = t;
        }
        if req.rack.is_some() {
            m.rack = req.rack;
        }
        if let Some(mut t) = req.topics {
            t.sort();
            t.dedup();
            changed |= t != m.topics;
            m.topics = t;
        }
        if let Some(re) = req.regex {
            let next = if re.is_empty() { None } else { Some((re.clone(), compile(&re)?)) };
            if next.as_ref().map(|(s, _)| s) != m.regex.as_ref().map(|(s, _)| s) {
                changed = true;
                if let Some((text, _)) = &next
                    && !self.regexes.contains(text)
                {
                    self.regexes_new.insert(text.clone());
                }
            }
            m.regex = next;
        }
        if let Some(a) = req.assignor {
            changed |= m.assignor.as_deref() != Some(a.as_str());
            m.assignor = Some(a);
        }
        changed |= self.refresh(topics);
        if changed {
            self.bump();
        }
        let before = self.members[&id].assigned.clone();
        self.reconcile(&id, req.owned.as_deref(), now);
        let m = &self.members[&id];
        let send = req.epoch == 0 || full || m.assigned != before;
        Ok(ConsumerAnswer {
            member: id,
            epoch: m.epoch,
            assignment: send.then(|| m.assigned.iter().cloned().collect()),
        })
    }

    /// A join (epoch 0): a new member, a known one starting over (it owns nothing now), or
    /// a static member coming back under its instance id. Returns whether membership
    /// changed in a way that needs a new target.
    fn join(&mut self, req: &ConsumerHeartbeat, now: Instant) -> Result<bool, GroupError> {
        let id = &req.member;
        if let Some(instance) = &req.instance {
            let holder = self.members.iter().find(|(mid, m)| m.instance.as_ref() == Some(instance) && *mid != id);
            if let Some((old, m)) = holder {
                if m.epoch != STATIC_LEAVE_EPOCH {
                    return Err(GroupError::UnreleasedInstance(instance.clone()));
                }
                // The new member takes the old one's place: its epoch and partitions.
                let old = old.clone();
                let mut m = self.members.remove(&old).expect("found");
                m.epoch = m.previous_epoch;
                m.last_seen = now;
                if let Some(t) = self.target.remove(&old) {
                    self.target.insert(id.clone(), t);
                }
                self.members.insert(id.clone(), m);
                return Ok(false);
            }
        }
        if let Some(m) = self.members.get_mut(id) {
            // Starting over: it has let everything go.
            m.assigned.clear();
            m.revoking.clear();
            m.step = Step::Stable;
            m.previous_epoch = m.epoch;
            m.epoch = 0;
            m.revoke_by = None;
            return Ok(false);
        }
        self.members.insert(
            id.clone(),
            Member {
                epoch: 0,
                previous_epoch: -1,
                step: Step::Stable,
                assigned: BTreeSet::new(),
                revoking: BTreeSet::new(),
                topics: Vec::new(),
                regex: None,
                resolved: Vec::new(),
                assignor: None,
                instance: req.instance.clone(),
                rack: None,
                client_id: String::new(),
                client_host: String::new(),
                rebalance_timeout: Duration::ZERO,
                session_timeout: req.session_timeout,
                last_seen: now,
                revoke_by: None,
            },
        );
        Ok(true)
    }

    fn leave(&mut self, id: &MemberId, epoch: i32, instance: Option<&str>) -> Result<ConsumerAnswer, GroupError> {
        let m = self.members.get_mut(id).ok_or_else(|| GroupError::UnknownMember(id.to_string()))?;
        if instance.is_some() && m.instance.as_deref() != instance {
            return Err(GroupError::FencedInstance(instance.unwrap_or_default().to_string()));
        }
        if epoch == STATIC_LEAVE_EPOCH {
            // Kept, partitions and all, until its session times out or its instance id
            // joins again.
            if m.epoch != STATIC_LEAVE_EPOCH {
                m.previous_epoch = m.epoch;
            }
            m.epoch = STATIC_LEAVE_EPOCH;
        } else {
            self.remove(id);
        }
        Ok(ConsumerAnswer { member: id.clone(), epoch, assignment: None })
    }

    fn remove(&mut self, id: &MemberId) {
        self.members.remove(id);
        self.target.remove(id);
        self.bump();
    }

    /// Fences members whose session, or time to revoke, is up.
    pub(super) fn expire(&mut self, now: Instant) -> Vec<MemberId> {
        let gone: Vec<MemberId> = self
            .members
            .iter()
            .filter(|(_, m)| {
                now.saturating_duration_since(m.last_seen) > m.session_timeout || m.revoke_by.is_some_and(|t| now > t)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            self.remove(id);
        }
        gone
    }

    /// Resolves every member's subscription against the topics; returns whether what the
    /// group subscribes to, or its partition counts, changed.
    fn refresh(&mut self, topics: &BTreeMap<String, u32>) -> bool {
        let mut changed = false;
        // Regexes no member uses any more are dropped.
        let used: BTreeSet<&String> = self.members.values().filter_map(|m| m.regex.as_ref().map(|(t, _)| t)).collect();
        self.regexes.retain(|r| used.contains(r));
        for m in self.members.values_mut() {
            let r = m.resolve(topics, &self.regexes);
            if r != m.resolved {
                m.resolved = r;
                changed = true;
            }
        }
        let partitions: BTreeMap<String, u32> =
            self.members.values().flat_map(|m| m.resolved.iter()).map(|t| (t.clone(), topics[t])).collect();
        if partitions != self.partitions {
            self.partitions = partitions;
            changed = true;
        }
        changed
    }

    /// A new group epoch, and its target assignment at once.
    fn bump(&mut self) {
        self.epoch += 1;
        self.assignor = self.preferred_assignor();
        let engine = engine_assignor(&self.assignor).and_then(by_name).expect("a known assignor");
        let subscriptions: Vec<Subscription> = self
            .members
            .iter()
            .map(|(id, m)| {
                let owned = self.target.get(id).into_iter().flatten().cloned();
                Subscription::new(id.clone(), m.resolved.clone()).with_owned(owned)
            })
            .collect();
        let inputs: Vec<super::uniform::Input<'_>> = self
            .members
            .iter()
            .map(|(id, m)| (id, m.resolved.as_slice(), self.target.get(id).into_iter().flatten().cloned().collect()))
            .collect();
        let uniform =
            (self.assignor == DEFAULT_ASSIGNOR).then(|| super::uniform::assign(&self.partitions, &inputs)).flatten();
        let assignment = uniform.unwrap_or_else(|| engine.assign(&self.partitions, &subscriptions));
        self.target = assignment.into_iter().map(|(m, tps)| (m, tps.into_iter().collect())).collect();
        self.assignment_epoch = self.epoch;
    }

    /// The assignor most members prefer (ties: by name), or the default.
    fn preferred_assignor(&self) -> String {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for a in self.members.values().filter_map(|m| m.assignor.as_deref()) {
            *votes.entry(a).or_default() += 1;
        }
        let best = votes.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)));
        best.map_or(DEFAULT_ASSIGNOR, |(a, _)| a).to_string()
    }

    /// Whether a member other than `id` holds `tp` (assigned, or still revoking it).
    fn held_by_other(&self, id: &MemberId, tp: &TopicPartition) -> bool {
        self.members.iter().any(|(o, m)| o != id && (m.assigned.contains(tp) || m.revoking.contains(tp)))
    }

    /// Moves a member on towards its target (Kafka's `CurrentAssignmentBuilder`), given
    /// what its heartbeat says it owns.
    fn reconcile(&mut self, id: &MemberId, owned: Option<&[TopicPartition]>, now: Instant) {
        let m = &self.members[id];
        let move_on = match m.step {
            Step::Revoking => owned.is_some_and(|o| o.iter().all(|tp| !m.revoking.contains(tp))),
            Step::Unreleased => true,
            Step::Stable => m.epoch != self.assignment_epoch,
        };
        if !move_on {
            return;
        }
        let target = self.target.get(id).cloned().unwrap_or_default();
        let m = &self.members[id];
        let keep: BTreeSet<TopicPartition> = m.assigned.intersection(&target).cloned().collect();
        let revoke: BTreeSet<TopicPartition> = m.assigned.difference(&target).cloned().collect();
        let wanted: Vec<TopicPartition> = target.difference(&m.assigned).cloned().collect();
        let (free, unreleased): (Vec<_>, Vec<_>) = wanted.into_iter().partition(|tp| !self.held_by_other(id, tp));
        let epoch = self.assignment_epoch;
        let m = self.members.get_mut(id).expect("present");
        m.revoking.clear();
        if !revoke.is_empty() {
            m.assigned = keep;
            m.revoking = revoke;
            m.step = Step::Revoking;
            m.revoke_by = Some(now + m.rebalance_timeout);
            return;
        }
        m.revoke_by = None;
        if m.epoch != epoch {
            m.previous_epoch = m.epoch;
            m.epoch = epoch;
        }
        m.assigned = keep;
        m.assigned.extend(free);
        m.step = if unreleased.is_empty() { Step::Stable } else { Step::Unreleased };
    }

    pub(super) fn describe(&self) -> ConsumerGroupDescription {
        ConsumerGroupDescription {
            state: self.state(),
            epoch: self.epoch,
            assignment_epoch: self.assignment_epoch,
            assignor: if self.assignor.is_empty() { DEFAULT_ASSIGNOR.to_string() } else { self.assignor.clone() },
            members: self
                .members
                .iter()
                .map(|(id, m)| ConsumerMemberDescription {
                    member: id.clone(),
                    instance: m.instance.clone(),
                    rack: m.rack.clone(),
                    epoch: m.epoch,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    topics: m.topics.clone(),
                    regex: m.regex.as_ref().map(|(s, _)| s.clone()),
                    assignment: m.assigned.iter().cloned().collect(),
                    target: self.target.get(id).into_iter().flatten().cloned().collect(),
                })
                .collect(),
        }
    }
}
