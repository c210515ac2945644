//! One shard's side of checkpoints: the participants registered at build time, the
//! snapshot being collected, and its asynchronous write.

use std::{
    cell::RefCell,
    collections::BTreeMap,
    hash::Hash,
    rc::Rc,
    sync::{Arc, atomic::Ordering},
    time::Instant,
};

use sluice_io::{CheckpointId, EventTime};

use super::{
    Barrier, CHANNEL_FLOOR_GROUP, ChannelPart, CheckpointError, CheckpointMode, Data, EntryWriter, GroupPart,
    OperatorKey, OperatorPart, ShardPart, SinkPart, SourcePart, StateError, StateTypes,
    coordinator::{Ack, CheckpointCoordinator},
};
use crate::dataflow::{Event, key_group, shard_of_group};

/// The snapshot of one checkpoint being collected on this shard.
struct InProgress {
    id: CheckpointId,
    reported: u32,
    part: ShardPart,
    first: Instant,
    keys: u64,
    inflight: u64,
}

/// A stateful operator's restore, run once the whole graph is built (when every uid is
/// known).
type Restore = Box<dyn FnOnce(&StateHandle) -> Result<(), StateError>>;

/// A stateful operator registered on this shard, in build order.
struct OperatorSlot {
    uid: Option<String>,
    types: StateTypes,
    restore: Option<Restore>,
}

/// One shard's checkpointing: who takes part, and the snapshot in progress.
pub(crate) struct ShardCheckpoint {
    shard: usize,
    shards: usize,
    key_groups: u32,
    pub(crate) coordinator: Arc<CheckpointCoordinator>,
    participants: u32,
    operators: Vec<OperatorSlot>,
    /// Each source's uid, by build position among the sources.
    sources: Vec<Option<String>>,
    next_sink: u32,
    next_channel: u32,
    mode: CheckpointMode,
    current: Option<InProgress>,
    /// The first checkpoint this shard snapshotted in this run: incremental state may
    /// build only on a completed checkpoint at or after it.
    first_snapshot: Option<CheckpointId>,
    /// Incremental snapshots since the last whole one, and how many make a whole one due.
    deltas: u32,
    full_every: u32,
    /// Operators built on this shard whose state cannot be checkpointed.
    pub(crate) unsupported: Vec<&'static str>,
}

impl ShardCheckpoint {
    pub(crate) fn new(
        shard: usize,
        shards: usize,
        key_groups: u32,
        coordinator: Arc<CheckpointCoordinator>,
        full_every: u32,
        mode: CheckpointMode,
    ) -> ShardCheckpoint {
        ShardCheckpoint {
            shard,
            shards,
            key_groups,
            coordinator,
            participants: 0,
            operators: Vec::new(),
            sources: Vec::new(),
            next_sink: 0,
            next_channel: 0,
            mode,
            current: None,
            first_snapshot: None,
            deltas: 0,
            full_every: full_every.max(1),
            unsupported: Vec::new(),
        }
    }

    pub(crate) fn shard(&self) -> usize {
        self.shard
    }

    pub(crate) fn shards(&self) -> usize {
        self.shards
    }

    /// Whether this shard owns key group `group` now.
    pub(crate) fn owns(&self, group: u32) -> bool {
        shard_of_group(group, self.key_groups, self.shards) == self.shard
    }

    /// The key the state of operator `id` (its build position) is stored under.
    fn key_of(&self, id: u32) -> OperatorKey {
        match &self.operators[id as usize].uid {
            Some(uid) => OperatorKey::Uid(uid.clone()),
            None => OperatorKey::Position(id),
        }
    }

    /// Gives stateful operator `id` its uid.
    pub(crate) fn set_uid(&mut self, id: u32, uid: &str) {
        self.operators[id as usize].uid = Some(uid.to_string());
    }

    pub(crate) fn add_source(&mut self) -> u32 {
        self.participants += 1;
        self.sources.push(None);
        (self.sources.len() - 1) as u32
    }

    /// Gives source `id` its uid.
    pub(crate) fn set_source_uid(&mut self, id: u32, uid: &str) {
        self.sources[id as usize] = Some(uid.to_string());
    }

