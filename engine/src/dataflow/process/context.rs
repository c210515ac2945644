//! [`ProcessContext`]: what a keyed process function sees besides its key and state: the
//! time, the watermark, the output, and the timers of its key.

use std::hash::Hash;

use sluice_io::EventTime;

use super::timers::TimerQueue;
use crate::dataflow::Event;

/// Which clock a timer follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeDomain {
    /// Event time: the timer fires when the input's watermark reaches its time.
    EventTime,
    /// Processing time: the timer fires when the shard's wall clock (milliseconds since
    /// the epoch, as [`EventTime::now`]) reaches its time.
    ProcessingTime,
}

/// A timer that fired: its time and clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timer {
    /// The time it was registered for.
    pub time: EventTime,
    /// The clock it followed.
    pub domain: TimeDomain,
}

/// The timers of one operator on one shard, both domains.
#[derive(Debug)]
pub(crate) struct Timers<K> {
    pub(crate) event: TimerQueue<K>,
    pub(crate) processing: TimerQueue<K>,
}

impl<K> Default for Timers<K> {
    fn default() -> Self {
        Timers { event: TimerQueue::default(), processing: TimerQueue::default() }
    }
}

/// The context of one call of a keyed process function, for one key.
///
/// Output goes to the operator's next batch: records emitted while processing a record
/// carry that record's time unless given another ([`ProcessContext::emit_at`]); records
/// emitted from a timer carry the timer's time. Timers belong to the key of the call.
pub struct ProcessContext<'a, K, O> {
    pub(crate) key: &'a K,
    pub(crate) time: EventTime,
    pub(crate) watermark: EventTime,
    /// The wall clock the operator read for this batch (or timer round): what TTL state
    /// follows in processing time.
    pub(crate) wall: EventTime,
    /// The watermark event-time TTL state follows (see [`ProcessContext::ttl_watermark`]).
    pub(crate) ttl_watermark: EventTime,
    pub(crate) timers: &'a mut Timers<K>,
    pub(crate) out: &'a mut Vec<Event<O>>,
}

impl<K, O> std::fmt::Debug for ProcessContext<'_, K, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessContext")
            .field("time", &self.time)
            .field("watermark", &self.watermark)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone, O> ProcessContext<'_, K, O> {
    /// The key this call is for.
    pub fn key(&self) -> &K {
        self.key
    }

    /// The event time of the record being processed, or the time of the timer firing.
    #[must_use]
    pub fn time(&self) -> EventTime {
        self.time
    }

    /// The input's watermark: every event-time timer at or below it has fired (or is
    /// firing now).
    #[must_use]
    pub fn current_watermark(&self) -> EventTime {
        self.watermark
    }

    /// The event time that event-time TTL state follows: the watermark, except that after
    /// a restore it starts at the highest watermark any shard had when the checkpoint was
    /// taken (so a value dropped as expired then is expired after a restore at any shard
    /// count, never visible again).
    #[must_use]
    pub fn ttl_watermark(&self) -> EventTime {
        self.ttl_watermark
    }

    /// The shard's wall clock, the time processing-time timers follow.
    #[must_use]
    pub fn current_processing_time(&self) -> EventTime {
        EventTime::now()
    }

    /// Emits `value` at [`ProcessContext::time`].
    pub fn emit(&mut self, value: O) {
        self.out.push(Event { time: self.time, value });
    }

    /// Emits `value` at `time`. A time at or below the watermark already passed on makes
    /// the record late for the operators downstream.
    pub fn emit_at(&mut self, time: EventTime, value: O) {
        self.out.push(Event { time, value });
    }

    /// Asks for [`KeyedProcessFunction::on_timer`](super::KeyedProcessFunction::on_timer)
    /// once the watermark reaches `time`; a time already passed fires with the next
    /// watermark. Registering the same key and time again does nothing.
    pub fn register_event_time_timer(&mut self, time: EventTime) {
        self.timers.event.register(self.key, time);
    }

    /// Asks for `on_timer` once the wall clock reaches `time` (milliseconds since the
    /// epoch: [`ProcessContext::current_processing_time`] plus a delay). Registering the
    /// same key and time again does nothing.
    pub fn register_processing_time_timer(&mut self, time: EventTime) {
        self.timers.processing.register(self.key, time);
    }

    /// Deletes this key's event-time timer at `time`; false if there was none.
    pub fn delete_event_time_timer(&mut self, time: EventTime) -> bool {
        self.timers.event.delete(self.key, time)
    }

    /// Deletes this key's processing-time timer at `time`; false if there was none.
    pub fn delete_processing_time_timer(&mut self, time: EventTime) -> bool {
        self.timers.processing.delete(self.key, time)
    }
}
