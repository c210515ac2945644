//! Debezium's JSON change events: decoded from and encoded to the messages Debezium's
//! connectors write (through Kafka Connect's `JsonConverter`), so a pipeline reads change
//! topics Debezium wrote and writes change topics Debezium's consumers read.
//!
//! A change is two messages. The **value** is the envelope: `before` and `after` (the row,
//! as a JSON object of column values, or null), `op` (`c` create, `u` update, `d` delete,
//! `r` read in a snapshot, `t` truncate), `source` (where the change came from:
//! connector, db, schema, table, lsn, txId, ts_ms, snapshot, ...) and `ts_ms` (when the
//! connector handled it). The **key** is the row's primary key columns as an object. A
//! delete is followed by a **tombstone**: the same key with a null value, so a compacted
//! topic forgets the row. Both messages come in two forms: schema-less (the payload alone)
//! or with a schema (`{"schema": ..., "payload": ...}`, the converter's default), where
//! the schema is Kafka Connect's description of the payload's types.
//!
//! Column values stay JSON values: the codec does not interpret them by the schema
//! (a decimal Debezium wrote as base64 bytes stays that string). Fields of the envelope
//! and of `source` that the codec has no name for are kept and written back, so a decoded
//! message re-encodes to the same JSON.
//!
//! Every malformed message is a typed [`DebeziumError`], never a panic.

mod codec;
mod schema;

#[cfg(test)]
mod tests;

use serde_json::{Map, Value};

pub use codec::{decode_key, decode_value, encode_key, encode_value};
pub use schema::{ColumnType, TableSchema, key_schema, value_schema};

/// A row: column name to value.
pub type Row = Map<String, Value>;

/// What a change did (`op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `c`: a row was inserted.
    Create,
    /// `u`: a row was updated.
    Update,
    /// `d`: a row was deleted.
    Delete,
    /// `r`: a row read by a snapshot.
    Read,
    /// `t`: the table was truncated.
    Truncate,
}

impl Op {
    /// The one-letter code Debezium writes.
    #[must_use]
    pub fn code(self) -> &'static str {
        match self {
            Op::Create => "c",
            Op::Update => "u",
            Op::Delete => "d",
            Op::Read => "r",
            Op::Truncate => "t",
        }
    }

    /// The op a code names.
    ///
    /// # Errors
    ///
    /// [`DebeziumError::UnknownOp`] for any other string.
    pub fn from_code(code: &str) -> Result<Op, DebeziumError> {
        Ok(match code {
            "c" => Op::Create,
            "u" => Op::Update,
            "d" => Op::Delete,
            "r" => Op::Read,
            "t" => Op::Truncate,
            other => return Err(DebeziumError::UnknownOp(other.to_owned())),
        })
    }
}

/// The `source` block: where a change came from. The PostgreSQL connector's fields are
/// named; any other field (another connector's, or a newer one's) is kept in `extra`, in
/// order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SourceInfo {
    /// `version`: the connector's version.
    pub version: Option<String>,
    /// `connector`: `postgresql`, `mysql`, ...
    pub connector: Option<String>,
    /// `name`: the logical server name, the topics' prefix.
    pub name: Option<String>,
    /// `ts_ms`: when the change was made in the database (commit time).
    pub ts_ms: Option<i64>,
    /// `snapshot`: `true`, `last`, `false`, `incremental`, ... as written (Debezium writes
    /// a string; older versions wrote a boolean, kept as its string).
    pub snapshot: Option<String>,
    /// `db`: the database.
    pub db: Option<String>,
    /// `schema`: the table's schema.
    pub schema: Option<String>,
    /// `table`: the table.
    pub table: Option<String>,
    /// `txId`: the transaction id.
    pub tx_id: Option<i64>,
    /// `lsn`: the position of the change in the write-ahead log.
    pub lsn: Option<i64>,
    /// Every other field, kept for re-encoding.
    pub extra: Row,
}

/// One change event: the value message of a change (a tombstone has none).
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeEvent {
    /// `op`.
    pub op: Op,
    /// `before`: the row before the change (updates and deletes; which columns it has
    /// depends on the table's replica identity), or `None`.
    pub before: Option<Row>,
    /// `after`: the row after the change (creates, reads, updates), or `None`.
    pub after: Option<Row>,
    /// `source`.
    pub source: SourceInfo,
    /// `ts_ms`: when the connector handled the change.
    pub ts_ms: Option<i64>,
    /// Every other field of the envelope (`transaction`, `ts_us`, ...), kept.
    pub extra: Row,
}

/// A decoded value message: the event, or a tombstone (a null value), with the schema
/// it was written with, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded<T> {
    /// The payload; `None` for a tombstone.
    pub payload: Option<T>,
    /// The schema of the with-schema form, as written.
    pub schema: Option<Value>,
}

/// How messages are written: the payload alone, or with Kafka Connect's schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Form {
    /// The payload alone (`value.converter.schemas.enable=false`).
    #[default]
    SchemaLess,
    /// `{"schema": ..., "payload": ...}` (the converter's default).
    WithSchema,
}

/// A message that is not a Debezium change event.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DebeziumError {
    /// Not JSON at all.
    #[error("debezium {what}: not JSON: {source}")]
    NotJson {
        /// `key` or `value`.
        what: &'static str,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// A field (or the message) is not of the JSON type it must be.
    #[error("debezium {field}: expected {expected}, found {found}")]
    WrongType {
        /// The field's path, such as `value.source.lsn`.
        field: String,
        /// The type it must have.
        expected: &'static str,
        /// What it was.
        found: &'static str,
    },
    /// A field every change event has is missing.
    #[error("debezium {0}: missing")]
    Missing(String),
    /// `op` is none of c, u, d, r, t.
    #[error("debezium value.op: unknown op {0:?}")]
    UnknownOp(String),
    /// `before`/`after` do not fit the op (a create without `after`, a delete with one).
    #[error("debezium value: op {op:?} {problem}")]
    Inconsistent {
        /// The op's code.
        op: &'static str,
        /// What does not fit.
        problem: &'static str,
    },
}

/// The JSON type's name, for errors.
pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