    /// The key source `id`'s positions are stored under.
    pub(crate) fn source_key(&self, id: u32) -> OperatorKey {
        match &self.sources[id as usize] {
            Some(uid) => OperatorKey::Uid(uid.clone()),
            None => OperatorKey::Position(id),
        }
    }

    pub(crate) fn add_sink(&mut self) -> u32 {
        self.participants += 1;
        self.next_sink += 1;
        self.next_sink - 1
    }

    fn entry(&mut self, id: CheckpointId) -> &mut InProgress {
        if self.current.as_ref().is_none_or(|p| p.id != id) {
            // A snapshot of an older checkpoint still here was aborted: drop it.
            //
            // Incremental state builds on the last completed checkpoint, if this run's
            // shard has a part there, until a whole snapshot is due.
            // A savepoint is whole: it must not reference the job's chain.
            let completed = self.coordinator.completed();
            let whole = self.coordinator.full.load(Ordering::Acquire) == id.get();
            let base = match self.first_snapshot {
                Some(first) if !whole && completed >= first && self.deltas + 1 < self.full_every => Some(completed),
                _ => None,
            };
            self.first_snapshot.get_or_insert(id);
            self.deltas = if base.is_some() { self.deltas + 1 } else { 0 };
            self.current = Some(InProgress {
                id,
                reported: 0,
                part: ShardPart {
                    base: base.map(CheckpointId::get),
                    shard: self.shard as u32,
                    shards: self.shards as u32,
                    key_groups: self.key_groups,
                    ..ShardPart::default()
                },
                first: Instant::now(),
                keys: 0,
                inflight: 0,
            });
        }
        self.current.as_mut().expect("set above")
    }

    /// The checkpoint that incremental state snapshotted for checkpoint `id` builds on,
    /// or `None` when the snapshot must be whole.
    pub(crate) fn base(&mut self, id: CheckpointId) -> Option<CheckpointId> {
        self.entry(id).part.base.map(CheckpointId)
    }

    pub(crate) fn report_operator(&mut self, id: CheckpointId, part: OperatorPart, keys: u64) {
        let p = self.entry(id);
        p.part.operators.push(part);
        p.keys += keys;
        self.reported();
    }

    pub(crate) fn report_source(&mut self, id: CheckpointId, mut part: SourcePart) {
        part.uid = self.sources[part.id as usize].clone();
        self.entry(id).part.sources.push(part);
        self.reported();
    }

    pub(crate) fn report_sink(&mut self, id: CheckpointId, part: SinkPart) {
        self.entry(id).part.sinks.push(part);
        self.reported();
    }

    pub(crate) fn report_channel(&mut self, id: CheckpointId, part: ChannelPart, records: u64) {
        if self.current.as_ref().is_some_and(|p| p.id > id) {
            // An exchange finishing an aborted checkpoint after the next one began here:
            // starting that one over would abort the next one too.
            return;
        }
        let p = self.entry(id);
        p.part.channels.push(part);
        p.inflight += records;
        self.reported();
    }

    fn reported(&mut self) {
        let participants = self.participants;
        let p = self.current.as_mut().expect("reported into a checkpoint in progress");
        p.reported += 1;
        if p.reported < participants {
            return;
        }
        let mut p = self.current.take().expect("checked");
        let alignment = p.first.elapsed();
        if !p.part.operators.iter().any(|o| o.delta) {
            // Nothing in the part builds on the base: it does not need the base kept.
            p.part.base = None;
        }
        // The shard encodes its snapshot and goes on; the coordinator's thread writes it,
        // so no shard ever waits for the disk.
        // The part goes to the coordinator's thread, which encodes and writes it: the shard
        // goes back to its records at once.
        let base = p.part.base;
        self.coordinator.ack(Ack {
            id: p.id,
            shard: self.shard,
            part: p.part,
            base,
            keys: p.keys,
            inflight: p.inflight,
            alignment,
        });
    }
}

/// A stateful operator's link to its shard's checkpointing.
#[derive(Clone)]
pub(crate) struct StateHandle {
    id: u32,
    key_groups: u32,
    shard: Rc<RefCell<ShardCheckpoint>>,
}

