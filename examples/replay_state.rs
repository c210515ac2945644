//! Rebuilding a service's state by replaying a topic from the beginning.
//!
//! A payments service records every change to an account's balance in the topic
//! `balances` (key: the account, value: its new balance), as an event-sourced service
//! does. Then it stops, losing what it held in memory. On restart the engine reopens the
//! topic from disk, and a pipeline reads it from the earliest offsets up to the end it
//! has now (a bounded source), sends each account's updates to the shard that owns the
//! account (`key_by`), and keeps the latest balance per account there. A key's updates
//! stay in order all the way (one partition per key, read in offset order, one ring per
//! pair of shards), so the last update seen is the last one written.
//!
//! The rebuilt state is printed and checked against what was written.
//!
//! ```sh
//! cargo run --release --example replay_state                 # in a fresh temporary directory
//! cargo run --release --example replay_state -- /tmp/sluice-replay
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_lite::future::block_on;
use sluice_engine::dataflow::topic::{StartFrom, TopicRecord, TopicSource};
use sluice_engine::dataflow::{Event, Operator, Pipeline, PipelineConfig, WatermarkStrategy};
use sluice_engine::{Engine, EngineConfig, EngineHandle, OwnedRecord, TopicConfig};
use sluice_io::{BatchMeta, EventTime, Timestamp};

const ACCOUNTS: u64 = 12;
const UPDATES: u64 = 5000;

/// An account's state as the service keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Account {
    balance: i64,
    updates: u64,
    last_change: EventTime,
}

/// What the service writes while it runs: `UPDATES` deposits and withdrawals over
/// `ACCOUNTS` accounts, each recorded as the account's new balance. Returns the state the
/// service had when it stopped.
fn run_service(handle: &EngineHandle) -> Result<BTreeMap<String, Account>, Box<dyn std::error::Error>> {
    let mut state: BTreeMap<String, Account> = BTreeMap::new();
    let mut by_partition: BTreeMap<sluice_io::PartitionId, Vec<OwnedRecord>> = BTreeMap::new();
    let mut rng: u64 = 0x5eed;
    let start = Timestamp::now().millis();
    for i in 0..UPDATES {
        rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let account = format!("acct-{:02}", (rng >> 33) % ACCOUNTS);
        let amount = ((rng >> 40) % 400) as i64 - 200;
        let time = EventTime::from_millis(start + i as i64);
        let entry = state.entry(account.clone()).or_insert(Account { balance: 0, updates: 0, last_change: time });
        entry.balance = (entry.balance + amount).max(0);
        entry.updates += 1;
        entry.last_change = time;
        // Placed as the engine's producers place keyed records, appended a batch at a time.
        let partition = handle.partition_for("balances", Some(account.as_bytes()))?;
        by_partition.entry(partition).or_default().push(OwnedRecord::new(
            Some(account.into_bytes()),
            entry.balance.to_string().into_bytes(),
            time,
        ));
        if i % 500 == 499 || i == UPDATES - 1 {
            for (partition, records) in std::mem::take(&mut by_partition) {
                block_on(handle.append("balances", partition, records, BatchMeta::default()))?;
            }
        }
    }
    Ok(state)
}

/// Keeps the latest state of the accounts this shard owns, in a plain map: no other shard
/// ever sees these accounts, so nothing is locked per record. At the end of the replay the
/// shard hands its map over.
struct LatestByAccount {
    accounts: HashMap<String, Account>,
    done: Arc<Mutex<BTreeMap<String, Account>>>,
}

impl Operator<(String, i64)> for LatestByAccount {
    fn on_batch(&mut self, batch: &mut Vec<Event<(String, i64)>>) {
        for Event { time, value: (account, balance) } in batch.drain(..) {
            let entry =
                self.accounts.entry(account).or_insert(Account { balance: 0, updates: 0, last_change: EventTime::MIN });
            entry.balance = balance;
            entry.updates += 1;
            entry.last_change = time;
        }
    }
    fn on_watermark(&mut self, _: EventTime) {}
    fn on_idle(&mut self, _: bool) {}
    fn on_end(&mut self) {
        self.done.lock().expect("no shard panicked holding it").extend(self.accounts.drain());
    }
}

/// Replays `balances` from the beginning and returns the state it rebuilds.
fn rebuild(handle: &EngineHandle) -> Result<BTreeMap<String, Account>, Box<dyn std::error::Error>> {
    let source = block_on(TopicSource::open(handle, "balances", StartFrom::Earliest))?.bounded();
    let ends = source.end_offsets();
    println!("replaying {} partitions up to offsets {:?}", ends.len(), ends.iter().map(|o| o.0).collect::<Vec<_>>());
    let rebuilt = Arc::new(Mutex::new(BTreeMap::new()));
    let done = rebuilt.clone();
    let shards = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
    Pipeline::new(PipelineConfig::with_shards(shards)).run(move |scope| {
        let strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(1), TopicRecord::event_time);
        scope
            .topic_source(&source, strategy)
            .map(|r: TopicRecord| {
                let account = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
                let balance = std::str::from_utf8(r.value.as_deref().unwrap_or_default())
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                (account, balance)
            })
            .key_by(|(account, _)| account.clone())
            .into_stream()
            .attach(LatestByAccount { accounts: HashMap::new(), done: done.clone() });
    })?;
    let state = std::mem::take(&mut *rebuilt.lock().expect("the pipeline has finished"));
    Ok(state)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (dir, temporary) = match std::env::args().nth(1) {
        Some(dir) => (std::path::PathBuf::from(dir), false),
        None => (std::env::temp_dir().join(format!("sluice-replay-state-{}", std::process::id())), true),
    };

    // The service runs, recording every balance change, then stops.
    let engine = block_on(Engine::open(EngineConfig::new(&dir)))?;
    let handle = engine.handle();
    if handle.list_topics().iter().any(|t| t == "balances") {
        block_on(handle.delete_topic("balances"))?;
    }
    // Compacted: the topic is the accounts' state, and only each account's latest
    // balance must be kept forever.
    let config = TopicConfig { cleanup: sluice_io::CleanupPolicy::Compact, ..TopicConfig::default() };
    block_on(handle.create_topic("balances", 4, Some(config)))?;
    let before = run_service(&handle)?;
    println!("the service wrote {UPDATES} balance updates for {} accounts, then stopped", before.len());
    block_on(engine.shutdown())?;

    // It restarts with nothing in memory: the engine reopens the topic from disk, and
    // the state is rebuilt from it.
    let engine = block_on(Engine::open(EngineConfig::new(&dir)))?;
    let rebuilt = rebuild(&engine.handle())?;
    println!("{:<10} {:>8} {:>8}", "account", "balance", "updates");
    for (account, state) in &rebuilt {
        println!("{account:<10} {:>8} {:>8}", state.balance, state.updates);
    }
    block_on(engine.shutdown())?;
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }

    let replayed: u64 = rebuilt.values().map(|a| a.updates).sum();
    let matches = rebuilt.len() == before.len()
        && rebuilt.iter().all(|(account, a)| {
            before
                .get(account)
                .is_some_and(|b| (b.balance, b.updates, b.last_change) == (a.balance, a.updates, a.last_change))
        });
    if !matches || replayed != UPDATES {
        return Err(format!("the rebuilt state differs from the service's ({replayed} updates replayed)").into());
    }
    println!("rebuilt {} accounts from {replayed} updates: identical to the state before the restart", rebuilt.len());
    Ok(())
}
