//! A change as the source emits it, PostgreSQL's text values as JSON, and the Debezium
//! messages a change becomes.

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Number, Value};

use super::tuple::Tuple;
use crate::connectors::debezium::{
    ChangeEvent, ColumnType, Form, Op, Row, SourceInfo, TableSchema, encode_key, encode_value, key_schema, value_schema,
};
use crate::dataflow::{
    changelog::{self, ChangeError},
    checkpoint::{Data, StateError},
};

/// The value Debezium writes for a TOASTed column an update left unchanged when no
/// before-image holds it (its `unavailable.value.placeholder`).
pub const UNAVAILABLE: &str = "__debezium_unavailable_value";

/// A table's shape when a change was read: its columns (name, type oid) and primary key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableInfo {
    /// The schema.
    pub schema: String,
    /// The table.
    pub name: String,
    /// Its columns, in order: name and type oid.
    pub columns: Vec<(String, u32)>,
    /// The primary key's columns (empty: no primary key, so no message key).
    pub key: Vec<String>,
}

/// A message as (key, value), each `None` when null.
pub type Message = (Option<Vec<u8>>, Option<Vec<u8>>);

/// One change of one row (or a truncation), as read from the snapshot or the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The table, as it was when the change was read.
    pub table: Arc<TableInfo>,
    /// What happened: `Read` for a snapshot's rows.
    pub op: Op,
    /// The row before (updates and deletes, as the replica identity gives it).
    pub before: Option<Tuple>,
    /// The row after (reads, inserts, updates).
    pub after: Option<Tuple>,
    /// The change's position in the log (the snapshot's consistent point for a read).
    pub lsn: u64,
    /// The transaction's id (none for a snapshot's rows).
    pub tx_id: Option<u32>,
    /// The commit time (the snapshot's start for a read), in µs since the Unix epoch.
    pub commit_us: i64,
    /// For a snapshot's rows: `true`, or `last` for the last one.
    pub snapshot: Option<&'static str>,
}

/// A column type's Debezium type, by oid.
#[must_use]
pub fn column_type(oid: u32) -> ColumnType {
    match oid {
        16 => ColumnType::Boolean,
        21 => ColumnType::Int16,
        23 => ColumnType::Int32,
        20 | 26 => ColumnType::Int64,
        700 => ColumnType::Float32,
        701 => ColumnType::Float64,
        17 => ColumnType::Bytes,
        114 | 3802 => ColumnType::Json,
        2950 => ColumnType::Uuid,
        _ => ColumnType::String,
    }
}

/// A value in PostgreSQL's text form as the JSON Debezium writes for its type: numbers
/// and booleans as such, bytea as base64, every other type as its text (a text that
/// does not parse as its type, which the server never sends, stays text). Takes the
/// text by value: most values are text, and stay the same allocation.
#[must_use]
pub fn json_value(oid: u32, text: String) -> Value {
    typed(oid, &text).unwrap_or(Value::String(text))
}

/// [`json_value`] of a value's bytes as the server sent them (UTF-8; anything else is
/// replaced as `String::from_utf8_lossy` does): a number allocates nothing, a text once.
pub(crate) fn json_value_of(oid: u32, bytes: &[u8]) -> Value {
    let text = String::from_utf8_lossy(bytes);
    typed(oid, &text).unwrap_or_else(|| Value::String(text.into_owned()))
}

/// The value of a type Debezium does not write as text, or `None`.
fn typed(oid: u32, text: &str) -> Option<Value> {
    match column_type(oid) {
        ColumnType::Boolean => Some(Value::Bool(text == "t")),
        ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64 => text.parse::<i64>().ok().map(Value::from),
        ColumnType::Float32 | ColumnType::Float64 => {
            text.parse::<f64>().ok().and_then(Number::from_f64).map(Value::Number)
        }
        ColumnType::Bytes => text
            .strip_prefix("\\x")
            .and_then(|hex| {
                (0..hex.len())
                    .step_by(2)
                    .map(|i| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
                    .collect::<Option<Vec<u8>>>()
            })
            .map(|bytes| Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))),
        _ => None,
    }
}

impl Change {
    /// The message key: the primary key's columns, `None` for a table without one and
    /// for a truncation.
    #[must_use]
    pub fn key(&self) -> Option<Row> {
        let row = self.after.as_ref().or(self.before.as_ref())?;
        if self.table.key.is_empty() {
            return None;
        }
        Some(self.table.key.iter().map(|k| (k.clone(), row.get(k).cloned().unwrap_or(Value::Null))).collect())
    }

