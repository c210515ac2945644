//! The mesh: one ring per ordered pair of shards, handed out as each shard's [`Outbox`]
//! (the senders to every other shard) and [`Inbox`] (the receivers from every other
//! shard).
//!
//! [`Mesh::build`] runs once, on whatever thread sets the shards up; each [`ShardRings`]
//! is then moved into its shard's thread and used only there.

use std::{fmt, future::poll_fn, sync::Arc, time::Duration};

use super::{
    Message, Receiver, RingConfig, SendError, Sender, TryRecvError, TrySendError,
    bell::{Bell, Spin},
    channel::{channel_with_data_bell, received},
};

/// Builds the rings between `shards` shards.
///
/// Without self-loops (the default) there are `shards * (shards - 1)` rings and a shard
/// has no ring to itself: it hands its own records on directly, which costs nothing, and
/// cannot deadlock the way a task blocked sending into its own full ring would (it would
/// wait for room only it can make). With [`Mesh::self_loops`] every shard also gets a ring
/// to itself (`shards * shards` rings), for code that treats every destination alike and
/// reads its own ring from another task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mesh {
    shards: usize,
    config: RingConfig,
    self_loops: bool,
}

impl Mesh {
    /// A mesh of `shards` shards with the default [`RingConfig`] and no self-loops.
    pub fn new(shards: usize) -> Self {
        Mesh { shards, config: RingConfig::default(), self_loops: false }
    }

    /// Uses `config` for every ring.
    #[must_use]
    pub fn config(mut self, config: RingConfig) -> Self {
        self.config = config;
        self
    }

    /// Whether each shard also gets a ring to itself.
    #[must_use]
    pub fn self_loops(mut self, self_loops: bool) -> Self {
        self.self_loops = self_loops;
        self
    }

    /// The number of rings [`Mesh::build`] creates.
    pub fn ring_count(&self) -> usize {
        let per_shard = if self.self_loops { self.shards } else { self.shards.saturating_sub(1) };
        self.shards * per_shard
    }

    /// Creates the rings and returns each shard's ends, in shard order.
    ///
    /// # Panics
    ///
    /// If the config's `ring_capacity_batches` is 0.
    pub fn build<T>(&self) -> Vec<ShardRings<T>> {
        let n = self.shards;
        let has_ring = |from: usize, to: usize| self.self_loops || from != to;
        let bells: Vec<Arc<Bell>> = (0..n).map(|_| Arc::default()).collect();
        let mut senders: Vec<Vec<Option<Sender<T>>>> = (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        let mut receivers: Vec<Vec<Option<Receiver<T>>>> = (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        for from in 0..n {
            for to in (0..n).filter(|&to| has_ring(from, to)) {
                let (tx, rx) = channel_with_data_bell(self.config, bells[to].clone());
                senders[from][to] = Some(tx);
                receivers[to][from] = Some(rx);
            }
        }
        senders
            .into_iter()
            .zip(receivers)
            .zip(bells)
            .enumerate()
            .map(|(shard, ((senders, receivers), bell))| ShardRings {
                outbox: Outbox { shard, senders },
                inbox: Inbox {
                    shard,
                    sources: (0..n).filter(|&from| has_ring(from, shard)).collect(),
                    receivers,
                    next: 0,
                    bell,
                    spin_before_park: self.config.spin_before_park,
                },
            })
            .collect()
    }
}

/// One shard's ends of the mesh; `Send`, to be moved into the shard's thread.
#[derive(Debug)]
pub struct ShardRings<T> {
    /// The senders from this shard.
    pub outbox: Outbox<T>,
    /// The receivers into this shard.
    pub inbox: Inbox<T>,
}

/// A shard's senders, indexed by destination shard.
pub struct Outbox<T> {
    shard: usize,
    senders: Vec<Option<Sender<T>>>,
}

impl<T> Outbox<T> {
    /// The shard this outbox sends from.
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// The destinations this outbox has a ring to, ascending.
    pub fn destinations(&self) -> impl Iterator<Item = usize> + '_ {
        self.senders.iter().enumerate().filter_map(|(to, s)| s.as_ref().map(|_| to))
    }

    /// The sender to shard `to`.
    ///
    /// # Panics
    ///
    /// If there is no ring to `to`: it is out of range, or this shard itself in a mesh
    /// without self-loops.
    pub fn sender(&mut self, to: usize) -> &mut Sender<T> {
        let shard = self.shard;
        self.senders
            .get_mut(to)
            .and_then(Option::as_mut)
            .unwrap_or_else(|| panic!("no ring from shard {shard} to {to}"))
    }

    /// [`Sender::try_send`] to shard `to`. Panics like [`Outbox::sender`].
    ///
    /// # Errors
    ///
    /// As [`Sender::try_send`].
    pub fn try_send(&mut self, to: usize, message: Message<T>) -> Result<(), TrySendError<T>> {
        self.sender(to).try_send(message)
    }

    /// [`Sender::send`] to shard `to`. Panics like [`Outbox::sender`].
    ///
    /// # Errors
    ///
    /// As [`Sender::send`].
    pub async fn send(&mut self, to: usize, message: Message<T>) -> Result<(), SendError<T>> {
        self.sender(to).send(message).await
    }

    /// [`Sender::recycled`] of the ring to shard `to`. Panics like [`Outbox::sender`].
    pub fn recycled(&mut self, to: usize) -> Option<Vec<T>> {
        self.sender(to).recycled()
    }

    /// The senders, indexed by destination (`None` where there is no ring), for sending
    /// from several tasks of the shard at once.
    pub fn into_senders(self) -> Vec<Option<Sender<T>>> {
        self.senders
    }
}

impl<T> fmt::Debug for Outbox<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbox")
            .field("shard", &self.shard)
            .field("destinations", &self.destinations().collect::<Vec<_>>())
            .finish()
    }
}

