//! q15, bidding statistics report: per day, the bids, distinct bidders and distinct
//! auctions, in total and per price rank, emitted when the day ends; and the aggregate
//! behind it ([`DailyBidStats`]), which q16 uses per channel.

use std::collections::HashSet;

use sluice_engine::dataflow::{Aggregate, Data, Stream, Windows, checkpoint::StateError};

use super::{QueryParams, bids, ms};
use crate::nexmark::model::{Bid, Event};

/// The price ranks of q15 and q16: under $100, $100 to under $10 000, from $10 000.
#[inline]
#[must_use]
pub fn price_rank(price: u64) -> usize {
    usize::from(price >= 10_000) + usize::from(price >= 1_000_000)
}

/// q15's and q16's accumulator: bids, distinct bidders and distinct auctions, in total
/// and per price rank, and (for q16) the latest minute of the day a bid came in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BidStats {
    bids: [u64; 4],
    bidders: [HashSet<u64>; 4],
    auctions: [HashSet<u64>; 4],
    last_minute: i64,
}

impl Data for BidStats {
    fn encode(&self, out: &mut Vec<u8>) {
        (self.bids, self.bidders.clone(), self.auctions.clone(), self.last_minute).encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let (bids, bidders, auctions, last_minute) = Data::decode(input)?;
        Ok(BidStats { bids, bidders, auctions, last_minute })
    }
}

/// Counts of one day (and channel): `[total, rank 1, rank 2, rank 3]` each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DayCounts {
    /// Bids.
    pub bids: [u64; 4],
    /// Distinct bidders.
    pub bidders: [u64; 4],
    /// Distinct auctions.
    pub auctions: [u64; 4],
}

/// The aggregate behind q15 and q16.
#[derive(Debug, Clone, Copy)]
pub struct DailyBidStats {
    pub(super) day_ms: i64,
}

impl Aggregate<Bid> for DailyBidStats {
    type Acc = BidStats;
    type Out = (DayCounts, i64);
    fn create(&self) -> BidStats {
        BidStats::default()
    }
    fn add(&self, acc: &mut BidStats, bid: &Bid) {
        for i in [0, 1 + price_rank(bid.price)] {
            acc.bids[i] += 1;
            acc.bidders[i].insert(bid.bidder);
            acc.auctions[i].insert(bid.auction);
        }
        acc.last_minute = acc.last_minute.max(bid.date_time.rem_euclid(self.day_ms) / 60_000);
    }
    fn merge(&self, into: &mut BidStats, from: BidStats) {
        for i in 0..4 {
            into.bids[i] += from.bids[i];
            into.bidders[i].extend(&from.bidders[i]);
            into.auctions[i].extend(&from.auctions[i]);
        }
        into.last_minute = into.last_minute.max(from.last_minute);
    }
    fn result(&self, acc: &BidStats) -> (DayCounts, i64) {
        let counts = DayCounts {
            bids: acc.bids,
            bidders: acc.bidders.each_ref().map(|s| s.len() as u64),
            auctions: acc.auctions.each_ref().map(|s| s.len() as u64),
        };
        (counts, acc.last_minute)
    }
}

/// q15's result: one day's bidding statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q15Row {
    /// The day's start, ms.
    pub day: i64,
    /// Its counts.
    pub counts: DayCounts,
}

/// q15, bidding statistics report: per day, the bids, distinct bidders and distinct
/// auctions, in total and per price rank, emitted when the day ends. Every bid of a day
/// meets on one shard (one key), as in Flink without split distinct aggregation.
///
/// ```sql
/// SELECT DATE_FORMAT(dateTime, 'yyyy-MM-dd') as `day`, count(*) AS total_bids,
///   count(*) filter (where price < 10000) AS rank1_bids, ... count(distinct bidder) AS total_bidders,
///   count(distinct bidder) filter (where price < 10000) AS rank1_bidders, ...
///   count(distinct auction) AS total_auctions, ...
/// FROM bid GROUP BY DATE_FORMAT(dateTime, 'yyyy-MM-dd')
/// ```
pub fn query(events: Stream<Event>, params: &QueryParams) -> Stream<Q15Row> {
    let day_ms = params.day_ms.max(1);
    bids(events)
        .key_by(|_| 0u8)
        .window(Windows::tumbling(ms(day_ms)))
        .aggregate(DailyBidStats { day_ms })
        .map(|r| Q15Row { day: r.window.start.millis(), counts: r.value.0 })
}
