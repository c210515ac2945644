//! `key_by`'s exchange: every record goes to the shard that owns its key, through the ring
//! from this shard to that one; records for this shard go straight on.
//!
//! Keys are hashed into a fixed number of *key groups* (`PipelineConfig::key_groups`),
//! and each shard owns a contiguous range of them, as in Flink: the unit later issues
//! checkpoint and move when a pipeline is restored on a different number of shards.
//!
//! The sending side sorts each input batch into one batch per destination and sends them
//! at the end of the input batch (or sooner, once full); watermarks, idleness changes and
//! the end go to every destination after the data they follow. A message a full ring refuses waits in the destination's
//! pending queue; the driver flushes it and pulls no source records meanwhile. The
//! receiving side merges the progress of all shards (the minimum watermark over those
//! not idle) before passing it on.

use std::{
    cell::RefCell,
    collections::VecDeque,
    hash::{BuildHasher, Hash},
    rc::Rc,
    task::{Context, Poll},
};

use rustc_hash::FxBuildHasher;
use sluice_io::EventTime;

use super::{
    Event, Operator, Output, Port, Progress,
    checkpoint::Barrier,
    operator::{Align, Shared},
    scope::{Input, Pending, Scope},
};
use crate::ring::{Inbox, Message, Sender, TryRecvError, TrySendError};

/// The key group of `key`, in `0..groups`.
pub fn key_group<K: Hash + ?Sized>(key: &K, groups: u32) -> u32 {
    let hash = FxBuildHasher.hash_one(key);
    // The multiply-shift takes the hash's high bits, the well-mixed ones.
    ((u128::from(hash) * u128::from(groups)) >> 64) as u32
}

/// The shard that owns key group `group`: groups are split into `shards` contiguous ranges.
#[must_use]
pub fn shard_of_group(group: u32, groups: u32, shards: usize) -> usize {
    (u64::from(group) * shards as u64 / u64::from(groups.max(1))) as usize
}

/// The receiving side on one shard: merges the inputs from every shard, and aligns their
/// checkpoint barriers: a ring whose barrier has arrived is not read again until every
/// shard's has, and what this shard's own sending side delivers meanwhile is held here.
struct Receiving<T> {
    shard: usize,
    progress: Progress,
    align: Align,
    held: VecDeque<Message<Event<T>>>,
    out: Port<T>,
}

impl<T: 'static> Receiving<T> {
    fn on_message(&mut self, from: usize, message: Message<Event<T>>) -> Option<Vec<Event<T>>> {
        if from == self.shard && self.align.blocked(from) {
            self.held.push_back(message);
            return None;
        }
        match message {
            Message::Data(batch) => {
                let mut records = batch.into_vec();
                self.out.borrow_mut().push(&mut records);
                return Some(records);
            }
            Message::Watermark(w) => self.progress.watermark(from, w),
            Message::Control(crate::ring::Control::Idle) => self.progress.idle(from, true),
            Message::Control(crate::ring::Control::Active) => self.progress.idle(from, false),
            Message::Barrier(id) => {
                if let Some(barrier) = self.align.arrive(from, Barrier { id }) {
                    self.release(barrier);
                }
                return None;
            }
            Message::EndOfStream => {
                self.progress.end(from);
                if let Some(barrier) = self.align.end(from) {
                    self.progress.forward(&mut self.out.borrow_mut());
                    self.release(barrier);
                    return None;
                }
            }
        }
        self.progress.forward(&mut self.out.borrow_mut());
        None
    }

    /// Every input's barrier arrived: pass it on, then what this shard sent meanwhile.
    fn release(&mut self, barrier: Barrier) {
        self.out.borrow_mut().barrier(barrier);
        while let Some(message) = self.held.pop_front() {
            let shard = self.shard;
            self.on_message(shard, message);
        }
    }

    /// Records routed to this shard by its own sending side: they skip the rings.
    fn push_local(&mut self, batch: &mut Vec<Event<T>>) {
        if self.align.blocked(self.shard) {
            if !batch.is_empty() {
                self.held.push_back(Message::data(std::mem::take(batch)));
            }
            return;
        }
        self.out.borrow_mut().push(batch);
    }
}

/// The sending side on one shard.
struct Sending<T, KF> {
    shard: usize,
    shards: usize,
    groups: u32,
    /// `shard_of_group` for every group, looked up rather than divided per record.
    owners: Vec<u16>,
    key: Rc<KF>,
    batch_records: usize,
    building: Vec<Vec<Event<T>>>,
    senders: Vec<Option<Sender<Event<T>>>>,
    pending: Vec<VecDeque<Message<Event<T>>>>,
    local: Rc<RefCell<Receiving<T>>>,
}

