//! q6, average selling price by seller: q9's winners, averaged per seller over their last
//! [`Q6_AUCTIONS`] closed auctions as each closes ([`SellerAverage`]).

use std::collections::VecDeque;

use sluice_engine::dataflow::{
    Event as Timed, KeyedProcessFunction, ListState, ProcessContext, Stream, Timer, ValueState,
};
use sluice_io::EventTime;

use super::q9::{self, Q9Row};
use crate::nexmark::model::Event;

/// How many of a seller's latest closed auctions q6 averages over.
pub const Q6_AUCTIONS: usize = 10;

/// q6's result: after one of a seller's auctions closed, the average price of their last
/// [`Q6_AUCTIONS`] closed auctions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q6Row {
    /// The seller's id.
    pub seller: u64,
    /// The auction that just closed.
    pub auction: u64,
    /// The average of the last closing prices, cents, rounded down.
    pub average_price: u64,
}

/// q6's per-seller average: winners wait until the watermark passes their closing time and
/// are then taken in closing order (ties by auction id), whichever shard closed them.
#[derive(Debug, Clone, Copy, Default)]
pub struct SellerAverage;

impl KeyedProcessFunction<u64, Q9Row> for SellerAverage {
    /// Closed auctions not yet counted as (closing time, auction, price), and the last
    /// prices counted.
    type State = (ListState<(i64, u64, u64)>, ValueState<VecDeque<u64>>);
    type Out = Q6Row;

    fn process_element(
        &mut self,
        _: &u64,
        event: Timed<Q9Row>,
        (pending, _): &mut Self::State,
        ctx: &mut ProcessContext<'_, u64, Q6Row>,
    ) {
        let row = event.value;
        pending.add((row.auction.expires, row.auction.id, row.price));
        ctx.register_event_time_timer(EventTime::from_millis(row.auction.expires));
    }

    fn on_timer(
        &mut self,
        seller: &u64,
        timer: Timer,
        (pending, last): &mut Self::State,
        ctx: &mut ProcessContext<'_, u64, Q6Row>,
    ) {
        let mut due: Vec<(i64, u64, u64)> = pending.iter().copied().filter(|p| p.0 <= timer.time.millis()).collect();
        if due.is_empty() {
            return;
        }
        pending.retain(|p| p.0 > timer.time.millis());
        due.sort_unstable();
        let prices = last.get_or_insert_with(VecDeque::new);
        for (_, auction, price) in due {
            if prices.len() == Q6_AUCTIONS {
                prices.pop_front();
            }
            prices.push_back(price);
            let average_price = prices.iter().sum::<u64>() / prices.len() as u64;
            ctx.emit(Q6Row { seller: *seller, auction, average_price });
        }
    }
}

/// q6, average selling price by seller: for each seller, the average closing price of
/// their last ten closed auctions, updated as each closes (the Beam suite's definition;
/// Flink's SQL version is not supported by Flink itself).
///
/// ```sql
/// SELECT Q.seller, AVG(Q.final) OVER (PARTITION BY Q.seller ORDER BY Q.dateTime
///   ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)
/// FROM (SELECT MAX(B.price) AS final, A.seller, B.dateTime FROM auction AS A, bid AS B
///   WHERE A.id = B.auction and B.dateTime between A.dateTime and A.expires GROUP BY A.id, A.seller) AS Q
/// ```
pub fn query(events: Stream<Event>) -> Stream<Q6Row> {
    q9::query(events).key_by(|row| row.auction.seller).process(SellerAverage)
}
