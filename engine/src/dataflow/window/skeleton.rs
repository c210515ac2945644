//! The skeleton every window operator shares: the operator's watermark, what a watermark,
//! idleness, the end of the stream and a checkpoint barrier do, and early firings on a
//! processing-time tick. A window type supplies only its [`WindowKind`]: how records land
//! in its state (its assigner and state shape), what a watermark fires, what it writes
//! into a snapshot, and its early results; its `attach` restores that state and hands it
//! to [`attach`] here.
//!
//! Contract: the kind's results go out through its [`Emit`], which the skeleton flushes
//! after every batch and before it forwards a watermark, an idleness change, the end or
//! a barrier; so every result a record or a watermark caused is downstream before the
//! barrier that follows it (the epoch of a result is the epoch of the state change that
//! made it: see ARCHITECTURE.md's exactly-once invariant).

use std::{cell::RefCell, marker::PhantomData, rc::Rc, time::Instant};

use sluice_io::EventTime;

use super::emit::Emit;
use crate::dataflow::{
    Event, Operator, Port, Scope,
    checkpoint::{Barrier, StateError, StateHandle},
    operator::Shared,
    scope::Ticker,
};

/// What a window type adds to the skeleton.
pub(crate) trait WindowKind<T: 'static>: 'static {
    /// The key of the results.
    type Key: 'static;
    /// The value of the results.
    type Out: 'static;

    /// Where the kind's results, late records and counters go.
    fn emit(&mut self) -> &mut Emit<Self::Key, T, Self::Out>;

    /// Adds a batch's records (draining it) to their windows; a record for a window
    /// `watermark` has already completed is late (the emitter's policy says what then).
    fn add(&mut self, batch: &mut Vec<Event<T>>, watermark: EventTime);

    /// Fires the windows `watermark` completes, and forgets those whose lateness passed.
    fn fire(&mut self, watermark: EventTime);

    /// Writes the kind's state, as of `barrier`, into `state`'s snapshot.
    fn snapshot(&mut self, state: &StateHandle, barrier: Barrier, watermark: EventTime);

    /// Emits the current result of every window still open, marked early.
    fn early(&mut self);

    /// Takes in the state `state` restores (the key groups this shard owns), and returns
    /// the watermark to start at (`None`: nothing restored, or a kind that does not fire
    /// on the watermark).
    fn restore(&mut self, state: &StateHandle) -> Result<Option<EventTime>, StateError>;
}

/// A window operator: a [`WindowKind`] and the watermark it has reached.
pub(crate) struct WindowOperator<T, W> {
    kind: W,
    watermark: EventTime,
    state: Option<StateHandle>,
    _input: PhantomData<fn(T)>,
}

/// Attaches `kind` to `input` as an operator, with early firings if its emitter asks for
/// them. With checkpoints on, its state is restored once the graph is built
/// ([`StateHandle::on_restore`]), and it starts at the restored watermark.
pub(crate) fn attach<T: 'static, W: WindowKind<T>>(
    scope: &Scope,
    input: &Port<T>,
    mut kind: W,
    state: Option<StateHandle>,
) {
    let early = kind.emit().spec.early;
    let watermark = EventTime::MIN;
    let op = Rc::new(RefCell::new(WindowOperator { kind, watermark, state: state.clone(), _input: PhantomData }));
    if let Some(state) = state {
        let op = op.clone();
        state.on_restore(move |state| {
            let mut op = op.borrow_mut();
            if let Some(watermark) = op.kind.restore(state)? {
                op.watermark = watermark;
            }
            Ok(())
        });
    }
    if early.is_some() {
        scope.add_ticker(op.clone());
    }
    input.borrow_mut().attach(Box::new(Shared(op)));
}

impl<T: 'static, W: WindowKind<T>> Operator<T> for WindowOperator<T, W> {
    #[inline]
    fn on_batch(&mut self, batch: &mut Vec<Event<T>>) {
        self.kind.add(batch, self.watermark);
        self.kind.emit().flush();
    }

    fn on_watermark(&mut self, watermark: EventTime) {
        self.watermark = self.watermark.max(watermark);
        self.kind.fire(self.watermark);
        self.kind.emit().watermark(self.watermark);
    }

    fn on_idle(&mut self, idle: bool) {
        self.kind.emit().idle(idle);
    }

    fn on_end(&mut self) {
        self.kind.emit().end();
    }

    fn on_barrier(&mut self, barrier: Barrier) {
        if let Some(state) = &self.state {
            self.kind.snapshot(state, barrier, self.watermark);
        }
        self.kind.emit().barrier(barrier);
    }
}

impl<T: 'static, W: WindowKind<T>> Ticker for WindowOperator<T, W> {
    fn tick(&mut self, now: Instant) -> Option<Instant> {
        let interval = self.kind.emit().spec.early?;
        self.kind.early();
        self.kind.emit().flush();
        Some(now + interval)
    }
}
