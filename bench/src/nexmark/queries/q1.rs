//! q1, currency conversion: every bid with its price in euros, and the conversion (which
//! q14 uses too).

use sluice_engine::dataflow::Stream;

use super::bids;
use crate::nexmark::model::{Bid, Event};

/// Dollars to euros, as q1 and q14 convert: `0.908 * price`, in whole cents rounded down.
#[inline]
#[must_use]
pub fn to_euro_cents(dollar_cents: u64) -> u64 {
    dollar_cents * 908 / 1000
}

/// q1, currency conversion: every bid with its price in euros.
///
/// `SELECT auction, bidder, 0.908 * price as price, dateTime, extra FROM bid`
pub fn query(events: Stream<Event>) -> Stream<Bid> {
    bids(events).map(|mut bid| {
        bid.price = to_euro_cents(bid.price);
        bid
    })
}
