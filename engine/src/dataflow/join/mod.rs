//! Joins of two keyed streams: the window join and the interval join, as in Flink.
//!
//! Both inputs must be keyed (`key_by`) on the same key type. Every exchange of a pipeline
//! routes a key to the same shard (the same key groups, the same hash), so the records of
//! a key from both sides meet on one shard, where a single operator with two inputs keeps
//! their state. Its event-time clock is the minimum of the two inputs' watermarks
//! ([`Progress`]): a side that is idle or has ended holds nothing back.
//!
//! - [`KeyedStream::window_join`]: every pair of a left and a right record with the same key
//!   in the same tumbling or sliding window, emitted when the window fires (the watermark
//!   reaches its last instant), at that instant.
//! - [`KeyedStream::interval_join`]: every pair `(l, r)` with the same key and
//!   `l.time + lower <= r.time <= l.time + upper`, emitted as soon as the second of the two
//!   arrives, at the later of their times. A record is kept only while a record still to
//!   come could match it.
//!
//! A record at or below the operator's watermark is *late*: it breaks its input's promise
//! that no such record would come. A window join drops a record whose windows have all
//! fired; an interval join drops every late record, which is what makes its output exact:
//! a pair is emitted if and only if neither of its records was late, however the inputs
//! interleave. Dropped records are counted in `Metrics::late_dropped`.
//!
//! With checkpoints on, a join's buffered records (and so its keys and both sides'
//! records) are part of every checkpoint, by key group, so a job restores them at any
//! shard count; keys and records must be [`Data`](super::Data).
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use sluice_engine::dataflow::{Generator, Pipeline, PipelineConfig, WatermarkStrategy};
//! use sluice_io::EventTime;
//!
//! // Orders and payments (user, ms); a payment matches an order of its user paid within 5 ms.
//! const ORDERS: [(u32, i64); 3] = [(1, 10), (2, 20), (1, 30)];
//! const PAYMENTS: [(u32, i64); 3] = [(1, 12), (1, 33), (2, 40)];
//! let paid = Arc::new(Mutex::new(Vec::new()));
//! let sink = paid.clone();
//! Pipeline::new(PipelineConfig::with_shards(2))
//!     .run(move |scope| {
//!         let sink = sink.clone();
//!         let (shard, shards) = (scope.shard(), scope.shards());
//!         let time = |r: &(u32, i64)| EventTime::from_millis(r.1);
//!         let orders = scope
//!             .source(Generator::new(shard, shards, 3, |i| ORDERS[i as usize]), WatermarkStrategy::monotonous(time))
//!             .key_by(|o| o.0);
//!         let payments = scope
//!             .source(Generator::new(shard, shards, 3, |i| PAYMENTS[i as usize]), WatermarkStrategy::monotonous(time))
//!             .key_by(|p| p.0);
//!         orders
//!             .interval_join(payments, 0, 5, |user, order, payment| (*user, order.1, payment.1))
//!             .for_each(move |e| sink.lock().unwrap().push(e.value));
//!     })
//!     .unwrap();
//! let mut paid = paid.lock().unwrap().clone();
//! paid.sort_unstable();
//! assert_eq!(paid, vec![(1, 10, 12), (1, 30, 33)]);
//! ```

mod interval;
mod window;

use std::{cell::RefCell, collections::VecDeque, hash::Hash, rc::Rc, sync::Arc};

use sluice_io::EventTime;

use super::checkpoint::{Barrier, Data, GroupWriter, StateError, StateHandle};
use super::metrics::LateCells;
use super::operator::{Align, Held};
use super::{Event, KeyedStream, Operator, Output, Port, Progress, Stream, Windows};

