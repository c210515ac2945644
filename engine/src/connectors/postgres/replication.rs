//! The replication thread: sets up (publication, slot, snapshot), then streams, turning
//! pgoutput's messages into whole transactions of [`Change`]s, and confirms to the
//! server the position the source's last completed checkpoint holds.

use std::{
    collections::HashMap,
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{
    PostgresConfig, PostgresError,
    change::{Change, TableInfo, UNAVAILABLE, json_value_of},
    ident, literal,
    pgoutput::{self, Datum, Frame, Logical, Lsn, Relation, lsn_text, unix_micros},
    snapshot::{self, Keys},
    tuple::Tuple,
    wire::Connection,
};
use crate::connectors::debezium::Op;

/// One unit the source emits whole: a transaction, or the snapshot; `end` is the
/// position after it.
#[derive(Debug)]
pub(crate) struct Unit {
    pub changes: Vec<Change>,
    pub end: Lsn,
}

/// What the source and its thread share.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// The position of the last completed checkpoint (0: none yet): confirmed to the
    /// server.
    pub acked: AtomicU64,
    /// Set when the source is dropped: the thread ends.
    pub stop: AtomicBool,
}

/// How often the confirmed position is sent even when it has not moved (PostgreSQL's
/// `wal_receiver_timeout` is 60 s by default; a walsender waits that long for a reply).
const STATUS_INTERVAL: Duration = Duration::from_secs(5);

/// How long one read waits, which bounds how late a stop or a new acknowledgement is
/// noticed.
const READ_WAIT: Duration = Duration::from_millis(100);

/// Runs the thread's work: sets up and streams until `shared.stop`, the channel's
/// receiver is gone, or an error (sent on before returning).
pub(crate) fn run(
    config: &PostgresConfig,
    resume: Option<Lsn>,
    shared: &Shared,
    out: &async_channel::Sender<Result<Unit, PostgresError>>,
) {
    if let Err(e) = stream(config, resume, shared, out) {
        let _ = out.send_blocking(Err(e));
    }
}

fn stream(
    config: &PostgresConfig,
    resume: Option<Lsn>,
    shared: &Shared,
    out: &async_channel::Sender<Result<Unit, PostgresError>>,
) -> Result<(), PostgresError> {
    let mut sql = Connection::connect(&config.dsn, false)?;
    let keys = snapshot::primary_keys(&mut sql, config)?;
    snapshot::ensure_publication(&mut sql, config)?;
    let mut repl = Connection::connect(&config.dsn, true)?;
    let confirmed = snapshot::slot_confirmed(&mut sql, &config.slot)?;
    let start = match (resume, confirmed) {
        (Some(lsn), Some(confirmed)) if confirmed <= lsn => lsn,
        (Some(lsn), Some(confirmed)) => {
            // The server has discarded what lies between: resuming would lose it.
            return Err(PostgresError::Config(format!(
                "replication slot {:?} has confirmed {}, past the checkpoint's {}",
                config.slot,
                lsn_text(confirmed),
                lsn_text(lsn)
            )));
        }
        (Some(lsn), None) => {
            return Err(PostgresError::Config(format!(
                "replication slot {:?} is gone: the checkpoint resumes from {}, which no other slot keeps",
                config.slot,
                lsn_text(lsn)
            )));
        }
        (None, exists) => {
            // No checkpoint: nothing was confirmed or committed from this slot, and its
            // snapshot is gone, so it is made again with a new one.
            if exists.is_some() {
                let drop = format!("SELECT pg_drop_replication_slot({})", literal(&config.slot));
                while_in_use(|| sql.query(&drop).map(|_| ()))?;
            }
            let (point, name) = snapshot::create_slot(&mut repl, &config.slot)?;
            let changes = snapshot::read(&mut sql, config, &keys, point, &name)?;
            if out.send_blocking(Ok(Unit { changes, end: point })).is_err() {
                return Ok(());
            }
            point
        }
    };
    drop(sql);
    let start_replication = format!(
        "START_REPLICATION SLOT {} LOGICAL {} (proto_version '1', publication_names {})",
        ident(&config.slot),
        lsn_text(start),
        literal(&ident(&config.publication))
    );
    while_in_use(|| repl.start_copy_both(&start_replication))?;
    let mut decoder = Decoder { config, keys, relations: HashMap::new(), txn: None, emitted: start };
    let mut status = Status { sent: resume.unwrap_or(0), last: Instant::now() };
    follow(&mut repl, &mut decoder, shared, out, &mut status)?;
    // Stopping: the last completed checkpoint's position may not have been sent yet (it
    // completes just before the stop), and a restart would otherwise make the server
    // decode again what lies between.
    status.send(&mut repl, shared, false)
}

