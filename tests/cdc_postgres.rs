//! `sluice cdc postgres` against a real PostgreSQL (tests/common/postgres.rs starts one
//! per test): the change topics it writes, read `read_committed` and materialized, equal
//! the database's `SELECT` of the same tables; with the changes' Debezium envelopes
//! checked on the way. Named `postgres_*` so that `cargo test postgres` selects them.

#[path = "common/postgres.rs"]
mod postgres;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use futures_lite::future::block_on;
use postgres::Postgres;
use serde_json::{Map, Value, json};
use sluice_engine::{Engine, EngineConfig, Isolation};

const PLACEHOLDER: &str = "__debezium_unavailable_value";

fn data_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cdc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Starts `sluice cdc postgres` on `data` (its stderr in `data`'s sibling log file).
fn cdc(data: &Path, pg: &Postgres, tables: &str, extra: &[&str]) -> Child {
    let log = data.with_extension("log");
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["cdc", "postgres", "--dsn", &pg.dsn(), "--tables", tables, "--topic-prefix", "pg", "--data-dir"])
        .arg(data)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log"))
        .spawn()
        .expect("run sluice cdc postgres")
}

fn signal(child: &mut Child, signal: i32) {
    let pid = i32::try_from(child.id()).expect("pid");
    // SAFETY: kill has no memory preconditions; `pid` is our own live child.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill");
}

/// Stops it with SIGTERM; it must exit cleanly.
fn stop(mut child: Child, data: &Path) {
    signal(&mut child, libc::SIGTERM);
    let status = child.wait().expect("wait");
    let log = std::fs::read_to_string(data.with_extension("log")).unwrap_or_default();
    assert!(status.success(), "sluice cdc postgres failed: {log}");
}

/// Every record of `topic`, read_committed, as (key, value) JSON (`None` for null).
fn read(data: &Path, topic: &str) -> Vec<(Option<Value>, Option<Value>)> {
    let engine = block_on(Engine::open(EngineConfig::new(data))).expect("open data dir");
    let polled = block_on(engine.handle().read_to_end(topic, Isolation::ReadCommitted)).expect("read");
    let json = |b: Option<&[u8]>| b.map(|b| serde_json::from_slice::<Value>(b).expect("JSON"));
    let records = polled
        .iter()
        .flat_map(|p| p.batches.records())
        .map(|r| {
            let r = r.expect("record");
            (json(r.key()), json(r.value()))
        })
        .collect();
    block_on(engine.shutdown()).expect("shutdown");
    records
}

/// How many partitions `topic` has.
fn partitions(data: &Path, topic: &str) -> u32 {
    let engine = block_on(Engine::open(EngineConfig::new(data))).expect("open data dir");
    let partitions = engine.handle().describe_topic(topic).expect("topic").partitions();
    block_on(engine.shutdown()).expect("shutdown");
    partitions
}

/// The payload of a message of either form.
fn payload(message: &Value) -> &Value {
    match message.get("payload") {
        Some(p) if message.get("schema").is_some() => p,
        _ => message,
    }
}

/// The table a change topic describes: key to row; deletes and tombstones remove, a
/// truncation empties, and a placeholder for an unchanged TOASTed value keeps the
/// value the row had.
fn materialize(records: &[(Option<Value>, Option<Value>)]) -> BTreeMap<String, Map<String, Value>> {
    let mut table: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for (key, value) in records {
        let key = key.as_ref().map(|k| payload(k).to_string()).unwrap_or_default();
        let Some(value) = value else {
            table.remove(&key);
            continue;
        };
        let event = payload(value);
        match event["op"].as_str().expect("op") {
            "t" => table.clear(),
            "d" => {
                table.remove(&key);
            }
            _ => {
                let mut after = event["after"].as_object().expect("after").clone();
                for (column, v) in &mut after {
                    if v == PLACEHOLDER {
                        *v = table[&key][column].clone();
                    }
                }
                table.insert(key, after);
            }
        }
    }
    table
}

/// The database's rows of `table`, keyed as the change topic keys them (by `id`).
fn select(pg: &Postgres, table: &str) -> BTreeMap<String, Map<String, Value>> {
    pg.psql(&format!("SELECT row_to_json(t)::text FROM {table} t;"))
        .lines()
        .map(|line| {
            let row: Map<String, Value> = serde_json::from_str(line).expect("row JSON");
            (json!({"id": row["id"]}).to_string(), row)
        })
        .collect()
}

