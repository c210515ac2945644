//! Keyed state with a time to live: [`TtlValueState`], [`TtlMapState`] and [`TtlListState`],
//! the TTL versions of the plain state types, following the [`TtlPolicy`] `P` (see
//! [`ttl`](super::ttl) for the semantics).
//!
//! Each value (map entry, list element) is kept with its stamp in milliseconds. Every
//! access takes the call's [`ProcessContext`] for the time; an access that meets an
//! expired value removes it. Reads take `&mut self` for that reason, and because a read
//! restamps under [`TtlUpdate::OnReadAndWrite`]. `is_empty` (for [`KeyedState`]) counts
//! expired values not yet removed; the operator's sweep removes them.

use std::{hash::Hash, marker::PhantomData};

use rustc_hash::FxHashMap;

use super::{
    ProcessContext,
    state::KeyedState,
    ttl::{TtlClock, TtlConfig, TtlPolicy, TtlUpdate},
};
use crate::dataflow::checkpoint::{Data, StateError};

/// Whether a read restamps under `P`.
fn read_restamps<P: TtlPolicy>() -> bool {
    P::CONFIG.update_type() == TtlUpdate::OnReadAndWrite
}

/// One value per key with a time to live (Flink's `ValueState` with a `StateTtlConfig`).
pub struct TtlValueState<V, P> {
    slot: Option<(V, i64)>,
    policy: PhantomData<fn() -> P>,
}

impl<V: std::fmt::Debug, P> std::fmt::Debug for TtlValueState<V, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TtlValueState").field(&self.slot).finish()
    }
}

impl<V, P> Default for TtlValueState<V, P> {
    fn default() -> Self {
        TtlValueState { slot: None, policy: PhantomData }
    }
}

impl<V, P: TtlPolicy> TtlValueState<V, P> {
    /// The value, if one is set and has not expired (a read).
    pub fn get<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>) -> Option<&V> {
        self.get_at(&TtlClock::of(ctx))
    }

    /// The value, mutably, if one is set and has not expired: counts as a write (restamps).
    pub fn get_mut<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>) -> Option<&mut V> {
        let clock = TtlClock::of(ctx);
        self.expire_at(&clock);
        let (value, stamp) = self.slot.as_mut()?;
        *stamp = clock.stamp(P::CONFIG.domain());
        Some(value)
    }

    /// The value, set to `make()` first if none is (or it expired): a write.
    pub fn get_or_insert_with<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>, make: impl FnOnce() -> V) -> &mut V {
        let clock = TtlClock::of(ctx);
        self.expire_at(&clock);
        let stamp = clock.stamp(P::CONFIG.domain());
        let (value, at) = self.slot.get_or_insert_with(|| (make(), stamp));
        *at = stamp;
        value
    }

    /// Sets the value; returns the one it replaces, if that had not expired.
    pub fn set<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>, value: V) -> Option<V> {
        self.set_at(&TtlClock::of(ctx), value)
    }

    /// Removes the value and returns it, if it had not expired.
    pub fn take<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>) -> Option<V> {
        self.expire_at(&TtlClock::of(ctx));
        self.slot.take().map(|(v, _)| v)
    }

    /// Removes the value.
    pub fn clear(&mut self) {
        self.slot = None;
    }

    /// Whether nothing is held (an expired value not yet removed counts as held).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.slot.is_none()
    }

    pub(crate) fn get_at(&mut self, clock: &TtlClock) -> Option<&V> {
        self.expire_at(clock);
        let (value, stamp) = self.slot.as_mut()?;
        if read_restamps::<P>() {
            *stamp = clock.stamp(P::CONFIG.domain());
        }
        Some(value)
    }

    pub(crate) fn set_at(&mut self, clock: &TtlClock, value: V) -> Option<V> {
        self.expire_at(clock);
        self.slot.replace((value, clock.stamp(P::CONFIG.domain()))).map(|(v, _)| v)
    }

    fn expire_at(&mut self, clock: &TtlClock) -> bool {
        let expired = self.slot.as_ref().is_some_and(|(_, stamp)| P::CONFIG.expired(*stamp, clock));
        if expired {
            self.slot = None;
        }
        expired
    }
}

impl<V, P: TtlPolicy> KeyedState for TtlValueState<V, P> {
    fn is_empty(&self) -> bool {
        self.slot.is_none()
    }
    fn ttl_configs(configs: &mut Vec<TtlConfig>) {
        configs.push(P::CONFIG);
    }
    fn expire(&mut self, clock: &TtlClock) -> bool {
        self.expire_at(clock)
    }
}

/// A map per key whose entries each have a time to live (Flink's `MapState` with a
/// `StateTtlConfig`: the TTL is per entry).
pub struct TtlMapState<MK, MV, P> {
    map: FxHashMap<MK, (MV, i64)>,
    policy: PhantomData<fn() -> P>,
}

