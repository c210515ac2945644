//! Nexmark queries from the second half of the suite: q9 (winning bids), q6 (average
//! selling price by seller, on q9's winners), q15 and q16 (daily bidding and channel
//! statistics with distinct counts) and q20 (bids expanded with their category 10
//! auction). Their SQL is the Flink suite's; where Flink answers an unbounded aggregate
//! or a ROW_NUMBER with a changelog, the result here is emitted once, when the event time
//! it depends on has passed (q9 and q6 at the auction's close, q15 and q16 at the day's
//! end), or as soon as both sides of the join are in (q20).

use std::collections::{HashSet, VecDeque};

use sluice_engine::dataflow::{
    Aggregate, Data, Event as Timed, KeyedProcessFunction, ListState, ProcessContext, Stream, Timer, ValueState,
    Windows, checkpoint::StateError,
};
use sluice_io::EventTime;

use super::{
    data::{decode_static, encode_str},
    model::{Bid, Event},
    queries::{QueryParams, bids, ms},
};

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
    pub fn of(a: &super::model::Auction) -> AuctionTerms {
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
pub fn q9(events: Stream<Event>) -> Stream<Q9Row> {
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
pub fn q6(events: Stream<Event>) -> Stream<Q6Row> {
    q9(events).key_by(|row| row.auction.seller).process(SellerAverage)
}

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
    day_ms: i64,
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
pub fn q15(events: Stream<Event>, params: &QueryParams) -> Stream<Q15Row> {
    let day_ms = params.day_ms.max(1);
    bids(events)
        .key_by(|_| 0u8)
        .window(Windows::tumbling(ms(day_ms)))
        .aggregate(DailyBidStats { day_ms })
        .map(|r| Q15Row { day: r.window.start.millis(), counts: r.value.0 })
}

/// q16's result: one channel's day.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q16Row {
    /// The channel.
    pub channel: &'static str,
    /// The day's start, ms.
    pub day: i64,
    /// The latest minute of the day a bid came in on this channel (`HH * 60 + mm`).
    pub minute: i64,
    /// Its counts.
    pub counts: DayCounts,
}

/// A channel name as a key ([`Data`] for the generator's static channel names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Channel(pub &'static str);

impl Data for Channel {
    fn encode(&self, out: &mut Vec<u8>) {
        encode_str(self.0, out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(Channel(decode_static(input, "channel")?))
    }
}

/// q16, channel statistics report: q15's statistics per channel and day, with the latest
/// minute of the day a bid came in.
///
/// ```sql
/// SELECT channel, DATE_FORMAT(dateTime, 'yyyy-MM-dd') as `day`, max(DATE_FORMAT(dateTime, 'HH:mm')) as `minute`,
///   count(*) AS total_bids, ... count(distinct bidder) ..., count(distinct auction) ...
/// FROM bid GROUP BY channel, DATE_FORMAT(dateTime, 'yyyy-MM-dd')
/// ```
pub fn q16(events: Stream<Event>, params: &QueryParams) -> Stream<Q16Row> {
    let day_ms = params.day_ms.max(1);
    bids(events)
        .key_by(|b| Channel(b.channel))
        .window(Windows::tumbling(ms(day_ms)))
        .aggregate(DailyBidStats { day_ms })
        .map(|r| Q16Row { channel: r.key.0, day: r.window.start.millis(), minute: r.value.1, counts: r.value.0 })
}

/// q20's join input, keyed by the auction's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Q20Input {
    /// An auction: (terms, item name); the name is left empty outside category 10.
    Auction(AuctionTerms, String),
    /// A bid.
    Bid(Bid),
}

impl Data for Q20Input {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Q20Input::Auction(terms, name) => {
                0u8.encode(out);
                terms.encode(out);
                name.encode(out);
            }
            Q20Input::Bid(b) => {
                1u8.encode(out);
                (b.auction, b.bidder, b.price, b.date_time).encode(out);
                encode_str(b.channel, out);
                encode_str(b.url, out);
                b.extra.encode(out);
            }
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        match u8::decode(input)? {
            0 => Ok(Q20Input::Auction(AuctionTerms::decode(input)?, String::decode(input)?)),
            1 => {
                let (auction, bidder, price, date_time) = Data::decode(input)?;
                Ok(Q20Input::Bid(Bid {
                    auction,
                    bidder,
                    price,
                    date_time,
                    channel: decode_static(input, "channel")?,
                    url: decode_static(input, "url")?,
                    extra: String::decode(input)?,
                }))
            }
            other => Err(StateError(format!("unknown q20 input kind {other}"))),
        }
    }
}

