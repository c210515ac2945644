//! Consumer groups through the handle: membership (join, sync, heartbeat, leave), each
//! request sent to the shard coordinating the group (the owner of its partition of the
//! offsets topic), and committed offsets, lag and resets.

use std::collections::BTreeMap;

use sluice_io::{Offset, PartitionId};

use crate::error::{EngineError, Result};
use crate::group::assignor::MemberId;
use crate::group::coordinator::{GroupDescription, JoinRequest, MemberState};
use crate::group::offsets::{self, Committed};
use crate::shard::Request;
use crate::topic::SeekTo;
use crate::topic::names::validate_name;
use crate::topic::partitioner::partition_for_key;

use super::EngineHandle;

impl EngineHandle {
    /// The partition of the offsets topic that holds a group's offsets, and the shard
    /// that owns it and so coordinates the group.
    fn coordinator_of(&self, group: &str) -> Result<(PartitionId, u32)> {
        validate_name("group", group)?;
        let t = self.topic(offsets::TOPIC)?;
        let p = partition_for_key(group.as_bytes(), t.partitions());
        Ok((p, t.shards[p.index()]))
    }

    /// The partition counts of `topics`, which must all exist.
    fn partition_counts(&self, topics: &[String]) -> Result<BTreeMap<String, u32>> {
        let meta = self.inner.meta.read().unwrap_or_else(|e| e.into_inner());
        topics
            .iter()
            .map(|t| {
                let topic = meta.topics.get(t).ok_or_else(|| EngineError::UnknownTopic(t.clone()))?;
                Ok((t.clone(), topic.partitions()))
            })
            .collect()
    }

    /// A member joins a consumer group (a new generation is assigned).
    pub async fn join_group(&self, group: &str, req: JoinRequest) -> Result<MemberState> {
        let (_, shard) = self.coordinator_of(group)?;
        let partitions = self.partition_counts(&req.topics)?;
        let group = group.to_string();
        self.call(shard, |reply| Request::GroupJoin { group, req, partitions, reply }).await
    }

    /// A member fetches its assignment for the generation its join or heartbeat reported
    /// (Kafka's SyncGroup; here the coordinator computed it). A generation the group has
    /// since left is refused with [`EngineError::StaleGeneration`].
    pub async fn sync_group(&self, group: &str, member: &MemberId, generation: u32) -> Result<MemberState> {
        let (_, shard) = self.coordinator_of(group)?;
        let (group, member) = (group.to_string(), member.clone());
        self.call(shard, |reply| Request::GroupSync { group, member, generation, reply }).await
    }

    /// A member's heartbeat: keeps it in the group and returns the current generation
    /// and its assignment.
    pub async fn heartbeat(&self, group: &str, member: &MemberId, topics: &[String]) -> Result<MemberState> {
        let (_, shard) = self.coordinator_of(group)?;
        let partitions = self.partition_counts(topics)?;
        let (group, member) = (group.to_string(), member.clone());
        self.call(shard, |reply| Request::GroupHeartbeat { group, member, partitions, reply }).await
    }

    /// A member leaves its group (the others rebalance at once).
    pub async fn leave_group(&self, group: &str, member: &MemberId) -> Result<()> {
        let (_, shard) = self.coordinator_of(group)?;
        let (group, member) = (group.to_string(), member.clone());
        self.call(shard, |reply| Request::GroupLeave { group, member, reply }).await
    }

    /// Commits offsets for a group: from a member in its current generation, or with
    /// `member = None` from outside the group while it has no members.
    pub async fn commit_offsets(
        &self,
        group: &str,
        member: Option<(&MemberId, u32)>,
        offsets: &[(String, PartitionId, Offset)],
    ) -> Result<()> {
        let (offsets_partition, shard) = self.coordinator_of(group)?;
        for (topic, p, _) in offsets {
            self.owner(topic, *p)?;
        }
        let group = group.to_string();
        let member = member.map(|(m, g)| (m.clone(), g));
        let offsets = offsets.to_vec();
        self.call(shard, |reply| Request::GroupCommit { group, member, offsets_partition, offsets, reply }).await
    }

    /// A group's committed offsets.
    pub async fn committed_offsets(&self, group: &str) -> Result<Committed> {
        let (_, shard) = self.coordinator_of(group)?;
        let group = group.to_string();
        self.call(shard, |reply| Request::GroupOffsets { group, reply }).await
    }

    /// A group's members, generation and assignment (`None` if it has never had members
    /// since the engine started).
    pub async fn describe_group(&self, group: &str) -> Result<Option<GroupDescription>> {
        let (_, shard) = self.coordinator_of(group)?;
        let group = group.to_string();
        self.call(shard, |reply| Request::GroupDescribe { group, reply }).await
    }

    /// Every group with members or committed offsets.
    pub async fn list_groups(&self) -> Result<Vec<String>> {
        let mut all = Vec::new();
        for shard in 0..self.inner.shards.len() as u32 {
            all.extend(self.call(shard, |reply| Request::GroupList { reply }).await?);
        }
        all.sort();
        all.dedup();
        Ok(all)
    }

    /// Each committed partition of a group with its committed offset, the partition's end
    /// offset, and the lag between them.
    pub async fn group_lag(&self, group: &str) -> Result<Vec<PartitionLag>> {
        let committed = self.committed_offsets(group).await?;
        let mut out = Vec::with_capacity(committed.len());
        for ((topic, partition), offset) in committed {
            let end = match self.offsets(&topic, partition).await {
                Ok((_, end)) => end,
                Err(EngineError::UnknownTopic(_) | EngineError::PartitionOutOfRange { .. }) => continue,
                Err(e) => return Err(e),
            };
            out.push(PartitionLag { topic, partition, committed: offset, end, lag: end.0.saturating_sub(offset.0) });
        }
        Ok(out)
    }

    /// Moves a group's committed offsets for every partition of `topic` (only while the
    /// group has no members, as Kafka requires). Returns the new offsets.
    pub async fn reset_offsets(
        &self,
        group: &str,
        topic: &str,
        to: SeekTo,
    ) -> Result<Vec<(String, PartitionId, Offset)>> {
        let partitions = self.topic(topic)?.partitions();
        let mut offsets = Vec::with_capacity(partitions as usize);
        for p in PartitionId::all(partitions) {
            let (start, end) = self.offsets(topic, p).await?;
            let at = match to {
                SeekTo::Earliest => start,
                SeekTo::Latest => end,
                SeekTo::Offset(o) => o.clamp(start, end),
                SeekTo::Timestamp(t) => self.offset_for_time(topic, p, t).await?.unwrap_or(end),
            };
            offsets.push((topic.to_string(), p, at));
        }
        self.commit_offsets(group, None, &offsets).await?;
        Ok(offsets)
    }
}

/// A group's position in one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionLag {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: PartitionId,
    /// The committed offset (the next record the group will read).
    pub committed: Offset,
    /// The partition's end offset.
    pub end: Offset,
    /// Records between them.
    pub lag: u64,
}
