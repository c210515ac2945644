//! Rebuilding a service's state by replaying a compacted topic into a changelog table.
//!
//! A payments service records every change to an account in the compacted topic
//! `balances` (key: the account, value: its new balance; a null value, a tombstone, when
//! the account is closed), as an event-sourced service does. Then it stops, losing what
//! it held in memory, and the log is compacted (only each account's latest record stays).
//! On restart the engine reopens the topic from disk, and a pipeline reads it from the
//! earliest offsets up to the end it has now (a bounded source) into a changelog table
//! (`into_table`: the latest balance per account, held on the shard that owns the
//! account; a tombstone deletes it). From the table it derives a view that stays right
//! under updates and deletes: the number of accounts and their total balance per band of
//! 1000 (`group_by` with retracting aggregates; an account whose balance changes band moves
//! from one group to the other).
//!
//! The rebuilt table and view are printed and checked against what the service held.
//!
//! ```sh
//! cargo run --release --example replay_state                 # in a fresh temporary directory
//! cargo run --release --example replay_state -- /tmp/sluice-replay
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures_lite::future::block_on;
use sluice_engine::dataflow::changelog::Change;
use sluice_engine::dataflow::topic::{StartFrom, TopicRecord, TopicSource};
use sluice_engine::dataflow::{Pipeline, PipelineConfig, WatermarkStrategy};
use sluice_engine::{Engine, EngineConfig, EngineHandle, OwnedRecord, TopicConfig};
use sluice_io::{BatchMeta, Timestamp};

const ACCOUNTS: u64 = 40;
const UPDATES: u64 = 5000;

/// The band of a balance: the view groups accounts by it.
fn band(balance: i64) -> i64 {
    balance / 1000
}

/// What the service writes while it runs: `UPDATES` deposits, withdrawals and closings
/// over `ACCOUNTS` accounts, each recorded as the account's new balance (or a tombstone).
/// Returns the balances the service held when it stopped.
fn run_service(handle: &EngineHandle) -> Result<BTreeMap<String, i64>, Box<dyn std::error::Error>> {
    let mut state: BTreeMap<String, i64> = BTreeMap::new();
    let mut by_partition: BTreeMap<sluice_io::PartitionId, Vec<OwnedRecord>> = BTreeMap::new();
    let mut rng: u64 = 0x5eed;
    let start = Timestamp::now().millis();
    for i in 0..UPDATES {
        rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let account = format!("acct-{:02}", (rng >> 33) % ACCOUNTS);
        let time = Timestamp(start + i as i64);
        let record = if (rng >> 20).is_multiple_of(12) {
            state.remove(&account);
            OwnedRecord::tombstone(account.clone(), time)
        } else {
            let balance = state.entry(account.clone()).or_insert(0);
            *balance = (*balance + ((rng >> 40) % 800) as i64 - 380).max(0);
            OwnedRecord::new(Some(account.clone().into_bytes()), balance.to_string().into_bytes(), time)
        };
        // Placed as the engine's producers place keyed records, appended a batch at a time.
        let partition = handle.partition_for("balances", Some(account.as_bytes()))?;
        by_partition.entry(partition).or_default().push(record);
        if i % 500 == 499 || i == UPDATES - 1 {
            for (partition, records) in std::mem::take(&mut by_partition) {
                block_on(handle.append("balances", partition, records, BatchMeta::default()))?;
            }
        }
    }
    Ok(state)
}

/// The view: per band, (accounts, total balance).
type View = BTreeMap<i64, (i64, i64)>;

/// Replays `balances` from the beginning into a table and its view.
fn rebuild(handle: &EngineHandle) -> Result<(BTreeMap<String, i64>, View), Box<dyn std::error::Error>> {
    let source = block_on(TopicSource::open(handle, "balances", StartFrom::Earliest))?.bounded();
    let ends = source.end_offsets();
    println!("replaying {} partitions up to offsets {:?}", ends.len(), ends.iter().map(|o| o.0).collect::<Vec<_>>());
    let table = Arc::new(Mutex::new(BTreeMap::new()));
    let view = Arc::new(Mutex::new(View::new()));
    let (table_out, view_out) = (table.clone(), view.clone());
    let shards = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
    Pipeline::new(PipelineConfig::with_shards(shards)).run(move |scope| {
        let balances = scope
            .topic_source(&source, WatermarkStrategy::monotonous(TopicRecord::event_time))
            .flat_map(Change::from_compacted)
            .map(|change| {
                change.map(
                    |key| String::from_utf8_lossy(&key).into_owned(),
                    |value| std::str::from_utf8(&value).ok().and_then(|v| v.parse::<i64>().ok()).unwrap_or(0),
                )
            })
            .into_table();
        let table_out = table_out.clone();
        balances.to_upsert_sink(move |account, balance| {
            let mut table = table_out.lock().expect("no shard panicked holding it");
            match balance {
                Some(balance) => table.insert(account, balance),
                None => table.remove(&account),
            };
            Ok(())
        });
        let by_band = || balances.group_by(|_, balance: &i64| band(*balance));
        let (counts, sums) = (by_band().count(), by_band().sum(|balance| *balance));
        for (table, column) in [(counts, 0), (sums, 1)] {
            let view_out = view_out.clone();
            table.to_upsert_sink(move |band, value| {
                let mut view = view_out.lock().expect("no shard panicked holding it");
                let entry = view.entry(band).or_default();
                let field = if column == 0 { &mut entry.0 } else { &mut entry.1 };
                *field = value.unwrap_or(0);
                if *entry == (0, 0) {
                    view.remove(&band);
                }
                Ok(())
            });
        }
    })?;
    let table = std::mem::take(&mut *table.lock().expect("the pipeline has finished"));
    let view = std::mem::take(&mut *view.lock().expect("the pipeline has finished"));
    Ok((table, view))
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
    // record must be kept. Small segments, so that compaction has closed ones to clean.
    let config =
        TopicConfig { cleanup: sluice_io::CleanupPolicy::Compact, segment_bytes: 16 << 10, ..TopicConfig::default() };
    block_on(handle.create_topic("balances", 4, Some(config)))?;
    let before = run_service(&handle)?;
    println!("the service wrote {UPDATES} changes for {} open accounts, then stopped", before.len());
    let cleaned = block_on(handle.clean_topic("balances"))?;
    let superseded: u64 =
        cleaned.iter().filter_map(|(_, report)| report.compaction.as_ref()).map(|c| c.records_superseded).sum();
    println!("compaction removed {superseded} superseded records");
    block_on(engine.shutdown())?;

    // It restarts with nothing in memory: the engine reopens the topic from disk, and
    // the state is rebuilt from it.
    let engine = block_on(Engine::open(EngineConfig::new(&dir)))?;
    let (table, view) = rebuild(&engine.handle())?;
    println!("{:<10} {:>8}", "account", "balance");
    for (account, balance) in &table {
        println!("{account:<10} {balance:>8}");
    }
    println!("{:<6} {:>8} {:>8}", "band", "accounts", "total");
    for (band, (accounts, total)) in &view {
        println!("{band:<6} {accounts:>8} {total:>8}");
    }
    block_on(engine.shutdown())?;
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }

    let mut want_view = View::new();
    for balance in before.values() {
        let entry = want_view.entry(band(*balance)).or_default();
        entry.0 += 1;
        entry.1 += balance;
    }
    if table != before || view != want_view {
        return Err("the rebuilt table or view differs from the service's state".into());
    }
    println!("rebuilt {} accounts and {} bands: identical to the state before the restart", table.len(), view.len());
    Ok(())
}
