//! Checkpoints: Chandy-Lamport barriers through the dataflow, per-shard snapshots written
//! while records keep flowing, and recovery from the last completed checkpoint.
//!
//! **The protocol.** A coordinator (a thread of its own, owning the
//! [`CheckpointStore`](sluice_io::CheckpointStore)) begins checkpoint *n* every
//! interval and raises the *trigger*. Each shard's driver sees it in its next round and
//! every source on the shard records its split positions and pushes barrier *n* into its
//! stream, ahead of any later record. Barriers travel with the data: through the operators
//! of a shard by plain calls, and through an exchange as a ring message after the records
//! before it. An operator with several inputs *aligns*: once barrier *n* arrives on one
//! input it holds that input (an exchange stops reading that shard's ring; a union keeps
//! what arrives in order) until the barrier has arrived on all of them, then passes it on.
//! Each stateful operator snapshots its state when the barrier passes it (copying what it
//! writes into entry lists, on the shard's thread: the only moment a shard spends on a
//! checkpoint); the shard's snapshot of *n* is complete when every stateful operator,
//! source and transactional sink of the shard has reported, and goes to the coordinator's
//! thread, which encodes it (rkyv) and writes it as the part `shard-{s}`: no shard ever
//! waits for another or for the disk. When every shard's part is written, the
//! coordinator writes the manifest atomically; that is the moment checkpoint *n* is
//! completed, and transactional sinks then commit what they wrote before barrier *n*.
//!
//! **State** is split by key group (the unit `key_by` routes by): every entry of a
//! snapshot is tagged with its key's group, so a checkpoint taken at *m* shards restores at
//! *n*: each shard takes the groups it owns now, from whichever parts hold them.
//!
//! **Incremental snapshots.** Keyed process state and tumbling/sliding window state write
//! only what changed since the last completed checkpoint (the part names it as its base),
//! and a whole snapshot every [`CheckpointConfig::full_every`]; a restore reads each part's
//! chain back to a whole one and applies it oldest first.
//!
//! **Unaligned mode** ([`CheckpointMode::Unaligned`]). Aligned barriers wait behind the
//! records queued in the rings: under backpressure a checkpoint takes as long as
//! draining the rings does. In unaligned mode an exchange's receiving side passes barrier
//! *n* on as soon as it arrives from its *first* input (usually its own shard's, since
//! every shard injects on the same trigger), so the operators after it snapshot at once.
//! Each record that arrives afterwards from an input whose barrier *n* has not arrived yet
//! is processed as usual **and** recorded as *in-flight data* of checkpoint *n*; the
//! receiver's contribution to the shard's snapshot is complete once every input's barrier
//! *n* has arrived (or the input ended). So that a slow operator downstream does not hold
//! this up, the receiver then *reads ahead*: it drains each ring up to that ring's barrier
//! into a buffer of its own (recording what it reads), and processes the buffered
//! messages afterwards, in order, before reading that ring again. The read-ahead is
//! bounded per input ([`READ_AHEAD_BATCHES_PER_RING`] ring capacities); an input that
//! reaches the bound waits for its buffer to drain, as an aligned checkpoint would.
//! Records buffered and not yet processed when the next checkpoint's first barrier
//! passes are in-flight data of that checkpoint too. In-flight records are stored per
//! exchange, by key group (never incrementally: whole each time), and a restore delivers
//! each to the shard that owns its group now, ahead of anything from the rings. Unions
//! stay aligned in both modes: their inputs are calls on the same shard, with no queue for
//! a barrier to overtake. Watermarks are not stored: a restored receiver starts from the
//! restored operators' watermarks and its inputs' new ones (so an in-flight record that was
//! already late in its own input may be judged against the older, restored watermark).
//! The final checkpoint of bounded inputs passes aligned in either mode: its sources end
//! once it completes, so output after its barrier would never be committed.
//!
//! **Bounded inputs** end with a last checkpoint: a source that runs out passes the end of
//! time as its watermark (so windows fire) and waits; once every source of the pipeline
//! has, the coordinator takes a final checkpoint, and only when it completes do the sources
//! end. A restart after that finds nothing to replay.

