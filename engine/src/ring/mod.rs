//! Rings: the only way shards talk to each other on the data path.
//!
//! One bounded single-producer single-consumer ring per ordered pair of shards (the
//! [`Mesh`]) carries [`Message`]s: batches of records moved, not serialized, and the
//! watermarks, barriers and control signals that must stay in order with them. Each
//! shard gets an [`Outbox`] (its senders) and an [`Inbox`] (its receivers); both are
//! built on the set-up thread and moved once into the shard's thread, where they are used
//! from that shard's executor only.
//!
//! - `message`: [`Message`], [`Batch`], [`Control`].
//! - `channel`: one ring, [`Sender`] and [`Receiver`], built on `rtrb`.
//! - `mesh`: [`Mesh`], [`Outbox`], [`Inbox`] (round-robin `recv_any`).
//! - `bell`: how a waiting side spins, parks, and is woken from another thread.
//! - `error`: [`TrySendError`], [`SendError`], [`TryRecvError`].
//!
//! **Invariants.** Every ring is bounded: a full ring is backpressure (`send` waits,
//! `try_send` hands the message back), never growth. No lock is taken on the data path: a
//! push or a pop is the ring's atomics plus a fence and a flag read; a lock is taken only
//! to park or to wake a parked side. A waiting side never spins for longer than
//! [`RingConfig::spin_before_park`] before parking.
//!
//! ```
//! use sluice_engine::ring::{Message, Mesh};
//!
//! let mut shards = Mesh::new(2).build::<u64>().into_iter();
//! let (mut zero, mut one) = (shards.next().unwrap(), shards.next().unwrap());
//! zero.outbox.try_send(1, Message::data(vec![1, 2, 3])).unwrap();
//! let (from, message) = one.inbox.try_recv_any().unwrap();
//! assert_eq!((from, message), (0, Message::data(vec![1, 2, 3])));
//! ```

mod bell;
mod channel;
mod error;
mod mesh;
mod message;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use channel::{Receiver, Sender, channel};
pub use error::{SendError, TryRecvError, TrySendError};
pub use mesh::{Inbox, Mesh, Outbox, ShardRings};
pub use message::{Batch, Control, Message};

/// The sizes and waiting policy of a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    /// Messages a ring holds before its sender must wait: batches, since a data message
    /// is one batch. At least 1. Memory per ring: this many message slots (24 bytes each),
    /// as many slots again (plus two) for vectors given back to the sender, and the
    /// batches queued in them.
    pub ring_capacity_batches: usize,
    /// How long a waiting side (a receiver finding its rings empty, a sender finding its
    /// ring full) keeps polling before it parks. `Duration::ZERO` parks at once.
    ///
    /// Why spin at all: waking a parked glommio executor from another thread costs an
    /// eventfd write and a sleep exit. Measured between two executors on 2 vCPUs (ring
    /// round trip, capacity 1): ~58 us p50 when every wait parks, ~0.2 us p50 with any spin
    /// of 20 us or more (`shared/platform.md` saw ~55 us against ~13 us for glommio's own
    /// channels). Why so briefly: a spinner burns its core, and on 2 vCPUs a busy spinner
    /// can starve the very peer it waits for (platform.md saw 0.4 M msg/s and 47 ms
    /// stalls). The default, 50 us, is about what one park and wake-up costs, the classic
    /// choice that keeps a wait within twice the cost of the better of the two.
    ///
    /// A spinning wait wakes its own task and returns `Pending`, so the shard's other ready
    /// tasks still run between its polls. glommio collects I/O completions, timers and
    /// wake-ups from other threads between task-queue runs, which a task that keeps itself
    /// ready postpones; the spin's length bounds that delay as well.
    pub spin_before_park: Duration,
}

impl RingConfig {
    /// Default [`RingConfig::ring_capacity_batches`].
    pub const DEFAULT_CAPACITY_BATCHES: usize = 64;
    /// Default [`RingConfig::spin_before_park`].
    pub const DEFAULT_SPIN_BEFORE_PARK: Duration = Duration::from_micros(50);
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            ring_capacity_batches: Self::DEFAULT_CAPACITY_BATCHES,
            spin_before_park: Self::DEFAULT_SPIN_BEFORE_PARK,
        }
    }
}
