//! A consumer that is a member of a consumer group: the coordinator assigns it
//! partitions, it follows rebalances (with callbacks), starts each new partition at the
//! group's committed offset (or per its reset policy), and commits its positions.
//!
//! Heartbeats ride on `poll`: call it at least every `heartbeat_interval`, and never let
//! `session_timeout` pass between calls, or the coordinator evicts the member and it must
//! rejoin (as with Kafka's `max.poll.interval.ms`).
//!
//! A partition moving here from another member arrives only once that member has let it
//! go (its own heartbeat after the rebalance, or its leaving), so a new member may start
//! with part of its share and get the rest from later heartbeats.

use std::time::{Duration, Instant};

use sluice_io::{Offset, PartitionId};

use crate::client::consumer::{Consumer, Polled, SeekTo};
use crate::engine::EngineHandle;
use crate::error::{EngineError, Result};
use crate::group::assignor::{MemberId, TopicPartition};
use crate::group::coordinator::JoinRequest;

/// Where a partition with no committed offset starts (Kafka's `auto.offset.reset`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OffsetReset {
    /// The first offset held.
    Earliest,
    /// The end: only new records.
    Latest,
}

/// Told about rebalances, before and after the assignment changes.
pub trait RebalanceListener: Send {
    /// Partitions taken away (commit their progress here if committing manually).
    fn on_revoked(&mut self, partitions: &[TopicPartition]);
    /// Partitions given.
    fn on_assigned(&mut self, partitions: &[TopicPartition]);
}

/// How a group member behaves.
#[derive(Clone, Debug)]
pub struct GroupOptions {
    /// `range`, `roundrobin` or `sticky`.
    pub assignor: String,
    /// Eviction after this long without a heartbeat.
    pub session_timeout: Duration,
    /// How often `poll` sends a heartbeat.
    pub heartbeat_interval: Duration,
    /// Where partitions without a committed offset start.
    pub reset: OffsetReset,
    /// Bytes read per partition per poll.
    pub max_bytes: usize,
}

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions {
            assignor: "range".into(),
            session_timeout: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(1),
            reset: OffsetReset::Latest,
            max_bytes: 1 << 20,
        }
    }
}

/// A member of a consumer group.
pub struct GroupConsumer {
    engine: EngineHandle,
    group: String,
    topics: Vec<String>,
    options: GroupOptions,
    member: MemberId,
    generation: u32,
    assignment: Vec<TopicPartition>,
    consumer: Consumer,
    last_heartbeat: Instant,
    listener: Option<Box<dyn RebalanceListener>>,
}

impl std::fmt::Debug for GroupConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupConsumer")
            .field("group", &self.group)
            .field("member", &self.member)
            .field("generation", &self.generation)
            .field("assignment", &self.assignment)
            .finish()
    }
}

