//! A pipeline source reading PostgreSQL's changes through logical replication with the
//! built-in `pgoutput` plugin.
//!
//! On its first start (no checkpoint to resume from) the source makes sure the
//! publication exists and lists the tables, creates the replication slot with an exported
//! snapshot, reads every table in that snapshot (`REPEATABLE READ`, `SET TRANSACTION
//! SNAPSHOT`: exactly the rows the slot's stream does not carry) and then streams from
//! the slot's consistent point. Each transaction is emitted whole, in one batch, at its
//! commit (and the snapshot as one batch too), so a checkpoint never falls inside one.
//! The source's position is the commit end LSN of the last transaction it emitted: a
//! checkpoint records it, and only once that checkpoint has completed is it confirmed to
//! the server (a standby status update), which may then discard the log before it. After
//! a crash the restored position is where streaming restarts; transactions at or before
//! it that the server sends again are skipped. So with an exactly-once sink each change
//! is written once.
//!
//! One replication connection per source: the reader on shard 0 has the one split and
//! runs the connection on a thread of its own (blocking sockets; the shard never waits on
//! it), handing it whole transactions through a bounded channel.
//!
//! What is carried: inserts, updates, deletes, truncations, columns added (a Relation
//! message changes the table's shape from the next change on). Values arrive in
//! PostgreSQL's text form and become JSON values as [`change::json_value`] says, kept
//! per row as a [`Tuple`] (a vector of values sharing the table's column names) and made
//! into JSON objects only where a message or a changelog row is written. A TOASTed value
//! an update did not change is not sent by the server: it is taken from the update's
//! before-image when the table has `REPLICA IDENTITY FULL`, and is otherwise Debezium's
//! placeholder [`change::UNAVAILABLE`], as Debezium writes it (a consumer keeps the
//! value it had).

mod change;
mod dsn;
pub mod local;
mod pgoutput;
mod replication;
mod snapshot;
mod source;
mod tuple;
mod wire;

pub use change::{Change, Message, TableInfo, UNAVAILABLE, column_type, json_value};
pub use dsn::Dsn;
pub use pgoutput::{Lsn, lsn_text, parse_lsn};
pub use source::{PostgresReader, PostgresSource};
pub use tuple::Tuple;

/// What to read and how.
#[derive(Debug, Clone)]
pub struct PostgresConfig {
    /// Where to connect.
    pub dsn: Dsn,
    /// The tables, as (schema, table).
    pub tables: Vec<(String, String)>,
    /// The replication slot (created if missing; dropped and made again when there is
    /// no checkpoint to resume from, since its snapshot is gone).
    pub slot: String,
    /// The publication (created for the tables if missing; tables it lacks are added).
    pub publication: String,
}

impl PostgresConfig {
    /// Reads `tables` as `table` (schema `public`) or `schema.table`.
    ///
    /// # Errors
    ///
    /// [`PostgresError::Config`] for an empty name, a name with more than one dot, or no
    /// table at all.
    pub fn parse_tables(tables: &str) -> Result<Vec<(String, String)>, PostgresError> {
        let mut out = Vec::new();
        for name in tables.split(',').map(str::trim) {
            let parts: Vec<&str> = name.split('.').collect();
            let pair = match parts.as_slice() {
                [table] if !table.is_empty() => ("public".to_owned(), (*table).to_owned()),
                [schema, table] if !schema.is_empty() && !table.is_empty() => {
                    ((*schema).to_owned(), (*table).to_owned())
                }
                _ => {
                    return Err(PostgresError::Config(format!("{name:?} is not a table name (table or schema.table)")));
                }
            };
            if !out.contains(&pair) {
                out.push(pair);
            }
        }
        Ok(out)
    }
}

/// What went wrong talking to PostgreSQL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresError {
    /// The connection string.
    #[error("postgres DSN: {0}")]
    Dsn(String),
    /// The socket.
    #[error("postgres {op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The server closed the connection.
    #[error("postgres: the server closed the connection")]
    Closed,
    /// The server's ErrorResponse.
    #[error("postgres: {severity} {code}: {message}")]
    Server {
        /// ERROR, FATAL, ...
        severity: String,
        /// The SQLSTATE.
        code: String,
        /// The message.
        message: String,
    },
    /// Authentication the client cannot do, or that failed.
    #[error("postgres authentication: {0}")]
    Auth(String),
    /// A message that breaks the protocol.
    #[error("postgres protocol: {0}")]
    Protocol(String),
    /// A replication message that does not decode.
    #[error("postgres replication stream: {0}")]
    Decode(String),
    /// The configuration does not fit the database (a table that is not there, a slot
    /// gone that a checkpoint resumes from).
    #[error("postgres: {0}")]
    Config(String),
}

/// `name` as a quoted SQL identifier.
pub(crate) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `text` as a quoted SQL string literal.
pub(crate) fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_table_names_and_quoting() {
        let tables = PostgresConfig::parse_tables("items, shop.orders,items").unwrap();
        assert_eq!(tables, vec![("public".into(), "items".into()), ("shop".into(), "orders".into())]);
        for bad in ["", "a,,b", "a.b.c", ".x"] {
            assert!(matches!(PostgresConfig::parse_tables(bad), Err(PostgresError::Config(_))), "{bad}");
        }
        assert_eq!(ident("we\"ird"), "\"we\"\"ird\"");
        assert_eq!(literal("it's"), "'it''s'");
    }
}
