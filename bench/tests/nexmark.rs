//! Nexmark: the generator's properties, and every query on a small generated stream at 1
//! and 2 shards against a reference computed plainly here (loops and maps over the same
//! events), with events in time order and in out-of-order groups. Then the `sluice-bench
//! nexmark` workload with tiny parameters for every query, throughput and latency modes.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex, mpsc},
    task::{Context, Poll, Waker},
    time::Duration,
};

use clap::Parser;
use sluice_bench::{
    nexmark::{
        Auction, Bid, Event, EventKind, FIRST_AUCTION_ID, FIRST_PERSON_ID, NexmarkConfig, NexmarkGenerator,
        NexmarkSource, Person, Query, QueryParams,
        queries::{
            q0, q1,
            q2::{self, Q2Row},
            q3::{self, Q3Row},
            q4::{self, Q4Row},
            q5::{self, Q5Row},
            q7,
            q8::{self, Q8Row},
            q11::{self, Q11Row},
            q14::{self, Q14Row},
            q17::{self, Q17Row},
            q21::{self, Q21Row},
            q22::{self, Q22Row},
        },
    },
    workloads::nexmark::{self as workload, NexmarkArgs},
};
use sluice_engine::dataflow::{Pipeline, PipelineConfig, Source, Stream};

/// Events in each query test: 6 s of event time at 1000 events/s.
const EVENTS: u64 = 6000;
const RATE: u64 = 1000;

const PARAMS: QueryParams = QueryParams { window_ms: 2000, slide_ms: 500, session_gap_ms: 50, day_ms: 1000 };

fn config(group: u64) -> NexmarkConfig {
    NexmarkConfig { seed: 7, events_per_sec: RATE, out_of_order_group_size: group, ..NexmarkConfig::default() }
}

fn generator(group: u64) -> NexmarkGenerator {
    NexmarkGenerator::new(config(group)).expect("valid config")
}

/// The stream the pipeline sees, in emission order.
fn all_events(generator: &NexmarkGenerator, events: u64) -> Vec<Event> {
    (0..events).map(|k| generator.event_at(k)).collect()
}

fn bids(events: &[Event]) -> impl Iterator<Item = &Bid> {
    events.iter().filter_map(Event::as_bid)
}

fn people(events: &[Event]) -> impl Iterator<Item = &Person> {
    events.iter().filter_map(|e| if let Event::Person(p) = e { Some(&**p) } else { None })
}

fn auctions(events: &[Event]) -> impl Iterator<Item = &Auction> {
    events.iter().filter_map(|e| if let Event::Auction(a) = e { Some(&**a) } else { None })
}

/// How long one tiny run may take before the test fails rather than hang (a debug run
/// takes well under a second).
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// Runs `f` on its own thread and returns what it returns, failing the test if it has not
/// finished within [`RUN_LIMIT`]: a pipeline that never ends fails CI quickly and says
/// which run it was.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    match result.recv_timeout(RUN_LIMIT) {
        Ok(value) => value,
        Err(_) => panic!("{what}: did not finish within {RUN_LIMIT:?}"),
    }
}

/// Runs `query` over the first `events` events on `shards` shards; every result with its
/// event time.
fn run<T: Send + 'static>(
    shards: usize,
    group: u64,
    events: u64,
    query: impl Fn(Stream<Event>) -> Stream<T> + Send + Sync + 'static,
) -> Vec<(i64, T)> {
    within(&format!("a pipeline of {events} events on {shards} shards, groups of {group}"), move || {
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        let generator = generator(group);
        Pipeline::new(PipelineConfig { batch_records: 64, ..PipelineConfig::with_shards(shards) })
            .run(move |scope| {
                let sink = sink.clone();
                query(NexmarkSource::stream(scope, generator, events, None))
                    .for_each(move |e| sink.lock().unwrap().push((e.time.millis(), e.value)));
            })
            .expect("pipeline runs");
        Arc::try_unwrap(out).ok().expect("pipeline finished").into_inner().unwrap()
    })
}

/// Each case: (shards, out-of-order group size).
const CASES: [(usize, u64); 3] = [(1, 1), (2, 1), (2, 37)];

fn bid_tuple(b: &Bid) -> (i64, u64, u64, u64, &'static str, &'static str, String) {
    (b.date_time, b.auction, b.bidder, b.price, b.channel, b.url, b.extra.clone())
}

fn window_of(time: i64, size: i64) -> i64 {
    time - time.rem_euclid(size)
}

// ---- the generator ----

