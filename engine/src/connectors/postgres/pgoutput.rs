//! The replication stream's messages: the copy-both frames (`w` XLogData, `k` keepalive)
//! and, inside XLogData, `pgoutput`'s logical replication messages (protocol version 1):
//! Begin, Commit, Relation, Insert, Update, Delete, Truncate; Origin, Type and logical
//! decoding messages are read and skipped.

use bytes::{Buf, Bytes};

use super::{PostgresError, wire::protocol};

/// A position in the write-ahead log.
pub type Lsn = u64;

/// One column value of a tuple, borrowed from its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Datum<'a> {
    /// SQL NULL.
    Null,
    /// A TOASTed value the update did not change, which the server does not send.
    UnchangedToast,
    /// The value in PostgreSQL's text form: a slice of the message (no copy, no
    /// reference count).
    Text(&'a [u8]),
}

/// A column of a Relation message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Part of the replica identity (the primary key under `REPLICA IDENTITY DEFAULT`).
    pub key: bool,
    /// Its name.
    pub name: String,
    /// Its type's oid.
    pub type_oid: u32,
}

/// A Relation message: a table's shape, sent before its first change in a session and
/// again after it changes (a column added).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// The table's oid.
    pub oid: u32,
    /// Its schema.
    pub schema: String,
    /// Its name.
    pub name: String,
    /// Replica identity: `d` default, `n` nothing, `f` full, `i` index.
    pub identity: u8,
    /// Its columns, in order.
    pub columns: Vec<Column>,
}

