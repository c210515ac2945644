//! q7, highest bid: in every tumbling window, the bids with the highest price, found in two
//! steps ([`HighestBids`] per window and partial key, then [`WindowHighest`] per window).

use sluice_engine::dataflow::{
    Aggregate, Event as Timed, KeyedProcessFunction, ProcessContext, Stream, Timer, ValueState, WindowResult, Windows,
};

use super::{QueryParams, bids, ms};
use crate::nexmark::model::{Bid, Event};

/// q7's first step: a window's highest price among some of its bids, and those bids.
#[derive(Debug, Clone, Copy, Default)]
pub struct HighestBids;

impl Aggregate<Bid> for HighestBids {
    type Acc = (u64, Vec<Bid>);
    type Out = (u64, Vec<Bid>);
    fn create(&self) -> Self::Acc {
        (0, Vec::new())
    }
    #[inline]
    fn add(&self, (highest, bids): &mut Self::Acc, bid: &Bid) {
        if bid.price > *highest {
            *highest = bid.price;
            bids.clear();
        }
        if bid.price == *highest {
            bids.push(bid.clone());
        }
    }
    fn merge(&self, into: &mut Self::Acc, from: Self::Acc) {
        for bid in &from.1 {
            self.add(into, bid);
        }
    }
    fn result(&self, acc: &Self::Acc) -> Self::Out {
        acc.clone()
    }
}

/// q7's second step, per window: the partial results merged, and the highest bids
/// emitted when the window's partial results are all in.
#[derive(Debug, Clone, Copy, Default)]
pub struct WindowHighest;

impl KeyedProcessFunction<i64, WindowResult<u64, (u64, Vec<Bid>)>> for WindowHighest {
    type State = ValueState<(u64, Vec<Bid>)>;
    type Out = Bid;

    fn process_element(
        &mut self,
        _: &i64,
        event: Timed<WindowResult<u64, (u64, Vec<Bid>)>>,
        highest: &mut Self::State,
        ctx: &mut ProcessContext<'_, i64, Bid>,
    ) {
        let window = event.value.window;
        let acc = highest.get_or_insert_with(|| HighestBids.create());
        HighestBids.merge(acc, event.value.value);
        ctx.register_event_time_timer(window.max_timestamp());
    }

    fn on_timer(&mut self, _: &i64, _: Timer, highest: &mut Self::State, ctx: &mut ProcessContext<'_, i64, Bid>) {
        for bid in highest.take().map(|(_, bids)| bids).unwrap_or_default() {
            ctx.emit(bid);
        }
    }
}

/// Partial keys q7 spreads a window's bids over before merging them per window.
pub const Q7_PARTIAL_KEYS: u64 = 64;

/// q7, highest bid: in every tumbling window, the bids with the highest price (in two
/// steps: per window and partial key, then per window, so that a window's bids are not
/// all counted on one shard).
///
/// ```sql
/// SELECT B.auction, B.price, B.bidder, B.dateTime, B.extra FROM bid B
/// JOIN (SELECT MAX(price) AS maxprice, window_end as dateTime
///       FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
///       GROUP BY window_start, window_end) B1
/// ON B.price = B1.maxprice WHERE B.dateTime BETWEEN B1.dateTime - INTERVAL '10' SECOND AND B1.dateTime
/// ```
///
/// A bid belongs to the window `[start, end)` it falls in (the SQL's BETWEEN would also
/// count one at exactly `end` in the window before).
pub fn query(events: Stream<Event>, params: &QueryParams) -> Stream<Bid> {
    bids(events)
        .key_by(|b| b.price % Q7_PARTIAL_KEYS)
        .window(Windows::tumbling(ms(params.window_ms)))
        .aggregate(HighestBids)
        .key_by(|r| r.window.start.millis())
        .process(WindowHighest)
}