#[test]
fn the_mix_is_one_person_three_auctions_and_46_bids_in_every_50() {
    for group in [1, 10, 50] {
        let generator = generator(group);
        let mut counts = HashMap::new();
        for k in 0..50_000 {
            let kind = match generator.event_at(k) {
                Event::Person(_) => EventKind::Person,
                Event::Auction(_) => EventKind::Auction,
                Event::Bid(_) => EventKind::Bid,
            };
            assert_eq!(kind, NexmarkGenerator::kind(generator.event_number(k)));
            *counts.entry(kind).or_insert(0) += 1;
        }
        assert_eq!(
            (counts[&EventKind::Person], counts[&EventKind::Auction], counts[&EventKind::Bid]),
            (1000, 3000, 46_000),
            "group size {group}"
        );
    }
}

#[test]
fn the_same_seed_makes_the_same_stream_and_another_seed_another() {
    let a = all_events(&generator(1), 2000);
    assert_eq!(a, all_events(&generator(1), 2000));
    let other = NexmarkGenerator::new(NexmarkConfig { seed: 8, ..config(1) }).unwrap();
    let b = all_events(&other, 2000);
    assert_eq!(a.len(), b.len());
    let differ = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    assert!(differ > 1900, "only {differ} of 2000 events differ between seeds");
    // Ids and times depend on the event number only.
    assert!(a.iter().zip(&b).all(|(x, y)| x.date_time() == y.date_time()));
}

#[test]
fn shards_make_disjoint_slices_that_together_are_the_stream() {
    for (shards, group) in [(1, 1), (2, 1), (3, 7), (4, 50)] {
        let generator = generator(group);
        let mut by_position: BTreeMap<u64, Event> = BTreeMap::new();
        for shard in 0..shards {
            let mut source = NexmarkSource::new(generator, shard, shards, 1001);
            let mut cx = Context::from_waker(Waker::noop());
            let mut k = shard as u64;
            loop {
                let mut out = Vec::new();
                match source.poll_next(&mut cx, &mut out, 100) {
                    Poll::Ready(Some(0)) => {}
                    Poll::Ready(None) => break,
                    other => panic!("an unpaced source is always ready with split 0, got {other:?}"),
                }
                assert!(out.len() <= 100);
                for event in out {
                    assert!(by_position.insert(k, event).is_none(), "position {k} made twice");
                    k += shards as u64;
                }
            }
        }
        let all: Vec<Event> = by_position.into_values().collect();
        assert_eq!(all, all_events(&generator, 1001), "{shards} shards, group {group}");
    }
}

#[test]
fn fields_follow_the_specification() {
    let generator = generator(1);
    let events = all_events(&generator, 50_000);
    // Ids are dense and in order.
    let person_ids: Vec<u64> = people(&events).map(|p| p.id).collect();
    assert_eq!(person_ids, (FIRST_PERSON_ID..FIRST_PERSON_ID + 1000).collect::<Vec<_>>());
    let auction_ids: Vec<u64> = auctions(&events).map(|a| a.id).collect();
    assert_eq!(auction_ids, (FIRST_AUCTION_ID..FIRST_AUCTION_ID + 3000).collect::<Vec<_>>());
    // Time advances at the rate: event n at base + n ms.
    for (n, e) in events.iter().enumerate() {
        assert_eq!(e.date_time(), config(1).base_time_ms + n as i64);
    }
    // Hot auctions (the first of each block of 100 ids) get about half the bids, hot
    // bidders about three quarters, hot sellers about three quarters of the auctions.
    let all_bids: Vec<&Bid> = bids(&events).collect();
    let share = |n: usize| n as f64 / all_bids.len() as f64;
    let hot_auctions = share(all_bids.iter().filter(|b| (b.auction - FIRST_AUCTION_ID).is_multiple_of(100)).count());
    let hot_bidders = share(all_bids.iter().filter(|b| (b.bidder - FIRST_PERSON_ID) % 100 == 1).count());
    assert!((0.48..0.56).contains(&hot_auctions), "{hot_auctions}");
    assert!((0.73..0.78).contains(&hot_bidders), "{hot_bidders}");
    let hot_sellers =
        auctions(&events).filter(|a| (a.seller - FIRST_PERSON_ID).is_multiple_of(100)).count() as f64 / 3000.0;
    assert!((0.72..0.80).contains(&hot_sellers), "{hot_sellers}");
    // Bids are on auctions that exist or are about to, by people who exist or are about to.
    for b in &all_bids {
        assert!(b.auction < FIRST_AUCTION_ID + 3000 + 10 && b.bidder < FIRST_PERSON_ID + 1000 + 10);
        assert!((100..=100_000_000).contains(&b.price), "{}", b.price);
    }
    // Half the bids from the four hot channels.
    let hot_channels = share(all_bids.iter().filter(|b| !b.channel.starts_with("channel-")).count());
    assert!((0.47..0.53).contains(&hot_channels), "{hot_channels}");
    for a in auctions(&events) {
        assert!((10..15).contains(&a.category) && a.expires > a.date_time && a.reserve > a.initial_bid);
    }
    for p in people(&events) {
        assert!(["AZ", "CA", "ID", "OR", "WA", "WY"].contains(&p.state));
        assert_eq!(p.credit_card.len(), 19);
        assert!(p.email_address.ends_with(".com") && p.email_address.contains('@'));
    }
    // Average sizes near the specification's (100 bytes a bid, counting 8 per number).
    let bid_bytes = all_bids.iter().map(|b| 32 + b.extra.len()).sum::<usize>() as f64 / all_bids.len() as f64;
    assert!((95.0..105.0).contains(&bid_bytes), "{bid_bytes}");
}