/// One decoded pgoutput message (its values borrowed from the message's bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Logical<'a> {
    /// A transaction begins; `final_lsn` is its commit's LSN, `timestamp` its commit time
    /// (microseconds since 2000-01-01).
    Begin { final_lsn: Lsn, timestamp: i64, xid: u32 },
    /// It committed; `end_lsn` is where the next transaction starts, the position to
    /// confirm once everything before it is safe.
    Commit { commit_lsn: Lsn, end_lsn: Lsn, timestamp: i64 },
    /// A table's shape.
    Relation(Relation),
    /// A row inserted.
    Insert { oid: u32, new: Vec<Datum<'a>> },
    /// A row updated: `old` is the key (`K`) or the whole old row (`O`, replica identity
    /// full) when the server sends it.
    Update { oid: u32, old: Option<(u8, Vec<Datum<'a>>)>, new: Vec<Datum<'a>> },
    /// A row deleted, with its key or whole old row.
    Delete { oid: u32, old: (u8, Vec<Datum<'a>>) },
    /// Tables truncated.
    Truncate { oids: Vec<u32> },
    /// Anything else (Origin, Type, Message): nothing to carry.
    Other(u8),
}

/// A copy-both frame from the server.
#[derive(Debug)]
pub enum Frame {
    /// XLogData: a message starting at `start` in the log.
    Data { start: Lsn, message: Bytes },
    /// A keepalive: the end of what the server has sent (every transaction committed
    /// before it has been sent whole), and whether it wants an answer now.
    Keepalive { wal_end: Lsn, reply: bool },
}

fn short(what: &str) -> PostgresError {
    PostgresError::Decode(format!("a short {what} message"))
}

fn need(body: &[u8], bytes: usize, what: &str) -> Result<(), PostgresError> {
    if body.len() < bytes { Err(short(what)) } else { Ok(()) }
}

/// Decodes one CopyData frame of the replication stream.
///
/// # Errors
///
/// [`PostgresError::Decode`] for a short or unknown frame.
pub fn frame(mut body: Bytes) -> Result<Frame, PostgresError> {
    need(&body, 1, "replication")?;
    match body.get_u8() {
        b'w' => {
            need(&body, 24, "XLogData")?;
            let start = body.get_u64();
            body.advance(16); // end of WAL, send time
            Ok(Frame::Data { start, message: body })
        }
        b'k' => {
            need(&body, 17, "keepalive")?;
            let wal_end = body.get_u64();
            body.advance(8); // the server's clock
            Ok(Frame::Keepalive { wal_end, reply: body.get_u8() == 1 })
        }
        other => Err(PostgresError::Decode(format!("unknown replication frame {:?}", other as char))),
    }
}

/// Decodes one pgoutput message.
///
/// # Errors
///
/// [`PostgresError::Decode`] for a short message, an unknown tuple kind or an unknown
/// column kind.
pub fn logical(mut body: &[u8]) -> Result<Logical<'_>, PostgresError> {
    need(body, 1, "pgoutput")?;
    let tag = body.get_u8();
    let b = &mut body;
    Ok(match tag {
        b'B' => {
            need(b, 20, "Begin")?;
            Logical::Begin { final_lsn: b.get_u64(), timestamp: b.get_i64(), xid: b.get_u32() }
        }
        b'C' => {
            need(b, 25, "Commit")?;
            b.advance(1);
            Logical::Commit { commit_lsn: b.get_u64(), end_lsn: b.get_u64(), timestamp: b.get_i64() }
        }
        b'R' => Logical::Relation(relation(b)?),
        b'I' => {
            let oid = oid(b, "Insert")?;
            expect(b, b'N', "Insert")?;
            Logical::Insert { oid, new: tuple(b)? }
        }
        b'U' => {
            let oid = oid(b, "Update")?;
            need(b, 1, "Update")?;
            let old = match b[0] {
                kind @ (b'K' | b'O') => {
                    b.advance(1);
                    Some((kind, tuple(b)?))
                }
                _ => None,
            };
            expect(b, b'N', "Update")?;
            Logical::Update { oid, old, new: tuple(b)? }
        }
        b'D' => {
            let oid = oid(b, "Delete")?;
            need(b, 1, "Delete")?;
            let kind = b.get_u8();
            if kind != b'K' && kind != b'O' {
                return Err(PostgresError::Decode(format!("Delete with tuple kind {:?}", kind as char)));
            }
            Logical::Delete { oid, old: (kind, tuple(b)?) }
        }
        b'T' => {
            need(b, 5, "Truncate")?;
            let count = b.get_u32() as usize;
            b.advance(1); // options: cascade, restart identity
            need(b, count.saturating_mul(4), "Truncate")?;
            Logical::Truncate { oids: (0..count).map(|_| b.get_u32()).collect() }
        }
        other => Logical::Other(other),
    })
}

fn oid(b: &mut &[u8], what: &str) -> Result<u32, PostgresError> {
    need(b, 4, what)?;
    Ok(b.get_u32())
}

fn expect(b: &mut &[u8], tag: u8, what: &str) -> Result<(), PostgresError> {
    need(b, 1, what)?;
    let found = b.get_u8();
    if found == tag {
        Ok(())
    } else {
        Err(PostgresError::Decode(format!("{what}: expected tuple {:?}, found {:?}", tag as char, found as char)))
    }
}

/// Reads a NUL-terminated string off `body`.
fn cstr(body: &mut &[u8]) -> Result<String, PostgresError> {
    let end = body.iter().position(|&b| b == 0).ok_or_else(|| protocol("a string without its NUL"))?;
    let text = String::from_utf8_lossy(&body[..end]).into_owned();
    *body = &body[end + 1..];
    Ok(text)
}

fn relation(b: &mut &[u8]) -> Result<Relation, PostgresError> {
    let oid = oid(b, "Relation")?;
    let schema = cstr(b)?;
    let name = cstr(b)?;
    need(b, 3, "Relation")?;
    let identity = b.get_u8();
    let count = b.get_i16();
    let mut columns = Vec::with_capacity(count.max(0) as usize);
    for _ in 0..count {
        need(b, 1, "Relation")?;
        let key = b.get_u8() & 1 == 1;
        let name = cstr(b)?;
        need(b, 8, "Relation")?;
        let type_oid = b.get_u32();
        b.advance(4); // type modifier
        columns.push(Column { key, name, type_oid });
    }
    Ok(Relation { oid, schema, name, identity, columns })
}

fn tuple<'a>(b: &mut &'a [u8]) -> Result<Vec<Datum<'a>>, PostgresError> {
    need(b, 2, "TupleData")?;
    let count = b.get_i16();
    let mut values = Vec::with_capacity(count.max(0) as usize);
    for _ in 0..count {
        need(b, 1, "TupleData")?;
        values.push(match b.get_u8() {
            b'n' => Datum::Null,
            b'u' => Datum::UnchangedToast,
            b't' => {
                need(b, 4, "TupleData")?;
                let len = b.get_u32() as usize;
                need(b, len, "TupleData")?;
                let (text, rest) = b.split_at(len);
                *b = rest;
                Datum::Text(text)
            }
            other => {
                return Err(PostgresError::Decode(format!("column kind {:?} (only text is asked for)", other as char)));
            }
        });
    }
    Ok(values)
}

