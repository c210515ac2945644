//! Sources: the [`Source`] trait, and the generator and in-process channel sources.
//!
//! A source instance runs on every shard and reads that shard's share of the input, split
//! into *splits* (a topic's partitions, a set of channels, a generator's share), each with
//! its own watermark. The driver pulls it one batch at a time, and only while nothing
//! downstream is pending.

use std::{
    cell::RefCell,
    collections::HashMap,
    pin::Pin,
    rc::Rc,
    sync::atomic::Ordering,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use futures_lite::Stream as _;
use sluice_io::{CheckpointId, EventTime};

use super::UserError;
use super::{
    Event, Port,
    checkpoint::{Barrier, CheckpointError, ShardCheckpoint, SourcePart, StateError},
    scope::Input,
    watermark::{SourceClock, TimeSource, WatermarkKind, WatermarkStrategy},
};

/// One shard's instance of a source.
pub trait Source<T>: 'static {
    /// How many splits this instance reads; fixed for its life.
    fn splits(&self) -> usize;

    /// Appends up to `max` next records of one split to `out` and returns that split's
    /// index; `Ready(None)` once every split has ended; `Pending` when no split has records
    /// now, after arranging for `cx` to be woken when one may.
    fn poll_next(&mut self, cx: &mut Context<'_>, out: &mut Vec<T>, max: usize) -> Poll<Option<usize>>;

    /// [`Source::poll_next`] with each record stamped as it comes: appends up to `max`
    /// records of one split to `out` as events at `time(&record)`. The default reads into
    /// `scratch` (left empty) and stamps from there; a source that makes its records, as
    /// the [`Generator`] does, can write them straight in and save a pass and a copy per
    /// record.
    fn poll_events<E: Fn(&T) -> EventTime>(
        &mut self,
        cx: &mut Context<'_>,
        scratch: &mut Vec<T>,
        out: &mut Vec<Event<T>>,
        max: usize,
        time: &E,
    ) -> Poll<Option<usize>>
    where
        Self: Sized,
    {
        scratch.clear();
        let split = self.poll_next(cx, scratch, max);
        out.extend(scratch.drain(..).map(|value| Event { time: time(&value), value }));
        split
    }

    /// For a checkpoint: every split's position, as (split key, position of the next
    /// record to emit), where the split key names the split independently of the shard
    /// that reads it (a topic partition's number). `None`, the default, for a source that
    /// cannot be replayed from a position: a pipeline that checkpoints refuses it.
    fn positions(&self) -> Option<Vec<(u64, i64)>> {
        None
    }

    /// Moves to the positions of a restored checkpoint (from every shard's instance; take
    /// the splits this instance reads).
    ///
    /// # Errors
    ///
    /// Positions this source cannot resume from.
    fn restore(&mut self, positions: &std::collections::HashMap<u64, i64>) -> Result<(), UserError> {
        let _ = positions;
        Err(RestoreError::NotReplayable.into())
    }

    /// For a checkpoint: where each split of a bounded source stops, as (split key, end
    /// position), so that a restored run reads exactly the range the interrupted one
    /// would have, even if more was written in between. `None`, the default, for a source
    /// with no fixed end.
    fn bounds(&self) -> Option<Vec<(u64, i64)>> {
        None
    }

    /// Takes the ends of a restored checkpoint (from every shard's instance, as
    /// [`Source::bounds`] gave them; take the splits this instance reads). Called after
    /// [`Source::restore`], only when the checkpoint holds ends.
    ///
    /// # Errors
    ///
    /// Ends this source cannot stop at (the default: a source that recorded none).
    fn restore_bounds(&mut self, bounds: &std::collections::HashMap<u64, i64>) -> Result<(), UserError> {
        let _ = bounds;
        Err(RestoreError::UnexpectedBounds.into())
    }

    /// A checkpoint holding `positions` (this instance's, as [`Source::positions`] gave
    /// them) has completed: a source can publish them (a topic source commits them to
    /// its consumer group). The default does nothing.
    fn checkpoint_completed(&mut self, positions: &[(u64, i64)]) {
        let _ = positions;
    }
}

/// Generates `count` records `make(i)` for `i` in `0..count`, split over the shards: shard
/// `s` of `n` makes the `i` with `i % n == s`, in increasing order. For tests and benchmarks.
///
/// It resumes from a checkpoint taken at any shard count: what the earlier runs made is
/// known from their splits' positions ([`EmittedBefore`]), and each index is made once.
pub struct Generator<T, F> {
    next: u64,
    step: u64,
    count: u64,
    make: F,
    /// What runs at other shard counts made before the checkpoint this one resumed from.
    before: EmittedBefore,
    _out: std::marker::PhantomData<fn() -> T>,
}

impl<T, F> std::fmt::Debug for Generator<T, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator").field("next", &self.next).field("count", &self.count).finish_non_exhaustive()
    }
}

