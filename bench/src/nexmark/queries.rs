//! Nexmark queries q0-q8 (but q6), written with sluice's public pipeline API as a user
//! would: each takes the stream of [`Event`]s and returns the stream of its results. Their
//! SQL is the Flink Nexmark suite's; where a query is an unbounded SQL aggregate that
//! Flink answers with a changelog (q4), the result here is the same value emitted as an
//! update each time it changes.
//!
//! Windowed results carry their window's last instant as event time, joins the later of
//! the two records' times, and q4's the closing time of the auction that changed it.

use std::time::Duration;

use sluice_engine::dataflow::{
    Aggregate, Data, Event as Timed, KeyedProcessFunction, ListState, ProcessContext, Stream, Timer, ValueState,
    WindowResult, Windows, checkpoint::StateError,
};
use sluice_io::EventTime;

use super::{
    data::{decode_static, encode_str},
    model::{Bid, Event},
};

/// Window sizes, as the Flink suite sets them by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryParams {
    /// q7, q8 tumbling window and q5 sliding window size, ms. Default 10 s.
    pub window_ms: i64,
    /// q5's slide, ms. Default 2 s.
    pub slide_ms: i64,
    /// q11's session gap, ms. Default 10 s.
    pub session_gap_ms: i64,
    /// q17's tumbling window (a day), ms.
    pub day_ms: i64,
}

impl Default for QueryParams {
    fn default() -> Self {
        QueryParams { window_ms: 10_000, slide_ms: 2_000, session_gap_ms: 10_000, day_ms: 86_400_000 }
    }
}

pub(crate) fn ms(ms: i64) -> Duration {
    Duration::from_millis(ms.max(1).unsigned_abs())
}

/// The bids of the stream.
pub fn bids(events: Stream<Event>) -> Stream<Bid> {
    events.flat_map(Event::into_bid)
}

/// q0, pass-through: every bid, unchanged.
///
/// `SELECT auction, bidder, price, dateTime, extra FROM bid`
pub fn q0(events: Stream<Event>) -> Stream<Bid> {
    bids(events)
}

/// Dollars to euros, as q1 and q14 convert: `0.908 * price`, in whole cents rounded down.
#[inline]
#[must_use]
pub fn to_euro_cents(dollar_cents: u64) -> u64 {
    dollar_cents * 908 / 1000
}

/// q1, currency conversion: every bid with its price in euros.
///
/// `SELECT auction, bidder, 0.908 * price as price, dateTime, extra FROM bid`
pub fn q1(events: Stream<Event>) -> Stream<Bid> {
    bids(events).map(|mut bid| {
        bid.price = to_euro_cents(bid.price);
        bid
    })
}

/// q2's result: an auction and a price bid on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q2Row {
    /// Auction id.
    pub auction: u64,
    /// Price, cents.
    pub price: u64,
}

/// q2, selection: the bids on every 123rd auction.
///
/// `SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0`
pub fn q2(events: Stream<Event>) -> Stream<Q2Row> {
    events.flat_map(|e| match e {
        Event::Bid(b) if b.auction.is_multiple_of(123) => Some(Q2Row { auction: b.auction, price: b.price }),
        _ => None,
    })
}

/// q3's result: a seller from Oregon, Idaho or California and an auction of theirs in
/// category 10.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q3Row {
    /// The seller's name.
    pub name: String,
    /// The seller's city.
    pub city: &'static str,
    /// The seller's state.
    pub state: &'static str,
    /// The auction's id.
    pub auction: u64,
}

/// q3's join input, keyed by the person's id.
#[derive(Debug, Clone)]
pub enum Q3Input {
    /// A person from one of the three states.
    Seller {
        /// Id.
        id: u64,
        /// Name.
        name: String,
        /// City.
        city: &'static str,
        /// State.
        state: &'static str,
    },
    /// An auction in category 10.
    Auction {
        /// Id.
        id: u64,
        /// The seller's id.
        seller: u64,
    },
}

