//! q20, expand bid with auction: every bid on a category 10 auction, with the auction (a
//! join of auctions and bids keyed by the auction, [`ExpandBid`]), as soon as both are in.

use sluice_engine::dataflow::{
    Data, Event as Timed, KeyedProcessFunction, ListState, ProcessContext, Stream, ValueState, checkpoint::StateError,
};

use super::q9::AuctionTerms;
use crate::nexmark::{
    data::{decode_static, encode_str},
    model::{Bid, Event},
};

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
pub fn query(events: Stream<Event>) -> Stream<Q20Row> {
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
