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

/// q7's combiner on the sending shard, before the first exchange: a bid priced below the
/// highest this shard has already seen in its window cannot be among the window's highest,
/// so it stays here; the rest go on. Without it every bid crossed to the shard of its
/// partial key, its heap padding with it, to be freed there on the allocator's slow path
/// for another thread's memory (at two shards the allocator took 46% of q7's time:
/// tuning.md). In a window of `n` bids in random order about `ln n` set a new highest.
///
/// It remembers the [`LocalHighest::WINDOWS`] latest windows; a bid of an older one goes
/// on. Forgetting (a restore starts it empty) only lets more bids through. It relies on no
/// bid being late, as the generator's watermark bound ensures: a late bid, dropped by the
/// window, could otherwise set a highest that hides a lower on-time bid.
#[derive(Debug, Clone)]
struct LocalHighest {
    window_ms: i64,
    /// (window start, highest price seen in it), at most [`LocalHighest::WINDOWS`].
    highest: Vec<(i64, u64)>,
}

impl LocalHighest {
    /// Windows remembered: the open one and a few before it, for out-of-order bids.
    const WINDOWS: usize = 4;

    fn new(window_ms: i64) -> Self {
        LocalHighest { window_ms: window_ms.max(1), highest: Vec::with_capacity(Self::WINDOWS) }
    }

    /// Whether `bid` may be among its window's highest: priced at least the highest this
    /// shard has seen in its window (which it then becomes).
    fn keep(&mut self, bid: &Bid) -> bool {
        let start = bid.date_time - bid.date_time.rem_euclid(self.window_ms);
        if let Some((_, highest)) = self.highest.iter_mut().find(|(s, _)| *s == start) {
            if bid.price < *highest {
                return false;
            }
            *highest = bid.price;
        } else if self.highest.len() < Self::WINDOWS {
            self.highest.push((start, bid.price));
        } else if let Some(oldest) = self.highest.iter_mut().min_by_key(|(s, _)| *s).filter(|(s, _)| *s < start) {
            *oldest = (start, bid.price);
        }
        true
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
    let mut local = LocalHighest::new(params.window_ms);
    bids(events)
        .filter(move |b| local.keep(b))
        .key_by(|b| b.price % Q7_PARTIAL_KEYS)
        .window(Windows::tumbling(ms(params.window_ms)))
        .aggregate(HighestBids)
        .key_by(|r| r.window.start.millis())
        .process(WindowHighest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bid(date_time: i64, price: u64) -> Bid {
        Bid { auction: 1, bidder: 2, price, channel: "c", url: "u", date_time, extra: String::new() }
    }

    #[test]
    fn the_combiner_passes_each_new_highest_of_a_window_and_its_ties() {
        let mut local = LocalHighest::new(100);
        let kept: Vec<bool> = [(0, 5), (10, 3), (20, 5), (99, 7), (100, 1), (150, 0), (50, 6), (60, 7)]
            .into_iter()
            .map(|(t, p)| local.keep(&bid(t, p)))
            .collect();
        // Window 0: 5 (first), 3 below, 5 ties, 7 higher; window 100 is new; 0 below 1;
        // back in window 0, 6 below 7, 7 ties.
        assert_eq!(kept, [true, false, true, true, true, false, false, true]);
    }

    #[test]
    fn the_combiner_forgets_the_oldest_window_and_then_passes_its_bids() {
        let mut local = LocalHighest::new(10);
        for w in 0..LocalHighest::WINDOWS as i64 {
            assert!(local.keep(&bid(w * 10, 100)));
        }
        // A fifth window replaces window 0, whose next bid, however low, goes on.
        assert!(local.keep(&bid(40, 1)));
        assert!(local.keep(&bid(0, 1)));
        assert!(!local.keep(&bid(40, 0)), "window 40 is remembered");
        assert_eq!(local.highest.len(), LocalHighest::WINDOWS);
        // A bid before every remembered window is passed, not stored.
        let before = local.highest.clone();
        assert!(local.keep(&bid(-50, 1)));
        assert_eq!(local.highest, before);
    }
}
