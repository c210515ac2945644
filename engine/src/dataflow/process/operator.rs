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

use rustc_hash::{FxHashMap, FxHashSet};
use sluice_io::{CheckpointId, EventTime};

use super::{
    KeyedProcessFunction, KeyedState, ProcessContext, TimeDomain, Timer,
    context::Timers,
    timers::TimerQueue,
    ttl::{TtlClock, TtlSweep},
};
use crate::dataflow::{
    Event, Operator, Port,
    checkpoint::{Barrier, Data, GroupWriter, StateError, StateHandle},
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
    /// With checkpoints: keys whose state or timers changed since the last snapshot, and
    /// the sets of earlier snapshots not yet covered by a completed checkpoint.
    dirty: Option<FxHashSet<K>>,
    history: std::collections::VecDeque<(CheckpointId, FxHashSet<K>)>,
    /// The wall clock read for the current batch or timer round (TTL state's processing
    /// time).
    wall: EventTime,
    /// The highest watermark restored over the shards: event-time TTL follows the
    /// watermark but never goes below this ([`ProcessContext::ttl_watermark`]).
    ttl_floor: EventTime,
    /// When the state has a time to live: how the operator sweeps it, and the keys left
    /// to visit in the current round (refilled with every key when it runs out).
    sweep: Option<TtlSweep>,
    sweep_queue: Vec<K>,
}

