//! [`RunArgs`]: the one set of options every workload takes (`--shards`, `--rate` or
//! `--max`, `--duration`, `--warmup`, `--seed`, `--json`, `--hlog`, `--plot`,
//! `--find-max-rate --slo-p99-ms X`), and [`RunInfo`], how a run used them, which every
//! report carries in its JSON.
//!
//! Each workload decides what an option left out means (its own default shard count, open
//! or closed loop) and says so in its `--help`; an option a workload cannot honour is
//! refused with the reason, never silently ignored.

use std::{path::PathBuf, time::Duration};

use anyhow::ensure;
use clap::{Args, builder::RangedU64ValueParser};
use serde::Serialize;

use super::{Curve, LatencyRecorder, RateSearch, SearchOutputs, find_max_rate, write_percentile_plot};

/// The options every workload shares (flattened into each workload's arguments).
#[derive(Debug, Clone, Default, Args)]
pub struct RunArgs {
    /// Shards, each a glommio executor pinned to a CPU [default: per workload, see below]
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub shards: Option<usize>,
    /// Open loop: offer this many events (records) per second, each sent at its scheduled
    /// time whatever happened to the earlier ones, and measure latency from that schedule
    #[arg(long, value_name = "EVENTS_PER_SEC", conflicts_with = "max",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub rate: Option<u64>,
    /// Closed loop: send as fast as the system takes them and measure throughput
    #[arg(long)]
    pub max: bool,
    /// Seconds the measured phase runs (open loop: the schedule's length; closed loop: the
    /// generator stops when it elapses, instead of after a fixed count)
    #[arg(long, value_name = "SECONDS", value_parser = parse_positive_seconds)]
    pub duration: Option<f64>,
    /// Seconds of warm-up before measuring, whose latencies and counts are discarded (open
    /// loop: the first seconds of the schedule; closed loop: a separate run first)
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS", value_parser = parse_seconds)]
    pub warmup: f64,
    /// Seed of every random generator the workload uses; printed in the table and the
    /// JSON so a run can be replayed
    #[arg(long, default_value_t = 0, value_name = "SEED")]
    pub seed: u64,
    /// Also write the report as JSON to this file
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write the latencies as an HdrHistogram interval log (1 s intervals) to this file
    #[arg(long, value_name = "PATH")]
    pub hlog: Option<PathBuf>,
    /// Write the latency-by-percentile chart (SVG) to this file
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
    /// Ramp the offered rate (open loop) and report the highest whose p99 latency stays
    /// within --slo-p99-ms: doubles from --rate while it holds (at most --ramp-steps
    /// times), then halves the gap three times; each step runs --duration
    #[arg(long, conflicts_with = "max")]
    pub find_max_rate: bool,
    /// The p99 latency bound of --find-max-rate, milliseconds
    #[arg(long, default_value_t = 10.0, value_name = "MS", value_parser = parse_positive_ms)]
    pub slo_p99_ms: f64,
    /// The most doublings --find-max-rate tries before it stops ramping
    #[arg(long, default_value_t = 12, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub ramp_steps: usize,
    /// Serve the run's metrics (the engine's, the pipeline's) at http://ADDR/metrics while
    /// it goes on; printed as `metrics on ADDR` on stderr
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Serve a live page of the run at http://ADDR/ (a bare port: loopback) from its
    /// start: per second the
    /// throughput, the latency percentiles and the offered and achieved rates, and at the
    /// end the report and its percentile curve; printed as `live page on ...` on stderr
    #[arg(long, value_name = "ADDR", value_parser = crate::harness::live::parse_addr)]
    pub live: Option<std::net::SocketAddr>,
    /// Seconds the --live page stays served after the run ends, to look at its final
    /// state [default: 0]
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub live_linger: Option<f64>,
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() && v >= 0.0 { Ok(v) } else { Err("seconds must be 0 or more".into()) }
}

fn parse_positive_seconds(s: &str) -> Result<f64, String> {
    match parse_seconds(s)? {
        v if v > 0.0 => Ok(v),
        _ => Err("seconds must be positive".into()),
    }
}

fn parse_positive_ms(s: &str) -> Result<f64, String> {
    parse_positive_seconds(s).map_err(|_| "milliseconds must be positive".into())
}

impl RunArgs {
    /// `--shards`, or the workload's default.
    pub fn shards_or(&self, default: usize) -> usize {
        self.shards.unwrap_or(default)
    }

    /// `--warmup` as a duration.
    pub fn warmup(&self) -> Duration {
        Duration::from_secs_f64(self.warmup)
    }

    /// `--duration` as a duration, if given.
    pub fn duration(&self) -> Option<Duration> {
        self.duration.map(Duration::from_secs_f64)
    }

    /// Whether a latency output (`--plot`, `--hlog`) was asked for.
    pub fn wants_latency_files(&self) -> bool {
        self.plot.is_some() || self.hlog.is_some()
    }

    /// Fails with `why` if `--plot` or `--hlog` was given: for runs that measure no latency.
    ///
    /// # Errors
    ///
    /// Either flag given.
    /// Starts `--metrics-listen`'s endpoint, if asked (held for the run).
    ///
    /// # Errors
    ///
    /// The address cannot be bound.
    pub fn serve_metrics(&self) -> anyhow::Result<Option<sluice_engine::metrics::http::MetricsServer>> {
        super::metrics::serve(self.metrics_listen)
    }