/// q20's result: a bid and its auction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q20Row {
    /// The auction.
    pub auction: AuctionTerms,
    /// The auction's item name.
    pub item_name: String,
    /// The bidder's id.
    pub bidder: u64,
    /// Price, cents.
    pub price: u64,
    /// The bid's channel.
    pub channel: &'static str,
    /// The bid's time, ms.
    pub bid_date_time: i64,
}

/// q20's join per auction: an auction, once seen, is remembered (in full if it is in
/// category 10), and every bid on a category 10 one joins it; a bid whose auction has not
/// been seen waits for it (the generator lets bids name auctions up to ten ahead, so a
/// bid may come before its auction, even in event time).
#[derive(Debug, Clone, Copy, Default)]
pub struct ExpandBid;

/// What q20 keeps of a bid waiting for its auction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitingBid {
    bidder: u64,
    price: u64,
    channel: &'static str,
    date_time: i64,
}

impl WaitingBid {
    fn of(b: &Bid) -> WaitingBid {
        WaitingBid { bidder: b.bidder, price: b.price, channel: b.channel, date_time: b.date_time }
    }
}

impl Data for WaitingBid {
    fn encode(&self, out: &mut Vec<u8>) {
        (self.bidder, self.price, self.date_time).encode(out);
        encode_str(self.channel, out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let (bidder, price, date_time) = Data::decode(input)?;
        Ok(WaitingBid { bidder, price, date_time, channel: decode_static(input, "channel")? })
    }
}

impl KeyedProcessFunction<u64, Q20Input> for ExpandBid {
    /// The auction (`None`: seen, not in category 10), and the bids waiting for it.
    type State = (ValueState<Option<(AuctionTerms, String)>>, ListState<WaitingBid>);
    type Out = Q20Row;

    fn process_element(
        &mut self,
        _: &u64,
        event: Timed<Q20Input>,
        (auction, waiting): &mut Self::State,
        ctx: &mut ProcessContext<'_, u64, Q20Row>,
    ) {
        let row = |(terms, name): &(AuctionTerms, String), b: WaitingBid| Q20Row {
            auction: *terms,
            item_name: name.clone(),
            bidder: b.bidder,
            price: b.price,
            channel: b.channel,
            bid_date_time: b.date_time,
        };
        match event.value {
            Q20Input::Auction(terms, name) => {
                let joined = (terms.category == 10).then_some((terms, name));
                for b in waiting.take() {
                    if let Some(joined) = &joined {
                        ctx.emit(row(joined, b));
                    }
                }
                auction.set(joined);
            }
            Q20Input::Bid(b) => match auction.get() {
                Some(Some(joined)) => ctx.emit(row(joined, WaitingBid::of(&b))),
                Some(None) => {}
                None => waiting.add(WaitingBid::of(&b)),
            },
        }
    }
}

/// q20, expand bid with auction: every bid on a category 10 auction, with the auction.
///
/// ```sql
/// SELECT auction, bidder, price, channel, url, B.dateTime, B.extra, itemName, description, initialBid,
///   reserve, A.dateTime, expires, seller, category, A.extra
/// FROM bid AS B INNER JOIN auction AS A on B.auction = A.id WHERE A.category = 10
/// ```
pub fn q20(events: Stream<Event>) -> Stream<Q20Row> {
    events
        .flat_map(|e| match e {
            Event::Auction(a) => Some(Q20Input::Auction(
                AuctionTerms::of(&a),
                if a.category == 10 { a.item_name } else { String::new() },
            )),
            Event::Bid(b) => Some(Q20Input::Bid(b)),
            Event::Person(_) => None,
        })
        .key_by(|input| match input {
            Q20Input::Auction(a, _) => a.id,
            Q20Input::Bid(b) => b.auction,
        })
        .process(ExpandBid)
}
