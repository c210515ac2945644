//! Per-key state for a keyed process function: [`ValueState`], [`MapState`] and
//! [`ListState`], and [`KeyedState`], which lets the operator drop a key whose state is all
//! empty.
//!
//! A function's state is a plain struct (or tuple) of these, built with `Default` the first
//! time its key is seen on the shard. It lives in the operator's map on the shard that owns
//! the key and is handed to the function by `&mut` for one record or timer at a time, so
//! the state types are ordinary containers: no lookups by key, no serialization, no
//! interior mutability.

use std::{
    collections::hash_map::{self, Entry},
    hash::Hash,
};

use rustc_hash::FxHashMap;

use super::ttl::{TtlClock, TtlConfig};
use crate::dataflow::checkpoint::{Data, StateError};

/// State the operator can tell is empty. A key whose state is empty after a record or a
/// timer is removed from the operator's map, so keys that come and go (sessions, users,
/// accounts) do not accumulate: clearing a key's state is how a function releases it.
///
/// Implemented for the three state types, `()` (a function that keeps nothing), and tuples
/// of up to six; implement it for a struct of state fields as "every field is empty".
///
/// State with a time to live ([`TtlValueState`](super::TtlValueState) and the like) needs
/// the two provided methods too: a struct forwards them to each field
/// (`A::ttl_configs(configs); B::ttl_configs(configs);` and
/// `self.a.expire(clock) | self.b.expire(clock)`), as tuples do; without them its fields'
/// TTLs are not checked when the job is built and the operator does not sweep them (an
/// expired value is still never returned).
pub trait KeyedState {
    /// Whether nothing is held, so the key can be forgotten.
    fn is_empty(&self) -> bool;

    /// Adds the [`TtlConfig`] of every field with a time to live to `configs` (nothing for
    /// state without one, the default).
    fn ttl_configs(configs: &mut Vec<TtlConfig>)
    where
        Self: Sized,
    {
        let _ = configs;
    }

    /// Removes every value that has expired at `clock`; whether any was (nothing for state
    /// without a time to live, the default).
    fn expire(&mut self, clock: &TtlClock) -> bool {
        let _ = clock;
        false
    }
}

impl KeyedState for () {
    fn is_empty(&self) -> bool {
        true
    }
}

macro_rules! tuple_state {
    ($($name:ident : $index:tt),+) => {
        impl<$($name: KeyedState),+> KeyedState for ($($name,)+) {
            fn is_empty(&self) -> bool {
                $(self.$index.is_empty())&&+
            }
            fn ttl_configs(configs: &mut Vec<TtlConfig>) {
                $($name::ttl_configs(configs);)+
            }
            fn expire(&mut self, clock: &TtlClock) -> bool {
                $(self.$index.expire(clock))|+
            }
        }
    };
}

tuple_state!(A: 0);
tuple_state!(A: 0, B: 1);
tuple_state!(A: 0, B: 1, C: 2);
tuple_state!(A: 0, B: 1, C: 2, D: 3);
tuple_state!(A: 0, B: 1, C: 2, D: 3, E: 4);
tuple_state!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5);

/// One value per key, or none (Flink's `ValueState`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueState<V>(Option<V>);

impl<V> Default for ValueState<V> {
    fn default() -> Self {
        ValueState(None)
    }
}

impl<V> ValueState<V> {
    /// The value, if one is set.
    #[must_use]
    pub fn get(&self) -> Option<&V> {
        self.0.as_ref()
    }

    /// The value, mutably, if one is set.
    pub fn get_mut(&mut self) -> Option<&mut V> {
        self.0.as_mut()
    }

    /// The value, set to `make()` first if none is.
    pub fn get_or_insert_with(&mut self, make: impl FnOnce() -> V) -> &mut V {
        self.0.get_or_insert_with(make)
    }

    /// Sets the value; returns the one it replaces.
    pub fn set(&mut self, value: V) -> Option<V> {
        self.0.replace(value)
    }

    /// Removes the value and returns it.
    pub fn take(&mut self) -> Option<V> {
        self.0.take()
    }

    /// Removes the value.
    pub fn clear(&mut self) {
        self.0 = None;
    }

    /// Whether no value is set.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

impl<V: Copy> ValueState<V> {
    /// A copy of the value, if one is set.
    #[must_use]
    pub fn value(&self) -> Option<V> {
        self.0
    }
}

impl<V> KeyedState for ValueState<V> {
    fn is_empty(&self) -> bool {
        ValueState::is_empty(self)
    }
}

/// A map per key (Flink's `MapState`): entries looked up, updated and removed one at a
/// time, so a large per-key collection is never rewritten whole.
#[derive(Debug, Clone)]
pub struct MapState<MK, MV>(FxHashMap<MK, MV>);

impl<MK, MV> Default for MapState<MK, MV> {
    fn default() -> Self {
        MapState(FxHashMap::default())
    }
}

impl<MK: Hash + Eq, MV> MapState<MK, MV> {
    /// The value under `key`.
    #[must_use]
    pub fn get(&self, key: &MK) -> Option<&MV> {
        self.0.get(key)
    }