fn ops(records: &[(Option<Value>, Option<Value>)]) -> Vec<String> {
    records
        .iter()
        .map(|(_, v)| v.as_ref().map_or("tombstone".into(), |v| payload(v)["op"].as_str().unwrap().to_owned()))
        .collect()
}

#[test]
fn postgres_snapshot_inserts_updates_deletes_and_a_transaction() {
    let pg = Postgres::start("basic");
    pg.psql(
        "CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, qty int);
         CREATE TABLE orders (id int PRIMARY KEY, item int, n int);
         INSERT INTO items VALUES (1, 'apple', 3), (2, 'pear', 5);",
    );
    let data = data_dir("basic");
    let checkpoints = data.with_extension("checkpoints");
    let _ = std::fs::remove_dir_all(&checkpoints);
    let child = cdc(&data, &pg, "items,public.orders", &["--checkpoint-dir", checkpoints.to_str().unwrap()]);
    pg.wait_streaming();
    pg.transaction("INSERT INTO items VALUES (3, 'plum', 1);");
    pg.transaction("UPDATE items SET qty = 10 WHERE id = 1;");
    pg.transaction("DELETE FROM items WHERE id = 2;");
    let last = pg.transaction(
        "INSERT INTO orders VALUES (100, 1, 2);
         INSERT INTO orders VALUES (101, 3, 1);
         UPDATE items SET qty = qty - 2 WHERE id = 1;
         UPDATE items SET qty = qty - 1 WHERE id = 3;
         DELETE FROM orders WHERE id = 100;",
    );
    pg.wait_confirmed("sluice_pg", &last);
    stop(child, &data);

    let items = read(&data, "pg.public.items");
    let orders = read(&data, "pg.public.orders");
    assert_eq!(ops(&items), ["r", "r", "c", "u", "d", "tombstone", "u", "u"], "{items:?}");
    assert_eq!(ops(&orders), ["c", "c", "d", "tombstone"], "{orders:?}");
    let value = |r: &(Option<Value>, Option<Value>)| r.1.clone().expect("a value");
    let (first, second) = (value(&items[0]), value(&items[1]));
    assert_eq!(
        (first["source"]["snapshot"].as_str(), second["source"]["snapshot"].as_str()),
        (Some("true"), Some("last"))
    );
    assert_eq!(first["source"]["connector"], "postgresql");
    assert_eq!(
        (first["source"]["schema"].as_str(), first["source"]["table"].as_str()),
        (Some("public"), Some("items"))
    );
    assert_eq!(items[0].0, Some(json!({"id": 1})));
    // Replica identity default: an update has no before-image, a delete the key alone.
    assert_eq!(value(&items[3])["before"], Value::Null);
    assert_eq!(value(&items[3])["after"], json!({"id": 1, "name": "apple", "qty": 10}));
    assert_eq!(value(&items[4])["before"], json!({"id": 2, "name": null, "qty": null}));
    assert_eq!((items[5].0.clone(), items[5].1.clone()), (Some(json!({"id": 2})), None));
    // The multi-statement transaction: one txId on both topics, its items changes
    // together at the end, none of it anywhere else.
    let tx = value(&orders[0])["source"]["txId"].clone();
    assert!(tx.is_i64());
    let txs = |records: &[(Option<Value>, Option<Value>)]| -> Vec<Value> {
        records.iter().filter_map(|r| r.1.as_ref().map(|v| v["source"]["txId"].clone())).collect()
    };
    assert_eq!(txs(&orders), [tx.clone(), tx.clone(), tx.clone()]);
    assert_eq!(txs(&items).iter().filter(|t| **t == tx).count(), 2);
    assert_eq!(txs(&items)[5..], [tx.clone(), tx]);
    // Positions only grow.
    let lsns: Vec<i64> =
        items.iter().filter_map(|r| r.1.as_ref().map(|v| v["source"]["lsn"].as_i64().unwrap())).collect();
    assert!(lsns.windows(2).all(|w| w[0] <= w[1]), "{lsns:?}");
    assert_eq!(materialize(&items), select(&pg, "items"));
    assert_eq!(materialize(&orders), select(&pg, "orders"));
    assert_eq!(materialize(&items).len(), 2);
    // The checkpoints went where --checkpoint-dir said, not into the data directory.
    assert!(std::fs::read_dir(&checkpoints).unwrap().next().is_some());
    assert!(!data.join("cdc").exists());
}