/// Crosses q3's `key_by`, so an unaligned checkpoint can store it in flight.
impl Data for Q3Input {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Q3Input::Seller { id, name, city, state } => {
                out.push(0);
                id.encode(out);
                name.encode(out);
                encode_str(city, out);
                encode_str(state, out);
            }
            Q3Input::Auction { id, seller } => {
                out.push(1);
                (*id, *seller).encode(out);
            }
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        match u8::decode(input)? {
            0 => Ok(Q3Input::Seller {
                id: u64::decode(input)?,
                name: String::decode(input)?,
                city: decode_static(input, "city")?,
                state: decode_static(input, "state")?,
            }),
            1 => {
                let (id, seller) = Data::decode(input)?;
                Ok(Q3Input::Auction { id, seller })
            }
            tag => Err(StateError(format!("{tag} is not a q3 input"))),
        }
    }
}

/// The seller part of a q3 result: q3's state per seller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seller {
    name: String,
    city: &'static str,
    state: &'static str,
}

impl Data for Seller {
    fn encode(&self, out: &mut Vec<u8>) {
        self.name.encode(out);
        encode_str(self.city, out);
        encode_str(self.state, out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        Ok(Seller {
            name: String::decode(input)?,
            city: decode_static(input, "city")?,
            state: decode_static(input, "state")?,
        })
    }
}

/// q3's incremental join: a seller, once seen, is kept; an auction whose seller has not
/// been seen waits for them.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalItemSuggestion;

impl KeyedProcessFunction<u64, Q3Input> for LocalItemSuggestion {
    type State = (ValueState<Seller>, ListState<u64>);
    type Out = Q3Row;

    fn process_element(
        &mut self,
        _: &u64,
        event: Timed<Q3Input>,
        (seller, waiting): &mut Self::State,
        ctx: &mut ProcessContext<'_, u64, Q3Row>,
    ) {
        match event.value {
            Q3Input::Seller { name, city, state, .. } => {
                for auction in waiting.take() {
                    ctx.emit(Q3Row { name: name.clone(), city, state, auction });
                }
                seller.set(Seller { name, city, state });
            }
            Q3Input::Auction { id, .. } => match seller.get() {
                Some(s) => ctx.emit(Q3Row { name: s.name.clone(), city: s.city, state: s.state, auction: id }),
                None => waiting.add(id),
            },
        }
    }
}

/// q3, local item suggestion: who sells in category 10 in Oregon, Idaho or California.
///
/// ```sql
/// SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P on A.seller = P.id
/// WHERE A.category = 10 and (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')
/// ```
pub fn q3(events: Stream<Event>) -> Stream<Q3Row> {
    events
        .flat_map(|e| match e {
            Event::Person(p) if matches!(p.state, "OR" | "ID" | "CA") => {
                Some(Q3Input::Seller { id: p.id, name: p.name, city: p.city, state: p.state })
            }
            Event::Auction(a) if a.category == 10 => Some(Q3Input::Auction { id: a.id, seller: a.seller }),
            _ => None,
        })
        .key_by(|input| match input {
            Q3Input::Seller { id, .. } => *id,
            Q3Input::Auction { seller, .. } => *seller,
        })
        .process(LocalItemSuggestion)
}

/// q4's input, keyed by the auction's id.
#[derive(Debug, Clone, Copy)]
pub enum Q4Input {
    /// An auction.
    Auction {
        /// Id.
        id: u64,
        /// Category.
        category: u64,
        /// Opening time, ms.
        date_time: i64,
        /// Closing time, ms.
        expires: i64,
    },
    /// A bid.
    Bid {
        /// The auction's id.
        auction: u64,
        /// Price, cents.
        price: u64,
        /// Time, ms.
        date_time: i64,
    },
}

/// Crosses q4's `key_by`, so an unaligned checkpoint can store it in flight.
impl Data for Q4Input {
    fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Q4Input::Auction { id, category, date_time, expires } => {
                out.push(0);
                (id, category, date_time, expires).encode(out);
            }
            Q4Input::Bid { auction, price, date_time } => {
                out.push(1);
                (auction, price, date_time).encode(out);
            }
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        match u8::decode(input)? {
            0 => {
                let (id, category, date_time, expires) = Data::decode(input)?;
                Ok(Q4Input::Auction { id, category, date_time, expires })
            }
            1 => {
                let (auction, price, date_time) = Data::decode(input)?;
                Ok(Q4Input::Bid { auction, price, date_time })
            }
            tag => Err(StateError(format!("{tag} is not a q4 input"))),
        }
    }
}