mod codec;
mod coordinator;
mod identity;
mod legacy;
mod savepoint;
mod shard;

use std::{collections::HashMap, path::PathBuf, sync::Arc, time::Duration};

use rkyv::util::AlignedVec;
use sluice_io::CheckpointId;

pub use crate::error::CheckpointError;
#[cfg(test)]
pub(crate) use codec::read_entries_raw;
pub use codec::{Data, EntryWriter, StateError, read_entries, take};
pub use coordinator::CheckpointFailure;
pub(crate) use coordinator::{CheckpointCoordinator, open_store, run_coordinator};
pub(crate) use identity::{OperatorKey, StateTypes};
pub use savepoint::Savepoint;
pub(crate) use savepoint::SavepointRequest;
pub(crate) use shard::{ChannelHandle, GroupWriter, ShardCheckpoint, StateHandle};

use crate::error::{EngineError, Result};

/// How an exchange's receiving side treats a checkpoint barrier (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CheckpointMode {
    /// Each input is held, once its barrier arrived, until every input's has: the
    /// snapshot holds no in-flight records, but under backpressure the barrier waits
    /// behind every record queued in the rings.
    #[default]
    Aligned,
    /// The first barrier to arrive is passed on at once; records that arrive from the
    /// other inputs before their barriers are stored with the snapshot. Checkpoints do not
    /// wait for queued records to be processed, at the cost of writing them.
    Unaligned,
}

impl std::fmt::Display for CheckpointMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CheckpointMode::Aligned => "aligned",
            CheckpointMode::Unaligned => "unaligned",
        })
    }
}

impl std::str::FromStr for CheckpointMode {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<CheckpointMode> {
        match s {
            "aligned" => Ok(CheckpointMode::Aligned),
            "unaligned" => Ok(CheckpointMode::Unaligned),
            other => Err(EngineError::InvalidConfig(format!(
                "unknown checkpoint mode `{other}`: expected `aligned` or `unaligned`"
            ))),
        }
    }
}

/// How far an exchange's receiving side reads ahead of processing in unaligned mode, per
/// input, in ring capacities ([`RingConfig::ring_capacity_batches`] messages each): enough
/// to reach a barrier queued behind a full ring and the few messages its sender holds
/// pending, while bounding what a receiver buffers when another shard's barrier is late.
///
/// [`RingConfig::ring_capacity_batches`]: crate::ring::RingConfig::ring_capacity_batches
pub const READ_AHEAD_BATCHES_PER_RING: usize = 2;

/// How and where a pipeline checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// The checkpoint directory (created if missing). A pipeline started on a directory
    /// holding a completed checkpoint restores from it.
    pub dir: PathBuf,
    /// Time from one checkpoint's completion (or abort) to the next one's start. Default 1 s.
    pub interval: Duration,
    /// Incremental snapshots: state that supports it (keyed process functions) writes only
    /// the keys changed since the last completed checkpoint, and a whole snapshot every
    /// this many checkpoints (and after a restore). `1` writes whole snapshots always.
    /// Default 10.
    pub full_every: u32,
    /// Completed checkpoints kept. Default 3.
    pub keep: usize,
    /// A checkpoint not completed this long after it began is aborted. Default 60 s.
    pub timeout: Duration,
    /// Aligned or unaligned barriers. Default [`CheckpointMode::Aligned`]. A checkpoint
    /// taken in either mode restores in either.
    pub mode: CheckpointMode,
    /// A savepoint ([`RunningPipeline::savepoint`]) to start from when [`dir`] holds no
    /// completed checkpoint. Once this job has completed a checkpoint of its own, a
    /// restart restores from that (the newer state), not from the savepoint again.
    /// Default none.
    ///
    /// [`RunningPipeline::savepoint`]: crate::dataflow::RunningPipeline::savepoint
    /// [`dir`]: CheckpointConfig::dir
    pub restore_from: Option<PathBuf>,
    /// Lets a restore drop the state of operators the job no longer has (their uid, or
    /// build position, is not in the job); without it, such a restore is refused with
    /// [`CheckpointError::UnknownOperator`]. Flink's `allowNonRestoredState`. Default
    /// false.
    pub allow_non_restored_state: bool,
}

