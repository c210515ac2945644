//! Consumer groups through the handle: membership (join, sync, heartbeat, leave), each
//! request sent to the shard coordinating the group (the owner of its partition of the
//! offsets topic), and committed offsets, lag and resets.

use std::collections::BTreeMap;

use sluice_io::{Offset, PartitionId};

use crate::error::{EngineError, GroupError, NameError, Result};
use crate::group::assignor::MemberId;
use crate::group::classic::{ClassicJoin, ClassicSync, JoinResult, Leaving, SyncResult};
use crate::group::consumer::{ConsumerAnswer, ConsumerHeartbeat};
use crate::group::coordinator::{CommitAuth, GroupDescription, GroupOverview, GroupView, JoinRequest, MemberState};
use crate::group::offsets::{self, Committed, CommittedDetails, CommittedOffset, OffsetCommit};
use crate::shard::Request;
use crate::topic::SeekTo;
use crate::topic::partitioner::partition_for_key;

use super::EngineHandle;

/// The longest group id, in bytes: a Kafka string's (its length is an i16). Group ids are
/// otherwise any string (Kafka's rule); they are only ever bytes in record keys of the
/// offsets topic, never part of a path.
pub const GROUP_ID_MAX_BYTES: usize = i16::MAX as usize;

/// Checks a group id: any string up to [`GROUP_ID_MAX_BYTES`], and not empty for the
/// requests of members (joins, heartbeats, leaves). Offsets, descriptions and deletions
/// take the empty id too, as Kafka does for older clients.
fn check_group_id(group: &str, member_request: bool) -> Result<()> {
    if member_request && group.is_empty() {
        return Err(NameError::Empty { kind: "group" }.into());
    }
    if group.len() > GROUP_ID_MAX_BYTES {
        return Err(EngineError::InvalidConfig(format!(
            "a group id of {} bytes; the limit is {GROUP_ID_MAX_BYTES}",
            group.len()
        )));
    }
    Ok(())
}

impl EngineHandle {
    /// The partition of the offsets topic that holds a group's offsets, and the shard
    /// that owns it and so coordinates the group.
    fn coordinator_of(&self, group: &str) -> Result<(PartitionId, u32)> {
        check_group_id(group, false)?;
        let t = self.topic(offsets::TOPIC)?;
        let p = partition_for_key(group.as_bytes(), t.partitions());
        Ok((p, t.shards[p.index()]))
    }

    /// The coordinator of a group a member asks to join, heartbeat in or leave.
    fn member_coordinator_of(&self, group: &str) -> Result<u32> {
        check_group_id(group, true)?;
        Ok(self.coordinator_of(group)?.1)
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
        let shard = self.member_coordinator_of(group)?;
        let partitions = self.partition_counts(&req.topics)?;
        let group = group.to_string();
        self.call(shard, |reply| Request::GroupJoin { group, req, partitions, reply }).await
    }

    /// A member fetches its assignment for the generation its join or heartbeat reported
    /// (Kafka's SyncGroup; here the coordinator computed it). A generation the group has
    /// since left is refused with [`EngineError::StaleGeneration`].
    pub async fn sync_group(&self, group: &str, member: &MemberId, generation: u32) -> Result<MemberState> {
        let shard = self.member_coordinator_of(group)?;
        let (group, member) = (group.to_string(), member.clone());
        self.call(shard, |reply| Request::GroupSync { group, member, generation, reply }).await
    }

    /// A member's heartbeat: keeps it in the group and returns the current generation
    /// and its assignment.
    pub async fn heartbeat(&self, group: &str, member: &MemberId, topics: &[String]) -> Result<MemberState> {
        let shard = self.member_coordinator_of(group)?;
        let partitions = self.partition_counts(topics)?;
        let (group, member) = (group.to_string(), member.clone());
        self.call(shard, |reply| Request::GroupHeartbeat { group, member, partitions, reply }).await
    }