/// An auction waiting to close, and its highest valid bid so far: q4's state per auction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenAuction {
    category: u64,
    date_time: i64,
    expires: i64,
    highest: Option<u64>,
}

impl OpenAuction {
    fn bid(&mut self, time: i64, price: u64) {
        if self.date_time <= time && time <= self.expires {
            self.highest = Some(self.highest.map_or(price, |h| h.max(price)));
        }
    }
}

impl Data for OpenAuction {
    fn encode(&self, out: &mut Vec<u8>) {
        (self.category, self.date_time, self.expires, self.highest).encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let (category, date_time, expires, highest) = Data::decode(input)?;
        Ok(OpenAuction { category, date_time, expires, highest })
    }
}

/// q4's first step, per auction: the highest bid placed while it was open, emitted as
/// `(category, price)` when it closes (the watermark passes `expires`). Bids that arrive
/// before their auction wait for it until the watermark passes their own time: an auction
/// that opened before a bid cannot arrive after that.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClosingPrice;

impl KeyedProcessFunction<u64, Q4Input> for ClosingPrice {
    type State = (ValueState<OpenAuction>, ListState<(i64, u64)>);
    type Out = (u64, u64);

    fn process_element(
        &mut self,
        _: &u64,
        event: Timed<Q4Input>,
        (open, early): &mut Self::State,
        ctx: &mut ProcessContext<'_, u64, (u64, u64)>,
    ) {
        match event.value {
            Q4Input::Auction { category, date_time, expires, .. } => {
                let mut auction = OpenAuction { category, date_time, expires, highest: None };
                for (time, price) in early.take() {
                    auction.bid(time, price);
                }
                open.set(auction);
                ctx.register_event_time_timer(EventTime::from_millis(expires));
            }
            Q4Input::Bid { price, date_time, .. } => match open.get_mut() {
                Some(auction) => auction.bid(date_time, price),
                None => {
                    early.add((date_time, price));
                    ctx.register_event_time_timer(EventTime::from_millis(date_time));
                }
            },
        }
    }

    fn on_timer(
        &mut self,
        _: &u64,
        timer: Timer,
        (open, early): &mut Self::State,
        ctx: &mut ProcessContext<'_, u64, (u64, u64)>,
    ) {
        match open.get().copied() {
            Some(auction) if timer.time.millis() >= auction.expires => {
                if let Some(price) = auction.highest {
                    ctx.emit((auction.category, price));
                }
                open.clear();
                early.clear();
            }
            Some(_) => {}
            None => early.retain(|(time, _)| *time > timer.time.millis()),
        }
    }
}

/// q4's result: a category's average closing price so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Q4Row {
    /// Category.
    pub category: u64,
    /// Auctions closed in it with at least one valid bid.
    pub closed: u64,
    /// Their average closing price, cents, rounded down.
    pub average_price: u64,
}

/// q4's second step, per category: the running average of closing prices.
#[derive(Debug, Clone, Copy, Default)]
pub struct AveragePrice;

impl KeyedProcessFunction<u64, (u64, u64)> for AveragePrice {
    type State = ValueState<(u64, u64)>;
    type Out = Q4Row;

    fn process_element(
        &mut self,
        category: &u64,
        event: Timed<(u64, u64)>,
        totals: &mut Self::State,
        ctx: &mut ProcessContext<'_, u64, Q4Row>,
    ) {
        let (sum, count) = totals.get_or_insert_with(|| (0, 0));
        *sum += event.value.1;
        *count += 1;
        ctx.emit(Q4Row { category: *category, closed: *count, average_price: *sum / *count });
    }
}

