//! Tumbling and sliding windows: windows aligned to fixed boundaries, the same for every
//! key, so state is kept per window (a bucket) and, inside it, per key.
//!
//! Buckets are kept sorted by start; in-order input hits the most recent bucket, found
//! without a search. A bucket fires when the watermark reaches its last instant and is
//! then dropped, or, when late updates are allowed, kept until the lateness has passed.

use std::{
    hash::{BuildHasher, Hash},
    rc::Rc,
};

use std::collections::VecDeque;

use rustc_hash::{FxHashMap, FxHashSet};
use sluice_io::{CheckpointId, EventTime};

use super::{
    Firing, SPARE_MAPS, Window, Windows,
    buckets::{Bucketed, find_or_insert},
    emit::Emit,
    function::WindowFunction,
    skeleton::{self, WindowKind},
};
use crate::dataflow::{
    Event, Port, Scope,
    checkpoint::{Barrier, Data, StateError, StateHandle},
};

struct Bucket<K, A> {
    window: Window,
    keys: FxHashMap<K, A>,
    fired: bool,
    /// Created since the last snapshot: the next one writes it whole, so its keys are not
    /// tracked one by one.
    fresh: bool,
}

impl<K, A> Bucketed for Bucket<K, A> {
    #[inline(always)]
    fn window(&self) -> Window {
        self.window
    }
}

impl<K, A> Bucket<K, A> {
    /// Whether records from `first` to `last` go straight into this bucket: it has not
    /// fired and its window holds both.
    #[inline(always)]
    fn open_for(&self, first: EventTime, last: EventTime) -> bool {
        !self.fired && self.window.contains(first) && self.window.contains(last)
    }
}

/// Adds `event`, whose key is `key`, to `bucket` (of `window`, passed so that it stays in
/// a register along a run), noting the key as changed when its keys are `tracked`.
#[inline(always)]
fn add_to<K: Hash + Eq + Clone, T, F: WindowFunction<K, T>>(
    bucket: &mut Bucket<K, F::Acc>,
    window: Window,
    tracked: &mut Option<&mut Changes<K>>,
    function: &mut F,
    key: K,
    event: &Event<T>,
) {
    if let Some(c) = tracked {
        c.keys.insert((window, key.clone()));
    }
    match bucket.keys.get_mut(&key) {
        Some(acc) => function.add(acc, event),
        None => {
            let acc = bucket.keys.entry(key).or_insert_with(|| function.create());
            function.add(acc, event);
        }
    }
}

/// The `(window, key)` pairs changed, and the windows created, fired or dropped.
type Changed<K> = (FxHashSet<(Window, K)>, FxHashSet<Window>);

/// With checkpoints: what changed since each snapshot, for incremental ones. A window in
/// `windows` (created, fired or dropped) is written whole (or as dropped); a `(window, key)`
/// in `keys` is written alone.
struct Changes<K> {
    keys: FxHashSet<(Window, K)>,
    windows: FxHashSet<Window>,
    /// The sets of earlier snapshots, until a completed checkpoint covers them.
    history: VecDeque<(CheckpointId, Changed<K>)>,
}

/// A restored window entry: its window, whether that had fired, the key, its accumulator.
type Entry<K, A> = (Window, bool, K, A);

/// Table slots per stretch a restore fills at a time ([`Aligned::fill_in_table_order`]):
/// 16 Ki slots of a `u64 -> u64` map are 272 KiB, which stay in the core's caches.
const SLOTS_PER_PART: usize = 1 << 14;

/// Entry kinds of a window snapshot: a key's accumulator in a window, and a window dropped
/// since the base (a deletion, in deltas only).
const KEY_ENTRY: u8 = 0;
const DROPPED_WINDOW: u8 = 1;