impl CheckpointConfig {
    /// Checkpoints in `dir` with the defaults.
    pub fn new(dir: impl Into<PathBuf>) -> CheckpointConfig {
        CheckpointConfig {
            dir: dir.into(),
            interval: Duration::from_secs(1),
            full_every: 10,
            keep: 3,
            timeout: Duration::from_secs(60),
            mode: CheckpointMode::Aligned,
            restore_from: None,
            allow_non_restored_state: false,
        }
    }

    /// Sets [`CheckpointConfig::restore_from`]: start from the savepoint in `dir`.
    #[must_use]
    pub fn restore_from(mut self, dir: impl Into<PathBuf>) -> Self {
        self.restore_from = Some(dir.into());
        self
    }

    /// Sets [`CheckpointConfig::allow_non_restored_state`].
    #[must_use]
    pub fn allow_non_restored_state(mut self, allow: bool) -> Self {
        self.allow_non_restored_state = allow;
        self
    }

    /// Sets [`CheckpointConfig::interval`].
    #[must_use]
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Sets [`CheckpointConfig::full_every`].
    #[must_use]
    pub fn full_every(mut self, n: u32) -> Self {
        self.full_every = n;
        self
    }

    /// Sets [`CheckpointConfig::keep`].
    #[must_use]
    pub fn keep(mut self, keep: usize) -> Self {
        self.keep = keep;
        self
    }

    /// Sets [`CheckpointConfig::timeout`].
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets [`CheckpointConfig::mode`].
    #[must_use]
    pub fn mode(mut self, mode: CheckpointMode) -> Self {
        self.mode = mode;
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.keep == 0 || self.full_every == 0 || self.interval.is_zero() || self.timeout.is_zero() {
            return Err(EngineError::InvalidConfig(format!(
                "checkpoints need keep >= 1, full_every >= 1 and a non-zero interval and timeout: {self:?}"
            )));
        }
        Ok(())
    }
}

/// Checkpoint barrier `id`, as operators see it ([`Operator::on_barrier`]).
///
/// [`Operator::on_barrier`]: crate::dataflow::Operator::on_barrier
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Barrier {
    /// The checkpoint.
    pub id: CheckpointId,
}

/// What one completed checkpoint cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CheckpointStats {
    /// The checkpoint.
    pub id: CheckpointId,
    /// From the trigger to the manifest being durable.
    pub duration: Duration,
    /// The longest time a shard spent between its first and its last participant
    /// reporting (barrier alignment, plus the snapshots themselves).
    pub alignment: Duration,
    /// Bytes of state written (all parts).
    pub bytes: u64,
    /// Keyed entries written (all parts).
    pub keys: u64,
    /// In-flight records stored (unaligned mode; all parts): records that had crossed
    /// an exchange's barrier-free input when the first barrier passed.
    pub inflight_records: u64,
}

/// One shard's snapshot: the body of part `shard-{s}`.
#[derive(Debug, Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct ShardPart {
    /// The checkpoint this part's incremental operator states are deltas on (the same
    /// shard's part there), or none when every state in it is whole.
    pub(crate) base: Option<u64>,
    pub(crate) shard: u32,
    pub(crate) shards: u32,
    pub(crate) key_groups: u32,
    pub(crate) operators: Vec<OperatorPart>,
    pub(crate) sources: Vec<SourcePart>,
    pub(crate) sinks: Vec<SinkPart>,
    /// Each exchange's in-flight records on this shard (unaligned mode), always whole.
    pub(crate) channels: Vec<ChannelPart>,
}

/// The in-flight records of one exchange's receiving side, each an [`Event`] encoding in
/// the key group of its key, after the watermark its channel had sent before it (an
/// `i64`, format 3), and the group [`CHANNEL_FLOOR_GROUP`] whose one entry is the floor
/// of those watermarks (an `i64`: what every channel had sent before its barrier).
///
/// [`Event`]: crate::dataflow::Event
#[derive(Debug, Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct ChannelPart {
    /// The exchange: its index among the pipeline's `key_by`s, in build order.
    pub(crate) id: u32,
    pub(crate) groups: Vec<GroupPart>,
}

