//! The operator that runs a keyed process function on one shard: the state of every key
//! the shard owns, both timer queues, and the order of output and watermarks.
//!
//! It is fed by the keyed stream's port and, for processing-time timers, ticked by the
//! shard's driver; both share it through an `Rc<RefCell<_>>`, and the driver is one task,
//! so they never overlap. Output emitted by the function collects in one batch, pushed
//! downstream when a call sequence ends (or a batch is full), and always before the
//! watermark that made timers fire, so what a timer emits is never late downstream because
//! of the watermark that caused it.

use std::{
    hash::Hash,
    rc::Rc,
    time::{Duration, Instant},
};

use rustc_hash::FxHashMap;
use sluice_io::EventTime;

use super::{KeyedProcessFunction, KeyedState, ProcessContext, TimeDomain, Timer, context::Timers, timers::TimerQueue};
use crate::dataflow::{
    Event, Operator, Port,
    checkpoint::{Barrier, Data, StateHandle},
    scope::{TickRequest, Ticker, request_tick},
};

pub(crate) struct ProcessOperator<K, T, F: KeyedProcessFunction<K, T>> {
    function: F,
    key: Rc<dyn Fn(&T) -> K>,
    states: FxHashMap<K, F::State>,
    timers: Timers<K>,
    /// The input's last watermark.
    watermark: EventTime,
    buf: Vec<Event<F::Out>>,
    batch_records: usize,
    /// Where the operator asks the driver to tick it when a record registered a
    /// processing-time timer earlier than the next tick the driver knows of.
    tick: TickRequest,
    out: Port<F::Out>,
    ended: bool,
    state: Option<StateHandle>,
}

/// What a process operator's snapshot entry holds, by kind: a key's state, or one of its
/// event-time or processing-time timers.
const STATE: u8 = 0;
const EVENT_TIMER: u8 = 1;
const PROCESSING_TIMER: u8 = 2;