/// Reads the stream until `shared.stop` or the channel's receiver is gone.
fn follow(
    repl: &mut Connection,
    decoder: &mut Decoder<'_>,
    shared: &Shared,
    out: &async_channel::Sender<Result<Unit, PostgresError>>,
    status: &mut Status,
) -> Result<(), PostgresError> {
    while !shared.stop.load(Ordering::Acquire) {
        status.send(repl, shared, false)?;
        let Some(message) = repl.read_timeout(READ_WAIT)? else { continue };
        let unit = match message.tag {
            b'd' => match pgoutput::frame(message.body)? {
                Frame::Keepalive { wal_end, reply } => {
                    status.send(repl, shared, reply)?;
                    decoder.idle(wal_end)
                }
                Frame::Data { start, message } => decoder.message(start, pgoutput::logical(&message)?)?,
            },
            b'E' => return Err(Connection::error(message.body)),
            b'c' => return Err(PostgresError::Closed),
            _ => None,
        };
        if let Some(unit) = unit
            && !deliver(repl, shared, out, unit, status)?
        {
            return Ok(());
        }
    }
    Ok(())
}

/// The standby status updates: the position last sent, and when.
struct Status {
    sent: Lsn,
    last: Instant,
}

impl Status {
    /// Sends the acknowledged position if it moved, if [`STATUS_INTERVAL`] has passed,
    /// or if `now` (the server asked).
    fn send(&mut self, repl: &mut Connection, shared: &Shared, now: bool) -> Result<(), PostgresError> {
        let acked = shared.acked.load(Ordering::Acquire).max(self.sent);
        if now || acked > self.sent || self.last.elapsed() >= STATUS_INTERVAL {
            repl.copy_data(&pgoutput::status_update(acked))?;
            (self.sent, self.last) = (acked, Instant::now());
        }
        Ok(())
    }
}

