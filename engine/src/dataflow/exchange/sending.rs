//! The sending side of `key_by`'s exchange: each input batch sorted to its
//! records' shards, the other shards' parts shipped through the rings (what a full ring
//! refuses waits in a pending queue), then this shard's part handed on.

use std::{cell::RefCell, collections::VecDeque, hash::Hash, rc::Rc, sync::Arc, task::Context, task::Poll};

use sluice_io::EventTime;

use super::{Receiving, key_group, shard_of_group};
use crate::{
    dataflow::{Event, Operator, checkpoint::Barrier, metrics::RingCells, scatter::scatter, scope::Pending},
    ring::{Message, Sender, TrySendError},
};

/// The sending side on one shard.
pub(super) struct Sending<T, KF> {
    shard: usize,
    shards: usize,
    groups: u32,
    /// `shard_of_group` for every group, looked up rather than divided per record.
    owners: Vec<u16>,
    key: Rc<KF>,
    batch_records: usize,
    building: Vec<Vec<Event<T>>>,
    /// Each input record's destination, reused from batch to batch.
    dest: Vec<u16>,
    /// A piece of a long input batch ([`Operator::on_batch`]), kept with its capacity.
    piece: Vec<Event<T>>,
    senders: Vec<Option<Sender<Event<T>>>>,
    pending: Vec<VecDeque<Message<Event<T>>>>,
    local: Rc<RefCell<Receiving<T>>>,
    /// Each ring's metrics (full-ring waits, occupancy), written by this shard.
    rings: Vec<Option<Arc<RingCells>>>,
    /// Whether watermarks wait for [`Pending::release`]: `watermark_interval` above zero
    /// and other shards to send them to (with one shard nothing calls `release`).
    hold: bool,
    /// The latest watermark not yet sent to the other shards: it goes before anything
    /// else sent to them, and on [`Pending::release`].
    held: Option<EventTime>,
}

impl<T: 'static, K: Hash, KF: Fn(&T) -> K> Sending<T, KF> {
    /// Shard `shard` of `shards`'s sender: `senders` has a ring to every other shard,
    /// `local` takes this shard's own records.
    pub(super) fn new(
        (shard, shards): (usize, usize),
        groups: u32,
        key: Rc<KF>,
        (batch_records, hold): (usize, bool),
        senders: Vec<Option<Sender<Event<T>>>>,
        local: Rc<RefCell<Receiving<T>>>,
        rings: Vec<Option<Arc<RingCells>>>,
    ) -> Self {
        Sending {
            shard,
            shards,
            groups,
            owners: (0..groups)
                .map(|g| u16::try_from(shard_of_group(g, groups, shards)).expect("at most 65536 shards"))
                .collect(),
            key,
            batch_records,
            building: (0..shards).map(|_| Vec::with_capacity(batch_records)).collect(),
            dest: Vec::with_capacity(batch_records),
            piece: Vec::new(),
            senders,
            pending: (0..shards).map(|_| VecDeque::new()).collect(),
            local,
            rings,
            hold: hold && shards > 1,
            held: None,
        }
    }

    /// Sends the held watermark to every other shard.
    fn send_held(&mut self) {
        if let Some(watermark) = self.held.take() {
            let shard = self.shard;
            for to in (0..self.shards).filter(|&to| to != shard) {
                self.send(to, Message::Watermark(watermark));
            }
        }
    }

    fn send(&mut self, to: usize, message: Message<Event<T>>) {
        let sender = self.senders[to].as_mut().expect("a ring to every other shard");
        let (queue, cells) = (&mut self.pending[to], self.rings[to].as_ref());
        // What waits goes first, in order, as far as the ring has room now (the receiving
        // shard reads it meanwhile): a long batch's pieces flow while this shard works
        // through its own part, rather than when it is back in the driver.
        queue.push_back(message);
        // Left alone in the queue, this message was tried and found the ring full.
        if !send_queued(sender, queue, cells)
            && queue.len() == 1
            && let Some(c) = cells
        {
            c.full.add(1);
        }
    }

    /// Sorts `batch` to its records' shards: the other shards' parts are shipped first,
    /// then this shard's goes on here.
    fn exchange(&mut self, batch: &mut Vec<Event<T>>) {
        // Destinations first (the key selector is user code), then the records move
        // without a branch on where each goes (`scatter`: that branch is a coin toss per
        // record at two shards).
        let (key, groups, owners) = (&*self.key, self.groups, &self.owners);
        self.dest.clear();
        self.dest.extend(batch.iter().map(|event| owners[key_group(&key(&event.value), groups) as usize]));
        scatter(batch, &self.dest, &mut self.building);
        // Records never overtake a watermark that came before them (lateness is judged by
        // it): the held one crosses first if any record does.
        if self.held.is_some() && self.building.iter().enumerate().any(|(to, b)| to != self.shard && !b.is_empty()) {
            self.send_held();
        }
        // What did not fill a batch goes now rather than waiting for more: a record must
        // not sit here while its input is quiet. Batching still follows the input's, cut
        // at `batch_records` when the input's batches are larger.
        for to in 0..self.shards {
            if to != self.shard {
                if self.building[to].len() > self.batch_records {
                    self.ship_in_batches(to);
                }
                self.ship(to);
            }
        }
        let mut local = std::mem::take(&mut self.building[self.shard]);
        self.local.borrow_mut().push_local(&mut local);
        self.building[self.shard] = local;
    }

    fn fresh_batch(&mut self, to: usize) -> Vec<Event<T>> {
        self.senders[to].as_mut().and_then(Sender::recycled).unwrap_or_else(|| Vec::with_capacity(self.batch_records))
    }

    fn ship(&mut self, to: usize) {
        if self.building[to].is_empty() {
            return;
        }
        let fresh = self.fresh_batch(to);
        let full = std::mem::replace(&mut self.building[to], fresh);
        self.send(to, Message::data(full));
    }

    /// Ships what is building for `to` as batches of at most `batch_records`, in order:
    /// each record is moved once, into a recycled batch, and the building vector keeps
    /// its allocation.
    fn ship_in_batches(&mut self, to: usize) {
        let mut all = std::mem::take(&mut self.building[to]);
        let mut records = all.drain(..);
        while records.len() > 0 {
            let mut batch = self.fresh_batch(to);
            batch.extend(records.by_ref().take(self.batch_records));
            self.send(to, Message::data(batch));
        }
        drop(records);
        self.building[to] = all;
    }

    fn ship_all_then(&mut self, message: impl Fn() -> Message<Event<T>>) {
        self.send_held();
        for to in 0..self.shards {
            if to != self.shard {
                self.ship(to);
                self.send(to, message());
            }
        }
    }
}

