//! Idempotent producers: a retried batch is written once, out-of-order batches are
//! refused, and the dedup state survives a restart.

mod common;

use std::time::Duration;

use futures_lite::future::block_on;
use sluice_engine::{Engine, EngineConfig, EngineError, IdempotentProducer, OwnedRecord};
use sluice_io::{BatchMeta, Offset, PartitionId, Timestamp};

fn data_dir(name: &str) -> common::TestDir {
    common::data_dir("idem", name)
}

fn records(tag: &str, n: usize) -> Vec<OwnedRecord> {
    (0..n).map(|i| OwnedRecord::new(None, format!("{tag}{i}").into_bytes(), Timestamp(0))).collect()
}

fn count(h: &sluice_engine::EngineHandle) -> u64 {
    block_on(h.offsets("t", PartitionId(0))).unwrap().1.0
}

#[test]
fn retries_are_written_once_even_across_a_restart() {
    let dir = data_dir("retry");
    let open = || block_on(Engine::open(EngineConfig { shards: Some(2), ..EngineConfig::new(&dir) })).unwrap();
    let engine = open();
    let h = engine.handle();
    block_on(h.create_topic("t", 1, None)).unwrap();
    let mut p = block_on(IdempotentProducer::new(h.clone())).unwrap();
    let first = block_on(p.send("t", PartitionId(0), records("a", 3))).unwrap();
    assert_eq!((first.base_offset, first.last_offset), (Offset(0), Offset(2)));
    // The acknowledgement was "lost": the same batch again, many times, concurrently.
    let retries: Vec<_> = (0..4)
        .map(|_| {
            let h = h.clone();
            let id = p.id();
            std::thread::spawn(move || {
                let meta = BatchMeta { producer_id: id, producer_epoch: 0, base_sequence: 0, ..BatchMeta::default() };
                block_on(h.append("t", PartitionId(0), records("a", 3), meta)).unwrap()
            })
        })
        .collect();
    for r in retries {
        assert_eq!(r.join().unwrap(), first, "a retry answers with the original offsets");
    }
    assert_eq!(block_on(p.retry("t", PartitionId(0), records("a", 3))).unwrap(), first);
    assert_eq!(count(&h), 3, "written once");
    let second = block_on(p.send("t", PartitionId(0), records("b", 2))).unwrap();
    assert_eq!(second.base_offset, Offset(3));
    // Out of order: a gap in the sequence is refused, nothing written.
    let meta = BatchMeta { producer_id: p.id(), producer_epoch: 0, base_sequence: 99, ..BatchMeta::default() };
    assert!(matches!(
        block_on(h.append("t", PartitionId(0), records("x", 1), meta)),
        Err(EngineError::Sequence { .. })
    ));
    assert_eq!(count(&h), 5);
    block_on(engine.shutdown()).unwrap();

    // After a restart the state is rebuilt from the log: a late retry is still deduped,
    // and a new producer gets a new id.
    let engine = open();
    let h = engine.handle();
    let meta = BatchMeta { producer_id: p.id(), producer_epoch: 0, base_sequence: 3, ..BatchMeta::default() };
    assert_eq!(block_on(h.append("t", PartitionId(0), records("b", 2), meta)).unwrap(), second);
    assert_eq!(count(&h), 5);
    let q = block_on(IdempotentProducer::new(h.clone())).unwrap();
    assert_ne!(q.id(), p.id());
    let batches = block_on(h.fetch("t", PartitionId(0), Offset(0), 1 << 20, Duration::ZERO)).unwrap();
    let values: Vec<String> =
        batches.records().map(|r| String::from_utf8(r.unwrap().value_bytes().to_vec()).unwrap()).collect();
    assert_eq!(values, ["a0", "a1", "a2", "b0", "b1"]);
}
