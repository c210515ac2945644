//! Library half of `sluice-bench`, sluice's load and latency harness.
//!
//! The binary (`src/main.rs`) only parses the command line and prints; everything it runs
//! lives here so integration tests can drive it too:
//!
//! - [`harness`]: measurement plumbing shared by every workload (latency histograms, the
//!   result table, JSON output, work directories, and running a closure on pinned glommio
//!   shards).
//! - [`baseline`]: the physical reference, a raw `io_uring` O_DIRECT sequential write that
//!   tells how close the log gets to the disk.
//! - [`workloads`]: one module per `sluice-bench <workload>` subcommand.
//! - [`nexmark`]: the Nexmark generator and queries, run by `sluice-bench nexmark`.
//! - [`report`]: `sluice-bench report`, several runs' JSON reports side by side.

pub mod baseline;
pub mod harness;
pub mod nexmark;
pub mod report;
pub mod workloads;