/// A shard's receivers, indexed by source shard, read by one task at a time.
///
/// Every ring into the shard rings the same bell, so one parked task wakes on a message
/// from any of them. That is why the receivers stay inside the inbox and every method
/// takes `&mut self`: two tasks parked on one bell would leave one of them asleep.
pub struct Inbox<T> {
    shard: usize,
    receivers: Vec<Option<Receiver<T>>>,
    /// The shards with a ring into this one, ascending.
    sources: Vec<usize>,
    /// Position in `sources` where the next scan starts: one past the last ring read.
    next: usize,
    bell: Arc<Bell>,
    spin_before_park: Duration,
}

impl<T> Inbox<T> {
    /// The shard this inbox receives into.
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// The shards with a ring into this one, ascending.
    pub fn sources(&self) -> &[usize] {
        &self.sources
    }

    /// The next message from any ring, without waiting, with the shard it came from.
    ///
    /// Rings are taken in turn (round robin): the scan starts after the ring read last,
    /// so a busy sender cannot starve the others.
    ///
    /// # Errors
    ///
    /// [`TryRecvError::Empty`] when every open ring is empty, [`TryRecvError::Closed`]
    /// when every ring is closed and drained (at once, for an inbox with no rings).
    pub fn try_recv_any(&mut self) -> Result<(usize, Message<T>), TryRecvError> {
        scan(&mut self.receivers, &self.sources, &mut self.next, |_| false)
    }

    /// [`Inbox::try_recv_any`] leaving the rings from the shards `held` names untouched
    /// (a checkpoint barrier aligning): their messages stay queued. `Empty` while only
    /// held rings have messages.
    pub(crate) fn try_recv_unheld(
        &mut self,
        held: impl Fn(usize) -> bool,
    ) -> Result<(usize, Message<T>), TryRecvError> {
        scan(&mut self.receivers, &self.sources, &mut self.next, held)
    }