pub(crate) struct Aligned<K, T, F: WindowFunction<K, T>, KS> {
    /// The key selector, concrete so it is called inline.
    key: Rc<KS>,
    windows: Windows,
    function: F,
    emit: Emit<K, T, F::Out>,
    buckets: Vec<Bucket<K, F::Acc>>,
    /// Emptied maps of fired windows, kept for the next windows (at most [`SPARE_MAPS`]).
    spare: Vec<FxHashMap<K, F::Acc>>,
    hint: usize,
    assigned: Vec<Window>,
    changes: Option<Changes<K>>,
}

pub(crate) fn attach<K, T, F, KS>(
    scope: &Scope,
    input: &Port<T>,
    key: Rc<KS>,
    windows: Windows,
    function: F,
    emit: Emit<K, T, F::Out>,
) where
    K: Hash + Eq + Clone + Data,
    T: 'static,
    F: WindowFunction<K, T>,
    F::Acc: Data,
    KS: Fn(&T) -> K + 'static,
{
    let state = scope.state_handle::<K, F::Acc>("window(tumbling/sliding)");
    let op = Aligned {
        key,
        windows,
        function,
        emit,
        buckets: Vec::new(),
        spare: Vec::new(),
        hint: 0,
        assigned: Vec::new(),
        changes: state.as_ref().map(|_| Changes {
            keys: FxHashSet::default(),
            windows: FxHashSet::default(),
            history: VecDeque::new(),
        }),
    };
    skeleton::attach(scope, input, op, state);
}

impl<K, T, F, KS> Aligned<K, T, F, KS>
where
    K: Hash + Eq + Clone + Data,
    T: 'static,
    F: WindowFunction<K, T>,
    F::Acc: Data,
    KS: Fn(&T) -> K + 'static,
{
    /// Rebuilds the windows from the restored snapshot's entries; returns the restored
    /// watermark.
    fn restore_windows(&mut self, state: &StateHandle) -> Result<Option<EventTime>, StateError> {
        // Entries come oldest first within each key group (a whole snapshot, then deltas):
        // later ones win. A dropped window drops the keys of its own group only: restored
        // at another shard count, a window's other groups come from other shards' parts,
        // whose watermark need not have reached it (in unaligned mode the shards snapshot
        // at different watermarks). So each group is rebuilt apart, then merged.
        //
        // Each group's surviving entries are gathered in order first (a vector reserved at
        // the parts' entry count, no hashing); then every window's map is made at its
        // final size and filled once, in the order of its table (`fill_in_table_order`).
        // Filling maps as entries came, growing them as they went and merging the groups'
        // maps after, cost most of a large restore (measured at 32 M keys).
        let mut groups: FxHashMap<u32, Vec<Entry<K, F::Acc>>> = FxHashMap::default();
        for (group, entries) in state.restored_entries() {
            groups.entry(group).or_default().reserve(usize::try_from(entries).unwrap_or(0));
        }
        let watermark = state.restore_grouped(|group, input| {
            let (kind, start, end) = <(u8, i64, i64)>::decode(input)?;
            let window = Window { start: EventTime::from_millis(start), end: EventTime::from_millis(end) };
            match kind {
                KEY_ENTRY => {
                    let (fired, key, acc) = <(bool, K, F::Acc)>::decode(input)?;
                    groups.entry(group).or_default().push((window, fired, key, acc));
                }
                DROPPED_WINDOW => {
                    if let Some(entries) = groups.get_mut(&group) {
                        entries.retain(|e| e.0 != window);
                    }
                }
                other => return Err(StateError(format!("unknown window entry kind {other}"))),
            }
            Ok(())
        })?;
        // Per window: whether it fired, and how many entries will fill it. A window fired
        // in some groups and not in others (possible only when restored at another shard
        // count from unaligned snapshots, with allowed lateness) is taken as not fired: it
        // fires again, repeating the results of the groups that had fired, rather than
        // never giving those of the others. Within a group the last entry says.
        let mut windows: std::collections::BTreeMap<Window, (bool, usize)> = std::collections::BTreeMap::new();
        for entries in groups.values() {
            let mut fired_here: std::collections::BTreeMap<Window, bool> = std::collections::BTreeMap::new();
            // Runs of entries of one window: counted, and the run's last entry's flag kept.
            let mut run: Option<(Window, usize, bool)> = None;
            for &(window, fired, _, _) in entries {
                match &mut run {
                    Some((w, n, f)) if *w == window => {
                        *n += 1;
                        *f = fired;
                    }
                    _ => {
                        if let Some((w, n, f)) = run.take() {
                            windows.entry(w).or_insert((true, 0)).1 += n;
                            fired_here.insert(w, f);
                        }
                        run = Some((window, 1, fired));
                    }
                }
            }
            if let Some((w, n, f)) = run {
                windows.entry(w).or_insert((true, 0)).1 += n;
                fired_here.insert(w, f);
            }
            for (window, fired) in fired_here {
                windows.entry(window).or_insert((true, 0)).0 &= fired;
            }
        }
        for (window, (fired, entries)) in windows {
            let b = self.bucket(window);
            self.buckets[b].fired = fired;
            self.buckets[b].keys.reserve(entries);
        }
        let groups: Vec<Vec<Entry<K, F::Acc>>> = groups.into_values().collect();
        self.fill_in_table_order(groups);
        for b in &mut self.buckets {
            b.fresh = false;
        }
        self.hint = self.buckets.len().saturating_sub(1);
        Ok(watermark)
    }
}

