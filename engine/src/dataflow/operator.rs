//! The push interface between operators of one shard, and the [`Output`] port a stream is.
//!
//! Operators are synchronous: a batch pushed into one runs through every operator
//! downstream of it on the same shard before the push returns, without a copy or a queue
//! in between. Only an exchange (`key_by`) and the sinks hand records to someone else;
//! they keep what they could not hand over yet as *pending*, which the shard's driver
//! flushes, and the driver pulls no new source records while anything is pending. That is
//! the whole backpressure story: bounded rings, bounded pending, and a pull-based source.
//!
//! Lifecycle of an input, as every operator sees it: any number of batches, watermarks
//! (non-decreasing) and idle/active changes, then one `on_end`.

use std::{cell::RefCell, rc::Rc, sync::Arc};

use sluice_io::EventTime;

use super::{Event, checkpoint::Barrier, metrics::StreamCells};

/// A consumer of one stream, owned by the [`Output`] of the stream it consumes.
pub trait Operator<T> {
    /// Records, in the order the upstream emitted them. The operator takes what it keeps
    /// out of `batch` (`drain`, `retain`, `append`); the caller clears what is left and
    /// reuses the allocation, so a steady stream allocates nothing.
    fn on_batch(&mut self, batch: &mut Vec<Event<T>>);
    /// No later record of this input will carry a time at or below `watermark`.
    fn on_watermark(&mut self, watermark: EventTime);
    /// The input went idle (its watermark must not hold back the others) or active again.
    fn on_idle(&mut self, idle: bool);
    /// The input has ended.
    fn on_end(&mut self);
    /// Checkpoint barrier: every record before it belongs to the checkpoint, none after.
    /// An operator with state snapshots it now; one with an output passes the barrier on
    /// after whatever it emits for the records before it. The default ignores it, which
    /// suits only operators with no state and no output (a callback sink).
    fn on_barrier(&mut self, barrier: Barrier) {
        let _ = barrier;
    }
}

/// The output port of an operator: the consumers of its stream.
///
/// With one consumer a batch is handed to it; with several (a stream used twice, which
/// needs `T: Clone`) each but the last gets a copy.
pub struct Output<T> {
    consumers: Vec<Box<dyn Operator<T>>>,
    copy: Vec<Event<T>>,
    cloner: Option<Cloner<T>>,
    watermark: EventTime,
    idle: bool,
    ended: bool,
    /// The stream's metrics (records, watermark), written by this shard only.
    cells: Option<Arc<StreamCells>>,
}

/// Copies a batch for one more consumer.
type Cloner<T> = fn(&[Event<T>]) -> Vec<Event<T>>;

/// An [`Output`] shared between the operator that writes it and the builder that attaches
/// consumers to it later.
pub type Port<T> = Rc<RefCell<Output<T>>>;

impl<T> Default for Output<T> {
    fn default() -> Self {
        Output {
            consumers: Vec::new(),
            copy: Vec::new(),
            cloner: None,
            watermark: EventTime::MIN,
            idle: false,
            ended: false,
            cells: None,
        }
    }
}

impl<T> std::fmt::Debug for Output<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("consumers", &self.consumers.len())
            .field("watermark", &self.watermark)
            .field("idle", &self.idle)
            .field("ended", &self.ended)
            .finish()
    }
}