    /// A member leaves its group (the others rebalance at once).
    pub async fn leave_group(&self, group: &str, member: &MemberId) -> Result<()> {
        let shard = self.member_coordinator_of(group)?;
        let (group, member) = (group.to_string(), member.clone());
        self.call(shard, |reply| Request::GroupLeave { group, member, reply }).await
    }

    /// A Kafka client's JoinGroup in Kafka's classic protocol
    /// ([`group::classic`](crate::group::classic)): answered once the group's rebalance
    /// completes. Refused if the engine's own consumers hold the group.
    pub async fn classic_join(&self, group: &str, req: ClassicJoin) -> Result<JoinResult> {
        let shard = self.member_coordinator_of(group)?;
        let group = group.to_string();
        self.call(shard, |reply| Request::ClassicJoin { group, req, reply }).await
    }

    /// A Kafka client's SyncGroup: answered once the leader's assignment is in.
    pub async fn classic_sync(&self, group: &str, req: ClassicSync) -> Result<SyncResult> {
        let shard = self.member_coordinator_of(group)?;
        let group = group.to_string();
        self.call(shard, |reply| Request::ClassicSync { group, req, reply }).await
    }

    /// A Kafka client's heartbeat.
    pub async fn classic_heartbeat(
        &self,
        group: &str,
        member: &MemberId,
        instance: Option<&str>,
        generation: i32,
    ) -> Result<()> {
        let shard = self.member_coordinator_of(group)?;
        let (group, member, instance) = (group.to_string(), member.clone(), instance.map(str::to_string));
        self.call(shard, |reply| Request::ClassicHeartbeat { group, member, instance, generation, reply }).await
    }

    /// A Kafka client's KIP-848 ConsumerGroupHeartbeat
    /// ([`group::consumer`](crate::group::consumer)), with every topic but the internal
    /// ones to resolve its subscription against.
    pub async fn consumer_heartbeat(&self, group: &str, req: ConsumerHeartbeat) -> Result<ConsumerAnswer> {
        let shard = self.member_coordinator_of(group)?;
        let topics: BTreeMap<String, u32> = {
            let meta = self.inner.meta.read().unwrap_or_else(|e| e.into_inner());
            meta.topics
                .iter()
                .filter(|(t, _)| !super::is_internal(t))
                .map(|(t, m)| (t.clone(), m.partitions()))
                .collect()
        };
        let group = group.to_string();
        self.call(shard, |reply| Request::ConsumerHeartbeat { group, req, topics, reply }).await
    }

    /// Kafka clients leave their group (LeaveGroup): each one's result.
    pub async fn classic_leave(&self, group: &str, leaving: Vec<Leaving>) -> Result<Vec<Result<(), GroupError>>> {
        let shard = self.member_coordinator_of(group)?;
        let group = group.to_string();
        self.call(shard, |reply| Request::ClassicLeave { group, leaving, reply }).await
    }

    /// Commits offsets for a group: from a member in its current generation, or with
    /// `member = None` from outside the group while it has no members.
    pub async fn commit_offsets(
        &self,
        group: &str,
        member: Option<(&MemberId, u32)>,
        offsets: &[(String, PartitionId, Offset)],
    ) -> Result<()> {
        let offsets = offsets.iter().map(|(t, p, o)| (t.clone(), *p, CommittedOffset::at(*o))).collect();
        self.commit_offsets_as(group, CommitAuth::of(member), offsets).await
    }

