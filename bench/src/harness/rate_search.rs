//! `--find-max-rate --slo-p99-ms X`, for every workload with an open-loop mode: ramps the
//! offered rate and bisects to the highest rate whose p99 latency stays within the bound
//! and which the system keeps up with.
//!
//! The search knows nothing of the workload: it calls a closure `rate -> (achieved rate,
//! latencies)` for each step, so every workload ramps the same way and reports the same
//! JSON fields (`slo_p99_ms`, `rate_curve`, `max_rate_within_slo`).

use anyhow::ensure;
use serde::Serialize;

use super::{Curve, LatencyRecorder, LatencySummary, write_percentile_plot};

/// A step keeps up with its offered rate if it achieves at least this share of it.
pub const KEEP_UP_SHARE: f64 = 0.9;

/// Bisection steps after the first failing rate.
const BISECTIONS: usize = 3;

/// One step of `--find-max-rate`.
#[derive(Debug, Clone, Serialize)]
pub struct RateStep {
    /// Offered events per second.
    pub rate: u64,
    /// Events per second achieved.
    pub achieved: f64,
    /// Latency at this rate.
    pub latency_us: LatencySummary,
    /// Whether p99 was within the bound and the rate was kept up with.
    pub within_slo: bool,
}

/// What `--find-max-rate` found; flattened into a workload's JSON report (empty and
/// `null` when the search did not run).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RateSearch {
    /// `--slo-p99-ms`, when the search ran.
    pub slo_p99_ms: Option<f64>,
    /// Every step, in the order run.
    pub rate_curve: Vec<RateStep>,
    /// The highest offered rate within the bound, if any step was.
    pub max_rate_within_slo: Option<u64>,
}

impl RateSearch {
    /// The best achieved rate among the steps within the bound (0 if none).
    pub fn best_achieved(&self) -> f64 {
        self.rate_curve.iter().filter(|s| s.within_slo).map(|s| s.achieved).fold(0.0, f64::max)
    }

    /// Of `steps`, one per rate run in order (`rate` tells each one's offered rate), the
    /// index of the step a report details: the highest rate within the bound, else the
    /// last one run.
    pub fn kept_step<T>(&self, steps: &[T], rate: impl Fn(&T) -> u64) -> usize {
        steps.iter().rposition(|s| Some(rate(s)) == self.max_rate_within_slo).unwrap_or(steps.len().saturating_sub(1))
    }

    /// Adds one table row per step and the result, when the search ran.
    pub fn rows(&self, table: &mut super::Table, unit: &str) {
        let Some(slo) = self.slo_p99_ms else { return };
        for s in &self.rate_curve {
            table.row(
                format!("offered {} {unit}", s.rate),
                format!("p99 {} us, achieved {:.0}", s.latency_us.p99, s.achieved),
                if s.within_slo { "within" } else { "over" },
            );
        }
        match self.max_rate_within_slo {
            Some(r) => table.row(format!("highest rate with p99 <= {slo} ms"), r, unit),
            None => table.row(format!("highest rate with p99 <= {slo} ms"), "none of those tried", ""),
        };
    }
}

/// Where `--find-max-rate` writes what it measured: every step's curve as one chart
/// (`--plot`, titled `title`), and the interval log of the step a report details
/// (`--hlog`, see [`RateSearch::kept_step`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct SearchOutputs<'a> {
    /// `--plot`.
    pub plot: Option<&'a std::path::Path>,
    /// `--hlog`.
    pub hlog: Option<&'a std::path::Path>,
    /// The chart's title.
    pub title: &'a str,
}