#[test]
fn out_of_order_groups_stay_within_the_watermark_bound() {
    let generator = generator(37);
    let bound = generator.watermark_bound().as_millis() as i64;
    assert_eq!(bound, 36);
    let events = all_events(&generator, 10_000);
    let mut max_seen = i64::MIN;
    let mut out_of_order = 0;
    for e in &events {
        let t = e.date_time();
        // The watermark after the events so far is max - bound - 1: never reaches t.
        assert!(t > max_seen.saturating_sub(bound + 1), "event at {t} late after {max_seen}");
        out_of_order += usize::from(t < max_seen);
        max_seen = max_seen.max(t);
    }
    assert!(out_of_order > 1000, "{out_of_order}");
}

// ---- the queries ----

#[test]
fn q0_passes_every_bid_through() {
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        let mut got: Vec<_> = run(shards, group, EVENTS, q0::query).iter().map(|(_, b)| bid_tuple(b)).collect();
        let mut expected: Vec<_> = bids(&events).map(bid_tuple).collect();
        got.sort();
        expected.sort();
        assert_eq!(got, expected);
    }
}

#[test]
fn q1_converts_every_price() {
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        let mut got: Vec<_> = run(shards, group, EVENTS, q1::query).iter().map(|(_, b)| bid_tuple(b)).collect();
        let mut expected: Vec<_> = bids(&events)
            .map(|b| {
                let mut b = b.clone();
                b.price = (b.price as u128 * 908 / 1000) as u64;
                bid_tuple(&b)
            })
            .collect();
        got.sort();
        expected.sort();
        assert_eq!(got, expected);
    }
}

#[test]
fn q2_selects_the_bids_on_every_123rd_auction() {
    // More events, so that some auction ids are multiples of 123.
    for (shards, group) in CASES {
        let events = all_events(&generator(group), 20_000);
        let mut got: Vec<Q2Row> = run(shards, group, 20_000, q2::query).into_iter().map(|(_, r)| r).collect();
        let mut expected: Vec<Q2Row> = bids(&events)
            .filter(|b| b.auction.is_multiple_of(123))
            .map(|b| Q2Row { auction: b.auction, price: b.price })
            .collect();
        got.sort();
        expected.sort();
        assert!(!expected.is_empty());
        assert_eq!(got, expected);
    }
}

#[test]
fn q3_joins_sellers_in_three_states_with_their_category_10_auctions() {
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        let sellers: HashMap<u64, &Person> = people(&events).map(|p| (p.id, p)).collect();
        let mut expected = Vec::new();
        for a in auctions(&events).filter(|a| a.category == 10) {
            if let Some(p) = sellers.get(&a.seller)
                && ["OR", "ID", "CA"].contains(&p.state)
            {
                expected.push(Q3Row { name: p.name.clone(), city: p.city, state: p.state, auction: a.id });
            }
        }
        let mut got: Vec<Q3Row> = run(shards, group, EVENTS, q3::query).into_iter().map(|(_, r)| r).collect();
        got.sort();
        expected.sort();
        assert!(!expected.is_empty());
        assert_eq!(got, expected);
    }
}

