//! Round trips against messages written by hand from Debezium's documented PostgreSQL
//! connector format, and the typed errors of malformed ones. Named `debezium_*` so that
//! `cargo test debezium` selects them.

use serde_json::{Value, json};

use super::*;

fn source(snapshot: &str, lsn: i64) -> Value {
    json!({
        "version": "2.7.0.Final", "connector": "postgresql", "name": "PostgreSQL_server",
        "ts_ms": 1_559_033_904_863_i64, "snapshot": snapshot, "db": "postgres",
        "sequence": "[\"24023119\",\"24023128\"]", "schema": "public", "table": "customers",
        "txId": 555, "lsn": lsn, "xmin": null
    })
}

fn anne(email: &str) -> Value {
    json!({"id": 1, "first_name": "Anne", "last_name": "Kretchmar", "email": email})
}

fn customers() -> TableSchema {
    TableSchema {
        topic: "PostgreSQL_server.public.customers".into(),
        columns: vec![
            ("id".into(), ColumnType::Int32, false),
            ("first_name".into(), ColumnType::String, false),
            ("last_name".into(), ColumnType::String, false),
            ("email".into(), ColumnType::String, false),
        ],
        key: vec!["id".into()],
    }
}

/// Decodes `message`, checks what it holds, re-encodes it and checks the JSON is the same.
fn round_trip(message: &Value) -> ChangeEvent {
    let bytes = serde_json::to_vec(message).unwrap();
    let decoded = decode_value(Some(&bytes)).unwrap();
    let event = decoded.payload.clone().expect("an event, not a tombstone");
    let again = encode_value(&event, decoded.schema.as_ref());
    assert_eq!(serde_json::from_slice::<Value>(&again).unwrap(), *message);
    event
}

#[test]
fn debezium_create_schemaless_round_trip() {
    let message = json!({
        "before": null, "after": anne("annek@noanswer.org"), "source": source("false", 24_023_128),
        "op": "c", "ts_ms": 1_559_033_904_863_i64
    });
    let event = round_trip(&message);
    assert_eq!(event.op, Op::Create);
    assert_eq!(event.before, None);
    assert_eq!(event.after.as_ref().unwrap()["email"], "annek@noanswer.org");
    assert_eq!(event.source.lsn, Some(24_023_128));
    assert_eq!(event.source.tx_id, Some(555));
    assert_eq!(event.source.table.as_deref(), Some("customers"));
    assert_eq!(event.source.snapshot.as_deref(), Some("false"));
    // Fields the codec has no name for are kept: `sequence`, and `xmin`'s null.
    assert_eq!(event.source.extra["xmin"], Value::Null);
    assert!(event.source.extra.contains_key("sequence"));
}

#[test]
fn debezium_create_with_schema_round_trip() {
    let table = customers();
    let payload = json!({
        "before": null, "after": anne("annek@noanswer.org"), "source": source("false", 24_023_128),
        "op": "c", "ts_ms": 1_559_033_904_863_i64
    });
    let message = json!({"schema": value_schema(&table), "payload": payload});
    let event = round_trip(&message);
    let decoded = decode_value(Some(&serde_json::to_vec(&message).unwrap())).unwrap();
    assert_eq!(decoded.schema.as_ref().unwrap()["name"], "PostgreSQL_server.public.customers.Envelope");
    assert_eq!(event.after.unwrap()["id"], 1);
    // The key, in both forms.
    let key = json!({"id": 1}).as_object().unwrap().clone();
    let with = encode_key(&key, Some(&key_schema(&table)));
    let back = decode_key(Some(&with)).unwrap();
    assert_eq!(back.payload.as_ref(), Some(&key));
    assert_eq!(back.schema.unwrap()["fields"][0]["type"], "int32");
    assert_eq!(serde_json::from_slice::<Value>(&encode_key(&key, None)).unwrap(), json!({"id": 1}));
}

#[test]
fn debezium_update_with_before_round_trip() {
    let message = json!({
        "before": anne("annek@noanswer.org"), "after": anne("anne@example.com"),
        "source": source("false", 24_023_200), "op": "u", "ts_ms": 1_465_584_025_523_i64
    });
    let event = round_trip(&message);
    assert_eq!(event.op, Op::Update);
    assert_eq!(event.before.unwrap()["email"], "annek@noanswer.org");
    assert_eq!(event.after.unwrap()["email"], "anne@example.com");
}