/// The pseudo key group of a [`ChannelPart`] that holds the floor of its records'
/// watermarks (no key group is this high).
pub(crate) const CHANNEL_FLOOR_GROUP: u32 = u32::MAX;

/// One exchange's in-flight records from one part, as read back.
#[derive(Debug, Clone)]
pub(crate) struct RestoredChannel {
    /// The floor of the records' watermarks (`None`: a part of format 2 or 1, whose
    /// records carry no watermark).
    pub(crate) floor: Option<i64>,
    pub(crate) groups: Vec<RestoredGroup>,
}

/// One stateful operator's state on one shard, by key group.
#[derive(Debug, Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct OperatorPart {
    /// The operator's build position among the job's stateful operators.
    pub(crate) id: u32,
    /// The operator's uid, when it was given one: it is then restored by uid, else by
    /// position.
    pub(crate) uid: Option<String>,
    /// The operator's kind, key type and state type (`std::any::type_name`), which a
    /// restore checks.
    pub(crate) kind: String,
    pub(crate) key_type: String,
    pub(crate) state_type: String,
    /// The operator's watermark when the barrier passed it.
    pub(crate) watermark: i64,
    /// The entries are changes since the part's base (upserts, and deletions as the
    /// operator encodes them) rather than the whole state.
    pub(crate) delta: bool,
    pub(crate) groups: Vec<GroupPart>,
}

/// One key group's entries ([`EntryWriter`]).
#[derive(Debug, Default, Clone, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct GroupPart {
    pub(crate) key_group: u32,
    pub(crate) entries: u64,
    pub(crate) bytes: Vec<u8>,
}

/// A source's split positions: (split key, next position), and a bounded source's ends:
/// (split key, end position).
#[derive(Debug, Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct SourcePart {
    /// The source's build position among the job's sources.
    pub(crate) id: u32,
    /// The source's uid, when it was given one: it is then restored by uid.
    pub(crate) uid: Option<String>,
    pub(crate) positions: Vec<(u64, i64)>,
    pub(crate) bounds: Vec<(u64, i64)>,
}

/// A transactional sink's transactions that must be committed once this checkpoint is.
#[derive(Debug, Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct SinkPart {
    pub(crate) id: u32,
    pub(crate) pending: Vec<PendingTxn>,
    /// A two-phase-commit sink's pre-committed transactions, each as its `Data` encoding.
    pub(crate) opaque: Vec<Vec<u8>>,
}

/// A transaction a sink wrote: its producer id and the partitions it touched.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct PendingTxn {
    pub(crate) producer: i64,
    pub(crate) partitions: Vec<u32>,
}

/// The state of a completed checkpoint, merged over the shards that wrote it.
#[derive(Debug, Default)]
pub(crate) struct Restored {
    pub(crate) id: CheckpointId,
    pub(crate) shards: u32,
    pub(crate) key_groups: u32,
    /// Per operator: the least watermark over the shards, and every key group's entries.
    pub(crate) operators: HashMap<OperatorKey, RestoredOperator>,
    pub(crate) sources: HashMap<OperatorKey, HashMap<u64, i64>>,
    /// Per bounded source: where each split stops (absent for unbounded sources).
    pub(crate) source_bounds: HashMap<OperatorKey, HashMap<u64, i64>>,
    pub(crate) sinks: HashMap<u32, Vec<PendingTxn>>,
    pub(crate) sink_txns: HashMap<u32, Vec<Vec<u8>>>,
    /// Per exchange: its in-flight records, one entry per part that held some.
    pub(crate) channels: HashMap<u32, Vec<RestoredChannel>>,
}