/// One snapshot's entries, sorted into key groups as they are added.
pub(crate) struct GroupWriter {
    key_groups: u32,
    groups: BTreeMap<u32, EntryWriter>,
}

impl GroupWriter {
    /// Adds an entry `(key, value)` to the key group of `group_key` (the record key the
    /// entry belongs to, when the entry's key holds more than it).
    /// Adds an entry `write` encodes (see [`EntryWriter::push_with`]) to `group_key`'s group.
    pub(crate) fn push_with<G: Hash + ?Sized>(&mut self, group_key: &G, write: impl FnOnce(&mut Vec<u8>)) {
        let group = key_group(group_key, self.key_groups);
        self.groups.entry(group).or_default().push_with(write);
    }

    pub(crate) fn push_grouped<G: Hash + ?Sized, K: Data, V: Data>(&mut self, group_key: &G, key: &K, value: &V) {
        let group = key_group(group_key, self.key_groups);
        self.groups.entry(group).or_default().push(key, value);
    }
}

#[cfg(test)]
impl GroupWriter {
    /// A writer outside any checkpoint, for operators' unit tests.
    pub(crate) fn for_tests(key_groups: u32) -> GroupWriter {
        GroupWriter { key_groups, groups: BTreeMap::new() }
    }

    /// Each group's entry list, in group order.
    pub(crate) fn finish_all(self) -> Vec<Vec<u8>> {
        self.groups.into_values().map(EntryWriter::finish).collect()
    }
}

impl StateHandle {
    /// Registers a stateful operator whose state is `types` with the shard's
    /// checkpointing.
    pub(crate) fn register(shard: &Rc<RefCell<ShardCheckpoint>>, key_groups: u32, types: StateTypes) -> StateHandle {
        let id = {
            let mut s = shard.borrow_mut();
            s.participants += 1;
            s.operators.push(OperatorSlot { uid: None, types, restore: None });
            (s.operators.len() - 1) as u32
        };
        StateHandle { id, key_groups, shard: shard.clone() }
    }

    /// The operator's build position among the shard's stateful operators.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// Sets how the operator takes in its restored state: `restore` runs once the graph is
    /// built (so the operator's uid, given after it was built, is known), and only when
    /// the pipeline restores.
    pub(crate) fn on_restore(&self, restore: impl FnOnce(&StateHandle) -> Result<(), StateError> + 'static) {
        self.shard.borrow_mut().operators[self.id as usize].restore = Some(Box::new(restore));
    }

    /// Checks the restored checkpoint against the shard's operators (see
    /// [`super::identity::check_restored`]) and runs their restores, in build order.
    pub(crate) fn restore_all(
        shard: &Rc<RefCell<ShardCheckpoint>>,
        allow_non_restored: bool,
    ) -> Result<(), CheckpointError> {
        let (key_groups, restores, job, sources, restored) = {
            let mut s = shard.borrow_mut();
            let sources: std::collections::HashSet<OperatorKey> =
                (0..s.sources.len() as u32).map(|id| s.source_key(id)).collect();
            let keys: Vec<OperatorKey> = (0..s.operators.len() as u32).map(|id| s.key_of(id)).collect();
            let job = keys.iter().cloned().zip(s.operators.iter().map(|o| o.types.clone())).collect();
            let restores: Vec<_> =
                keys.into_iter().zip(s.operators.iter_mut().map(|o| o.restore.take())).enumerate().collect();
            (s.key_groups, restores, job, sources, s.coordinator.restored.clone())
        };
        let Some(restored) = restored else { return Ok(()) };
        super::identity::check_restored(&restored, &job, &sources, allow_non_restored)?;
        for (id, (key, restore)) in restores {
            let Some(restore) = restore else { continue };
            let handle = StateHandle { id: id as u32, key_groups, shard: shard.clone() };
            restore(&handle).map_err(|source| CheckpointError::RestoreState {
                id: restored.id,
                operator: key.to_string(),
                source,
            })?;
        }
        Ok(())
    }

    /// Calls `each` with every restored entry of the key groups this shard owns, and
    /// returns the operator's restored watermark (`None` when nothing is restored).
    pub(crate) fn restore<K: Data, V: Data>(
        &self,
        mut each: impl FnMut(K, V),
    ) -> Result<Option<EventTime>, StateError> {
        self.restore_grouped(|_, input| {
            let key = K::decode(input)?;
            each(key, V::decode(input)?);
            Ok(())
        })
    }

