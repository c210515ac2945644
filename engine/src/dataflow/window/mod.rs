//! Windows: tumbling, sliding, session and global windows over a keyed stream, with
//! allowed lateness, a late-data policy, early firings, and custom triggers.
//!
//! A window `[start, end)` holds the records whose event time falls in it and is complete
//! when the watermark reaches its last instant, `end - 1` (Flink's `maxTimestamp`): it then
//! fires, emitting one [`WindowResult`] per key. A record for a window that has already
//! fired is *late*, and the operator's [`LatePolicy`] decides what happens to it:
//!
//! - [`LatePolicy::Drop`]: it is discarded and counted (`Metrics::late_dropped`).
//! - [`LatePolicy::Update`]: while the watermark is within the allowed lateness of the
//!   window's end, the window keeps its state, the record is added, and the corrected
//!   result is emitted again, marked [`Firing::Update`]; after that, late records are
//!   dropped and counted.
//! - [`LatePolicy::SideOutput`]: it goes to the late stream ([`WindowedStream::late_stream`]).
//!
//! Early firings ([`WindowedStream::early_firing`]) emit the current results of windows
//! still open every processing-time interval, marked [`Firing::Early`], for dashboards.

mod aligned;
pub(crate) mod buckets;
mod combine;
mod emit;
mod function;
mod global;
mod partials;
mod session;
mod skeleton;

use std::{marker::PhantomData, rc::Rc, time::Duration};

use sluice_io::EventTime;

pub use combine::{CombiningStream, CombiningWindows};
pub use function::{Aggregate, Count};
use function::{AggregateFn, ProcessFn, ReduceFn, WindowFunction};
pub use global::{CountTrigger, Trigger, TriggerAction};

use super::{BoxedKey, Event, KeyedStream, Output, Port, Stream, checkpoint::Data};

/// How many emptied per-key maps a window operator keeps, with their capacity, for the
/// windows after (the local phase's panes, the aligned windows): the next window usually
/// holds about as many keys, and a fresh map would grow to them by rehashing.
const SPARE_MAPS: usize = 2;

/// How a window operator's snapshot names one key's window: start and end (ms), whether
/// it has fired, and the key.
pub(crate) type WindowEntry<K> = (i64, i64, bool, K);

/// A window's span of event time, `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Window {
    /// The first instant in the window.
    pub start: EventTime,
    /// The first instant after it.
    pub end: EventTime,
}

impl Window {
    /// The window's last instant, `end - 1`: it fires when the watermark reaches this.
    #[must_use]
    pub const fn max_timestamp(&self) -> EventTime {
        EventTime::from_millis(self.end.0.saturating_sub(1))
    }

    /// Whether `time` falls in the window.
    #[must_use]
    pub fn contains(&self, time: EventTime) -> bool {
        self.start <= time && time < self.end
    }
}

/// Why a result was emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Firing {
    /// The watermark passed the window's end (or a trigger fired): the regular result.
    OnTime,
    /// An early firing of a window still open: a preview, to be superseded.
    Early,
    /// A late record changed a window that had already fired: this result replaces the
    /// earlier one for the same key and window.
    Update,
}

/// One key's result for one window.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WindowResult<K, R> {
    /// The key.
    pub key: K,
    /// The window.
    pub window: Window,
    /// The computed value.
    pub value: R,
    /// Why it was emitted.
    pub firing: Firing,
}

/// What a window operator does with a record for a window that has already fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LatePolicy {
    /// Discard it, counted in `Metrics::late_dropped`.
    #[default]
    Drop,
    /// Within the allowed lateness, add it and re-emit the window's result as an update.
    Update,
    /// Send it to the late stream.
    SideOutput,
}