/// One key in a process operator's snapshot: its state (encoded), and its event-time and
/// processing-time timers (ms). A delta snapshot writes `None` for a key that is gone.
type KeyEntry<S> = (S, Vec<i64>, Vec<i64>);

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
        sweep: Option<TtlSweep>,
    ) -> Self {
        ProcessOperator {
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
            dirty: state.as_ref().map(|_| FxHashSet::default()),
            history: std::collections::VecDeque::new(),
            state,
            wall: EventTime::now(),
            ttl_floor: EventTime::MIN,
            sweep,
            sweep_queue: Vec::new(),
        }
    }

    /// Takes in the restored state of the keys this shard owns, if any (run once the graph
    /// is built: [`StateHandle::on_restore`]).
    pub(crate) fn restore(&mut self, handle: &StateHandle) -> Result<(), StateError> {
        // Entries come oldest first (a whole snapshot, then deltas): the last for a key
        // wins, and a deletion removes it.
        let mut keys: FxHashMap<K, Option<KeyEntry<F::State>>> = FxHashMap::default();
        let watermark = handle.restore(|key: K, entry: Option<KeyEntry<F::State>>| {
            keys.insert(key, entry);
        })?;
        for (key, entry) in keys {
            let Some((state, event, processing)) = entry else { continue };
            for t in event {
                self.timers.event.register(&key, EventTime::from_millis(t));
            }
            for t in processing {
                self.timers.processing.register(&key, EventTime::from_millis(t));
            }
            self.states.insert(key, state);
        }
        if let Some(w) = watermark {
            self.watermark = w;
        }
        if let Some(w) = handle.restored_watermark_max() {
            self.ttl_floor = w;
        }
        Ok(())
    }

    /// Writes the keys in `keys` (every key when `None`) to `w`: each key's state and
    /// timers, or a deletion for a key that holds nothing now.
    fn write_keys(&self, w: &mut GroupWriter, keys: Option<&FxHashSet<K>>) {
        let mut timers: FxHashMap<&K, (Vec<i64>, Vec<i64>)> = FxHashMap::default();
        for (time, key) in self.timers.event.iter() {
            if keys.is_none_or(|k| k.contains(key)) {
                timers.entry(key).or_default().0.push(time.millis());
            }
        }
        for (time, key) in self.timers.processing.iter() {
            if keys.is_none_or(|k| k.contains(key)) {
                timers.entry(key).or_default().1.push(time.millis());
            }
        }
        let mut entry = |key: &K, timers: &mut FxHashMap<&K, (Vec<i64>, Vec<i64>)>| {
            let (event, processing) = timers.remove(key).unwrap_or_default();
            // As the entry `(key, Option<KeyEntry>)`, written field by field: `None` for a
            // key that holds nothing now; a key with timers but no state has the default.
            let state = self.states.get(key);
            if state.is_none() && event.is_empty() && processing.is_empty() {
                w.push_grouped(key, key, &None::<()>);
                return;
            }
            w.push_with(key, |out| {
                key.encode(out);
                1u8.encode(out);
                match state {
                    Some(state) => state.encode(out),
                    None => F::State::default().encode(out),
                }
                event.encode(out);
                processing.encode(out);
            });
        };
        match keys {
            Some(keys) => keys.iter().for_each(|k| entry(k, &mut timers)),
            None => {
                self.states.keys().for_each(|k| entry(k, &mut timers));
                let rest: Vec<&K> = timers.keys().copied().collect();
                rest.into_iter().for_each(|k| entry(k, &mut timers));
            }
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
        if let Some(dirty) = &mut self.dirty {
            dirty.insert(key.clone());
        }
        let mut state = self.states.remove(&key).unwrap_or_default();
        let mut ctx = ProcessContext {
            key: &key,
            time,
            watermark: self.watermark,
            wall: self.wall,
            ttl_watermark: self.watermark.max(self.ttl_floor),
            timers: &mut self.timers,
            out: &mut self.buf,
        };
        call(&mut self.function, &key, &mut state, &mut ctx);
        if !state.is_empty() {
            self.states.insert(key, state);
        }
    }

    /// Removes what has expired from the next keys of the sweep's round (up to its
    /// `keys`), forgetting keys left empty; a key that changed is dirty for the next
    /// snapshot. Nothing without TTL state.
    fn sweep_expired(&mut self) {
        let Some(sweep) = self.sweep else { return };
        if self.sweep_queue.is_empty() {
            self.sweep_queue.extend(self.states.keys().cloned());
        }
        let clock = TtlClock::at(self.wall, self.watermark.max(self.ttl_floor));
        let from = self.sweep_queue.len().saturating_sub(sweep.keys);
        for key in self.sweep_queue.drain(from..) {
            let Some(state) = self.states.get_mut(&key) else { continue };
            if state.expire(&clock) {
                if state.is_empty() {
                    self.states.remove(&key);
                }
                if let Some(dirty) = &mut self.dirty {
                    dirty.insert(key);
                }
            }
        }
    }

    /// Before a snapshot writes `keys` (every key when `None`): removes what has expired
    /// from them, so no snapshot holds an expired value. Nothing without TTL state.
    fn expire_keys(&mut self, keys: Option<&FxHashSet<K>>) {
        if self.sweep.is_none() {
            return;
        }
        let clock = TtlClock::at(self.wall, self.watermark.max(self.ttl_floor));
        let mut emptied = Vec::new();
        let mut visit = |key: &K, state: &mut F::State| {
            if state.expire(&clock) && state.is_empty() {
                emptied.push(key.clone());
            }
        };
        match keys {
            Some(keys) => keys.iter().for_each(|k| {
                if let Some(state) = self.states.get_mut(k) {
                    visit(k, state);
                }
            }),
            None => self.states.iter_mut().for_each(|(k, state)| visit(k, state)),
        }
        for key in emptied {
            self.states.remove(&key);
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
        self.wall = EventTime::now();
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
        self.wall = EventTime::now();
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
        let advanced = watermark > self.watermark;
        self.watermark = watermark;
        self.fire(TimeDomain::EventTime, watermark);
        if advanced {
            self.sweep_expired();
        }
        self.out.borrow_mut().watermark_to(watermark);
    }

    fn on_idle(&mut self, idle: bool) {
        self.out.borrow_mut().set_idle(idle);
    }

    fn on_barrier(&mut self, barrier: Barrier) {
        self.out.borrow_mut().push(&mut self.buf);
        if let Some(handle) = self.state.clone() {
            self.wall = EventTime::now();
            let mut w = handle.writer();
            // Keys changed since each earlier snapshot this operator took; those a completed
            // checkpoint covers are no longer needed.
            let changed = std::mem::take(self.dirty.get_or_insert_with(FxHashSet::default));
            // A later snapshot builds on a checkpoint at least as new as the last completed
            // one (or this snapshot's base, which is older): older sets are not needed.
            let base = handle.base(barrier);
            let keep_after = base.unwrap_or(CheckpointId(u64::MAX)).min(handle.completed());
            self.history.retain(|(id, _)| *id > keep_after);
            let delta = match base {
                Some(base) => {
                    let mut keys = changed.clone();
                    for (_, set) in self.history.iter().filter(|(id, _)| *id > base) {
                        keys.extend(set.iter().cloned());
                    }
                    self.expire_keys(Some(&keys));
                    self.write_keys(&mut w, Some(&keys));
                    true
                }
                None => {
                    self.expire_keys(None);
                    self.write_keys(&mut w, None);
                    false
                }
            };
            self.history.push_back((barrier.id, changed));
            handle.report_delta(barrier, self.watermark, w, delta);
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
        let sweep_tick = self.sweep.and_then(|s| s.tick);
        if sweep_tick.is_some() {
            self.wall = wall;
            self.sweep_expired();
        }
        let timer = self.next_processing_timer(now);
        match sweep_tick {
            Some(every) => Some(timer.map_or(now + every, |t| t.min(now + every))),
            None => timer,
        }
    }
}