    /// The highest watermark any shard's part of the restored checkpoint had for this
    /// operator (`None` when nothing is restored).
    pub(crate) fn restored_watermark_max(&self) -> Option<EventTime> {
        let shard = self.shard.borrow();
        let restored = shard.coordinator.restored.as_ref()?;
        let op = restored.operators.get(&shard.key_of(self.id))?;
        Some(EventTime::from_millis(op.watermark_max))
    }

    /// Like [`StateHandle::restore`], for operators whose entries are not one typed pair:
    /// `each` reads one entry from the front of its input, and is told the entry's key
    /// group.
    pub(crate) fn restore_grouped(
        &self,
        mut each: impl FnMut(u32, &mut &[u8]) -> Result<(), StateError>,
    ) -> Result<Option<EventTime>, StateError> {
        let shard = self.shard.borrow();
        let Some(restored) = shard.coordinator.restored.as_ref() else { return Ok(None) };
        let Some(op) = restored.operators.get(&shard.key_of(self.id)) else { return Ok(None) };
        for group in op.groups.iter().filter(|g| shard.owns(g.key_group)) {
            super::codec::read_entries_raw(group.bytes(), |input| each(group.key_group, input))?;
        }
        Ok(Some(EventTime::from_millis(op.watermark)))
    }

    /// How many entries the restore will hand over per key group this shard owns (the
    /// parts' counts, deltas included): what an operator gathering them can reserve.
    pub(crate) fn restored_entries(&self) -> Vec<(u32, u64)> {
        let shard = self.shard.borrow();
        let Some(restored) = shard.coordinator.restored.as_ref() else { return Vec::new() };
        let Some(op) = restored.operators.get(&shard.key_of(self.id)) else { return Vec::new() };
        let mut counts: BTreeMap<u32, u64> = BTreeMap::new();
        for group in op.groups.iter().filter(|g| shard.owns(g.key_group)) {
            *counts.entry(group.key_group).or_default() += group.entries;
        }
        counts.into_iter().collect()
    }

    /// Adds an entry `write` encodes to every key group this shard owns (a change that
    /// concerns them all, such as a dropped window).
    pub(crate) fn for_owned_groups(&self, w: &mut GroupWriter, write: impl Fn(&mut Vec<u8>)) {
        let shard = self.shard.borrow();
        for group in (0..self.key_groups).filter(|g| shard.owns(*g)) {
            w.groups.entry(group).or_default().push_with(&write);
        }
    }

    /// A writer for this operator's snapshot.
    pub(crate) fn writer(&self) -> GroupWriter {
        GroupWriter { key_groups: self.key_groups, groups: BTreeMap::new() }
    }

    /// The checkpoint an incremental snapshot at `barrier` builds on (`None`: whole).
    pub(crate) fn base(&self, barrier: Barrier) -> Option<CheckpointId> {
        self.shard.borrow_mut().base(barrier.id)
    }

    /// The last completed checkpoint.
    pub(crate) fn completed(&self) -> CheckpointId {
        self.shard.borrow().coordinator.completed()
    }

    /// Hands the snapshot taken at `barrier` to the shard: whole, or with `delta` the
    /// changes since [`StateHandle::base`].
    pub(crate) fn report_delta(&self, barrier: Barrier, watermark: EventTime, writer: GroupWriter, delta: bool) {
        let mut keys = 0;
        let (uid, types) = {
            let s = self.shard.borrow();
            let slot = &s.operators[self.id as usize];
            (slot.uid.clone(), slot.types.clone())
        };
        let part = OperatorPart {
            id: self.id,
            uid,
            kind: types.kind,
            key_type: types.key,
            state_type: types.state,
            watermark: watermark.millis(),
            delta,
            groups: writer
                .groups
                .into_iter()
                .map(|(key_group, w)| {
                    keys += w.count();
                    GroupPart { key_group, entries: w.count(), bytes: w.finish() }
                })
                .collect(),
        };
        self.shard.borrow_mut().report_operator(barrier.id, part, keys);
    }

