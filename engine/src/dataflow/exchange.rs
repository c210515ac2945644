//! `key_by`'s exchange: every record goes to the shard that owns its key, through the ring
//! from this shard to that one; records for this shard go straight on.
//!
//! Keys are hashed into a fixed number of *key groups* (`PipelineConfig::key_groups`),
//! and each shard owns a contiguous range of them, as in Flink: the unit later issues
//! checkpoint and move when a pipeline is restored on a different number of shards.
//!
//! The sending side sorts each input batch into one batch per destination and sends them
//! at the end of the input batch (or sooner, once full), before its own share goes on here;
//! an input batch longer than a batch per shard goes in pieces of that length. Watermarks,
//! idleness changes and the end go to every destination after the data they follow. A
//! message a full ring refuses waits in the destination's pending queue; the next send to
//! that destination, or the driver, moves it on, and the driver pulls no source records
//! meanwhile. The receiving side merges the progress of all shards (the minimum watermark
//! over those not idle) before passing it on.

use std::{
    cell::RefCell,
    collections::VecDeque,
    hash::{BuildHasher, Hash},
    rc::Rc,
    task::{Context, Poll},
};

use rustc_hash::FxBuildHasher;
use sluice_io::{CheckpointId, EventTime};

use super::{
    Event, Output, Port, Progress,
    checkpoint::{Barrier, ChannelHandle, Data, GroupWriter, READ_AHEAD_BATCHES_PER_RING},
    operator::{Align, Shared},
    scope::{Input, Scope},
};
use crate::ring::{Inbox, Message, TryRecvError};

mod sending;
use sending::Sending;

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

/// The receiving side on one shard: merges the inputs from every shard, and handles
/// their checkpoint barriers.
///
/// Aligned (the default): a ring whose barrier has arrived is not read again until every
/// shard's has, and what this shard's own sending side delivers meanwhile is held here.
/// Unaligned ([`Unaligned`]): nothing is held; the first barrier passes at once.
struct Receiving<T> {
    shard: usize,
    progress: Progress,
    align: Align,
    held: VecDeque<Message<Event<T>>>,
    out: Port<T>,
    /// In-flight records restored from a checkpoint, delivered before anything else, each
    /// after the watermark paired with it (ascending; see [`ChannelHandle::restore`]).
    restored: Vec<(EventTime, Event<T>)>,
    unaligned: Option<Unaligned<T>>,
}

/// Records one event, after the watermark its channel had sent before it, into its key's
/// group of a snapshot's in-flight data.
type Recorder<T> = Box<dyn Fn(&mut GroupWriter, EventTime, &Event<T>)>;

/// Unaligned barriers at one receiving side (see [`checkpoint`](super::checkpoint)).
///
/// Contract: `buffered[j]` holds messages read from ring `j` ahead of processing, in ring
/// order, and only messages before ring `j`'s next barrier; ring `j` is not read directly
/// while they wait, so the order of every input is kept.
struct Unaligned<T> {
    channel: ChannelHandle,
    record: Recorder<T>,
    buffered: Vec<VecDeque<Message<Event<T>>>>,
    /// Messages at most in one input's buffer.
    read_ahead_max: usize,
    /// Inputs whose end has been read (the end itself may still be buffered).
    ended: Vec<bool>,
    /// The last checkpoint whose barrier passed here.
    last: CheckpointId,
    current: Option<InFlight>,
    /// The buffer to process first next time: buffers are taken in turn.
    next_buffer: usize,
    /// Each input's watermark and idleness as read so far (which its next record read is
    /// behind), whether or not processed yet.
    seen: Vec<(EventTime, bool)>,
}

/// The checkpoint whose barrier passed, while some input's has not arrived yet.
struct InFlight {
    barrier: Barrier,
    arrived: Vec<bool>,
    /// Each input's watermark and idleness when its barrier arrived (`seen`).
    at_barrier: Vec<Option<(EventTime, bool)>>,
    writer: GroupWriter,
    /// The barrier waits for every input's, and for what was read ahead to be processed:
    /// the final checkpoint of bounded inputs passes aligned, since its sources end once
    /// it completes and output after its barrier would never be committed. (Its inputs
    /// send nothing after their barriers, so nothing needs holding.)
    deferred: bool,
}