#[test]
fn debezium_delete_and_tombstone() {
    // Replica identity DEFAULT: the before-image holds the key alone, the rest null.
    let before = json!({"id": 1, "first_name": null, "last_name": null, "email": null});
    let message = json!({
        "before": before, "after": null, "source": source("false", 46_523_128),
        "op": "d", "ts_ms": 1_465_581_902_461_i64
    });
    let event = round_trip(&message);
    assert_eq!(event.op, Op::Delete);
    assert_eq!(event.after, None);
    // The tombstone that follows: a null Kafka value, and the JSON null form.
    assert_eq!(decode_value(None).unwrap(), Decoded { payload: None, schema: None });
    assert_eq!(decode_value(Some(b"null")).unwrap().payload, None);
    let with_schema_null = br#"{"schema": null, "payload": null}"#;
    assert_eq!(decode_value(Some(with_schema_null)).unwrap().payload, None);
}

#[test]
fn debezium_snapshot_read_and_truncate_round_trip() {
    let read = json!({
        "before": null, "after": anne("annek@noanswer.org"), "source": source("last", 24_023_128),
        "op": "r", "ts_ms": 1_559_033_904_863_i64
    });
    let event = round_trip(&read);
    assert_eq!((event.op, event.source.snapshot.as_deref()), (Op::Read, Some("last")));
    let truncate = json!({
        "before": null, "after": null, "source": source("false", 24_023_500), "op": "t",
        "ts_ms": 1_559_033_904_900_i64
    });
    assert_eq!(round_trip(&truncate).op, Op::Truncate);
    // An older connector's boolean `snapshot` comes back as a boolean.
    let mut old = read.clone();
    old["source"]["snapshot"] = Value::Bool(true);
    assert_eq!(round_trip(&old).source.snapshot.as_deref(), Some("true"));
}

#[test]
fn debezium_malformed_messages_are_typed_errors() {
    let cases: Vec<(&[u8], &str)> = vec![
        (b"{not json", "not JSON"),
        (b"[1, 2]", "expected an object"),
        (br#"{"before": null, "after": {"id": 1}}"#, "value.op: missing"),
        (br#"{"op": "x", "after": {"id": 1}}"#, "unknown op"),
        (br#"{"op": 1, "after": {"id": 1}}"#, "value.op: expected a string"),
        (br#"{"op": "c", "after": null}"#, "needs `after`"),
        (br#"{"op": "d", "before": {"id": 1}, "after": {"id": 1}}"#, "has an `after`"),
        (br#"{"op": "t", "before": {"id": 1}}"#, "has a row"),
        (br#"{"op": "c", "after": [1]}"#, "value.after: expected an object or null"),
        (br#"{"op": "c", "after": {}, "source": {"lsn": "12"}}"#, "value.source.lsn: expected an integer"),
        (br#"{"op": "c", "after": {}, "source": {"txId": 1.5}}"#, "value.source.txId: expected an integer"),
        (br#"{"op": "c", "after": {}, "source": {"table": 3}}"#, "value.source.table: expected a string"),
        (br#"{"op": "c", "after": {}, "source": 7}"#, "value.source: expected an object"),
        (br#"{"op": "c", "after": {}, "ts_ms": "now"}"#, "value.ts_ms: expected an integer"),
        (br#"{"schema": {}, "payload": 5}"#, "value: expected an object"),
    ];
    for (bytes, expected) in cases {
        let error = decode_value(Some(bytes)).expect_err(std::str::from_utf8(bytes).unwrap());
        assert!(error.to_string().contains(expected), "{}: {error}", std::str::from_utf8(bytes).unwrap());
    }
    assert!(decode_key(Some(b"12")).unwrap_err().to_string().contains("key: expected an object"));
    assert!(matches!(decode_key(Some(b"{")), Err(DebeziumError::NotJson { what: "key", .. })));
    assert_eq!(decode_key(None).unwrap().payload, None);
}

#[test]
fn debezium_encodes_what_it_is_given() {
    let mut after = Row::new();
    after.insert("id".into(), 7.into());
    let event = ChangeEvent {
        op: Op::Create,
        before: None,
        after: Some(after),
        source: SourceInfo { connector: Some("postgresql".into()), lsn: Some(99), ..SourceInfo::default() },
        ts_ms: Some(5),
        extra: Row::new(),
    };
    let value: Value = serde_json::from_slice(&encode_value(&event, None)).unwrap();
    assert_eq!(
        value,
        json!({"before": null, "after": {"id": 7}, "source": {"connector": "postgresql", "lsn": 99}, "op": "c", "ts_ms": 5})
    );
    assert_eq!(decode_value(Some(&encode_value(&event, None))).unwrap().payload, Some(event));
}
