//! The keyed process function: per-key state and timers, the building block for patterns
//! no window expresses (fraud rules, per-user timeouts, deduplication), as Flink's
//! `KeyedProcessFunction`.
//!
//! `keyed.process(f)` runs `f` on the shard that owns each key, once per record
//! ([`KeyedProcessFunction::process_element`]) and once per timer that fires
//! ([`KeyedProcessFunction::on_timer`]), each time with the key's state, `F::State`: a
//! struct of [`ValueState`], [`MapState`] and [`ListState`] fields, created with
//! `Default` when the key first needs it and forgotten when it is empty again
//! ([`KeyedState`]).
//!
//! State can expire: [`TtlValueState`], [`TtlMapState`] and [`TtlListState`] follow a
//! [`TtlConfig`] named by a [`TtlPolicy`] type (see the `ttl` module's docs for the
//! semantics, which are Flink's `StateTtlConfig`'s with an event-time option).
//!
//! Timers, as in Flink:
//! - one per key and time: registering it again is a no-op; deleting it frees it;
//! - event-time timers fire when the watermark reaches their time (`time <= watermark`),
//!   in time order, and the watermark is passed on only after what they emitted; a
//!   drained input's last watermark is the end of time, so every one fires then;
//! - processing-time timers fire when the shard's wall clock reaches their time (the
//!   operator asks the driver to wake it then; the clock has millisecond resolution), and
//!   are dropped when the input ends;
//! - what a timer emits carries the timer's time.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use sluice_engine::dataflow::{
//!     Event, Generator, KeyedProcessFunction, MapState, Pipeline, PipelineConfig, ProcessContext, Timer,
//!     WatermarkStrategy,
//! };
//! use sluice_io::EventTime;
//!
//! /// Counts each key's records per 100 ms of event time: a count per window end in a map,
//! /// and a timer at each window's last instant that reports and forgets it.
//! struct CountPer100ms;
//!
//! type Ctx<'a> = ProcessContext<'a, u64, (u64, i64, u64)>;
//!
//! impl KeyedProcessFunction<u64, u64> for CountPer100ms {
//!     type State = MapState<i64, u64>;
//!     type Out = (u64, i64, u64);
//!     fn process_element(&mut self, _: &u64, e: Event<u64>, counts: &mut Self::State, ctx: &mut Ctx<'_>) {
//!         let end = e.time.millis() / 100 * 100 + 100;
//!         *counts.entry(end).or_insert(0) += 1;
//!         ctx.register_event_time_timer(EventTime::from_millis(end - 1));
//!     }
//!     fn on_timer(&mut self, key: &u64, timer: Timer, counts: &mut Self::State, ctx: &mut Ctx<'_>) {
//!         let end = timer.time.millis() + 1;
//!         ctx.emit((*key, end, counts.remove(&end).unwrap_or(0)));
//!     }
//! }
//!
//! let reports = Arc::new(Mutex::new(Vec::new()));
//! let sink = reports.clone();
//! Pipeline::new(PipelineConfig::with_shards(2))
//!     .run(move |scope| {
//!         let sink = sink.clone();
//!         scope
//!             .source(
//!                 Generator::new(scope.shard(), scope.shards(), 1000, |i| i),
//!                 WatermarkStrategy::monotonous(|i: &u64| EventTime::from_millis(*i as i64)),
//!             )
//!             .key_by(|i| i % 3)
//!             .process(CountPer100ms)
//!             .for_each(move |e| sink.lock().unwrap().push(e.value));
//!     })
//!     .unwrap();
//! let reports = reports.lock().unwrap();
//! // Three keys, ten windows each; key 0 has 0, 3, .., 99 in the first.
//! assert_eq!(reports.len(), 30);
//! assert!(reports.contains(&(0, 100, 34)));
//! assert_eq!(reports.iter().map(|r| r.2).sum::<u64>(), 1000);
//! //! ```

mod context;
mod operator;
mod state;
mod timers;
mod ttl;
mod ttl_state;

use std::{cell::RefCell, hash::Hash, rc::Rc};

pub use context::{ProcessContext, TimeDomain, Timer};
pub use state::{KeyedState, ListState, MapState, ValueState};
pub use ttl::{DEFAULT_SWEEP_KEYS, TtlClock, TtlConfig, TtlError, TtlPolicy, TtlUpdate};
pub use ttl_state::{TtlListState, TtlMapState, TtlValueState};

use self::operator::ProcessOperator;
use super::operator::Shared;
use super::{Event, KeyedStream, Output, Stream, checkpoint::Data};

/// A function run per record and per timer with its key's state, on the shard that owns
/// the key.
pub trait KeyedProcessFunction<K, T>: 'static {
    /// The state of one key; `Default` is a key's state before its first record.
    type State: KeyedState + Default + 'static;
    /// What it emits.
    type Out: 'static;

    /// Processes one record of `key`.
    fn process_element(
        &mut self,
        key: &K,
        event: Event<T>,
        state: &mut Self::State,
        ctx: &mut ProcessContext<'_, K, Self::Out>,
    );

    /// A timer of `key` fired. The default does nothing, for functions without timers.
    fn on_timer(&mut self, key: &K, timer: Timer, state: &mut Self::State, ctx: &mut ProcessContext<'_, K, Self::Out>) {
        let _ = (key, timer, state, ctx);
    }
}

impl<K: Hash + Eq + Clone + Data, T: 'static, KS: Fn(&T) -> K + 'static> KeyedStream<K, T, KS> {
    /// Runs `function` on every record and timer of every key, with the key's state; the
    /// stream of what it emits (on the shards that own the keys).
    ///
    /// With checkpoints on, every key's state and timers are part of each checkpoint, so
    /// the key and the state must be [`Data`] (derive rkyv's `Archive`, `Serialize` and
    /// `Deserialize` on your state struct).
    pub fn process<F: KeyedProcessFunction<K, T>>(self, function: F) -> Stream<F::Out>
    where
        F::State: Data,
    {
        let scope = self.stream.scope.clone();
        let out = Output::port();
        let config = scope.config();
        let state = scope.state_handle::<K, F::State>("process");
        let mut ttls = Vec::new();
        F::State::ttl_configs(&mut ttls);
        let sweep = ttl::TtlSweep::of(&ttls).unwrap_or_else(|e| {
            scope.refuse(crate::EngineError::StateTtl(e));
            None
        });
        let operator = Rc::new(RefCell::new(ProcessOperator::new(
            function,
            self.key_fn(),
            out.clone(),
            config.batch_records,
            scope.tick_request(),
            state.clone(),
            sweep,
        )));
        if let Some(state) = state {
            let operator = operator.clone();
            state.on_restore(move |state| operator.borrow_mut().restore(state));
        }
        self.stream.port.borrow_mut().attach(Box::new(Shared(operator.clone())));
        scope.add_ticker(operator);
        scope.stateful_stream(out, "process")
    }
}