impl<K: Hash + Eq + Clone + 'static, T: 'static, F: WindowFunction<K, T>, KS: Fn(&T) -> K + 'static>
    Aligned<K, T, F, KS>
{
    /// Inserts restored entries `(window, fired, key, accumulator)` into their windows'
    /// maps, already reserved at their final size; where a key appears twice, the later
    /// entry (in `groups`' order) wins.
    ///
    /// Inserted as they come, the keys of a large map land all over its table, and each
    /// insert waits for a cache and TLB miss (about 130 ns at 16 M keys). So the entries
    /// are first partitioned, stably, by the stretch of its window's table their keys hash
    /// to ([`SLOTS_PER_PART`] slots, a few hundred KiB), and inserted stretch by stretch.
    /// Where a key lands is hashbrown's business (std's map): this assumes it starts at
    /// the hash's low bits, in a table of `capacity / 7 * 8` slots. Were that to change,
    /// the order would stop helping; the maps' contents would be the same.
    fn fill_in_table_order(&mut self, groups: Vec<Vec<Entry<K, F::Acc>>>) {
        let total: usize = groups.iter().map(Vec::len).sum();
        // Per bucket: its first part and how to find a key's part; per part: its bucket.
        let mut layout = Vec::with_capacity(self.buckets.len());
        let mut owner = Vec::new();
        for (b, bucket) in self.buckets.iter().enumerate() {
            let capacity = bucket.keys.capacity();
            let slots =
                if capacity < 8 { (capacity + 1).next_power_of_two() } else { (capacity / 7 * 8).next_power_of_two() };
            let parts = (slots / SLOTS_PER_PART).max(1);
            let shift = slots.trailing_zeros() - parts.trailing_zeros();
            layout.push((owner.len(), slots - 1, shift));
            owner.extend(std::iter::repeat_n(b, parts));
        }
        let mut part_of = Vec::with_capacity(total);
        let mut sizes = vec![0usize; owner.len()];
        for &(window, _, ref key, _) in groups.iter().flatten() {
            let b = self.bucket(window);
            let (first, mask, shift) = layout[b];
            let hash = self.buckets[b].keys.hasher().hash_one(key) as usize;
            let part = first + ((hash & mask) >> shift);
            sizes[part] += 1;
            part_of.push(part as u32);
        }
        let mut parts: Vec<Vec<(K, F::Acc)>> = sizes.into_iter().map(Vec::with_capacity).collect();
        for ((_, _, key, acc), part) in groups.into_iter().flatten().zip(part_of) {
            parts[part as usize].push((key, acc));
        }
        for (part, entries) in parts.into_iter().enumerate() {
            self.buckets[owner[part]].keys.extend(entries);
        }
    }

    /// The index of `window`'s bucket, created if need be.
    #[inline]
    fn bucket(&mut self, window: Window) -> usize {
        let spare = &mut self.spare;
        let make = || Bucket { window, keys: spare.pop().unwrap_or_default(), fired: false, fresh: true };
        let (i, made) = find_or_insert(&mut self.buckets, &mut self.hint, window, make);
        if made && let Some(c) = &mut self.changes {
            c.windows.insert(window);
        }
        i
    }

    /// Tumbling windows: runs of records that fall in the open window of the record before
    /// them (the common case, in-order input) go straight into its map, with no division
    /// or search, and with what does not change along a run (which bucket, whether its keys
    /// are tracked for an incremental snapshot) settled once per run rather than per record
    /// (the compiler cannot hoist those loads out of a loop that mutates `self`). A record
    /// outside the run takes the general path.
    ///
    /// Most batches lie wholly in the open window (a batch spans far less event time than
    /// a window): those are checked in one pass over their times and then read in place,
    /// with no record moved and no per-record window check.
    #[inline(always)]
    fn add_tumbling(&mut self, batch: &mut Vec<Event<T>>, watermark: EventTime) {
        let (first, last) =
            batch.iter().fold((EventTime::MAX, EventTime::MIN), |(lo, hi), e| (lo.min(e.time), hi.max(e.time)));
        if let Some(bucket) = self.buckets.get_mut(self.hint).filter(|b| b.open_for(first, last)) {
            let window = bucket.window;
            let mut tracked = self.changes.as_mut().filter(|_| !bucket.fresh);
            for event in batch.iter() {
                let key = (self.key)(&event.value);
                add_to(bucket, window, &mut tracked, &mut self.function, key, event);
            }
            batch.clear();
            return;
        }
        let mut events = batch.drain(..);
        let mut next = events.next();
        while let Some(first) = next.take() {
            let Some(bucket) = self.buckets.get_mut(self.hint).filter(|b| b.open_for(first.time, first.time)) else {
                let key = (self.key)(&first.value);
                self.add_slow(key, first, watermark);
                next = events.next();
                continue;
            };
            let window = bucket.window;
            let mut tracked = self.changes.as_mut().filter(|_| !bucket.fresh);
            let mut event = first;
            loop {
                let key = (self.key)(&event.value);
                add_to(bucket, window, &mut tracked, &mut self.function, key, &event);
                match events.next() {
                    Some(e) if window.contains(e.time) => event = e,
                    other => {
                        next = other;
                        break;
                    }
                }
            }
        }
    }

    fn add_slow(&mut self, key: K, event: Event<T>, watermark: EventTime) {
        self.assigned.clear();
        let assigned = &mut self.assigned;
        self.windows.assign(event.time, |w| assigned.push(w));
        let mut taken = false;
        for i in 0..self.assigned.len() {
            let window = self.assigned[i];
            let max = window.max_timestamp();
            if max > watermark {
                let b = self.bucket(window);
                self.changed(b, &key);
                let acc = self.buckets[b].keys.entry(key.clone()).or_insert_with(|| self.function.create());
                self.function.add(acc, &event);
                taken = true;
            } else if self.emit.keeps_fired() && max.0.saturating_add(self.emit.spec.lateness) > watermark.0 {
                let b = self.bucket(window);
                self.changed(b, &key);
                let acc = self.buckets[b].keys.entry(key.clone()).or_insert_with(|| self.function.create());
                self.function.add(acc, &event);
                let value = self.function.result(&key, &window, acc);
                self.emit.result(key.clone(), window, value, Firing::Update);
                taken = true;
            }
        }
        if !taken {
            self.emit.late(event);
        }
    }

    /// Notes that `key`'s accumulator in bucket `b` changes (for incremental snapshots).
    fn changed(&mut self, b: usize, key: &K) {
        if let Some(c) = &mut self.changes
            && !self.buckets[b].fresh
        {
            c.keys.insert((self.buckets[b].window, key.clone()));
        }
    }

    fn fire_due(&mut self, watermark: EventTime) {
        let keep = self.emit.keeps_fired();
        let lateness = self.emit.spec.lateness;
        let mut i = 0;
        while i < self.buckets.len() {
            let bucket = &mut self.buckets[i];
            let max = bucket.window.max_timestamp();
            if max > watermark {
                i += 1;
                continue;
            }
            let window = bucket.window;
            let retain = keep && max.0.saturating_add(lateness) > watermark.0;
            if !bucket.fired {
                if retain {
                    for (key, acc) in &bucket.keys {
                        let value = self.function.result(key, &window, acc);
                        self.emit.result(key.clone(), window, value, Firing::OnTime);
                    }
                } else {
                    for (key, acc) in bucket.keys.drain() {
                        let value = self.function.result(&key, &window, &acc);
                        self.emit.result(key, window, value, Firing::OnTime);
                    }
                }
                bucket.fired = true;
                if let Some(c) = &mut self.changes {
                    c.windows.insert(window);
                }
            }
            if retain {
                i += 1;
            } else {
                let gone = self.buckets.remove(i);
                if gone.keys.is_empty() && self.spare.len() < SPARE_MAPS {
                    self.spare.push(gone.keys);
                }
                if let Some(c) = &mut self.changes {
                    c.windows.insert(window);
                }
            }
        }
        self.hint = self.buckets.len().saturating_sub(1);
    }
}