impl GroupConsumer {
    /// Joins `group` subscribed to `topics`.
    pub async fn join(
        engine: EngineHandle,
        group: &str,
        topics: &[&str],
        options: GroupOptions,
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> Result<GroupConsumer> {
        let topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
        let req = JoinRequest {
            member: None,
            topics: topics.clone(),
            session_timeout: options.session_timeout,
            assignor: options.assignor.clone(),
        };
        let joined = engine.join_group(group, req).await?;
        let state = match engine.sync_group(group, &joined.member, joined.generation).await {
            Ok(state) => state,
            // Another member joined in between: take the newer generation's assignment.
            Err(EngineError::StaleGeneration { .. }) => engine.heartbeat(group, &joined.member, &topics).await?,
            Err(e) => return Err(e),
        };
        let consumer = Consumer::new(engine.clone(), options.max_bytes);
        let mut me = GroupConsumer {
            engine,
            group: group.to_string(),
            topics,
            options,
            member: state.member.clone(),
            generation: 0,
            assignment: Vec::new(),
            consumer,
            last_heartbeat: Instant::now(),
            listener,
        };
        me.adopt(state.generation, state.assignment).await?;
        Ok(me)
    }

    /// The member id the coordinator issued.
    #[must_use]
    pub fn member(&self) -> &MemberId {
        &self.member
    }

    /// The generation this member's assignment belongs to.
    #[must_use]
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The partitions this member owns.
    #[must_use]
    pub fn assignment(&self) -> &[TopicPartition] {
        &self.assignment
    }

    /// The position in each owned partition.
    #[must_use]
    pub fn positions(&self) -> Vec<(String, PartitionId, Offset)> {
        self.consumer.positions().iter().map(|((t, p), o)| (t.clone(), *p, *o)).collect()
    }

    /// Sends a heartbeat now and adopts a new assignment if the group rebalanced or other
    /// members let go of partitions this one is to own. If the member was evicted, it
    /// rejoins as a new member.
    pub async fn heartbeat(&mut self) -> Result<()> {
        self.last_heartbeat = Instant::now();
        let state = match self.engine.heartbeat(&self.group, &self.member, &self.topics).await {
            Ok(s) => s,
            Err(EngineError::UnknownMember { .. } | EngineError::UnknownGroup(_)) => {
                let req = JoinRequest {
                    member: None,
                    topics: self.topics.clone(),
                    session_timeout: self.options.session_timeout,
                    assignor: self.options.assignor.clone(),
                };
                let s = self.engine.join_group(&self.group, req).await?;
                self.member = s.member.clone();
                s
            }
            Err(e) => return Err(e),
        };
        // A new generation, or within one the partitions another member has since let go.
        if state.generation != self.generation || state.assignment != self.assignment {
            self.adopt(state.generation, state.assignment).await?;
        }
        Ok(())
    }

    /// Records from the owned partitions, waiting up to `max_wait` (in slices no longer
    /// than the heartbeat interval, heartbeating between them). A member that owns
    /// nothing gets an empty answer at once, after its heartbeat.
    pub async fn poll(&mut self, max_wait: Duration) -> Result<Vec<Polled>> {
        let deadline = Instant::now() + max_wait;
        loop {
            if self.last_heartbeat.elapsed() >= self.options.heartbeat_interval {
                self.heartbeat().await?;
            }
            if self.assignment.is_empty() {
                return Ok(Vec::new());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let polled = self.consumer.poll(left.min(self.options.heartbeat_interval)).await?;
            if !polled.is_empty() || left.is_zero() {
                return Ok(polled);
            }
        }
    }

    /// Commits the current position of every owned partition.
    pub async fn commit(&mut self) -> Result<()> {
        let offsets = self.positions();
        self.commit_offsets(&offsets).await
    }

    /// Commits the given offsets (the next record to read in each partition), e.g. after
    /// processing only part of a poll.
    pub async fn commit_offsets(&mut self, offsets: &[(String, PartitionId, Offset)]) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        self.engine.commit_offsets(&self.group, Some((&self.member, self.generation)), offsets).await
    }

    /// Leaves the group (its partitions go to the other members at once).
    pub async fn leave(mut self) -> Result<()> {
        let revoked = std::mem::take(&mut self.assignment);
        if let Some(l) = self.listener.as_mut() {
            l.on_revoked(&revoked);
        }
        self.engine.leave_group(&self.group, &self.member).await
    }

    /// Switches to a new generation's assignment: revoked partitions first, then the new
    /// ones, each starting at the group's committed offset or the reset policy.
    async fn adopt(&mut self, generation: u32, assignment: Vec<TopicPartition>) -> Result<()> {
        let revoked: Vec<TopicPartition> =
            self.assignment.iter().filter(|tp| !assignment.contains(tp)).cloned().collect();
        let added: Vec<TopicPartition> =
            assignment.iter().filter(|tp| !self.assignment.contains(tp)).cloned().collect();
        if let Some(l) = self.listener.as_mut()
            && !revoked.is_empty()
        {
            l.on_revoked(&revoked);
        }
        let committed = self.engine.committed_offsets(&self.group).await?;
        let kept: Vec<(String, PartitionId, Offset)> = self
            .positions()
            .into_iter()
            .filter(|(t, p, _)| assignment.iter().any(|tp| &tp.topic == t && tp.partition == *p))
            .collect();
        let parts: Vec<(String, PartitionId)> = assignment.iter().map(|tp| (tp.topic.clone(), tp.partition)).collect();
        let reset = match self.options.reset {
            OffsetReset::Earliest => SeekTo::Earliest,
            OffsetReset::Latest => SeekTo::Latest,
        };
        self.consumer.assign(&parts, reset).await?;
        for (t, p, at) in kept {
            self.consumer.seek(&t, p, SeekTo::Offset(at)).await?;
        }
        for tp in &added {
            if let Some(&at) = committed.get(&(tp.topic.clone(), tp.partition)) {
                let (start, end) = self.engine.offsets(&tp.topic, tp.partition).await?;
                // A committed offset the log no longer holds: fall back to the reset policy.
                if at >= start && at <= end {
                    self.consumer.seek(&tp.topic, tp.partition, SeekTo::Offset(at)).await?;
                }
            }
        }
        self.generation = generation;
        self.assignment = assignment;
        if let Some(l) = self.listener.as_mut()
            && !added.is_empty()
        {
            l.on_assigned(&added);
        }
        Ok(())
    }
}
