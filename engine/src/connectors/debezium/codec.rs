//! Decoding and encoding the key and value messages, in both forms.

use serde_json::{Map, Value};

use super::{ChangeEvent, DebeziumError, Decoded, Op, Row, SourceInfo, kind};

/// Parses a message's bytes and splits the with-schema form: an object with exactly the
/// fields `schema` (an object or null) and `payload` is that form; anything else is a
/// schema-less payload.
fn parse(bytes: &[u8], what: &'static str) -> Result<(Value, Option<Value>), DebeziumError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|source| DebeziumError::NotJson { what, source })?;
    match value {
        Value::Object(mut map)
            if map.len() == 2
                && map.contains_key("payload")
                && matches!(map.get("schema"), Some(Value::Object(_) | Value::Null)) =>
        {
            let payload = map.remove("payload").unwrap_or(Value::Null);
            let schema = map.remove("schema").filter(|s| !s.is_null());
            Ok((payload, schema))
        }
        other => Ok((other, None)),
    }
}

/// Decodes a value message: `None` (a null Kafka value) or a JSON `null` payload is a
/// tombstone.
///
/// # Errors
///
/// A [`DebeziumError`] naming the field that is missing or of the wrong type, an unknown
/// `op`, or `before`/`after` that do not fit the op.
pub fn decode_value(bytes: Option<&[u8]>) -> Result<Decoded<ChangeEvent>, DebeziumError> {
    let Some(bytes) = bytes else { return Ok(Decoded { payload: None, schema: None }) };
    let (payload, schema) = parse(bytes, "value")?;
    let map = match payload {
        Value::Null => return Ok(Decoded { payload: None, schema }),
        Value::Object(map) => map,
        other => return Err(wrong("value", "an object", &other)),
    };
    Ok(Decoded { payload: Some(event(map)?), schema })
}

/// Decodes a key message: the primary key's columns (`None` for a null key, as a table
/// without a primary key has).
///
/// # Errors
///
/// Not JSON, or not an object.
pub fn decode_key(bytes: Option<&[u8]>) -> Result<Decoded<Row>, DebeziumError> {
    let Some(bytes) = bytes else { return Ok(Decoded { payload: None, schema: None }) };
    let (payload, schema) = parse(bytes, "key")?;
    match payload {
        Value::Null => Ok(Decoded { payload: None, schema }),
        Value::Object(map) => Ok(Decoded { payload: Some(map), schema }),
        other => Err(wrong("key", "an object", &other)),
    }
}

/// Encodes a change event's value message; with `schema`, in the with-schema form.
/// (A tombstone is a null value: nothing to encode.)
#[must_use]
pub fn encode_value(event: &ChangeEvent, schema: Option<&Value>) -> Vec<u8> {
    let mut map = Map::new();
    map.insert("before".into(), event.before.clone().map_or(Value::Null, Value::Object));
    map.insert("after".into(), event.after.clone().map_or(Value::Null, Value::Object));
    map.insert("source".into(), Value::Object(source_json(&event.source)));
    map.insert("op".into(), Value::String(event.op.code().into()));
    if let Some(ts_ms) = event.ts_ms {
        map.insert("ts_ms".into(), Value::from(ts_ms));
    }
    for (name, value) in &event.extra {
        map.insert(name.clone(), value.clone());
    }
    wrap(Value::Object(map), schema)
}

/// Encodes a key message; with `schema`, in the with-schema form.
#[must_use]
pub fn encode_key(key: &Row, schema: Option<&Value>) -> Vec<u8> {
    wrap(Value::Object(key.clone()), schema)
}

fn wrap(payload: Value, schema: Option<&Value>) -> Vec<u8> {
    let value = match schema {
        Some(schema) => {
            let mut map = Map::new();
            map.insert("schema".into(), schema.clone());
            map.insert("payload".into(), payload);
            Value::Object(map)
        }
        None => payload,
    };
    // Serializing a `Value` (string keys) cannot fail.
    serde_json::to_vec(&value).unwrap_or_default()
}

fn wrong(field: &str, expected: &'static str, found: &Value) -> DebeziumError {
    DebeziumError::WrongType { field: field.to_owned(), expected, found: kind(found) }
}

