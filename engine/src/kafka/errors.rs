//! Engine errors as Kafka error codes.

use crate::error::{EngineError, GroupError};
use crate::producer_state::SequenceError;
use crate::topic::names::NameError;
use sluice_io::LogError;

/// The Kafka error codes the listener sends (Kafka's `Errors.java`).
pub mod code {
    /// No error.
    pub const NONE: i16 = 0;
    /// An unexpected server error.
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    /// The offset is outside the partition's range.
    pub const OFFSET_OUT_OF_RANGE: i16 = 1;
    /// A record batch failed its CRC or is malformed.
    pub const CORRUPT_MESSAGE: i16 = 2;
    /// No such topic or partition.
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    /// A batch larger than the log takes.
    pub const RECORD_LIST_TOO_LARGE: i16 = 18;
    /// acks is not 0, 1 or -1.
    pub const INVALID_REQUIRED_ACKS: i16 = 21;
    /// A record is larger than the topic accepts.
    pub const MESSAGE_TOO_LARGE: i16 = 10;
    /// Commit metadata longer than the broker keeps (4 KiB).
    pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
    /// The coordinator is not available (the engine is shutting down).
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    /// The topic name is not valid.
    pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
    /// A request from an older generation of the group.
    pub const ILLEGAL_GENERATION: i16 = 22;
    /// The group uses another protocol, or none the member offers is known.
    pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
    /// The group id is not valid.
    pub const INVALID_GROUP_ID: i16 = 24;
    /// The member is not in the group.
    pub const UNKNOWN_MEMBER_ID: i16 = 25;
    /// The session timeout is out of range.
    pub const INVALID_SESSION_TIMEOUT: i16 = 26;
    /// The group moved to a new generation: rejoin.
    pub const REBALANCE_IN_PROGRESS: i16 = 27;
    /// The version of the API is not supported.
    pub const UNSUPPORTED_VERSION: i16 = 35;
    /// The topic exists already.
    pub const TOPIC_ALREADY_EXISTS: i16 = 36;
    /// The partition count is not valid.
    pub const INVALID_PARTITIONS: i16 = 37;
    /// The replication factor is not valid (sluice keeps one copy).
    pub const INVALID_REPLICATION_FACTOR: i16 = 38;
    /// A manual replica assignment sluice cannot follow (a broker other than node 0, or
    /// more than one replica).
    pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
    /// A configuration value is not valid.
    pub const INVALID_CONFIG: i16 = 40;
    /// The request is not valid.
    pub const INVALID_REQUEST: i16 = 42;
    /// A batch's sequence number is out of order.
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
    /// The producer's epoch is older than its current one.
    pub const INVALID_PRODUCER_EPOCH: i16 = 47;
    /// The storage failed.
    pub const KAFKA_STORAGE_ERROR: i16 = 56;
    /// No state is held for the producer.
    pub const UNKNOWN_PRODUCER_ID: i16 = 59;
    /// The compression codec is not supported.
    pub const UNSUPPORTED_COMPRESSION_TYPE: i16 = 76;
    /// No topic has this id (it was deleted, or never existed).
    pub const UNKNOWN_TOPIC_ID: i16 = 100;
    /// The group still has members.
    pub const NON_EMPTY_GROUP: i16 = 68;
    /// The group has no committed offsets or members.
    pub const GROUP_ID_NOT_FOUND: i16 = 69;
    /// A new member must join again with the member id given (JoinGroup v4+).
    pub const MEMBER_ID_REQUIRED: i16 = 79;
    /// The group has as many members as it may.
    pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
    /// A newer member holds the static member's instance id.
    pub const FENCED_INSTANCE_ID: i16 = 82;
    /// The group's members consume the topic whose offsets were to be deleted.
    pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
    /// The transactional id is not allowed (refused by this listener).
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
    /// The client asked for a SASL mechanism the listener does not offer.
    pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
    /// A SASL request out of order (SaslAuthenticate before SaslHandshake, a handshake in
    /// the middle of an exchange, or on a listener without SASL).
    pub const ILLEGAL_SASL_STATE: i16 = 34;
    /// The SASL login failed: unknown user, wrong password or a bad exchange.
    pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
    /// The request does not fit the transaction's state (no transaction, or a partition
    /// not added to it).
    pub const INVALID_TXN_STATE: i16 = 48;
    /// The producer id does not belong to the transactional id.
    pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
    /// The transaction timeout is out of range.
    pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
    /// Another request of the transaction is being handled: retry.
    pub const CONCURRENT_TRANSACTIONS: i16 = 51;
    /// Not attempted because another part of the request failed.
    pub const OPERATION_NOT_ATTEMPTED: i16 = 55;
    /// Well-formed records the broker does not accept (more than one batch for a
    /// partition in one Produce request, records without a key for a compacted topic).
    pub const INVALID_RECORD: i16 = 87;
    /// A KIP-848 member's epoch is not the coordinator's: it must rejoin.
    pub const FENCED_MEMBER_EPOCH: i16 = 110;
    /// Another member still holds the static member's instance id.
    pub const UNRELEASED_INSTANCE_ID: i16 = 111;
    /// The server-side assignor asked for is not supported.
    pub const UNSUPPORTED_ASSIGNOR: i16 = 112;
    /// A commit or offset fetch from an older member epoch.
    pub const STALE_MEMBER_EPOCH: i16 = 113;
    /// A subscription's regular expression does not compile.
    pub const INVALID_REGULAR_EXPRESSION: i16 = 128;
    /// A newer producer with the same transactional id has fenced this one.
    pub const PRODUCER_FENCED: i16 = 90;
}

