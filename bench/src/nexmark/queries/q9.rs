//! q9, winning bids: every auction with the bid that won it, emitted once, at the auction's
//! close (a join of auctions and bids keyed by the auction, [`WinningBid`]), and
//! [`AuctionTerms`], what q9 and q20 keep of an auction. Flink answers the ROW_NUMBER with
//! a changelog; here the winner is emitted once its auction has closed.

use sluice_engine::dataflow::{
    Data, Event as Timed, KeyedProcessFunction, ListState, ProcessContext, Stream, Timer, ValueState,
    checkpoint::StateError,
};
use sluice_io::EventTime;

use crate::nexmark::model::{Auction, Event};

/// q9's join input, keyed by the auction's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Q9Input {
    /// An auction.
    Auction(AuctionTerms),
    /// A bid: (auction, bidder, price, time).
    Bid {
        /// The auction's id.
        auction: u64,
        /// The bidder's id.
        bidder: u64,
        /// Price, cents.
        price: u64,
        /// Time, ms.
        date_time: i64,
    },
}

impl Data for Q9Input {
    fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Q9Input::Auction(a) => {
                0u8.encode(out);
                a.encode(out);
            }
            Q9Input::Bid { auction, bidder, price, date_time } => {
                1u8.encode(out);
                (auction, bidder, price, date_time).encode(out);
            }
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        match u8::decode(input)? {
            0 => Ok(Q9Input::Auction(AuctionTerms::decode(input)?)),
            1 => {
                let (auction, bidder, price, date_time) = Data::decode(input)?;
                Ok(Q9Input::Bid { auction, bidder, price, date_time })
            }
            other => Err(StateError(format!("unknown q9 input kind {other}"))),
        }
    }
}

/// What q9 keeps of an auction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AuctionTerms {
    /// Id.
    pub id: u64,
    /// The seller's id.
    pub seller: u64,
    /// Category.
    pub category: u64,
    /// Starting price, cents.
    pub initial_bid: u64,
    /// Reserve price, cents.
    pub reserve: u64,
    /// Opening time, ms.
    pub date_time: i64,
    /// Closing time, ms.
    pub expires: i64,
}

impl AuctionTerms {
    /// What q9 and q20 keep of `a`.
    #[must_use]
    pub fn of(a: &Auction) -> AuctionTerms {
        AuctionTerms {
            id: a.id,
            seller: a.seller,
            category: a.category,
            initial_bid: a.initial_bid,
            reserve: a.reserve,
            date_time: a.date_time,
            expires: a.expires,
        }
    }
}

impl Data for AuctionTerms {
    fn encode(&self, out: &mut Vec<u8>) {
        (self.id, self.seller, self.category, self.initial_bid).encode(out);
        (self.reserve, self.date_time, self.expires).encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let (id, seller, category, initial_bid) = Data::decode(input)?;
        let (reserve, date_time, expires) = Data::decode(input)?;
        Ok(AuctionTerms { id, seller, category, initial_bid, reserve, date_time, expires })
    }
}

/// A bid as q9 ranks it: by price, highest first, then by time, earliest first (then by
/// bidder, lowest first, so that the winner is one and the same on every run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RankedBid {
    /// Price, cents.
    pub price: u64,
    /// Time, ms.
    pub date_time: i64,
    /// The bidder's id.
    pub bidder: u64,
}

impl RankedBid {
    /// Whether `self` beats `other`.
    #[must_use]
    pub fn beats(&self, other: &RankedBid) -> bool {
        (self.price, std::cmp::Reverse(self.date_time), std::cmp::Reverse(self.bidder))
            > (other.price, std::cmp::Reverse(other.date_time), std::cmp::Reverse(other.bidder))
    }
}

impl Data for RankedBid {
    fn encode(&self, out: &mut Vec<u8>) {
        (self.price, self.date_time, self.bidder).encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let (price, date_time, bidder) = Data::decode(input)?;
        Ok(RankedBid { price, date_time, bidder })
    }
}

