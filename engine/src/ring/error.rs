//! The ways a ring operation can fail. A message that could not be sent is always handed
//! back, so backpressure never loses data.

use std::fmt;

use super::Message;

/// Why [`try_send`](super::Sender::try_send) did not send; the message comes back.
#[derive(PartialEq, Eq, thiserror::Error)]
pub enum TrySendError<T> {
    /// The ring holds `ring_capacity_batches` messages: backpressure. Retry after the
    /// receiver made room, or wait with [`send`](super::Sender::send).
    #[error("the ring is full")]
    Full(Message<T>),
    /// The receiver is gone; nothing sent on this ring will be read.
    #[error("the receiving shard closed the ring")]
    Closed(Message<T>),
}

impl<T> TrySendError<T> {
    /// The message that was not sent.
    pub fn into_inner(self) -> Message<T> {
        match self {
            TrySendError::Full(message) | TrySendError::Closed(message) => message,
        }
    }

    /// Whether the ring was full (rather than closed).
    pub fn is_full(&self) -> bool {
        matches!(self, TrySendError::Full(_))
    }
}

/// Like std's channel errors, `Debug` names the failure without printing a whole batch.
impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, message) = match self {
            TrySendError::Full(m) => ("Full", m),
            TrySendError::Closed(m) => ("Closed", m),
        };
        write!(f, "{name}({})", message.kind())
    }
}

/// [`send`](super::Sender::send) failed because the receiver is gone; the message comes
/// back.
#[derive(PartialEq, Eq, thiserror::Error)]
#[error("the receiving shard closed the ring")]
pub struct SendError<T>(pub Message<T>);

impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SendError({})", self.0.kind())
    }
}

/// Why [`try_recv`](super::Receiver::try_recv) returned nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TryRecvError {
    /// Nothing to read now; the sender may still send.
    #[error("the ring is empty")]
    Empty,
    /// The sender is gone and everything it sent has been read.
    #[error("the sending shard closed the ring and it is drained")]
    Closed,
}
