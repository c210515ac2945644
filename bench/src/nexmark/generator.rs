//! The Nexmark event generator, ported from the Beam/Flink Nexmark suites' generator: the
//! same proportions, id schemes, hot-item ratios and field distributions, with its own
//! random number generator (so the values are not bit-identical to the Java ones).
//!
//! Every event is a pure function of its *event number* `n` and the seed: its kind is
//! `n mod 50` (1 person, 3 auctions, 46 bids), its ids come from how many people and
//! auctions exist before it, its fields from a random generator seeded by `(seed, n)`, and
//! its time is `base + n / rate`. Any shard can therefore make any slice of the stream on
//! its own, and the same seed always makes the same stream.
//!
//! Out-of-order groups, as in the specification: the event emitted at position `k` is event
//! number `(k / g) * g + (k * 953) mod g` for a group size `g`, a permutation inside each
//! group of `g` positions, so event times go back and forth within a group and never
//! further. [`NexmarkGenerator::watermark_bound`] is the out-of-orderness that covers it.

use std::{fmt, sync::OnceLock, time::Duration};

use super::model::{Auction, Bid, Event, Person};

/// People per [`PROPORTION_DENOMINATOR`] events.
pub const PERSON_PROPORTION: u64 = 1;
/// Auctions per [`PROPORTION_DENOMINATOR`] events.
pub const AUCTION_PROPORTION: u64 = 3;
/// Bids per [`PROPORTION_DENOMINATOR`] events.
pub const BID_PROPORTION: u64 = 46;
/// The length of one cycle of the event mix.
pub const PROPORTION_DENOMINATOR: u64 = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION;
/// The first person's id (ids start high so that small runs still find matches).
pub const FIRST_PERSON_ID: u64 = 1000;
/// The first auction's id.
pub const FIRST_AUCTION_ID: u64 = 1000;
/// The first category's id.
pub const FIRST_CATEGORY_ID: u64 = 10;
/// Auction categories.
pub const NUM_CATEGORIES: u64 = 5;
/// How far past the newest person a random person id may reach.
const PERSON_ID_LEAD: u64 = 10;
/// How far past the newest auction a random auction id may reach.
const AUCTION_ID_LEAD: u64 = 10;
/// A hot seller, bidder or auction is the first of each block of this many ids.
const HOT_BLOCK: u64 = 100;
/// Channels besides the hot ones.
const CHANNELS: usize = 10_000;
/// Out-of-order groups permute positions by this prime.
const OUT_OF_ORDER_PRIME: u64 = 953;

const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const US_CITIES: [&str; 10] =
    ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"];
const FIRST_NAMES: [&str; 11] =
    ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"];
const LAST_NAMES: [&str; 9] = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"];
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];

/// The generator's settings; the defaults are the specification's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NexmarkConfig {
    /// Seeds every event's fields: the same seed makes the same stream.
    pub seed: u64,
    /// Events per second of event time: event `n` is at `base_time_ms + n * 1000 / rate`.
    pub events_per_sec: u64,
    /// The first event's time, ms since the epoch.
    pub base_time_ms: i64,
    /// Events per out-of-order group; 1 keeps every event in time order.
    pub out_of_order_group_size: u64,
    /// People a random person id is drawn from (the newest ones).
    pub active_people: u64,
    /// Auctions a random auction id is drawn from (the newest ones).
    pub in_flight_auctions: u64,
    /// One auction in this many has a random seller; the others a hot one.
    pub hot_seller_ratio: u64,
    /// One bid in this many is on a random auction; the others on a hot one.
    pub hot_auction_ratio: u64,
    /// One bid in this many has a random bidder; the others a hot one.
    pub hot_bidder_ratio: u64,
    /// One bid in this many comes from one of the 10 000 ordinary channels; the others
    /// from one of the four hot ones.
    pub hot_channel_ratio: u64,
    /// Average size a person is padded to with `extra`, bytes.
    pub avg_person_bytes: usize,
    /// Average size an auction is padded to, bytes.
    pub avg_auction_bytes: usize,
    /// Average size a bid is padded to, bytes.
    pub avg_bid_bytes: usize,
}

impl Default for NexmarkConfig {
    fn default() -> Self {
        NexmarkConfig {
            seed: 0,
            events_per_sec: 1_000_000,
            // 2023-11-14T22:13:20Z: a whole number of days after the epoch, so windows of
            // any size up to a day start with the stream.
            base_time_ms: 1_700_006_400_000,
            out_of_order_group_size: 1,
            active_people: 1000,
            in_flight_auctions: 100,
            hot_seller_ratio: 4,
            hot_auction_ratio: 2,
            hot_bidder_ratio: 4,
            hot_channel_ratio: 2,
            avg_person_bytes: 200,
            avg_auction_bytes: 500,
            avg_bid_bytes: 100,
        }
    }
}

