//! q0, pass-through: every bid, unchanged.

use sluice_engine::dataflow::Stream;

use super::bids;
use crate::nexmark::model::{Bid, Event};

/// q0, pass-through: every bid, unchanged.
///
/// `SELECT auction, bidder, price, dateTime, extra FROM bid`
pub fn query(events: Stream<Event>) -> Stream<Bid> {
    bids(events)
}
