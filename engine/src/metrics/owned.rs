//! Cells that one thread writes and a scrape reads from another: for executors a scrape
//! cannot send a request to (the Kafka listener's).
//!
//! Only the owner writes, so an update is a Relaxed load and a Relaxed store, not a
//! read-modify-write: no locked instruction, no contention, and the cache line stays in
//! the owner's core except when a scrape (once a second or so) reads it. A scrape may see
//! a histogram's buckets and sum from slightly different moments; each value on its own is
//! one the owner wrote.
//!
//! Contract: an [`OwnedCounter`] or [`OwnedHistogram`] is written by one thread only
//! (the executor that made it); two writers would lose updates.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sluice_io::LatencyCounts;
use sluice_io::stats::{LATENCY_BUCKETS, latency_bucket};

/// A count its owner adds to.
#[derive(Debug, Default)]
pub struct OwnedCounter(AtomicU64);

impl OwnedCounter {
    /// Adds `n` (owner only).
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// Subtracts `n` (owner only), for a gauge such as open connections.
    #[inline]
    pub fn sub(&self, n: u64) {
        self.0.store(self.0.load(Ordering::Relaxed).wrapping_sub(n), Ordering::Relaxed);
    }

    /// The value now.
    #[must_use]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value its owner sets (a watermark, a state).
#[derive(Debug, Default)]
pub struct OwnedGauge(std::sync::atomic::AtomicI64);

impl OwnedGauge {
    /// Sets the value (owner only).
    #[inline]
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }

    /// The value now.
    #[must_use]
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A latency histogram its owner records into.
#[derive(Debug, Default)]
pub struct OwnedHistogram {
    buckets: [OwnedCounter; LATENCY_BUCKETS],
    sum_ns: OwnedCounter,
}

impl OwnedHistogram {
    /// Records one observation (owner only).
    #[inline]
    pub fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[latency_bucket(ns)].add(1);
        self.sum_ns.add(ns);
    }

    /// The counts now.
    #[must_use]
    pub fn counts(&self) -> LatencyCounts {
        let mut c = LatencyCounts::default();
        for (out, b) in c.buckets.iter_mut().zip(self.buckets.iter()) {
            *out = b.get();
        }
        c.sum_ns = self.sum_ns.get();
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_reader_on_another_thread_sees_what_the_owner_wrote() {
        let h = Arc::new(OwnedHistogram::default());
        let c = Arc::new(OwnedCounter::default());
        let (h2, c2) = (h.clone(), c.clone());
        std::thread::spawn(move || {
            for _ in 0..1000 {
                h2.record(Duration::from_micros(40));
                c2.add(2);
            }
            c2.sub(1);
        })
        .join()
        .unwrap();
        assert_eq!(c.get(), 1999);
        let counts = h.counts();
        assert_eq!(counts.count(), 1000);
        assert_eq!(counts.buckets[2], 1000, "40 us is in the 50 us bucket");
        assert_eq!(counts.sum_ns, 40_000 * 1000);
    }
}