    /// Refuses `--metrics-listen` for a workload with nothing to serve, saying `why`.
    ///
    /// # Errors
    ///
    /// `--metrics-listen` was given.
    pub fn refuse_metrics(&self, why: &str) -> anyhow::Result<()> {
        ensure!(self.metrics_listen.is_none(), "--metrics-listen is refused: {why}");
        Ok(())
    }

    /// `--live` and `--live-linger`, checked.
    ///
    /// # Errors
    ///
    /// `--live-linger` without `--live`.
    pub fn live(&self) -> anyhow::Result<Option<super::live::LiveOptions>> {
        super::live::options(self.live, self.live_linger)
    }

    /// Refuses `--live` (and `--live-linger`) for a workload with nothing to show per
    /// second, saying `why`.
    ///
    /// # Errors
    ///
    /// Either was given.
    pub fn refuse_live(&self, why: &str) -> anyhow::Result<()> {
        ensure!(self.live.is_none() && self.live_linger.is_none(), "--live is refused: {why}");
        Ok(())
    }

    pub fn refuse_latency_files(&self, why: &str) -> anyhow::Result<()> {
        ensure!(!self.wants_latency_files(), "--plot and --hlog need latencies, and {why}");
        Ok(())
    }

    /// Writes `--plot` (one curve) and `--hlog` for `latency`, if asked; returns its curve.
    ///
    /// # Errors
    ///
    /// A file that cannot be written, or `--hlog` for a recorder without intervals.
    pub fn write_latency(&self, latency: &LatencyRecorder, title: &str, label: &str) -> anyhow::Result<Curve> {
        let curve = latency.curve(label);
        if let Some(path) = &self.plot {
            write_percentile_plot(path, title, std::slice::from_ref(&curve))?;
        }
        if let Some(path) = &self.hlog {
            latency.write_hlog(path)?;
        }
        Ok(curve)
    }

    /// `--find-max-rate` with this run's options: from `--rate` (else `default_start`),
    /// within `--slo-p99-ms`, at most `--ramp-steps` doublings, writing `--plot` (titled
    /// `title`) and `--hlog`. See [`find_max_rate`].
    ///
    /// # Errors
    ///
    /// As [`find_max_rate`].
    pub fn find_max_rate(
        &self,
        default_start: u64,
        title: &str,
        unit: &str,
        step: impl FnMut(u64) -> anyhow::Result<(f64, LatencyRecorder)>,
    ) -> anyhow::Result<RateSearch> {
        let outputs = SearchOutputs { plot: self.plot.as_deref(), hlog: self.hlog.as_deref(), title };
        find_max_rate(self.rate.unwrap_or(default_start), self.slo_p99_ms, self.ramp_steps, outputs, unit, step)
    }

    /// How this run used the shared options, for its report.
    pub fn info(&self, duration: Option<f64>) -> RunInfo {
        RunInfo { seed: self.seed, duration, warmup: self.warmup }
    }
}

/// How a run used the shared options; flattened into every workload's JSON report.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RunInfo {
    /// `--seed`.
    pub seed: u64,
    /// Seconds the measured phase ran for (by `--duration` or derived from a count), if
    /// the run was bounded by time.
    pub duration: Option<f64>,
    /// `--warmup`, seconds discarded before measuring.
    pub warmup: f64,
}

impl RunInfo {
    /// `seed S, warmup W s`: for table titles.
    pub fn describe(&self) -> String {
        let mut s = format!("seed {}", self.seed);
        if let Some(d) = self.duration {
            s.push_str(&format!(", {d} s measured"));
        }
        if self.warmup > 0.0 {
            s.push_str(&format!(", {} s warm-up", self.warmup));
        }
        s
    }
}

/// Fills `buf` with bytes drawn from `seed` (splitmix64): the same seed, the same bytes.
/// For payloads, so `--seed` replays a run's data.
pub fn fill_seeded(seed: u64, buf: &mut [u8]) {
    let mut state = seed;
    for chunk in buf.chunks_mut(8) {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_bytes_replay_and_differ_by_seed() {
        let bytes = |seed, len| {
            let mut buf = vec![0u8; len];
            fill_seeded(seed, &mut buf);
            buf
        };
        assert_eq!(bytes(7, 100), bytes(7, 100));
        assert_ne!(bytes(7, 100), bytes(8, 100));
        // A shorter buffer is a prefix of a longer one.
        assert_eq!(bytes(7, 13)[..], bytes(7, 100)[..13]);
    }

    #[test]
    fn run_info_describes_what_was_used() {
        let args = RunArgs { seed: 4, warmup: 0.5, duration: Some(2.0), ..RunArgs::default() };
        let info = args.info(args.duration);
        assert_eq!(info, RunInfo { seed: 4, duration: Some(2.0), warmup: 0.5 });
        assert_eq!(info.describe(), "seed 4, 2 s measured, 0.5 s warm-up");
        assert_eq!(args.warmup(), Duration::from_millis(500));
        let json = serde_json::to_value(info).unwrap();
        assert_eq!(
            (json["seed"].as_u64(), json["duration"].as_f64(), json["warmup"].as_f64()),
            (Some(4), Some(2.0), Some(0.5))
        );
        assert!(args.refuse_latency_files("no").is_ok());
        let with_plot = RunArgs { plot: Some("x.svg".into()), ..RunArgs::default() };
        assert!(with_plot.refuse_latency_files("no latency here").unwrap_err().to_string().contains("no latency here"));
    }
}