impl<T, F: FnMut(u64) -> T + 'static> Generator<T, F> {
    /// Shard `shard` of `shards`'s share of `count` records made by `make`.
    pub fn new(shard: usize, shards: usize, count: u64, make: F) -> Self {
        Generator {
            next: shard as u64,
            step: shards.max(1) as u64,
            count,
            make,
            before: EmittedBefore::default(),
            _out: std::marker::PhantomData,
        }
    }
}

impl<T: 'static, F: FnMut(u64) -> T + 'static> Source<T> for Generator<T, F> {
    fn splits(&self) -> usize {
        1
    }

    fn poll_next(&mut self, _cx: &mut Context<'_>, out: &mut Vec<T>, max: usize) -> Poll<Option<usize>> {
        let Some((start, step, n)) = self.take(max) else { return Poll::Ready(None) };
        let make = &mut self.make;
        out.extend((0..n as u64).map(|j| make(start + j * step)));
        Poll::Ready(Some(0))
    }

    fn poll_events<E: Fn(&T) -> EventTime>(
        &mut self,
        _cx: &mut Context<'_>,
        _scratch: &mut Vec<T>,
        out: &mut Vec<Event<T>>,
        max: usize,
        time: &E,
    ) -> Poll<Option<usize>> {
        let Some((start, step, n)) = self.take(max) else { return Poll::Ready(None) };
        let make = &mut self.make;
        out.extend((0..n as u64).map(|j| {
            let value = make(start + j * step);
            Event { time: time(&value), value }
        }));
        Poll::Ready(Some(0))
    }

    fn positions(&self) -> Option<Vec<(u64, i64)>> {
        let mut positions = self.split().positions(self.next);
        self.before.positions(&mut positions);
        Some(positions)
    }

    fn restore(&mut self, positions: &std::collections::HashMap<u64, i64>) -> Result<(), UserError> {
        if let Some((next, before)) = self.split().resume("a generator", positions)? {
            (self.next, self.before) = (next, before);
        }
        Ok(())
    }
}

impl<T, F> Generator<T, F> {
    /// Takes the next (at most `max`) numbers: the first, the step between them and how
    /// many, counted up front so that the batch is filled from an iterator of known length
    /// (no capacity check per record). `None` once every number was taken.
    fn take(&mut self, max: usize) -> Option<(u64, u64, usize)> {
        if self.next < self.before.below {
            return self.take_unmade(max);
        }
        if self.next >= self.count {
            return None;
        }
        let (start, step) = (self.next, self.step);
        let n = usize::try_from((self.count - start).div_ceil(step)).unwrap_or(usize::MAX).min(max);
        self.next = start + n as u64 * step;
        Some((start, step, n))
    }

    /// [`Generator::take`] below [`EmittedBefore::below`]: skips what an earlier run made,
    /// then takes the run of indexes none made that follows (at most `max`).
    fn take_unmade(&mut self, max: usize) -> Option<(u64, u64, usize)> {
        while self.next < self.count && self.before.contains(self.next) {
            self.next += self.step;
        }
        if self.next >= self.count {
            return None;
        }
        let start = self.next;
        let mut n = 0;
        while n < max.max(1) && self.next < self.count && !self.before.contains(self.next) {
            self.next += self.step;
            n += 1;
        }
        Some((start, self.step, n))
    }

