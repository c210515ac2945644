//! Nexmark queries beyond q8 that the pipeline API expresses directly: q11 (session
//! windows), q14 (a filter with computed columns), q17 (a daily per-auction aggregate), q21
//! and q22 (string extraction). Their SQL is the Flink suite's.

use sluice_engine::dataflow::{Aggregate, Data, Stream, Windows, checkpoint::StateError};

use super::{
    model::Event,
    queries::{QueryParams, bids, ms, to_euro_cents},
};

/// q11's result: one bidder's session and its bids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q11Row {
    /// Bidder id.
    pub bidder: u64,
    /// Bids in the session.
    pub bids: u64,
    /// The session's first bid's time, ms.
    pub start: i64,
    /// The session's last bid's time plus the gap, ms.
    pub end: i64,
}

/// q11, user sessions: how many bids each bidder makes per session (bids less than the
/// gap apart).
///
/// `SELECT bidder, count(*), session_start, session_end FROM TABLE(SESSION(TABLE bid
/// PARTITION BY bidder, DESCRIPTOR(dateTime), INTERVAL '10' SECOND)) GROUP BY bidder, ...`
pub fn q11(events: Stream<Event>, params: &QueryParams) -> Stream<Q11Row> {
    bids(events).key_by(|b| b.bidder).window(Windows::session(ms(params.session_gap_ms))).count().map(|r| Q11Row {
        bidder: r.key,
        bids: r.value,
        start: r.window.start.millis(),
        end: r.window.end.millis(),
    })
}

/// q14's result.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q14Row {
    /// Auction id.
    pub auction: u64,
    /// Bidder id.
    pub bidder: u64,
    /// Price in euro cents.
    pub price: u64,
    /// `dayTime` (8:00-18:59 UTC), `nightTime` (before 7:00 or from 20:00) or `otherTime`.
    pub bid_time_type: &'static str,
    /// Time, ms.
    pub date_time: i64,
    /// How many `c`s the bid's `extra` has.
    pub c_counts: u64,
}

/// The time of day q14 files a bid under.
#[must_use]
pub fn bid_time_type(date_time: i64) -> &'static str {
    match (date_time / 3_600_000).rem_euclid(24) {
        8..=18 => "dayTime",
        0..=6 | 20.. => "nightTime",
        _ => "otherTime",
    }
}

/// q14, a filter with computed columns: bids between 10 000 and 500 000 euros, with their
/// time of day and a character count.
///
/// ```sql
/// SELECT auction, bidder, 0.908 * price as price, CASE WHEN HOUR(dateTime) >= 8 AND HOUR(dateTime) <= 18
/// THEN 'dayTime' WHEN HOUR(dateTime) <= 6 OR HOUR(dateTime) >= 20 THEN 'nightTime' ELSE 'otherTime' END,
/// dateTime, extra, count_char(extra, 'c') FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000
/// ```
pub fn q14(events: Stream<Event>) -> Stream<Q14Row> {
    events.flat_map(|e| {
        let bid = e.into_bid()?;
        let price = to_euro_cents(bid.price);
        (1_000_000 < price && price < 50_000_000).then(|| Q14Row {
            auction: bid.auction,
            bidder: bid.bidder,
            price,
            bid_time_type: bid_time_type(bid.date_time),
            date_time: bid.date_time,
            c_counts: bid.extra.bytes().filter(|&c| c == b'c').count() as u64,
        })
    })
}

/// q17's result: one auction's bids in one day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q17Row {
    /// Auction id.
    pub auction: u64,
    /// The day's start, ms.
    pub day: i64,
    /// Bids.
    pub total_bids: u64,
    /// Bids under $100.
    pub rank1_bids: u64,
    /// Bids from $100 to under $10 000.
    pub rank2_bids: u64,
    /// Bids from $10 000.
    pub rank3_bids: u64,
    /// Lowest price, cents.
    pub min_price: u64,
    /// Highest price, cents.
    pub max_price: u64,
    /// Average price, cents, rounded down.
    pub avg_price: u64,
    /// Sum of prices, cents.
    pub sum_price: u64,
}

/// q17's aggregate of one auction's day.
#[derive(Debug, Clone, Copy, Default)]
pub struct AuctionDay;

/// q17's accumulator: bids, bids per rank, min, max, sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayStats([u64; 7]);

