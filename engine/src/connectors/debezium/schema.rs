//! Kafka Connect schemas for the with-schema form: the key's and the envelope's, made from
//! a table's columns as Debezium's PostgreSQL connector names them.

use serde_json::{Map, Value, json};

/// A column's Connect type, and the semantic name Debezium gives some of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// `int16` (smallint).
    Int16,
    /// `int32` (integer).
    Int32,
    /// `int64` (bigint).
    Int64,
    /// `float` (real).
    Float32,
    /// `double` (double precision).
    Float64,
    /// `boolean`.
    Boolean,
    /// `string`: text and every type carried as its text.
    String,
    /// `string` named `io.debezium.data.Json` (json, jsonb).
    Json,
    /// `string` named `io.debezium.data.Uuid`.
    Uuid,
    /// `bytes` (bytea), base64 in JSON.
    Bytes,
}

impl ColumnType {
    fn connect(self) -> (&'static str, Option<&'static str>) {
        match self {
            ColumnType::Int16 => ("int16", None),
            ColumnType::Int32 => ("int32", None),
            ColumnType::Int64 => ("int64", None),
            ColumnType::Float32 => ("float", None),
            ColumnType::Float64 => ("double", None),
            ColumnType::Boolean => ("boolean", None),
            ColumnType::String => ("string", None),
            ColumnType::Json => ("string", Some("io.debezium.data.Json")),
            ColumnType::Uuid => ("string", Some("io.debezium.data.Uuid")),
            ColumnType::Bytes => ("bytes", None),
        }
    }
}

/// A table as the schemas describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSchema {
    /// The topic's name, `<prefix>.<schema>.<table>`: Debezium names the schemas after it.
    pub topic: String,
    /// Every column: name, type, and whether it may be null.
    pub columns: Vec<(String, ColumnType, bool)>,
    /// The primary key's columns, in key order.
    pub key: Vec<String>,
}

fn field(name: &str, kind: ColumnType, optional: bool) -> Value {
    let (kind, semantic) = kind.connect();
    let mut map = Map::new();
    map.insert("type".into(), kind.into());
    map.insert("optional".into(), optional.into());
    if let Some(semantic) = semantic {
        map.insert("name".into(), semantic.into());
        map.insert("version".into(), 1.into());
    }
    map.insert("field".into(), name.into());
    Value::Object(map)
}

/// The key message's schema: a struct of the primary key's columns, named
/// `<topic>.Key`.
#[must_use]
pub fn key_schema(table: &TableSchema) -> Value {
    let fields: Vec<Value> = table
        .key
        .iter()
        .filter_map(|k| table.columns.iter().find(|(name, ..)| name == k))
        .map(|(name, kind, _)| field(name, *kind, false))
        .collect();
    json!({"type": "struct", "fields": fields, "optional": false, "name": format!("{}.Key", table.topic)})
}

/// The value message's schema: the envelope (`before` and `after` as `<topic>.Value`,
/// the PostgreSQL connector's `source`, `op`, `ts_ms`), named `<topic>.Envelope`.
#[must_use]
pub fn value_schema(table: &TableSchema) -> Value {
    let columns: Vec<Value> =
        table.columns.iter().map(|(name, kind, optional)| field(name, *kind, *optional)).collect();
    let row = |side: &str| {
        json!({"type": "struct", "fields": columns, "optional": true,
               "name": format!("{}.Value", table.topic), "field": side})
    };
    let source = json!({
        "type": "struct",
        "fields": [
            {"type": "string", "optional": false, "field": "version"},
            {"type": "string", "optional": false, "field": "connector"},
            {"type": "string", "optional": false, "field": "name"},
            {"type": "int64", "optional": false, "field": "ts_ms"},
            {"type": "string", "optional": true, "name": "io.debezium.data.Enum", "version": 1,
             "parameters": {"allowed": "true,last,false,incremental"}, "default": "false", "field": "snapshot"},
            {"type": "string", "optional": false, "field": "db"},
            {"type": "string", "optional": false, "field": "schema"},
            {"type": "string", "optional": false, "field": "table"},
            {"type": "int64", "optional": true, "field": "txId"},
            {"type": "int64", "optional": true, "field": "lsn"}
        ],
        "optional": false,
        "name": "io.debezium.connector.postgresql.Source",
        "field": "source"
    });
    json!({
        "type": "struct",
        "fields": [
            row("before"),
            row("after"),
            source,
            {"type": "string", "optional": false, "field": "op"},
            {"type": "int64", "optional": true, "field": "ts_ms"}
        ],
        "optional": false,
        "name": format!("{}.Envelope", table.topic)
    })
}