    fn split(&self) -> ResidueSplit {
        ResidueSplit { shard: self.next % self.step, shards: self.step }
    }
}

/// What the runs before a restore made, for a source split by residue ([`ResidueSplit`])
/// that resumes at another shard count: per earlier shard count `n`, the next index of each
/// of its `n` splits, every index `i < next[i % n]` having been made. A resumed source
/// reports these with its own split's position in every checkpoint, so a later restore,
/// at any count, knows them too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmittedBefore {
    /// `(n, next index of split s for s in 0..n)`, one per earlier shard count.
    generations: Vec<(u64, Vec<u64>)>,
    /// No earlier run made an index at or above this.
    below: u64,
}

impl EmittedBefore {
    /// Whether an earlier run made index `i`.
    #[must_use]
    pub fn contains(&self, i: u64) -> bool {
        i < self.below && self.generations.iter().any(|(n, next)| i < next[(i % n) as usize])
    }

    /// Appends the earlier runs' splits and positions, as [`Source::positions`] reports them.
    pub fn positions(&self, out: &mut Vec<(u64, i64)>) {
        for (n, next) in &self.generations {
            for (s, &at) in next.iter().enumerate() {
                out.push((ResidueSplit { shard: s as u64, shards: *n }.key(), at as i64));
            }
        }
    }
}

/// The one split of a source divided between shards by residue, as [`Generator`] divides
/// its records (shard `s` of `n` takes the indexes `i` with `i % n == s`, in order): its
/// checkpoint position is the next index, and its split key names `n` and `s`.
/// [`ResidueSplit::restore`] resumes it only at the same shard count;
/// [`ResidueSplit::resume`] at any (as [`Generator`] does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResidueSplit {
    shard: u64,
    shards: u64,
}

impl ResidueSplit {
    /// Shard `shard` of `shards`'s split.
    #[must_use]
    pub fn new(shard: usize, shards: usize) -> ResidueSplit {
        let shards = shards.max(1) as u64;
        ResidueSplit { shard: shard as u64 % shards, shards }
    }

    fn key(self) -> u64 {
        (self.shards << 32) | self.shard
    }

    /// What [`Source::positions`] returns for a split at index `next`.
    #[must_use]
    pub fn positions(self, next: u64) -> Vec<(u64, i64)> {
        vec![(self.key(), next as i64)]
    }

    /// Where to resume at any shard count, for [`Source::restore`]: the first index of
    /// this split no earlier run made, and what the earlier runs at other counts made
    /// ([`EmittedBefore`]); `None` when the checkpoint holds no source positions at all.
    /// The positions of an earlier run at this split's own count give where this split
    /// stopped (everything of its residue below was made); those of other counts are kept
    /// in the result.
    ///
    /// # Errors
    ///
    /// A position that is negative or does not belong to such a source (an earlier count
    /// whose splits are not all there); `what` names the source in the message.
    pub fn resume(
        self,
        what: &'static str,
        positions: &std::collections::HashMap<u64, i64>,
    ) -> Result<Option<(u64, EmittedBefore)>, RestoreError> {
        if positions.is_empty() {
            return Ok(None);
        }
        let mut counts: std::collections::BTreeMap<u64, std::collections::BTreeMap<u64, u64>> =
            std::collections::BTreeMap::new();
        for (&split, &at) in positions {
            let next = u64::try_from(at).map_err(|_| RestoreError::NegativePosition {
                source_name: what,
                split,
                position: at,
            })?;
            counts.entry(split >> 32).or_default().insert(split & 0xffff_ffff, next);
        }
        let mut before = EmittedBefore::default();
        let mut start = self.shard;
        for (n, splits) in counts {
            if n == 0 || splits.len() as u64 != n || splits.keys().last() != Some(&(n - 1)) {
                return Err(RestoreError::Split {
                    source_name: what,
                    detail: format!("positions for {} of the {n} splits of a run at {n} shards", splits.len()),
                });
            }
            if n == self.shards {
                start = splits[&self.shard];
                continue;
            }
            let next: Vec<u64> = splits.into_values().collect();
            before.below = before.below.max(next.iter().copied().max().unwrap_or(0));
            before.generations.push((n, next));
        }
        while start < before.below && before.contains(start) {
            start += self.shards;
        }
        Ok(Some((start, before)))
    }