impl<MK: std::fmt::Debug, MV: std::fmt::Debug, P> std::fmt::Debug for TtlMapState<MK, MV, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TtlMapState").field(&self.map).finish()
    }
}

impl<MK, MV, P> Default for TtlMapState<MK, MV, P> {
    fn default() -> Self {
        TtlMapState { map: FxHashMap::default(), policy: PhantomData }
    }
}

impl<MK: Hash + Eq, MV, P: TtlPolicy> TtlMapState<MK, MV, P> {
    /// The value under `key`, if it has not expired (a read).
    pub fn get<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>, key: &MK) -> Option<&MV> {
        self.get_at(&TtlClock::of(ctx), key)
    }

    /// The value under `key`, mutably, if it has not expired: a write (restamps).
    pub fn get_mut<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>, key: &MK) -> Option<&mut MV> {
        let clock = TtlClock::of(ctx);
        self.expire_key(&clock, key);
        let (value, stamp) = self.map.get_mut(key)?;
        *stamp = clock.stamp(P::CONFIG.domain());
        Some(value)
    }

    /// Whether `key` has a value that has not expired (a read).
    pub fn contains_key<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>, key: &MK) -> bool {
        self.get_at(&TtlClock::of(ctx), key).is_some()
    }

    /// Sets the value under `key`; returns the one it replaces, if that had not expired.
    pub fn insert<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>, key: MK, value: MV) -> Option<MV> {
        self.insert_at(&TtlClock::of(ctx), key, value)
    }

    /// The value under `key`, set to `make()` first if none is (or it expired): a write.
    pub fn get_or_insert_with<K, O>(
        &mut self,
        ctx: &ProcessContext<'_, K, O>,
        key: MK,
        make: impl FnOnce() -> MV,
    ) -> &mut MV {
        let clock = TtlClock::of(ctx);
        self.expire_key(&clock, &key);
        let stamp = clock.stamp(P::CONFIG.domain());
        let (value, at) = self.map.entry(key).or_insert_with(|| (make(), stamp));
        *at = stamp;
        value
    }

    /// Removes the value under `key` and returns it, if it had not expired.
    pub fn remove<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>, key: &MK) -> Option<MV> {
        self.expire_key(&TtlClock::of(ctx), key);
        self.map.remove(key).map(|(v, _)| v)
    }

    /// Removes the expired entries, then keeps those for which `keep` is true: a write of
    /// each entry it keeps.
    pub fn retain<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>, mut keep: impl FnMut(&MK, &mut MV) -> bool) {
        let clock = TtlClock::of(ctx);
        let stamp = clock.stamp(P::CONFIG.domain());
        self.map.retain(|k, (v, at)| {
            if P::CONFIG.expired(*at, &clock) || !keep(k, v) {
                return false;
            }
            *at = stamp;
            true
        });
    }

    /// The entries that have not expired, in no particular order (a read of each).
    pub fn iter<'s, K, O>(
        &'s mut self,
        ctx: &ProcessContext<'_, K, O>,
    ) -> impl Iterator<Item = (&'s MK, &'s MV)> + use<'s, K, O, MK, MV, P> {
        self.iter_at(TtlClock::of(ctx))
    }

    /// How many entries have not expired.
    pub fn len<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>) -> usize {
        self.expire_at(&TtlClock::of(ctx));
        self.map.len()
    }

    pub(crate) fn get_at(&mut self, clock: &TtlClock, key: &MK) -> Option<&MV> {
        self.expire_key(clock, key);
        let (value, stamp) = self.map.get_mut(key)?;
        if read_restamps::<P>() {
            *stamp = clock.stamp(P::CONFIG.domain());
        }
        Some(value)
    }

    pub(crate) fn insert_at(&mut self, clock: &TtlClock, key: MK, value: MV) -> Option<MV> {
        self.expire_key(clock, &key);
        self.map.insert(key, (value, clock.stamp(P::CONFIG.domain()))).map(|(v, _)| v)
    }

    pub(crate) fn iter_at(&mut self, clock: TtlClock) -> impl Iterator<Item = (&MK, &MV)> {
        self.expire_at(&clock);
        let restamp = read_restamps::<P>().then(|| clock.stamp(P::CONFIG.domain()));
        self.map.iter_mut().map(move |(k, (v, at))| {
            if let Some(stamp) = restamp {
                *at = stamp;
            }
            (k, &*v)
        })
    }

    fn expire_key(&mut self, clock: &TtlClock, key: &MK) {
        if self.map.get(key).is_some_and(|(_, stamp)| P::CONFIG.expired(*stamp, clock)) {
            self.map.remove(key);
        }
    }

    fn expire_at(&mut self, clock: &TtlClock) -> bool {
        let before = self.map.len();
        self.map.retain(|_, (_, stamp)| !P::CONFIG.expired(*stamp, clock));
        self.map.len() != before
    }
}