/// A setting the generator cannot work with.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A setting that must be positive is zero.
    Zero(&'static str),
    /// The out-of-order group size is a multiple of 953, so the permutation inside a group
    /// would not be one.
    GroupSize(u64),
    /// The base time is negative or so late that event times overflow.
    BaseTime(i64),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Zero(what) => write!(f, "nexmark generator: {what} must be at least 1"),
            ConfigError::GroupSize(g) => {
                write!(f, "nexmark generator: an out-of-order group size of {g} is a multiple of {OUT_OF_ORDER_PRIME}")
            }
            ConfigError::BaseTime(t) => write!(f, "nexmark generator: base time {t} ms is out of range"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The kind of an event number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A new person.
    Person,
    /// A new auction.
    Auction,
    /// A bid.
    Bid,
}

/// Makes Nexmark events by number; cheap to copy, and shared by nothing.
#[derive(Debug, Clone, Copy)]
pub struct NexmarkGenerator {
    config: NexmarkConfig,
    /// Events spanned by the in-flight auctions: an auction lasts about twice their time.
    events_for_auctions: u64,
}

impl NexmarkGenerator {
    /// A generator with `config`.
    ///
    /// # Errors
    ///
    /// A zero rate, group size, ratio or population, a group size that is a multiple of
    /// 953, or a base time out of range.
    pub fn new(config: NexmarkConfig) -> Result<Self, ConfigError> {
        let positive = [
            ("events_per_sec", config.events_per_sec),
            ("out_of_order_group_size", config.out_of_order_group_size),
            ("active_people", config.active_people),
            ("in_flight_auctions", config.in_flight_auctions),
            ("hot_seller_ratio", config.hot_seller_ratio),
            ("hot_auction_ratio", config.hot_auction_ratio),
            ("hot_bidder_ratio", config.hot_bidder_ratio),
            ("hot_channel_ratio", config.hot_channel_ratio),
        ];
        if let Some((what, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Zero(what));
        }
        if config.out_of_order_group_size.is_multiple_of(OUT_OF_ORDER_PRIME) {
            return Err(ConfigError::GroupSize(config.out_of_order_group_size));
        }
        // Event times stay within i64 for any u64 event number at 1 event/s from here.
        if !(0..=i64::MAX / 4).contains(&config.base_time_ms) {
            return Err(ConfigError::BaseTime(config.base_time_ms));
        }
        let events_for_auctions = config.in_flight_auctions * PROPORTION_DENOMINATOR / AUCTION_PROPORTION;
        Ok(NexmarkGenerator { config, events_for_auctions })
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &NexmarkConfig {
        &self.config
    }

    /// The event number emitted at position `position` of the stream (the out-of-order
    /// permutation; the identity for a group size of 1).
    #[inline]
    #[must_use]
    pub fn event_number(&self, position: u64) -> u64 {
        let g = self.config.out_of_order_group_size;
        if g == 1 {
            return position;
        }
        (position / g) * g + ((position % g) * OUT_OF_ORDER_PRIME) % g
    }

    /// The time of event number `n`, ms since the epoch.
    #[inline]
    #[must_use]
    pub fn timestamp(&self, n: u64) -> i64 {
        let offset = u128::from(n) * 1000 / u128::from(self.config.events_per_sec);
        self.config.base_time_ms.saturating_add(i64::try_from(offset).unwrap_or(i64::MAX))
    }

    /// How far event times can run backwards within the stream: the out-of-orderness a
    /// watermark must allow so that no event is late.
    #[must_use]
    pub fn watermark_bound(&self) -> Duration {
        let g = self.config.out_of_order_group_size;
        let ms = ((g - 1) * 1000).div_ceil(self.config.events_per_sec);
        Duration::from_millis(ms)
    }

    /// The kind of event number `n`.
    #[inline]
    #[must_use]
    pub fn kind(n: u64) -> EventKind {
        let rem = n % PROPORTION_DENOMINATOR;
        if rem < PERSON_PROPORTION {
            EventKind::Person
        } else if rem < PERSON_PROPORTION + AUCTION_PROPORTION {
            EventKind::Auction
        } else {
            EventKind::Bid
        }
    }

    /// The event emitted at position `position` of the stream.
    #[inline]
    #[must_use]
    pub fn event_at(&self, position: u64) -> Event {
        self.event(self.event_number(position))
    }

    /// Event number `n`.
    #[must_use]
    pub fn event(&self, n: u64) -> Event {
        let mut rng = Rng::for_event(self.config.seed, n);
        let time = self.timestamp(n);
        match Self::kind(n) {
            EventKind::Person => Event::Person(Box::new(self.person(n, time, &mut rng))),
            EventKind::Auction => Event::Auction(Box::new(self.auction(n, time, &mut rng))),
            EventKind::Bid => Event::Bid(self.bid(n, time, &mut rng)),
        }
    }

    fn person(&self, n: u64, time: i64, rng: &mut Rng) -> Person {
        let id = last_base0_person(n) + FIRST_PERSON_ID;
        let name = format!(
            "{} {}",
            FIRST_NAMES[rng.below_usize(FIRST_NAMES.len())],
            LAST_NAMES[rng.below_usize(LAST_NAMES.len())]
        );
        let email_address = format!("{}@{}.com", rng.string(7, ' '), rng.string(5, ' '));
        let credit_card = format!(
            "{:04} {:04} {:04} {:04}",
            rng.below(10_000),
            rng.below(10_000),
            rng.below(10_000),
            rng.below(10_000)
        );
        let city = US_CITIES[rng.below_usize(US_CITIES.len())];
        let state = US_STATES[rng.below_usize(US_STATES.len())];
        let size = 8 + name.len() + email_address.len() + credit_card.len() + city.len() + state.len();
        let extra = rng.extra(size, self.config.avg_person_bytes);
        Person { id, name, email_address, credit_card, city, state, date_time: time, extra }
    }

    fn auction(&self, n: u64, time: i64, rng: &mut Rng) -> Auction {
        let id = last_base0_auction(n) + FIRST_AUCTION_ID;
        let item_name = rng.string(20, ' ');
        let description = rng.string(100, ' ');
        let initial_bid = rng.price();
        let reserve = initial_bid + rng.price();
        let horizon = self.timestamp(n + self.events_for_auctions) - time;
        let expires = time + 1 + rng.below(((horizon * 2).max(1)) as u64) as i64;
        let seller = if rng.below(self.config.hot_seller_ratio) > 0 {
            (last_base0_person(n) / HOT_BLOCK) * HOT_BLOCK
        } else {
            self.next_base0_person(n, rng)
        } + FIRST_PERSON_ID;
        let category = FIRST_CATEGORY_ID + rng.below(NUM_CATEGORIES);
        let size = 8 + item_name.len() + description.len() + 8 + 8 + 8 + 8 + 8;
        let extra = rng.extra(size, self.config.avg_auction_bytes);
        Auction { id, item_name, description, initial_bid, reserve, date_time: time, expires, seller, category, extra }
    }

    fn bid(&self, n: u64, time: i64, rng: &mut Rng) -> Bid {
        let auction = if rng.below(self.config.hot_auction_ratio) > 0 {
            (last_base0_auction(n) / HOT_BLOCK) * HOT_BLOCK
        } else {
            self.next_base0_auction(n, rng)
        } + FIRST_AUCTION_ID;
        let bidder = if rng.below(self.config.hot_bidder_ratio) > 0 {
            (last_base0_person(n) / HOT_BLOCK) * HOT_BLOCK + 1
        } else {
            self.next_base0_person(n, rng)
        } + FIRST_PERSON_ID;
        let price = rng.price();
        let channels = channels();
        let (channel, url) = if rng.below(self.config.hot_channel_ratio) > 0 {
            let i = rng.below_usize(HOT_CHANNELS.len());
            (HOT_CHANNELS[i], channels.hot_urls[i].as_str())
        } else {
            let (channel, url) = &channels.others[rng.below_usize(CHANNELS)];
            (channel.as_str(), url.as_str())
        };
        let extra = rng.extra(8 + 8 + 8 + 8, self.config.avg_bid_bytes);
        Bid { auction, bidder, price, channel, url, date_time: time, extra }
    }

    /// A random recent person, base 0: one of the `active_people` newest, or up to
    /// `PERSON_ID_LEAD` past the newest (someone who does not exist yet).
    fn next_base0_person(&self, n: u64, rng: &mut Rng) -> u64 {
        let people = last_base0_person(n) + 1;
        let active = people.min(self.config.active_people);
        people - active + rng.below(active + PERSON_ID_LEAD)
    }

    /// A random recent auction, base 0: one of the `in_flight_auctions` newest, or up to
    /// `AUCTION_ID_LEAD` past the newest.
    fn next_base0_auction(&self, n: u64, rng: &mut Rng) -> u64 {
        let max = last_base0_auction(n);
        let min = max.saturating_sub(self.config.in_flight_auctions);
        min + rng.below(max - min + 1 + AUCTION_ID_LEAD)
    }
}

/// The base-0 id of the newest person at event number `n`.
#[inline]
fn last_base0_person(n: u64) -> u64 {
    // One person per cycle, first in it: the newest is the current cycle's.
    const _: () = assert!(PERSON_PROPORTION == 1);
    n / PROPORTION_DENOMINATOR
}

/// The base-0 id of the newest auction at event number `n` (0 before the first).
#[inline]
fn last_base0_auction(n: u64) -> u64 {
    let epoch = n / PROPORTION_DENOMINATOR;
    let offset = n % PROPORTION_DENOMINATOR;
    if offset < PERSON_PROPORTION {
        // Before this cycle's auctions: the previous cycle's last one.
        (epoch * AUCTION_PROPORTION).saturating_sub(1)
    } else if offset >= PERSON_PROPORTION + AUCTION_PROPORTION {
        epoch * AUCTION_PROPORTION + AUCTION_PROPORTION - 1
    } else {
        epoch * AUCTION_PROPORTION + offset - PERSON_PROPORTION
    }
}

/// The channels and their urls, made once per process from a fixed seed (as the Flink
/// suite's cache of 10 000 channels is made once per process).
struct Channels {
    hot_urls: [String; 4],
    others: Vec<(String, String)>,
}

fn channels() -> &'static Channels {
    static CHANNELS_TABLE: OnceLock<Channels> = OnceLock::new();
    CHANNELS_TABLE.get_or_init(|| {
        let mut rng = Rng::for_event(0x6e65_786d_6172_6b00, 0);
        let hot_urls = std::array::from_fn(|_| rng.base_url());
        let others = (0..CHANNELS)
            .map(|i| {
                let mut url = rng.base_url();
                if rng.below(10) > 0 {
                    url.push_str(&format!("&channel_id={}", (i as i32).reverse_bits().unsigned_abs()));
                }
                (format!("channel-{i}"), url)
            })
            .collect();
        Channels { hot_urls, others }
    })
}

/// Letters padding is cut from: 64 KiB of random lower-case letters, made once per process
/// from a fixed seed.
fn letter_pool() -> &'static str {
    static POOL: OnceLock<String> = OnceLock::new();
    POOL.get_or_init(|| Rng::for_event(0x706f_6f6c, 0).exact_string(1 << 16))
}