impl Data for DayStats {
    fn encode(&self, out: &mut Vec<u8>) {
        for v in self.0 {
            v.encode(out);
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let mut stats = [0; 7];
        for v in &mut stats {
            *v = u64::decode(input)?;
        }
        Ok(DayStats(stats))
    }
}

impl Aggregate<super::model::Bid> for AuctionDay {
    type Acc = DayStats;
    type Out = [u64; 7];
    fn create(&self) -> DayStats {
        DayStats([0, 0, 0, 0, u64::MAX, 0, 0])
    }
    #[inline]
    fn add(&self, DayStats(acc): &mut DayStats, bid: &super::model::Bid) {
        let p = bid.price;
        acc[0] += 1;
        acc[1 + usize::from(p >= 10_000) + usize::from(p >= 1_000_000)] += 1;
        acc[4] = acc[4].min(p);
        acc[5] = acc[5].max(p);
        acc[6] += p;
    }
    fn merge(&self, DayStats(into): &mut DayStats, DayStats(from): DayStats) {
        for i in [0, 1, 2, 3, 6] {
            into[i] += from[i];
        }
        into[4] = into[4].min(from[4]);
        into[5] = into[5].max(from[5]);
    }
    fn result(&self, acc: &DayStats) -> [u64; 7] {
        acc.0
    }
}

/// q17, auction statistics: per auction and day, the bids by price rank and the price's
/// min, max, average and sum, emitted when the day ends.
///
/// ```sql
/// SELECT auction, DATE_FORMAT(dateTime, 'yyyy-MM-dd') as day, count(*) AS total_bids,
///   count(*) filter (where price < 10000), count(*) filter (where price >= 10000 and price < 1000000),
///   count(*) filter (where price >= 1000000), min(price), max(price), avg(price), sum(price)
/// FROM bid GROUP BY auction, DATE_FORMAT(dateTime, 'yyyy-MM-dd')
/// ```
pub fn q17(events: Stream<Event>, params: &QueryParams) -> Stream<Q17Row> {
    bids(events).key_by(|b| b.auction).window(Windows::tumbling(ms(params.day_ms))).aggregate(AuctionDay).map(|r| {
        let [total_bids, rank1_bids, rank2_bids, rank3_bids, min_price, max_price, sum_price] = r.value;
        Q17Row {
            auction: r.key,
            day: r.window.start.millis(),
            total_bids,
            rank1_bids,
            rank2_bids,
            rank3_bids,
            min_price,
            max_price,
            avg_price: sum_price / total_bids.max(1),
            sum_price,
        }
    })
}

/// q21's result.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q21Row {
    /// Auction id.
    pub auction: u64,
    /// Bidder id.
    pub bidder: u64,
    /// Price, cents.
    pub price: u64,
    /// Channel name.
    pub channel: &'static str,
    /// `0`-`3` for the four hot channels, else the url's `channel_id` parameter.
    pub channel_id: &'static str,
}

/// The value of the `channel_id` parameter of `url`, as q21's
/// `REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2)`.
#[must_use]
pub fn url_channel_id(url: &str) -> Option<&str> {
    let mut from = 0;
    while let Some(at) = url[from..].find("channel_id=") {
        let at = from + at;
        if at == 0 || url.as_bytes()[at - 1] == b'&' {
            let value = &url[at + "channel_id=".len()..];
            return Some(value.split('&').next().unwrap_or(""));
        }
        from = at + 1;
    }
    None
}

/// q21, add a channel id: bids from a hot channel or with a channel id in their url.
///
/// ```sql
/// SELECT auction, bidder, price, channel, CASE WHEN lower(channel) = 'apple' THEN '0'
///   WHEN lower(channel) = 'google' THEN '1' WHEN lower(channel) = 'facebook' THEN '2'
///   WHEN lower(channel) = 'baidu' THEN '3' ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) END
/// FROM bid WHERE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) is not null
///   or lower(channel) in ('apple', 'google', 'facebook', 'baidu')
/// ```
pub fn q21(events: Stream<Event>) -> Stream<Q21Row> {
    events.flat_map(|e| {
        let bid = e.into_bid()?;
        let hot = ["apple", "google", "facebook", "baidu"]
            .iter()
            .position(|hot| bid.channel.eq_ignore_ascii_case(hot))
            .map(|i| ["0", "1", "2", "3"][i]);
        let channel_id = hot.or_else(|| url_channel_id(bid.url))?;
        Some(Q21Row { auction: bid.auction, bidder: bid.bidder, price: bid.price, channel: bid.channel, channel_id })
    })
}

/// q22's result.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Q22Row {
    /// Auction id.
    pub auction: u64,
    /// Bidder id.
    pub bidder: u64,
    /// Price, cents.
    pub price: u64,
    /// Channel name.
    pub channel: &'static str,
    /// The url's path segments 1-3 (`SPLIT_INDEX(url, '/', 3..=5)`), empty if missing.
    pub dirs: [&'static str; 3],
}

/// q22, get URL directories: every bid with the first three directories of its url.
///
/// `SELECT auction, bidder, price, channel, SPLIT_INDEX(url, '/', 3), SPLIT_INDEX(url, '/', 4),
/// SPLIT_INDEX(url, '/', 5) FROM bid`
pub fn q22(events: Stream<Event>) -> Stream<Q22Row> {
    events.flat_map(|e| {
        let bid = e.into_bid()?;
        let mut parts = bid.url.split('/').skip(3);
        let dirs = [(); 3].map(|()| parts.next().unwrap_or(""));
        Some(Q22Row { auction: bid.auction, bidder: bid.bidder, price: bid.price, channel: bid.channel, dirs })
    })
}