impl<T: 'static> Output<T> {
    /// A new, unconnected port.
    #[must_use]
    pub fn port() -> Port<T> {
        Rc::new(RefCell::new(Output::default()))
    }

    /// Attaches a consumer. A port with more than one needs [`Output::allow_copies`] first.
    pub fn attach(&mut self, consumer: Box<dyn Operator<T>>) {
        assert!(
            self.consumers.is_empty() || self.cloner.is_some(),
            "a stream consumed twice must be cloned (Stream::clone) so its records can be copied"
        );
        self.consumers.push(consumer);
    }

    /// Lets the port feed several consumers, copying batches for all but the last.
    pub fn allow_copies(&mut self)
    where
        T: Clone,
    {
        self.cloner = Some(|batch| batch.to_vec());
    }

    /// The last watermark pushed.
    #[must_use]
    pub fn watermark(&self) -> EventTime {
        self.watermark
    }

    /// Counts what passes this port into `cells` from now on.
    pub(crate) fn measure(&mut self, cells: Arc<StreamCells>) {
        self.cells = Some(cells);
    }

    /// Pushes records downstream; `batch` is left empty, its allocation kept.
    pub fn push(&mut self, batch: &mut Vec<Event<T>>) {
        if batch.is_empty() {
            return;
        }
        if let Some(cells) = &self.cells {
            cells.records.add(batch.len() as u64);
        }
        if let Some((last, rest)) = self.consumers.split_last_mut() {
            for consumer in rest {
                self.copy = (self.cloner.expect("checked on attach"))(batch);
                consumer.on_batch(&mut self.copy);
            }
            last.on_batch(batch);
        }
        batch.clear();
    }

    /// Advances the watermark; a watermark at or below the last one is not forwarded.
    pub fn watermark_to(&mut self, watermark: EventTime) {
        if watermark <= self.watermark || self.ended {
            return;
        }
        self.watermark = watermark;
        if let Some(cells) = &self.cells {
            cells.watermark_ms.set(watermark.0);
        }
        for consumer in &mut self.consumers {
            consumer.on_watermark(watermark);
        }
    }

    /// Marks the stream idle or active; unchanged states are not forwarded.
    pub fn set_idle(&mut self, idle: bool) {
        if idle == self.idle || self.ended {
            return;
        }
        self.idle = idle;
        for consumer in &mut self.consumers {
            consumer.on_idle(idle);
        }
    }

    /// Passes a checkpoint barrier to every consumer (not after the end).
    pub fn barrier(&mut self, barrier: Barrier) {
        if self.ended {
            return;
        }
        for consumer in &mut self.consumers {
            consumer.on_barrier(barrier);
        }
    }

    /// Ends the stream (once).
    pub fn end(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        if let Some(cells) = &self.cells {
            cells.ended.set(1);
        }
        for consumer in &mut self.consumers {
            consumer.on_end();
        }
    }
}

/// The combined progress of several inputs: the minimum watermark over those that are
/// neither idle nor ended, idle when all of them are idle or ended.
#[derive(Debug, Clone)]
pub struct Progress {
    inputs: Vec<InputProgress>,
}

#[derive(Debug, Clone, Copy)]
struct InputProgress {
    watermark: EventTime,
    idle: bool,
    ended: bool,
}

impl Progress {
    /// `inputs` inputs, each at `EventTime::MIN`, active.
    #[must_use]
    pub fn new(inputs: usize) -> Self {
        Progress { inputs: vec![InputProgress { watermark: EventTime::MIN, idle: false, ended: false }; inputs] }
    }

    /// Records input `i`'s watermark.
    pub fn watermark(&mut self, i: usize, watermark: EventTime) {
        let input = &mut self.inputs[i];
        input.watermark = input.watermark.max(watermark);
    }

    /// Input `i`'s watermark.
    pub(crate) fn input_watermark(&self, i: usize) -> EventTime {
        self.inputs[i].watermark
    }

    /// Records input `i` going idle or active.
    pub fn idle(&mut self, i: usize, idle: bool) {
        self.inputs[i].idle = idle;
    }

    /// Records input `i` ending: it holds nothing back from now on.
    pub fn end(&mut self, i: usize) {
        self.inputs[i].ended = true;
    }

    /// Whether every input has ended.
    #[must_use]
    pub fn all_ended(&self) -> bool {
        self.inputs.iter().all(|i| i.ended)
    }

