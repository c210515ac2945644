//! The Nexmark data model: people, auctions and bids, with the fields and units of the
//! specification as the Flink and Beam Nexmark suites define them (ids from 1000, prices in
//! cents, times in milliseconds since the epoch).

use sluice_io::EventTime;

/// A person, who may sell items and bid on auctions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    /// Unique id, from [`FIRST_PERSON_ID`](super::FIRST_PERSON_ID).
    pub id: u64,
    /// First and last name.
    pub name: String,
    /// `xxxxxxx@yyyyy.com`.
    pub email_address: String,
    /// Four groups of four digits.
    pub credit_card: String,
    /// One of ten US cities.
    pub city: &'static str,
    /// One of six US states, two capital letters.
    pub state: &'static str,
    /// Event time, ms since the epoch.
    pub date_time: i64,
    /// Padding to the specification's average event size.
    pub extra: String,
}

/// An item put up for auction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Auction {
    /// Unique id, from [`FIRST_AUCTION_ID`](super::FIRST_AUCTION_ID).
    pub id: u64,
    /// Short name.
    pub item_name: String,
    /// Longer description.
    pub description: String,
    /// Starting price, cents.
    pub initial_bid: u64,
    /// Price the auction must reach to sell, cents.
    pub reserve: u64,
    /// Event time, ms since the epoch.
    pub date_time: i64,
    /// When the auction closes, ms since the epoch (after `date_time`).
    pub expires: i64,
    /// The selling person's id.
    pub seller: u64,
    /// One of five categories, from [`FIRST_CATEGORY_ID`](super::FIRST_CATEGORY_ID).
    pub category: u64,
    /// Padding to the specification's average event size.
    pub extra: String,
}

/// A bid on an auction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bid {
    /// The auction's id.
    pub auction: u64,
    /// The bidding person's id.
    pub bidder: u64,
    /// Price, cents.
    pub price: u64,
    /// Where the bid came from: one of four hot channels or one of 10 000 others.
    pub channel: &'static str,
    /// The page the bid was placed on.
    pub url: &'static str,
    /// Event time, ms since the epoch.
    pub date_time: i64,
    /// Padding to the specification's average event size.
    pub extra: String,
}

/// One Nexmark event. People and auctions, 4 events in 50, are boxed so that the bids
/// that make up the rest are not moved around at the size of the largest kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A new person.
    Person(Box<Person>),
    /// A new auction.
    Auction(Box<Auction>),
    /// A bid.
    Bid(Bid),
}

impl Event {
    /// The event's time, ms since the epoch.
    #[must_use]
    pub fn date_time(&self) -> i64 {
        match self {
            Event::Person(p) => p.date_time,
            Event::Auction(a) => a.date_time,
            Event::Bid(b) => b.date_time,
        }
    }

    /// The event's time as the processor's [`EventTime`]: the timestamp extractor of every
    /// Nexmark source.
    #[must_use]
    pub fn event_time(&self) -> EventTime {
        EventTime::from_millis(self.date_time())
    }

    /// The bid, if this is one.
    #[must_use]
    pub fn as_bid(&self) -> Option<&Bid> {
        if let Event::Bid(b) = self { Some(b) } else { None }
    }

    /// The bid, if this is one, by value.
    #[must_use]
    pub fn into_bid(self) -> Option<Bid> {
        if let Event::Bid(b) = self { Some(b) } else { None }
    }

    /// The auction, if this is one, by value.
    #[must_use]
    pub fn into_auction(self) -> Option<Auction> {
        if let Event::Auction(a) = self { Some(*a) } else { None }
    }

    /// The person, if this is one, by value.
    #[must_use]
    pub fn into_person(self) -> Option<Person> {
        if let Event::Person(p) = self { Some(*p) } else { None }
    }
}
