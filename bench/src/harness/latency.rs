//! Latency recording: an HDR histogram in microseconds and its percentile summary.

use std::{
    path::Path,
    time::{Duration, Instant, SystemTime},
};

use hdrhistogram::Histogram;
use serde::Serialize;

/// Significant decimal digits kept by the histogram: 3 means values are exact to 0.1%.
const SIGNIFICANT_DIGITS: u8 = 3;

/// Records operation latencies in microseconds.
///
/// Wraps an auto-resizing `hdrhistogram::Histogram<u64>` with 3 significant digits, so any
/// duration can be recorded; durations under 1 us count as 0 and values too large to
/// track saturate. Recorders from several shards combine with [`merge`](Self::merge).
#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    histogram: Histogram<u64>,
    intervals: Option<Intervals>,
}

/// The same values again, one histogram per interval since a shared epoch (for `--hlog`).
#[derive(Debug, Clone)]
struct Intervals {
    epoch: Instant,
    wall: SystemTime,
    length: Duration,
    histograms: Vec<Histogram<u64>>,
    /// Intervals before this one are closed and were handed to the live page (if any).
    closed: usize,
}

/// Percentiles of the recorded latencies, in microseconds. All zero when nothing was recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LatencySummary {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest recorded value.
    pub max: u64,
    /// Number of recorded values.
    pub count: u64,
}

impl LatencyRecorder {
    /// An empty recorder.
    pub fn new() -> Self {
        let histogram = Histogram::new(SIGNIFICANT_DIGITS).expect("3 significant digits is within 0..=5");
        Self { histogram, intervals: None }
    }

    /// A recorder that also keeps one histogram per `length` of time since `epoch`, for an
    /// interval log; recorders to be merged must share the epoch.
    pub fn with_intervals(epoch: Instant, length: Duration) -> Self {
        let wall = SystemTime::now().checked_sub(epoch.elapsed()).unwrap_or_else(SystemTime::now);
        let length = length.max(Duration::from_millis(1));
        Self { intervals: Some(Intervals { epoch, wall, length, histograms: Vec::new(), closed: 0 }), ..Self::new() }
    }

    /// Records one operation that took `latency` and ended at `now` (its interval).
    pub fn record_at(&mut self, now: Instant, latency: Duration) {
        self.record(latency);
        if let Some(iv) = &mut self.intervals {
            let i = (now.saturating_duration_since(iv.epoch).as_nanos() / iv.length.as_nanos()) as usize;
            while iv.histograms.len() <= i {
                iv.histograms.push(Histogram::new_from(&self.histogram));
            }
            if i > iv.closed {
                // The intervals before this one are over: the live page (`--live`) gets them.
                if super::live::is_active() {
                    iv.histograms[iv.closed..i].iter().for_each(super::live::interval);
                }
                iv.closed = i;
            }
            let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
            if iv.histograms[i].record(micros).is_err() {
                iv.histograms[i].saturating_record(micros);
            }
        }
    }

    /// Writes the interval log (`with_intervals` recorders only).
    ///
    /// # Errors
    ///
    /// A recorder without intervals, or a file that cannot be written.
    pub fn write_hlog(&self, path: &Path) -> anyhow::Result<()> {
        let iv = self.intervals.as_ref().ok_or_else(|| anyhow::anyhow!("this run did not keep latency intervals"))?;
        super::hlog::write_interval_log(path, iv.wall, iv.length, &iv.histograms)
    }

    /// Records one operation that took `latency`.
    pub fn record(&mut self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        // `record` grows the histogram as needed (`saturating_record` would clamp to the
        // current range instead); it only fails if growing is impossible.
        if self.histogram.record(micros).is_err() {
            self.histogram.saturating_record(micros);
        }
    }

    /// Adds every value recorded by `other`.
    pub fn merge(&mut self, other: &Self) {
        self.histogram.add(&other.histogram).expect("auto-resizing histograms with equal precision always add");
        if let (Some(mine), Some(theirs)) = (&mut self.intervals, &other.intervals) {
            for (i, h) in theirs.histograms.iter().enumerate() {
                if mine.histograms.len() <= i {
                    mine.histograms.push(Histogram::new_from(h));
                }
                mine.histograms[i].add(h).expect("auto-resizing histograms with equal precision always add");
            }
        }
    }

    /// The values as text (the histogram, V2-serialized, in hex), for another process to
    /// [`merge_hex`](Self::merge_hex) (`sluice-bench pipeline --processes`).
    ///
    /// # Errors
    ///
    /// A histogram the serializer refuses.
    pub fn to_hex(&self) -> anyhow::Result<String> {
        use hdrhistogram::serialization::Serializer as _;
        let mut bytes = Vec::new();
        hdrhistogram::serialization::V2Serializer::new()
            .serialize(&self.histogram, &mut bytes)
            .map_err(|e| anyhow::anyhow!("serializing a latency histogram: {e:?}"))?;
        Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// Adds every value of a histogram [`to_hex`](Self::to_hex) wrote.
    ///
    /// # Errors
    ///
    /// Text that is not such a histogram.
    pub fn merge_hex(&mut self, hex: &str) -> anyhow::Result<()> {
        anyhow::ensure!(hex.len().is_multiple_of(2) && hex.is_ascii(), "a latency histogram's hex has an odd length");
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|e| anyhow::anyhow!("a latency histogram's hex: {e}"))?;
        let theirs: Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
            .deserialize(&mut std::io::Cursor::new(bytes))
            .map_err(|e| anyhow::anyhow!("deserializing a latency histogram: {e:?}"))?;
        self.histogram.add(&theirs).map_err(|e| anyhow::anyhow!("adding a latency histogram: {e:?}"))
    }

    /// Number of recorded values.
    pub fn len(&self) -> u64 {
        self.histogram.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.histogram.is_empty()
    }

    /// The distribution as a curve for [`write_percentile_plot`](super::write_percentile_plot).
    pub fn curve(&self, label: &str) -> super::Curve {
        super::curve_of(label, &self.histogram)
    }

    /// The underlying histogram (microseconds).
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.histogram
    }

    /// The percentiles recorded so far.
    pub fn summary(&self) -> LatencySummary {
        let h = &self.histogram;
        LatencySummary {
            p50: h.value_at_quantile(0.50),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            count: h.len(),
        }
    }
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}