impl<K: Hash + Eq + Clone + 'static, L: 'static, KL: Fn(&L) -> K + 'static> KeyedStream<K, L, KL> {
    /// Every pair of a record of this stream and one of `other` with equal keys in the same
    /// window, `f(key, left, right)`, emitted when the window fires (the watermark reaches
    /// its last instant) and carrying that instant as its event time. A key present on one
    /// side only yields nothing. Records are cloned into each window they fall in (one for
    /// tumbling windows, `size / slide` for sliding ones). A record whose windows have all
    /// fired is late: it is dropped and counted in `Metrics::late_dropped`.
    ///
    /// # Panics
    ///
    /// If `windows` are not tumbling or sliding (session and global windows are not known
    /// from a record's time alone).
    pub fn window_join<R, KR, O>(
        self,
        other: KeyedStream<K, R, KR>,
        windows: Windows,
        f: impl FnMut(&K, &L, &R) -> O + 'static,
    ) -> Stream<O>
    where
        K: Data,
        L: Clone + Data,
        R: Clone + Data,
        KR: Fn(&R) -> K + 'static,
        O: 'static,
    {
        assert!(
            matches!(windows, Windows::Tumbling { .. } | Windows::Sliding { .. }),
            "window_join takes tumbling or sliding windows, not {windows:?}"
        );
        let core = window::WindowJoin::new(windows, self.key_fn(), other.key_fn(), f);
        attach(self, other, core)
    }

    /// Every pair of a record `l` of this stream and `r` of `other` with equal keys and
    /// `l.time + lower_ms <= r.time <= l.time + upper_ms`, `f(key, l, r)`, emitted as soon as
    /// both have arrived and carrying the later of their times. A negative `lower_ms` lets
    /// `r` come before `l`. A record is dropped once the watermark rules out every match
    /// still to come: `l` when it reaches `l.time + upper_ms`, `r` when it reaches
    /// `r.time - lower_ms`. A record at or below the watermark when it arrives is late: it
    /// is dropped and counted in `Metrics::late_dropped`, so a pair is emitted exactly when
    /// neither of its records was late.
    ///
    /// # Panics
    ///
    /// If `lower_ms > upper_ms`: no pair could ever match.
    pub fn interval_join<R, KR, O>(
        self,
        other: KeyedStream<K, R, KR>,
        lower_ms: i64,
        upper_ms: i64,
        f: impl FnMut(&K, &L, &R) -> O + 'static,
    ) -> Stream<O>
    where
        K: Data,
        L: Data,
        R: Data,
        KR: Fn(&R) -> K + 'static,
        O: 'static,
    {
        assert!(lower_ms <= upper_ms, "interval_join needs lower_ms <= upper_ms, got [{lower_ms}, {upper_ms}]");
        let core = interval::IntervalJoin::new(lower_ms, upper_ms, self.key_fn(), other.key_fn(), f);
        attach(self, other, core)
    }
}

/// The state and logic of one join on one shard. [`Joint`] feeds it the records of both
/// inputs and the combined watermark, and sends what it emits downstream.
trait JoinCore: 'static {
    type Left: 'static;
    type Right: 'static;
    type Out: 'static;
    /// The operator kind its checkpointed state is tagged with.
    const KIND: &'static str;
    /// A left record; `false` if it was late and dropped.
    fn left(&mut self, event: Event<Self::Left>, out: &mut Vec<Event<Self::Out>>) -> bool;
    /// A right record; `false` if it was late and dropped.
    fn right(&mut self, event: Event<Self::Right>, out: &mut Vec<Event<Self::Out>>) -> bool;
    /// The combined watermark has advanced to `watermark`: emit what it completes and drop
    /// the state it makes useless.
    fn advance(&mut self, watermark: EventTime, out: &mut Vec<Event<Self::Out>>);
    /// Writes the records the core keeps into a snapshot, each under its key's group:
    /// with `delta`, only what changed since its last snapshot (which the snapshot builds
    /// on), if the core can, returning `true`; otherwise all of them, returning `false`.
    fn snapshot(&mut self, writer: &mut GroupWriter, delta: bool) -> bool;
    /// Takes back one entry [`JoinCore::snapshot`] wrote, read from the front of `input`.
    fn restore(&mut self, input: &mut &[u8]) -> Result<(), StateError>;
}

