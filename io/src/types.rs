//! Typed identifiers and quantities of the log. A bare `u64` offset is a bug waiting to
//! happen, so every quantity that crosses a module boundary has its own newtype.

use std::fmt;

/// The position of a record in a partition: dense, starting at 0, assigned on append.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Offset(pub u64);

impl Offset {
    /// The offset `n` records after this one.
    #[must_use]
    pub const fn plus(self, n: u64) -> Offset {
        Offset(self.0 + n)
    }

    /// The raw value.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Milliseconds since the Unix epoch, as carried by a record (event time) or read from a
/// clock (processing time). Signed, like Kafka's timestamps, so that "before any record"
/// has a representation.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// Smaller than every real timestamp.
    pub const MIN: Timestamp = Timestamp(i64::MIN);
    /// Larger than every real timestamp: the watermark of a stream that has ended.
    pub const MAX: Timestamp = Timestamp(i64::MAX);

    /// The wall clock now, in milliseconds since the epoch.
    #[must_use]
    pub fn now() -> Timestamp {
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timestamp(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// The time `millis` milliseconds after the epoch.
    #[must_use]
    pub const fn from_millis(millis: i64) -> Timestamp {
        Timestamp(millis)
    }

    /// The raw value in milliseconds.
    #[must_use]
    pub const fn millis(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// Event time: when the event happened, as stamped by its producer.
pub type EventTime = Timestamp;

/// A partition number within a topic.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionId(pub u32);

impl PartitionId {
    /// The raw number.
    #[must_use]
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The number as an index into a per-partition list.
    #[must_use]
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// Every partition of a topic with `count` partitions, in order.
    pub fn all(count: u32) -> impl DoubleEndedIterator<Item = PartitionId> + ExactSizeIterator {
        (0..count).map(PartitionId)
    }
}

/// From a partition index on the Kafka wire (an `int32`): negative ones are refused.
impl TryFrom<i32> for PartitionId {
    type Error = std::num::TryFromIntError;

    fn try_from(index: i32) -> Result<Self, Self::Error> {
        u32::try_from(index).map(PartitionId)
    }
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An idempotent producer's id; `ProducerId::NONE` marks a batch from no such producer.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProducerId(pub i64);

impl ProducerId {
    /// No producer id, as in Kafka (-1).
    pub const NONE: ProducerId = ProducerId(-1);
}

impl Default for ProducerId {
    fn default() -> Self {
        ProducerId::NONE
    }
}

/// A checkpoint's number. Numbers increase: a checkpoint store hands each out once, and
/// after a restart continues past every checkpoint left on disk. The first is 1.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CheckpointId(pub u64);

impl CheckpointId {
    /// The first checkpoint a new store hands out.
    pub const FIRST: CheckpointId = CheckpointId(1);

    /// The checkpoint after this one.
    #[must_use]
    pub const fn next(self) -> CheckpointId {
        CheckpointId(self.0 + 1)
    }

    /// The raw value.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A byte position within a segment file.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FilePos(pub u64);

impl fmt::Display for FilePos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "byte {}", self.0)
    }
}