#[test]
fn q4_averages_the_closing_prices_of_each_category() {
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        // The highest bid on each auction while it was open.
        let mut finals: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for a in auctions(&events) {
            let highest = bids(&events)
                .filter(|b| b.auction == a.id && a.date_time <= b.date_time && b.date_time <= a.expires)
                .map(|b| b.price)
                .max();
            if let Some(price) = highest {
                finals.entry(a.category).or_default().push(price);
            }
        }
        let got = run(shards, group, EVENTS, q4::query);
        // One update per closed auction, counting up, the last one the average of all.
        let mut per_category: BTreeMap<u64, Vec<Q4Row>> = BTreeMap::new();
        for (_, row) in got {
            per_category.entry(row.category).or_default().push(row);
        }
        assert_eq!(per_category.keys().collect::<Vec<_>>(), finals.keys().collect::<Vec<_>>());
        for (category, prices) in &finals {
            let rows = &per_category[category];
            assert_eq!(
                rows.iter().map(|r| r.closed).collect::<Vec<_>>(),
                (1..=prices.len() as u64).collect::<Vec<_>>()
            );
            let average = prices.iter().sum::<u64>() / prices.len() as u64;
            assert_eq!(rows.last().unwrap().average_price, average, "category {category}");
        }
        assert!(finals.values().map(Vec::len).sum::<usize>() > 50);
    }
}

#[test]
fn q5_finds_the_auctions_with_the_most_bids_in_each_sliding_window() {
    let (size, slide) = (PARAMS.window_ms, PARAMS.slide_ms);
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        let mut counts: BTreeMap<i64, HashMap<u64, u64>> = BTreeMap::new();
        for b in bids(&events) {
            let mut start = window_of(b.date_time, slide);
            while start > b.date_time - size {
                *counts.entry(start).or_default().entry(b.auction).or_default() += 1;
                start -= slide;
            }
        }
        let mut expected = Vec::new();
        for (start, per_auction) in &counts {
            let most = per_auction.values().copied().max().unwrap();
            for (auction, n) in per_auction {
                if *n == most {
                    expected.push((start + size - 1, Q5Row { window_start: *start, auction: *auction, bids: most }));
                }
            }
        }
        let mut got = run(shards, group, EVENTS, |e| q5::query(e, &PARAMS));
        got.sort();
        expected.sort();
        assert_eq!(got, expected);
    }
}

#[test]
fn q7_finds_the_highest_bids_of_each_tumbling_window() {
    let size = PARAMS.window_ms;
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        let mut highest: BTreeMap<i64, u64> = BTreeMap::new();
        for b in bids(&events) {
            let h = highest.entry(window_of(b.date_time, size)).or_default();
            *h = (*h).max(b.price);
        }
        let mut expected: Vec<_> = bids(&events)
            .filter(|b| highest[&window_of(b.date_time, size)] == b.price)
            .map(|b| (window_of(b.date_time, size) + size - 1, bid_tuple(b)))
            .collect();
        let mut got: Vec<_> = run(shards, group, EVENTS, |e| q7::query(e, &PARAMS))
            .into_iter()
            .map(|(t, b)| (t, bid_tuple(&b)))
            .collect();
        got.sort();
        expected.sort();
        assert_eq!(got, expected);
    }
}

#[test]
fn q8_finds_people_who_sell_in_the_window_they_registered() {
    let size = PARAMS.window_ms;
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        let sold: BTreeSet<(u64, i64)> = auctions(&events).map(|a| (a.seller, window_of(a.date_time, size))).collect();
        let mut expected: Vec<_> = people(&events)
            .filter(|p| sold.contains(&(p.id, window_of(p.date_time, size))))
            .map(|p| {
                let start = window_of(p.date_time, size);
                (start + size - 1, Q8Row { id: p.id, name: p.name.clone(), window_start: start })
            })
            .collect();
        let mut got = run(shards, group, EVENTS, |e| q8::query(e, &PARAMS));
        got.sort();
        expected.sort();
        assert!(!expected.is_empty());
        assert_eq!(got, expected);
    }
}

#[test]
fn q11_counts_the_bids_of_each_bidders_sessions() {
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        let mut times: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
        for b in bids(&events) {
            times.entry(b.bidder).or_default().push(b.date_time);
        }
        times.values_mut().for_each(|t| t.sort_unstable());
        // Two bids exactly a gap apart may or may not share a session, depending on
        // whether the first session fired before the second bid arrived (as in Flink):
        // pick a gap no two consecutive bids of a bidder are apart by.
        let gap = (PARAMS.session_gap_ms..)
            .find(|gap| times.values().all(|t| t.windows(2).all(|w| w[1] - w[0] != *gap)))
            .unwrap();
        let params = QueryParams { session_gap_ms: gap, ..PARAMS };
        let mut expected = Vec::new();
        for (bidder, t) in &times {
            let mut start = 0;
            for i in 1..=t.len() {
                if i == t.len() || t[i] - t[i - 1] > gap {
                    let row =
                        Q11Row { bidder: *bidder, bids: (i - start) as u64, start: t[start], end: t[i - 1] + gap };
                    expected.push((row.end - 1, row));
                    start = i;
                }
            }
        }
        let mut got = run(shards, group, EVENTS, move |e| q11::query(e, &params));
        got.sort();
        expected.sort();
        assert_eq!(got, expected);
    }
}

