//! The global window: one window per key spanning all time, fired by a [`Trigger`] after
//! each record (for example every `n` records, [`CountTrigger`]). It never fires on the
//! watermark, so nothing is ever late for it.

use std::hash::Hash;

use rustc_hash::FxHashMap;
use sluice_io::EventTime;

use super::{
    Firing, Window,
    emit::Emit,
    function::WindowFunction,
    skeleton::{self, WindowKind},
};
use crate::dataflow::{
    Event, Port, Scope,
    checkpoint::{Barrier, Data, StateError, StateHandle},
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
    let state = scope.state_handle::<K, (u64, F::Acc)>("window(global)");
    skeleton::attach(scope, input, Global { trigger, function, emit, keys: FxHashMap::default() }, state);
}

impl<K: Hash + Eq + Clone + Data, T: 'static, F: WindowFunction<K, T>> WindowKind<T> for Global<K, T, F>
where
    F::Acc: Data,
{
    type Key = K;
    type Out = F::Out;

    fn emit(&mut self) -> &mut Emit<K, T, F::Out> {
        &mut self.emit
    }

    fn add(&mut self, batch: &mut Vec<Event<T>>, _: EventTime) {
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
    }

    /// The global window fires on its trigger only.
    fn fire(&mut self, _: EventTime) {}

    fn snapshot(&mut self, state: &StateHandle, barrier: Barrier, _: EventTime) {
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

    fn restore(&mut self, state: &StateHandle) -> Result<Option<EventTime>, StateError> {
        let keys = &mut self.keys;
        state.restore(|(count, key): (u64, K), acc: F::Acc| {
            keys.insert(key, (acc, count));
        })?;
        // The global window never fires on the watermark: the restored one does not matter.
        Ok(None)
    }

    fn early(&mut self) {
        for (key, (acc, _)) in &self.keys {
            let value = self.function.result(key, &GLOBAL, acc);
            self.emit.result(key.clone(), GLOBAL, value, Firing::Early);
        }
    }
}