/// Wakes the replication thread when the channel has room.
struct Unpark(std::thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Hands `unit` to the source (false: the source is gone or stopping). While the channel
/// is full, the server still gets its status updates, so that a pipeline slower than the
/// log for longer than the server's `wal_sender_timeout` does not lose the connection.
fn deliver(
    repl: &mut Connection,
    shared: &Shared,
    out: &async_channel::Sender<Result<Unit, PostgresError>>,
    unit: Unit,
    status: &mut Status,
) -> Result<bool, PostgresError> {
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut send = std::pin::pin!(out.send(Ok(unit)));
    loop {
        if let std::task::Poll::Ready(sent) = send.as_mut().poll(&mut cx) {
            return Ok(sent.is_ok());
        }
        if shared.stop.load(Ordering::Acquire) {
            return Ok(false);
        }
        status.send(repl, shared, false)?;
        std::thread::park_timeout(READ_WAIT);
    }
}

/// How long a slot still held by a connection that is going away (the previous run's,
/// killed a moment ago) is waited for.
const IN_USE_WAIT: Duration = Duration::from_secs(30);

/// Runs `f` again while the server answers that the slot is in use (SQLSTATE 55006,
/// `object_in_use`), for at most [`IN_USE_WAIT`].
fn while_in_use(mut f: impl FnMut() -> Result<(), PostgresError>) -> Result<(), PostgresError> {
    let deadline = Instant::now() + IN_USE_WAIT;
    loop {
        match f() {
            Err(PostgresError::Server { code, .. }) if code == "55006" && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// The open transaction.
struct Txn {
    xid: u32,
    commit_us: i64,
    changes: Vec<Change>,
}

/// pgoutput's messages to transactions.
struct Decoder<'a> {
    config: &'a PostgresConfig,
    keys: Keys,
    /// Tables by oid: `None` for a table the source does not read.
    relations: HashMap<u32, Option<Arc<TableInfo>>>,
    txn: Option<Txn>,
    /// The end of the last unit handed on, or the position streaming started from (the
    /// restored checkpoint's or the snapshot's): transactions that end at or before it
    /// were emitted already (the server may send them again after a restart) and are
    /// skipped.
    emitted: Lsn,
}

impl Decoder<'_> {
    /// A keepalive while no transaction is open: every transaction committed before
    /// `wal_end` has been received, so the position moves there, as an empty unit (a
    /// checkpoint then records it and it is confirmed). Without this, a source whose
    /// tables see no changes for a while never confirms past its last transaction,
    /// and the server keeps (and on each restart decodes again) the log since then.
    fn idle(&mut self, wal_end: Lsn) -> Option<Unit> {
        if self.txn.is_some() || wal_end <= self.emitted {
            return None;
        }
        self.emitted = wal_end;
        Some(Unit { changes: Vec::new(), end: wal_end })
    }

    fn message(&mut self, lsn: Lsn, message: Logical<'_>) -> Result<Option<Unit>, PostgresError> {
        let outside = || PostgresError::Decode("a change outside a transaction".into());
        match message {
            Logical::Begin { timestamp, xid, .. } => {
                self.txn = Some(Txn { xid, commit_us: unix_micros(timestamp), changes: Vec::new() });
            }
            Logical::Commit { end_lsn, .. } => {
                let txn = self.txn.take().ok_or_else(outside)?;
                if end_lsn <= self.emitted {
                    return Ok(None);
                }
                self.emitted = end_lsn;
                return Ok(Some(Unit { changes: txn.changes, end: end_lsn }));
            }
            Logical::Relation(relation) => self.relation(relation),
            Logical::Insert { oid, new } => self.push(oid, lsn, Op::Create, None, Some((b'N', new)))?,
            Logical::Update { oid, old, new } => self.push(oid, lsn, Op::Update, old, Some((b'N', new)))?,
            Logical::Delete { oid, old } => self.push(oid, lsn, Op::Delete, Some(old), None)?,
            Logical::Truncate { oids } => {
                for oid in oids {
                    let Some(table) = self.table(oid)? else { continue };
                    let txn = self.txn.as_mut().ok_or_else(outside)?;
                    let (tx_id, commit_us) = (Some(txn.xid), txn.commit_us);
                    let change = Change {
                        table,
                        op: Op::Truncate,
                        before: None,
                        after: None,
                        lsn,
                        tx_id,
                        commit_us,
                        snapshot: None,
                    };
                    txn.changes.push(change);
                }
            }
            Logical::Other(_) => {}
        }
        Ok(None)
    }

    fn relation(&mut self, r: Relation) {
        let ours = self.config.tables.iter().any(|(s, t)| *s == r.schema && *t == r.name);
        let info = ours.then(|| {
            let key = match self.keys.get(&(r.schema.clone(), r.name.clone())) {
                Some(key) if !key.is_empty() => key.clone(),
                _ => r.columns.iter().filter(|c| c.key && r.identity != b'f').map(|c| c.name.clone()).collect(),
            };
            let columns = r.columns.iter().map(|c| (c.name.clone(), c.type_oid)).collect();
            Arc::new(TableInfo { schema: r.schema.clone(), name: r.name.clone(), columns, key })
        });
        self.relations.insert(r.oid, info);
    }

    fn table(&self, oid: u32) -> Result<Option<Arc<TableInfo>>, PostgresError> {
        match self.relations.get(&oid) {
            Some(info) => Ok(info.clone()),
            None => Err(PostgresError::Decode(format!("a change of relation {oid} before its Relation message"))),
        }
    }

    fn push(
        &mut self,
        oid: u32,
        lsn: Lsn,
        op: Op,
        old: Option<(u8, Vec<Datum<'_>>)>,
        new: Option<(u8, Vec<Datum<'_>>)>,
    ) -> Result<(), PostgresError> {
        let Some(table) = self.table(oid)? else { return Ok(()) };
        let after = new.map(|(_, values)| row(&table, values, old.as_ref().filter(|(k, _)| *k == b'O')));
        let before = old.map(|(_, values)| row(&table, values, None));
        let txn = self.txn.as_mut().ok_or_else(|| PostgresError::Decode("a change outside a transaction".into()))?;
        let (tx_id, commit_us) = (Some(txn.xid), txn.commit_us);
        txn.changes.push(Change { table, op, before, after, lsn, tx_id, commit_us, snapshot: None });
        Ok(())
    }
}

/// A tuple as a row; an unchanged TOASTed value is taken from `old` (a whole old row)
/// when it has it, else it is [`UNAVAILABLE`].
fn row(table: &Arc<TableInfo>, values: Vec<Datum<'_>>, old: Option<&(u8, Vec<Datum<'_>>)>) -> Tuple {
    let mut values = values.into_iter();
    let row = table
        .columns
        .iter()
        .enumerate()
        .map(|(i, (_, oid))| match values.next() {
            Some(Datum::Text(text)) => json_value_of(*oid, text),
            Some(Datum::UnchangedToast) => match old.and_then(|(_, o)| o.get(i)) {
                Some(Datum::Text(text)) => json_value_of(*oid, text),
                Some(Datum::Null) => Value::Null,
                _ => Value::String(UNAVAILABLE.into()),
            },
            Some(Datum::Null) | None => Value::Null,
        })
        .collect();
    Tuple::new(table.clone(), row)
}
