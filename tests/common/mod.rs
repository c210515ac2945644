//! What the end-to-end tests of `sluice serve` share: a fresh data directory, kcat, the
//! Python client scripts of tests/kafka/, `sluice serve --metrics-listen` started (`start`),
//! and a clean stop with SIGTERM.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sluice_engine::kafka::child::client_command as client;

/// An empty directory `{prefix}-{name}-{pid}` under the target's test directory.
pub fn data_dir(prefix: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{prefix}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs kcat with `args`, `stdin` on its standard input; its output, whatever its status.
pub fn kcat(args: &[&str], stdin: &str) -> Output {
    let mut child = client("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run kcat ({e}): run .ci/deps to install the Kafka test clients"));
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("stdin");
    child.wait_with_output().expect("kcat ran")
}

/// Runs a client script of tests/kafka/ (at most two minutes); it must end with OK.
pub fn script(name: &str, args: &[&str]) {
    let python = std::env::var("SLUICE_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka").join(name);
    let mut child = client(&python)
        .arg(&path)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python} ({e}): run .ci/deps to install the Kafka test clients"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("script output");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{name} {args:?}:\n{stdout}");
    assert!(
        out.status.success() && stdout.trim_end().ends_with("OK"),
        "{name} failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
}

/// Stops a server with SIGTERM and waits (up to 20 s) for a clean exit.
pub fn stop(mut server: Child) {
    // SAFETY: kill(2) with a child's pid we started and have not waited for, and SIGTERM.
    let rc = unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = server.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "sluice serve did not stop within 20 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status:?}");
}

/// Starts `sluice serve` with `--metrics-listen 127.0.0.1:0`; returns the child, the
/// Kafka address and the metrics address.
pub fn start(dir: &Path) -> (Child, String, String) {
    start_on(dir, "127.0.0.1:0")
}

/// As [`start`], its Kafka listener on `listen`.
pub fn start_on(dir: &Path, listen: &str) -> (Child, String, String) {
    let mut server = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--data-dir"])
        .arg(dir)
        .args(["--listen", listen, "--shards", "2", "--metrics-listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice serve starts");
    let mut lines = BufReader::new(server.stdout.take().expect("stdout")).lines();
    let mut next = || lines.next().and_then(Result::ok).unwrap_or_default();
    let (metrics, kafka) = (next(), next());
    let metrics = metrics.strip_prefix("metrics on ").map(str::to_string);
    let kafka = kafka.strip_prefix("listening on ").map(str::to_string);
    match (metrics, kafka) {
        (Some(m), Some(k)) => (server, k, m),
        _ => {
            let out = server.wait_with_output().expect("exited");
            panic!("sluice serve did not start: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}
