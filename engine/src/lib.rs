//! # sluice-engine
//!
//! The engine half of sluice: shards, rings, topics, consumer groups and dataflow build
//! here on top of `sluice-io`'s partition log. So far it holds the validation of names
//! that arrive from outside (topics, groups, producer ids), which every later piece that
//! turns a name into a path relies on.

#![forbid(unsafe_code)]

pub mod names;

pub use names::{NameError, validate_name};