impl<T: 'static, K: Hash, KF: Fn(&T) -> K> Sending<T, KF> {
    fn send(&mut self, to: usize, message: Message<Event<T>>) {
        let sender = self.senders[to].as_mut().expect("a ring to every other shard");
        if !self.pending[to].is_empty() {
            self.pending[to].push_back(message);
            return;
        }
        match sender.try_send(message) {
            Ok(()) => {}
            Err(TrySendError::Full(m)) => self.pending[to].push_back(m),
            // The receiving shard is gone: it failed, and the pipeline with it.
            Err(TrySendError::Closed(_)) => {}
        }
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

    fn ship_all_then(&mut self, message: impl Fn() -> Message<Event<T>>) {
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
        let mut local = std::mem::take(&mut self.building[self.shard]);
        for event in batch.drain(..) {
            let to = usize::from(self.owners[key_group(&(self.key)(&event.value), self.groups) as usize]);
            if to == self.shard {
                local.push(event);
            } else {
                self.building[to].push(event);
                if self.building[to].len() >= self.batch_records {
                    self.ship(to);
                }
            }
        }
        self.local.borrow_mut().push_local(&mut local);
        self.building[self.shard] = local;
        // What did not fill a batch goes now rather than waiting for more: a record must
        // not sit here while its input is quiet. Batching still follows the input's.
        for to in 0..self.shards {
            if to != self.shard {
                self.ship(to);
            }
        }
    }

    fn on_watermark(&mut self, watermark: EventTime) {
        self.ship_all_then(|| Message::Watermark(watermark));
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
            while let Some(message) = queue.pop_front() {
                match sender.try_send(message) {
                    Ok(()) => {}
                    Err(TrySendError::Full(m)) => {
                        queue.push_front(m);
                        if sender.park_for_room(cx) {
                            // Room appeared between the attempt and the park: try again.
                            continue;
                        }
                        all = false;
                        break;
                    }
                    Err(TrySendError::Closed(_)) => queue.clear(),
                }
            }
        }
        if all { Poll::Ready(()) } else { Poll::Pending }
    }
}

/// The ring side of the receiving end, which the driver drains.
struct RingInput<T> {
    inbox: Inbox<Event<T>>,
    receiving: Rc<RefCell<Receiving<T>>>,
    ended: bool,
}

impl<T: 'static> Input for RingInput<T> {
    fn poll_input(&mut self, cx: &mut Context<'_>, budget: usize) -> Poll<bool> {
        if self.ended {
            return Poll::Ready(false);
        }
        // This shard's own end reaches the receiving side directly (Sending::on_end), not
        // through the rings: if every other shard's end came first, nothing more will
        // arrive here to notice that all have ended.
        if self.receiving.borrow().progress.all_ended() {
            self.ended = true;
            return Poll::Ready(false);
        }
        let mut moved = 0;
        while moved < budget {
            let received = {
                let receiving = self.receiving.borrow();
                let align = &receiving.align;
                self.inbox.try_recv_unheld(|from| align.blocked(from))
            };
            match received {
                Ok((from, message)) => {
                    moved += 1;
                    let mut receiving = self.receiving.borrow_mut();
                    if let Some(records) = receiving.on_message(from, message) {
                        self.inbox.recycle(from, records);
                    }
                    if receiving.progress.all_ended() {
                        self.ended = true;
                        return Poll::Ready(false);
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Closed) => {
                    self.ended = true;
                    return Poll::Ready(false);
                }
            }
        }
        if moved > 0 {
            return Poll::Ready(true);
        }
        let receiving = self.receiving.borrow();
        let align = &receiving.align;
        if self.inbox.park_unheld(cx, |from| align.blocked(from)) { Poll::Ready(true) } else { Poll::Pending }
    }

    fn is_source(&self) -> bool {
        false
    }
}

/// Builds this shard's ends of an exchange: `upstream`'s records are routed by `key`, and
/// the returned port carries the records this shard owns, from every shard.
pub(crate) fn exchange<T, K, KF>(scope: &Scope, upstream: &Port<T>, key: Rc<KF>) -> Port<T>
where
    T: Send + 'static,
    K: Hash + 'static,
    KF: Fn(&T) -> K + 'static,
{
    let shards = scope.shards();
    let shard = scope.shard();
    let out = Output::port();
    let receiving = Rc::new(RefCell::new(Receiving {
        shard,
        progress: Progress::new(shards),
        align: Align::new(shards),
        held: VecDeque::new(),
        out: out.clone(),
    }));
    let batch_records = scope.config().batch_records.max(1);
    let (senders, inbox) = if shards > 1 {
        let rings = scope.next_exchange_rings::<Event<T>>();
        (rings.outbox.into_senders(), Some(rings.inbox))
    } else {
        (vec![None], None)
    };
    let sending = Rc::new(RefCell::new(Sending {
        shard,
        shards,
        groups: scope.config().key_groups,
        owners: (0..scope.config().key_groups)
            .map(|g| u16::try_from(shard_of_group(g, scope.config().key_groups, shards)).expect("at most 65536 shards"))
            .collect(),
        key,
        batch_records,
        building: (0..shards).map(|_| Vec::with_capacity(batch_records)).collect(),
        senders,
        pending: (0..shards).map(|_| VecDeque::new()).collect(),
        local: receiving.clone(),
    }));
    upstream.borrow_mut().attach(Box::new(Shared(sending.clone())));
    if let Some(inbox) = inbox {
        scope.add_pending(sending);
        scope.add_input(Box::new(RingInput { inbox, receiving, ended: false }));
    }
    out
}
