//! A materialized view kept in sync with PostgreSQL, as a search index or a cache is:
//! logical replication (`PostgresSource`) -> a changelog -> a table -> an upsert sink (here
//! an in-memory index of products by id), and beside it the number of products per
//! category, a retracting aggregate that stays right under updates and deletes.
//!
//! `cargo run --example cdc_view` starts a throwaway PostgreSQL server from Debian's
//! `postgresql` package (`.ci/deps` installs it; as root, it runs as the `postgres` user)
//! in a directory under /tmp, creates a table, and changes it while the pipeline runs:
//! inserts, an update that moves a product to another category, a delete, and a
//! transaction of several statements. After each step it waits until the view and the
//! counts equal what `SELECT` says. With `-- --dsn 'host=... user=... dbname=...'` it uses
//! your server instead (it needs `wal_level=logical` and a role with the REPLICATION
//! attribute; it creates and drops the table `cdc_view_products`, the slot
//! `cdc_view_slot` and the publication `cdc_view_pub`).
//!
//! The upsert sinks write what a checkpoint covers once it completes (exactly once), so the
//! view trails the database by up to a checkpoint interval (200 ms here); the counts apply
//! each change when the watermark passes it, here the processing-time clock.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use sluice_engine::{
    connectors::{
        debezium::Row,
        postgres::{Change, Dsn, PostgresConfig, PostgresSource, local::LocalPostgres},
    },
    dataflow::{CheckpointConfig, Pipeline, PipelineConfig, WatermarkStrategy},
};