    /// Hands the whole snapshot taken at `barrier` to the shard.
    pub(crate) fn report(&self, barrier: Barrier, watermark: EventTime, writer: GroupWriter) {
        self.report_delta(barrier, watermark, writer, false);
    }
}

/// An exchange's link to its shard's checkpointing: its restored in-flight records, and
/// (in unaligned mode, where it takes part in every checkpoint) the in-flight records it
/// reports.
pub(crate) struct ChannelHandle {
    id: u32,
    key_groups: u32,
    unaligned: bool,
    shard: Rc<RefCell<ShardCheckpoint>>,
}

impl ChannelHandle {
    /// Registers the next exchange built on the shard. Every exchange gets an id (its
    /// build order), whatever the mode, so that a checkpoint taken in one mode restores in
    /// the other; only in unaligned mode does it take part in checkpoints.
    pub(crate) fn register(shard: &Rc<RefCell<ShardCheckpoint>>, key_groups: u32) -> ChannelHandle {
        let mut s = shard.borrow_mut();
        let unaligned = s.mode == CheckpointMode::Unaligned;
        if unaligned {
            s.participants += 1;
        }
        s.next_channel += 1;
        ChannelHandle { id: s.next_channel - 1, key_groups, unaligned, shard: shard.clone() }
    }

    /// Whether the pipeline checkpoints in unaligned mode.
    pub(crate) fn unaligned(&self) -> bool {
        self.unaligned
    }

    /// The restored in-flight records of the key groups this shard owns, each with the
    /// watermark to deliver before it: the least of the watermark its channel had sent
    /// before it and the floor of its part (what every channel had sent before its
    /// barrier), or `EventTime::MIN` for a checkpoint of format 2 or 1. Sorted by that
    /// watermark, stably (each group's records in the order they were recorded; a
    /// channel's watermarks only rise along it). Empty when nothing is restored.
    pub(crate) fn restore<T: Data>(&self) -> Result<Vec<(EventTime, Event<T>)>, StateError> {
        let shard = self.shard.borrow();
        let mut records = Vec::new();
        let Some(restored) = shard.coordinator.restored.as_ref() else { return Ok(records) };
        let Some(channels) = restored.channels.get(&self.id) else { return Ok(records) };
        for channel in channels {
            for group in channel.groups.iter().filter(|g| shard.owns(g.key_group)) {
                super::codec::read_entries_raw(group.bytes(), &mut |input: &mut &[u8]| {
                    let watermark = match channel.floor {
                        Some(floor) => i64::decode(input)?.min(floor),
                        None => i64::MIN,
                    };
                    records.push((EventTime::from_millis(watermark), Event::<T>::decode(input)?));
                    Ok(())
                })?;
            }
        }
        records.sort_by_key(|(watermark, _)| *watermark);
        Ok(records)
    }

    /// Whether checkpoint `id` is the final one of bounded inputs.
    pub(crate) fn is_final(&self, id: CheckpointId) -> bool {
        self.shard.borrow().coordinator.final_trigger.load(Ordering::Acquire) == id.get()
    }

    /// A writer for one checkpoint's in-flight records.
    pub(crate) fn writer(&self) -> GroupWriter {
        GroupWriter { key_groups: self.key_groups, groups: BTreeMap::new() }
    }

    /// Hands the in-flight records of checkpoint `barrier` to the shard, with `floor`:
    /// the watermark the channels had sent before their barriers, combined as the
    /// exchange combines them (see [`CHANNEL_FLOOR_GROUP`]).
    pub(crate) fn report(&self, barrier: Barrier, writer: GroupWriter, floor: EventTime) {
        let mut records = 0;
        let mut groups: Vec<GroupPart> = writer
            .groups
            .into_iter()
            .map(|(key_group, w)| {
                records += w.count();
                GroupPart { key_group, entries: w.count(), bytes: w.finish() }
            })
            .collect();
        let mut w = EntryWriter::new();
        w.push_with(|out| floor.millis().encode(out));
        groups.push(GroupPart { key_group: CHANNEL_FLOOR_GROUP, entries: 1, bytes: w.finish() });
        self.shard.borrow_mut().report_channel(barrier.id, ChannelPart { id: self.id, groups }, records);
    }
}
