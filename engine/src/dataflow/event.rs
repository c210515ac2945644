//! What flows between operators: [`Event`]s, a value with its event time, moved in
//! batches (`Vec<Event<T>>`).

use sluice_io::EventTime;

/// One record of a stream: its value and the event time it carries.
///
/// The time is set once, where the record enters the pipeline (the source's timestamp
/// extractor, or the shard's clock for processing time), and kept by stateless operators;
/// a window's result carries its window's last instant (`end - 1`), as in Flink.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub struct Event<T> {
    /// Event time.
    pub time: EventTime,
    /// The record.
    pub value: T,
}

impl<T> Event<T> {
    /// An event at `time`.
    pub const fn new(time: EventTime, value: T) -> Self {
        Event { time, value }
    }
}