type View = Arc<Mutex<BTreeMap<String, Row>>>;
type Counts = Arc<Mutex<BTreeMap<String, i64>>>;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::env::temp_dir().join(format!("sluice-cdc-view-{}", std::process::id()));
    // Our own server unless --dsn names one (dropped, and so stopped, at the end).
    let (local, dsn) = match args.iter().position(|a| a == "--dsn") {
        Some(i) => (None, args.get(i + 1).context("--dsn needs a value")?.clone()),
        None => {
            let pg = LocalPostgres::start(&dir.join("pg"))
                .context("starting PostgreSQL (is the postgresql package installed?)")?;
            let dsn = pg.dsn();
            (Some(pg), dsn)
        }
    };
    let sql = |statement: &str| -> anyhow::Result<String> {
        match &local {
            Some(pg) => pg.psql(statement).with_context(|| format!("psql: {statement}")),
            None => psql(&dsn, statement),
        }
    };
    sql("DROP TABLE IF EXISTS cdc_view_products; \
         CREATE TABLE cdc_view_products (id int PRIMARY KEY, title text NOT NULL, category text NOT NULL, price int NOT NULL); \
         INSERT INTO cdc_view_products VALUES (1, 'kettle', 'kitchen', 30), (2, 'lamp', 'living', 45), (3, 'pan', 'kitchen', 25);")?;

    let config = PostgresConfig {
        dsn: Dsn::parse(&dsn)?,
        tables: PostgresConfig::parse_tables("cdc_view_products")?,
        slot: "cdc_view_slot".into(),
        publication: "cdc_view_pub".into(),
    };
    let source = PostgresSource::new(config);
    source.check().context("checking the connection and the table")?;
    let (view, counts): (View, Counts) = (Arc::default(), Arc::default());
    let (view_sink, counts_sink) = (view.clone(), counts.clone());
    let checkpoints = CheckpointConfig::new(dir.join("checkpoints")).interval(Duration::from_millis(200));
    let running = Pipeline::new(PipelineConfig::with_shards(2)).checkpointing(checkpoints).spawn(move |scope| {
        let table = scope
            .source(source.reader(scope.shard()), WatermarkStrategy::processing_time())
            .uid("postgres")
            .flat_map(|change: Change| match change.into_changelog() {
                Some(Ok(change)) => Some(change),
                Some(Err(e)) => {
                    eprintln!("not a row change, left out of the view: {e}");
                    None
                }
                None => None, // a table without a primary key
            })
            .into_table()
            .uid("products");
        let view = view_sink.clone();
        table.to_upsert_sink(move |id, row| {
            let mut view = view.lock().unwrap();
            match row {
                Some(row) => view.insert(id, row),
                None => view.remove(&id),
            };
            Ok(())
        });
        let counts = counts_sink.clone();
        table
            .group_by(|_, row: &Row| row.get("category").and_then(|c| c.as_str()).unwrap_or_default().to_owned())
            .count()
            .uid("per-category")
            .to_upsert_sink(move |category, n| {
                let mut counts = counts.lock().unwrap();
                match n.filter(|n| *n > 0) {
                    Some(n) => counts.insert(category, n),
                    None => counts.remove(&category),
                };
                Ok(())
            });
    })?;

    let steps = [
        ("the snapshot", ""),
        ("two inserts", "INSERT INTO cdc_view_products VALUES (4, 'sofa', 'living', 400), (5, 'mug', 'kitchen', 8);"),
        (
            "the pan moves to outdoor",
            "UPDATE cdc_view_products SET category = 'outdoor', title = 'camping pan' WHERE id = 3;",
        ),
        ("the lamp is deleted", "DELETE FROM cdc_view_products WHERE id = 2;"),
        (
            "one transaction of three statements",
            "BEGIN; UPDATE cdc_view_products SET price = price + 1; DELETE FROM cdc_view_products WHERE id = 5; \
             INSERT INTO cdc_view_products VALUES (6, 'grill', 'outdoor', 120); COMMIT;",
        ),
    ];
    for (what, statement) in steps {
        if !statement.is_empty() {
            sql(statement)?;
        }
        let want_view =
            sql("SELECT id || '|' || title || '|' || category || '|' || price FROM cdc_view_products ORDER BY id")?;
        let want_counts =
            sql("SELECT category || '|' || count(*) FROM cdc_view_products GROUP BY category ORDER BY category")?;
        let started = Instant::now();
        loop {
            let got_view = render_view(&view.lock().unwrap());
            let got_counts: Vec<String> = counts.lock().unwrap().iter().map(|(c, n)| format!("{c}|{n}")).collect();
            if got_view == want_view.trim() && got_counts.join("\n") == want_counts.trim() {
                println!("{what}: the view equals the table after {} ms", started.elapsed().as_millis());
                println!("  products: {}", got_view.replace('\n', "; "));
                println!("  per category: {}", got_counts.join("; "));
                break;
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!(
                    "{what}: after 30 s the view is\n{got_view}\nand the table\n{want_view}\n(counts {got_counts:?} against {want_counts:?})"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    running.stop(false);
    running.join()?;
    sql("DROP TABLE cdc_view_products; SELECT pg_drop_replication_slot('cdc_view_slot') FROM pg_replication_slots WHERE slot_name = 'cdc_view_slot'; DROP PUBLICATION IF EXISTS cdc_view_pub;").ok();
    drop(local);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The view as `SELECT`'s rows print: id|title|category|price, by id.
fn render_view(view: &BTreeMap<String, Row>) -> String {
    let mut rows: Vec<(i64, String)> = view
        .values()
        .map(|row| {
            let text = |c: &str| {
                row.get(c).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)).unwrap_or_default()
            };
            let id = row.get("id").and_then(serde_json::Value::as_i64).unwrap_or_default();
            (id, format!("{id}|{}|{}|{}", text("title"), text("category"), text("price")))
        })
        .collect();
    rows.sort();
    rows.into_iter().map(|(_, line)| line).collect::<Vec<_>>().join("\n")
}

/// `psql` against a server of your own.
fn psql(dsn: &str, statement: &str) -> anyhow::Result<String> {
    let out = std::process::Command::new("psql")
        .args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", statement])
        .output()
        .context("running psql")?;
    if !out.status.success() {
        bail!("psql: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}
