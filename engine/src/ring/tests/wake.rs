//! Wake-ups across threads: two glommio executors on two threads, rings of capacity 1 or
//! 2, so that nearly every message makes one side wait. A lost wake-up leaves a side
//! parked forever, which [`on_executors`] turns into a failure once nothing moves.

use std::time::Duration;

use super::{config, on_executors, one, record};
use crate::ring::{Receiver, RingConfig, Sender, channel};

/// Messages of the main ping-pong: with no spin, each costs a park and a foreign wake-up
/// on both sides (~5-10 s in a debug build on 2 vCPUs).
const MESSAGES: u64 = 100_000;
/// Messages of each variant (other capacities and spins), fewer to keep the suite short.
const VARIANT_MESSAGES: u64 = 20_000;

/// The spins worth testing: none (every wait parks), one so short that the race between
/// the end of the spin and a push is hit often, and the default.
const SPINS: [Duration; 3] = [Duration::ZERO, Duration::from_micros(1), RingConfig::DEFAULT_SPIN_BEFORE_PARK];

enum End {
    Pinger(Sender<u64>, Receiver<u64>),
    Ponger(Sender<u64>, Receiver<u64>),
}

/// The pinger sends bursts of `2 * capacity + 1` messages (the most that cannot deadlock
/// two sides that both send before they receive), then reads their echoes; the ponger
/// echoes each message as it arrives. Both sides find their outgoing ring full and their
/// incoming ring empty many times per burst.
fn ping_pong(messages: u64, capacity: usize, spin: Duration) {
    let (ping_tx, ping_rx) = channel::<u64>(config(capacity, spin));
    let (pong_tx, pong_rx) = channel::<u64>(config(capacity, spin));
    let burst = 2 * capacity as u64 + 1;
    let ends = vec![End::Pinger(ping_tx, pong_rx), End::Ponger(pong_tx, ping_rx)];
    let what = format!("ping-pong of {messages} messages, capacity {capacity}, spin {spin:?}");
    let counts = on_executors(&what, ends, move |_, end, progress| async move {
        match end {
            End::Pinger(mut tx, mut rx) => {
                let mut sent = 0;
                while sent < messages {
                    let end = (sent + burst).min(messages);
                    for n in sent..end {
                        tx.send(one(n)).await.expect("ponger alive");
                    }
                    for n in sent..end {
                        assert_eq!(record(rx.recv().await.expect("ponger alive")), n, "echo out of order");
                        progress.tick();
                    }
                    sent = end;
                }
                sent
            }
            End::Ponger(mut tx, mut rx) => {
                let mut echoed = 0;
                while let Some(message) = rx.recv().await {
                    progress.tick();
                    assert_eq!(record(message.clone()), echoed, "ping out of order");
                    tx.send(message).await.expect("pinger alive");
                    echoed += 1;
                }
                echoed
            }
        }
    });
    assert_eq!(counts, [messages, messages]);
}

#[test]
fn ping_pong_of_1e5_messages_across_executors_loses_no_wake_up() {
    ping_pong(MESSAGES, 1, Duration::ZERO);
}

#[test]
fn ping_pong_with_other_capacities_and_spins_loses_no_wake_up() {
    for (capacity, spin) in [(1, SPINS[1]), (1, SPINS[2]), (2, SPINS[0]), (2, SPINS[1]), (2, SPINS[2])] {
        ping_pong(VARIANT_MESSAGES, capacity, spin);
    }
}

enum StreamEnd {
    Producer(Sender<u64>),
    Consumer(Receiver<u64>),
}

/// One way through a ring of one slot: the producer waits for room and the consumer for
/// data on nearly every message, and the close at the end must wake the consumer.
#[test]
fn a_stream_through_one_slot_loses_no_wake_up() {
    for spin in SPINS {
        let (tx, rx) = channel::<u64>(config(1, spin));
        let what = format!("stream of {VARIANT_MESSAGES} messages through 1 slot, spin {spin:?}");
        let counts = on_executors(
            &what,
            vec![StreamEnd::Producer(tx), StreamEnd::Consumer(rx)],
            |_, end, progress| async move {
                match end {
                    StreamEnd::Producer(mut tx) => {
                        for n in 0..VARIANT_MESSAGES {
                            tx.send(one(n)).await.expect("consumer alive");
                        }
                        VARIANT_MESSAGES
                    }
                    StreamEnd::Consumer(mut rx) => {
                        let mut next = 0;
                        while let Some(message) = rx.recv().await {
                            progress.tick();
                            assert_eq!(record(message), next);
                            next += 1;
                        }
                        next
                    }
                }
            },
        );
        assert_eq!(counts, [VARIANT_MESSAGES, VARIANT_MESSAGES]);
    }
}