impl<K, T, F> ProcessOperator<K, T, F>
where
    K: Hash + Eq + Clone + Data,
    T: 'static,
    F: KeyedProcessFunction<K, T>,
    F::State: Data,
{
    pub(crate) fn new(
        function: F,
        key: Rc<dyn Fn(&T) -> K>,
        out: Port<F::Out>,
        batch_records: usize,
        tick: TickRequest,
        state: Option<StateHandle>,
    ) -> Self {
        let mut op = ProcessOperator {
            function,
            key,
            states: FxHashMap::default(),
            timers: Timers::default(),
            watermark: EventTime::MIN,
            buf: Vec::new(),
            batch_records: batch_records.max(1),
            tick,
            out,
            ended: false,
            state,
        };
        op.restore();
        op
    }

    /// Takes in the restored state of the keys this shard owns, if any.
    fn restore(&mut self) {
        let Some(handle) = self.state.clone() else { return };
        let mut entries: Vec<((u8, K), Vec<u8>)> = Vec::new();
        let decode_state = |bytes: &[u8]| F::State::decode(&mut &bytes[..]);
        let decode_time = |bytes: &[u8]| i64::decode(&mut &bytes[..]);
        let watermark = handle
            .restore(|key, value| entries.push((key, value)))
            .unwrap_or_else(|e| panic!("restoring a process operator: {e}"));
        for ((kind, key), value) in entries {
            let decoded = match kind {
                STATE => decode_state(&value).map(|s| {
                    self.states.insert(key, s);
                }),
                EVENT_TIMER | PROCESSING_TIMER => decode_time(&value).map(|time| {
                    let queue = if kind == EVENT_TIMER { &mut self.timers.event } else { &mut self.timers.processing };
                    queue.register(&key, EventTime::from_millis(time));
                }),
                other => Err(crate::dataflow::checkpoint::StateError(format!("unknown entry kind {other}"))),
            };
            decoded.unwrap_or_else(|e| panic!("restoring a process operator: {e}"));
        }
        if let Some(w) = watermark {
            self.watermark = w;
        }
    }

    /// Runs `call` on `key`'s state (a fresh one if the key holds none), then keeps the
    /// state only if it is not empty.
    fn with_state(
        &mut self,
        key: K,
        time: EventTime,
        call: impl FnOnce(&mut F, &K, &mut F::State, &mut ProcessContext<'_, K, F::Out>),
    ) {
        // Taking the state out (rather than borrowing it in place) lets the context borrow
        // the timers and the output next to it, and makes dropping an emptied key free.
        let mut state = self.states.remove(&key).unwrap_or_default();
        let mut ctx =
            ProcessContext { key: &key, time, watermark: self.watermark, timers: &mut self.timers, out: &mut self.buf };
        call(&mut self.function, &key, &mut state, &mut ctx);
        if !state.is_empty() {
            self.states.insert(key, state);
        }
    }

    /// When the earliest processing-time timer is due, on the monotonic clock.
    fn next_processing_timer(&self, now: Instant) -> Option<Instant> {
        let next = self.timers.processing.next_time()?;
        let wait = u64::try_from(next.millis().saturating_sub(EventTime::now().millis())).unwrap_or(0);
        Some(now + Duration::from_millis(wait))
    }

    /// Fires every timer of `domain` due at `upto`, including those the firing timers
    /// register at or before it, in time order.
    fn fire(&mut self, domain: TimeDomain, upto: EventTime) {
        loop {
            let queue: &mut TimerQueue<K> = match domain {
                TimeDomain::EventTime => &mut self.timers.event,
                TimeDomain::ProcessingTime => &mut self.timers.processing,
            };
            let Some((time, key)) = queue.pop_due(upto) else { break };
            self.with_state(key, time, |f, key, state, ctx| f.on_timer(key, Timer { time, domain }, state, ctx));
            if self.buf.len() >= self.batch_records {
                self.out.borrow_mut().push(&mut self.buf);
            }
        }
        self.out.borrow_mut().push(&mut self.buf);
    }
}

impl<K, T, F> Operator<T> for ProcessOperator<K, T, F>
where
    K: Hash + Eq + Clone + Data,
    T: 'static,
    F: KeyedProcessFunction<K, T>,
    F::State: Data,
{
    fn on_batch(&mut self, batch: &mut Vec<Event<T>>) {
        for event in batch.drain(..) {
            let key = (self.key)(&event.value);
            let time = event.time;
            self.with_state(key, time, |f, key, state, ctx| f.process_element(key, event, state, ctx));
        }
        self.out.borrow_mut().push(&mut self.buf);
        if let Some(at) = self.next_processing_timer(Instant::now()) {
            request_tick(&self.tick, at);
        }
    }

    fn on_watermark(&mut self, watermark: EventTime) {
        self.watermark = watermark;
        self.fire(TimeDomain::EventTime, watermark);
        self.out.borrow_mut().watermark_to(watermark);
    }

    fn on_idle(&mut self, idle: bool) {
        self.out.borrow_mut().set_idle(idle);
    }

    fn on_barrier(&mut self, barrier: Barrier) {
        self.out.borrow_mut().push(&mut self.buf);
        if let Some(handle) = &self.state {
            let mut w = handle.writer();
            for (key, state) in &self.states {
                w.push_grouped(key, &(STATE, key.clone()), &to_bytes(state));
            }
            for (kind, queue) in [(EVENT_TIMER, &self.timers.event), (PROCESSING_TIMER, &self.timers.processing)] {
                for (time, key) in queue.iter() {
                    w.push_grouped(key, &(kind, key.clone()), &to_bytes(&time.millis()));
                }
            }
            handle.report(barrier, self.watermark, w);
        }
        self.out.borrow_mut().barrier(barrier);
    }

    fn on_end(&mut self) {
        // A drained input has already passed the end of time as its watermark, which fired
        // every event-time timer; one stopped without draining discards them, as windows
        // discard their open windows. Processing-time timers do not outlive the input (as in
        // Flink): the pipeline is finishing and nothing downstream would take their output.
        self.ended = true;
        self.timers.event.clear();
        self.timers.processing.clear();
        self.states = FxHashMap::default();
        self.out.borrow_mut().end();
    }
}

impl<K, T, F> Ticker for ProcessOperator<K, T, F>
where
    K: Hash + Eq + Clone + Data,
    T: 'static,
    F: KeyedProcessFunction<K, T>,
    F::State: Data,
{
    fn tick(&mut self, now: Instant) -> Option<Instant> {
        if self.ended {
            return None;
        }
        let wall = EventTime::now();
        if self.timers.processing.next_time().is_some_and(|t| t <= wall) {
            self.fire(TimeDomain::ProcessingTime, wall);
        }
        self.next_processing_timer(now)
    }
}

/// `value`'s encoding.
fn to_bytes<V: Data>(value: &V) -> Vec<u8> {
    let mut buf = Vec::new();
    value.encode(&mut buf);
    buf
}