/// A standby status update: `lsn` written, flushed and applied (all three: what sluice
/// has checkpointed), the time now, no reply asked.
#[must_use]
pub fn status_update(lsn: Lsn) -> Vec<u8> {
    let mut out = Vec::with_capacity(34);
    out.push(b'r');
    for _ in 0..3 {
        out.extend_from_slice(&lsn.to_be_bytes());
    }
    out.extend_from_slice(&pg_now_micros().to_be_bytes());
    out.push(0);
    out
}

/// Microseconds between the Unix epoch and PostgreSQL's, 2000-01-01.
pub const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// Now, in PostgreSQL's microseconds since 2000-01-01.
#[must_use]
pub fn pg_now_micros() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(now.as_micros()).unwrap_or(i64::MAX) - PG_EPOCH_MICROS
}

/// A PostgreSQL timestamp (microseconds since 2000-01-01) as microseconds since the Unix
/// epoch.
#[must_use]
pub fn unix_micros(pg_micros: i64) -> i64 {
    pg_micros.saturating_add(PG_EPOCH_MICROS)
}

/// An LSN in PostgreSQL's `X/Y` text form.
#[must_use]
pub fn lsn_text(lsn: Lsn) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// Parses PostgreSQL's `X/Y` form.
///
/// # Errors
///
/// [`PostgresError::Decode`] for anything else.
pub fn parse_lsn(text: &str) -> Result<Lsn, PostgresError> {
    let bad = || PostgresError::Decode(format!("{text:?} is not an LSN"));
    let (high, low) = text.split_once('/').ok_or_else(bad)?;
    let high = u64::from_str_radix(high, 16).map_err(|_| bad())?;
    let low = u64::from_str_radix(low, 16).map_err(|_| bad())?;
    if high > u64::from(u32::MAX) || low > u64::from(u32::MAX) {
        return Err(bad());
    }
    Ok(high << 32 | low)
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};

    use super::*;

    #[test]
    fn postgres_pgoutput_decodes_and_refuses_short_messages() {
        let mut m = BytesMut::new();
        m.put_u8(b'R');
        m.put_u32(16384);
        m.put_slice(b"public\0items\0");
        m.put_u8(b'd');
        m.put_i16(2);
        m.put_u8(1);
        m.put_slice(b"id\0");
        m.put_u32(23);
        m.put_i32(-1);
        m.put_u8(0);
        m.put_slice(b"note\0");
        m.put_u32(25);
        m.put_i32(-1);
        let relation = logical(&m).unwrap();
        let Logical::Relation(r) = relation else { panic!("{relation:?}") };
        assert_eq!(
            (r.schema.as_str(), r.name.as_str(), r.columns.len(), r.columns[0].key),
            ("public", "items", 2, true)
        );
        let mut u = BytesMut::new();
        u.put_u8(b'U');
        u.put_u32(16384);
        u.put_u8(b'N');
        u.put_i16(2);
        u.put_u8(b't');
        u.put_u32(1);
        u.put_slice(b"7");
        u.put_u8(b'u');
        let update = logical(&u).unwrap();
        assert_eq!(
            update,
            Logical::Update { oid: 16384, old: None, new: vec![Datum::Text(b"7"), Datum::UnchangedToast] }
        );
        // Every truncation of a message is a typed error, never a panic.
        for len in 1..u.len() {
            assert!(matches!(logical(&u[..len]), Err(PostgresError::Decode(_))), "{len}");
        }
        assert!(matches!(frame(Bytes::from_static(b"w\0\0")), Err(PostgresError::Decode(_))));
        assert!(matches!(frame(Bytes::from_static(b"x")), Err(PostgresError::Decode(_))));
        let mut k = BytesMut::new();
        k.put_u8(b'k');
        k.put_u64(0x16_B374_D848);
        k.put_i64(0);
        k.put_u8(1);
        assert!(matches!(frame(k.clone().freeze()), Ok(Frame::Keepalive { wal_end: 0x16_B374_D848, reply: true })));
        assert!(matches!(frame(k.freeze().slice(..17)), Err(PostgresError::Decode(_))));
        assert_eq!(parse_lsn("16/B374D848").unwrap(), 0x16_B374_D848);
        assert_eq!(lsn_text(0x16_B374_D848), "16/B374D848");
        assert!(parse_lsn("zz").is_err());
    }
}
