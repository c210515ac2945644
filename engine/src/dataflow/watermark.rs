//! Event time at the sources: timestamp extraction, watermark strategies, and idleness.
//!
//! Each source split (a topic partition, a channel, a generator's share) keeps its own
//! watermark; the source's watermark is the minimum over its splits that are not idle. A
//! split with no records for longer than the idle timeout goes idle, so it stops holding
//! the others back, and becomes active again with its next record.

use std::time::{Duration, Instant};

use sluice_io::EventTime;

/// How a source stamps its records and derives its watermarks.
///
/// `E` is the timestamp extractor's type: kept concrete (not boxed) so the source calls it
/// inline for every record. The default, a function pointer, names the strategies that
/// need no extractor ([`WatermarkStrategy::processing_time`]) or take a plain `fn`.
pub struct WatermarkStrategy<T, E = fn(&T) -> EventTime> {
    pub(crate) time: TimeSource<E>,
    pub(crate) kind: WatermarkKind<T>,
    pub(crate) idle_timeout: Option<Duration>,
}

pub(crate) enum TimeSource<E> {
    Extract(E),
    Processing,
}

/// Returns a record's punctuation: the watermark it carries, if any.
pub(crate) type Punctuate<T> = Box<dyn Fn(&T, EventTime) -> Option<EventTime>>;

pub(crate) enum WatermarkKind<T> {
    /// `max seen - bound - 1ms`.
    Bounded(i64),
    /// Punctuation from the records themselves.
    Punctuated(Punctuate<T>),
    /// The shard's clock: `now - 1ms`, also while no records arrive.
    Processing,
}

impl<T, E> std::fmt::Debug for WatermarkStrategy<T, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            WatermarkKind::Bounded(b) => format!("bounded out-of-orderness {b}ms"),
            WatermarkKind::Punctuated(_) => "punctuated".into(),
            WatermarkKind::Processing => "processing time".into(),
        };
        f.debug_struct("WatermarkStrategy").field("kind", &kind).field("idle_timeout", &self.idle_timeout).finish()
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl<T, E: Fn(&T) -> EventTime + 'static> WatermarkStrategy<T, E> {
    /// Event time from `extract`; the watermark trails the largest time seen by `bound`,
    /// so records at most `bound` out of order are on time.
    pub fn bounded_out_of_orderness(bound: Duration, extract: E) -> Self {
        WatermarkStrategy {
            time: TimeSource::Extract(extract),
            kind: WatermarkKind::Bounded(millis(bound)),
            idle_timeout: None,
        }
    }

    /// Event time from `extract`, for records that arrive in time order: the watermark
    /// is just below the largest time seen.
    pub fn monotonous(extract: E) -> Self {
        Self::bounded_out_of_orderness(Duration::ZERO, extract)
    }

    /// Event time from `extract`; the records themselves carry the watermarks: `punctuate`
    /// returns one for a record that is a punctuation mark.
    pub fn punctuated(extract: E, punctuate: impl Fn(&T, EventTime) -> Option<EventTime> + 'static) -> Self {
        WatermarkStrategy {
            time: TimeSource::Extract(extract),
            kind: WatermarkKind::Punctuated(Box::new(punctuate)),
            idle_timeout: None,
        }
    }
}

impl<T> WatermarkStrategy<T> {
    /// Processing time: each record is stamped with the shard's clock as it enters, and
    /// the watermark follows the clock, so windows close on the wall clock.
    #[must_use]
    pub fn processing_time() -> Self {
        WatermarkStrategy { time: TimeSource::Processing, kind: WatermarkKind::Processing, idle_timeout: None }
    }
}

impl<T, E> WatermarkStrategy<T, E> {
    /// A split with no records for `timeout` goes idle and stops holding the watermark back.
    #[must_use]
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = Some(timeout);
        self
    }
}

/// One split's event-time state.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SplitClock {
    pub(crate) max_time: EventTime,
    pub(crate) watermark: EventTime,
    pub(crate) last_record: Instant,
    pub(crate) idle: bool,
}

impl SplitClock {
    pub(crate) fn new(now: Instant) -> Self {
        SplitClock { max_time: EventTime::MIN, watermark: EventTime::MIN, last_record: now, idle: false }
    }
}

/// The per-split clocks of one source and their combined watermark.
#[derive(Debug)]
pub(crate) struct SourceClock {
    pub(crate) splits: Vec<SplitClock>,
}

impl SourceClock {
    pub(crate) fn new(splits: usize) -> Self {
        let now = Instant::now();
        SourceClock { splits: vec![SplitClock::new(now); splits.max(1)] }
    }

    /// The source's watermark and whether it is idle (all splits idle).
    pub(crate) fn combined(&self) -> (EventTime, bool) {
        match self.splits.iter().filter(|s| !s.idle).map(|s| s.watermark).min() {
            Some(w) => (w, false),
            None => (self.splits.iter().map(|s| s.watermark).max().unwrap_or(EventTime::MIN), true),
        }
    }

    /// Marks splits idle whose last record is older than `timeout`; the next time this
    /// should run.
    pub(crate) fn check_idle(&mut self, now: Instant, timeout: Duration) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for split in &mut self.splits {
            if split.idle {
                continue;
            }
            let due = split.last_record + timeout;
            if due <= now {
                split.idle = true;
            } else {
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        next
    }
}