impl<T: 'static, K: Hash, KF: Fn(&T) -> K> Operator<T> for Sending<T, KF> {
    fn on_batch(&mut self, batch: &mut Vec<Event<T>>) {
        if self.shards == 1 {
            self.local.borrow_mut().push_local(batch);
            return;
        }
        let piece = self.batch_records.saturating_mul(self.shards);
        if batch.len() <= piece {
            return self.exchange(batch);
        }
        // A long batch (a pane's partials, a window's results) goes on in pieces of about
        // a batch per shard, each shipped before this shard works through its own part of
        // it: the other shards work on theirs meanwhile instead of after (q5's panes at
        // two shards, tuning.md).
        let mut all = std::mem::take(batch);
        let mut pieces = all.drain(..);
        let mut part = std::mem::take(&mut self.piece);
        while pieces.len() > 0 {
            part.extend(pieces.by_ref().take(piece));
            self.exchange(&mut part);
        }
        drop(pieces);
        self.piece = part;
        *batch = all;
    }

    fn on_watermark(&mut self, watermark: EventTime) {
        if self.hold {
            self.held = Some(watermark);
        } else {
            self.ship_all_then(|| Message::Watermark(watermark));
        }
        self.local.borrow_mut().on_message(self.shard, Message::Watermark(watermark));
    }

    fn on_idle(&mut self, idle: bool) {
        let control = if idle { crate::ring::Control::Idle } else { crate::ring::Control::Active };
        self.ship_all_then(|| Message::Control(control));
        self.local.borrow_mut().on_message(self.shard, Message::Control(control));
    }

    fn on_end(&mut self) {
        self.ship_all_then(|| Message::EndOfStream);
        self.local.borrow_mut().on_message(self.shard, Message::EndOfStream);
    }

    fn on_barrier(&mut self, barrier: Barrier) {
        self.ship_all_then(|| Message::Barrier(barrier.id));
        self.local.borrow_mut().on_message(self.shard, Message::Barrier(barrier.id));
    }
}

impl<T: 'static, K: Hash, KF: Fn(&T) -> K> Pending for Sending<T, KF> {
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut all = true;
        for (to, queue) in self.pending.iter_mut().enumerate() {
            let Some(sender) = self.senders[to].as_mut() else { continue };
            let cells = self.rings[to].as_ref();
            // Room that appears between the attempt and the park: try again.
            while !send_queued(sender, queue, cells) {
                if !sender.park_for_room(cx) {
                    all = false;
                    break;
                }
            }
        }
        if all { Poll::Ready(()) } else { Poll::Pending }
    }

    fn release(&mut self) {
        self.send_held();
    }
}

/// Moves `queue`'s messages into the ring in order while it has room; whether the queue
/// is empty now (a closed ring empties it: its shard failed, and the pipeline with it).
fn send_queued<T>(
    sender: &mut Sender<Event<T>>,
    queue: &mut VecDeque<Message<Event<T>>>,
    cells: Option<&Arc<RingCells>>,
) -> bool {
    while let Some(message) = queue.pop_front() {
        match sender.try_send(message) {
            Ok(()) => {
                if let Some(c) = cells {
                    c.occupied.set(sender.occupied() as i64);
                }
            }
            Err(TrySendError::Full(m)) => {
                queue.push_front(m);
                return false;
            }
            Err(TrySendError::Closed(_)) => queue.clear(),
        }
    }
    true
}