/// Words names and descriptions are cut from: 64 KiB of random lower-case letters, one in
/// 13 a space (as [`Rng::string`] makes them one by one), made once per process.
fn spaced_pool() -> &'static str {
    static POOL: OnceLock<String> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut rng = Rng::for_event(0x7370_6163_6573, 0);
        let mut pool = String::with_capacity(1 << 16);
        while pool.len() < 1 << 16 {
            pool.push_str(&rng.string(100, '_').replace('_', " "));
        }
        pool
    })
}

/// The generator's own copy of `text`, if it is a city, state, channel or url it makes:
/// how state holding those as `&'static str` is read back from a checkpoint.
pub(crate) fn interned(text: &str) -> Option<&'static str> {
    static ALL: OnceLock<std::collections::HashSet<&'static str>> = OnceLock::new();
    let all = ALL.get_or_init(|| {
        let channels = channels();
        let fixed = US_CITIES.iter().chain(&US_STATES).chain(&HOT_CHANNELS).copied();
        let hot = channels.hot_urls.iter().map(String::as_str);
        let others = channels.others.iter().flat_map(|(channel, url)| [channel.as_str(), url.as_str()]);
        fixed.chain(hot).chain(others).collect()
    });
    all.get(text).copied()
}

/// The generator's random numbers: wyrand, seeded per event from the run's seed and the
/// event number.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    fn for_event(seed: u64, n: u64) -> Self {
        Rng(splitmix(seed ^ splitmix(n)))
    }

    #[inline]
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        ((t >> 64) as u64) ^ (t as u64)
    }

    /// Uniform in `0..n` (`n > 0`), by multiply-shift.
    #[inline]
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    #[inline]
    fn below_usize(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// Uniform in `[0, 1)`.
    #[inline]
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A price in cents, log-uniform from $1 to $1M.
    #[inline]
    fn price(&mut self) -> u64 {
        // 10^(6u) = e^(6u ln 10).
        ((self.unit() * 6.0 * std::f64::consts::LN_10).exp() * 100.0).round() as u64
    }

    /// 3 to `max - 1` lower-case letters, one in 13 replaced by `special`.
    fn string(&mut self, max: usize, special: char) -> String {
        let len = 3 + self.below_usize(max - 3);
        if special == ' ' {
            let pool = spaced_pool();
            let at = self.below_usize(pool.len() - len + 1);
            return pool[at..at + len].to_owned();
        }
        (0..len).map(|_| if self.below(13) == 0 { special } else { char::from(b'a' + self.below(26) as u8) }).collect()
    }

    /// Exactly `len` lower-case letters, eight per random number: byte `b` becomes letter
    /// `b * 26 / 256`, which favours the first ten letters by 1/256 (the specification only
    /// asks for random letters; this is the hot loop of every bid).
    fn exact_string(&mut self, len: usize) -> String {
        let mut bytes = vec![0u8; len];
        for chunk in bytes.chunks_mut(8) {
            let random = self.next_u64().to_le_bytes();
            for (letter, r) in chunk.iter_mut().zip(random) {
                *letter = b'a' + ((u16::from(r) * 26) >> 8) as u8;
            }
        }
        String::from_utf8(bytes).expect("ASCII letters")
    }

    /// Padding that brings an event of `size` bytes to `average` on average (within 20%).
    fn extra(&mut self, size: usize, average: usize) -> String {
        if size > average {
            return String::new();
        }
        let desired = average - size;
        let delta = (desired as f64 * 0.2).round() as usize;
        let len = desired - delta + if delta == 0 { 0 } else { self.below_usize(2 * delta) };
        let pool = letter_pool();
        if len > pool.len() {
            return self.exact_string(len);
        }
        // A random stretch of a pool of random letters: one copy, where making every
        // letter anew was a third of the generator's time.
        let at = self.below_usize(pool.len() - len + 1);
        pool[at..at + len].to_owned()
    }

    fn base_url(&mut self) -> String {
        format!(
            "https://www.nexmark.com/{}/{}/{}/item.htm?query=1",
            self.string(5, '_'),
            self.string(5, '_'),
            self.string(5, '_')
        )
    }
}

