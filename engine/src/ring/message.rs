//! What travels through a ring: [`Message`]s, the unit of transfer, and [`Batch`]es, the
//! records a data message carries.
//!
//! A batch is moved from one shard to another as it is (a pointer, a length and a capacity
//! change hands), never copied or re-encoded: within one process the ring carries the
//! sender's allocation to the receiver.

use std::ops::{Deref, DerefMut};

use sluice_io::{CheckpointId, EventTime};

/// One entry of a ring: a batch of records or one of the stream's control signals.
///
/// Watermarks, barriers and control messages travel in the same ring as the data so they
/// stay in order with it: a barrier after a batch is received after that batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<T> {
    /// Records, moved as one allocation.
    Data(Batch<T>),
    /// The sender will send no record with an event time at or below this one.
    Watermark(EventTime),
    /// Checkpoint barrier: the records before it belong to checkpoint `n`, those after it to
    /// later ones.
    Barrier(CheckpointId),
    /// A signal about the stream rather than in it.
    Control(Control),
    /// The sender will send nothing more on this ring.
    EndOfStream,
}

impl<T> Message<T> {
    /// A data message carrying `records`.
    pub fn data(records: impl Into<Batch<T>>) -> Self {
        Message::Data(records.into())
    }

    /// The message's kind, for logs and assertions that should not print a whole batch.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Data(_) => "data",
            Message::Watermark(_) => "watermark",
            Message::Barrier(_) => "barrier",
            Message::Control(_) => "control",
            Message::EndOfStream => "end of stream",
        }
    }
}

/// Signals about the stream that are neither data nor progress. Later issues add variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Control {
    /// The sender's inputs are idle: until [`Control::Active`], its watermark must not hold
    /// back the receiver's (the idle-timeout rule of event time).
    Idle,
    /// The sender's inputs produce records again after [`Control::Idle`].
    Active,
}

/// The records of one data message, owned: a `Vec<T>` that the ring moves between shards.
///
/// `From<Vec<T>>` and `From<Box<[T]>>` take the allocation over without copying;
/// [`Batch::into_vec`] hands it back, so a receiver can reuse it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Batch<T> {
    records: Vec<T>,
}

impl<T> Batch<T> {
    /// The records, as the vector they arrived in.
    pub fn into_vec(self) -> Vec<T> {
        self.records
    }
}

impl<T> From<Vec<T>> for Batch<T> {
    fn from(records: Vec<T>) -> Self {
        Batch { records }
    }
}

impl<T> From<Box<[T]>> for Batch<T> {
    fn from(records: Box<[T]>) -> Self {
        Batch { records: records.into_vec() }
    }
}

impl<T> Deref for Batch<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.records
    }
}

impl<T> DerefMut for Batch<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.records
    }
}

impl<T> IntoIterator for Batch<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;

    fn into_iter(self) -> Self::IntoIter {
        self.records.into_iter()
    }
}

impl<'a, T> IntoIterator for &'a Batch<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.records.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_takes_over_the_allocation_it_is_made_from() {
        let records = vec![1u32, 2, 3];
        let ptr = records.as_ptr();
        let batch = Batch::from(records);
        assert_eq!(&*batch, &[1, 2, 3]);
        let records = batch.into_vec();
        assert_eq!(records.as_ptr(), ptr, "Vec -> Batch -> Vec must not copy");

        let boxed: Box<[u32]> = vec![4, 5].into_boxed_slice();
        let ptr = boxed.as_ptr();
        let batch = Batch::from(boxed);
        assert_eq!(batch.as_ptr(), ptr, "Box<[T]> -> Batch must not copy");
        assert_eq!(batch.into_iter().collect::<Vec<_>>(), vec![4, 5]);
    }

    #[test]
    fn a_message_is_three_words_whatever_its_batch_holds() {
        // RingConfig's memory estimate relies on it.
        assert_eq!(std::mem::size_of::<Message<u64>>(), 24);
        assert_eq!(std::mem::size_of::<Message<[u8; 100]>>(), 24);
    }

    #[test]
    fn kinds_name_every_message() {
        let kinds: Vec<_> = [
            Message::data(vec![1u8]),
            Message::Watermark(EventTime::MIN),
            Message::Barrier(CheckpointId(1)),
            Message::Control(Control::Idle),
            Message::EndOfStream,
        ]
        .iter()
        .map(Message::kind)
        .collect();
        assert_eq!(kinds, ["data", "watermark", "barrier", "control", "end of stream"]);
    }
}
