//! [`Scope`]: one shard's view of the pipeline while it is being built, and the parts the
//! shard's driver runs once it is.
//!
//! The pipeline's build function runs once on every shard's thread, with that shard's
//! scope, and must build the same graph on each: the `n`-th exchange (`key_by`) built on
//! one shard is connected through the rings to the `n`-th exchange of every other one.

use std::{
    any::Any,
    cell::RefCell,
    collections::HashMap,
    rc::Rc,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::Instant,
};

use super::{
    PipelineConfig, Stream,
    checkpoint::{Barrier, CheckpointError, ShardCheckpoint, StateHandle, StateTypes},
    metrics::Metrics,
};
use crate::ring::{Mesh, ShardRings};

/// Something that holds records it could not hand over yet (an exchange facing a full
/// ring, a sink waiting on its destination). The driver pulls no source records while any
/// is pending.
pub(crate) trait Pending {
    /// Tries to hand everything over; `Ready` once nothing is pending. When `Pending`, a
    /// wake-up of `cx` is arranged for when progress may be possible.
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<()>;
    /// Whether a shard halting after a stopping savepoint waits for this to flush: a sink
    /// does (it delivers or commits what the savepoint covers); an exchange does not (what
    /// it still holds was made after the savepoint's barrier, for shards that have stopped
    /// reading).
    fn flush_before_halt(&self) -> bool {
        false
    }
    /// Hands on what is held back to be sent less often (an exchange's latest watermark,
    /// [`PipelineConfig::watermark_interval`](super::PipelineConfig::watermark_interval)).
    /// The driver calls it when a round finds nothing to do and at least once per interval
    /// while it is busy. The default holds nothing.
    fn release(&mut self) {}
}

/// A processing-time participant: early window firings, processing-time timers, idle
/// detection. `tick` runs whatever is due at `now` and says when it next needs to run.
pub(crate) trait Ticker {
    fn tick(&mut self, now: Instant) -> Option<Instant>;
}

/// An input the driver polls: a source, or the ring side of an exchange.
pub(crate) trait Input {
    /// Moves up to one unit of work (a source batch, or up to `budget` ring messages)
    /// downstream. `Ready(true)` if it did something, `Ready(false)` once it has ended,
    /// `Pending` (with a wake-up arranged) when it has nothing now.
    fn poll_input(&mut self, cx: &mut Context<'_>, budget: usize) -> Poll<bool>;
    /// Whether it is a source (paused while anything is pending) or a ring input (always
    /// drained, which is what guarantees progress through a chain of exchanges).
    fn is_source(&self) -> bool;
    /// Processing-time duties (idle detection), like [`Ticker::tick`].
    fn tick(&mut self, _now: Instant) -> Option<Instant> {
        None
    }
    /// Ends a source early: `drain` ends it as if its data had run out (watermark to the
    /// end of time, so windows fire), otherwise it just stops.
    fn stop(&mut self, _drain: bool) {}
    /// Checkpoint `barrier` begins: a source records its positions and sends the barrier
    /// downstream, before any record it reads afterwards. Ring inputs ignore it.
    fn inject_barrier(&mut self, _barrier: Barrier) {}
    /// Checkpoint `completed` (and every one before it) has completed.
    fn checkpoint_completed(&mut self, _completed: sluice_io::CheckpointId) {}
    /// Once the graph is built: a source takes its restored positions (by its uid, or its
    /// build position among the sources).
    fn restore(&mut self) -> Result<(), CheckpointError> {
        Ok(())
    }
}

/// What the shards of one running pipeline share: set-up-time registries only. Nothing
/// here is touched on the data path.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Each exchange's mesh, built by the first shard to reach it; every shard takes its
    /// own ends out.
    exchanges: Mutex<HashMap<usize, Box<dyn Any + Send>>>,
    pub(crate) metrics: Arc<Metrics>,
    /// Every shard's measured streams, registered while the graph is built (the lock is
    /// taken then and by a scrape, never while records flow).
    pub(crate) streams: Mutex<Vec<super::metrics::StreamEntry>>,
    /// Every exchange's rings, listed by their sending shards while the graph is built.
    pub(crate) rings: Mutex<Vec<super::metrics::RingEntry>>,
}

/// What makes a stream, for the checkpointed state a uid names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A stateful operator (its build position among them).
    Operator(u32),
    /// A source (its build position among them).
    Source(u32),
}

/// An earlier processing-time tick an operator asks for (a timer registered between
/// ticks); the driver reads and clears it every round.
pub(crate) type TickRequest = Rc<std::cell::Cell<Option<Instant>>>;

