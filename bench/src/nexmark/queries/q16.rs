//! q16, channel statistics report: q15's statistics ([`DailyBidStats`]) per channel and
//! day, with the latest minute of the day a bid came in.

use sluice_engine::dataflow::{Data, Stream, Windows, checkpoint::StateError};

use super::{
    QueryParams, bids, ms,
    q15::{DailyBidStats, DayCounts},
};
use crate::nexmark::{
    data::{decode_static, encode_str},
    model::Event,
};

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
pub fn query(events: Stream<Event>, params: &QueryParams) -> Stream<Q16Row> {
    let day_ms = params.day_ms.max(1);
    bids(events)
        .key_by(|b| Channel(b.channel))
        .window(Windows::tumbling(ms(day_ms)))
        .aggregate(DailyBidStats { day_ms })
        .map(|r| Q16Row { channel: r.key.0, day: r.window.start.millis(), minute: r.value.1, counts: r.value.0 })
}
