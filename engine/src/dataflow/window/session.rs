//! Session windows: per key, records closer than the gap form one session `[first, last +
//! gap)`; a record whose own window `[t, t + gap)` overlaps several sessions merges them
//! (a record exactly a gap after a session starts a new one: see [`touches`]).
//!
//! Each key keeps its sessions sorted by start. Firing is driven by a timer map from a
//! session's last instant to its keys; entries made stale by a merge or an extension are
//! skipped when they come due, since the session they named has moved on.

use std::{collections::BTreeMap, hash::Hash};

use rustc_hash::FxHashMap;
use sluice_io::EventTime;

use super::{
    Firing, Window, WindowEntry,
    emit::Emit,
    function::WindowFunction,
    skeleton::{self, WindowKind},
};
use crate::dataflow::{
    Event, Port, Scope,
    checkpoint::{Barrier, Data, StateError, StateHandle},
};

struct Session<A> {
    window: Window,
    acc: A,
    fired: bool,
}

pub(crate) struct Sessions<K, T, F: WindowFunction<K, T>> {
    gap: i64,
    function: F,
    emit: Emit<K, T, F::Out>,
    keys: FxHashMap<K, Vec<Session<F::Acc>>>,
    /// Keys with a session whose last instant is the map's key (may be stale).
    due: BTreeMap<EventTime, Vec<K>>,
    /// Keys with a fired session kept for late updates until this time (may be stale).
    cleanup: BTreeMap<EventTime, Vec<K>>,
}

pub(crate) fn attach<K, T, F>(scope: &Scope, input: &Port<T>, gap: i64, function: F, emit: Emit<K, T, F::Out>)
where
    K: Hash + Eq + Clone + Data,
    T: 'static,
    F: WindowFunction<K, T>,
    F::Acc: Data,
{
    let state = scope.state_handle::<K, F::Acc>("window(session)");
    let op =
        Sessions { gap, function, emit, keys: FxHashMap::default(), due: BTreeMap::new(), cleanup: BTreeMap::new() };
    skeleton::attach(scope, input, op, state);
}

impl<K: Hash + Eq + Clone + Data, T: 'static, F: WindowFunction<K, T>> Sessions<K, T, F>
where
    F::Acc: Data,
{
    /// Takes in the restored sessions; returns the restored watermark.
    fn restore_sessions(&mut self, state: &StateHandle) -> Result<Option<EventTime>, StateError> {
        let mut restored: Vec<(WindowEntry<K>, F::Acc)> = Vec::new();
        let watermark = state.restore(|key, acc| restored.push((key, acc)))?;
        let lateness = self.emit.spec.lateness;
        for ((start, end, fired, key), acc) in restored {
            let window = Window { start: EventTime::from_millis(start), end: EventTime::from_millis(end) };
            let max = window.max_timestamp();
            if fired {
                self.cleanup
                    .entry(EventTime::from_millis(max.0.saturating_add(lateness)))
                    .or_default()
                    .push(key.clone());
            } else {
                self.due.entry(max).or_default().push(key.clone());
            }
            let sessions = self.keys.entry(key).or_default();
            let at = sessions.partition_point(|s| s.window.start < window.start);
            sessions.insert(at, Session { window, acc, fired });
        }
        Ok(watermark)
    }
}

/// Whether two windows share an instant (half-open: `[s, e)` and `[e, ..)` do not).
///
/// A record joins a session only if it is closer than the gap to one of its records, so
/// a record exactly a gap after a session's last one starts a new session. That keeps
/// sessions a function of the records alone: a session fires when the watermark reaches
/// `last + gap - 1`, and any record still on time then is at `last + gap` or later, so
/// no on-time record could have joined a session that already fired. (With touching
/// windows merged, as Flink's `TimeWindow.intersects` does, such a record merges or
/// not depending on whether the watermark got there first: a run and its replay after a
/// crash could cut different sessions.)
fn touches(a: &Window, b: &Window) -> bool {
    a.start < b.end && b.start < a.end
}

