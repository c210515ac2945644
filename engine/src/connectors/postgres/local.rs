//! A PostgreSQL server of its own, for tests and benchmarks: `initdb` into a directory the
//! caller names, `postgres` with `wal_level=logical` on a free port (TCP with SCRAM-SHA-256
//! passwords, the Unix socket in the directory with trust), stopped and the directory
//! removed when dropped. No system service is assumed. PostgreSQL refuses to run as root,
//! so under uid 0 its programs run as the `postgres` user (`runuser`), the directory
//! chowned to it. Binaries: `$SLUICE_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`
//! (Debian's packages, which .ci/deps installs), else the PATH.

use std::{
    io::{self, Write},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// The password of the `postgres` role over TCP.
pub const PASSWORD: &str = "sluice-local-pw";

/// A running server of its own.
#[derive(Debug)]
pub struct LocalPostgres {
    /// Its directory: the cluster in `data/`, the Unix socket, `server.log`.
    pub dir: PathBuf,
    /// Its TCP port on 127.0.0.1 (and the Unix socket's number).
    pub port: u16,
    bin: PathBuf,
    as_postgres: bool,
    server: Option<Child>,
}

fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("SLUICE_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).unwrap_or_default()
}

fn failed(what: &str, out: &std::process::Output) -> io::Error {
    io::Error::other(format!("{what}: {}", String::from_utf8_lossy(&out.stderr).trim()))
}

impl LocalPostgres {
    /// Starts a fresh server in `dir` (removed first if it exists), waiting at most a
    /// minute for it to take connections. Under root, the `postgres` user must be able to
    /// reach `dir` (every directory above it searchable by others, as `/tmp` is).
    ///
    /// # Errors
    ///
    /// PostgreSQL's programs missing or failing (the message says which and why).
    pub fn start(dir: &Path) -> io::Result<LocalPostgres> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("pw"), PASSWORD)?;
        // The directory is ours: its owner is who we run as.
        let as_postgres = std::fs::metadata(dir)?.uid() == 0;
        if as_postgres {
            let out = Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir).output()?;
            if !out.status.success() {
                return Err(failed("chown to the postgres user", &out));
            }
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut pg = LocalPostgres { dir: dir.to_owned(), port, bin: bin_dir(), as_postgres, server: None };
        let out = pg
            .command("initdb")
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-U", "postgres", "-E", "UTF8", "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync"])
            .arg(format!("--pwfile={}", dir.join("pw").display()))
            .output()
            .map_err(|e| {
                io::Error::new(e.kind(), format!("cannot run initdb ({e}): run .ci/deps to install PostgreSQL"))
            })?;
        if !out.status.success() {
            return Err(failed("initdb", &out));
        }
        let server = pg
            .command("postgres")
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-p", &port.to_string(), "-k"])
            .arg(dir)
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "wal_level=logical", "-c", "fsync=off"])
            .args(["-c", "max_replication_slots=8", "-c", "max_wal_senders=8"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("server.log"))?)
            .spawn()?;
        pg.server = Some(server);
        let deadline = Instant::now() + Duration::from_secs(60);
        while pg.psql("SELECT 1;").is_err() {
            if Instant::now() > deadline {
                return Err(io::Error::other(format!("postgres did not start: {}", pg.log())));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(pg)
    }

    /// One of PostgreSQL's programs, as the `postgres` user when we are root.
    #[must_use]
    pub fn command(&self, program: &str) -> Command {
        let path = if self.bin.as_os_str().is_empty() { PathBuf::from(program) } else { self.bin.join(program) };
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    /// The server's log so far.
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// A DSN for the `postgres` role over TCP, with its password (SCRAM-SHA-256).
    #[must_use]
    pub fn dsn(&self) -> String {
        format!("host=127.0.0.1 port={} user=postgres password={PASSWORD} dbname=postgres", self.port)
    }

    /// Runs `sql` (a script: statements, transactions) through psql over the Unix socket,
    /// stopping at the first error; its output (unaligned, tuples only).
    ///
    /// # Errors
    ///
    /// psql failing to run, or a statement's error (psql's message).
    pub fn psql(&self, sql: &str) -> io::Result<String> {
        let mut child = self
            .command("psql")
            .args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-U", "postgres", "-d", "postgres", "-h"])
            .arg(&self.dir)
            .args(["-p", &self.port.to_string(), "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child.stdin.take().ok_or_else(|| io::Error::other("psql's stdin"))?.write_all(sql.as_bytes())?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(failed("psql", &out));
        }
        String::from_utf8(out.stdout).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

impl Drop for LocalPostgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["stop", "-m", "immediate", "-w"])
            .output();
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server starts, takes SQL over its socket and a SCRAM login over TCP through
    /// the source's own connection, and is gone once dropped.
    #[test]
    fn postgres_local_server_starts_and_stops() {
        let dir = std::env::temp_dir().join(format!("sluice-local-pg-{}", std::process::id()));
        let pg = LocalPostgres::start(&dir).unwrap();
        assert_eq!(pg.psql("SHOW wal_level;").unwrap().trim(), "logical");
        assert!(pg.psql("SELECT nonsense;").unwrap_err().to_string().contains("nonsense"));
        let dsn = super::super::Dsn::parse(&pg.dsn()).unwrap();
        let mut c = super::super::wire::Connection::connect(&dsn, false).unwrap();
        assert_eq!(c.query("SELECT 40 + 2").unwrap().rows, vec![vec![Some("42".to_owned())]]);
        // MD5 and cleartext passwords too, and a wrong one refused with the server's error.
        pg.psql(
            "SET password_encryption = 'md5'; CREATE ROLE m LOGIN PASSWORD 'mpw';
             CREATE ROLE c LOGIN PASSWORD 'cpw';",
        )
        .unwrap();
        let hba = pg.dir.join("data/pg_hba.conf");
        let rules = std::fs::read_to_string(&hba).unwrap();
        let first = "host all m 127.0.0.1/32 md5\nhost all c 127.0.0.1/32 password\n";
        std::fs::write(&hba, format!("{first}{rules}")).unwrap();
        pg.psql("SELECT pg_reload_conf();").unwrap();
        let login = |user: &str, password: &str| {
            let dsn = format!("host=127.0.0.1 port={} user={user} password={password} dbname=postgres", pg.port);
            super::super::wire::Connection::connect(&super::super::Dsn::parse(&dsn).unwrap(), false)
                .and_then(|mut c| c.query("SELECT current_user"))
                .map(|rows| rows.rows[0][0].clone().unwrap())
        };
        // The reload is asynchronous: until it is in force, m's MD5-stored password fails
        // the SCRAM rule.
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Err(e) = login("m", "mpw") {
            assert!(Instant::now() < deadline, "MD5 login: {e}");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(login("c", "cpw").unwrap(), "c");
        assert!(matches!(login("m", "nope"), Err(super::super::PostgresError::Server { code, .. }) if code == "28P01"));
        let port = pg.port;
        drop(pg);
        assert!(!dir.exists());
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    }
}
