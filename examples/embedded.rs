//! Embedding sluice in a service: the engine runs its shards on their own pinned
//! threads; the service's threads hold a cloned handle and call it, here through
//! `block_on` from plain threads (the same async methods work inside tokio or any other
//! executor, since requests and replies travel over runtime-agnostic channels).
//!
//! ```sh
//! cargo run --release --example embedded -- /tmp/sluice-example
//! ```

use std::time::Duration;

use futures_lite::future::block_on;
use sluice_engine::{Engine, EngineConfig, GroupConsumer, GroupOptions, OffsetReset};
use sluice_io::Timestamp;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "/tmp/sluice-example".into());
    let engine = block_on(Engine::open(EngineConfig::new(&dir)))?;
    let handle = engine.handle();
    if !handle.list_topics().contains(&"orders".to_string()) {
        block_on(handle.create_topic("orders", 4, None))?;
    }

    // Four request threads of "the service", each sending orders keyed by customer.
    let senders: Vec<_> = (0..4)
        .map(|t| {
            let handle = handle.clone();
            std::thread::spawn(move || {
                for i in 0..250 {
                    let customer = format!("customer-{}", (t * 31 + i) % 17);
                    let order = format!("{{\"thread\":{t},\"n\":{i}}}");
                    block_on(handle.send("orders", Some(customer.as_bytes()), order.as_bytes(), Timestamp::now()))
                        .expect("send");
                }
            })
        })
        .collect();
    for s in senders {
        s.join().expect("sender thread");
    }

    // A consumer in a group reads what was sent and commits its progress.
    let options = GroupOptions { reset: OffsetReset::Earliest, ..GroupOptions::default() };
    let mut consumer = block_on(GroupConsumer::join(handle.clone(), "billing", &["orders"], options, None))?;
    let mut read = 0;
    loop {
        let polled = block_on(consumer.poll(Duration::from_millis(200)))?;
        if polled.is_empty() {
            break;
        }
        for p in polled {
            read += p.batches.records().count();
        }
    }
    block_on(consumer.commit())?;
    for lag in block_on(handle.group_lag("billing"))? {
        println!("{}-{}: committed {} of {}", lag.topic, lag.partition, lag.committed, lag.end);
    }
    println!("read {read} orders");
    block_on(consumer.leave())?;
    block_on(engine.shutdown())?;
    Ok(())
}