impl InFlight {
    /// The watermark the inputs had sent before their barriers of the checkpoint in
    /// progress, combined as [`Progress`] combines them (an input that ended before its
    /// barrier holds nothing back): no record after a barrier is late for it unless it
    /// was late for its own input's watermark.
    fn floor(&self) -> EventTime {
        let mut progress = Progress::new(self.at_barrier.len());
        for (j, at) in self.at_barrier.iter().enumerate() {
            match at {
                Some((watermark, idle)) => {
                    progress.watermark(j, *watermark);
                    progress.idle(j, *idle);
                }
                None => progress.end(j),
            }
        }
        progress.combined()
    }
}

impl<T> Unaligned<T> {
    /// Whether input `j` is read ahead: the current checkpoint waits for its barrier.
    fn ahead(&self, j: usize) -> bool {
        !self.ended[j] && self.current.as_ref().is_some_and(|c| !c.arrived[j])
    }

    /// Records `records` from input `j` if they arrived before its barrier of the
    /// checkpoint in progress.
    fn record_from(&mut self, j: usize, records: &[Event<T>]) {
        let watermark = self.seen[j].0;
        if let Some(c) = self.current.as_mut().filter(|c| !c.arrived[j] && !c.deferred) {
            for e in records {
                (self.record)(&mut c.writer, watermark, e);
            }
        }
    }

    /// Input `j`'s message read (from its ring, or from this shard's sending side), in
    /// its order: keeps its watermark and idleness as read.
    fn read(&mut self, j: usize, message: &Message<Event<T>>) {
        match message {
            Message::Watermark(w) => self.seen[j].0 = self.seen[j].0.max(*w),
            Message::Control(crate::ring::Control::Idle) => self.seen[j].1 = true,
            Message::Control(crate::ring::Control::Active) => self.seen[j].1 = false,
            _ => {}
        }
    }
}

