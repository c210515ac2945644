//! One ring: a bounded single-producer single-consumer queue of [`Message`]s between two
//! shards, with async waiting on both ends.
//!
//! The [`Sender`] lives on the sending shard and the [`Receiver`] on the receiving one;
//! both are `Send` (to be moved onto their shard's thread once) and neither is `Clone`.
//! The queue itself is an `rtrb` ring of messages, so moving a batch costs one slot
//! write and one release store of the tail, whatever the batch's size.
//!
//! Beside it runs a return path for allocations: the receiver may hand a read batch's
//! emptied vector back ([`Receiver::recycle`]) and the sender fill it again
//! ([`Sender::recycled`]), so a steady stream allocates nothing, and memory is freed by
//! the thread that allocated it. (Measured with `sluice-bench ring`, batches of 256: 16-byte
//! records 401 M -> 490 M records/s, 100-byte 50 M -> 68 M; about twice as fast when the
//! shared machine was busy.)

use std::{
    fmt,
    future::poll_fn,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use rtrb::{Consumer, Producer, RingBuffer};

use super::{
    Message, RingConfig, SendError, TryRecvError, TrySendError,
    bell::{Bell, Spin},
};

/// What both ends of a ring share besides the queue itself.
#[derive(Debug)]
struct Shared {
    /// The receiver parks here when the ring is empty; every push rings it. Shared by all
    /// the rings of one [`Inbox`](super::Inbox), whose single task waits on any of them.
    data: Arc<Bell>,
    /// The sender parks here when the ring is full; every pop rings it.
    room: Bell,
    /// Set when the sender is dropped, after its last push.
    sender_gone: AtomicBool,
    /// Set when the receiver is dropped.
    receiver_gone: AtomicBool,
}

/// Creates one ring of `config.ring_capacity_batches` messages.
///
/// # Panics
///
/// If `config.ring_capacity_batches` is 0: a ring that can hold nothing would block its
/// sender forever.
pub fn channel<T>(config: RingConfig) -> (Sender<T>, Receiver<T>) {
    channel_with_data_bell(config, Arc::default())
}

/// A ring whose receiver parks on `data`, which other rings into the same inbox share.
pub(super) fn channel_with_data_bell<T>(config: RingConfig, data: Arc<Bell>) -> (Sender<T>, Receiver<T>) {
    assert!(config.ring_capacity_batches > 0, "a ring needs room for at least one message");
    let (producer, consumer) = RingBuffer::new(config.ring_capacity_batches);
    // Room for every batch the ring and both ends can hold at once.
    let (give_back, take_back) = RingBuffer::new(config.ring_capacity_batches + 2);
    let shared = Arc::new(Shared {
        data,
        room: Bell::default(),
        sender_gone: AtomicBool::new(false),
        receiver_gone: AtomicBool::new(false),
    });
    let spin = config.spin_before_park;
    (Sender { producer, take_back, shared: shared.clone(), spin }, Receiver { consumer, give_back, shared, spin })
}

/// The sending end of a ring. Dropping it closes the ring once the receiver has read
/// what was sent.
pub struct Sender<T> {
    producer: Producer<Message<T>>,
    /// Emptied vectors the receiver gave back.
    take_back: Consumer<Vec<T>>,
    shared: Arc<Shared>,
    spin: Duration,
}

impl<T> Sender<T> {
    /// Sends `message` if the ring has room, without waiting.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] when the ring is full (backpressure), [`TrySendError::Closed`]
    /// when the receiver is gone; both hand the message back.
    pub fn try_send(&mut self, message: Message<T>) -> Result<(), TrySendError<T>> {
        push(&mut self.producer, &self.shared, message)
    }

    /// Sends `message`, waiting while the ring is full: spins for `spin_before_park`, then
    /// parks until the receiver makes room.
    ///
    /// # Errors
    ///
    /// [`SendError`] with the message when the receiver is gone.
    pub async fn send(&mut self, message: Message<T>) -> Result<(), SendError<T>> {
        let mut message = Some(message);
        let mut spin = Spin::new(self.spin);
        let Sender { producer, shared, .. } = self;
        poll_fn(|cx| {
            spin.poll(&shared.room, cx, || {
                match push(producer, shared, message.take().expect("a failed attempt puts the message back")) {
                    Ok(()) => Some(Ok(())),
                    Err(TrySendError::Closed(m)) => Some(Err(SendError(m))),
                    Err(TrySendError::Full(m)) => {
                        message = Some(m);
                        None
                    }
                }
            })
        })
        .await
    }

    /// An empty vector whose allocation the receiver gave back ([`Receiver::recycle`]), if
    /// there is one: fill it and send it as the next batch instead of allocating.
    pub fn recycled(&mut self) -> Option<Vec<T>> {
        self.take_back.pop().ok()
    }

    /// Whether the ring has a free slot; if not, leaves `cx`'s waker on the room bell so
    /// the receiver's next pop wakes it. For a task that waits on several things at once
    /// (the dataflow driver). A stale park costs the waiter one spurious wake-up.
    pub(crate) fn park_for_room(&self, cx: &std::task::Context<'_>) -> bool {
        if self.producer.slots() > 0 || self.is_closed() {
            return true;
        }
        self.shared.room.arm(cx.waker());
        self.producer.slots() > 0 || self.is_closed()
    }

    /// Messages the ring can hold.
    pub fn capacity(&self) -> usize {
        self.producer.buffer().capacity()
    }

    /// Messages in the ring now, as the sender sees it (the receiver may have taken some
    /// since).
    pub fn occupied(&self) -> usize {
        self.capacity() - self.producer.slots()
    }

    /// Whether the receiver is gone.
    pub fn is_closed(&self) -> bool {
        self.shared.receiver_gone.load(Ordering::Acquire)
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.shared.sender_gone.store(true, Ordering::Release);
        self.shared.data.ring();
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("capacity", &self.capacity())
            .field("free_slots", &self.producer.slots())
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// The receiving end of a ring. Dropping it closes the ring: later sends fail and the
/// messages still queued are dropped.
pub struct Receiver<T> {
    consumer: Consumer<Message<T>>,
    /// Where emptied vectors go back to the sender.
    give_back: Producer<Vec<T>>,
    shared: Arc<Shared>,
    spin: Duration,
}

impl<T> Receiver<T> {
    /// Takes the next message if there is one, without waiting.
    ///
    /// # Errors
    ///
    /// [`TryRecvError::Empty`] when nothing is queued, [`TryRecvError::Closed`] when the
    /// sender is gone and everything it sent has been read.
    pub fn try_recv(&mut self) -> Result<Message<T>, TryRecvError> {
        pop(&mut self.consumer, &self.shared)
    }

    /// Receives the next message, waiting while the ring is empty: spins for
    /// `spin_before_park`, then parks until the sender pushes. `None` once the sender is
    /// gone and the ring is drained.
    pub async fn recv(&mut self) -> Option<Message<T>> {
        let mut spin = Spin::new(self.spin);
        // Borrowed, not cloned: a clone per call would write the cache line senders read.
        let bell = &*self.shared.data;
        poll_fn(|cx| spin.poll(bell, cx, || received(pop(&mut self.consumer, &self.shared)))).await
    }

    /// Gives the allocation of `records` (typically a read batch's
    /// [`into_vec`](super::Batch::into_vec)) back to the sender for its next batch. The
    /// records are dropped here; the vector is dropped too if it has no capacity or the
    /// return path is full.
    pub fn recycle(&mut self, mut records: Vec<T>) {
        records.clear();
        if records.capacity() > 0 {
            let _ = self.give_back.push(records);
        }
    }

    /// Messages queued now.
    pub fn len(&self) -> usize {
        self.consumer.slots()
    }

    /// Whether nothing is queued now.
    pub fn is_empty(&self) -> bool {
        self.consumer.is_empty()
    }

    /// Whether the sender is gone (messages may still be queued).
    pub fn is_closed(&self) -> bool {
        self.shared.sender_gone.load(Ordering::Acquire)
    }
}

/// [`Sender::try_send`] on the sender's fields, so a wait can borrow the bell apart.
fn push<T>(producer: &mut Producer<Message<T>>, shared: &Shared, message: Message<T>) -> Result<(), TrySendError<T>> {
    if shared.receiver_gone.load(Ordering::Acquire) {
        return Err(TrySendError::Closed(message));
    }
    match producer.push(message) {
        Ok(()) => {
            shared.data.ring();
            Ok(())
        }
        Err(rtrb::PushError::Full(message)) => Err(TrySendError::Full(message)),
    }
}

/// [`Receiver::try_recv`] on the receiver's fields, so a wait can borrow the bell apart.
fn pop<T>(consumer: &mut Consumer<Message<T>>, shared: &Shared) -> Result<Message<T>, TryRecvError> {
    match consumer.pop() {
        Ok(message) => {
            shared.room.ring();
            Ok(message)
        }
        // The sender sets `sender_gone` after its last push: once that is seen, one more pop
        // finds anything pushed before.
        Err(rtrb::PopError::Empty) if shared.sender_gone.load(Ordering::Acquire) => {
            let message = consumer.pop().map_err(|_| TryRecvError::Closed)?;
            shared.room.ring();
            Ok(message)
        }
        Err(rtrb::PopError::Empty) => Err(TryRecvError::Empty),
    }
}

/// A receive attempt as a wait sees it: `None` to keep waiting, `Some(None)` when the
/// ring is closed and drained.
pub(super) fn received<M>(attempt: Result<M, TryRecvError>) -> Option<Option<M>> {
    match attempt {
        Ok(message) => Some(Some(message)),
        Err(TryRecvError::Closed) => Some(None),
        Err(TryRecvError::Empty) => None,
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.shared.receiver_gone.store(true, Ordering::Release);
        self.shared.room.ring();
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("capacity", &self.consumer.buffer().capacity())
            .field("queued", &self.len())
            .field("closed", &self.is_closed())
            .finish()
    }
}