/// One operator's restored state, merged over the shards.
#[derive(Debug, Clone)]
pub(crate) struct RestoredOperator {
    /// The least watermark over the shards.
    pub(crate) watermark: i64,
    /// The highest watermark over the shards (what event-time state TTL restores: a value
    /// a shard dropped as expired stays expired).
    pub(crate) watermark_max: i64,
    /// The operator's kind, key and state types (`None`: a checkpoint of the format before
    /// they were stored).
    pub(crate) types: Option<StateTypes>,
    pub(crate) groups: Vec<RestoredGroup>,
}

/// One key group's restored entries ([`EntryWriter`]): a range of the part body they were
/// read in, shared by every group of that part rather than copied out of it.
#[derive(Debug, Clone)]
pub(crate) struct RestoredGroup {
    pub(crate) key_group: u32,
    pub(crate) entries: u64,
    body: Arc<AlignedVec<16>>,
    range: std::ops::Range<usize>,
}

impl RestoredGroup {
    /// The group's entry list.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.body[self.range.clone()]
    }

    /// A group holding a copy of `bytes` (parts built in memory, as tests do, and parts of
    /// the legacy format).
    pub(crate) fn owned(key_group: u32, entries: u64, bytes: &[u8]) -> RestoredGroup {
        let mut body = AlignedVec::with_capacity(bytes.len());
        body.extend_from_slice(bytes);
        RestoredGroup { key_group, entries, range: 0..bytes.len(), body: Arc::new(body) }
    }
}

/// A part as read back: a [`ShardPart`] whose key groups stay in the body they were read
/// into ([`RestoredGroup`]), so that a restore copies no state before the operators
/// decode it.
#[derive(Debug)]
pub(crate) struct ReadPart {
    pub(crate) shards: u32,
    pub(crate) key_groups: u32,
    pub(crate) operators: Vec<ReadOperator>,
    pub(crate) sources: Vec<SourcePart>,
    pub(crate) sinks: Vec<SinkPart>,
    /// Per exchange (its id): its in-flight records.
    pub(crate) channels: Vec<(u32, RestoredChannel)>,
}

/// An [`OperatorPart`] as read back.
#[derive(Debug)]
pub(crate) struct ReadOperator {
    pub(crate) key: OperatorKey,
    pub(crate) types: Option<StateTypes>,
    pub(crate) watermark: i64,
    pub(crate) delta: bool,
    pub(crate) groups: Vec<RestoredGroup>,
}

impl Restored {
    /// Takes in one shard's chain of parts, oldest first: the last whole snapshot of each
    /// operator and the deltas after it, in order.
    pub(crate) fn merge_chain(&mut self, chain: Vec<ReadPart>) {
        let mut operators: HashMap<OperatorKey, RestoredOperator> = HashMap::new();
        let mut last = None;
        for part in chain {
            for op in part.operators {
                let slot = operators.entry(op.key).or_insert(RestoredOperator {
                    watermark: i64::MAX,
                    watermark_max: i64::MIN,
                    types: None,
                    groups: Vec::new(),
                });
                if !op.delta {
                    slot.groups.clear();
                }
                slot.watermark = op.watermark;
                slot.watermark_max = op.watermark;
                slot.types = op.types;
                slot.groups.extend(op.groups);
            }
            // In-flight records are whole in every part: only the newest part's count.
            last = Some((part.shards, part.key_groups, part.sources, part.sinks, part.channels));
        }
        let Some((shards, key_groups, sources, sinks, channels)) = last else { return };
        for (id, channel) in channels {
            self.channels.entry(id).or_default().push(channel);
        }
        self.shards = shards;
        self.key_groups = key_groups;
        for (key, op) in operators {
            let slot = self.operators.entry(key).or_insert(RestoredOperator {
                watermark: i64::MAX,
                watermark_max: i64::MIN,
                types: op.types.clone(),
                groups: Vec::new(),
            });
            slot.watermark = slot.watermark.min(op.watermark);
            slot.watermark_max = slot.watermark_max.max(op.watermark_max);
            slot.groups.extend(op.groups);
        }
        for source in sources {
            let key = source.uid.map_or(OperatorKey::Position(source.id), OperatorKey::Uid);
            self.sources.entry(key.clone()).or_default().extend(source.positions);
            if !source.bounds.is_empty() {
                self.source_bounds.entry(key).or_default().extend(source.bounds);
            }
        }
        for sink in sinks {
            self.sinks.entry(sink.id).or_default().extend(sink.pending);
            self.sink_txns.entry(sink.id).or_default().extend(sink.opaque);
        }
    }
}