impl<T: 'static> Receiving<T> {
    /// Delivers the restored in-flight records, each run of them after its watermark, so
    /// that a record late for the watermarks before it in its channel stays late.
    fn deliver_restored(&mut self) {
        if self.restored.is_empty() {
            return;
        }
        let restored = std::mem::take(&mut self.restored);
        let mut out = self.out.borrow_mut();
        let mut records = Vec::new();
        for (watermark, e) in restored {
            if watermark > out.watermark() {
                out.push(&mut records);
                out.watermark_to(watermark);
            }
            records.push(e);
        }
        out.push(&mut records);
    }

    /// A message from input `from`, read straight from its ring or from this shard's own
    /// sending side. Returns the emptied batch of a data message, to recycle.
    fn on_message(&mut self, from: usize, message: Message<Event<T>>) -> Option<Vec<Event<T>>> {
        self.deliver_restored();
        let Some(u) = self.unaligned.as_mut() else { return self.apply(from, message) };
        u.read(from, &message);
        match &message {
            Message::Barrier(id) => {
                self.unaligned_barrier(from, *id);
                return None;
            }
            Message::Data(batch) => u.record_from(from, batch),
            Message::EndOfStream => u.ended[from] = true,
            _ => {}
        }
        let records = self.apply(from, message);
        self.complete_if_done();
        records
    }

    /// Processes a message of input `from` (aligning barriers in aligned mode; in
    /// unaligned mode barriers never get here).
    fn apply(&mut self, from: usize, message: Message<Event<T>>) -> Option<Vec<Event<T>>> {
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

    /// Every input's barrier arrived (aligned mode): pass it on, then what this shard
    /// sent meanwhile.
    fn release(&mut self, barrier: Barrier) {
        self.out.borrow_mut().barrier(barrier);
        while let Some(message) = self.held.pop_front() {
            let shard = self.shard;
            self.apply(shard, message);
        }
    }

    /// Barrier `id` arrived from input `from` (unaligned mode). The first of a checkpoint
    /// passes on at once; what is buffered and not processed yet is in flight for it.
    fn unaligned_barrier(&mut self, from: usize, id: CheckpointId) {
        let u = self.unaligned.as_mut().expect("unaligned mode");
        match u.current.as_ref().map(|c| c.barrier.id) {
            Some(current) if id == current => {}
            // An older checkpoint's barrier, after a newer one passed: that one was
            // aborted.
            Some(current) if id < current => return,
            None if id <= u.last => return,
            _ => {
                // The first barrier of checkpoint `id` (a checkpoint still in progress
                // here was aborted, or its barrier would have come first).
                let barrier = Barrier { id };
                u.last = id;
                let deferred = u.channel.is_final(id);
                let mut writer = u.channel.writer();
                if !deferred {
                    // What was read and not processed yet: each input's watermark before
                    // it is the processed one, raised by the watermarks between.
                    for (j, queue) in u.buffered.iter().enumerate() {
                        let mut watermark = self.progress.input_watermark(j);
                        for message in queue {
                            match message {
                                Message::Data(batch) => {
                                    batch.iter().for_each(|e| (u.record)(&mut writer, watermark, e))
                                }
                                Message::Watermark(w) => watermark = watermark.max(*w),
                                _ => {}
                            }
                        }
                    }
                }
                let inputs = u.ended.len();
                u.current = Some(InFlight {
                    barrier,
                    arrived: vec![false; inputs],
                    at_barrier: vec![None; inputs],
                    writer,
                    deferred,
                });
                if !deferred {
                    self.out.borrow_mut().barrier(barrier);
                }
            }
        }
        let u = self.unaligned.as_mut().expect("unaligned mode");
        if let Some(c) = u.current.as_mut() {
            c.arrived[from] = true;
            c.at_barrier[from] = Some(u.seen[from]);
        }
        self.complete_if_done();
    }

    /// Unaligned mode: reports the checkpoint in progress once every input's barrier
    /// arrived or the input ended (a deferred barrier passes then, once nothing read ahead
    /// waits).
    fn complete_if_done(&mut self) {
        let Receiving { unaligned: Some(u), out, .. } = self else { return };
        let Some(c) = u.current.as_ref() else { return };
        if !c.arrived.iter().zip(&u.ended).all(|(a, e)| *a || *e)
            || (c.deferred && u.buffered.iter().any(|q| !q.is_empty()))
        {
            return;
        }
        let c = u.current.take().expect("checked");
        if c.deferred {
            out.borrow_mut().barrier(c.barrier);
        }
        let floor = c.floor();
        u.channel.report(c.barrier, c.writer, floor);
    }

    /// Records routed to this shard by its own sending side: they skip the rings.
    fn push_local(&mut self, batch: &mut Vec<Event<T>>) {
        self.deliver_restored();
        if let Some(u) = self.unaligned.as_mut() {
            u.record_from(self.shard, batch);
        } else if self.align.blocked(self.shard) {
            if !batch.is_empty() {
                self.held.push_back(Message::data(std::mem::take(batch)));
            }
            return;
        }
        self.out.borrow_mut().push(batch);
    }

    /// Whether ring `from` must not be read straight now: it is aligned and blocked, or
    /// (unaligned) it is read ahead, or what was read ahead of it waits.
    fn skip_direct(&self, from: usize) -> bool {
        match &self.unaligned {
            None => self.align.blocked(from),
            Some(u) => u.ahead(from) || !u.buffered[from].is_empty(),
        }
    }

    /// Whether a message on ring `from` is no reason to wake: it waits for alignment.
    fn skip_wake(&self, from: usize) -> bool {
        self.unaligned.is_none() && self.align.blocked(from)
    }

    /// Unaligned mode: reads every input the checkpoint in progress waits for, up to its
    /// barrier (or its bound), into its buffer, recording the records. Returns the
    /// messages read.
    fn read_ahead(&mut self, inbox: &mut Inbox<Event<T>>) -> usize {
        let Some(u) = self.unaligned.as_ref() else { return 0 };
        if u.current.is_none() {
            return 0;
        }
        let mut moved = 0;
        for i in 0..inbox.sources().len() {
            let j = inbox.sources()[i];
            loop {
                let Some(u) = self.unaligned.as_mut() else { return moved };
                if !u.ahead(j) || u.buffered[j].len() >= u.read_ahead_max {
                    break;
                }
                let Ok(message) = inbox.try_recv_from(j) else { break };
                moved += 1;
                u.read(j, &message);
                match message {
                    Message::Barrier(id) => self.unaligned_barrier(j, id),
                    Message::Data(batch) => {
                        u.record_from(j, &batch);
                        u.buffered[j].push_back(Message::Data(batch));
                    }
                    Message::EndOfStream => {
                        u.ended[j] = true;
                        u.buffered[j].push_back(Message::EndOfStream);
                        self.complete_if_done();
                    }
                    other => u.buffered[j].push_back(other),
                }
            }
        }
        moved
    }

    /// Unaligned mode: the next message read ahead, taking the inputs' buffers in turn.
    fn next_buffered(&mut self) -> Option<(usize, Message<Event<T>>)> {
        let u = self.unaligned.as_mut()?;
        let n = u.buffered.len();
        for k in 0..n {
            let j = (u.next_buffer + k) % n;
            if let Some(message) = u.buffered[j].pop_front() {
                u.next_buffer = (j + 1) % n;
                return Some((j, message));
            }
        }
        None
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
        self.receiving.borrow_mut().deliver_restored();
        // This shard's own end reaches the receiving side directly (Sending::on_end), not
        // through the rings: if every other shard's end came first, nothing more will
        // arrive here to notice that all have ended.
        if self.receiving.borrow().progress.all_ended() {
            self.ended = true;
            return Poll::Ready(false);
        }
        // Unaligned checkpoints: the barriers first, then the records.
        let mut moved = self.receiving.borrow_mut().read_ahead(&mut self.inbox);
        let mut processed = 0;
        while processed < budget {
            let mut receiving = self.receiving.borrow_mut();
            let Some((from, message)) = receiving.next_buffered() else { break };
            processed += 1;
            if let Some(records) = receiving.apply(from, message) {
                self.inbox.recycle(from, records);
            }
            receiving.complete_if_done();
            if receiving.progress.all_ended() {
                self.ended = true;
                return Poll::Ready(false);
            }
        }
        while processed < budget {
            let received = {
                let receiving = self.receiving.borrow();
                self.inbox.try_recv_unheld(|from| receiving.skip_direct(from))
            };
            match received {
                Ok((from, message)) => {
                    processed += 1;
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
        moved += processed;
        if moved > 0 {
            return Poll::Ready(true);
        }
        let receiving = self.receiving.borrow();
        if self.inbox.park_unheld(cx, |from| receiving.skip_wake(from)) { Poll::Ready(true) } else { Poll::Pending }
    }

    fn is_source(&self) -> bool {
        false
    }
}

/// Builds this shard's ends of an exchange: `upstream`'s records are routed by `key`, and
/// the returned port carries the records this shard owns, from every shard.
pub(crate) fn exchange<T, K, KF>(scope: &Scope, upstream: &Port<T>, key: Rc<KF>) -> Port<T>
where
    T: Send + Data,
    K: Hash + 'static,
    KF: Fn(&T) -> K + 'static,
{
    let shards = scope.shards();
    let shard = scope.shard();
    let out = Output::port();
    let channel = scope.checkpoint().map(|c| ChannelHandle::register(&c, scope.config().key_groups));
    let restored = match &channel {
        Some(channel) => {
            channel.restore::<T>().unwrap_or_else(|e| panic!("restoring the in-flight records of a key_by: {e}"))
        }
        None => Vec::new(),
    };
    let unaligned = channel.filter(ChannelHandle::unaligned).map(|channel| {
        let key = key.clone();
        let record: Recorder<T> = Box::new(move |w, watermark, e| {
            w.push_with(&key(&e.value), |out| {
                watermark.millis().encode(out);
                e.encode(out);
            });
        });
        Unaligned {
            channel,
            record,
            buffered: (0..shards).map(|_| VecDeque::new()).collect(),
            read_ahead_max: scope.config().ring.ring_capacity_batches.max(1) * READ_AHEAD_BATCHES_PER_RING,
            ended: vec![false; shards],
            last: CheckpointId(0),
            current: None,
            next_buffer: 0,
            seen: vec![(EventTime::MIN, false); shards],
        }
    });
    let receiving = Rc::new(RefCell::new(Receiving {
        shard,
        progress: Progress::new(shards),
        align: Align::new(shards),
        held: VecDeque::new(),
        out: out.clone(),
        restored,
        unaligned,
    }));
    let batch_records = scope.config().batch_records.max(1);
    let (senders, inbox) = if shards > 1 {
        let rings = scope.next_exchange_rings::<Event<T>>();
        (rings.outbox.into_senders(), Some(rings.inbox))
    } else {
        (vec![None], None)
    };
    let rings = scope.measure_rings(senders.iter().enumerate().filter(|(_, s)| s.is_some()).map(|(to, _)| to));
    let sending = Rc::new(RefCell::new(Sending::new(
        (shard, shards),
        scope.config().key_groups,
        key,
        (batch_records, !scope.config().watermark_interval.is_zero()),
        senders,
        receiving.clone(),
        rings,
    )));
    upstream.borrow_mut().attach(Box::new(Shared(sending.clone())));
    if let Some(inbox) = inbox {
        scope.add_pending(sending);
        scope.add_input(Box::new(RingInput { inbox, receiving, ended: false }));
    }
    out
}
