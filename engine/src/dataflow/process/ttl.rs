//! State time-to-live: how long a value of keyed process state stays visible after it was
//! written (or read), as Flink's `StateTtlConfig`.
//!
//! A TTL is a [`TtlConfig`] named by a type that implements [`TtlPolicy`], so every key's
//! state shares it at no cost per key and the state types stay plain containers:
//! [`TtlValueState<V, P>`](super::TtlValueState), [`TtlMapState<MK, MV, P>`](super::TtlMapState)
//! and [`TtlListState<V, P>`](super::TtlListState) keep a time stamp beside each value
//! (each map entry, each list element) and take the time from the [`ProcessContext`] they
//! are given on every access.
//!
//! - **Time domain.** Processing time: a value written at wall clock `w` expires once the
//!   wall clock reaches `w + ttl`. Event time: a value is stamped with the event time of
//!   the call that wrote it (the record's time, or the timer's), never below the
//!   operator's watermark, and expires once the watermark reaches `stamp + ttl`. The
//!   watermark it follows ([`ProcessContext::ttl_watermark`]) never goes back: after a
//!   restore it starts at the highest watermark any shard had in the checkpoint (the
//!   operator's own watermark restarts at the least), so a value one shard dropped as
//!   expired before the checkpoint is expired wherever its key lands at any shard count.
//! - **Update type.** [`TtlUpdate::OnCreateAndWrite`] (the default) restamps on writes
//!   only; [`TtlUpdate::OnReadAndWrite`] also on every read that returns the value.
//! - **Visibility.** An expired value is never returned (Flink's `NeverReturnExpired`):
//!   an access that finds one removes it and answers as if it were absent.
//! - **Cleanup.** Besides on access, the operator sweeps up to
//!   [`TtlConfig::sweep_keys`] keys after each watermark advance and each processing-time
//!   tick (every [`TtlConfig::ttl`], at most a second, when any field follows processing
//!   time), removing what expired and forgetting keys left empty; a checkpoint removes the
//!   expired values of every key it writes first, so a snapshot never holds one.
//! - **Restore.** The stamps are checkpointed, not the expiry times: a job restored with
//!   another TTL applies the new one to the old stamps (as Flink does). Changing the policy
//!   *type* changes the state's type, which a restore refuses.

use std::time::Duration;

use sluice_io::EventTime;

use super::{ProcessContext, TimeDomain};
pub use crate::error::TtlError;

/// When a value's time to live starts again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TtlUpdate {
    /// On creation and on every write (Flink's `OnCreateAndWrite`).
    OnCreateAndWrite,
    /// Also on every read that returns the value (Flink's `OnReadAndWrite`).
    OnReadAndWrite,
}

/// How many keys one sweep visits unless [`TtlConfig::sweep_keys`] says otherwise.
pub const DEFAULT_SWEEP_KEYS: usize = 1000;

/// A state time-to-live: its length, clock and update type, and how many keys each
/// incremental sweep visits. Built with `const fn`s, for a [`TtlPolicy`]'s `CONFIG`;
/// checked when the job is built ([`TtlConfig::check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TtlConfig {
    ttl: Duration,
    domain: TimeDomain,
    update: TtlUpdate,
    sweep_keys: usize,
}

impl TtlConfig {
    /// Values live `ttl` after they are written, on the `domain` clock.
    #[must_use]
    pub const fn new(ttl: Duration, domain: TimeDomain) -> TtlConfig {
        TtlConfig { ttl, domain, update: TtlUpdate::OnCreateAndWrite, sweep_keys: DEFAULT_SWEEP_KEYS }
    }

    /// Restarts the time to live on writes only, or on reads too.
    #[must_use]
    pub const fn update(self, update: TtlUpdate) -> TtlConfig {
        TtlConfig { update, ..self }
    }

    /// How many keys one incremental sweep visits (after each watermark advance and each
    /// processing-time tick): more frees idle keys sooner and costs more per advance.
    #[must_use]
    pub const fn sweep_keys(self, keys: usize) -> TtlConfig {
        TtlConfig { sweep_keys: keys, ..self }
    }

    /// The time to live.
    #[must_use]
    pub const fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The clock it follows.
    #[must_use]
    pub const fn domain(&self) -> TimeDomain {
        self.domain
    }

    /// When it restarts.
    #[must_use]
    pub const fn update_type(&self) -> TtlUpdate {
        self.update
    }

    /// Keys per sweep.
    #[must_use]
    pub const fn keys_per_sweep(&self) -> usize {
        self.sweep_keys
    }

    /// Refuses what cannot apply: a TTL below the clocks' millisecond resolution (zero
    /// included: every value would be expired when written), one beyond the clocks' range,
    /// and a sweep of no keys (keys no record touches again would never be freed).
    ///
    /// # Errors
    ///
    /// The [`TtlError`] naming the setting.
    pub fn check(&self) -> Result<(), TtlError> {
        if self.ttl.as_millis() == 0 {
            return Err(TtlError::BelowResolution { ttl: self.ttl });
        }
        if i64::try_from(self.ttl.as_millis()).is_err() {
            return Err(TtlError::TooLong { ttl: self.ttl });
        }
        if self.sweep_keys == 0 {
            return Err(TtlError::NoSweep);
        }
        Ok(())
    }

    /// The TTL in milliseconds (saturated: a checked config fits).
    pub(crate) const fn ttl_ms(&self) -> i64 {
        let ms = self.ttl.as_millis();
        if ms > i64::MAX as u128 { i64::MAX } else { ms as i64 }
    }

    /// Whether a value stamped `stamp` has expired at `clock`.
    #[inline]
    pub(crate) fn expired(&self, stamp: i64, clock: &TtlClock) -> bool {
        stamp.saturating_add(self.ttl_ms()) <= clock.now(self.domain)
    }
}

