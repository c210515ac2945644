//! The job both sides of `sluice-bench pipeline` run, defined once so they cannot drift
//! apart: a count per key and one-second tumbling window over the events `0..events`, with
//! `key = i mod 10 000`, and the expected answer, which both sinks check every result
//! against.
//!
//! Event `i` is *scheduled* at `i x ps_per_event` picoseconds after the run's epoch, and
//! its event time is that schedule in whole milliseconds. The throughput mode schedules a
//! million events per second of event time (event `i` at `i` microseconds, so each full
//! window counts 100 events per key) and sends them as fast as it can; the latency mode
//! (`--rate R`) schedules `R` per second and sends each at its scheduled wall time. One
//! definition for both means the latency mode's windows are wall-clock seconds, so its
//! latencies mean the same at any rate, while the throughput mode's windows are exactly
//! those of the spec.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::ensure;

/// Distinct keys by default ([`Job::with_keys`] changes it): event `i` has key
/// `i % keys`.
pub const KEYS: u64 = 10_000;
/// The tumbling window's length, in event-time milliseconds.
pub const WINDOW_MS: i64 = 1000;
/// Picoseconds between two events' scheduled times in the throughput mode: a million events
/// per second of event time.
pub const THROUGHPUT_PS_PER_EVENT: u64 = 1_000_000;

const PS_PER_MS: u64 = 1_000_000_000;

/// How a job's events are divided between the shards (or timely's workers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Split {
    /// Shard `s` of `n` makes the events `i % n == s`: every shard the same number, and the
    /// run ends when the slowest shard ends.
    #[default]
    ByResidue,
    /// The shards claim runs of [`CLAIM_RUN`] consecutive events from one shared counter
    /// as they need them, so a shard on a core that runs slower for a while makes fewer.
    OnDemand,
}

/// Events per claim of [`Split::OnDemand`]: a quarter of a millisecond of one shard's work
/// at 250 M events/s, so that one shard ends at most that long after the others and the
/// shared counter's cache line moves a few thousand times a second.
pub const CLAIM_RUN: u64 = 1 << 16;

/// What one run computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    /// Events `0..events` are generated.
    pub events: u64,
    /// Picoseconds between consecutive events' scheduled times.
    pub ps_per_event: u64,
    /// How far the watermark trails the largest event time seen.
    pub out_of_orderness_ms: u64,
    /// Records per batch: sluice's `batch_records`, and the timely input's chunk between
    /// two `advance_to`s.
    pub batch: usize,
    /// Distinct keys: event `i` has key `i % keys`. [`KEYS`] unless [`Job::with_keys`].
    pub keys: u64,
    /// The start of the schedule whose latencies are discarded (`--warmup`); zero unless
    /// [`Job::with_warmup`].
    pub warmup: Duration,
    /// Whether sluice's shards are pinned to CPUs (`PipelineConfig::pin`); true unless
    /// [`Job::with_pin`].
    pub pin: bool,
    /// The open loop's pause ([`Job::with_pause`]): shard 0's source sends nothing from
    /// [`PAUSE_AFTER`] past the warm-up for this long, then sends what it held back. Zero:
    /// no pause.
    pub pause: Duration,
    /// The sources' idle timeout (`WatermarkStrategy::with_idle_timeout`), if any.
    pub idle_timeout: Option<Duration>,
    /// Whether sluice counts in two phases (`Stream::combine_by`: partial counts per shard,
    /// merged by each key's owner) rather than sending every event to its key's shard;
    /// false unless [`Job::with_two_phase`]. The timely baseline then counts in two phases
    /// too; the bare loop does not read it.
    pub two_phase: bool,
    /// How the throughput mode splits the events between shards (and timely's workers);
    /// [`Split::ByResidue`] unless [`Job::with_split`]. The open loop always splits by
    /// residue.
    pub split: Split,
    /// sluice's `PipelineConfig::watermark_interval`, if not its default.
    pub watermark_interval: Option<Duration>,
}

/// When, after the warm-up, a paused job's shard 0 stops sending: half a window in, so a
/// pause of more than half a window holds back the end of a window.
pub const PAUSE_AFTER: Duration = Duration::from_millis(1500);

