//! Topics: their persistent metadata and the placement of partitions on shards
//! ([`meta`]), their settings by Kafka's names ([`configs`]), where a record goes
//! ([`partitioner`]: Kafka's murmur2 for keyed records), the rules names from outside
//! must follow ([`names`]), and [`SeekTo`], a position to move a reader of a partition to.

pub mod configs;
pub mod meta;
pub mod names;
pub mod partitioner;

use sluice_io::{Offset, Timestamp};

/// Where to move a consumer's position.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SeekTo {
    /// The first offset still held.
    Earliest,
    /// The next offset to be written: only new records.
    Latest,
    /// A given offset.
    Offset(Offset),
    /// The first record at or after an event time (the end if none is).
    Timestamp(Timestamp),
}