/// A TTL, named by a type: `impl TtlPolicy for Session { const CONFIG: TtlConfig = ...; }`
/// and then `TtlValueState<u64, Session>`.
pub trait TtlPolicy: 'static {
    /// The configuration every key's state of this policy follows.
    const CONFIG: TtlConfig;
}

/// The clocks a TTL follows during one call: the shard's wall clock (read once per batch,
/// timer round or sweep), the operator's watermark, and the event time of the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TtlClock {
    pub(crate) wall: i64,
    pub(crate) watermark: i64,
    pub(crate) event: i64,
}

impl TtlClock {
    /// The clock of `ctx`'s call.
    pub(crate) fn of<K, O>(ctx: &ProcessContext<'_, K, O>) -> TtlClock {
        TtlClock { wall: ctx.wall.millis(), watermark: ctx.ttl_watermark.millis(), event: ctx.time.millis() }
    }

    /// The clocks outside any call (a sweep, a checkpoint): no event time.
    pub(crate) fn at(wall: EventTime, watermark: EventTime) -> TtlClock {
        TtlClock { wall: wall.millis(), watermark: watermark.millis(), event: EventTime::MIN.millis() }
    }

    /// Now, on `domain`'s clock.
    #[inline]
    pub(crate) fn now(&self, domain: TimeDomain) -> i64 {
        match domain {
            TimeDomain::ProcessingTime => self.wall,
            TimeDomain::EventTime => self.watermark,
        }
    }

    /// The stamp of a write now, on `domain`'s clock: in event time the call's time, never
    /// below the watermark (a late record's write lives a TTL past the watermark).
    #[inline]
    pub(crate) fn stamp(&self, domain: TimeDomain) -> i64 {
        match domain {
            TimeDomain::ProcessingTime => self.wall,
            TimeDomain::EventTime => self.event.max(self.watermark),
        }
    }
}

/// What the operator needs to know of a state's TTLs: whether it sweeps, how many keys per
/// sweep, and whether it needs processing-time ticks to do so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TtlSweep {
    pub(crate) keys: usize,
    /// The interval of processing-time sweeps, when any TTL follows processing time.
    pub(crate) tick: Option<Duration>,
}

impl TtlSweep {
    /// The sweep for a state whose fields have `configs` (none without TTL), after
    /// checking each.
    pub(crate) fn of(configs: &[TtlConfig]) -> Result<Option<TtlSweep>, TtlError> {
        let mut sweep: Option<TtlSweep> = None;
        for c in configs {
            c.check()?;
            let s = sweep.get_or_insert(TtlSweep { keys: 0, tick: None });
            s.keys = s.keys.max(c.sweep_keys);
            if c.domain == TimeDomain::ProcessingTime {
                let every = c.ttl.min(Duration::from_secs(1));
                s.tick = Some(s.tick.map_or(every, |t| t.min(every)));
            }
        }
        Ok(sweep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_settings_that_cannot_apply_are_refused() {
        let zero = TtlConfig::new(Duration::ZERO, TimeDomain::EventTime);
        assert_eq!(zero.check(), Err(TtlError::BelowResolution { ttl: Duration::ZERO }));
        let tiny = TtlConfig::new(Duration::from_micros(999), TimeDomain::ProcessingTime);
        assert!(matches!(tiny.check(), Err(TtlError::BelowResolution { .. })));
        let long = TtlConfig::new(Duration::MAX, TimeDomain::ProcessingTime);
        assert!(matches!(long.check(), Err(TtlError::TooLong { .. })));
        let no_sweep = TtlConfig::new(Duration::from_secs(1), TimeDomain::EventTime).sweep_keys(0);
        assert_eq!(no_sweep.check(), Err(TtlError::NoSweep));
        assert!(TtlSweep::of(&[TtlConfig::new(Duration::from_secs(1), TimeDomain::EventTime), zero]).is_err());
        assert_eq!(TtlSweep::of(&[]), Ok(None));
    }

    #[test]
    fn ttl_sweep_takes_the_largest_batch_and_the_shortest_processing_tick() {
        let a = TtlConfig::new(Duration::from_millis(300), TimeDomain::ProcessingTime).sweep_keys(10);
        let b = TtlConfig::new(Duration::from_secs(60), TimeDomain::EventTime).sweep_keys(50);
        let c = TtlConfig::new(Duration::from_secs(60), TimeDomain::ProcessingTime);
        assert_eq!(TtlSweep::of(&[b]), Ok(Some(TtlSweep { keys: 50, tick: None })));
        assert_eq!(
            TtlSweep::of(&[a, b, c]),
            Ok(Some(TtlSweep { keys: DEFAULT_SWEEP_KEYS, tick: Some(Duration::from_millis(300)) }))
        );
    }

    #[test]
    fn ttl_expiry_follows_its_domain_and_event_stamps_never_fall_below_the_watermark() {
        let clock = TtlClock { wall: 10_000, watermark: 500, event: 200 };
        let event = TtlConfig::new(Duration::from_millis(100), TimeDomain::EventTime);
        let wall = TtlConfig::new(Duration::from_millis(100), TimeDomain::ProcessingTime);
        assert_eq!(clock.stamp(TimeDomain::EventTime), 500, "a late call's write is stamped at the watermark");
        assert_eq!(TtlClock { event: 700, ..clock }.stamp(TimeDomain::EventTime), 700);
        assert!(event.expired(400, &clock), "expired once the watermark reaches stamp + ttl");
        assert!(!event.expired(401, &clock));
        assert!(wall.expired(9_900, &clock));
        assert!(!wall.expired(9_901, &clock));
        assert!(!event.expired(i64::MAX, &clock), "stamps saturate");
    }
}