    /// The value under `key`, mutably.
    pub fn get_mut(&mut self, key: &MK) -> Option<&mut MV> {
        self.0.get_mut(key)
    }

    /// Whether `key` has a value.
    #[must_use]
    pub fn contains_key(&self, key: &MK) -> bool {
        self.0.contains_key(key)
    }

    /// Sets the value under `key`; returns the one it replaces.
    pub fn insert(&mut self, key: MK, value: MV) -> Option<MV> {
        self.0.insert(key, value)
    }

    /// The entry for `key`, to update it in place.
    pub fn entry(&mut self, key: MK) -> Entry<'_, MK, MV> {
        self.0.entry(key)
    }

    /// Removes the value under `key` and returns it.
    pub fn remove(&mut self, key: &MK) -> Option<MV> {
        self.0.remove(key)
    }

    /// Keeps the entries for which `keep` is true.
    pub fn retain(&mut self, keep: impl FnMut(&MK, &mut MV) -> bool) {
        self.0.retain(keep);
    }
}

impl<MK, MV> MapState<MK, MV> {
    /// The entries, in no particular order.
    pub fn iter(&self) -> hash_map::Iter<'_, MK, MV> {
        self.0.iter()
    }

    /// The keys, in no particular order.
    pub fn keys(&self) -> hash_map::Keys<'_, MK, MV> {
        self.0.keys()
    }

    /// The values, in no particular order.
    pub fn values(&self) -> hash_map::Values<'_, MK, MV> {
        self.0.values()
    }

    /// How many entries there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Removes every entry (and frees the map's memory, since a key whose state is empty
    /// is about to be forgotten).
    pub fn clear(&mut self) {
        self.0 = FxHashMap::default();
    }

    /// Whether there are no entries.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'a, MK, MV> IntoIterator for &'a MapState<MK, MV> {
    type Item = (&'a MK, &'a MV);
    type IntoIter = hash_map::Iter<'a, MK, MV>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<MK, MV> KeyedState for MapState<MK, MV> {
    fn is_empty(&self) -> bool {
        MapState::is_empty(self)
    }
}

/// A list per key (Flink's `ListState`): values appended in order, read as a slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListState<V>(Vec<V>);

impl<V> Default for ListState<V> {
    fn default() -> Self {
        ListState(Vec::new())
    }
}

impl<V> ListState<V> {
    /// Appends a value.
    pub fn add(&mut self, value: V) {
        self.0.push(value);
    }

    /// Appends every value of `values`.
    pub fn add_all(&mut self, values: impl IntoIterator<Item = V>) {
        self.0.extend(values);
    }

    /// The values, in the order they were added.
    #[must_use]
    pub fn get(&self) -> &[V] {
        &self.0
    }

    /// Replaces the values with `values`.
    pub fn update(&mut self, values: Vec<V>) {
        self.0 = values;
    }

    /// Removes the values and returns them.
    pub fn take(&mut self) -> Vec<V> {
        std::mem::take(&mut self.0)
    }

    /// Keeps the values for which `keep` is true, in order.
    pub fn retain(&mut self, keep: impl FnMut(&V) -> bool) {
        self.0.retain(keep);
    }

    /// The values, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, V> {
        self.0.iter()
    }

    /// How many values there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Removes every value (and frees the list's memory).
    pub fn clear(&mut self) {
        self.0 = Vec::new();
    }

    /// Whether there are no values.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'a, V> IntoIterator for &'a ListState<V> {
    type Item = &'a V;
    type IntoIter = std::slice::Iter<'a, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<V> KeyedState for ListState<V> {
    fn is_empty(&self) -> bool {
        ListState::is_empty(self)
    }
}

/// Checkpointed as the value, if any.
impl<V: Data> Data for ValueState<V> {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Option::<V>::decode(input).map(ValueState)
    }
}

/// Checkpointed as its entries.
impl<MK: Data + Hash + Eq, MV: Data> Data for MapState<MK, MV> {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        FxHashMap::<MK, MV>::decode(input).map(MapState)
    }
}

/// Checkpointed as its values, in order.
impl<V: Data> Data for ListState<V> {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Vec::<V>::decode(input).map(ListState)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_is_empty_only_when_every_part_is() {
        let mut state: (ValueState<u8>, MapState<u8, u8>, ListState<u8>) = Default::default();
        assert!(KeyedState::is_empty(&state));
        state.0.set(1);
        assert!(!KeyedState::is_empty(&state));
        state.0.clear();
        state.1.insert(1, 2);
        assert!(!KeyedState::is_empty(&state));
        assert_eq!(state.1.remove(&1), Some(2));
        state.2.add(3);
        assert!(!KeyedState::is_empty(&state));
        assert_eq!(state.2.take(), vec![3]);
        assert!(KeyedState::is_empty(&state));
    }

    #[test]
    fn value_state_replaces_and_takes() {
        let mut v = ValueState::default();
        assert_eq!(v.set(1), None);
        assert_eq!(v.set(2), Some(1));
        *v.get_or_insert_with(|| 9) += 1;
        assert_eq!(v.value(), Some(3));
        assert_eq!(v.take(), Some(3));
        assert!(v.is_empty());
    }
}
