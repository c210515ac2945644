//! A PostgreSQL of the test's own (`LocalPostgres`, under the target's test directory)
//! and what the CDC tests ask of it: SQL that must succeed, a transaction's position, and
//! waits for sluice's replication to stream and to confirm a position.

use std::time::{Duration, Instant};

pub use sluice_engine::connectors::postgres::local::{LocalPostgres, PASSWORD};

/// A running server.
pub struct Postgres(pub LocalPostgres);

impl Postgres {
    /// Starts a fresh server for the test `name`, under the system's temporary directory:
    /// under root the server runs as the `postgres` user, who must reach its directory,
    /// and a checkout's target directory may be in a home only root can enter.
    pub fn start(name: &str) -> Postgres {
        let dir = std::env::temp_dir().join(format!("sluice-pg-{name}-{}", std::process::id()));
        Postgres(LocalPostgres::start(&dir).unwrap_or_else(|e| panic!("starting PostgreSQL: {e}")))
    }

    /// The DSN `sluice cdc postgres` connects with: TCP, password (SCRAM-SHA-256).
    pub fn dsn(&self) -> String {
        self.0.dsn()
    }

    /// Runs `sql`; its output. Panics if a statement fails.
    pub fn psql(&self, sql: &str) -> String {
        self.0.psql(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Runs `statements` as one transaction and returns the WAL insert position taken
    /// inside it, before its commit: once the slot's confirmed position passes it, the
    /// transaction is in a completed checkpoint of the change topics.
    pub fn transaction(&self, statements: &str) -> String {
        let out = self.psql(&format!("BEGIN;\n{statements}\nSELECT pg_current_wal_insert_lsn();\nCOMMIT;\n"));
        out.lines().last().expect("an LSN").trim().to_owned()
    }

    /// Waits (at most two minutes) until a replication connection of sluice's streams:
    /// its snapshot has been read, and what is written from now on comes as changes.
    pub fn wait_streaming(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let sql = "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'sluice' AND state = 'streaming';";
        while self.psql(sql).trim() != "1" {
            assert!(Instant::now() < deadline, "sluice's replication did not start streaming: {}", self.0.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (at most two minutes) until `slot` has confirmed a position past `lsn`.
    pub fn wait_confirmed(&self, slot: &str, lsn: &str) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let sql = format!(
            "SELECT coalesce(confirmed_flush_lsn > '{lsn}', false) FROM pg_replication_slots WHERE slot_name = '{slot}';"
        );
        while self.psql(&sql).trim() != "t" {
            assert!(Instant::now() < deadline, "slot {slot} did not confirm past {lsn}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