    /// [`Change::key`] as its JSON text (such as `{"id":1}`), the key
    /// [`into_changelog`](Change::into_changelog) gives; a one-column key (the common
    /// case) is written without making the [`Row`].
    #[must_use]
    pub fn key_json(&self) -> Option<String> {
        let row = self.after.as_ref().or(self.before.as_ref())?;
        let [column] = self.table.key.as_slice() else {
            return serde_json::to_string(&self.key()?).ok();
        };
        let mut out = Vec::with_capacity(column.len() + 24);
        out.push(b'{');
        serde_json::to_writer(&mut out, column).ok()?;
        out.push(b':');
        serde_json::to_writer(&mut out, row.get(column).unwrap_or(&Value::Null)).ok()?;
        out.push(b'}');
        String::from_utf8(out).ok()
    }

    /// The Debezium value of this change; `server` is the logical server name (the
    /// topics' prefix), `db` the database.
    #[must_use]
    pub fn event(&self, server: &str, db: &str) -> ChangeEvent {
        let source = SourceInfo {
            version: Some(concat!("sluice-", env!("CARGO_PKG_VERSION")).into()),
            connector: Some("postgresql".into()),
            name: Some(server.into()),
            ts_ms: Some(self.commit_us / 1000),
            snapshot: Some(self.snapshot.unwrap_or("false").into()),
            db: Some(db.into()),
            schema: Some(self.table.schema.clone()),
            table: Some(self.table.name.clone()),
            tx_id: self.tx_id.map(i64::from),
            lsn: i64::try_from(self.lsn).ok(),
            extra: Row::new(),
        };
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        ChangeEvent {
            op: self.op,
            before: self.before.as_ref().map(Tuple::to_row),
            after: self.after.as_ref().map(Tuple::to_row),
            source,
            ts_ms: i64::try_from(now.as_millis()).ok(),
            extra: Row::new(),
        }
    }

    /// The topic Debezium writes this table's changes to: `<server>.<schema>.<table>`.
    #[must_use]
    pub fn topic(&self, server: &str) -> String {
        format!("{server}.{}.{}", self.table.schema, self.table.name)
    }

    /// The table's Connect schema, for the with-schema form.
    #[must_use]
    pub fn schema(&self, server: &str) -> TableSchema {
        TableSchema {
            topic: self.topic(server),
            columns: self.table.columns.iter().map(|(n, oid)| (n.clone(), column_type(*oid), true)).collect(),
            key: self.table.key.clone(),
        }
    }

    /// The messages Debezium writes for this change, as (key, value): the change, and
    /// after a delete of a keyed row its tombstone (the key with a null value).
    #[must_use]
    pub fn messages(&self, server: &str, db: &str, form: Form) -> Vec<Message> {
        let schema = (form == Form::WithSchema).then(|| self.schema(server));
        let key = self.key().map(|k| encode_key(&k, schema.as_ref().map(key_schema).as_ref()));
        let value = encode_value(&self.event(server, db), schema.as_ref().map(value_schema).as_ref());
        let mut out = vec![(key.clone(), Some(value))];
        if self.op == Op::Delete && key.is_some() {
            out.push((key, None));
        }
        out
    }
}

impl Change {
    /// This change as a change of its table in the processor's changelog
    /// ([`changelog::Change`]), keyed by the primary key's columns as JSON (Debezium's key
    /// payload, such as `{"id":1}`), its rows the columns' values: what
    /// [`into_table`](crate::dataflow::Stream::into_table) materializes. `None` for a table
    /// without a primary key (nothing identifies its rows).
    ///
    /// # Errors
    ///
    /// [`ChangeError::UnknownOp`] for a truncation, which no per-key change expresses.
    ///
    /// [`changelog::Change`]: crate::dataflow::changelog::Change
    pub fn into_changelog(self) -> Option<Result<changelog::Change<String, Row>, ChangeError>> {
        let key = self.key_json()?;
        let (before, after) = (self.before.map(Tuple::into_row), self.after.map(Tuple::into_row));
        Some(changelog::Change::from_debezium(key, self.op.code(), before, after))
    }
}