impl Job {
    /// A job of `events` events, `rate` per second of event time (`None`: a million).
    ///
    /// # Errors
    ///
    /// A zero rate or batch, or a schedule too long to express in picoseconds.
    pub fn new(events: u64, rate: Option<u64>, out_of_orderness_ms: u64, batch: usize) -> anyhow::Result<Self> {
        let ps_per_event = match rate {
            None => THROUGHPUT_PS_PER_EVENT,
            Some(rate) => {
                ensure!(rate > 0, "--rate must be positive");
                ensure!(rate <= 1_000_000_000_000, "--rate is at most 10^12 events per second");
                1_000_000_000_000 / rate
            }
        };
        ensure!(batch > 0, "--batch must be positive");
        ensure!(
            events.checked_mul(ps_per_event).is_some(),
            "{events} events at {ps_per_event} ps apart overflow the schedule: fewer events or a higher rate"
        );
        Ok(Job {
            events,
            ps_per_event,
            out_of_orderness_ms,
            batch,
            keys: KEYS,
            warmup: Duration::ZERO,
            pin: true,
            pause: Duration::ZERO,
            idle_timeout: None,
            two_phase: false,
            watermark_interval: None,
            split: Split::ByResidue,
        })
    }

    /// The same job, counted by sluice in two phases or not ([`Job::two_phase`]).
    pub fn with_two_phase(self, two_phase: bool) -> Self {
        Job { two_phase, ..self }
    }

    /// The same job with its events split between shards by `split` ([`Job::split`]).
    pub fn with_split(self, split: Split) -> Self {
        Job { split, ..self }
    }

    /// The same job with sluice's exchanges holding watermarks for `interval` (`None`: the
    /// pipeline's default).
    pub fn with_watermark_interval(self, watermark_interval: Option<Duration>) -> Self {
        Job { watermark_interval, ..self }
    }

    /// The same job, its shards pinned to CPUs or not.
    pub fn with_pin(self, pin: bool) -> Self {
        Job { pin, ..self }
    }

    /// The same job with shard 0's source pausing for `pause` (see [`Job::pause`]) and
    /// the sources' idle timeout `idle_timeout`: how the idle timeout trades result
    /// latency against late (dropped) records.
    pub fn with_pause(self, pause: Duration, idle_timeout: Option<Duration>) -> Self {
        Job { pause, idle_timeout, ..self }
    }

    /// The pause of shard 0's source, as (start, end) from the schedule's epoch.
    pub fn pause_window(&self) -> Option<(Duration, Duration)> {
        let from = self.warmup + PAUSE_AFTER;
        (!self.pause.is_zero()).then(|| (from, from + self.pause))
    }

    /// The same job, its events scheduled before `warmup` not measured (their results
    /// still checked).
    pub fn with_warmup(self, warmup: Duration) -> Self {
        Job { warmup, ..self }
    }

    /// Whether event `i`'s latency counts: it is scheduled after the warm-up.
    #[inline]
    pub fn is_measured(&self, i: u64) -> bool {
        self.scheduled(i) >= self.warmup
    }

    /// Events scheduled within the warm-up (not measured).
    pub fn warmup_events(&self) -> u64 {
        let ps = self.warmup.as_nanos().saturating_mul(1000);
        u64::try_from(ps.div_ceil(u128::from(self.ps_per_event))).unwrap_or(u64::MAX).min(self.events)
    }

    /// The same job over `keys` distinct keys.
    ///
    /// # Errors
    ///
    /// Zero keys.
    pub fn with_keys(self, keys: u64) -> anyhow::Result<Self> {
        ensure!(keys > 0, "--keys must be positive");
        Ok(Job { keys, ..self })
    }

    /// The key of event `i`.
    #[inline]
    pub fn key(&self, i: u64) -> u64 {
        i % self.keys
    }

    /// The key of event `i` with the default [`KEYS`] keys, for the throughput path: a
    /// division by a constant (a multiply and a shift) in a selector that captures nothing.
    /// A selector that captured the job and branched on its key count measured 7-8% slower
    /// (`sluice-bench pipeline --shards 2`: 180-184 against 194-198 M events/s).
    #[inline]
    pub fn default_key(i: u64) -> u64 {
        i % KEYS
    }

    /// Event `i`'s event time, in milliseconds from the epoch.
    #[inline]
    pub fn time_ms(&self, i: u64) -> i64 {
        // Cannot overflow for i < events (checked in `new`); the division is by a constant.
        (i.wrapping_mul(self.ps_per_event) / PS_PER_MS) as i64
    }

    /// Event `i`'s scheduled send time, from the epoch.
    pub fn scheduled(&self, i: u64) -> Duration {
        Duration::from_nanos(i.saturating_mul(self.ps_per_event) / 1000)
    }

    /// The first event whose event time is at or after `ms` (may be `events`: none).
    pub fn first_event_at(&self, ms: i64) -> u64 {
        let ms = u128::try_from(ms).unwrap_or(0);
        let first = (ms * u128::from(PS_PER_MS)).div_ceil(u128::from(self.ps_per_event));
        u64::try_from(first).unwrap_or(u64::MAX).min(self.events)
    }