    /// The index to resume from, for [`Source::restore`]: `None` when the checkpoint holds
    /// no source positions at all.
    ///
    /// # Errors
    ///
    /// Positions for other splits only (a checkpoint taken at another shard count), or a
    /// negative one; `what` names the source in the message.
    pub fn restore(
        self,
        what: &'static str,
        positions: &std::collections::HashMap<u64, i64>,
    ) -> Result<Option<u64>, RestoreError> {
        match positions.get(&self.key()) {
            Some(&next) => u64::try_from(next).map(Some).map_err(|_| RestoreError::NegativePosition {
                source_name: what,
                split: self.key(),
                position: next,
            }),
            None if positions.is_empty() => Ok(None),
            None => Err(RestoreError::OtherShardCount { source_name: what, shards: self.shards }),
        }
    }
}

/// Why a source cannot resume from what a checkpoint holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    /// The source records no positions, so a pipeline that checkpoints cannot use it.
    #[error("this source cannot resume from a checkpoint")]
    NotReplayable,
    /// The checkpoint holds ends for a source that records none.
    #[error("this source records no ends, yet the checkpoint holds some")]
    UnexpectedBounds,
    /// A split's position is negative.
    #[error("{source_name}: a negative position {position} for split {split}")]
    NegativePosition {
        /// The source.
        source_name: &'static str,
        /// The split.
        split: u64,
        /// The position.
        position: i64,
    },
    /// A source split by shard restored at another shard count.
    #[error("{source_name} split over {shards} shards cannot resume from a checkpoint taken at another shard count")]
    OtherShardCount {
        /// The source.
        source_name: &'static str,
        /// This run's shard count.
        shards: u64,
    },
    /// A split's position or end does not fit the source (a partition it does not have,
    /// a bounded checkpoint for an unbounded source).
    #[error("{source_name}: {detail}")]
    Split {
        /// The source.
        source_name: &'static str,
        /// What is wrong.
        detail: String,
    },
}

/// Records host code sends through in-process channels, one split per channel. Ends when
/// every channel is closed (all its senders dropped) and drained.
pub struct ChannelSource<T> {
    receivers: Vec<Option<Pin<Box<async_channel::Receiver<T>>>>>,
    next: usize,
}

impl<T> std::fmt::Debug for ChannelSource<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelSource").field("splits", &self.receivers.len()).finish_non_exhaustive()
    }
}

impl<T> ChannelSource<T> {
    /// One split reading `receiver`. Several shards may read clones of one receiver; each
    /// record goes to one of them.
    #[must_use]
    pub fn new(receiver: async_channel::Receiver<T>) -> Self {
        Self::splits(vec![receiver])
    }

    /// One split per receiver, each with its own watermark (and idleness).
    #[must_use]
    pub fn splits(receivers: Vec<async_channel::Receiver<T>>) -> Self {
        ChannelSource { receivers: receivers.into_iter().map(|r| Some(Box::pin(r))).collect(), next: 0 }
    }
}

impl<T: 'static> Source<T> for ChannelSource<T> {
    fn splits(&self) -> usize {
        self.receivers.len()
    }

    fn poll_next(&mut self, cx: &mut Context<'_>, out: &mut Vec<T>, max: usize) -> Poll<Option<usize>> {
        let n = self.receivers.len();
        let mut open = false;
        for k in 0..n {
            let split = (self.next + k) % n;
            let Some(rx) = &mut self.receivers[split] else { continue };
            let before = out.len();
            let mut closed = false;
            while out.len() - before < max {
                match rx.as_mut().poll_next(cx) {
                    Poll::Ready(Some(v)) => out.push(v),
                    Poll::Ready(None) => {
                        closed = true;
                        break;
                    }
                    Poll::Pending => break,
                }
            }
            if closed {
                self.receivers[split] = None;
            } else {
                open = true;
            }
            if out.len() > before {
                self.next = (split + 1) % n;
                return Poll::Ready(Some(split));
            }
        }
        if open { Poll::Pending } else { Poll::Ready(None) }
    }
}