/// The name of shard `s`'s part.
pub(crate) fn part_name(shard: usize) -> String {
    format!("shard-{shard}")
}

/// Encodes a part body.
pub(crate) fn encode_part(part: &ShardPart) -> std::result::Result<Vec<u8>, StateError> {
    rkyv::to_bytes::<rkyv::rancor::Error>(part).map(|b| b.to_vec()).map_err(|e| StateError(e.to_string()))
}

/// Decodes a part body (as [`sluice_io::CheckpointStore::read_part`] returns it): checks
/// the archive, then takes its small pieces out and leaves every key group's entries in
/// `body`, which the groups share. `watermarked`: the part is of format 3, its in-flight
/// records stored with their watermarks.
pub(crate) fn decode_part(body: AlignedVec<16>, watermarked: bool) -> std::result::Result<ReadPart, StateError> {
    use rkyv::rancor::Error;
    let body = Arc::new(body);
    let archived = rkyv::access::<ArchivedShardPart, Error>(&body).map_err(|e| StateError(e.to_string()))?;
    let start = body.as_ptr() as usize;
    let groups = |groups: &rkyv::vec::ArchivedVec<ArchivedGroupPart>| -> Vec<RestoredGroup> {
        groups
            .iter()
            .map(|g| {
                let bytes = g.bytes.as_slice();
                // The archive was checked to lie within `body`, so this is an offset in it.
                let from = bytes.as_ptr() as usize - start;
                RestoredGroup {
                    key_group: g.key_group.to_native(),
                    entries: g.entries.to_native(),
                    body: body.clone(),
                    range: from..from + bytes.len(),
                }
            })
            .collect()
    };
    let operators = archived
        .operators
        .iter()
        .map(|op| ReadOperator {
            key: match op.uid.as_ref() {
                Some(uid) => OperatorKey::Uid(uid.to_string()),
                None => OperatorKey::Position(op.id.to_native()),
            },
            types: Some(StateTypes {
                kind: op.kind.to_string(),
                key: op.key_type.to_string(),
                state: op.state_type.to_string(),
            }),
            watermark: op.watermark.to_native(),
            delta: op.delta,
            groups: groups(&op.groups),
        })
        .collect();
    let channels = archived
        .channels
        .iter()
        .map(|c| Ok((c.id.to_native(), restored_channel(groups(&c.groups), watermarked)?)))
        .collect::<std::result::Result<_, StateError>>()?;
    let small = |e: Error| StateError(e.to_string());
    Ok(ReadPart {
        shards: archived.shards.to_native(),
        key_groups: archived.key_groups.to_native(),
        operators,
        sources: rkyv::deserialize::<Vec<SourcePart>, Error>(&archived.sources).map_err(small)?,
        sinks: rkyv::deserialize::<Vec<SinkPart>, Error>(&archived.sinks).map_err(small)?,
        channels,
    })
}

