//! q8, monitor new users: the people who opened an auction in the tumbling window in which
//! they registered (a window join).

use sluice_engine::dataflow::{Stream, Windows};

use super::{QueryParams, ms};
use crate::nexmark::model::Event;

/// q8's result: a person who opened an auction in the window in which they registered.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q8Row {
    /// Person id.
    pub id: u64,
    /// Name.
    pub name: String,
    /// The window's start, ms.
    pub window_start: i64,
}

/// q8, monitor new users: the people who opened an auction in the same tumbling window in
/// which they registered. Sellers are first reduced to one record per seller and window
/// (a count), so the window join yields one result per person and window.
///
/// ```sql
/// SELECT P.id, P.name, P.starttime FROM (
///   SELECT id, name, window_start AS starttime, window_end AS endtime
///   FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
///   GROUP BY id, name, window_start, window_end) P
/// JOIN (SELECT seller, window_start AS starttime, window_end AS endtime
///   FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
///   GROUP BY seller, window_start, window_end) A
/// ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime
/// ```
pub fn query(events: Stream<Event>, params: &QueryParams) -> Stream<Q8Row> {
    let window = params.window_ms.max(1);
    let windows = Windows::tumbling(ms(window));
    // Only people and auctions are copied to the two branches, not bids.
    let people_and_auctions = events.filter(|e| !matches!(e, Event::Bid(_)));
    let people = people_and_auctions.clone().flat_map(|e| e.into_person().map(|p| (p.id, p.name))).key_by(|p| p.0);
    let sellers = people_and_auctions
        .flat_map(|e| e.into_auction().map(|a| a.seller))
        .key_by(|seller| *seller)
        .window(windows)
        .count()
        .map(|r| r.key)
        .key_by(|seller| *seller);
    people.window_join(sellers, windows, |_, (id, name), _| (*id, name.clone())).map_event(move |e| {
        let (id, name) = e.value;
        Q8Row { id, name, window_start: e.time.millis() - window + 1 }
    })
}