    /// The next message from any ring, with the shard it came from, waiting while all are
    /// empty: spins for `spin_before_park`, then parks until a sender pushes. `None` once
    /// every ring is closed and drained.
    pub async fn recv_any(&mut self) -> Option<(usize, Message<T>)> {
        let mut spin = Spin::new(self.spin_before_park);
        let Inbox { receivers, sources, next, bell, .. } = self;
        poll_fn(|cx| spin.poll(bell, cx, || received(scan(receivers, sources, next, |_| false)))).await
    }

    /// Whether some ring into this shard, other than those from the shards `held` names
    /// (a checkpoint barrier aligning), holds a message; if none does, leaves `cx`'s waker
    /// on the inbox bell so the next push wakes it. For a task that waits on several
    /// things at once (the dataflow driver).
    pub(crate) fn park_unheld(&self, cx: &std::task::Context<'_>, held: impl Fn(usize) -> bool) -> bool {
        let ready = |receivers: &[Option<Receiver<T>>]| {
            receivers.iter().enumerate().any(|(from, r)| r.as_ref().is_some_and(|r| !held(from) && !r.is_empty()))
        };
        if ready(&self.receivers) {
            return true;
        }
        self.bell.arm(cx.waker());
        ready(&self.receivers)
    }

    /// The next message from shard `from`, without waiting.
    ///
    /// # Errors
    ///
    /// As [`Receiver::try_recv`].
    ///
    /// # Panics
    ///
    /// If there is no ring from `from` into this shard.
    pub fn try_recv_from(&mut self, from: usize) -> Result<Message<T>, TryRecvError> {
        receiver(&mut self.receivers, self.shard, from).try_recv()
    }

    /// The next message from shard `from`, waiting like [`Inbox::recv_any`]; messages
    /// from other shards stay queued. `None` once that ring is closed and drained.
    ///
    /// # Panics
    ///
    /// If there is no ring from `from` into this shard.
    pub async fn recv_from(&mut self, from: usize) -> Option<Message<T>> {
        let mut spin = Spin::new(self.spin_before_park);
        let shard = self.shard;
        let Inbox { receivers, bell, .. } = self;
        poll_fn(|cx| spin.poll(bell, cx, || received(receiver(receivers, shard, from).try_recv()))).await
    }

    /// [`Receiver::recycle`] on the ring from shard `from`, where the batch came from, so
    /// that shard can fill the allocation again ([`Outbox::recycled`]).
    ///
    /// # Panics
    ///
    /// If there is no ring from `from` into this shard.
    pub fn recycle(&mut self, from: usize, records: Vec<T>) {
        receiver(&mut self.receivers, self.shard, from).recycle(records);
    }
}

fn receiver<T>(receivers: &mut [Option<Receiver<T>>], shard: usize, from: usize) -> &mut Receiver<T> {
    receivers.get_mut(from).and_then(Option::as_mut).unwrap_or_else(|| panic!("no ring from shard {from} to {shard}"))
}

/// One round-robin pass over the rings of `sources`, starting at `next`.
fn scan<T>(
    receivers: &mut [Option<Receiver<T>>],
    sources: &[usize],
    next: &mut usize,
    held: impl Fn(usize) -> bool,
) -> Result<(usize, Message<T>), TryRecvError> {
    let mut open = false;
    for k in 0..sources.len() {
        let i = (*next + k) % sources.len();
        let from = sources[i];
        if held(from) {
            open = true;
            continue;
        }
        match receivers[from].as_mut().expect("sources name rings that exist").try_recv() {
            Ok(message) => {
                *next = (i + 1) % sources.len();
                return Ok((from, message));
            }
            Err(TryRecvError::Empty) => open = true,
            Err(TryRecvError::Closed) => {}
        }
    }
    Err(if open { TryRecvError::Empty } else { TryRecvError::Closed })
}

impl<T> fmt::Debug for Inbox<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inbox")
            .field("shard", &self.shard)
            .field("sources", &self.sources)
            .field("bell", &self.bell)
            .finish_non_exhaustive()
    }
}
