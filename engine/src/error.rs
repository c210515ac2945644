//! The engine's typed operating errors: every bad request gets one, with context.

use std::path::PathBuf;

use sluice_io::{CheckpointId, LogError, Offset, PartitionId};

/// What can go wrong in the engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// No topic of that name.
    #[error("unknown topic {0:?}")]
    UnknownTopic(String),
    /// A topic of that name exists already.
    #[error("topic {0:?} already exists")]
    TopicExists(String),
    /// The partition does not exist in the topic.
    #[error("partition {partition} out of range: topic {topic:?} has {partitions} partitions")]
    PartitionOutOfRange {
        /// The topic.
        topic: String,
        /// The partition asked for.
        partition: PartitionId,
        /// How many the topic has.
        partitions: u32,
    },
    /// A record larger than the topic accepts.
    #[error("record of {bytes} bytes exceeds topic {topic:?}'s limit of {limit} bytes")]
    RecordTooLarge {
        /// The topic.
        topic: String,
        /// The record's size (key, value and headers).
        bytes: usize,
        /// The topic's `max_record_bytes`.
        limit: usize,
    },
    /// Records without a key appended to a compacted topic, refused whole (Kafka's log
    /// layer answers INVALID_RECORD): compaction keeps the latest record per key, so a
    /// record without one could never be kept or replaced.
    #[error(
        "compacted topic {topic:?} cannot accept records without a key: {} of the append's records have none (the first at index {})",
        records.len(),
        records.first().copied().unwrap_or_default()
    )]
    KeyRequired {
        /// The topic.
        topic: String,
        /// The positions, in the append, of the records without a key (at least one).
        records: Vec<usize>,
    },
    /// A name from outside broke Kafka's rules.
    #[error(transparent)]
    InvalidName(#[from] NameError),
    /// A configuration value is not usable.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A partition count that cannot be: out of range, or not more than a topic has
    /// (partitions are never removed). The text is Kafka's.
    #[error("{0}")]
    InvalidPartitions(String),
    /// A pipeline shard failed (a user function panicked, or the graph was built
    /// differently on different shards).
    #[error("pipeline failed: {0}")]
    Pipeline(String),
    /// A keyed process function's state has a time to live that cannot apply; the
    /// pipeline does not start.
    #[error("state TTL: {0}")]
    StateTtl(#[from] TtlError),
    /// A pipeline's checkpoints could not be opened or restored; it does not start.
    #[error("checkpoints: {0}")]
    Checkpoint(#[from] CheckpointError),
    /// Another engine holds the data directory.
    #[error("data directory {} is in use by another sluice process (lock file {})", dir.display(), lock.display())]
    Locked {
        /// The data directory.
        dir: PathBuf,
        /// Its lock file.
        lock: PathBuf,
    },
    /// An offset outside the partition's range.
    #[error("offset {requested} out of range for {topic}-{partition}: the log holds [{start}, {end})")]
    OffsetOutOfRange {
        /// The topic.
        topic: String,
        /// The partition.
        partition: PartitionId,
        /// The offset asked for.
        requested: Offset,
        /// The first offset held.
        start: Offset,
        /// The next offset to be written.
        end: Offset,
    },
    /// The partition log failed.
    #[error("{topic}-{partition}: {source}")]
    Log {
        /// The topic.
        topic: String,
        /// The partition.
        partition: PartitionId,
        /// What the log said.
        #[source]
        source: LogError,
    },
    /// Metadata or lock file I/O failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// An idempotent producer's batch is out of sequence or from a fenced epoch.
    #[error("{topic}-{partition}: {source}")]
    Sequence {
        /// The topic.
        topic: String,
        /// The partition.
        partition: PartitionId,
        /// What the sequence check said.
        #[source]
        source: crate::producer_state::SequenceError,
    },
    /// No consumer group of that name.
    #[error("unknown group {0:?}")]
    UnknownGroup(String),
    /// The member is not (or no longer) in the group, e.g. evicted after its session
    /// timed out: it must rejoin.
    #[error("member {member:?} is not in group {group:?}; it must rejoin")]
    UnknownMember {
        /// The group.
        group: String,
        /// The member.
        member: String,
    },
    /// A request from an older generation of the group, e.g. a commit after a rebalance.
    #[error("member {member:?} of group {group:?} is at generation {got}, the group at {current}")]
    StaleGeneration {
        /// The group.
        group: String,
        /// The member.
        member: String,
        /// The generation the request carried.
        got: u32,
        /// The group's generation.
        current: u32,
    },
    /// A consumer group refused a request, for a reason Kafka's group protocol names.
    #[error("group {group:?}: {source}")]
    Group {
        /// The group.
        group: String,
        /// Why.
        #[source]
        source: GroupError,
    },
    /// The engine is shutting down or a shard has stopped.
    #[error("the engine is shut down")]
    ShutDown,
}

impl EngineError {
    /// Wraps a log error with its partition, lifting offset-out-of-range to its own variant.
    pub(crate) fn log(topic: &str, partition: PartitionId, source: LogError) -> EngineError {
        match source {
            LogError::OffsetOutOfRange { requested, start, end } => {
                EngineError::OffsetOutOfRange { topic: topic.to_string(), partition, requested, start, end }
            }
            source => EngineError::Log { topic: topic.to_string(), partition, source },
        }
    }
}

/// Why a consumer group refused a request: the cases of Kafka's group protocol, each of
/// which a Kafka client answers in its own way (rejoin, give up, retry with the id given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// The member is not in the group (it left, was removed, or never joined): rejoin.
    #[error("member {0:?} is not in the group")]
    UnknownMember(String),
    /// The request names another generation than the group's.
    #[error("generation {got}, the group is at {current}")]
    IllegalGeneration {
        /// The request's.
        got: i32,
        /// The group's.
        current: i32,
    },
    /// The group is rebalancing: rejoin.
    #[error("the group is rebalancing")]
    RebalanceInProgress,
    /// The member's protocol type or protocols do not fit the group's, or the group is
    /// run by the other kind of member (engine consumers or Kafka clients).
    #[error("inconsistent group protocol: {0}")]
    InconsistentProtocol(String),
    /// Another member now holds this static member's instance id.
    #[error("instance id {0:?} is held by a newer member")]
    FencedInstance(String),
    /// A new member must join again with the member id given (Kafka's KIP-394).
    #[error("join again as member {0:?}")]
    MemberIdRequired(String),
    /// The group has as many members as it may.
    #[error("the group has {0} members, its limit")]
    MaxSize(usize),
    /// The group still has members.
    #[error("the group has members")]
    NonEmpty,
    /// The group has no members and no committed offsets.
    #[error("no such group")]
    NotFound,
    /// The group's members are subscribed to the topic (its offsets cannot be deleted).
    #[error("the group is subscribed to topic {0:?}")]
    SubscribedToTopic(String),
    /// The group is of another kind than the request's (a classic group asked for by a
    /// KIP-848 request, say): Kafka's GROUP_ID_NOT_FOUND.
    #[error("{0}")]
    OtherKind(String),
    /// A KIP-848 member's epoch is ahead of, or behind, what the coordinator holds: the
    /// member must give up its partitions and join again.
    #[error("member epoch {got} is fenced, the member is at {current}")]
    FencedMemberEpoch {
        /// The request's.
        got: i32,
        /// The member's.
        current: i32,
    },
    /// A KIP-848 member's commit or offset fetch names an older epoch than its own.
    #[error("member epoch {got} is stale, the member is at {current}")]
    StaleMemberEpoch {
        /// The request's.
        got: i32,
        /// The member's.
        current: i32,
    },
    /// Another member still holds the static member's instance id.
    #[error("instance id {0:?} is still held by another member")]
    UnreleasedInstance(String),
    /// A server-side assignor this coordinator does not have.
    #[error("assignor {0:?} is not supported: use uniform or range")]
    UnsupportedAssignor(String),
    /// A subscription's regular expression does not compile.
    #[error("invalid regular expression {0}")]
    InvalidRegex(String),
    /// A request whose fields contradict each other or the protocol.
    #[error("{0}")]
    InvalidRequest(String),
}

/// The engine's result type.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// The longest name Kafka accepts.
pub const MAX_NAME_CHARS: usize = 249;

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// The name is empty.
    #[error("{kind} name is empty")]
    Empty {
        /// What was being named ("topic", "group", ...).
        kind: &'static str,
    },
    /// The name is longer than 249 characters.
    #[error("{kind} name is {len} characters long; the limit is {MAX_NAME_CHARS}")]
    TooLong {
        /// What was being named.
        kind: &'static str,
        /// Its length.
        len: usize,
    },
    /// The name has a character outside `[a-zA-Z0-9._-]`, or is `.` or `..`.
    #[error("{kind} name {name:?} is not valid: use only [a-zA-Z0-9._-], and not \".\" or \"..\"")]
    Invalid {
        /// What was being named.
        kind: &'static str,
        /// The name as given.
        name: String,
    },
}

