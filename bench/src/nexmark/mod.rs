//! Nexmark on sluice's processor: the event generator, as a sharded [`Source`], and the
//! benchmark's queries written with the public pipeline API.
//!
//! - [`model`]: people, auctions and bids.
//! - [`generator`]: [`NexmarkGenerator`], a port of the Beam/Flink suites' generator (the
//!   `nexmark` crate on crates.io was not used: its last release is from early 2023, it
//!   allocates every string field, and its variable-rate timestamps have a bug). Each event
//!   is a pure function of its number and the seed, so shards make disjoint slices.
//! - [`source`]: [`NexmarkSource`], one shard's slice, unpaced or on the wall clock.
//! - [`queries`] (q0-q5, q7, q8), [`more_queries`] (q11, q14, q17, q21, q22) and
//!   [`extra_queries`] (q6, q9, q15, q16, q20).
//!
//! [`Query`] names them for the command line, and [`build`] attaches one to an event stream
//! and hands its results to a [`ResultSink`].
//!
//! [`Source`]: sluice_engine::dataflow::Source

mod data;
pub mod extra_queries;
pub mod generator;
pub mod model;
pub mod more_queries;
pub mod queries;
pub mod source;

use clap::ValueEnum;
use serde::Serialize;
use sluice_engine::dataflow::Stream;

pub use generator::{ConfigError, EventKind, NexmarkConfig, NexmarkGenerator};
pub use model::{Auction, Bid, Event, Person};
pub use queries::QueryParams;
pub use source::NexmarkSource;

pub use generator::{FIRST_AUCTION_ID, FIRST_CATEGORY_ID, FIRST_PERSON_ID};

/// A Nexmark query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Query {
    /// Pass-through.
    Q0,
    /// Currency conversion.
    Q1,
    /// Selection.
    Q2,
    /// Local item suggestion (incremental join).
    Q3,
    /// Average closing price per category.
    Q4,
    /// Hot items (sliding windows).
    Q5,
    /// Average selling price by seller (last ten closed auctions).
    Q6,
    /// Highest bid per tumbling window.
    Q7,
    /// New users (window join).
    Q8,
    /// Winning bids.
    Q9,
    /// User sessions.
    Q11,
    /// Filter with computed columns.
    Q14,
    /// Bidding statistics per day (distinct counts).
    Q15,
    /// Channel statistics per day.
    Q16,
    /// Daily auction statistics.
    Q17,
    /// Channel id extraction.
    Q21,
    /// Expand bid with its category 10 auction (join).
    Q20,
    /// Url directories.
    Q22,
}

impl Query {
    /// Every query, in order.
    pub const ALL: [Query; 18] = [
        Query::Q0,
        Query::Q1,
        Query::Q2,
        Query::Q3,
        Query::Q4,
        Query::Q5,
        Query::Q6,
        Query::Q7,
        Query::Q8,
        Query::Q9,
        Query::Q11,
        Query::Q14,
        Query::Q15,
        Query::Q16,
        Query::Q17,
        Query::Q20,
        Query::Q21,
        Query::Q22,
    ];

    /// The query's name, `q0`..`q22`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Query::Q0 => "q0",
            Query::Q1 => "q1",
            Query::Q2 => "q2",
            Query::Q3 => "q3",
            Query::Q4 => "q4",
            Query::Q5 => "q5",
            Query::Q6 => "q6",
            Query::Q7 => "q7",
            Query::Q8 => "q8",
            Query::Q9 => "q9",
            Query::Q11 => "q11",
            Query::Q14 => "q14",
            Query::Q15 => "q15",
            Query::Q16 => "q16",
            Query::Q17 => "q17",
            Query::Q20 => "q20",
            Query::Q21 => "q21",
            Query::Q22 => "q22",
        }
    }

    /// How long after its event time's millisecond starts a result can first exist, ms: 0
    /// for a result of one event (or of a join, at the later record's time); 1 for a result
    /// fired when the watermark reaches its time (a window's, at the window's last instant,
    /// or q4's, at the auction's close), which needs every event of that millisecond in.
    #[must_use]
    pub fn completion_delay_ms(self) -> i64 {
        match self {
            Query::Q0 | Query::Q1 | Query::Q2 | Query::Q3 | Query::Q14 | Query::Q20 | Query::Q21 | Query::Q22 => 0,
            Query::Q4
            | Query::Q5
            | Query::Q6
            | Query::Q7
            | Query::Q8
            | Query::Q9
            | Query::Q11
            | Query::Q15
            | Query::Q16
            | Query::Q17 => 1,
        }
    }
}

impl Query {
    /// The event time one result spans, ms: a window's size or a session's gap for the
    /// windowed queries, 0 for the others. A run shorter than this has no result that
    /// completed on its schedule.
    #[must_use]
    pub fn span_ms(self, params: &QueryParams) -> i64 {
        match self {
            Query::Q5 | Query::Q7 | Query::Q8 => params.window_ms,
            Query::Q11 => params.session_gap_ms,
            Query::Q15 | Query::Q16 | Query::Q17 => params.day_ms,
            _ => 0,
        }
    }
}

impl std::fmt::Display for Query {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where [`build`] sends a query's results, whatever their type.
pub trait ResultSink {
    /// Consumes `results` (on this shard).
    fn attach<T: 'static>(&self, results: Stream<T>);
}

/// Attaches `query` to `events` and its results to `sink`.
pub fn build(query: Query, events: Stream<Event>, params: &QueryParams, sink: &impl ResultSink) {
    use extra_queries as extra;
    use more_queries as more;
    match query {
        Query::Q0 => sink.attach(queries::q0(events)),
        Query::Q1 => sink.attach(queries::q1(events)),
        Query::Q2 => sink.attach(queries::q2(events)),
        Query::Q3 => sink.attach(queries::q3(events)),
        Query::Q4 => sink.attach(queries::q4(events)),
        Query::Q5 => sink.attach(queries::q5(events, params)),
        Query::Q7 => sink.attach(queries::q7(events, params)),
        Query::Q8 => sink.attach(queries::q8(events, params)),
        Query::Q6 => sink.attach(extra::q6(events)),
        Query::Q9 => sink.attach(extra::q9(events)),
        Query::Q15 => sink.attach(extra::q15(events, params)),
        Query::Q16 => sink.attach(extra::q16(events, params)),
        Query::Q20 => sink.attach(extra::q20(events)),
        Query::Q11 => sink.attach(more::q11(events, params)),
        Query::Q14 => sink.attach(more::q14(events)),
        Query::Q17 => sink.attach(more::q17(events, params)),
        Query::Q21 => sink.attach(more::q21(events)),
        Query::Q22 => sink.attach(more::q22(events)),
    }
}
