//! The mesh: ring counts, round-robin reading, and every shard sending to every other one
//! at once (1, 2 and 4 shards; 4 oversubscribe a 2-core machine, which only slows it).

use std::time::Duration;

use sluice_io::Timestamp;

use super::{config, on_executors, one, record};
use crate::ring::{Mesh, Message, RingConfig, ShardRings, TryRecvError};

#[test]
fn a_mesh_has_a_ring_per_ordered_pair_of_shards() {
    assert_eq!(Mesh::new(1).ring_count(), 0);
    assert_eq!(Mesh::new(4).ring_count(), 12);
    assert_eq!(Mesh::new(4).self_loops(true).ring_count(), 16);

    let shards = Mesh::new(3).build::<u64>();
    for (i, rings) in shards.iter().enumerate() {
        let others: Vec<usize> = (0..3).filter(|&j| j != i).collect();
        assert_eq!(rings.outbox.shard(), i);
        assert_eq!(rings.inbox.shard(), i);
        assert_eq!(rings.outbox.destinations().collect::<Vec<_>>(), others);
        assert_eq!(rings.inbox.sources(), others);
    }
}

#[test]
fn the_ends_of_a_shard_can_move_to_its_thread() {
    fn assert_send<T: Send>() {}
    assert_send::<ShardRings<Vec<u8>>>();
}

#[test]
fn a_lone_shard_has_no_rings_unless_it_loops_to_itself() {
    let mut alone = Mesh::new(1).build::<u64>().pop().expect("one shard");
    assert_eq!(alone.outbox.destinations().count(), 0);
    assert_eq!(alone.inbox.try_recv_any(), Err(TryRecvError::Closed), "no ring can ever deliver");
    glommio::LocalExecutor::default().run(async move { assert_eq!(alone.inbox.recv_any().await, None) });

    let mut looped = Mesh::new(1).self_loops(true).build::<u64>().pop().expect("one shard");
    looped.outbox.try_send(0, one(5)).expect("room");
    assert_eq!(looped.inbox.try_recv_any().map(|(from, m)| (from, record(m))), Ok((0, 5)));
}

#[test]
#[should_panic(expected = "no ring from shard 1 to 1")]
fn sending_to_itself_without_a_self_loop_is_a_bug() {
    let mut shards = Mesh::new(2).build::<u64>();
    let _ = shards[1].outbox.try_send(1, one(0));
}

#[test]
fn recv_any_takes_the_rings_in_turn() {
    let mut shards = Mesh::new(4).config(config(8, Duration::ZERO)).build::<u64>();
    for (from, rings) in shards.iter_mut().enumerate().skip(1) {
        for n in 0..3 {
            rings.outbox.try_send(0, one(10 * from as u64 + n)).expect("room");
        }
    }
    let inbox = &mut shards[0].inbox;
    let order: Vec<(usize, u64)> =
        std::iter::from_fn(|| inbox.try_recv_any().ok()).map(|(from, m)| (from, record(m))).collect();
    assert_eq!(
        order,
        [(1, 10), (2, 20), (3, 30), (1, 11), (2, 21), (3, 31), (1, 12), (2, 22), (3, 32)],
        "one message per ring per turn"
    );
    assert_eq!(inbox.try_recv_any(), Err(TryRecvError::Empty), "senders still open");
}

#[test]
fn recv_from_reads_one_ring_and_leaves_the_others_queued() {
    let mut shards = Mesh::new(3).config(config(4, Duration::ZERO)).build::<u64>();
    shards[1].outbox.try_send(0, one(1)).expect("room");
    shards[2].outbox.try_send(0, one(2)).expect("room");
    let inbox = &mut shards[0].inbox;
    assert_eq!(inbox.try_recv_from(2).map(record), Ok(2));
    assert_eq!(inbox.try_recv_from(2), Err(TryRecvError::Empty));
    assert_eq!(inbox.try_recv_any().map(|(from, m)| (from, record(m))), Ok((1, 1)));
}

/// Messages each shard sends to each other shard: data, with a watermark every 100.
const PER_PAIR: u64 = 5_000;

/// Every shard sends [`PER_PAIR`] numbered messages to every other shard, taking the
/// destinations in turn, then `EndOfStream` to each, from one task; another task of the
/// same shard reads its inbox until every ring is closed. Checks per-sender order and
/// counts. Sending and receiving run as separate tasks: a shard that only sent would
/// deadlock against a peer that only sent too, once their rings filled.
fn all_to_all(shards: usize, ring: RingConfig) {
    let what = format!("all-to-all of {shards} shards, {ring:?}");
    let rings = Mesh::new(shards).config(ring).build::<u64>();
    let received =
        on_executors(&what, rings, move |shard, ShardRings { mut outbox, mut inbox }, progress| async move {
            let sending = glommio::spawn_local(async move {
                let destinations: Vec<usize> = outbox.destinations().collect();
                for n in 0..PER_PAIR {
                    for &to in &destinations {
                        outbox.send(to, one(n)).await.expect("receiver alive");
                        if n % 100 == 99 {
                            outbox.send(to, Message::Watermark(Timestamp(n as i64))).await.expect("receiver alive");
                        }
                    }
                }
                for &to in &destinations {
                    outbox.send(to, Message::EndOfStream).await.expect("receiver alive");
                }
            });
            // Per source: the next record expected, and whether its end of stream came.
            let mut next = vec![0u64; shards];
            let mut ended = vec![false; shards];
            while let Some((from, message)) = inbox.recv_any().await {
                progress.tick();
                assert!(!ended[from], "shard {shard}: a message from {from} after its end of stream");
                match message {
                    Message::Data(batch) => {
                        assert_eq!(batch[0], next[from], "shard {shard}: out of order from {from}");
                        next[from] += 1;
                    }
                    Message::Watermark(t) => assert_eq!(t.0 as u64 + 1, next[from], "watermark out of place"),
                    Message::EndOfStream => ended[from] = true,
                    other => panic!("unexpected {}", other.kind()),
                }
            }
            sending.await;
            (next, ended)
        });
    for (shard, (next, ended)) in received.into_iter().enumerate() {
        for from in (0..shards).filter(|&from| from != shard) {
            assert_eq!(next[from], PER_PAIR, "shard {shard} from {from}");
            assert!(ended[from], "shard {shard}: no end of stream from {from}");
        }
    }
}

#[test]
fn the_mesh_delivers_everything_in_sender_order_with_1_2_and_4_shards() {
    for shards in [1, 2, 4] {
        all_to_all(shards, config(2, Duration::ZERO));
        all_to_all(shards, RingConfig::default());
    }
}