/// The driver's side of a source: stamps records, keeps the per-split clocks, and pushes
/// batches, watermarks and idleness downstream.
pub(crate) struct SourceInput<T, S, E> {
    source: S,
    strategy: WatermarkStrategy<T, E>,
    clock: SourceClock,
    /// `Source::poll_events`'s scratch batch, reused.
    scratch: Vec<T>,
    batch: Vec<Event<T>>,
    batch_records: usize,
    out: Port<T>,
    stopped: Option<bool>,
    /// Held after the barrier of a stopping savepoint: reads nothing more, and ends once
    /// the savepoint is durable (or goes on if it failed).
    held: Option<CheckpointId>,
    processing_tick: Duration,
    /// With checkpoints: the shard's checkpointing and this source's id there.
    checkpoint: Option<(Rc<RefCell<ShardCheckpoint>>, u32)>,
    /// Ran out of records, and waits for the final checkpoint before it ends.
    exhausted: bool,
    /// Positions reported for checkpoints not yet known completed.
    reported: std::collections::VecDeque<(CheckpointId, Vec<(u64, i64)>)>,
}

impl<T: 'static, S: Source<T>, E: Fn(&T) -> EventTime + 'static> SourceInput<T, S, E> {
    pub(crate) fn new(
        source: S,
        strategy: WatermarkStrategy<T, E>,
        batch_records: usize,
        processing_tick: Duration,
        out: Port<T>,
    ) -> Self {
        let clock = SourceClock::new(source.splits());
        SourceInput {
            source,
            strategy,
            clock,
            scratch: Vec::with_capacity(batch_records),
            batch: Vec::with_capacity(batch_records),
            batch_records: batch_records.max(1),
            out,
            stopped: None,
            held: None,
            processing_tick,
            checkpoint: None,
            exhausted: false,
            reported: std::collections::VecDeque::new(),
        }
    }

    /// Takes part in the shard's checkpoints (resuming from the restored positions, if
    /// the pipeline restores, once the graph is built: [`Input::restore`]); returns its
    /// build position among the shard's sources.
    pub(crate) fn checkpointed(mut self, checkpoint: Rc<RefCell<ShardCheckpoint>>) -> (Self, u32) {
        let id = checkpoint.borrow_mut().add_source();
        checkpoint.borrow().coordinator.sources.fetch_add(1, Ordering::AcqRel);
        self.checkpoint = Some((checkpoint, id));
        (self, id)
    }

    fn emit_progress(&mut self) {
        let (watermark, idle) = self.clock.combined();
        let mut out = self.out.borrow_mut();
        if !idle {
            out.set_idle(false);
        }
        out.watermark_to(watermark);
        if idle {
            out.set_idle(true);
        }
    }

    fn finish(&mut self, drain: bool) -> Poll<bool> {
        let mut out = self.out.borrow_mut();
        if drain {
            out.set_idle(false);
            out.watermark_to(EventTime::MAX);
        }
        out.end();
        Poll::Ready(false)
    }
}

