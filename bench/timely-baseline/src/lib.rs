//! The windowed keyed count of `sluice-bench pipeline`, defined once ([`job`]), and the
//! same job written with the `timely` dataflow crate ([`timely_job`]), the baseline the
//! bench runs beside sluice.
//!
//! The baseline lives in a crate of its own, which depends on nothing of sluice's, so its
//! compiled code is the same whatever changes in the engine or the bench. When it was a
//! module of the bench crate, timely's generic code was instantiated again with every
//! change to the engine, and the same timely source ran at 112 M to 137 M events/s at two
//! workers depending on the build (tuning.md, "The windowed count").

pub mod job;
pub mod timely_job;