    /// Commits offsets, with their metadata and leader epochs, as `auth` may (see
    /// [`CommitAuth`]). Every partition must exist and every metadata string fit
    /// [`offsets::METADATA_MAX_BYTES`]; otherwise nothing is committed.
    pub async fn commit_offsets_as(&self, group: &str, auth: CommitAuth, offsets: Vec<OffsetCommit>) -> Result<()> {
        let (offsets_partition, shard) = self.coordinator_of(group)?;
        for (topic, p, c) in &offsets {
            self.owner(topic, *p)?;
            if c.metadata.len() > offsets::METADATA_MAX_BYTES {
                return Err(EngineError::InvalidConfig(format!(
                    "commit metadata of {} bytes for {topic}-{p}; the limit is {}",
                    c.metadata.len(),
                    offsets::METADATA_MAX_BYTES
                )));
            }
        }
        let group = group.to_string();
        self.call(shard, |reply| Request::GroupCommit { group, auth, offsets_partition, offsets, reply }).await
    }

    /// Checks that `auth` may commit offsets for `group` now, without committing (Kafka's
    /// TxnOffsetCommit checks the member when it takes a transaction's offsets).
    pub async fn check_commit(&self, group: &str, auth: CommitAuth) -> Result<()> {
        let (_, shard) = self.coordinator_of(group)?;
        let group = group.to_string();
        self.call(shard, |reply| Request::GroupCheckCommit { group, auth, reply }).await
    }

    /// A group's committed offsets.
    pub async fn committed_offsets(&self, group: &str) -> Result<Committed> {
        let details = self.committed_details(group).await?;
        Ok(details.into_iter().map(|(tp, c)| (tp, c.offset)).collect())
    }

    /// A group's committed offsets with the metadata and leader epoch of each commit.
    pub async fn committed_details(&self, group: &str) -> Result<CommittedDetails> {
        let (_, shard) = self.coordinator_of(group)?;
        let group = group.to_string();
        self.call(shard, |reply| Request::GroupOffsets { group, reply }).await
    }

    /// A group of the engine's own consumers: members, generation and assignment (`None`
    /// if it has had no members since the engine started).
    pub async fn describe_group(&self, group: &str) -> Result<Option<GroupDescription>> {
        Ok(self.group_view(group).await?.engine)
    }

    /// A group as the coordinator sees it: its engine consumers, its Kafka clients, and
    /// whether it has committed offsets.
    pub async fn group_view(&self, group: &str) -> Result<GroupView> {
        let (_, shard) = self.coordinator_of(group)?;
        let group = group.to_string();
        self.call(shard, |reply| Request::GroupView { group, reply }).await
    }

    /// Every group with members or committed offsets.
    pub async fn list_groups(&self) -> Result<Vec<String>> {
        Ok(self.group_overviews().await?.into_iter().map(|g| g.group).collect())
    }

    /// Every group with members or committed offsets, with its state and protocol type,
    /// sorted by name.
    pub async fn group_overviews(&self) -> Result<Vec<GroupOverview>> {
        let mut all = Vec::new();
        for shard in 0..self.inner.shards.len() as u32 {
            all.extend(self.call(shard, |reply| Request::GroupList { reply }).await?);
        }
        all.sort_by(|a, b| a.group.cmp(&b.group));
        Ok(all)
    }

    /// Deletes a group that has no members, with its committed offsets (Kafka's
    /// DeleteGroups): [`GroupError::NonEmpty`] while it has members,
    /// [`GroupError::NotFound`] if there is no such group.
    pub async fn delete_group(&self, group: &str) -> Result<()> {
        let (offsets_partition, shard) = self.coordinator_of(group)?;
        let group = group.to_string();
        self.call(shard, |reply| Request::GroupDelete { group, offsets_partition, reply }).await
    }

    /// Deletes a group's committed offsets of `partitions` (Kafka's OffsetDelete): each
    /// partition's result, [`GroupError::SubscribedToTopic`] for a topic the members
    /// consume.
    pub async fn delete_offsets(
        &self,
        group: &str,
        partitions: Vec<(String, PartitionId)>,
    ) -> Result<Vec<Result<(), GroupError>>> {
        let (offsets_partition, shard) = self.coordinator_of(group)?;
        let group = group.to_string();
        self.call(shard, |reply| Request::GroupDeleteOffsets { group, offsets_partition, partitions, reply }).await
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