impl<MK, MV, P> TtlMapState<MK, MV, P> {
    /// Removes every entry (and frees the map's memory).
    pub fn clear(&mut self) {
        self.map = FxHashMap::default();
    }

    /// Whether nothing is held (expired entries not yet removed count as held).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl<MK: Hash + Eq, MV, P: TtlPolicy> KeyedState for TtlMapState<MK, MV, P> {
    fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    fn ttl_configs(configs: &mut Vec<TtlConfig>) {
        configs.push(P::CONFIG);
    }
    fn expire(&mut self, clock: &TtlClock) -> bool {
        let expired = self.expire_at(clock);
        if expired && self.map.is_empty() {
            self.clear();
        }
        expired
    }
}

/// A list per key whose elements each have a time to live (Flink's `ListState` with a
/// `StateTtlConfig`: the TTL is per element).
pub struct TtlListState<V, P> {
    list: Vec<(V, i64)>,
    policy: PhantomData<fn() -> P>,
}

impl<V: std::fmt::Debug, P> std::fmt::Debug for TtlListState<V, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TtlListState").field(&self.list).finish()
    }
}

impl<V, P> Default for TtlListState<V, P> {
    fn default() -> Self {
        TtlListState { list: Vec::new(), policy: PhantomData }
    }
}

impl<V, P: TtlPolicy> TtlListState<V, P> {
    /// Appends a value.
    pub fn add<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>, value: V) {
        self.add_at(&TtlClock::of(ctx), value);
    }

    /// Appends every value of `values`.
    pub fn add_all<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>, values: impl IntoIterator<Item = V>) {
        let stamp = TtlClock::of(ctx).stamp(P::CONFIG.domain());
        self.list.extend(values.into_iter().map(|v| (v, stamp)));
    }

    /// The values that have not expired, in the order they were added (a read of each).
    pub fn get<'s, K, O>(
        &'s mut self,
        ctx: &ProcessContext<'_, K, O>,
    ) -> impl Iterator<Item = &'s V> + use<'s, K, O, V, P> {
        self.get_at(TtlClock::of(ctx))
    }

    /// Replaces the values with `values`.
    pub fn update<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>, values: Vec<V>) {
        let stamp = TtlClock::of(ctx).stamp(P::CONFIG.domain());
        self.list = values.into_iter().map(|v| (v, stamp)).collect();
    }

    /// Removes the values and returns those that had not expired, in order.
    pub fn take<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>) -> Vec<V> {
        let clock = TtlClock::of(ctx);
        std::mem::take(&mut self.list)
            .into_iter()
            .filter(|(_, stamp)| !P::CONFIG.expired(*stamp, &clock))
            .map(|(v, _)| v)
            .collect()
    }

    /// Removes the expired values, then keeps those for which `keep` is true, in order
    /// (their stamps unchanged).
    pub fn retain<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>, mut keep: impl FnMut(&V) -> bool) {
        let clock = TtlClock::of(ctx);
        self.list.retain(|(v, stamp)| !P::CONFIG.expired(*stamp, &clock) && keep(v));
    }

    /// How many values have not expired.
    pub fn len<K, O>(&mut self, ctx: &ProcessContext<'_, K, O>) -> usize {
        self.expire_at(&TtlClock::of(ctx));
        self.list.len()
    }

    pub(crate) fn add_at(&mut self, clock: &TtlClock, value: V) {
        self.list.push((value, clock.stamp(P::CONFIG.domain())));
    }

    pub(crate) fn get_at(&mut self, clock: TtlClock) -> impl Iterator<Item = &V> {
        self.expire_at(&clock);
        let restamp = read_restamps::<P>().then(|| clock.stamp(P::CONFIG.domain()));
        self.list.iter_mut().map(move |(v, at)| {
            if let Some(stamp) = restamp {
                *at = stamp;
            }
            &*v
        })
    }

    fn expire_at(&mut self, clock: &TtlClock) -> bool {
        let before = self.list.len();
        self.list.retain(|(_, stamp)| !P::CONFIG.expired(*stamp, clock));
        self.list.len() != before
    }
}

impl<V, P> TtlListState<V, P> {
    /// Removes every value (and frees the list's memory).
    pub fn clear(&mut self) {
        self.list = Vec::new();
    }