    /// The events of the window starting at `start_ms`, as a range of `i`.
    pub fn window_events(&self, start_ms: i64) -> std::ops::Range<u64> {
        self.first_event_at(start_ms)..self.first_event_at(start_ms.saturating_add(WINDOW_MS))
    }

    /// The start of the window holding event time `ms`.
    #[inline]
    pub fn window_start(ms: i64) -> i64 {
        ms - ms.rem_euclid(WINDOW_MS)
    }

    /// The count the window starting at `start_ms` must report for `key`.
    pub fn expected_count(&self, key: u64, start_ms: i64) -> u64 {
        // Events below n with key `key`.
        let below = |n: u64| if n > key { (n - 1 - key) / self.keys + 1 } else { 0 };
        let range = self.window_events(start_ms);
        below(range.end) - below(range.start)
    }

    /// How many (key, window) results the job produces: every key with at least one event
    /// in a window, in every window.
    pub fn expected_results(&self) -> u64 {
        if self.events == 0 {
            return 0;
        }
        let last = Self::window_start(self.time_ms(self.events - 1));
        (0..=last / WINDOW_MS).map(|w| (self.window_events(w * WINDOW_MS).count() as u64).min(self.keys)).sum()
    }

    /// The window's last event (the one scheduled last), if it has any: its result cannot be
    /// complete before this event was sent, so the latency mode measures from its schedule.
    pub fn last_event_of_window(&self, start_ms: i64) -> Option<u64> {
        let range = self.window_events(start_ms);
        (!range.is_empty()).then(|| range.end - 1)
    }
}

/// What a counting sink saw, checked against the job at the end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Window results received.
    pub results: u64,
    /// The sum of their counts: every event is counted once, so this must equal `events`.
    pub sum: u64,
    /// Results whose count differs from [`Job::expected_count`].
    pub wrong: u64,
}

impl Tally {
    /// Counts one result: `key`'s count `count` in the window starting at `start_ms`.
    #[inline]
    pub fn add(&mut self, job: &Job, key: u64, start_ms: i64, count: u64) {
        self.results += 1;
        self.sum += count;
        self.wrong += u64::from(count != job.expected_count(key, start_ms));
    }

    /// Adds another sink's tally.
    pub fn merge(&mut self, other: &Tally) {
        self.results += other.results;
        self.sum += other.sum;
        self.wrong += other.wrong;
    }

    /// Fails unless every event was counted once, in the right window, under the right key.
    pub fn check(&self, job: &Job, what: &str) -> anyhow::Result<()> {
        ensure!(self.sum == job.events, "{what}: the results count {} events, expected {}", self.sum, job.events);
        let expected = job.expected_results();
        ensure!(self.results == expected, "{what}: {} results, expected {expected}", self.results);
        ensure!(self.wrong == 0, "{what}: {} of {} results have a wrong count", self.wrong, self.results);
        Ok(())
    }
}

/// One worker's share of a job's events in the throughput mode, batch by batch, as
/// [`Job::split`] divides them. The sluice side reads the engine's own sources
/// (`Generator`, `SharedGenerator`) instead; this is for the timely baseline.
#[derive(Debug)]
pub struct Share {
    next: u64,
    step: u64,
    end: u64,
    /// [`Split::OnDemand`]: the counter every worker claims runs from, and the job's end.
    claims: Option<(Arc<AtomicU64>, u64)>,
}

impl Share {
    /// Worker `index` of `peers`'s share of `job`; with [`Split::OnDemand`], `claims` is
    /// the counter (starting at 0) that every worker of the run shares.
    pub fn new(job: &Job, index: u64, peers: u64, claims: &Arc<AtomicU64>) -> Share {
        match job.split {
            Split::ByResidue => Share { next: index, step: peers.max(1), end: job.events, claims: None },
            Split::OnDemand => Share { next: 0, step: 1, end: 0, claims: Some((claims.clone(), job.events)) },
        }
    }