/// How records are assigned to windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Windows {
    /// Fixed-size, non-overlapping windows aligned to the epoch plus `offset`.
    Tumbling {
        /// Window length in ms.
        size: i64,
        /// Shift of the window starts in ms.
        offset: i64,
    },
    /// Fixed-size windows starting every `slide`: a record is in `size / slide` of them.
    Sliding {
        /// Window length in ms.
        size: i64,
        /// Distance between window starts in ms.
        slide: i64,
    },
    /// Per key, records closer than `gap` belong to one session; windows merge when a
    /// record bridges them.
    Session {
        /// Inactivity gap in ms.
        gap: i64,
    },
    /// One window per key spanning all time, fired by a [`Trigger`].
    Global,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Windows {
    /// Tumbling windows of `size`.
    ///
    /// # Panics
    ///
    /// If `size` is under a millisecond.
    #[must_use]
    pub fn tumbling(size: Duration) -> Self {
        assert!(ms(size) > 0, "a window is at least 1 ms long");
        Windows::Tumbling { size: ms(size), offset: 0 }
    }

    /// Sliding windows of `size`, one starting every `slide`.
    ///
    /// # Panics
    ///
    /// If `size` or `slide` is under a millisecond or `slide` exceeds `size`.
    #[must_use]
    pub fn sliding(size: Duration, slide: Duration) -> Self {
        assert!(ms(slide) > 0 && ms(slide) <= ms(size), "sliding windows need 0 < slide <= size");
        Windows::Sliding { size: ms(size), slide: ms(slide) }
    }

    /// Session windows with inactivity `gap`.
    ///
    /// # Panics
    ///
    /// If `gap` is under a millisecond.
    #[must_use]
    pub fn session(gap: Duration) -> Self {
        assert!(ms(gap) > 0, "a session gap is at least 1 ms");
        Windows::Session { gap: ms(gap) }
    }

    /// The global window; needs a trigger ([`WindowedStream::trigger`]).
    #[must_use]
    pub fn global() -> Self {
        Windows::Global
    }

    /// The tumbling or sliding windows `time` falls in, latest first. Session and global
    /// windows are not known from a time alone: for them, none.
    pub fn assign(&self, time: EventTime, mut each: impl FnMut(Window)) {
        match *self {
            Windows::Tumbling { size, offset } => {
                let start = time.0 - (time.0 - offset).rem_euclid(size);
                each(Window {
                    start: EventTime::from_millis(start),
                    end: EventTime::from_millis(start.saturating_add(size)),
                });
            }
            Windows::Sliding { size, slide } => {
                let mut start = time.0 - time.0.rem_euclid(slide);
                while start > time.0.saturating_sub(size) {
                    each(Window {
                        start: EventTime::from_millis(start),
                        end: EventTime::from_millis(start.saturating_add(size)),
                    });
                    start -= slide;
                }
            }
            Windows::Session { .. } | Windows::Global => {}
        }
    }
}

/// A keyed stream cut into windows, being configured; one of `aggregate`, `reduce`,
/// `process` or `count` completes it.
pub struct WindowedStream<K, T, KS = BoxedKey<T, K>> {
    keyed: KeyedStream<K, T, KS>,
    windows: Windows,
    lateness: i64,
    policy: LatePolicy,
    late: Option<Port<T>>,
    early: Option<Duration>,
    trigger: Option<Box<dyn Trigger>>,
}

impl<K, T, KS> std::fmt::Debug for WindowedStream<K, T, KS> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowedStream")
            .field("windows", &self.windows)
            .field("lateness_ms", &self.lateness)
            .field("policy", &self.policy)
            .field("early", &self.early)
            .finish_non_exhaustive()
    }
}

impl<K, T, KS> KeyedStream<K, T, KS>
where
    K: std::hash::Hash + Eq + Clone + 'static,
    T: 'static,
    KS: Fn(&T) -> K + 'static,
{
    /// Cuts each key's records into `windows`.
    pub fn window(self, windows: Windows) -> WindowedStream<K, T, KS> {
        WindowedStream {
            keyed: self,
            windows,
            lateness: 0,
            policy: LatePolicy::Drop,
            late: None,
            early: None,
            trigger: None,
        }
    }
}