    /// Whether nothing is held (expired values not yet removed count as held).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

impl<V, P: TtlPolicy> KeyedState for TtlListState<V, P> {
    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
    fn ttl_configs(configs: &mut Vec<TtlConfig>) {
        configs.push(P::CONFIG);
    }
    fn expire(&mut self, clock: &TtlClock) -> bool {
        let expired = self.expire_at(clock);
        if expired && self.list.is_empty() {
            self.clear();
        }
        expired
    }
}

/// Checkpointed as the value and its stamp, if any.
impl<V: Data, P: TtlPolicy> Data for TtlValueState<V, P> {
    fn encode(&self, out: &mut Vec<u8>) {
        self.slot.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(TtlValueState { slot: Option::decode(input)?, policy: PhantomData })
    }
}

/// Checkpointed as its entries with their stamps.
impl<MK: Data + Hash + Eq, MV: Data, P: TtlPolicy> Data for TtlMapState<MK, MV, P> {
    fn encode(&self, out: &mut Vec<u8>) {
        self.map.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(TtlMapState { map: FxHashMap::decode(input)?, policy: PhantomData })
    }
}

/// Checkpointed as its values with their stamps, in order.
impl<V: Data, P: TtlPolicy> Data for TtlListState<V, P> {
    fn encode(&self, out: &mut Vec<u8>) {
        self.list.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(TtlListState { list: Vec::decode(input)?, policy: PhantomData })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::dataflow::TimeDomain;

    struct Write100;
    impl TtlPolicy for Write100 {
        const CONFIG: TtlConfig = TtlConfig::new(Duration::from_millis(100), TimeDomain::EventTime);
    }

    struct Read100;
    impl TtlPolicy for Read100 {
        const CONFIG: TtlConfig =
            TtlConfig::new(Duration::from_millis(100), TimeDomain::ProcessingTime).update(TtlUpdate::OnReadAndWrite);
    }

    fn event(watermark: i64, event: i64) -> TtlClock {
        TtlClock { wall: 0, watermark, event }
    }

    fn wall(wall: i64) -> TtlClock {
        TtlClock { wall, watermark: i64::MIN, event: i64::MIN }
    }

    #[test]
    fn ttl_value_expires_after_its_write_and_is_never_returned() {
        let mut v: TtlValueState<u32, Write100> = TtlValueState::default();
        assert_eq!(v.set_at(&event(0, 50), 7), None);
        assert_eq!(v.get_at(&event(149, 0)), Some(&7), "stamped at the record's time 50");
        assert_eq!(v.get_at(&event(149, 0)), Some(&7), "reads do not restamp OnCreateAndWrite");
        assert_eq!(v.get_at(&event(150, 0)), None);
        assert!(KeyedState::is_empty(&v), "the access removed it");
        v.set_at(&event(0, 10), 1);
        assert_eq!(v.set_at(&event(500, 0), 2), None, "an expired value is not handed back");
        assert!(!v.expire(&event(599, 0)));
        assert!(v.expire(&event(600, 0)));
    }

    #[test]
    fn ttl_on_read_and_write_restamps_on_every_read() {
        let mut v: TtlValueState<u32, Read100> = TtlValueState::default();
        v.set_at(&wall(1_000), 3);
        for now in [1_090, 1_180, 1_270] {
            assert_eq!(v.get_at(&wall(now)), Some(&3));
        }
        assert_eq!(v.get_at(&wall(1_370)), None);
    }

    #[test]
    fn ttl_map_and_list_entries_expire_one_by_one() {
        let mut m: TtlMapState<u8, u8, Write100> = TtlMapState::default();
        m.insert_at(&event(0, 0), 1, 10);
        m.insert_at(&event(0, 50), 2, 20);
        assert_eq!(m.iter_at(event(120, 0)).collect::<Vec<_>>(), vec![(&2, &20)]);
        assert_eq!(m.get_at(&event(120, 0), &1), None);
        assert!(m.expire(&event(150, 0)));
        assert!(KeyedState::is_empty(&m));
        let mut l: TtlListState<u8, Read100> = TtlListState::default();
        l.add_at(&wall(0), 1);
        l.add_at(&wall(60), 2);
        assert_eq!(l.get_at(wall(99)).copied().collect::<Vec<_>>(), vec![1, 2], "the read restamps both");
        assert_eq!(l.get_at(wall(198)).copied().collect::<Vec<_>>(), vec![1, 2]);
        assert!(l.expire(&wall(298)));
        assert!(KeyedState::is_empty(&l));
    }

    #[test]
    fn ttl_state_round_trips_with_its_stamps() {
        let mut m: TtlMapState<u8, u64, Write100> = TtlMapState::default();
        m.insert_at(&event(0, 40), 5, 6);
        let mut buf = Vec::new();
        m.encode(&mut buf);
        let mut back = TtlMapState::<u8, u64, Write100>::decode(&mut buf.as_slice()).unwrap();
        assert_eq!(back.get_at(&event(139, 0), &5), Some(&6));
        assert_eq!(back.get_at(&event(140, 0), &5), None, "the stamp came back, not a fresh one");
    }
}
