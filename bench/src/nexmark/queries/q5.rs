//! q5, hot items: in every sliding window, the auctions with the most bids (counted per
//! auction and window, in two phases, then the highest counts per window, [`HottestAuctions`]); and
//! [`check`], that the slide is no longer than the window.

use sluice_engine::dataflow::{
    Event as Timed, KeyedProcessFunction, ProcessContext, Stream, Timer, ValueState, WindowResult,
};

use super::{QueryParams, bids, ms};
use crate::nexmark::model::Event;

/// q5's result: an auction with the most bids in a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q5Row {
    /// The window's start, ms.
    pub window_start: i64,
    /// Auction id.
    pub auction: u64,
    /// Its bids in the window.
    pub bids: u64,
}

/// q5's second step, per window: the auctions whose count is the window's highest,
/// emitted when the window's counts are all in (the watermark passes its last instant).
#[derive(Debug, Clone, Copy, Default)]
pub struct HottestAuctions;

impl KeyedProcessFunction<i64, WindowResult<u64, u64>> for HottestAuctions {
    type State = ValueState<(u64, Vec<u64>)>;
    type Out = Q5Row;

    fn process_element(
        &mut self,
        _: &i64,
        event: Timed<WindowResult<u64, u64>>,
        hottest: &mut Self::State,
        ctx: &mut ProcessContext<'_, i64, Q5Row>,
    ) {
        let (most, auctions) = hottest.get_or_insert_with(|| (0, Vec::new()));
        let count = event.value.value;
        if count > *most {
            *most = count;
            auctions.clear();
        }
        if count == *most {
            auctions.push(event.value.key);
        }
        ctx.register_event_time_timer(event.value.window.max_timestamp());
    }

    fn on_timer(&mut self, start: &i64, _: Timer, hottest: &mut Self::State, ctx: &mut ProcessContext<'_, i64, Q5Row>) {
        if let Some((bids, auctions)) = hottest.take() {
            for auction in auctions {
                ctx.emit(Q5Row { window_start: *start, auction, bids });
            }
        }
    }
}

/// q5, hot items: in every sliding window, the auctions with the most bids.
///
/// ```sql
/// SELECT AuctionBids.auction, AuctionBids.num FROM (
///   SELECT auction, count(*) AS num, window_start, window_end
///   FROM TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
///   GROUP BY auction, window_start, window_end) AS AuctionBids
/// JOIN (SELECT max(num) AS maxn, window_start, window_end FROM ... GROUP BY window_start, window_end) AS MaxBids
/// ON AuctionBids.window_start = MaxBids.window_start AND AuctionBids.num >= MaxBids.maxn
/// ```
///
/// Only the auction id crosses the first exchange, as a SQL planner's projection pushdown
/// would have it: a whole bid carries its `extra` padding on the heap, and a bid moved to
/// another shard is freed there, on the allocator's slow path for memory another thread
/// allocated. At two shards that took a quarter of q5's time (tuning.md).
///
/// The count runs in two phases (`combine_by`): each shard counts its own bids per auction
/// and slide-long pane, and only those partial counts cross to the auction's shard, as
/// Flink's local-global aggregation does with mini-batch on (the configuration its
/// Nexmark runs use). Hot auctions take most bids, so a pane's partials are far fewer than
/// its bids.
pub fn query(events: Stream<Event>, params: &QueryParams) -> Stream<Q5Row> {
    bids(events)
        .map(|b| b.auction)
        .combine_by(|auction: &u64| *auction)
        .sliding(ms(params.window_ms), ms(params.slide_ms))
        .count()
        .key_by(|r| r.window.start.millis())
        .process(HottestAuctions)
}

/// q5's check: the slide must not exceed the window.
///
/// # Errors
///
/// A slide longer than the window.
pub fn check(params: &QueryParams) -> Result<(), String> {
    if params.slide_ms <= params.window_ms {
        Ok(())
    } else {
        Err(format!("--slide-ms ({}) must not exceed --window-ms ({})", params.slide_ms, params.window_ms))
    }
}
