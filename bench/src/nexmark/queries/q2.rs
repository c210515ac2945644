//! q2, selection: the bids on every 123rd auction.

use sluice_engine::dataflow::Stream;

use crate::nexmark::model::Event;

/// q2's result: an auction and a price bid on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q2Row {
    /// Auction id.
    pub auction: u64,
    /// Price, cents.
    pub price: u64,
}

/// q2, selection: the bids on every 123rd auction.
///
/// `SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0`
pub fn query(events: Stream<Event>) -> Stream<Q2Row> {
    events.flat_map(|e| match e {
        Event::Bid(b) if b.auction.is_multiple_of(123) => Some(Q2Row { auction: b.auction, price: b.price }),
        _ => None,
    })
}