/// The settings every window operator shares, taken from the builder.
pub(crate) struct WindowSpec<K, T> {
    pub(crate) key: Rc<dyn Fn(&T) -> K>,
    pub(crate) lateness: i64,
    pub(crate) policy: LatePolicy,
    pub(crate) late: Option<Port<T>>,
    pub(crate) early: Option<Duration>,
}

impl<K, T, KS> WindowedStream<K, T, KS>
where
    K: std::hash::Hash + Eq + Clone + 'static,
    T: 'static,
    KS: Fn(&T) -> K + 'static,
{
    /// How long after a window fires late records may still update it (with
    /// [`LatePolicy::Update`]); its state is kept that long. Default 0.
    #[must_use]
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.lateness = ms(lateness);
        self
    }

    /// What happens to late records. Default [`LatePolicy::Drop`].
    #[must_use]
    pub fn late_policy(mut self, policy: LatePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The late records, as a stream of their own; sets [`LatePolicy::SideOutput`].
    pub fn late_stream(&mut self) -> Stream<T> {
        self.policy = LatePolicy::SideOutput;
        let port = self.late.get_or_insert_with(Output::port).clone();
        self.keyed.stream.scope.stream(port, "late")
    }

    /// Emits the current results of open windows every `interval` of processing time.
    #[must_use]
    pub fn early_firing(mut self, interval: Duration) -> Self {
        self.early = Some(interval.max(Duration::from_millis(1)));
        self
    }

    /// The trigger of a global window.
    #[must_use]
    pub fn trigger(mut self, trigger: impl Trigger) -> Self {
        self.trigger = Some(Box::new(trigger));
        self
    }
}

/// The window functions. With checkpoints on, each key's window state is part of every
/// checkpoint, so keys and accumulators are [`Data`].
impl<K, T, KS> WindowedStream<K, T, KS>
where
    K: std::hash::Hash + Eq + Clone + Data,
    T: 'static,
    KS: Fn(&T) -> K + 'static,
{
    /// Each key's window aggregated incrementally by `aggregate`.
    pub fn aggregate<A: Aggregate<T>>(self, aggregate: A) -> Stream<WindowResult<K, A::Out>>
    where
        A::Acc: Data,
    {
        self.build(AggregateFn(aggregate))
    }

    /// Each key's window reduced with `f`.
    pub fn reduce(self, f: impl FnMut(&T, &T) -> T + 'static) -> Stream<WindowResult<K, T>>
    where
        T: Clone + Data,
    {
        self.build(ReduceFn(f, PhantomData))
    }

    /// Each key's window computed by `f` from all its records at once (in arrival order).
    pub fn process<R: 'static>(
        self,
        f: impl FnMut(&K, &Window, &[Event<T>]) -> R + 'static,
    ) -> Stream<WindowResult<K, R>>
    where
        T: Clone + Data,
    {
        self.build(ProcessFn(f, PhantomData))
    }

    /// The number of records in each key's window.
    pub fn count(self) -> Stream<WindowResult<K, u64>> {
        self.aggregate(Count)
    }

    fn build<F: WindowFunction<K, T>>(self, function: F) -> Stream<WindowResult<K, F::Out>>
    where
        F::Acc: Data,
    {
        let WindowedStream { keyed, windows, lateness, policy, late, early, trigger } = self;
        let scope = keyed.stream.scope.clone();
        let out = Output::port();
        let spec = WindowSpec { key: keyed.key_fn(), lateness, policy, late, early };
        let emit = emit::Emit::new(out.clone(), spec, scope.shared.metrics.late_cells());
        match windows {
            Windows::Tumbling { .. } | Windows::Sliding { .. } => {
                aligned::attach(&scope, &keyed.stream.port, keyed.key.clone(), windows, function, emit);
            }
            Windows::Session { gap } => session::attach(&scope, &keyed.stream.port, gap, function, emit),
            Windows::Global => {
                let trigger = trigger.expect("a global window needs a trigger (WindowedStream::trigger)");
                global::attach(&scope, &keyed.stream.port, trigger, function, emit);
            }
        }
        scope.stateful_stream(out, "window")
    }
}