/// Asks for a tick at `at`, keeping the earliest request.
pub(crate) fn request_tick(request: &TickRequest, at: Instant) {
    request.set(Some(request.get().map_or(at, |t| t.min(at))));
}

pub(crate) struct ScopeState {
    pub(crate) inputs: Vec<Box<dyn Input>>,
    pub(crate) tick_request: TickRequest,
    pub(crate) pending: Vec<Rc<RefCell<dyn Pending>>>,
    pub(crate) tickers: Vec<Rc<RefCell<dyn Ticker>>>,
    next_exchange: usize,
    next_stream: usize,
    /// This shard's checkpointing, when the pipeline checkpoints.
    pub(crate) checkpoint: Option<Rc<RefCell<ShardCheckpoint>>>,
    /// The uids given so far, and the first one given twice.
    uids: std::collections::HashSet<String>,
    duplicate_uid: Option<String>,
    /// The stateful operator registered last (its build position), not yet claimed by the
    /// stream of its output.
    last_state: Option<u32>,
    /// The first setting an operator refused while the graph was built (a state TTL that
    /// cannot apply): the pipeline does not start.
    refused: Option<crate::EngineError>,
}

/// One shard's handle on the pipeline being built. Cheap to clone; not `Send`: it lives on
/// its shard.
#[derive(Clone)]
pub struct Scope {
    shard: usize,
    shards: usize,
    config: Arc<PipelineConfig>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) state: Rc<RefCell<ScopeState>>,
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope").field("shard", &self.shard).field("shards", &self.shards).finish_non_exhaustive()
    }
}

impl Scope {
    pub(crate) fn new(
        shard: usize,
        config: Arc<PipelineConfig>,
        shared: Arc<Shared>,
        checkpoint: Option<ShardCheckpoint>,
    ) -> Self {
        Scope {
            shard,
            shards: config.shards,
            config,
            shared,
            state: Rc::new(RefCell::new(ScopeState {
                inputs: Vec::new(),
                tick_request: TickRequest::default(),
                pending: Vec::new(),
                tickers: Vec::new(),
                next_exchange: 0,
                next_stream: 0,
                checkpoint: checkpoint.map(|c| Rc::new(RefCell::new(c))),
                uids: std::collections::HashSet::new(),
                duplicate_uid: None,
                last_state: None,
                refused: None,
            })),
        }
    }

    /// This shard's index, from 0.
    #[must_use]
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// How many shards run the pipeline.
    #[must_use]
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// The pipeline's settings.
    #[must_use]
    pub fn config(&self) -> &PipelineConfig {
        &self.config
    }

    /// The pipeline's metrics (shared by all shards).
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Whether the pipeline takes checkpoints.
    #[must_use]
    pub fn checkpointing(&self) -> bool {
        self.state.borrow().checkpoint.is_some()
    }

    /// This shard's checkpointing, when the pipeline checkpoints.
    pub(crate) fn checkpoint(&self) -> Option<Rc<RefCell<ShardCheckpoint>>> {
        self.state.borrow().checkpoint.clone()
    }

    /// Registers a stateful operator of `kind`, keyed by `K` with state `S`, with
    /// checkpointing (`None` when it is off). The stream made next with
    /// [`Scope::stateful_stream`] is its output, which [`Stream::uid`] names.
    pub(crate) fn state_handle<K: ?Sized, S: ?Sized>(&self, kind: &str) -> Option<StateHandle> {
        let handle =
            self.checkpoint().map(|c| StateHandle::register(&c, self.config.key_groups, StateTypes::of::<K, S>(kind)));
        self.state.borrow_mut().last_state = handle.as_ref().map(StateHandle::id);
        handle
    }

