//! The global window: one window per key spanning all time, fired by a [`Trigger`] after
//! each record (for example every `n` records, [`CountTrigger`]). It never fires on the
//! watermark, so nothing is ever late for it.

use std::{cell::RefCell, hash::Hash, rc::Rc, time::Instant};

use rustc_hash::FxHashMap;
use sluice_io::EventTime;

use super::{Firing, Window, emit::Emit, function::WindowFunction};
use crate::dataflow::{
    Event, Operator, Port, Scope,
    checkpoint::{Barrier, Data, StateHandle},
    operator::Shared,
    scope::Ticker,
};

/// What a trigger decides after a record joins a key's global window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerAction {
    /// Keep collecting.
    Continue,
    /// Emit the window's result and keep its contents.
    Fire,
    /// Emit the window's result and start the key's window afresh.
    FireAndPurge,
}

/// Decides when a key's global window fires.
pub trait Trigger: 'static {
    /// Called after a record at `time` joins a key's window, which now holds `count`
    /// records since it was last purged.
    fn on_element(&mut self, time: EventTime, count: u64) -> TriggerAction;
}

/// Fires and purges a key's window every `n` records.
#[derive(Debug, Clone, Copy)]
pub struct CountTrigger(pub u64);

impl Trigger for CountTrigger {
    fn on_element(&mut self, _: EventTime, count: u64) -> TriggerAction {
        if count >= self.0.max(1) { TriggerAction::FireAndPurge } else { TriggerAction::Continue }
    }
}

const GLOBAL: Window = Window { start: EventTime::MIN, end: EventTime::MAX };

pub(crate) struct Global<K, T, F: WindowFunction<K, T>> {
    trigger: Box<dyn Trigger>,
    function: F,
    emit: Emit<K, T, F::Out>,
    keys: FxHashMap<K, (F::Acc, u64)>,
    state: Option<StateHandle>,
}

pub(crate) fn attach<K, T, F>(
    scope: &Scope,
    input: &Port<T>,
    trigger: Box<dyn Trigger>,
    function: F,
    emit: Emit<K, T, F::Out>,
) where
    K: Hash + Eq + Clone + Data,
    T: 'static,
    F: WindowFunction<K, T>,
    F::Acc: Data,
{
    let early = emit.spec.early;
    let state = scope.state_handle();
    let mut keys = FxHashMap::default();
    if let Some(state) = &state {
        state
            .restore(|(count, key): (u64, K), acc: F::Acc| {
                keys.insert(key, (acc, count));
            })
            .unwrap_or_else(|e| panic!("restoring a global window operator: {e}"));
    }
    let op = Rc::new(RefCell::new(Global { trigger, function, emit, keys, state }));
    if early.is_some() {
        scope.add_ticker(op.clone());
    }
    input.borrow_mut().attach(Box::new(Shared(op)));
}

impl<K: Hash + Eq + Clone + Data, T: 'static, F: WindowFunction<K, T>> Operator<T> for Global<K, T, F>
where
    F::Acc: Data,
{
    fn on_batch(&mut self, batch: &mut Vec<Event<T>>) {
        for event in batch.drain(..) {
            let key = (self.emit.spec.key)(&event.value);
            let (acc, count) = self.keys.entry(key.clone()).or_insert_with(|| (self.function.create(), 0));
            self.function.add(acc, &event);
            *count += 1;
            match self.trigger.on_element(event.time, *count) {
                TriggerAction::Continue => {}
                TriggerAction::Fire => {
                    let value = self.function.result(&key, &GLOBAL, acc);
                    self.emit.result(key, GLOBAL, value, Firing::OnTime);
                }
                TriggerAction::FireAndPurge => {
                    let (acc, _) = self.keys.remove(&key).expect("just added");
                    let value = self.function.result(&key, &GLOBAL, &acc);
                    self.emit.result(key, GLOBAL, value, Firing::OnTime);
                }
            }
        }
        self.emit.flush();
    }

    fn on_watermark(&mut self, watermark: EventTime) {
        self.emit.watermark(watermark);
    }

    fn on_idle(&mut self, idle: bool) {
        self.emit.idle(idle);
    }

    fn on_end(&mut self) {
        self.emit.end();
    }

    fn on_barrier(&mut self, barrier: Barrier) {
        if let Some(state) = &self.state {
            let mut w = state.writer();
            for (key, (acc, count)) in &self.keys {
                w.push_with(key, |out| {
                    count.encode(out);
                    key.encode(out);
                    acc.encode(out);
                });
            }
            state.report(barrier, EventTime::MIN, w);
        }
        self.emit.barrier(barrier);
    }
}

impl<K: Hash + Eq + Clone + 'static, T: 'static, F: WindowFunction<K, T>> Ticker for Global<K, T, F> {
    fn tick(&mut self, now: Instant) -> Option<Instant> {
        let interval = self.emit.spec.early?;
        for (key, (acc, _)) in &self.keys {
            let value = self.function.result(key, &GLOBAL, acc);
            self.emit.result(key.clone(), GLOBAL, value, Firing::Early);
        }
        self.emit.flush();
        Some(now + interval)
    }
}
