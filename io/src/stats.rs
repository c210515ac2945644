//! What a log counts about itself, for the engine's metrics: plain cells written by the
//! executor that owns the log (a `Log` is `!Send`, so nothing else can touch them), read
//! by the same executor when a scrape asks its shard. No atomics, no locks.
//!
//! [`LatencyHistogram`] is the one latency histogram shape sluice exports: fixed bucket
//! bounds ([`LATENCY_BOUNDS_SECONDS`], 10 us to 10 s), so histograms of different shards
//! and partitions add up bucket by bucket.

use std::cell::Cell;
use std::time::Duration;

/// The upper bounds of the latency buckets, in seconds (Prometheus' `le`); a last
/// bucket, `+Inf`, holds the rest.
pub const LATENCY_BOUNDS_SECONDS: [f64; 19] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets of a latency histogram, the `+Inf` one included.
pub const LATENCY_BUCKETS: usize = LATENCY_BOUNDS_SECONDS.len() + 1;

/// The bucket bounds in nanoseconds, for recording without floating point.
const BOUNDS_NS: [u64; LATENCY_BOUNDS_SECONDS.len()] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// The bucket a duration of `ns` nanoseconds falls in.
#[must_use]
pub fn latency_bucket(ns: u64) -> usize {
    BOUNDS_NS.partition_point(|&bound| bound < ns)
}

/// A latency histogram's counts at one moment: per bucket (not cumulative) and the sum.
/// Adds up with others of the same shape.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyCounts {
    /// Observations per bucket, `+Inf` last.
    pub buckets: [u64; LATENCY_BUCKETS],
    /// The sum of every observation, in nanoseconds.
    pub sum_ns: u64,
}

impl LatencyCounts {
    /// Observations in all.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &LatencyCounts) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
        self.sum_ns += other.sum_ns;
    }

    /// Records one observation.
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[latency_bucket(ns)] += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }
}

/// A latency histogram in plain cells, for one executor.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    counts: Cell<LatencyCounts>,
}

impl LatencyHistogram {
    /// Records one observation.
    pub fn record(&self, d: Duration) {
        let mut c = self.counts.get();
        c.record(d);
        self.counts.set(c);
    }

    /// The counts so far.
    #[must_use]
    pub fn counts(&self) -> LatencyCounts {
        self.counts.get()
    }
}

/// What a log has counted since it was opened.
#[derive(Debug, Default)]
pub struct LogStats {
    pub(crate) records_appended: Cell<u64>,
    pub(crate) bytes_appended: Cell<u64>,
    pub(crate) segment_rolls: Cell<u64>,
    pub(crate) fsync: LatencyHistogram,
}

/// [`LogStats`] at one moment, plus the log's sizes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStatsSnapshot {
    /// Records appended (markers included).
    pub records_appended: u64,
    /// Bytes appended, as stored (headers and padding included).
    pub bytes_appended: u64,
    /// Active segments closed and replaced by a new one (by size, age or on demand).
    pub segment_rolls: u64,
    /// fdatasyncs of the active segment for group commit and their durations.
    pub fsync: LatencyCounts,
}

impl LogStats {
    pub(crate) fn appended(&self, records: usize, bytes: usize) {
        self.records_appended.set(self.records_appended.get() + records as u64);
        self.bytes_appended.set(self.bytes_appended.get() + bytes as u64);
    }

    pub(crate) fn rolled(&self) {
        self.segment_rolls.set(self.segment_rolls.get() + 1);
    }

    /// The counts so far.
    #[must_use]
    pub fn snapshot(&self) -> LogStatsSnapshot {
        LogStatsSnapshot {
            records_appended: self.records_appended.get(),
            bytes_appended: self.bytes_appended.get(),
            segment_rolls: self.segment_rolls.get(),
            fsync: self.fsync.counts(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_land_in_the_bucket_whose_bound_holds_them() {
        assert_eq!(latency_bucket(0), 0);
        assert_eq!(latency_bucket(10_000), 0, "a bound is inclusive (le)");
        assert_eq!(latency_bucket(10_001), 1);
        assert_eq!(latency_bucket(1_000_000), 6);
        assert_eq!(latency_bucket(10_000_000_000), LATENCY_BUCKETS - 2);
        assert_eq!(latency_bucket(u64::MAX), LATENCY_BUCKETS - 1, "past the last bound: +Inf");
        for (i, (&s, &ns)) in LATENCY_BOUNDS_SECONDS.iter().zip(BOUNDS_NS.iter()).enumerate() {
            assert_eq!((s * 1e9).round() as u64, ns, "bound {i}");
        }
    }

    #[test]
    fn histograms_count_sum_and_add_up() {
        let h = LatencyHistogram::default();
        h.record(Duration::from_micros(5));
        h.record(Duration::from_millis(3));
        h.record(Duration::from_secs(60));
        let c = h.counts();
        assert_eq!(c.count(), 3);
        assert_eq!(c.buckets[0], 1);
        assert_eq!(c.buckets[latency_bucket(3_000_000)], 1);
        assert_eq!(c.buckets[LATENCY_BUCKETS - 1], 1);
        assert_eq!(c.sum_ns, 5_000 + 3_000_000 + 60_000_000_000);
        let mut total = c;
        total.add(&c);
        assert_eq!(total.count(), 6);
        assert_eq!(total.sum_ns, 2 * c.sum_ns);
    }
}