    /// Appends the next at most `max` (at least one) events to `out`: false once the share
    /// is done.
    pub fn fill(&mut self, out: &mut Vec<u64>, max: usize) -> bool {
        if self.next >= self.end {
            let Some((counter, events)) = &self.claims else { return false };
            let events = *events;
            let claimed = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |next| {
                (next < events).then(|| next.saturating_add(CLAIM_RUN).min(events))
            });
            let Ok(start) = claimed else { return false };
            (self.next, self.end) = (start, start.saturating_add(CLAIM_RUN).min(events));
        }
        let before = out.len();
        out.extend((self.next..self.end).step_by(self.step as usize).take(max.max(1)));
        self.next += self.step * (out.len() - before) as u64;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_throughput_schedule_is_one_event_per_microsecond() {
        let job = Job::new(2_500_000, None, 0, 1024).unwrap();
        assert_eq!((job.time_ms(0), job.time_ms(999), job.time_ms(1000), job.time_ms(1_999_999)), (0, 0, 1, 1999));
        assert_eq!(job.window_events(0), 0..1_000_000);
        assert_eq!(job.window_events(2000), 2_000_000..2_500_000);
        assert_eq!(job.expected_count(7, 0), 100);
        assert_eq!(job.expected_count(7, 2000), 50);
        assert_eq!(job.expected_results(), 3 * KEYS);
        assert_eq!(job.last_event_of_window(1000), Some(1_999_999));
        assert_eq!(job.last_event_of_window(3000), None);
        assert_eq!(job.scheduled(1500), Duration::from_micros(1500));
    }

    #[test]
    fn both_splits_give_every_event_to_one_worker_in_batches_of_at_most_max() {
        let events = 3 * CLAIM_RUN + 17;
        for split in [Split::ByResidue, Split::OnDemand] {
            let job = Job::new(events, None, 0, 1024).unwrap().with_split(split);
            let claims = Arc::new(AtomicU64::new(0));
            let mut shares: Vec<Share> = (0..3).map(|w| Share::new(&job, w, 3, &claims)).collect();
            let mut seen = Vec::new();
            let mut batch = Vec::new();
            // The workers take turns, one batch each, until all are done.
            while shares.iter_mut().fold(false, |any, share| {
                batch.clear();
                let more = share.fill(&mut batch, 1000);
                assert!(batch.len() <= 1000 && (!more || !batch.is_empty()), "{split:?}");
                seen.extend_from_slice(&batch);
                any | more
            }) {}
            seen.sort_unstable();
            assert_eq!(seen, (0..events).collect::<Vec<_>>(), "{split:?}");
        }
    }

    #[test]
    fn a_paced_schedule_puts_rate_events_in_each_second() {
        // 2500 per second: 400 000 000 ps apart, no rounding.
        let job = Job::new(6000, Some(2500), 0, 16).unwrap();
        assert_eq!(job.window_events(0), 0..2500);
        assert_eq!(job.window_events(2000), 5000..6000);
        assert_eq!((job.time_ms(2499), job.time_ms(2500)), (999, 1000));
        assert_eq!(job.scheduled(2500), Duration::from_secs(1));
        // 2500 + 2500 + 1000 events: every window has fewer events than keys.
        assert_eq!(job.expected_results(), 6000);
        let sum: u64 =
            (0..3).flat_map(|w| (0..KEYS).map(move |k| (k, w * 1000))).map(|(k, s)| job.expected_count(k, s)).sum();
        assert_eq!(sum, 6000);
    }

    #[test]
    fn a_tally_fails_on_a_missing_or_miscounted_event() {
        let job = Job::new(20_000, None, 0, 1024).unwrap();
        let mut tally = Tally::default();
        for key in 0..KEYS {
            tally.add(&job, key, 0, 2);
        }
        tally.check(&job, "all").unwrap();
        let mut short = tally;
        short.sum -= 1;
        assert!(short.check(&job, "short").is_err());
        let mut wrong = Tally::default();
        wrong.add(&job, 0, 0, 3);
        assert_eq!(wrong.wrong, 1);
    }

    #[test]
    fn fewer_keys_mean_fuller_results() {
        let job = Job::new(2_500_000, None, 0, 1024).unwrap().with_keys(7).unwrap();
        assert_eq!((job.key(6), job.key(7)), (6, 0));
        assert_eq!(job.expected_results(), 3 * 7);
        // 1 000 000 events in the first window over 7 keys: key 0 gets the extra one.
        assert_eq!((job.expected_count(0, 0), job.expected_count(6, 0)), (142_858, 142_857));
        assert!(job.with_keys(0).is_err());
    }

    #[test]
    fn the_warmup_is_the_start_of_the_schedule() {
        // 1000 events per second: the first 250 are in a 250 ms warm-up.
        let job = Job::new(2000, Some(1000), 0, 16).unwrap().with_warmup(Duration::from_millis(250));
        assert_eq!(job.warmup_events(), 250);
        assert!(!job.is_measured(249) && job.is_measured(250));
        assert_eq!(Job::new(2000, Some(1000), 0, 16).unwrap().warmup_events(), 0);
    }

    #[test]
    fn schedules_that_overflow_are_refused() {
        assert!(Job::new(u64::MAX / 2, Some(1), 0, 1).is_err());
        assert!(Job::new(10, Some(0), 0, 1).is_err());
        assert!(Job::new(10, None, 0, 0).is_err());
    }
}