/// q9's result: an auction and the bid that won it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q9Row {
    /// The auction.
    pub auction: AuctionTerms,
    /// The winning bidder's id.
    pub bidder: u64,
    /// The winning price, cents.
    pub price: u64,
    /// The winning bid's time, ms.
    pub bid_date_time: i64,
}

impl Data for Q9Row {
    fn encode(&self, out: &mut Vec<u8>) {
        self.auction.encode(out);
        (self.bidder, self.price, self.bid_date_time).encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let auction = AuctionTerms::decode(input)?;
        let (bidder, price, bid_date_time) = Data::decode(input)?;
        Ok(Q9Row { auction, bidder, price, bid_date_time })
    }
}

/// q9's join per auction: the best bid placed while the auction was open, emitted when it
/// closes (the watermark passes `expires`). Bids that arrive before their auction wait for
/// it until the watermark passes their own time (an auction opens before its bids).
#[derive(Debug, Clone, Copy, Default)]
pub struct WinningBid;

impl KeyedProcessFunction<u64, Q9Input> for WinningBid {
    type State = (ValueState<(AuctionTerms, Option<RankedBid>)>, ListState<RankedBid>);
    type Out = Q9Row;

    fn process_element(
        &mut self,
        _: &u64,
        event: Timed<Q9Input>,
        (open, early): &mut Self::State,
        ctx: &mut ProcessContext<'_, u64, Q9Row>,
    ) {
        let offer = |(terms, best): &mut (AuctionTerms, Option<RankedBid>), bid: RankedBid| {
            if terms.date_time <= bid.date_time && bid.date_time <= terms.expires && best.is_none_or(|b| bid.beats(&b))
            {
                *best = Some(bid);
            }
        };
        match event.value {
            Q9Input::Auction(terms) => {
                let mut state = (terms, None);
                for bid in early.take() {
                    offer(&mut state, bid);
                }
                open.set(state);
                ctx.register_event_time_timer(EventTime::from_millis(terms.expires));
            }
            Q9Input::Bid { bidder, price, date_time, .. } => {
                let bid = RankedBid { price, date_time, bidder };
                match open.get_mut() {
                    Some(state) => offer(state, bid),
                    None => {
                        early.add(bid);
                        ctx.register_event_time_timer(EventTime::from_millis(date_time));
                    }
                }
            }
        }
    }

    fn on_timer(
        &mut self,
        _: &u64,
        timer: Timer,
        (open, early): &mut Self::State,
        ctx: &mut ProcessContext<'_, u64, Q9Row>,
    ) {
        match open.get().copied() {
            Some((terms, best)) if timer.time.millis() >= terms.expires => {
                if let Some(b) = best {
                    ctx.emit(Q9Row { auction: terms, bidder: b.bidder, price: b.price, bid_date_time: b.date_time });
                }
                open.clear();
                early.clear();
            }
            Some(_) => {}
            None => early.retain(|b| b.date_time > timer.time.millis()),
        }
    }
}

/// q9, winning bids: every auction with the bid that won it (the highest placed while it
/// was open, the earliest of equal ones), when it closes.
///
/// ```sql
/// SELECT id, itemName, description, initialBid, reserve, dateTime, expires, seller, category, extra,
///   auction, bidder, price, bid_dateTime, bid_extra
/// FROM (SELECT A.*, B.auction, B.bidder, B.price, B.dateTime AS bid_dateTime, B.extra AS bid_extra,
///   ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.dateTime ASC) AS rownum
///   FROM auction A, bid B WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires)
/// WHERE rownum <= 1
/// ```
pub fn query(events: Stream<Event>) -> Stream<Q9Row> {
    events
        .flat_map(|e| match e {
            Event::Auction(a) => Some(Q9Input::Auction(AuctionTerms::of(&a))),
            Event::Bid(b) => {
                Some(Q9Input::Bid { auction: b.auction, bidder: b.bidder, price: b.price, date_time: b.date_time })
            }
            Event::Person(_) => None,
        })
        .key_by(|input| match input {
            Q9Input::Auction(a) => a.id,
            Q9Input::Bid { auction, .. } => *auction,
        })
        .process(WinningBid)
}