/// Takes a channel part's floor out of its groups (format 3).
fn restored_channel(
    mut groups: Vec<RestoredGroup>,
    watermarked: bool,
) -> std::result::Result<RestoredChannel, StateError> {
    if !watermarked {
        return Ok(RestoredChannel { floor: None, groups });
    }
    let at = groups
        .iter()
        .position(|g| g.key_group == CHANNEL_FLOOR_GROUP)
        .ok_or_else(|| StateError("in-flight records without the floor of their watermarks".into()))?;
    let group = groups.remove(at);
    let mut floor = None;
    codec::read_entries_raw(group.bytes(), |input| {
        floor = Some(i64::decode(input)?);
        Ok(())
    })?;
    let floor = floor.ok_or_else(|| StateError("an empty floor of in-flight watermarks".into()))?;
    Ok(RestoredChannel { floor: Some(floor), groups })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel(id: u32, key_group: u32, entries: u64) -> ChannelPart {
        ChannelPart { id, groups: vec![GroupPart { key_group, entries, bytes: vec![0; 8] }] }
    }

    #[test]
    fn a_restore_takes_in_flight_records_from_the_newest_part_of_each_chain_only() {
        // Shard 0's chain: a whole part, then a delta; in-flight records are whole in each.
        let older =
            ShardPart { shard: 0, shards: 2, key_groups: 8, channels: vec![channel(0, 1, 5)], ..ShardPart::default() };
        let newer = ShardPart {
            base: Some(1),
            shard: 0,
            shards: 2,
            key_groups: 8,
            channels: vec![channel(0, 2, 3)],
            ..ShardPart::default()
        };
        let other =
            ShardPart { shard: 1, shards: 2, key_groups: 8, channels: vec![channel(0, 6, 4)], ..ShardPart::default() };
        let read = |part: ShardPart| {
            let mut body = AlignedVec::new();
            body.extend_from_slice(&encode_part(&part).unwrap());
            decode_part(body, false).unwrap()
        };
        let mut restored = Restored::default();
        restored.merge_chain(vec![read(older), read(newer)]);
        restored.merge_chain(vec![read(other)]);
        let groups: Vec<(u32, u64)> =
            restored.channels[&0].iter().flat_map(|c| &c.groups).map(|g| (g.key_group, g.entries)).collect();
        assert_eq!(groups, [(2, 3), (6, 4)]);
    }

    #[test]
    fn in_flight_records_of_format_3_carry_their_floor_and_format_2_none() {
        let mut floor = EntryWriter::new();
        floor.push_with(|out| 42i64.encode(out));
        let mut part = channel(0, 1, 5);
        part.groups.push(GroupPart { key_group: CHANNEL_FLOOR_GROUP, entries: 1, bytes: floor.finish() });
        let body = || {
            let part = ShardPart {
                shard: 0,
                shards: 1,
                key_groups: 8,
                channels: vec![part_clone(&part)],
                ..ShardPart::default()
            };
            let mut body = AlignedVec::new();
            body.extend_from_slice(&encode_part(&part).unwrap());
            body
        };
        let (id, channel) = decode_part(body(), true).unwrap().channels.remove(0);
        assert_eq!((id, channel.floor), (0, Some(42)));
        let groups: Vec<u32> = channel.groups.iter().map(|g| g.key_group).collect();
        assert_eq!(groups, [1], "the floor is no key group");
        // The same part read as format 2: every group is records, none has a floor.
        let (_, channel) = decode_part(body(), false).unwrap().channels.remove(0);
        assert_eq!(channel.floor, None);
        // Format 3 without the floor is refused, not restored without watermarks.
        let bare =
            ShardPart { shard: 0, shards: 1, key_groups: 8, channels: vec![channel_at(1)], ..ShardPart::default() };
        let mut body = AlignedVec::new();
        body.extend_from_slice(&encode_part(&bare).unwrap());
        let err = decode_part(body, true).unwrap_err();
        assert!(err.to_string().contains("floor"), "{err}");
    }

    fn part_clone(c: &ChannelPart) -> ChannelPart {
        let groups =
            c.groups.iter().map(|g| GroupPart { key_group: g.key_group, entries: g.entries, bytes: g.bytes.clone() });
        ChannelPart { id: c.id, groups: groups.collect() }
    }

    fn channel_at(key_group: u32) -> ChannelPart {
        channel(0, key_group, 1)
    }

    #[test]
    fn modes_parse_and_print_by_name() {
        for mode in [CheckpointMode::Aligned, CheckpointMode::Unaligned] {
            assert_eq!(mode.to_string().parse::<CheckpointMode>().unwrap(), mode);
        }
        assert_eq!(CheckpointMode::default(), CheckpointMode::Aligned);
        assert!("Unaligned".parse::<CheckpointMode>().is_err());
        let config = CheckpointConfig::new("/tmp/x").mode(CheckpointMode::Unaligned);
        assert_eq!(config.mode, CheckpointMode::Unaligned);
    }
}
