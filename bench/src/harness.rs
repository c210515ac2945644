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

mod hlog;
mod json;
mod latency;
mod memlock;
mod plot;
mod progress;
mod shards;
mod table;
mod workdir;

pub use hlog::write_interval_log;
pub use json::{serialize_display, write_json};
pub use latency::{LatencyRecorder, LatencySummary};
pub use plot::{Curve, axis_percentile, curve_of, percentile_axis, write_percentile_plot};
pub use progress::{Progress, progress_text};
pub use shards::{ShardConfig, run_on_shards, run_on_shards_with};
pub use table::Table;
pub use workdir::WorkDir;