#[test]
fn postgres_toasted_values_and_an_added_column() {
    let pg = Postgres::start("toast");
    pg.psql(
        "CREATE TABLE docs (id int PRIMARY KEY, body text, n int);
         ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
         ALTER TABLE docs REPLICA IDENTITY FULL;
         CREATE TABLE notes (id int PRIMARY KEY, body text, n int);
         ALTER TABLE notes ALTER COLUMN body SET STORAGE EXTERNAL;",
    );
    let data = data_dir("toast");
    let flags = ["--with-schemas", "--slot", "docs_slot", "--publication", "docs_pub"];
    let child = cdc(&data, &pg, "docs,notes", &flags);
    pg.wait_streaming();
    let publication =
        "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_publication_tables WHERE pubname = 'docs_pub';";
    assert_eq!(pg.psql(publication).trim(), "docs,notes");
    let big = "SELECT string_agg(md5(i::text), '') FROM generate_series(1, 1000) i";
    pg.transaction(&format!("INSERT INTO docs VALUES (1, ({big}), 0); INSERT INTO notes VALUES (1, ({big}), 0);"));
    // Only `n` changes: the server sends the TOASTed body as unchanged.
    pg.transaction("UPDATE docs SET n = 1 WHERE id = 1; UPDATE notes SET n = 1 WHERE id = 1;");
    pg.transaction("ALTER TABLE docs ADD COLUMN tag text;");
    let last =
        pg.transaction("INSERT INTO docs VALUES (2, 'short', 2, 'new'); UPDATE docs SET tag = 'x' WHERE id = 1;");
    pg.wait_confirmed("docs_slot", &last);
    stop(child, &data);

    let body = pg.psql(&format!("{big};")).trim().to_owned();
    assert_eq!(body.len(), 32_000);
    let docs = read(&data, "pg.public.docs");
    let notes = read(&data, "pg.public.notes");
    assert_eq!(ops(&docs), ["c", "u", "c", "u"]);
    assert_eq!(ops(&notes), ["c", "u"]);
    let value = |r: &(Option<Value>, Option<Value>)| r.1.clone().expect("a value");
    // With schemas: the key and the envelope carry Kafka Connect's schema.
    let key = docs[0].0.clone().unwrap();
    assert_eq!(key["schema"]["name"], "pg.public.docs.Key");
    assert_eq!(key["payload"], json!({"id": 1}));
    let update = value(&docs[1]);
    assert_eq!(update["schema"]["name"], "pg.public.docs.Envelope");
    // Replica identity full: the unchanged TOASTed body comes from the before-image.
    assert_eq!(update["payload"]["after"]["body"], body.as_str());
    assert_eq!(update["payload"]["before"]["n"], 0);
    // Default identity: Debezium's placeholder, which the materialized view resolves.
    assert_eq!(value(&notes[1])["payload"]["after"]["body"], PLACEHOLDER);
    assert_eq!(value(&notes[1])["payload"]["after"]["n"], 1);
    // The added column: in the rows and in the schema from the change after it.
    let fields = |m: &Value| -> Vec<String> {
        m["schema"]["fields"][1]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["field"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(fields(&update), ["id", "body", "n"]);
    let added = value(&docs[2]);
    assert_eq!(fields(&added), ["id", "body", "n", "tag"]);
    assert_eq!(added["payload"]["after"], json!({"id": 2, "body": "short", "n": 2, "tag": "new"}));
    assert_eq!(value(&docs[3])["payload"]["after"]["tag"], "x");
    assert_eq!(value(&docs[3])["payload"]["after"]["body"], body.as_str());
    assert_eq!(materialize(&docs), select(&pg, "docs"));
    assert_eq!(materialize(&notes), select(&pg, "notes"));
}

/// Transactions moving money between accounts and appending to a log while the
/// command is SIGKILLed twice and restarted: the topics, read_committed, hold each
/// change once, and their view equals the database.
#[test]
fn postgres_sigkill_during_streaming_is_exactly_once() {
    let pg = Postgres::start("kill");
    pg.psql(
        "CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL);
         CREATE TABLE log (id int PRIMARY KEY, note text);
         INSERT INTO acct SELECT i, 100 FROM generate_series(1, 10) i;",
    );
    let data = data_dir("kill");
    let args = ["--checkpoint-interval-ms", "100", "--partitions", "2"];
    let mut child = cdc(&data, &pg, "acct,log", &args);
    pg.wait_streaming();
    let mut script = String::new();
    for i in 1..=600 {
        let (from, to) = (i % 10 + 1, (i * 7) % 10 + 1);
        script.push_str(&format!(
            "BEGIN; UPDATE acct SET balance = balance - 1 WHERE id = {from}; \
             UPDATE acct SET balance = balance + 1 WHERE id = {to}; \
             INSERT INTO log VALUES ({i}, 'moved {from} to {to}');"
        ));
        if i % 3 == 0 {
            script.push_str(&format!(" DELETE FROM log WHERE id = {};", i - 2));
        }
        script.push_str(" COMMIT; SELECT pg_sleep(0.004);\n");
    }
    // The writer runs while the command is killed twice, each time once it has
    // confirmed a position past that moment (so it is streaming), and restarted.
    let child = std::thread::scope(|threads| {
        let writer = threads.spawn(|| pg.psql(&script));
        for _ in 0..2 {
            let now = pg.psql("SELECT pg_current_wal_insert_lsn();").trim().to_owned();
            pg.wait_confirmed("sluice_pg", &now);
            std::thread::sleep(Duration::from_millis(150));
            signal(&mut child, libc::SIGKILL);
            let _ = child.wait();
            child = cdc(&data, &pg, "acct,log", &args);
        }
        writer.join().expect("writer");
        child
    });
    let last = pg.transaction("UPDATE acct SET balance = balance + 0 WHERE id = 1;");
    pg.wait_confirmed("sluice_pg", &last);
    stop(child, &data);

    let log = std::fs::read_to_string(data.with_extension("log")).unwrap_or_default();
    assert_eq!(log.matches("streaming into").count(), 3, "three runs: {log}");
    for (table, snapshot_rows) in [("acct", 10), ("log", 0)] {
        assert_eq!(partitions(&data, &format!("pg.public.{table}")), 2);
        let records = read(&data, &format!("pg.public.{table}"));
        // One snapshot: the restarts resumed from their checkpoints.
        assert_eq!(ops(&records).iter().filter(|op| *op == "r").count(), snapshot_rows, "{table}");
        // Each change once: no (transaction, position, key) twice.
        let mut seen = std::collections::HashSet::new();
        for (key, value) in &records {
            let Some(v) = value else { continue };
            let id =
                (v["source"]["txId"].to_string(), v["source"]["lsn"].to_string(), key.clone().unwrap().to_string());
            assert!(seen.insert(id.clone()), "{table}: {id:?} twice");
        }
        assert_eq!(materialize(&records), select(&pg, table), "{table}");
    }
    let total: i64 = select(&pg, "acct").values().map(|r| r["balance"].as_i64().unwrap()).sum();
    assert_eq!(total, 1000);
}

#[test]
fn postgres_cdc_refuses_what_it_cannot_do() {
    let pg = Postgres::start("refuse");
    pg.psql("CREATE TABLE items (id int PRIMARY KEY);");
    let data = data_dir("refuse");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["cdc", "postgres", "--topic-prefix", "pg", "--data-dir"])
            .arg(&data)
            .args(args)
            .output()
            .expect("run");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let dsn = pg.dsn();
    assert!(run(&["--dsn", &dsn, "--tables", "nosuch"]).contains("table public.nosuch does not exist"));
    assert!(run(&["--dsn", &dsn, "--tables", "a.b.c"]).contains("is not a table name"));
    assert!(run(&["--dsn", "host=x sslmode=require", "--tables", "items"]).contains("unknown key \"sslmode\""));
    let wrong = dsn.replace(postgres::PASSWORD, "wrong");
    assert!(run(&["--dsn", &wrong, "--tables", "items"]).contains("password authentication failed"));
    assert!(run(&["--dsn", &dsn, "--tables", "items", "--slot", "Bad-Name"]).contains("slot name"));
}

/// With no checkpoint completing (an hour apart), a change PostgreSQL has sent and sluice
/// has answered status for is still not confirmed; a restart without a checkpoint makes
/// the slot again and reads the table in a new snapshot, and the first run's output,
/// never committed, is not seen.
#[test]
fn postgres_position_is_confirmed_only_once_a_checkpoint_completes() {
    let pg = Postgres::start("confirm");
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, n int);");
    let data = data_dir("confirm");
    let child = cdc(&data, &pg, "items", &["--checkpoint-interval-ms", "3600000"]);
    pg.wait_streaming();
    let marker = pg.transaction("INSERT INTO items VALUES (1, 1);");
    // Sent, and a status update came back after that.
    let sent = format!("SELECT sent_lsn > '{marker}' FROM pg_stat_replication WHERE application_name = 'sluice';");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while pg.psql(&sent).trim() != "t" {
        assert!(std::time::Instant::now() < deadline, "never sent");
        std::thread::sleep(Duration::from_millis(20));
    }
    let now = pg.psql("SELECT clock_timestamp();").trim().to_owned();
    let replied = format!("SELECT reply_time > '{now}' FROM pg_stat_replication WHERE application_name = 'sluice';");
    while pg.psql(&replied).trim() != "t" {
        assert!(std::time::Instant::now() < deadline, "no status update");
        std::thread::sleep(Duration::from_millis(50));
    }
    let confirmed =
        format!("SELECT confirmed_flush_lsn < '{marker}' FROM pg_replication_slots WHERE slot_name = 'sluice_pg';");
    assert_eq!(pg.psql(&confirmed).trim(), "t", "confirmed before any checkpoint");
    stop(child, &data);

    let child = cdc(&data, &pg, "items", &[]);
    pg.wait_streaming();
    let last = pg.transaction("UPDATE items SET n = 2 WHERE id = 1;");
    pg.wait_confirmed("sluice_pg", &last);
    stop(child, &data);
    let items = read(&data, "pg.public.items");
    assert_eq!(ops(&items), ["r", "u"], "{items:?}");
    assert_eq!(materialize(&items), select(&pg, "items"));
}