/// A row in a checkpoint (a table's state, records in flight): its JSON text.
impl Data for Row {
    fn encode(&self, out: &mut Vec<u8>) {
        serde_json::to_vec(self).unwrap_or_default().encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, StateError> {
        let bytes = Vec::<u8>::decode(input)?;
        serde_json::from_slice(&bytes).map_err(|e| StateError(format!("a row's JSON: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_text_values_as_debezium_json() {
        assert_eq!(json_value(23, "42".into()), Value::from(42));
        assert_eq!(json_value(20, "-9000000000".into()), Value::from(-9_000_000_000_i64));
        assert_eq!(json_value(16, "t".into()), Value::Bool(true));
        assert_eq!(json_value(701, "1.5".into()), serde_json::json!(1.5));
        assert_eq!(json_value(701, "NaN".into()), Value::from("NaN"));
        assert_eq!(json_value(17, "\\x0001ff".into()), Value::from("AAH/"));
        assert_eq!(json_value(1700, "12.50".into()), Value::from("12.50"));
        assert_eq!(json_value(25, "hello".into()), Value::from("hello"));
    }

    fn row(pairs: &[(&str, Value)]) -> Row {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
    }

    fn change(op: Op, key: &[&str], before: Option<Row>, after: Option<Row>) -> Change {
        let table = Arc::new(TableInfo {
            schema: "public".into(),
            name: "items".into(),
            columns: vec![("id".into(), 23), ("title".into(), 25)],
            key: key.iter().map(|k| (*k).to_owned()).collect(),
        });
        let tuple = |row: Row| {
            let values = table.columns.iter().map(|(n, _)| row.get(n).cloned().unwrap_or(Value::Null)).collect();
            Tuple::new(table.clone(), values)
        };
        let (before, after) = (before.map(tuple), after.map(tuple));
        Change { table: table.clone(), op, before, after, lsn: 1, tx_id: Some(7), commit_us: 0, snapshot: None }
    }

    #[test]
    fn postgres_value_bytes_as_json_like_their_text() {
        for (oid, text) in [(23, "42"), (16, "f"), (701, "-0.25"), (17, "\\x00ff"), (25, "h\u{e9}llo"), (1700, "1.0")] {
            assert_eq!(json_value_of(oid, text.as_bytes()), json_value(oid, text.to_owned()), "{oid} {text}");
        }
        // Bytes that are not UTF-8 are replaced, never a panic.
        assert_eq!(json_value_of(25, b"a\xffb"), Value::from("a\u{fffd}b"));
    }

    #[test]
    fn postgres_key_json_is_the_changelog_key_without_a_row() {
        let a = row(&[("id", 7.into()), ("title", "q\"t".into())]);
        for key in [&["id"][..], &["title"], &["title", "id"]] {
            let c = change(Op::Create, key, None, Some(a.clone()));
            assert_eq!(c.key_json(), Some(serde_json::to_string(&c.key().unwrap()).unwrap()), "{key:?}");
        }
        assert_eq!(change(Op::Delete, &["id"], Some(a.clone()), None).key_json().as_deref(), Some(r#"{"id":7}"#));
        assert_eq!(change(Op::Create, &[], None, Some(a)).key_json(), None);
        assert_eq!(change(Op::Truncate, &["id"], None, None).key_json(), None);
    }

    #[test]
    fn postgres_changes_become_changelog_changes_keyed_by_the_primary_key() {
        use crate::dataflow::changelog::ChangeOp;
        let (a, b) = (row(&[("id", 1.into()), ("title", "a".into())]), row(&[("id", 1.into()), ("title", "b".into())]));
        let insert = change(Op::Create, &["id"], None, Some(a.clone())).into_changelog().unwrap().unwrap();
        assert_eq!((insert.key.as_str(), &insert.op), (r#"{"id":1}"#, &ChangeOp::Insert(a.clone())));
        let update = change(Op::Update, &["id"], Some(a.clone()), Some(b.clone())).into_changelog().unwrap().unwrap();
        assert_eq!(update.op, ChangeOp::Update { before: Some(a.clone()), after: b.clone() });
        let delete = change(Op::Delete, &["id"], Some(b.clone()), None).into_changelog().unwrap().unwrap();
        assert_eq!(delete.op, ChangeOp::Delete { before: Some(b.clone()) });
        let read = change(Op::Read, &["id"], None, Some(a.clone())).into_changelog().unwrap().unwrap();
        assert_eq!(read.op, ChangeOp::Insert(a.clone()));
        // No primary key: nothing identifies the row. A truncation is no per-key change.
        assert!(change(Op::Create, &[], None, Some(a.clone())).into_changelog().is_none());
        assert!(
            matches!(change(Op::Truncate, &["id"], None, Some(a)).into_changelog(), Some(Err(ChangeError::UnknownOp(op))) if op == "t")
        );
    }

    #[test]
    fn postgres_rows_round_trip_through_checkpoint_data() {
        let value = row(&[("id", 5.into()), ("title", "x\"y".into()), ("tags", serde_json::json!(["a", 1.5, null]))]);
        let mut bytes = Vec::new();
        value.encode(&mut bytes);
        let mut input = &bytes[..];
        assert_eq!(Row::decode(&mut input).unwrap(), value);
        assert!(input.is_empty());
        // Bytes that are not a row's JSON are a typed error.
        let mut bad = Vec::new();
        b"{not json".to_vec().encode(&mut bad);
        assert!(Row::decode(&mut &bad[..]).is_err());
    }
}