/// The Kafka error code of an engine error.
#[must_use]
pub fn of(e: &EngineError) -> i16 {
    match e {
        EngineError::UnknownTopic(_) | EngineError::PartitionOutOfRange { .. } => code::UNKNOWN_TOPIC_OR_PARTITION,
        EngineError::TopicExists(_) => code::TOPIC_ALREADY_EXISTS,
        EngineError::RecordTooLarge { .. } => code::MESSAGE_TOO_LARGE,
        EngineError::KeyRequired { .. } => code::INVALID_RECORD,
        EngineError::InvalidName(
            NameError::Empty { kind } | NameError::TooLong { kind, .. } | NameError::Invalid { kind, .. },
        ) if *kind == "group" => code::INVALID_GROUP_ID,
        EngineError::InvalidName(_) => code::INVALID_TOPIC_EXCEPTION,
        EngineError::InvalidConfig(_) => code::INVALID_CONFIG,
        EngineError::InvalidPartitions(_) => code::INVALID_PARTITIONS,
        EngineError::OffsetOutOfRange { .. } => code::OFFSET_OUT_OF_RANGE,
        EngineError::Log { source: LogError::BatchTooLarge { .. }, .. } => code::RECORD_LIST_TOO_LARGE,
        EngineError::Log { .. } | EngineError::Io { .. } => code::KAFKA_STORAGE_ERROR,
        EngineError::Sequence { source, .. } => match source {
            SequenceError::OutOfOrderSequence { .. } => code::OUT_OF_ORDER_SEQUENCE_NUMBER,
            SequenceError::InvalidProducerEpoch { .. } => code::INVALID_PRODUCER_EPOCH,
            SequenceError::UnknownProducer { .. } => code::UNKNOWN_PRODUCER_ID,
            SequenceError::InvalidBatch { .. } => code::INVALID_REQUEST,
        },
        EngineError::UnknownGroup(_) | EngineError::UnknownMember { .. } => code::UNKNOWN_MEMBER_ID,
        EngineError::StaleGeneration { .. } => code::ILLEGAL_GENERATION,
        EngineError::Group { source, .. } => of_group(source),
        EngineError::ShutDown => code::COORDINATOR_NOT_AVAILABLE,
        _ => code::UNKNOWN_SERVER_ERROR,
    }
}

/// The Kafka error code of a group's refusal.
#[must_use]
pub fn of_group(e: &GroupError) -> i16 {
    match e {
        GroupError::UnknownMember(_) => code::UNKNOWN_MEMBER_ID,
        GroupError::IllegalGeneration { .. } => code::ILLEGAL_GENERATION,
        GroupError::RebalanceInProgress => code::REBALANCE_IN_PROGRESS,
        GroupError::InconsistentProtocol(_) => code::INCONSISTENT_GROUP_PROTOCOL,
        GroupError::FencedInstance(_) => code::FENCED_INSTANCE_ID,
        GroupError::MemberIdRequired(_) => code::MEMBER_ID_REQUIRED,
        GroupError::MaxSize(_) => code::GROUP_MAX_SIZE_REACHED,
        GroupError::NonEmpty => code::NON_EMPTY_GROUP,
        GroupError::NotFound => code::GROUP_ID_NOT_FOUND,
        GroupError::SubscribedToTopic(_) => code::GROUP_SUBSCRIBED_TO_TOPIC,
        GroupError::OtherKind(_) => code::GROUP_ID_NOT_FOUND,
        GroupError::FencedMemberEpoch { .. } => code::FENCED_MEMBER_EPOCH,
        GroupError::StaleMemberEpoch { .. } => code::STALE_MEMBER_EPOCH,
        GroupError::UnreleasedInstance(_) => code::UNRELEASED_INSTANCE_ID,
        GroupError::UnsupportedAssignor(_) => code::UNSUPPORTED_ASSIGNOR,
        GroupError::InvalidRegex(_) => code::INVALID_REGULAR_EXPRESSION,
        GroupError::InvalidRequest(_) => code::INVALID_REQUEST,
    }
}