/// q4, average price per category: the average closing price of the auctions of each
/// category, updated as each auction closes.
///
/// ```sql
/// SELECT Q.category, AVG(Q.final) FROM (
///   SELECT MAX(B.price) AS final, A.category FROM auction A, bid B
///   WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
///   GROUP BY A.id, A.category) Q
/// GROUP BY Q.category
/// ```
pub fn q4(events: Stream<Event>) -> Stream<Q4Row> {
    events
        .flat_map(|e| match e {
            Event::Auction(a) => {
                Some(Q4Input::Auction { id: a.id, category: a.category, date_time: a.date_time, expires: a.expires })
            }
            Event::Bid(b) => Some(Q4Input::Bid { auction: b.auction, price: b.price, date_time: b.date_time }),
            Event::Person(_) => None,
        })
        .key_by(|input| match input {
            Q4Input::Auction { id, .. } => *id,
            Q4Input::Bid { auction, .. } => *auction,
        })
        .process(ClosingPrice)
        .key_by(|(category, _)| *category)
        .process(AveragePrice)
}

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
pub fn q5(events: Stream<Event>, params: &QueryParams) -> Stream<Q5Row> {
    bids(events)
        .key_by(|b| b.auction)
        .window(Windows::sliding(ms(params.window_ms), ms(params.slide_ms)))
        .count()
        .key_by(|r| r.window.start.millis())
        .process(HottestAuctions)
}

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
pub fn q7(events: Stream<Event>, params: &QueryParams) -> Stream<Bid> {
    bids(events)
        .key_by(|b| b.price % Q7_PARTIAL_KEYS)
        .window(Windows::tumbling(ms(params.window_ms)))
        .aggregate(HighestBids)
        .key_by(|r| r.window.start.millis())
        .process(WindowHighest)
}

/// q8's result: a person who opened an auction in the window in which they registered.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q8Row {
    /// Person id.
    pub id: u64,
    /// Name.
    pub name: String,
    /// The window's start, ms.
    pub window_start: i64,
}

/// q8, monitor new users: the people who opened an auction in the same tumbling window in
/// which they registered. Sellers are first reduced to one record per seller and window
/// (a count), so the window join yields one result per person and window.
///
/// ```sql
/// SELECT P.id, P.name, P.starttime FROM (
///   SELECT id, name, window_start AS starttime, window_end AS endtime
///   FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
///   GROUP BY id, name, window_start, window_end) P
/// JOIN (SELECT seller, window_start AS starttime, window_end AS endtime
///   FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
///   GROUP BY seller, window_start, window_end) A
/// ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime
/// ```
pub fn q8(events: Stream<Event>, params: &QueryParams) -> Stream<Q8Row> {
    let window = params.window_ms.max(1);
    let windows = Windows::tumbling(ms(window));
    // Only people and auctions are copied to the two branches, not bids.
    let people_and_auctions = events.filter(|e| !matches!(e, Event::Bid(_)));
    let people = people_and_auctions.clone().flat_map(|e| e.into_person().map(|p| (p.id, p.name))).key_by(|p| p.0);
    let sellers = people_and_auctions
        .flat_map(|e| e.into_auction().map(|a| a.seller))
        .key_by(|seller| *seller)
        .window(windows)
        .count()
        .map(|r| r.key)
        .key_by(|seller| *seller);
    people.window_join(sellers, windows, |_, (id, name), _| (*id, name.clone())).map_event(move |e| {
        let (id, name) = e.value;
        Q8Row { id, name, window_start: e.time.millis() - window + 1 }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_inputs_round_trip_as_checkpoint_data() {
        let city = super::super::generator::interned("Portland").expect("a generator city");
        let state = super::super::generator::interned("OR").expect("a generator state");
        let q3 = [Q3Input::Seller { id: 7, name: "Ann".into(), city, state }, Q3Input::Auction { id: 9, seller: 7 }];
        let q4 = [
            Q4Input::Auction { id: 1, category: 10, date_time: 5, expires: 50 },
            Q4Input::Bid { auction: 1, price: 300, date_time: 7 },
        ];
        let mut out = Vec::new();
        q3.iter().for_each(|i| i.encode(&mut out));
        q4.iter().for_each(|i| i.encode(&mut out));
        let mut input = out.as_slice();
        for want in &q3 {
            let got = Q3Input::decode(&mut input).unwrap();
            assert_eq!(format!("{got:?}"), format!("{want:?}"));
        }
        for want in &q4 {
            let got = Q4Input::decode(&mut input).unwrap();
            assert_eq!(format!("{got:?}"), format!("{want:?}"));
        }
        assert!(input.is_empty());
        assert!(Q3Input::decode(&mut [9u8].as_slice()).is_err());
        assert!(Q4Input::decode(&mut [9u8].as_slice()).is_err());
    }
}