    /// The output stream of the stateful operator registered last.
    pub(crate) fn stateful_stream<T: 'static>(&self, port: super::Port<T>, kind: &'static str) -> Stream<T> {
        let state = self.state.borrow_mut().last_state.take();
        let mut stream = Stream::from_port(self.clone(), port, kind);
        stream.origin = state.map(Origin::Operator);
        stream
    }

    /// Records `uid` as given to an operator (with `state`, its stateful operator's
    /// position): a uid given twice fails the build.
    pub(crate) fn give_uid(&self, uid: &str, origin: Option<Origin>) {
        let mut st = self.state.borrow_mut();
        if !st.uids.insert(uid.to_string()) && st.duplicate_uid.is_none() {
            st.duplicate_uid = Some(uid.to_string());
        }
        if let Some(c) = &st.checkpoint {
            match origin {
                Some(Origin::Operator(id)) => c.borrow_mut().set_uid(id, uid),
                Some(Origin::Source(id)) => c.borrow_mut().set_source_uid(id, uid),
                None => {}
            }
        }
    }

    /// Ends the build: refuses a uid given twice, then checks the restored checkpoint
    /// against the graph and hands every stateful operator its state.
    pub(crate) fn finish_build(&self, allow_non_restored: bool) -> Result<(), CheckpointError> {
        let (duplicate, checkpoint) = {
            let st = self.state.borrow();
            (st.duplicate_uid.clone(), st.checkpoint.clone())
        };
        if let Some(uid) = duplicate {
            return Err(CheckpointError::DuplicateUid { uid });
        }
        let Some(c) = checkpoint else { return Ok(()) };
        StateHandle::restore_all(&c, allow_non_restored)?;
        let mut inputs = std::mem::take(&mut self.state.borrow_mut().inputs);
        let restored = inputs.iter_mut().try_for_each(|input| input.restore());
        self.state.borrow_mut().inputs = inputs;
        restored
    }

    /// Records a setting an operator cannot apply: `spawn` returns the first such error and
    /// the pipeline does not start.
    pub(crate) fn refuse(&self, error: crate::EngineError) {
        self.state.borrow_mut().refused.get_or_insert(error);
    }

    /// The first refusal recorded, if any.
    pub(crate) fn take_refusal(&self) -> Option<crate::EngineError> {
        self.state.borrow_mut().refused.take()
    }

    /// Records that an operator whose state is not checkpointed was built: a pipeline
    /// that checkpoints refuses to start with one.
    pub(crate) fn not_checkpointable(&self, what: &'static str) {
        if let Some(c) = self.checkpoint() {
            c.borrow_mut().unsupported.push(what);
        }
    }

    pub(crate) fn add_input(&self, input: Box<dyn Input>) {
        self.state.borrow_mut().inputs.push(input);
    }

    pub(crate) fn add_pending(&self, pending: Rc<RefCell<dyn Pending>>) {
        self.state.borrow_mut().pending.push(pending);
    }

    /// Where an operator asks the driver for an earlier tick than its last answer said.
    pub(crate) fn tick_request(&self) -> TickRequest {
        self.state.borrow().tick_request.clone()
    }

    pub(crate) fn add_ticker(&self, ticker: Rc<RefCell<dyn Ticker>>) {
        self.state.borrow_mut().tickers.push(ticker);
    }

    /// This shard's ends of the next exchange's mesh of rings.
    pub(crate) fn next_exchange_rings<T: Send + 'static>(&self) -> ShardRings<T> {
        let id = {
            let mut state = self.state.borrow_mut();
            state.next_exchange += 1;
            state.next_exchange - 1
        };
        let mut exchanges = self.shared.exchanges.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = exchanges.entry(id).or_insert_with(|| {
            let rings: Vec<Option<ShardRings<T>>> =
                Mesh::new(self.shards).config(self.config.ring).build::<T>().into_iter().map(Some).collect();
            Box::new(rings)
        });
        let rings = slot.downcast_mut::<Vec<Option<ShardRings<T>>>>().unwrap_or_else(|| {
            panic!("exchange {id} carries different types on different shards: the build function must build the same graph on every shard")
        });
        rings[self.shard].take().expect("each shard takes its own rings once")
    }

    /// A stream fed by `port`, in this scope; `kind` names what feeds it in the metrics.
    pub(crate) fn stream<T: 'static>(&self, port: super::Port<T>, kind: &'static str) -> Stream<T> {
        Stream::from_port(self.clone(), port, kind)
    }

    /// Cells for the rings of the exchange whose rings this shard took last
    /// ([`Scope::next_exchange_rings`]), one per destination with a ring.
    pub(crate) fn measure_rings(&self, to: impl Iterator<Item = usize>) -> Vec<Option<Arc<super::metrics::RingCells>>> {
        let exchange = self.state.borrow().next_exchange.saturating_sub(1);
        let mut cells = vec![None; self.shards];
        let mut rings = self.shared.rings.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for to in to {
            let c = Arc::new(super::metrics::RingCells::default());
            rings.push(super::metrics::RingEntry { exchange, from: self.shard, to, cells: c.clone() });
            cells[to] = Some(c);
        }
        cells
    }

    /// Counts what passes `port` (records, watermark) in the pipeline's metrics, as stream
    /// number n of this shard in build order (the same n on every shard).
    pub(crate) fn measure<T: 'static>(&self, port: &super::Port<T>, kind: &'static str) {
        let index = {
            let mut st = self.state.borrow_mut();
            st.next_stream += 1;
            st.next_stream - 1
        };
        let cells = Arc::new(super::metrics::StreamCells::default());
        port.borrow_mut().measure(cells.clone());
        let entry = super::metrics::StreamEntry { shard: self.shard, index, kind, cells };
        self.shared.streams.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(entry);
    }
}