fn row(map: &mut Row, field: &'static str) -> Result<Option<Row>, DebeziumError> {
    match map.remove(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(row)) => Ok(Some(row)),
        Some(other) => Err(wrong(&format!("value.{field}"), "an object or null", &other)),
    }
}

fn int(value: Option<Value>, field: &str) -> Result<Option<i64>, DebeziumError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(n) => Ok(Some(n)),
            None => {
                Err(DebeziumError::WrongType { field: field.to_owned(), expected: "an integer", found: "a number" })
            }
        },
        Some(other) => Err(wrong(field, "an integer", &other)),
    }
}

fn string(value: Option<Value>, field: &str) -> Result<Option<String>, DebeziumError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(wrong(field, "a string", &other)),
    }
}

fn event(mut map: Row) -> Result<ChangeEvent, DebeziumError> {
    let op = match map.remove("op") {
        Some(Value::String(code)) => Op::from_code(&code)?,
        Some(other) => return Err(wrong("value.op", "a string", &other)),
        None => return Err(DebeziumError::Missing("value.op".into())),
    };
    let before = row(&mut map, "before")?;
    let after = row(&mut map, "after")?;
    let source = match map.remove("source") {
        Some(Value::Object(source)) => source_info(source)?,
        Some(Value::Null) | None => SourceInfo::default(),
        Some(other) => return Err(wrong("value.source", "an object", &other)),
    };
    let ts_ms = int(take(&mut map, "ts_ms"), "value.ts_ms")?;
    let problem = match op {
        Op::Create | Op::Read | Op::Update if after.is_none() => Some("needs `after`"),
        Op::Delete if after.is_some() => Some("has an `after`"),
        Op::Truncate if before.is_some() || after.is_some() => Some("has a row"),
        _ => None,
    };
    if let Some(problem) = problem {
        return Err(DebeziumError::Inconsistent { op: op.code(), problem });
    }
    Ok(ChangeEvent { op, before, after, source, ts_ms, extra: map })
}

/// Takes a named field out of `source`, but leaves an explicit null in place (in
/// `extra`), so that re-encoding writes the null back.
fn take(map: &mut Row, name: &str) -> Option<Value> {
    if matches!(map.get(name), Some(Value::Null)) { None } else { map.remove(name) }
}

fn source_info(mut map: Row) -> Result<SourceInfo, DebeziumError> {
    let snapshot = match take(&mut map, "snapshot") {
        // Older connectors wrote a boolean: named as its string, kept as written.
        Some(Value::Bool(b)) => {
            map.insert("snapshot".into(), Value::Bool(b));
            Some(b.to_string())
        }
        other => string(other, "value.source.snapshot")?,
    };
    let mut text = |name: &str| string(take(&mut map, name), &format!("value.source.{name}"));
    let (version, connector, name) = (text("version")?, text("connector")?, text("name")?);
    let (db, schema, table) = (text("db")?, text("schema")?, text("table")?);
    let mut number = |name: &str| int(take(&mut map, name), &format!("value.source.{name}"));
    let (ts_ms, tx_id, lsn) = (number("ts_ms")?, number("txId")?, number("lsn")?);
    Ok(SourceInfo { version, connector, name, ts_ms, snapshot, db, schema, table, tx_id, lsn, extra: map })
}

fn source_json(source: &SourceInfo) -> Row {
    let mut map = Map::new();
    // Fields the message did not have stay out (another connector's `source` has no
    // `lsn`); what a field held, null included, comes back from `extra`.
    let texts = [
        ("version", &source.version),
        ("connector", &source.connector),
        ("name", &source.name),
        ("snapshot", &source.snapshot),
        ("db", &source.db),
        ("schema", &source.schema),
        ("table", &source.table),
    ];
    for (name, value) in texts {
        if let Some(value) = value {
            map.insert(name.into(), Value::String(value.clone()));
        }
    }
    for (name, value) in [("ts_ms", source.ts_ms), ("txId", source.tx_id), ("lsn", source.lsn)] {
        if let Some(value) = value {
            map.insert(name.into(), Value::from(value));
        }
    }
    for (name, value) in &source.extra {
        map.insert(name.clone(), value.clone());
    }
    map
}