#[test]
fn q14_filters_and_labels_bids() {
    for (shards, group) in CASES {
        let events = all_events(&generator(group), 20_000);
        let mut expected = Vec::new();
        for b in bids(&events) {
            let price = b.price * 908 / 1000;
            if price <= 1_000_000 || price >= 50_000_000 {
                continue;
            }
            let hour = b.date_time / 1000 / 60 / 60 % 24;
            let kind = if (8..=18).contains(&hour) {
                "dayTime"
            } else if hour <= 6 || hour >= 20 {
                "nightTime"
            } else {
                "otherTime"
            };
            let c_counts = b.extra.chars().filter(|c| *c == 'c').count() as u64;
            expected.push(Q14Row {
                auction: b.auction,
                bidder: b.bidder,
                price,
                bid_time_type: kind,
                date_time: b.date_time,
                c_counts,
            });
        }
        let mut got: Vec<Q14Row> = run(shards, group, 20_000, q14::query).into_iter().map(|(_, r)| r).collect();
        got.sort();
        expected.sort();
        assert!(!expected.is_empty());
        assert_eq!(got, expected);
    }
}

#[test]
fn q14_labels_the_hours_of_the_day() {
    let hour = 3_600_000;
    let labels: Vec<&str> = (0..24).map(|h| q14::bid_time_type(h * hour + 5)).collect();
    assert_eq!(&labels[..8], ["nightTime"; 7].iter().copied().chain(["otherTime"]).collect::<Vec<_>>());
    assert_eq!(&labels[8..19], ["dayTime"; 11]);
    assert_eq!(&labels[19..], ["otherTime", "nightTime", "nightTime", "nightTime", "nightTime"]);
}

#[test]
fn q17_sums_up_each_auctions_day() {
    let day = PARAMS.day_ms;
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        let mut per: BTreeMap<(u64, i64), Vec<u64>> = BTreeMap::new();
        for b in bids(&events) {
            per.entry((b.auction, window_of(b.date_time, day))).or_default().push(b.price);
        }
        let mut expected: Vec<_> = per
            .iter()
            .map(|(&(auction, start), prices)| {
                let n = prices.len() as u64;
                let sum: u64 = prices.iter().sum();
                let row = Q17Row {
                    auction,
                    day: start,
                    total_bids: n,
                    rank1_bids: prices.iter().filter(|p| **p < 10_000).count() as u64,
                    rank2_bids: prices.iter().filter(|p| (10_000..1_000_000).contains(*p)).count() as u64,
                    rank3_bids: prices.iter().filter(|p| **p >= 1_000_000).count() as u64,
                    min_price: *prices.iter().min().unwrap(),
                    max_price: *prices.iter().max().unwrap(),
                    avg_price: sum / n,
                    sum_price: sum,
                };
                (start + day - 1, row)
            })
            .collect();
        let mut got = run(shards, group, EVENTS, |e| q17::query(e, &PARAMS));
        got.sort();
        expected.sort();
        assert_eq!(got, expected);
    }
}

#[test]
fn q21_extracts_channel_ids() {
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        let mut expected = Vec::new();
        for b in bids(&events) {
            let id = match b.channel.to_lowercase().as_str() {
                "apple" => Some("0"),
                "google" => Some("1"),
                "facebook" => Some("2"),
                "baidu" => Some("3"),
                _ => b.url.split('&').find_map(|part| part.strip_prefix("channel_id=")),
            };
            if let Some(channel_id) = id {
                expected.push(Q21Row {
                    auction: b.auction,
                    bidder: b.bidder,
                    price: b.price,
                    channel: b.channel,
                    channel_id,
                });
            }
        }
        let mut got: Vec<Q21Row> = run(shards, group, EVENTS, q21::query).into_iter().map(|(_, r)| r).collect();
        got.sort();
        expected.sort();
        let numbered = expected.iter().filter(|r| r.channel.starts_with("channel-")).count();
        assert!(numbered > 100 && numbered < expected.len(), "{numbered} of {}", expected.len());
        assert_eq!(got, expected);
    }
}