impl<K: Hash + Eq + Clone + Data, T: 'static, F: WindowFunction<K, T>, KS: Fn(&T) -> K + 'static> WindowKind<T>
    for Aligned<K, T, F, KS>
where
    F::Acc: Data,
{
    type Key = K;
    type Out = F::Out;

    fn emit(&mut self) -> &mut Emit<K, T, F::Out> {
        &mut self.emit
    }

    #[inline]
    fn add(&mut self, batch: &mut Vec<Event<T>>, watermark: EventTime) {
        if let Windows::Tumbling { .. } = self.windows {
            self.add_tumbling(batch, watermark);
        } else {
            for event in batch.drain(..) {
                let key = (self.key)(&event.value);
                self.add_slow(key, event, watermark);
            }
        }
    }

    fn fire(&mut self, watermark: EventTime) {
        self.fire_due(watermark);
    }

    fn snapshot(&mut self, state: &StateHandle, barrier: Barrier, watermark: EventTime) {
        let Some(changes) = self.changes.as_mut() else { return };
        let mut w = state.writer();
        let base = state.base(barrier);
        let keep_after = base.unwrap_or(CheckpointId(u64::MAX)).min(state.completed());
        changes.history.retain(|(id, _)| *id > keep_after);
        let keys = std::mem::take(&mut changes.keys);
        let windows = std::mem::take(&mut changes.windows);
        let write_key =
            |w: &mut crate::dataflow::checkpoint::GroupWriter, b: &Bucket<K, F::Acc>, key: &K, acc: &F::Acc| {
                w.push_with(key, |out| {
                    (KEY_ENTRY, b.window.start.millis(), b.window.end.millis(), b.fired).encode(out);
                    key.encode(out);
                    acc.encode(out);
                });
            };
        let delta = match base {
            None => {
                for b in &self.buckets {
                    for (key, acc) in &b.keys {
                        write_key(&mut w, b, key, acc);
                    }
                }
                false
            }
            Some(base) => {
                // Windows created, fired or dropped since the base: whole, or dropped.
                let mut all_windows: FxHashSet<Window> = windows.clone();
                let mut all_keys: FxHashSet<(Window, K)> = keys.clone();
                for (_, (k, ws)) in changes.history.iter().filter(|(id, _)| *id > base) {
                    all_windows.extend(ws.iter().copied());
                    all_keys.extend(k.iter().cloned());
                }
                for window in &all_windows {
                    match self.buckets.iter().find(|b| b.window == *window) {
                        Some(b) => b.keys.iter().for_each(|(key, acc)| write_key(&mut w, b, key, acc)),
                        None => state.for_owned_groups(&mut w, |out| {
                            (DROPPED_WINDOW, window.start.millis(), window.end.millis()).encode(out);
                        }),
                    }
                }
                for (window, key) in all_keys.iter().filter(|(window, _)| !all_windows.contains(window)) {
                    if let Some(b) = self.buckets.iter().find(|b| b.window == *window)
                        && let Some(acc) = b.keys.get(key)
                    {
                        write_key(&mut w, b, key, acc);
                    }
                }
                true
            }
        };
        changes.history.push_back((barrier.id, (keys, windows)));
        for b in &mut self.buckets {
            b.fresh = false;
        }
        state.report_delta(barrier, watermark, w, delta);
    }

    fn restore(&mut self, state: &StateHandle) -> Result<Option<EventTime>, StateError> {
        self.restore_windows(state)
    }

    fn early(&mut self) {
        for bucket in self.buckets.iter().filter(|b| !b.fired) {
            for (key, acc) in &bucket.keys {
                let value = self.function.result(key, &bucket.window, acc);
                self.emit.result(key.clone(), bucket.window, value, Firing::Early);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{cell::RefCell, rc::Rc, sync::Arc, time::Duration};

    use sluice_io::EventTime;

    use super::{DROPPED_WINDOW, KEY_ENTRY};
    use crate::dataflow::{
        CheckpointMode, Output, PipelineConfig, Scope, Windows,
        checkpoint::{
            CheckpointCoordinator, Data, EntryWriter, OperatorKey, Restored, RestoredGroup, RestoredOperator,
            ShardCheckpoint,
        },
        key_group,
        scope::Shared,
        shard_of_group,
    };

    fn entries(write: impl FnOnce(&mut EntryWriter)) -> Vec<u8> {
        let mut w = EntryWriter::new();
        write(&mut w);
        w.finish()
    }

    /// Restores `restored` into a one-shard `key_by -> 100 ms tumbling count` and moves
    /// the watermark to `until_ms`: the results, as sorted (window start, key, count).
    fn fire_restored(restored: Restored, until_ms: i64) -> Vec<(i64, u64, u64)> {
        let groups = restored.key_groups;
        let coordinator = Arc::new(CheckpointCoordinator::new(1, Some(Arc::new(restored))));
        let config = Arc::new(PipelineConfig::with_shards(1));
        let checkpoint = ShardCheckpoint::new(0, 1, groups, coordinator, 10, CheckpointMode::Aligned);
        let scope = Scope::new(0, config, Arc::new(Shared::default()), Some(checkpoint));
        let input = Output::<u64>::port();
        let results = Rc::new(RefCell::new(Vec::new()));
        let sink = results.clone();
        scope
            .stream(input.clone(), "test")
            .key_by(|k: &u64| *k)
            .window(Windows::tumbling(Duration::from_millis(100)))
            .count()
            .for_each(move |e| sink.borrow_mut().push((e.value.window.start.0, e.value.key, e.value.value)));
        scope.finish_build(false).unwrap();
        input.borrow_mut().watermark_to(EventTime::from_millis(until_ms));
        let mut got = results.borrow().clone();
        got.sort_unstable();
        got
    }

    #[test]
    fn a_large_restore_fills_every_window_in_table_order_and_later_entries_win() {
        // 60 000 keys in two windows (so each map spans several stretches of its table),
        // from a whole part, then a delta that changes every seventh key of the first
        // window: restored at one shard, every key gets its latest count, in its window.
        let groups = PipelineConfig::DEFAULT_KEY_GROUPS;
        let keys = 60_000u64;
        let mut whole: std::collections::BTreeMap<u32, EntryWriter> = std::collections::BTreeMap::new();
        let mut delta: std::collections::BTreeMap<u32, EntryWriter> = std::collections::BTreeMap::new();
        let push = |w: &mut EntryWriter, start: i64, key: u64, count: u64| {
            w.push_with(|out| {
                (KEY_ENTRY, start, start + 100, false).encode(out);
                key.encode(out);
                count.encode(out);
            });
        };
        for key in 0..keys {
            let w = whole.entry(key_group(&key, groups)).or_default();
            push(w, 0, key, 1);
            push(w, 100, key, 2);
            if key % 7 == 0 {
                push(delta.entry(key_group(&key, groups)).or_default(), 0, key, 9);
            }
        }
        let part = |(g, w): (u32, EntryWriter)| {
            let n = w.count();
            RestoredGroup::owned(g, n, &w.finish())
        };
        let mut restored =
            Restored { id: sluice_io::CheckpointId(3), shards: 1, key_groups: groups, ..Restored::default() };
        let all: Vec<RestoredGroup> = whole.into_iter().map(part).chain(delta.into_iter().map(part)).collect();
        restored.operators.insert(
            OperatorKey::Position(0),
            RestoredOperator { watermark: 50, watermark_max: 50, types: None, groups: all },
        );
        let got = fire_restored(restored, 300);
        let want: Vec<(i64, u64, u64)> =
            (0..keys).map(|k| (0, k, if k % 7 == 0 { 9 } else { 1 })).chain((0..keys).map(|k| (100, k, 2))).collect();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "restored counts differ");
    }

    #[test]
    fn a_window_dropped_by_one_shard_keeps_the_other_shards_keys_when_restored_at_one() {
        // A two-shard checkpoint whose shards snapshotted at different watermarks (as
        // unaligned checkpoints do): shard 1 had fired and dropped window [0, 100) (its
        // delta says so for its groups), shard 0 had not. Restored at one shard, the
        // window still fires for shard 0's key.
        let groups = PipelineConfig::DEFAULT_KEY_GROUPS;
        let owner = |k: &u64| shard_of_group(key_group(k, groups), groups, 2);
        let k0 = (0..).find(|k| owner(k) == 0).unwrap();
        let k1 = (0..).find(|k| owner(k) == 1).unwrap();
        let key_entry = |key: u64, count: u64| {
            entries(|w| {
                w.push_with(|out| {
                    (KEY_ENTRY, 0i64, 100i64, false).encode(out);
                    key.encode(out);
                    count.encode(out);
                });
            })
        };
        let part = |key_group, bytes: Vec<u8>| RestoredGroup::owned(key_group, 1, &bytes);
        let g0 = key_group(&k0, groups);
        let g1 = key_group(&k1, groups);
        let dropped = entries(|w| w.push_with(|out| (DROPPED_WINDOW, 0i64, 100i64).encode(out)));
        let mut restored =
            Restored { id: sluice_io::CheckpointId(3), shards: 2, key_groups: groups, ..Restored::default() };
        // Shard 0's chain, then shard 1's: its whole part, then the delta dropping the window.
        let groups = vec![part(g0, key_entry(k0, 4)), part(g1, key_entry(k1, 2)), part(g1, dropped)];
        restored.operators.insert(
            OperatorKey::Position(0),
            RestoredOperator { watermark: 50, watermark_max: 50, types: None, groups },
        );
        assert_eq!(fire_restored(restored, 200), [(0, k0, 4)]);
    }
}
