//! q17, auction statistics: per auction and day, the bids by price rank and the price's
//! min, max, average and sum (the aggregate [`AuctionDay`]).

use sluice_engine::dataflow::{Aggregate, Data, Stream, Windows, checkpoint::StateError};

use super::{QueryParams, bids, ms};
use crate::nexmark::model::{Bid, Event};

/// q17's result: one auction's bids in one day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q17Row {
    /// Auction id.
    pub auction: u64,
    /// The day's start, ms.
    pub day: i64,
    /// Bids.
    pub total_bids: u64,
    /// Bids under $100.
    pub rank1_bids: u64,
    /// Bids from $100 to under $10 000.
    pub rank2_bids: u64,
    /// Bids from $10 000.
    pub rank3_bids: u64,
    /// Lowest price, cents.
    pub min_price: u64,
    /// Highest price, cents.
    pub max_price: u64,
    /// Average price, cents, rounded down.
    pub avg_price: u64,
    /// Sum of prices, cents.
    pub sum_price: u64,
}

/// q17's aggregate of one auction's day.
#[derive(Debug, Clone, Copy, Default)]
pub struct AuctionDay;

/// q17's accumulator: bids, bids per rank, min, max, sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayStats([u64; 7]);

impl Data for DayStats {
    fn encode(&self, out: &mut Vec<u8>) {
        for v in self.0 {
            v.encode(out);
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let mut stats = [0; 7];
        for v in &mut stats {
            *v = u64::decode(input)?;
        }
        Ok(DayStats(stats))
    }
}

impl Aggregate<Bid> for AuctionDay {
    type Acc = DayStats;
    type Out = [u64; 7];
    fn create(&self) -> DayStats {
        DayStats([0, 0, 0, 0, u64::MAX, 0, 0])
    }
    #[inline]
    fn add(&self, DayStats(acc): &mut DayStats, bid: &Bid) {
        let p = bid.price;
        acc[0] += 1;
        acc[1 + usize::from(p >= 10_000) + usize::from(p >= 1_000_000)] += 1;
        acc[4] = acc[4].min(p);
        acc[5] = acc[5].max(p);
        acc[6] += p;
    }
    fn merge(&self, DayStats(into): &mut DayStats, DayStats(from): DayStats) {
        for i in [0, 1, 2, 3, 6] {
            into[i] += from[i];
        }
        into[4] = into[4].min(from[4]);
        into[5] = into[5].max(from[5]);
    }
    fn result(&self, acc: &DayStats) -> [u64; 7] {
        acc.0
    }
}

/// q17, auction statistics: per auction and day, the bids by price rank and the price's
/// min, max, average and sum, emitted when the day ends.
///
/// ```sql
/// SELECT auction, DATE_FORMAT(dateTime, 'yyyy-MM-dd') as day, count(*) AS total_bids,
///   count(*) filter (where price < 10000), count(*) filter (where price >= 10000 and price < 1000000),
///   count(*) filter (where price >= 1000000), min(price), max(price), avg(price), sum(price)
/// FROM bid GROUP BY auction, DATE_FORMAT(dateTime, 'yyyy-MM-dd')
/// ```
pub fn query(events: Stream<Event>, params: &QueryParams) -> Stream<Q17Row> {
    bids(events).key_by(|b| b.auction).window(Windows::tumbling(ms(params.day_ms))).aggregate(AuctionDay).map(|r| {
        let [total_bids, rank1_bids, rank2_bids, rank3_bids, min_price, max_price, sum_price] = r.value;
        Q17Row {
            auction: r.key,
            day: r.window.start.millis(),
            total_bids,
            rank1_bids,
            rank2_bids,
            rank3_bids,
            min_price,
            max_price,
            avg_price: sum_price / total_bids.max(1),
            sum_price,
        }
    })
}