#[test]
fn q22_splits_urls() {
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        let mut expected: Vec<Q22Row> = bids(&events)
            .map(|b| {
                let parts: Vec<&'static str> = b.url.split('/').collect();
                let dir = |i: usize| parts.get(i).copied().unwrap_or("");
                Q22Row {
                    auction: b.auction,
                    bidder: b.bidder,
                    price: b.price,
                    channel: b.channel,
                    dirs: [dir(3), dir(4), dir(5)],
                }
            })
            .collect();
        let mut got: Vec<Q22Row> = run(shards, group, EVENTS, q22::query).into_iter().map(|(_, r)| r).collect();
        got.sort();
        expected.sort();
        assert!(expected.iter().all(|r| r.dirs.iter().all(|d| !d.is_empty())));
        assert_eq!(got, expected);
    }
}

// ---- the workload ----

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: NexmarkArgs,
}

fn args(line: &[&str]) -> NexmarkArgs {
    Cli::try_parse_from(std::iter::once("nexmark").chain(line.iter().copied())).expect("valid arguments").args
}

#[test]
fn the_workload_runs_every_query_with_tiny_parameters() {
    for &query in Query::ALL {
        for shards in ["1", "2"] {
            let line = [
                "--query",
                query.name(),
                "--events",
                "3000",
                "--shards",
                shards,
                "--event-rate",
                "1000",
                "--window-ms",
                "500",
                "--slide-ms",
                "100",
                "--latency-seconds",
                "0",
            ];
            let args = args(&line);
            let report = within(&format!("sluice-bench nexmark {line:?}"), move || workload::run(&args))
                .expect("nexmark workload");
            assert_eq!((report.workload, report.query, report.events), ("nexmark", query, 3000));
            assert_eq!(report.shards.to_string(), shards);
            assert!(report.events_per_sec > 0.0, "{report:?}");
            assert_eq!(report.latency_us, None);
            if ["q0", "q1", "q22"].contains(&query.name()) {
                // One result per bid.
                assert_eq!(report.results, 3000 / 50 * 46, "{query}");
            }
            let json = serde_json::to_value(&report).unwrap();
            for field in ["workload", "query", "shards", "events", "events_per_sec", "latency_us"] {
                assert!(json.get(field).is_some(), "{field} missing from {json}");
            }
            assert_eq!(json["query"], query.name());
        }
    }
}

#[test]
fn the_latency_mode_measures_from_the_schedule() {
    // 20 000 events/s for a quarter of a second; q7's 100 ms windows each wait for the
    // watermark to pass their end, q0's results each for their own bid.
    for query in ["q0", "q7"] {
        let line = ["--query", query, "--events", "5000", "--rate", "20000", "--shards", "2", "--window-ms", "100"];
        let args = args(&line);
        let report =
            within(&format!("sluice-bench nexmark {line:?}"), move || workload::run(&args)).expect("latency run");
        let latency = report.latency_us.expect("a latency summary");
        // Every result is either measured or was fired early by the end of the input (q7's
        // last window); per-event results are never early.
        let incomplete = report.incomplete_results.expect("counted in the latency mode");
        assert_eq!(latency.count + incomplete, report.results);
        if query == "q0" {
            assert_eq!(incomplete, 0);
        }
        assert!(report.results > 0);
        assert!(latency.p50 <= latency.p99 && latency.p99 <= latency.p999 && latency.p999 <= latency.max);
        // The run cannot beat its schedule: 5000 events at 20 000/s take 250 ms.
        assert!(report.events_per_sec < 20_000.0 * 1.05, "{report:?}");
        let json = serde_json::to_value(&report).unwrap();
        for field in ["p50", "p99", "p999", "max"] {
            assert!(json["latency_us"].get(field).is_some(), "{json}");
        }
    }
}

#[test]
fn the_throughput_mode_follows_with_a_latency_phase() {
    let line = ["--query", "q2", "--events", "20000", "--latency-seconds", "0.2"];
    let args = args(&line);
    let report = within(&format!("sluice-bench nexmark {line:?}"), move || workload::run(&args)).expect("run");
    let rate = report.latency_rate.expect("a latency phase");
    assert_eq!(rate, ((report.events_per_sec / 2.0) as u64).max(1));
    assert!(report.latency_us.is_some());
    let table = report.table().to_string();
    assert!(table.contains("result latency p99") && table.contains("per shard"), "{table}");
}

