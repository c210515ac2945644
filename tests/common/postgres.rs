//! A PostgreSQL server of the test's own: `initdb` into a directory under the target's
//! test directory, `postgres` with `wal_level=logical` on a free port (TCP with
//! SCRAM-SHA-256 passwords, the Unix socket in the directory with trust), stopped and
//! removed when dropped. No system service is assumed. PostgreSQL refuses to run as root,
//! so under uid 0 its commands run as the `postgres` user (`runuser`), the directory
//! chowned to it. Binaries: `$SLUICE_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`
//! (Debian's packages, installed by .ci/deps), else the PATH.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// The password of the `postgres` role over TCP.
pub const PASSWORD: &str = "sluice-test-pw";

/// A running server.
pub struct Postgres {
    pub dir: PathBuf,
    pub port: u16,
    bin: PathBuf,
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

fn is_root() -> bool {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() == 0 }
}

/// `program` from the server's binaries, as the `postgres` user when we are root.
fn command(bin: &Path, program: &str) -> Command {
    let path = if bin.as_os_str().is_empty() { PathBuf::from(program) } else { bin.join(program) };
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(path);
        c
    } else {
        Command::new(path)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

impl Postgres {
    /// Starts a fresh server for the test `name`.
    pub fn start(name: &str) -> Postgres {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("pg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("pg dir");
        std::fs::write(dir.join("pw"), PASSWORD).expect("pwfile");
        if is_root() {
            let status = Command::new("chown").args(["-R", "postgres:postgres"]).arg(&dir).status();
            assert!(status.is_ok_and(|s| s.success()), "chown {} to postgres", dir.display());
        }
        let bin = bin_dir();
        let out = command(&bin, "initdb")
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-U", "postgres", "-E", "UTF8", "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync"])
            .arg(format!("--pwfile={}", dir.join("pw").display()))
            .output()
            .unwrap_or_else(|e| panic!("cannot run initdb ({e}): run .ci/deps to install PostgreSQL"));
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        let port = free_port();
        let server = command(&bin, "postgres")
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-p", &port.to_string(), "-k"])
            .arg(&dir)
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "wal_level=logical", "-c", "fsync=off"])
            .args(["-c", "max_replication_slots=8", "-c", "max_wal_senders=8"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("server.log")).expect("log"))
            .spawn()
            .expect("start postgres");
        let pg = Postgres { dir, port, bin, server: Some(server) };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = pg.psql_command().args(["-c", "SELECT 1"]).output().is_ok_and(|o| o.status.success());
            if ready {
                return pg;
            }
            assert!(Instant::now() < deadline, "postgres did not start: {}", pg.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// The DSN `sluice cdc postgres` connects with: TCP, password (SCRAM-SHA-256).
    pub fn dsn(&self) -> String {
        format!("host=127.0.0.1 port={} user=postgres password={PASSWORD} dbname=postgres", self.port)
    }

    fn psql_command(&self) -> Command {
        psql_command(&self.bin, &self.dir, self.port)
    }

    /// Runs `sql` (a script: several statements, transactions) through psql over the
    /// Unix socket; its output (unaligned, tuples only). Panics if a statement fails.
    pub fn psql(&self, sql: &str) -> String {
        run_script(&self.dir, self.port, sql)
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
            assert!(Instant::now() < deadline, "sluice's replication did not start streaming: {}", self.log());
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

fn psql_command(bin: &Path, dir: &Path, port: u16) -> Command {
    let mut c = command(bin, "psql");
    c.args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-U", "postgres", "-d", "postgres", "-h"])
        .arg(dir)
        .args(["-p", &port.to_string()]);
    c
}

/// [`Postgres::psql`] for the server whose socket is in `dir` on `port` (from another
/// thread).
pub fn run_script(dir: &Path, port: u16, sql: &str) -> String {
    let mut child = psql_command(&bin_dir(), dir, port)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run psql");
    child.stdin.take().expect("stdin").write_all(sql.as_bytes()).expect("write sql");
    let out = child.wait_with_output().expect("psql");
    assert!(out.status.success(), "psql failed on {sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = command(&self.bin, "pg_ctl")
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