/// Why checkpointed state could not be read back.
#[derive(Debug, thiserror::Error)]
#[error("checkpointed state: {0}")]
pub struct StateError(pub String);

/// Why a pipeline's checkpoints could not be opened or restored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The checkpoint directory's path could not be made absolute.
    #[error("resolving the checkpoint directory {}: {source}", dir.display())]
    Resolve {
        /// The directory as configured.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The checkpoint store could not be opened.
    #[error("opening the checkpoint store in {}: {source}", dir.display())]
    Store {
        /// The directory.
        dir: PathBuf,
        /// The store's error.
        source: sluice_io::LogError,
    },
    /// A checkpoint's manifest or part could not be read (missing, damaged, torn).
    #[error("checkpoint {id}: {source}")]
    Read {
        /// The checkpoint.
        id: CheckpointId,
        /// The store's error.
        source: sluice_io::LogError,
    },
    /// A part was read whole but its contents do not decode.
    #[error("checkpoint {id}, part {part}: {source}")]
    Decode {
        /// The checkpoint.
        id: CheckpointId,
        /// The part.
        part: String,
        /// Why.
        source: StateError,
    },
    /// An incremental part's base checkpoint lacks the part it builds on.
    #[error("checkpoint {id} has no part {part} for checkpoint {of} to build on")]
    MissingBase {
        /// The base checkpoint.
        id: CheckpointId,
        /// The part.
        part: String,
        /// The checkpoint whose part builds on it.
        of: CheckpointId,
    },
    /// Checkpoints exist and none can be restored: starting over would replay from the
    /// beginning and break exactly-once output, so the pipeline refuses to start.
    #[error("no completed checkpoint can be restored in {}: {}", dir.display(), failures.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    NoneReadable {
        /// The directory.
        dir: PathBuf,
        /// Why each completed checkpoint failed, newest first.
        failures: Vec<CheckpointError>,
    },
    /// The checkpoint was taken with another number of key groups.
    #[error(
        "checkpoint {id} was taken with {had} key groups; the pipeline has {has} (key groups are fixed for the life of a pipeline's state)"
    )]
    KeyGroups {
        /// The checkpoint.
        id: CheckpointId,
        /// Its key groups.
        had: u32,
        /// The pipeline's.
        has: u32,
    },
    /// The job has an operator or source whose state cannot be checkpointed (a
    /// `ChannelSource`: what it read is gone from its channels, so no checkpoint or
    /// savepoint could replay it), so it cannot run with checkpoints nor restore.
    #[error(
        "checkpoints cannot include {what}: run it without checkpoints, or use a source that resumes from a position (a topic, a generator)"
    )]
    NotCheckpointable {
        /// What cannot be checkpointed.
        what: String,
    },
    /// Two operators of one job were given the same uid.
    #[error("operator uid `{uid}` is given to two operators of the job: uids must be unique")]
    DuplicateUid {
        /// The uid.
        uid: String,
    },
    /// The checkpoint holds state of an operator the job does not have (removed, or its
    /// uid changed), and the job does not allow dropping it.
    #[error(
        "checkpoint {id} holds state of operator {operator}, which this job does not have: give the operator that should take it that uid, or allow non-restored state (CheckpointConfig::allow_non_restored_state) to drop it"
    )]
    UnknownOperator {
        /// The checkpoint.
        id: CheckpointId,
        /// The operator: `uid "name"`, or `#n` (the n-th stateful operator) when it had none.
        operator: String,
    },
    /// An operator's stored state has another key type, state type or operator kind than
    /// the job's operator of that uid.
    #[error(
        "checkpoint {id}: operator {operator} changed its {what} from `{had}` to `{has}`: its state cannot be restored"
    )]
    IncompatibleState {
        /// The checkpoint.
        id: CheckpointId,
        /// The operator (as in [`CheckpointError::UnknownOperator`]).
        operator: String,
        /// `key type`, `state type` or `operator kind`.
        what: &'static str,
        /// What the checkpoint holds.
        had: String,
        /// What the job's operator has.
        has: String,
    },
    /// An operator's state was found but does not decode.
    #[error("checkpoint {id}: restoring operator {operator}: {source}")]
    RestoreState {
        /// The checkpoint.
        id: CheckpointId,
        /// The operator.
        operator: String,
        /// Why.
        source: StateError,
    },
    /// A savepoint could not be taken or read.
    #[error("savepoint {}: {reason}", dir.display())]
    Savepoint {
        /// The savepoint's directory.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
}

/// A TTL setting that cannot apply; the pipeline refuses to start with it
/// ([`EngineError::StateTtl`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TtlError {
    /// A TTL of less than a millisecond, zero included.
    #[error("state TTL of {ttl:?} is below the clocks' 1 ms resolution: every value would be expired when written")]
    BelowResolution {
        /// The TTL given.
        ttl: std::time::Duration,
    },
    /// A TTL longer than the clocks can count (`i64` milliseconds).
    #[error("state TTL of {ttl:?} is longer than the clocks' range of i64 milliseconds")]
    TooLong {
        /// The TTL given.
        ttl: std::time::Duration,
    },
    /// A sweep of zero keys.
    #[error("state TTL with sweep_keys 0: keys no record touches again would never be freed")]
    NoSweep,
}
