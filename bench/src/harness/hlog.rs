//! HdrHistogram interval logs (`--hlog PATH`): the latency histogram of each interval of a
//! run, in the format HdrHistogram's tools read (`HistogramLogProcessor`, the plotter):
//! a header, then one line per interval with its start, length, maximum and the
//! compressed, base64 histogram. [`LatencyRecorder`](super::LatencyRecorder) keeps the
//! intervals when made with `with_intervals`.

use std::{io::Write, path::Path, time::Duration, time::SystemTime};

use anyhow::{Context, Result};
use hdrhistogram::{
    Histogram,
    serialization::{V2DeflateSerializer, interval_log::IntervalLogWriterBuilder},
};

/// Writes `intervals` (each `length` long, the first starting at `start`) to `path`.
///
/// # Errors
///
/// The file cannot be written, or a histogram cannot be serialized.
pub fn write_interval_log(
    path: &Path,
    start: SystemTime,
    length: Duration,
    intervals: &[Histogram<u64>],
) -> Result<()> {
    let mut out = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    {
        let mut writer = IntervalLogWriterBuilder::new()
            .add_comment("sluice-bench latency, microseconds")
            .with_start_time(start)
            .with_base_time(start)
            .with_max_value_divisor(1.0)
            .begin_log_with(&mut out, &mut serializer)
            .context("writing the interval log header")?;
        for (i, histogram) in intervals.iter().enumerate() {
            writer
                .write_histogram(histogram, length * i as u32, length, None)
                .map_err(|e| anyhow::anyhow!("{e:?}"))
                .context("writing an interval")?;
        }
    }
    let mut file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    file.write_all(&out).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    use crate::harness::LatencyRecorder;

    #[test]
    fn intervals_are_written_in_the_log_format() {
        let epoch = Instant::now();
        let mut a = LatencyRecorder::with_intervals(epoch, Duration::from_millis(100));
        let mut b = LatencyRecorder::with_intervals(epoch, Duration::from_millis(100));
        for i in 0..300u64 {
            let r = if i % 2 == 0 { &mut a } else { &mut b };
            r.record_at(epoch + Duration::from_millis(i), Duration::from_micros(i + 1));
        }
        a.merge(&b);
        let dir = std::env::temp_dir().join(format!("sluice-hlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.hlog");
        a.write_hlog(&path).unwrap();
        let text = std::fs::read(&path).unwrap();
        let mut maxes = Vec::new();
        for entry in IntervalLogIterator::new(&text) {
            if let Ok(LogEntry::Interval(h)) = entry {
                assert!((h.duration().as_secs_f64() - 0.1).abs() < 1e-6, "{:?}", h.duration());
                assert!(!h.encoded_histogram().is_empty());
                maxes.push(h.max());
            }
        }
        // Values 1-100, 101-200 and 201-300, from both recorders merged.
        assert_eq!(maxes.len(), 3, "{maxes:?}");
        assert!((maxes[2] - 300.0).abs() < 1.0, "{maxes:?}");
        assert_eq!(a.len(), 300);
        std::fs::remove_dir_all(&dir).unwrap();
        let plain = LatencyRecorder::new();
        assert!(plain.write_hlog(&dir.join("x.hlog")).is_err(), "a recorder without intervals has no log");
    }

    use super::*;
}