/// Ramps from `start`: doubles the rate while a step is within `slo_p99_ms` (at most
/// `ramp_steps` steps), then halves the gap between the last good and the first bad rate
/// three times. `step(rate)` runs the workload at `rate` and returns the rate it achieved
/// and its latencies. Writes `outputs`, if asked ([`super::RunArgs::find_max_rate`] passes
/// a workload's shared options).
///
/// # Errors
///
/// A non-positive bound or start, a file that cannot be written, or the first error of a
/// step.
pub fn find_max_rate(
    start: u64,
    slo_p99_ms: f64,
    ramp_steps: usize,
    outputs: SearchOutputs<'_>,
    unit: &str,
    mut step: impl FnMut(u64) -> anyhow::Result<(f64, LatencyRecorder)>,
) -> anyhow::Result<RateSearch> {
    ensure!(slo_p99_ms.is_finite() && slo_p99_ms > 0.0, "--slo-p99-ms must be positive");
    ensure!(start > 0, "--find-max-rate needs a positive starting --rate");
    let slo_us = (slo_p99_ms * 1000.0) as u64;
    let mut search = RateSearch { slo_p99_ms: Some(slo_p99_ms), ..RateSearch::default() };
    let mut curves: Vec<Curve> = Vec::new();
    let mut latencies: Vec<(u64, LatencyRecorder)> = Vec::new();
    let mut run = |rate: u64, search: &mut RateSearch| -> anyhow::Result<bool> {
        super::live::offer(Some(rate));
        let (achieved, latency) = step(rate)?;
        let latency_us = latency.summary();
        let within_slo = latency_us.count > 0 && latency_us.p99 <= slo_us && achieved >= KEEP_UP_SHARE * rate as f64;
        curves.push(latency.curve(&format!("{rate} {unit}")));
        if outputs.hlog.is_some() {
            latencies.push((rate, latency));
        }
        search.rate_curve.push(RateStep { rate, achieved, latency_us, within_slo });
        Ok(within_slo)
    };
    let (mut good, mut bad) = (None, None);
    let mut rate = start;
    for _ in 0..ramp_steps.max(1) {
        if run(rate, &mut search)? {
            good = Some(rate);
            rate = rate.saturating_mul(2);
        } else {
            bad = Some(rate);
            break;
        }
    }
    if let Some(mut hi) = bad {
        let mut lo = good.unwrap_or(0);
        for _ in 0..BISECTIONS {
            let mid = lo + (hi - lo) / 2;
            if mid == lo || mid == 0 {
                break;
            }
            if run(mid, &mut search)? {
                lo = mid;
                good = Some(mid);
            } else {
                hi = mid;
            }
        }
    }
    search.max_rate_within_slo = good;
    if let Some(path) = outputs.plot {
        write_percentile_plot(path, outputs.title, &curves)?;
    }
    if let Some(path) = outputs.hlog {
        latencies[search.kept_step(&latencies, |s| s.0)].1.write_hlog(path)?;
    }
    Ok(search)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A fake system: p99 grows with the rate, and it keeps up to 1000/s.
    fn fake(rate: u64) -> anyhow::Result<(f64, LatencyRecorder)> {
        let mut l = LatencyRecorder::new();
        l.record(Duration::from_micros(rate));
        Ok((rate.min(1000) as f64, l))
    }

    #[test]
    fn the_search_doubles_then_bisects_to_the_highest_good_rate() {
        // Bound 300 us: 100 and 200 pass, 400 fails, then 300 passes, 350 fails, 325 fails.
        let s = find_max_rate(100, 0.3, 12, SearchOutputs::default(), "events/s", fake).unwrap();
        let rates: Vec<u64> = s.rate_curve.iter().map(|s| s.rate).collect();
        assert_eq!(rates, [100, 200, 400, 300, 350, 325]);
        assert_eq!(s.max_rate_within_slo, Some(300));
        assert_eq!(s.best_achieved(), 300.0);
    }

    #[test]
    fn a_rate_not_kept_up_with_is_over_and_the_ramp_is_bounded() {
        // Generous bound: only keeping up stops the ramp (at 1600 > 1000 achieved).
        let s = find_max_rate(100, 1e6, 12, SearchOutputs::default(), "events/s", fake).unwrap();
        assert_eq!(s.rate_curve[4].rate, 1600);
        assert!(!s.rate_curve[4].within_slo);
        let bounded = find_max_rate(100, 1e6, 2, SearchOutputs::default(), "events/s", fake).unwrap();
        assert_eq!(bounded.rate_curve.len(), 2);
        assert_eq!(bounded.max_rate_within_slo, Some(200));
        assert!(find_max_rate(100, 0.0, 2, SearchOutputs::default(), "events/s", fake).is_err());
        assert!(find_max_rate(0, 1.0, 2, SearchOutputs::default(), "events/s", fake).is_err());
    }
}