#[test]
fn scaling_runs_one_shard_and_n_alternately() {
    for query in ["q5", "q7"] {
        let line = ["--query", query, "--events", "20000", "--window-ms", "500", "--slide-ms", "100"];
        let more = ["--latency-seconds", "0", "--scaling", "--shards", "2", "--rounds", "2"];
        let args = args(&[&line[..], &more].concat());
        let report = within(&format!("sluice-bench nexmark {line:?}"), move || workload::run(&args)).expect("run");
        let scaling = &report.scaling;
        assert_eq!((report.shards, report.rounds, scaling.scaling_shards), (2, 2, Some(2)), "{report:?}");
        assert_eq!((report.round_events_per_sec.len(), scaling.round_single_shard_events_per_sec.len()), (2, 2));
        let one = scaling.single_shard_events_per_sec.expect("a one-shard figure");
        assert_eq!(scaling.scaling_efficiency, Some(report.events_per_sec / (2.0 * one)));
        assert!(scaling.round_scaling_efficiency.iter().all(|e| *e > 0.0), "{scaling:?}");
        assert!(serde_json::to_value(&report).unwrap()["scaling_efficiency"].is_number());
        assert!(report.table().to_string().contains("scaling efficiency, 1 -> 2 shards"));
    }
    // N is --shards, or the CPU count; --scaling to one shard, or beside --rate, is refused.
    let cores = core_affinity::get_core_ids().map_or(1, |ids| ids.len().max(1));
    let scaling = args(&["--query", "q7", "--scaling"]);
    assert_eq!((scaling.shards(), scaling.rounds()), (cores, 3));
    assert_eq!((args(&["--query", "q7"]).shards(), args(&["--query", "q7"]).rounds()), (1, 1));
    let one = ["--query", "q7", "--events", "100", "--latency-seconds", "0", "--scaling", "--shards", "1"];
    assert!(workload::run(&args(&one)).unwrap_err().to_string().contains("--shards 2 or more"));
    let paced = ["--query", "q7", "--events", "100", "--rate", "1000", "--scaling", "--shards", "2"];
    assert!(workload::run(&args(&paced)).unwrap_err().to_string().contains("without --rate"));
}

#[test]
fn bad_options_are_refused() {
    let line = ["--query", "q5", "--events", "100", "--window-ms", "100", "--slide-ms", "200"];
    assert!(workload::run(&args(&line)).is_err());
    assert!(
        Cli::try_parse_from(["nexmark", "--query", "q10"]).is_err(),
        "q10 writes to a file system: not a query here"
    );
    assert!(Cli::try_parse_from(["nexmark", "--query", "q1", "--events", "0"]).is_err());
}

// ---- q6, q9, q15, q16, q20 ----

use sluice_bench::nexmark::queries::{
    q6::{self, Q6_AUCTIONS, Q6Row},
    q9::{self, AuctionTerms, Q9Row},
    q15::{self, DayCounts, Q15Row, price_rank},
    q16::{self, Q16Row},
    q20::{self, Q20Row},
};

/// q9 computed plainly: each auction with its best valid bid (highest price, then
/// earliest, then lowest bidder id), at its closing time.
fn winning_bids(events: &[Event]) -> Vec<(i64, Q9Row)> {
    let mut out = Vec::new();
    for a in auctions(events) {
        let best = bids(events)
            .filter(|b| b.auction == a.id && a.date_time <= b.date_time && b.date_time <= a.expires)
            .max_by_key(|b| (b.price, std::cmp::Reverse(b.date_time), std::cmp::Reverse(b.bidder)));
        if let Some(b) = best {
            out.push((
                a.expires,
                Q9Row { auction: AuctionTerms::of(a), bidder: b.bidder, price: b.price, bid_date_time: b.date_time },
            ));
        }
    }
    out.sort();
    out
}

#[test]
fn q9_finds_each_auctions_winning_bid_when_it_closes() {
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        let expected = winning_bids(&events);
        let mut got = run(shards, group, EVENTS, q9::query);
        got.sort();
        assert_eq!(got, expected, "{shards} shards, groups of {group}");
        assert!(expected.len() > 50, "only {} auctions with bids", expected.len());
    }
}

