//! q11, user sessions: how many bids each bidder makes per session (a session window).

use sluice_engine::dataflow::{Stream, Windows};

use super::{QueryParams, bids, ms};
use crate::nexmark::model::Event;

/// q11's result: one bidder's session and its bids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q11Row {
    /// Bidder id.
    pub bidder: u64,
    /// Bids in the session.
    pub bids: u64,
    /// The session's first bid's time, ms.
    pub start: i64,
    /// The session's last bid's time plus the gap, ms.
    pub end: i64,
}

/// q11, user sessions: how many bids each bidder makes per session (bids less than the
/// gap apart).
///
/// `SELECT bidder, count(*), session_start, session_end FROM TABLE(SESSION(TABLE bid
/// PARTITION BY bidder, DESCRIPTOR(dateTime), INTERVAL '10' SECOND)) GROUP BY bidder, ...`
pub fn query(events: Stream<Event>, params: &QueryParams) -> Stream<Q11Row> {
    bids(events).key_by(|b| b.bidder).window(Windows::session(ms(params.session_gap_ms))).count().map(|r| Q11Row {
        bidder: r.key,
        bids: r.value,
        start: r.window.start.millis(),
        end: r.window.end.millis(),
    })
}