/// A join operator with its two inputs' progress and its output, shared by the two input
/// adapters ([`LeftInput`], [`RightInput`]) the upstream ports own.
///
/// Checkpoints: the two inputs are aligned as a union's are (in both checkpoint modes:
/// they are calls on the same shard). Once barrier *n* has arrived on one input, what that
/// input delivers is held until it has arrived on the other too (or the other has ended);
/// then the core's records are written into the snapshot, the barrier goes downstream,
/// and what was held is applied, in order. So the snapshot holds exactly the records of
/// both sides that came before the barrier, and every result they made is downstream
/// before it.
struct Joint<C: JoinCore> {
    core: C,
    progress: Progress,
    /// The combined watermark the core last advanced to.
    watermark: EventTime,
    results: Vec<Event<C::Out>>,
    out: Port<C::Out>,
    late_cells: Arc<LateCells>,
    /// The join's link to the shard's checkpoints, when the pipeline takes them.
    state: Option<StateHandle>,
    align: Align,
    held_left: VecDeque<Held<C::Left>>,
    held_right: VecDeque<Held<C::Right>>,
    /// The checkpoint of this run's last snapshot: a snapshot whose base it is may be a
    /// delta on it.
    last_snapshot: Option<sluice_io::CheckpointId>,
}

const LEFT: usize = 0;
const RIGHT: usize = 1;

/// One side's record function of a [`JoinCore`].
type SideFn<C, T> = fn(&mut C, Event<T>, &mut Vec<Event<<C as JoinCore>::Out>>) -> bool;

impl<C: JoinCore> Joint<C> {
    fn batch<T>(&mut self, batch: &mut Vec<Event<T>>, each: SideFn<C, T>) {
        let mut late = 0;
        for event in batch.drain(..) {
            if !each(&mut self.core, event, &mut self.results) {
                late += 1;
            }
        }
        self.late_cells.dropped.add(late);
        self.out.borrow_mut().push(&mut self.results);
    }

    /// Applies a change of one input's progress: the core fires on the new combined
    /// watermark, and what it emitted goes downstream before that watermark does. Once both
    /// inputs have ended the output ends; state still held then is discarded, as a window
    /// operator discards its open windows (a drained input sends the end of time first,
    /// which has already fired everything).
    fn progress(&mut self, change: impl FnOnce(&mut Progress)) {
        change(&mut self.progress);
        if !self.progress.all_ended() {
            let watermark = self.progress.combined();
            if watermark > self.watermark {
                self.watermark = watermark;
                self.core.advance(watermark, &mut self.results);
            }
        }
        let mut out = self.out.borrow_mut();
        out.push(&mut self.results);
        self.progress.forward(&mut out);
    }

    /// Applies what input `index` delivered (now, or after an alignment held it).
    fn apply<T>(&mut self, index: usize, item: Held<T>, each: SideFn<C, T>) {
        match item {
            Held::Batch(mut batch) => self.batch(&mut batch, each),
            Held::Watermark(w) => self.progress(|p| p.watermark(index, w)),
            Held::Idle(idle) => self.progress(|p| p.idle(index, idle)),
            Held::End => {
                self.progress(|p| p.end(index));
                if let Some(barrier) = self.align.end(index) {
                    self.release(barrier);
                }
            }
        }
    }

    fn deliver_left(&mut self, item: Held<C::Left>) {
        if self.align.blocked(LEFT) {
            self.held_left.push_back(item);
        } else {
            self.apply(LEFT, item, C::left);
        }
    }

    fn deliver_right(&mut self, item: Held<C::Right>) {
        if self.align.blocked(RIGHT) {
            self.held_right.push_back(item);
        } else {
            self.apply(RIGHT, item, C::right);
        }
    }

    fn barrier(&mut self, index: usize, barrier: Barrier) {
        if let Some(barrier) = self.align.arrive(index, barrier) {
            self.release(barrier);
        }
    }

    /// The alignment completed: snapshot, pass the barrier on, then apply what was held.
    fn release(&mut self, barrier: Barrier) {
        if let Some(state) = &self.state {
            let mut writer = state.writer();
            let on_last = self.last_snapshot.is_some() && state.base(barrier) == self.last_snapshot;
            let delta = self.core.snapshot(&mut writer, on_last);
            self.last_snapshot = Some(barrier.id);
            state.report_delta(barrier, self.watermark, writer, delta);
        }
        self.out.borrow_mut().barrier(barrier);
        while let Some(item) = self.held_left.pop_front() {
            self.apply(LEFT, item, C::left);
        }
        while let Some(item) = self.held_right.pop_front() {
            self.apply(RIGHT, item, C::right);
        }
    }
}

