//! Nexmark on sluice's processor: the event generator, as a sharded [`Source`], and the
//! benchmark's queries written with the public pipeline API.
//!
//! - [`model`]: people, auctions and bids.
//! - [`generator`]: [`NexmarkGenerator`], a port of the Beam/Flink suites' generator (the
//!   `nexmark` crate on crates.io was not used: its last release is from early 2023, it
//!   allocates every string field, and its variable-rate timestamps have a bug). Each event
//!   is a pure function of its number and the seed, so shards make disjoint slices.
//! - [`source`]: [`NexmarkSource`], one shard's slice, unpaced or on the wall clock.
//! - [`queries`]: the queries, one module each (`queries/q5.rs` is q5), the parameters
//!   they share ([`QueryParams`]), and [`Query::ALL`], the table listing them.
//! - [`query`]: [`Query`], what the harness knows about a query: its name for the command
//!   line and reports, its `--help` line, when its results can first exist, the event time
//!   one result spans, its option check, and [`Query::build`], which attaches it to an
//!   event stream and its results to a [`ResultSink`].
//! - [`sink`]: [`ResultSink`], which counts a query's results and measures their latency
//!   from the schedule, for `sluice-bench nexmark`.
//! - `data`: the checkpoint encoding of the generator's fixed strings and of [`Bid`].
//!
//! [`Source`]: sluice_engine::dataflow::Source

mod data;
pub mod generator;
pub mod model;
pub mod queries;
pub mod query;
pub mod sink;
pub mod source;

pub use generator::{ConfigError, EventKind, NexmarkConfig, NexmarkGenerator};
pub use model::{Auction, Bid, Event, Person};
pub use queries::QueryParams;
pub use query::Query;
pub use sink::{ResultSink, SinkEnd};
pub use source::NexmarkSource;

pub use generator::{FIRST_AUCTION_ID, FIRST_CATEGORY_ID, FIRST_PERSON_ID};
