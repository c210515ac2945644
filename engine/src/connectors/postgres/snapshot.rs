//! Before streaming: the tables' primary keys, the publication, the slot, and the
//! initial snapshot read in the slot's exported snapshot.

use std::{collections::HashMap, sync::Arc};

use serde_json::Value;

use super::{
    PostgresConfig, PostgresError,
    change::{Change, TableInfo, json_value},
    ident, literal,
    pgoutput::{Lsn, parse_lsn},
    tuple::Tuple,
    wire::Connection,
};
use crate::connectors::debezium::Op;

/// Primary key columns by (schema, table).
pub(crate) type Keys = HashMap<(String, String), Vec<String>>;

fn qualified(schema: &str, table: &str) -> String {
    format!("{}.{}", ident(schema), ident(table))
}

/// Each table's primary key columns, in key order; a table that does not exist is an
/// error.
pub(crate) fn primary_keys(sql: &mut Connection, config: &PostgresConfig) -> Result<Keys, PostgresError> {
    let mut keys = Keys::new();
    for (schema, table) in &config.tables {
        let exists = sql.query(&format!(
            "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = {} AND c.relname = {} AND c.relkind IN ('r', 'p')",
            literal(schema),
            literal(table)
        ))?;
        if exists.rows.is_empty() {
            return Err(PostgresError::Config(format!("table {schema}.{table} does not exist")));
        }
        let rows = sql.query(&format!(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a \
             ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
             WHERE i.indrelid = {}::regclass AND i.indisprimary \
             ORDER BY array_position(i.indkey, a.attnum)",
            literal(&qualified(schema, table))
        ))?;
        let columns = rows.rows.into_iter().filter_map(|mut r| r.swap_remove(0)).collect();
        keys.insert((schema.clone(), table.clone()), columns);
    }
    Ok(keys)
}

/// Creates the publication for the tables if it is missing, and adds the tables it
/// lacks.
pub(crate) fn ensure_publication(sql: &mut Connection, config: &PostgresConfig) -> Result<(), PostgresError> {
    let name = literal(&config.publication);
    let exists = sql.query(&format!("SELECT 1 FROM pg_publication WHERE pubname = {name}"))?;
    let all: Vec<String> = config.tables.iter().map(|(s, t)| qualified(s, t)).collect();
    if exists.rows.is_empty() {
        // A partitioned table's changes are published under its own name, not its
        // partitions' (which the source would not recognise).
        sql.query(&format!(
            "CREATE PUBLICATION {} FOR TABLE {} WITH (publish_via_partition_root = true)",
            ident(&config.publication),
            all.join(", ")
        ))?;
        return Ok(());
    }
    let listed =
        sql.query(&format!("SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = {name}"))?;
    let listed: Vec<(String, String)> = listed
        .rows
        .into_iter()
        .filter_map(|r| match r.as_slice() {
            [Some(s), Some(t)] => Some((s.clone(), t.clone())),
            _ => None,
        })
        .collect();
    let missing: Vec<String> =
        config.tables.iter().filter(|t| !listed.contains(t)).map(|(s, t)| qualified(s, t)).collect();
    if !missing.is_empty() {
        sql.query(&format!("ALTER PUBLICATION {} ADD TABLE {}", ident(&config.publication), missing.join(", ")))?;
    }
    Ok(())
}

/// The slot's confirmed position if it exists (0 when it has none yet).
pub(crate) fn slot_confirmed(sql: &mut Connection, slot: &str) -> Result<Option<Lsn>, PostgresError> {
    let rows = sql
        .query(&format!("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = {}", literal(slot)))?;
    match rows.rows.first() {
        None => Ok(None),
        Some(row) => match row.first().and_then(Option::as_deref) {
            Some(text) => parse_lsn(text).map(Some),
            None => Ok(Some(0)),
        },
    }
}

/// Creates the slot on the replication connection, exporting its snapshot: returns the
/// consistent point and the snapshot's name. The snapshot lives until `repl` runs its
/// next command.
pub(crate) fn create_slot(repl: &mut Connection, slot: &str) -> Result<(Lsn, String), PostgresError> {
    let rows = repl.query(&format!("CREATE_REPLICATION_SLOT {} LOGICAL pgoutput EXPORT_SNAPSHOT", ident(slot)))?;
    match rows.rows.first().map(Vec::as_slice) {
        Some([_, Some(point), Some(snapshot), ..]) => Ok((parse_lsn(point)?, snapshot.clone())),
        _ => Err(PostgresError::Protocol("CREATE_REPLICATION_SLOT answered without a snapshot".into())),
    }
}

/// Reads every table in the exported snapshot as `r` changes at `point`; the last one
/// is marked `last`.
pub(crate) fn read(
    sql: &mut Connection,
    config: &PostgresConfig,
    keys: &Keys,
    point: Lsn,
    snapshot: &str,
) -> Result<Vec<Change>, PostgresError> {
    sql.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
    sql.query(&format!("SET TRANSACTION SNAPSHOT {}", literal(snapshot)))?;
    // The snapshot's time: its transaction's start, in µs since the Unix epoch.
    let now = sql.query("SELECT (extract(epoch from now()) * 1000000)::bigint")?;
    let now_us = now.rows.first().and_then(|r| r[0].as_deref()).and_then(|t| t.parse().ok()).unwrap_or(0);
    let mut changes = Vec::new();
    for (schema, table) in &config.tables {
        let rows = sql.query(&format!("SELECT * FROM {}", qualified(schema, table)))?;
        let info = Arc::new(TableInfo {
            schema: schema.clone(),
            name: table.clone(),
            columns: rows.columns.clone(),
            key: keys.get(&(schema.clone(), table.clone())).cloned().unwrap_or_default(),
        });
        for values in rows.rows {
            let values =
                rows.columns.iter().zip(values).map(|((_, oid), v)| v.map_or(Value::Null, |t| json_value(*oid, t)));
            let after = Tuple::new(info.clone(), values.collect());
            changes.push(Change {
                table: info.clone(),
                op: Op::Read,
                before: None,
                after: Some(after),
                lsn: point,
                tx_id: None,
                commit_us: now_us,
                snapshot: Some("true"),
            });
        }
    }
    sql.query("COMMIT")?;
    if let Some(last) = changes.last_mut() {
        last.snapshot = Some("last");
    }
    Ok(changes)
}