impl<T: 'static, S: Source<T>, E: Fn(&T) -> EventTime + 'static> Input for SourceInput<T, S, E> {
    fn poll_input(&mut self, cx: &mut Context<'_>, _budget: usize) -> Poll<bool> {
        if let Some(drain) = self.stopped {
            return self.finish(drain);
        }
        if let (Some(at), Some((c, _))) = (self.held, &self.checkpoint) {
            // Once the savepoint is durable the driver halts the shard (see `driver.rs`);
            // until then, or if it failed, the source waits or goes on.
            let coordinator = c.borrow().coordinator.clone();
            if coordinator.stop_at.load(Ordering::Acquire) != at.get() {
                self.held = None;
            } else {
                return Poll::Pending;
            }
        }
        // Records are stamped as they come (`Source::poll_events`); processing time is
        // read once, when the first record is stamped.
        let before = self.batch.len();
        let (scratch, batch, max) = (&mut self.scratch, &mut self.batch, self.batch_records);
        // The batch's greatest event time is noted as each record is stamped, in the
        // source's own loop, rather than in a pass of its own over the batch.
        let latest = std::cell::Cell::new(EventTime::MIN);
        let polled = match &self.strategy.time {
            TimeSource::Extract(extract) => self.source.poll_events(cx, scratch, batch, max, &|v: &T| {
                let time = extract(v);
                latest.set(latest.get().max(time));
                time
            }),
            TimeSource::Processing => {
                let now = std::cell::OnceCell::new();
                self.source.poll_events(cx, scratch, batch, max, &|_: &T| {
                    let time = *now.get_or_init(EventTime::now);
                    latest.set(time);
                    time
                })
            }
        };
        let split = match polled {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => {
                if let Some((c, _)) = &self.checkpoint {
                    let coordinator = c.borrow().coordinator.clone();
                    if !self.exhausted {
                        // The end of the input: windows fire now, then the final
                        // checkpoint, and only then the end of the stream.
                        self.exhausted = true;
                        let mut out = self.out.borrow_mut();
                        out.set_idle(false);
                        out.watermark_to(EventTime::MAX);
                        coordinator.exhausted.fetch_add(1, Ordering::AcqRel);
                        return Poll::Ready(true);
                    }
                    if !coordinator.final_done.load(Ordering::Acquire) {
                        return Poll::Pending;
                    }
                }
                return self.finish(true);
            }
            Poll::Ready(Some(split)) => split,
        };
        if self.batch.len() == before {
            return Poll::Ready(true);
        }
        let clock = &mut self.clock.splits[split];
        let was_idle = std::mem::replace(&mut clock.idle, false);
        // Only idleness needs the time of the last record: no clock read per batch without.
        if self.strategy.idle_timeout.is_some() {
            clock.last_record = Instant::now();
        }
        let stamped = &self.batch[before..];
        let max_time = clock.max_time.max(latest.get());
        let punctuation = match &self.strategy.kind {
            WatermarkKind::Punctuated(punctuate) => {
                stamped.iter().filter_map(|e| punctuate(&e.value, e.time)).fold(clock.watermark, EventTime::max)
            }
            _ => clock.watermark,
        };
        clock.max_time = max_time;
        clock.watermark = clock.watermark.max(match &self.strategy.kind {
            WatermarkKind::Bounded(bound) => EventTime::from_millis(max_time.0.saturating_sub(bound.saturating_add(1))),
            WatermarkKind::Punctuated(_) => punctuation,
            WatermarkKind::Processing => EventTime::from_millis(max_time.0.saturating_sub(1)),
        });
        if was_idle {
            self.out.borrow_mut().set_idle(false);
        }
        self.out.borrow_mut().push(&mut self.batch);
        self.emit_progress();
        Poll::Ready(true)
    }

    fn is_source(&self) -> bool {
        true
    }

