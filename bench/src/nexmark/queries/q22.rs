//! q22, get URL directories: every bid with the first three directories of its url.

use sluice_engine::dataflow::Stream;

use crate::nexmark::model::Event;

/// q22's result.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q22Row {
    /// Auction id.
    pub auction: u64,
    /// Bidder id.
    pub bidder: u64,
    /// Price, cents.
    pub price: u64,
    /// Channel name.
    pub channel: &'static str,
    /// The url's path segments 1-3 (`SPLIT_INDEX(url, '/', 3..=5)`), empty if missing.
    pub dirs: [&'static str; 3],
}

/// q22, get URL directories: every bid with the first three directories of its url.
///
/// `SELECT auction, bidder, price, channel, SPLIT_INDEX(url, '/', 3), SPLIT_INDEX(url, '/', 4),
/// SPLIT_INDEX(url, '/', 5) FROM bid`
pub fn query(events: Stream<Event>) -> Stream<Q22Row> {
    events.flat_map(|e| {
        let bid = e.into_bid()?;
        let mut parts = bid.url.split('/').skip(3);
        let dirs = [(); 3].map(|()| parts.next().unwrap_or(""));
        Some(Q22Row { auction: bid.auction, bidder: bid.bidder, price: bid.price, channel: bid.channel, dirs })
    })
}