#[test]
fn q6_averages_each_sellers_last_ten_closing_prices() {
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        let mut per_seller: BTreeMap<u64, Vec<(i64, u64, u64)>> = BTreeMap::new();
        for (_, row) in winning_bids(&events) {
            per_seller.entry(row.auction.seller).or_default().push((row.auction.expires, row.auction.id, row.price));
        }
        let mut expected = Vec::new();
        for (seller, mut closed) in per_seller {
            closed.sort();
            for (i, &(expires, auction, _)) in closed.iter().enumerate() {
                let last = &closed[(i + 1).saturating_sub(Q6_AUCTIONS)..=i];
                let average_price = last.iter().map(|c| c.2).sum::<u64>() / last.len() as u64;
                expected.push((expires, Q6Row { seller, auction, average_price }));
            }
        }
        expected.sort();
        let mut got = run(shards, group, EVENTS, q6::query);
        got.sort();
        assert_eq!(got, expected, "{shards} shards, groups of {group}");
        assert!(expected.iter().any(|(_, r)| expected.iter().filter(|(_, o)| o.seller == r.seller).count() > 1));
    }
}

/// q15's and q16's counts of a set of bids.
fn day_counts(bids: &[&Bid]) -> DayCounts {
    let mut counts = DayCounts { bids: [0; 4], bidders: [0; 4], auctions: [0; 4] };
    for slot in 0..4 {
        let of = bids.iter().filter(|b| slot == 0 || price_rank(b.price) == slot - 1);
        counts.bids[slot] = of.clone().count() as u64;
        counts.bidders[slot] = of.clone().map(|b| b.bidder).collect::<BTreeSet<_>>().len() as u64;
        counts.auctions[slot] = of.map(|b| b.auction).collect::<BTreeSet<_>>().len() as u64;
    }
    counts
}

#[test]
fn q15_reports_each_days_bids_bidders_and_auctions_per_price_rank() {
    let day = PARAMS.day_ms;
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        let days: BTreeSet<i64> = bids(&events).map(|b| window_of(b.date_time, day)).collect();
        let mut expected: Vec<(i64, Q15Row)> = days
            .into_iter()
            .map(|start| {
                let of: Vec<&Bid> = bids(&events).filter(|b| window_of(b.date_time, day) == start).collect();
                (start + day - 1, Q15Row { day: start, counts: day_counts(&of) })
            })
            .collect();
        expected.sort();
        let mut got = run(shards, group, EVENTS, |e| q15::query(e, &PARAMS));
        got.sort();
        assert_eq!(got, expected, "{shards} shards, groups of {group}");
        assert!(
            expected.iter().all(|(_, r)| r.counts.bids[1] + r.counts.bids[2] + r.counts.bids[3] == r.counts.bids[0])
        );
    }
}

#[test]
fn q16_reports_each_channels_day() {
    // A day of a minute and a half, so that the latest minute varies.
    let params = QueryParams { day_ms: 90_000, ..PARAMS };
    let day = params.day_ms;
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        let keys: BTreeSet<(&'static str, i64)> =
            bids(&events).map(|b| (b.channel, window_of(b.date_time, day))).collect();
        let mut expected: Vec<(i64, Q16Row)> = keys
            .into_iter()
            .map(|(channel, start)| {
                let of: Vec<&Bid> =
                    bids(&events).filter(|b| b.channel == channel && window_of(b.date_time, day) == start).collect();
                let minute = of.iter().map(|b| b.date_time.rem_euclid(day) / 60_000).max().unwrap();
                (start + day - 1, Q16Row { channel, day: start, minute, counts: day_counts(&of) })
            })
            .collect();
        expected.sort();
        let mut got = run(shards, group, EVENTS, move |e| q16::query(e, &params));
        got.sort();
        assert_eq!(got, expected, "{shards} shards, groups of {group}");
        assert!(expected.iter().map(|(_, r)| r.channel).collect::<BTreeSet<_>>().len() > 4);
    }
}

#[test]
fn q20_expands_each_bid_on_a_category_10_auction() {
    for (shards, group) in CASES {
        let events = all_events(&generator(group), EVENTS);
        let category_10: HashMap<u64, &Auction> =
            auctions(&events).filter(|a| a.category == 10).map(|a| (a.id, a)).collect();
        let mut expected: Vec<Q20Row> = bids(&events)
            .filter_map(|b| {
                let a = category_10.get(&b.auction)?;
                Some(Q20Row {
                    auction: AuctionTerms::of(a),
                    item_name: a.item_name.clone(),
                    bidder: b.bidder,
                    price: b.price,
                    channel: b.channel,
                    bid_date_time: b.date_time,
                })
            })
            .collect();
        expected.sort();
        let mut got: Vec<Q20Row> = run(shards, group, EVENTS, q20::query).into_iter().map(|(_, r)| r).collect();
        got.sort();
        assert_eq!(got, expected, "{shards} shards, groups of {group}");
        assert!(expected.len() > 50, "only {} joined bids", expected.len());
    }
}