/// The left input of a [`Joint`].
struct LeftInput<C: JoinCore>(Rc<RefCell<Joint<C>>>);

impl<C: JoinCore> Operator<C::Left> for LeftInput<C> {
    fn on_batch(&mut self, batch: &mut Vec<Event<C::Left>>) {
        let mut joint = self.0.borrow_mut();
        if joint.align.blocked(LEFT) {
            joint.held_left.push_back(Held::Batch(std::mem::take(batch)));
        } else {
            joint.batch(batch, C::left);
        }
    }
    fn on_watermark(&mut self, watermark: EventTime) {
        self.0.borrow_mut().deliver_left(Held::Watermark(watermark));
    }
    fn on_idle(&mut self, idle: bool) {
        self.0.borrow_mut().deliver_left(Held::Idle(idle));
    }
    fn on_end(&mut self) {
        self.0.borrow_mut().deliver_left(Held::End);
    }
    fn on_barrier(&mut self, barrier: Barrier) {
        self.0.borrow_mut().barrier(LEFT, barrier);
    }
}

/// The right input of a [`Joint`].
struct RightInput<C: JoinCore>(Rc<RefCell<Joint<C>>>);

impl<C: JoinCore> Operator<C::Right> for RightInput<C> {
    fn on_batch(&mut self, batch: &mut Vec<Event<C::Right>>) {
        let mut joint = self.0.borrow_mut();
        if joint.align.blocked(RIGHT) {
            joint.held_right.push_back(Held::Batch(std::mem::take(batch)));
        } else {
            joint.batch(batch, C::right);
        }
    }
    fn on_watermark(&mut self, watermark: EventTime) {
        self.0.borrow_mut().deliver_right(Held::Watermark(watermark));
    }
    fn on_idle(&mut self, idle: bool) {
        self.0.borrow_mut().deliver_right(Held::Idle(idle));
    }
    fn on_end(&mut self) {
        self.0.borrow_mut().deliver_right(Held::End);
    }
    fn on_barrier(&mut self, barrier: Barrier) {
        self.0.borrow_mut().barrier(RIGHT, barrier);
    }
}

/// Attaches `core` to both keyed streams and returns its output. With checkpoints on, the
/// core's records are restored from the last completed checkpoint (the key groups this
/// shard owns now) and are part of every checkpoint.
fn attach<K, KL, KR, C: JoinCore>(
    left: KeyedStream<K, C::Left, KL>,
    right: KeyedStream<K, C::Right, KR>,
    core: C,
) -> Stream<C::Out> {
    let scope = left.stream.scope.clone();
    let state = scope.state_handle::<K, (C::Left, C::Right)>(C::KIND);
    let out = Output::port();
    let joint = Rc::new(RefCell::new(Joint {
        core,
        progress: Progress::new(2),
        watermark: EventTime::MIN,
        results: Vec::new(),
        out: out.clone(),
        late_cells: scope.shared.metrics.late_cells(),
        state: state.clone(),
        align: Align::new(2),
        held_left: VecDeque::new(),
        held_right: VecDeque::new(),
        last_snapshot: None,
    }));
    if let Some(state) = state {
        let joint = joint.clone();
        state.on_restore(move |state| {
            let mut joint = joint.borrow_mut();
            let core = &mut joint.core;
            if let Some(restored) = state.restore_grouped(|_, input| core.restore(input))? {
                let mut nothing = Vec::new();
                core.advance(restored, &mut nothing);
                debug_assert!(nothing.is_empty(), "a restored join's records are all after its watermark");
                joint.watermark = restored;
            }
            Ok(())
        });
    }
    left.stream.port.borrow_mut().attach(Box::new(LeftInput(joint.clone())));
    right.stream.port.borrow_mut().attach(Box::new(RightInput(joint)));
    scope.stateful_stream(out, "join")
}