    /// Whether every input still running is idle (and one is).
    #[must_use]
    pub fn all_idle(&self) -> bool {
        let mut running = self.inputs.iter().filter(|i| !i.ended).peekable();
        running.peek().is_some() && running.all(|i| i.idle)
    }

    /// The combined watermark: the minimum over active inputs; with none active, the
    /// maximum over all (idle inputs do not hold time back, and ended ones have passed it).
    #[must_use]
    pub fn combined(&self) -> EventTime {
        let active = self.inputs.iter().filter(|i| !i.idle && !i.ended).map(|i| i.watermark).min();
        match active {
            Some(watermark) => watermark,
            None if self.all_ended() => EventTime::MAX,
            None => self.inputs.iter().filter(|i| !i.ended).map(|i| i.watermark).max().unwrap_or(EventTime::MIN),
        }
    }

    /// Forwards the combined state to `out`.
    pub fn forward<T: 'static>(&self, out: &mut Output<T>) {
        if self.all_ended() {
            out.end();
            return;
        }
        let idle = self.all_idle();
        if !idle {
            out.set_idle(false);
        }
        out.watermark_to(self.combined());
        if idle {
            out.set_idle(true);
        }
    }
}

/// An operator shared between the port that feeds it and something else on the shard
/// (the driver, as a ticker or a pending output), registered with that other side as the
/// same `Rc`.
pub(crate) struct Shared<O>(pub(crate) Rc<RefCell<O>>);

impl<T, O: Operator<T>> Operator<T> for Shared<O> {
    fn on_batch(&mut self, batch: &mut Vec<Event<T>>) {
        self.0.borrow_mut().on_batch(batch);
    }
    fn on_watermark(&mut self, watermark: EventTime) {
        self.0.borrow_mut().on_watermark(watermark);
    }
    fn on_idle(&mut self, idle: bool) {
        self.0.borrow_mut().on_idle(idle);
    }
    fn on_end(&mut self) {
        self.0.borrow_mut().on_end();
    }
    fn on_barrier(&mut self, barrier: Barrier) {
        self.0.borrow_mut().on_barrier(barrier);
    }
}

/// What an input delivered while it was held for barrier alignment (by a union or a join).
pub(crate) enum Held<T> {
    Batch(Vec<Event<T>>),
    Watermark(EventTime),
    Idle(bool),
    End,
}

/// Barrier alignment over several inputs: once barrier *n* arrives on an input, that
/// input is *blocked* (what it delivers next belongs after the checkpoint) until the
/// barrier has arrived on every input that has not ended.
#[derive(Debug, Clone)]
pub(crate) struct Align {
    arrived: Vec<bool>,
    ended: Vec<bool>,
    current: Option<Barrier>,
}

impl Align {
    pub(crate) fn new(inputs: usize) -> Align {
        Align { arrived: vec![false; inputs], ended: vec![false; inputs], current: None }
    }

    /// Whether input `i` is held back, waiting for the others' barriers.
    pub(crate) fn blocked(&self, i: usize) -> bool {
        self.current.is_some() && self.arrived[i]
    }

    /// Barrier `barrier` arrived on input `i`: the barrier to pass on if that completes
    /// the alignment.
    pub(crate) fn arrive(&mut self, i: usize, barrier: Barrier) -> Option<Barrier> {
        self.current.get_or_insert(barrier);
        self.arrived[i] = true;
        self.complete()
    }

    /// Input `i` ended: it will bring no barrier. The barrier to pass on if that
    /// completes the alignment.
    pub(crate) fn end(&mut self, i: usize) -> Option<Barrier> {
        self.ended[i] = true;
        if self.current.is_some() { self.complete() } else { None }
    }

    fn complete(&mut self) -> Option<Barrier> {
        if self.arrived.iter().zip(&self.ended).all(|(a, e)| *a || *e) {
            self.arrived.iter_mut().for_each(|a| *a = false);
            self.current.take()
        } else {
            None
        }
    }
}
