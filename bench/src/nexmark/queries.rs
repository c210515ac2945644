//! The Nexmark queries, one module each (`queries/q<N>.rs`), written with sluice's public
//! pipeline API as a user would: each module's `query` takes the stream of [`Event`]s (and,
//! if it has windows, the [`QueryParams`]) and returns the stream of its results. Their SQL
//! is the Flink Nexmark suite's; where Flink answers an unbounded aggregate or a
//! ROW_NUMBER with a changelog, the result here is the same value emitted as an update
//! each time it changes (q4, q6), or once, when the event time it depends on has passed (q9
//! at the auction's close, q15 and q16 at the day's end).
//!
//! Windowed results carry their window's last instant as event time, joins the later of
//! the two records' times, and q4's, q6's and q9's the closing time of the auction.
//!
//! [`Query::ALL`] is the table of them all, the one place a query is listed: adding one is
//! a module here and a row there.
//!
//! This module also holds what the queries share: [`QueryParams`], [`bids`] and `ms`.

use std::time::Duration;

use sluice_engine::dataflow::Stream;

use super::{
    Query,
    model::{Bid, Event},
    query::{
        Completion::{Immediate, OnWatermark},
        Span,
    },
};

pub mod q0;
pub mod q1;
pub mod q11;
pub mod q14;
pub mod q15;
pub mod q16;
pub mod q17;
pub mod q2;
pub mod q20;
pub mod q21;
pub mod q22;
pub mod q3;
pub mod q4;
pub mod q5;
pub mod q6;
pub mod q7;
pub mod q8;
pub mod q9;

impl Query {
    /// Every query, one row each: name, when a result can first exist, the event time one
    /// result spans, how to build it (and check its parameters), and its `--help` line.
    /// In `--help`'s order (which has always listed q21 before q20).
    #[rustfmt::skip]
    pub const ALL: &'static [Query] = &[
        // Query::new(name, when a result can first exist, span, build: the query with its results to the sink,
        //     --help line)
        Query::new("q0",  Immediate,   Span::Instant, |e, _, s| s.attach(q0::query(e)),
            "Pass-through"),
        Query::new("q1",  Immediate,   Span::Instant, |e, _, s| s.attach(q1::query(e)),
            "Currency conversion"),
        Query::new("q2",  Immediate,   Span::Instant, |e, _, s| s.attach(q2::query(e)),
            "Selection"),
        Query::new("q3",  Immediate,   Span::Instant, |e, _, s| s.attach(q3::query(e)),
            "Local item suggestion (incremental join)"),
        Query::new("q4",  OnWatermark, Span::Instant, |e, _, s| s.attach(q4::query(e)),
            "Average closing price per category"),
        Query::new("q5",  OnWatermark, Span::Window,  |e, p, s| s.attach(q5::query(e, p)),
            "Hot items (sliding windows)").checked(q5::check),
        Query::new("q6",  OnWatermark, Span::Instant, |e, _, s| s.attach(q6::query(e)),
            "Average selling price by seller (last ten closed auctions)"),
        Query::new("q7",  OnWatermark, Span::Window,  |e, p, s| s.attach(q7::query(e, p)),
            "Highest bid per tumbling window"),
        Query::new("q8",  OnWatermark, Span::Window,  |e, p, s| s.attach(q8::query(e, p)),
            "New users (window join)"),
        Query::new("q9",  OnWatermark, Span::Instant, |e, _, s| s.attach(q9::query(e)),
            "Winning bids"),
        Query::new("q11", OnWatermark, Span::Session, |e, p, s| s.attach(q11::query(e, p)),
            "User sessions"),
        Query::new("q14", Immediate,   Span::Instant, |e, _, s| s.attach(q14::query(e)),
            "Filter with computed columns"),
        Query::new("q15", OnWatermark, Span::Day,     |e, p, s| s.attach(q15::query(e, p)),
            "Bidding statistics per day (distinct counts)"),
        Query::new("q16", OnWatermark, Span::Day,     |e, p, s| s.attach(q16::query(e, p)),
            "Channel statistics per day"),
        Query::new("q17", OnWatermark, Span::Day,     |e, p, s| s.attach(q17::query(e, p)),
            "Daily auction statistics"),
        Query::new("q21", Immediate,   Span::Instant, |e, _, s| s.attach(q21::query(e)),
            "Channel id extraction"),
        Query::new("q20", Immediate,   Span::Instant, |e, _, s| s.attach(q20::query(e)),
            "Expand bid with its category 10 auction (join)"),
        Query::new("q22", Immediate,   Span::Instant, |e, _, s| s.attach(q22::query(e)),
            "Url directories"),
    ];
}

/// Window sizes, as the Flink suite sets them by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryParams {
    /// q7, q8 tumbling window and q5 sliding window size, ms. Default 10 s.
    pub window_ms: i64,
    /// q5's slide, ms. Default 2 s.
    pub slide_ms: i64,
    /// q11's session gap, ms. Default 10 s.
    pub session_gap_ms: i64,
    /// q15's, q16's and q17's tumbling window (a day), ms.
    pub day_ms: i64,
}

impl Default for QueryParams {
    fn default() -> Self {
        QueryParams { window_ms: 10_000, slide_ms: 2_000, session_gap_ms: 10_000, day_ms: 86_400_000 }
    }
}

/// A window size or gap of `ms` milliseconds (at least 1).
pub(crate) fn ms(ms: i64) -> Duration {
    Duration::from_millis(ms.max(1).unsigned_abs())
}

/// The bids of the stream.
pub fn bids(events: Stream<Event>) -> Stream<Bid> {
    events.flat_map(Event::into_bid)
}
