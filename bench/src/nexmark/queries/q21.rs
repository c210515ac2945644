//! q21, add a channel id: bids from a hot channel or with a channel id in their url
//! ([`url_channel_id`]).

use sluice_engine::dataflow::Stream;

use crate::nexmark::model::Event;

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
pub fn query(events: Stream<Event>) -> Stream<Q21Row> {
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
