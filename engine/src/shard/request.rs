//! What the engine handle asks of a shard: the [`Request`] protocol, its replies, and a
//! partition's batching settings. Requests cross threads through each shard's bounded
//! queue; replies come back on a channel per request.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use sluice_io::{AppendInfo, BatchMeta, CleanReport, LogConfig, Offset, OwnedBatches, PartitionId, Timestamp};

use crate::error::GroupError;
use crate::error::Result;
use crate::group::assignor::MemberId;
use crate::group::classic::{ClassicJoin, ClassicSync, JoinResult, Leaving, SyncResult};
use crate::group::consumer::{ConsumerAnswer, ConsumerHeartbeat};
use crate::group::coordinator::{CommitAuth, GroupOverview, GroupView, JoinRequest, MemberState};
use crate::group::offsets::{CommittedDetails, OffsetCommit};
use crate::record::{AppendRecords, OwnedRecord};
use crate::shard::CleanerStats;

/// A reply channel for one request.
pub(crate) type Reply<T> = async_channel::Sender<Result<T>>;

/// How a partition batches single-record sends.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Batching {
    pub(crate) linger: Duration,
    pub(crate) max_records: usize,
    pub(crate) max_bytes: usize,
}

/// What the handle asks of a shard.
pub(crate) enum Request {
    /// Open (creating if needed) a partition log.
    Open {
        topic: String,
        partition: PartitionId,
        dir: PathBuf,
        config: LogConfig,
        batching: Batching,
        reply: Reply<()>,
    },
    /// Use new settings for an open partition (`Log::reconfigure`, and its batching).
    Reconfigure { topic: String, partition: PartitionId, config: LogConfig, batching: Batching, reply: Reply<()> },
    /// Close a partition log and delete its directory.
    Delete { topic: String, partition: PartitionId, reply: Reply<()> },
    /// Append one record, batched with others per the partition's linger.
    Send { topic: String, partition: PartitionId, record: OwnedRecord, reply: Reply<Offset> },
    /// Append records as one batch, now.
    Append { topic: String, partition: PartitionId, records: AppendRecords, meta: BatchMeta, reply: Reply<AppendInfo> },
    /// Read batches from an offset, waiting up to `wait` for data at the end of the log.
    Fetch {
        topic: String,
        partition: PartitionId,
        offset: Offset,
        max_bytes: usize,
        wait: Duration,
        reply: Reply<OwnedBatches>,
    },
    /// The log start and end offsets.
    Offsets { topic: String, partition: PartitionId, reply: Reply<(Offset, Offset)> },
    /// Where a scan for transactions from an offset must begin (`Log::first_transactional_from`).
    FirstTransactional { topic: String, partition: PartitionId, from: Offset, reply: Reply<Option<Offset>> },
    /// Make everything appended so far durable (written and fdatasync'd), whatever the
    /// partition's fsync policy; answers the durable end.
    Sync { topic: String, partition: PartitionId, reply: Reply<Offset> },
    /// The first offset at or after a time.
    OffsetForTime { topic: String, partition: PartitionId, time: Timestamp, reply: Reply<Option<Offset>> },
    /// A member joins a group this shard coordinates.
    GroupJoin { group: String, req: JoinRequest, partitions: BTreeMap<String, u32>, reply: Reply<MemberState> },
    /// A member fetches its assignment for a generation.
    GroupSync { group: String, member: MemberId, generation: u32, reply: Reply<MemberState> },
    /// A member's heartbeat.
    GroupHeartbeat { group: String, member: MemberId, partitions: BTreeMap<String, u32>, reply: Reply<MemberState> },
    /// A member leaves.
    GroupLeave { group: String, member: MemberId, reply: Reply<()> },
    /// A Kafka client joins a classic group this shard coordinates (answered once the
    /// rebalance completes).
    ClassicJoin { group: String, req: ClassicJoin, reply: Reply<JoinResult> },
    /// A Kafka client's SyncGroup (answered once the leader's assignment is in).
    ClassicSync { group: String, req: ClassicSync, reply: Reply<SyncResult> },
    /// A Kafka client's heartbeat.
    ClassicHeartbeat { group: String, member: MemberId, instance: Option<String>, generation: i32, reply: Reply<()> },
    /// Kafka clients leave (each member's result).
    ClassicLeave { group: String, leaving: Vec<Leaving>, reply: Reply<Vec<Result<(), GroupError>>> },
    /// A Kafka client's KIP-848 ConsumerGroupHeartbeat, with the partition counts of
    /// every topic it may subscribe to.
    ConsumerHeartbeat {
        group: String,
        req: ConsumerHeartbeat,
        topics: BTreeMap<String, u32>,
        reply: Reply<ConsumerAnswer>,
    },
    /// Commit offsets to the group's partition of the offsets topic.
    GroupCommit {
        group: String,
        auth: CommitAuth,
        offsets_partition: PartitionId,
        offsets: Vec<OffsetCommit>,
        reply: Reply<()>,
    },
    /// Check that a commit would be accepted (TxnOffsetCommit).
    GroupCheckCommit { group: String, auth: CommitAuth, reply: Reply<()> },
    /// A group's committed offsets.
    GroupOffsets { group: String, reply: Reply<CommittedDetails> },
    /// A group's members (of either kind) and whether it has committed offsets.
    GroupView { group: String, reply: Reply<GroupView> },
    /// The groups this shard coordinates or holds offsets of.
    GroupList { reply: Reply<Vec<GroupOverview>> },
    /// Delete a group with no members and its committed offsets (Kafka's DeleteGroups).
    GroupDelete { group: String, offsets_partition: PartitionId, reply: Reply<()> },
    /// Delete a group's committed offsets of partitions it does not consume (Kafka's
    /// OffsetDelete); each partition's result.
    GroupDeleteOffsets {
        group: String,
        offsets_partition: PartitionId,
        partitions: Vec<(String, PartitionId)>,
        reply: Reply<Vec<Result<(), GroupError>>>,
    },
    /// Apply retention and compaction to a partition now ([`sluice_io::Log::clean`]), in
    /// the cleaner's task queue.
    Clean { topic: String, partition: PartitionId, reply: Reply<CleanReport> },
    /// Move a partition's start offset up to `before` (Kafka's DeleteRecords); answers the
    /// new start.
    DeleteRecords { topic: String, partition: PartitionId, before: Offset, reply: Reply<Offset> },
    /// What this shard's cleaner has done.
    CleanerStats { reply: Reply<CleanerStats> },
    /// Run host code on this shard's executor ([`EngineHandle::run_on`]).
    ///
    /// [`EngineHandle::run_on`]: crate::EngineHandle::run_on
    Run { task: LocalTask },
    /// The shard's metrics ([`crate::metrics::ShardSample`]), built on its thread.
    Metrics { reply: Reply<crate::metrics::ShardSample> },
    /// Flush and close every log, then stop.
    Shutdown { reply: Reply<()> },
}

/// A task sent to a shard: built on the shard's thread, then polled there.
pub(crate) type LocalTask = Box<dyn FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> + Send>;
