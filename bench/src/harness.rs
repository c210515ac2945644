//! Measurement plumbing shared by every workload.
//!
//! Each concern is its own small module, re-exported here:
//!
//! - [`LatencyRecorder`] / [`LatencySummary`] (`latency`): per-operation latency histograms.
//! - [`Curve`], [`write_percentile_plot`] (`plot`): latency-by-percentile SVG charts.
//! - [`write_interval_log`] (`hlog`): HdrHistogram interval logs.
//! - [`Progress`] (`progress`): the progress line of long runs (silent off a terminal).
//! - [`Table`] (`table`): the aligned `name value unit` result table printed to stdout.
//! - [`write_json`] (`json`): the machine-readable report behind `--json PATH`.
//! - [`WorkDir`] (`workdir`): the directory a run writes into, temporary unless kept.
//! - [`run_on_shards`] / [`ShardConfig`] (`shards`): one pinned glommio executor per shard,
//!   with io_uring settings that fit the locked-memory limit (`memlock`).
//! - [`RunArgs`] / [`RunInfo`] (`run_args`): the options every workload shares, and how a
//!   run used them.
//! - [`find_max_rate`] / [`RateSearch`] (`rate_search`): `--find-max-rate`, the ramp to the
//!   highest offered rate within a p99 bound, for any open-loop workload.
//! - [`TimeBound`] (`time_bound`): a source wrapper that ends its stream when a duration
//!   has elapsed, for closed-loop runs bounded by `--duration`.
//! - [`RunDry`] (`run_dry`): a source wrapper that notes when its source ran dry, for
//!   how long a run's first shard to finish waited for its last ([`end_spread`]).
//! - [`live`]: `--live ADDR`, the page that shows a run per second while it goes on.
//! - [`WakeProbe`] (`wake`): how late a sleeping thread wakes beside a run, the machine's
//!   floor under any latency the run reports.

mod hlog;
mod json;
mod latency;
pub mod live;
mod memlock;
pub mod metrics;
mod plot;
mod progress;
mod rate_search;
mod run_args;
mod run_dry;
mod scaling;
mod shards;
mod table;
mod time_bound;
mod wake;
mod workdir;

pub use hlog::write_interval_log;
pub use json::{serialize_display, write_json};
pub use latency::{LatencyRecorder, LatencySummary};
pub use plot::{Curve, axis_percentile, curve_of, percentile_axis, write_percentile_plot};
pub use progress::{Progress, progress_text};
pub use rate_search::{KEEP_UP_SHARE, RateSearch, RateStep, SearchOutputs, find_max_rate};
pub use run_args::{RunArgs, RunInfo, fill_seeded};
pub use run_dry::{RunDry, end_spread};
pub use scaling::Scaling;
pub use shards::{ShardConfig, run_on_shards, run_on_shards_with};
pub use table::Table;
pub use time_bound::TimeBound;
pub use wake::{WAKE_ROWS, WAKE_SLEEP, WakeProbe};
pub use workdir::WorkDir;

/// The median of `values` (the mean of the middle two for an even count); 0 for none.
#[must_use]
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
