//! q14, a filter with computed columns: bids between 10 000 and 500 000 euros, with their
//! time of day ([`bid_time_type`]) and a character count.

use sluice_engine::dataflow::Stream;

use super::q1::to_euro_cents;
use crate::nexmark::model::Event;

/// q14's result.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q14Row {
    /// Auction id.
    pub auction: u64,
    /// Bidder id.
    pub bidder: u64,
    /// Price in euro cents.
    pub price: u64,
    /// `dayTime` (8:00-18:59 UTC), `nightTime` (before 7:00 or from 20:00) or `otherTime`.
    pub bid_time_type: &'static str,
    /// Time, ms.
    pub date_time: i64,
    /// How many `c`s the bid's `extra` has.
    pub c_counts: u64,
}

/// The time of day q14 files a bid under.
#[must_use]
pub fn bid_time_type(date_time: i64) -> &'static str {
    match (date_time / 3_600_000).rem_euclid(24) {
        8..=18 => "dayTime",
        0..=6 | 20.. => "nightTime",
        _ => "otherTime",
    }
}

/// q14, a filter with computed columns: bids between 10 000 and 500 000 euros, with their
/// time of day and a character count.
///
/// ```sql
/// SELECT auction, bidder, 0.908 * price as price, CASE WHEN HOUR(dateTime) >= 8 AND HOUR(dateTime) <= 18
/// THEN 'dayTime' WHEN HOUR(dateTime) <= 6 OR HOUR(dateTime) >= 20 THEN 'nightTime' ELSE 'otherTime' END,
/// dateTime, extra, count_char(extra, 'c') FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000
/// ```
pub fn query(events: Stream<Event>) -> Stream<Q14Row> {
    events.flat_map(|e| {
        let bid = e.into_bid()?;
        let price = to_euro_cents(bid.price);
        (1_000_000 < price && price < 50_000_000).then(|| Q14Row {
            auction: bid.auction,
            bidder: bid.bidder,
            price,
            bid_time_type: bid_time_type(bid.date_time),
            date_time: bid.date_time,
            c_counts: bid.extra.bytes().filter(|&c| c == b'c').count() as u64,
        })
    })
}
