//! q4, average price per category: each auction's closing price ([`ClosingPrice`], keyed by
//! the auction), averaged per category as each auction closes ([`AveragePrice`]). Flink
//! answers with a changelog; here each change is emitted as an update, at the closing time
//! of the auction that changed it.

use sluice_engine::dataflow::{
    Data, Event as Timed, KeyedProcessFunction, ListState, ProcessContext, Stream, Timer, ValueState,
    checkpoint::StateError,
};
use sluice_io::EventTime;

use crate::nexmark::model::Event;

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
pub fn query(events: Stream<Event>) -> Stream<Q4Row> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_inputs_round_trip_as_checkpoint_data() {
        let q4 = [
            Q4Input::Auction { id: 1, category: 10, date_time: 5, expires: 50 },
            Q4Input::Bid { auction: 1, price: 300, date_time: 7 },
        ];
        let mut out = Vec::new();
        q4.iter().for_each(|i| i.encode(&mut out));
        let mut input = out.as_slice();
        for want in &q4 {
            let got = Q4Input::decode(&mut input).unwrap();
            assert_eq!(format!("{got:?}"), format!("{want:?}"));
        }
        assert!(input.is_empty());
        assert!(Q4Input::decode(&mut [9u8].as_slice()).is_err());
    }
}