    fn tick(&mut self, now: Instant) -> Option<Instant> {
        let mut next = None;
        if matches!(self.strategy.kind, WatermarkKind::Processing) {
            let time = EventTime::from_millis(EventTime::now().0.saturating_sub(1));
            for split in &mut self.clock.splits {
                split.watermark = split.watermark.max(time);
            }
            next = Some(now + self.processing_tick);
        }
        if let Some(timeout) = self.strategy.idle_timeout {
            let due = self.clock.check_idle(now, timeout);
            next = match (next, due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // An all-idle source is looked at again a timeout later, in case of new data.
            next = next.or(Some(now + timeout));
        }
        self.emit_progress();
        next
    }

    fn stop(&mut self, drain: bool) {
        self.stopped = Some(drain);
    }

    fn inject_barrier(&mut self, barrier: Barrier) {
        let Some((c, id)) = &self.checkpoint else { return };
        let positions = self.source.positions().unwrap_or_default();
        self.reported.push_back((barrier.id, positions.clone()));
        let bounds = self.source.bounds().unwrap_or_default();
        c.borrow_mut().report_source(barrier.id, SourcePart { id: *id, uid: None, positions, bounds });
        self.out.borrow_mut().barrier(barrier);
        if c.borrow().coordinator.stop_at.load(Ordering::Acquire) == barrier.id.get() {
            self.held = Some(barrier.id);
        }
    }

    fn restore(&mut self) -> Result<(), CheckpointError> {
        let Some((c, id)) = &self.checkpoint else { return Ok(()) };
        let c = c.borrow();
        let Some(restored) = &c.coordinator.restored else { return Ok(()) };
        let key = c.source_key(*id);
        let failed = |what: &str, e: super::UserError| CheckpointError::RestoreState {
            id: restored.id,
            operator: format!("source {key}"),
            source: StateError(format!("{what}: {e}")),
        };
        let empty = HashMap::new();
        let positions = restored.sources.get(&key).unwrap_or(&empty);
        self.source.restore(positions).map_err(|e| failed("its positions", e))?;
        if let Some(bounds) = restored.source_bounds.get(&key) {
            self.source.restore_bounds(bounds).map_err(|e| failed("its ends", e))?;
        }
        Ok(())
    }

    fn checkpoint_completed(&mut self, completed: CheckpointId) {
        let mut latest = None;
        while self.reported.front().is_some_and(|(id, _)| *id <= completed) {
            latest = self.reported.pop_front();
        }
        if let Some((_, positions)) = latest {
            self.source.checkpoint_completed(&positions);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::task::{Context, Poll, Waker};

    use sluice_io::EventTime;

    use super::{Event, Generator, Source};

    /// One batch: its (value, time) pairs, and the source's positions after it.
    type Batch = (Vec<(u64, i64)>, Vec<(u64, i64)>);

    /// Everything a source gives through `poll_next` (`stamped`: `poll_events` with the
    /// time `10 * i`), batch by batch, with its position after each.
    fn drain(mut source: impl Source<u64>, max: usize, stamped: bool) -> Vec<Batch> {
        let mut cx = Context::from_waker(Waker::noop());
        let time = |v: &u64| EventTime::from_millis(10 * *v as i64);
        let mut batches = Vec::new();
        loop {
            let (mut raw, mut events) = (Vec::new(), Vec::<Event<u64>>::new());
            let polled = if stamped {
                source.poll_events(&mut cx, &mut raw, &mut events, max, &time)
            } else {
                let polled = source.poll_next(&mut cx, &mut raw, max);
                events.extend(raw.drain(..).map(|value| Event { time: time(&value), value }));
                polled
            };
            match polled {
                Poll::Ready(Some(0)) => {}
                Poll::Ready(None) => return batches,
                other => panic!("a generator is always ready with its one split: {other:?}"),
            }
            assert!(raw.is_empty(), "the scratch vector is left empty");
            let got = events.iter().map(|e| (e.value, e.time.millis())).collect();
            batches.push((got, source.positions().expect("a generator has positions")));
        }
    }

    #[test]
    fn a_generator_stamps_the_same_records_in_the_same_batches_as_it_polls_them() {
        for (shard, shards, count, max) in [(0, 1, 10, 4), (1, 3, 10, 2), (2, 3, 10, 1), (0, 2, 0, 5), (1, 2, 7, 100)] {
            let make = |i: u64| i * 3;
            let polled = drain(Generator::new(shard, shards, count, make), max, false);
            let stamped = drain(Generator::new(shard, shards, count, make), max, true);
            assert_eq!(stamped, polled, "shard {shard} of {shards}, {count} records, batches of {max}");
            let values: Vec<u64> = stamped.iter().flat_map(|(b, _)| b.iter().map(|&(v, _)| v)).collect();
            let expected: Vec<u64> = (0..count).filter(|i| i % shards as u64 == shard as u64).map(make).collect();
            assert_eq!(values, expected);
            assert!(stamped.iter().all(|(b, _)| b.len() <= max && !b.is_empty()));
        }
    }
}
