//! The handle inside a tokio service: its async methods run on tokio's worker threads
//! (no glommio there), concurrently, while the shards run on their own pinned executors.

mod common;

use std::time::Duration;

use sluice_engine::{Consumer, Engine, EngineConfig, SeekTo};
use sluice_io::Timestamp;

#[test]
fn a_tokio_runtime_drives_the_handle() {
    let dir = common::data_dir("tokio", "service");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    runtime.block_on(async {
        let engine = Engine::open(EngineConfig { shards: Some(2), ..EngineConfig::new(&dir) }).await.unwrap();
        let handle = engine.handle();
        handle.create_topic("requests", 4, None).await.unwrap();
        // Many concurrent "request handlers", each a tokio task.
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let handle = handle.clone();
                tokio::spawn(async move {
                    let key = format!("client-{}", i % 9);
                    handle.send("requests", Some(key.as_bytes()), b"payload", Timestamp(i)).await.unwrap()
                })
            })
            .collect();
        let mut placed = Vec::new();
        for t in tasks {
            placed.push(t.await.unwrap());
        }
        assert_eq!(placed.len(), 64);
        let mut consumer = Consumer::new(handle.clone(), 1 << 20);
        consumer.assign(&consumer.partitions_of("requests").unwrap(), SeekTo::Earliest).await.unwrap();
        let mut read = 0;
        while read < 64 {
            for p in consumer.poll(Duration::from_secs(5)).await.unwrap() {
                read += p.batches.records().count();
            }
        }
        assert_eq!(read, 64);
        engine.shutdown().await.unwrap();
    });
}