#[inline]
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_mix() {
        // Event 0 is person 0; 1..=3 auctions 0..=2; 4..=49 bids; 50 person 1; 51 auction 3.
        assert_eq!((last_base0_person(0), last_base0_person(49), last_base0_person(50)), (0, 0, 1));
        assert_eq!((last_base0_auction(1), last_base0_auction(3), last_base0_auction(4)), (0, 2, 2));
        assert_eq!((last_base0_auction(50), last_base0_auction(51)), (2, 3));
        assert_eq!(last_base0_auction(0), 0);
    }

    #[test]
    fn the_out_of_order_permutation_stays_in_its_group() {
        let generator = NexmarkGenerator::new(NexmarkConfig { out_of_order_group_size: 10, ..Default::default() })
            .expect("valid config");
        let mut group: Vec<u64> = (20..30).map(|k| generator.event_number(k)).collect();
        assert_ne!(group, (20..30).collect::<Vec<_>>());
        group.sort_unstable();
        assert_eq!(group, (20..30).collect::<Vec<_>>());
    }

    #[test]
    fn bad_settings_are_refused() {
        let bad = |config: NexmarkConfig| NexmarkGenerator::new(config).unwrap_err();
        assert_eq!(bad(NexmarkConfig { events_per_sec: 0, ..Default::default() }), ConfigError::Zero("events_per_sec"));
        assert_eq!(
            bad(NexmarkConfig { out_of_order_group_size: 1906, ..Default::default() }),
            ConfigError::GroupSize(1906)
        );
        assert_eq!(bad(NexmarkConfig { base_time_ms: -1, ..Default::default() }), ConfigError::BaseTime(-1));
    }

    #[test]
    fn strings_have_their_lengths() {
        let mut rng = Rng::for_event(1, 2);
        for _ in 0..100 {
            let s = rng.string(20, ' ');
            assert!((3..20).contains(&s.len()), "{s:?}");
            assert_eq!(rng.exact_string(40).len(), 40);
            let extra = rng.extra(32, 100);
            assert!((54..=82).contains(&extra.len()), "{}", extra.len());
        }
        assert!(rng.extra(120, 100).is_empty());
        let letters: std::collections::BTreeSet<char> = rng.exact_string(10_000).chars().collect();
        assert_eq!(letters, ('a'..='z').collect());
    }
}