/// Changes only to tables the source does not read still move its confirmed position
/// (the server's keepalives while no transaction is open become positions that the next
/// checkpoint records), so the server can move the slot's restart point past them and
/// discard its log; a restart then carries on with the read table's changes alone.
#[test]
fn postgres_idle_source_confirms_past_other_tables_changes() {
    let pg = Postgres::start("idle");
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, n int); CREATE TABLE other (id int);");
    let data = data_dir("idle");
    let child = cdc(&data, &pg, "items", &["--checkpoint-interval-ms", "200"]);
    pg.wait_streaming();
    let marker = pg.transaction("INSERT INTO other SELECT generate_series(1, 100);");
    pg.wait_confirmed("sluice_pg", &marker);
    // A checkpoint logs the running transactions: a point decoding can restart from,
    // which the slot takes once sluice has confirmed past it.
    pg.psql("CHECKPOINT;");
    let after = pg.transaction("INSERT INTO other VALUES (0);");
    pg.wait_confirmed("sluice_pg", &after);
    let restart = format!("SELECT restart_lsn > '{marker}' FROM pg_replication_slots WHERE slot_name = 'sluice_pg';");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while pg.psql(&restart).trim() != "t" {
        assert!(std::time::Instant::now() < deadline, "the slot's restart point stayed before {marker}");
        std::thread::sleep(Duration::from_millis(50));
    }
    stop(child, &data);

    let child = cdc(&data, &pg, "items", &[]);
    pg.wait_streaming();
    let last = pg.transaction("INSERT INTO items VALUES (1, 1);");
    pg.wait_confirmed("sluice_pg", &last);
    stop(child, &data);
    let items = read(&data, "pg.public.items");
    assert_eq!(ops(&items), ["c"], "{items:?}");
    assert_eq!(materialize(&items), select(&pg, "items"));
}