impl<K: Hash + Eq + Clone + 'static, T: 'static, F: WindowFunction<K, T>> Sessions<K, T, F> {
    fn add_one(&mut self, event: Event<T>, watermark: EventTime) {
        let key = (self.emit.spec.key)(&event.value);
        let own = Window { start: event.time, end: EventTime::from_millis(event.time.0.saturating_add(self.gap)) };
        let keeps_fired = self.emit.keeps_fired();
        let lateness = self.emit.spec.lateness;
        let sessions = self.keys.entry(key.clone()).or_default();
        let mut merged = own;
        for s in sessions.iter().filter(|s| touches(&s.window, &own)) {
            merged.start = merged.start.min(s.window.start);
            merged.end = merged.end.max(s.window.end);
        }
        let max = merged.max_timestamp();
        let late = max <= watermark;
        if late && !(keeps_fired && max.0.saturating_add(lateness) > watermark.0) {
            if sessions.is_empty() {
                self.keys.remove(&key);
            }
            self.emit.late(event);
            return;
        }
        // Take the touched sessions out and fold them into one.
        let mut acc = self.function.create();
        let mut i = 0;
        while i < sessions.len() {
            if touches(&sessions[i].window, &own) {
                let s = sessions.remove(i);
                self.function.merge(&mut acc, s.acc);
            } else {
                i += 1;
            }
        }
        self.function.add(&mut acc, &event);
        if late {
            // A late record within the lateness: the merged session fires again at once.
            let value = self.function.result(&key, &merged, &acc);
            self.emit.result(key.clone(), merged, value, Firing::Update);
            self.cleanup.entry(EventTime::from_millis(max.0.saturating_add(lateness))).or_default().push(key.clone());
        } else {
            self.due.entry(max).or_default().push(key.clone());
        }
        // A late merge has already fired (above); an on-time one fires when it is due.
        let fired = late;
        let at = sessions.partition_point(|s| s.window.start < merged.start);
        sessions.insert(at, Session { window: merged, acc, fired });
    }

    fn fire_due(&mut self, watermark: EventTime) {
        let keep = self.emit.keeps_fired();
        let lateness = self.emit.spec.lateness;
        while let Some(entry) = self.due.first_entry() {
            if *entry.key() > watermark {
                break;
            }
            for key in entry.remove() {
                let Some(sessions) = self.keys.get_mut(&key) else { continue };
                let mut i = 0;
                while i < sessions.len() {
                    let s = &mut sessions[i];
                    let max = s.window.max_timestamp();
                    if s.fired || max > watermark {
                        i += 1;
                        continue;
                    }
                    let value = self.function.result(&key, &s.window, &s.acc);
                    self.emit.result(key.clone(), s.window, value, Firing::OnTime);
                    if keep && max.0.saturating_add(lateness) > watermark.0 {
                        s.fired = true;
                        self.cleanup
                            .entry(EventTime::from_millis(max.0.saturating_add(lateness)))
                            .or_default()
                            .push(key.clone());
                        i += 1;
                    } else {
                        sessions.remove(i);
                    }
                }
                if sessions.is_empty() {
                    self.keys.remove(&key);
                }
            }
        }
        while let Some(entry) = self.cleanup.first_entry() {
            if *entry.key() > watermark {
                break;
            }
            for key in entry.remove() {
                let Some(sessions) = self.keys.get_mut(&key) else { continue };
                sessions.retain(|s| !(s.fired && s.window.max_timestamp().0.saturating_add(lateness) <= watermark.0));
                if sessions.is_empty() {
                    self.keys.remove(&key);
                }
            }
        }
    }
}

impl<K: Hash + Eq + Clone + Data, T: 'static, F: WindowFunction<K, T>> WindowKind<T> for Sessions<K, T, F>
where
    F::Acc: Data,
{
    type Key = K;
    type Out = F::Out;

    fn emit(&mut self) -> &mut Emit<K, T, F::Out> {
        &mut self.emit
    }

    fn add(&mut self, batch: &mut Vec<Event<T>>, watermark: EventTime) {
        for event in batch.drain(..) {
            self.add_one(event, watermark);
        }
    }

    fn fire(&mut self, watermark: EventTime) {
        self.fire_due(watermark);
    }

    fn snapshot(&mut self, state: &StateHandle, barrier: Barrier, watermark: EventTime) {
        let mut w = state.writer();
        for (key, sessions) in &self.keys {
            for s in sessions {
                w.push_with(key, |out| {
                    (s.window.start.millis(), s.window.end.millis(), s.fired).encode(out);
                    key.encode(out);
                    s.acc.encode(out);
                });
            }
        }
        state.report(barrier, watermark, w);
    }

    fn restore(&mut self, state: &StateHandle) -> Result<Option<EventTime>, StateError> {
        self.restore_sessions(state)
    }

    fn early(&mut self) {
        for (key, sessions) in &self.keys {
            for s in sessions.iter().filter(|s| !s.fired) {
                let value = self.function.result(key, &s.window, &s.acc);
                self.emit.result(key.clone(), s.window, value, Firing::Early);
            }
        }
    }
}
