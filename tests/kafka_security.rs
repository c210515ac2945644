//! `sluice serve` with a SASL listener beside a plaintext one, against real clients: kcat
//! (Debian's, librdkafka) and confluent-kafka log in with SCRAM-SHA-512, SCRAM-SHA-256 and
//! PLAIN; a wrong password, an unknown user and a client that does not log in read and
//! write nothing; users added while the server runs log in at once, and users survive a
//! restart. The listener's own checks (every API before the login, re-authentication)
//! are engine/tests/kafka_sasl.rs.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use common::{kcat, script, stop};

fn sluice(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice")).args(args).arg("--data-dir").arg(dir).output().expect("sluice runs")
}

/// Starts `sluice serve` with a plaintext listener and a SASL_PLAINTEXT one; returns the
/// child and both addresses.
fn serve(dir: &Path) -> (Child, String, String) {
    let mut server = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--data-dir"])
        .arg(dir)
        .args(["--shards", "1", "--listen", "127.0.0.1:0", "--listen", "SASL_PLAINTEXT://127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice serve starts");
    let mut out = BufReader::new(server.stdout.take().expect("stdout"));
    let mut line = |prefix: &str| {
        let mut l = String::new();
        out.read_line(&mut l).expect("a line");
        l.trim().strip_prefix(prefix).unwrap_or_else(|| panic!("{l:?} does not start with {prefix:?}")).to_string()
    };
    let plain = line("listening on ");
    let sasl = line("listening on SASL_PLAINTEXT://");
    (server, plain, sasl)
}

fn sasl_args<'a>(broker: &'a str, mechanism: &'a str, user: &'a str, password: &'a str) -> Vec<String> {
    [
        "-b",
        broker,
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        &format!("sasl.mechanism={mechanism}"),
        "-X",
        &format!("sasl.username={user}"),
        "-X",
        &format!("sasl.password={password}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn kcat_with(common: &[String], more: &[&str], stdin: &str) -> Output {
    let mut args: Vec<&str> = common.iter().map(String::as_str).collect();
    args.extend_from_slice(more);
    kcat(&args, stdin)
}

/// The records of `topic`, read through the plaintext listener.
fn records(plain: &str, topic: &str) -> Vec<String> {
    let out = kcat(&["-b", plain, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k=%s\n"], "");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[test]
fn sasl_clients_log_in_with_each_mechanism_and_bad_logins_touch_nothing() {
    let dir = common::data_dir("security", "sasl");
    std::fs::create_dir_all(&dir).expect("dir");
    let out = sluice(&["user", "add", "alice", "--password", "alice-secret"], &dir);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (server, plain, sasl) = serve(&dir);
    // The topic, made through the plaintext (loopback) listener.
    let made = kcat(&["-b", &plain, "-P", "-t", "secure", "-K", ":"], "seed:0\n");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    for mechanism in ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] {
        let args = sasl_args(&sasl, mechanism, "alice", "alice-secret");
        let out = kcat_with(&args, &["-P", "-t", "secure", "-K", ":"], &format!("{mechanism}:hello\n"));
        assert!(out.status.success(), "{mechanism}: {}", String::from_utf8_lossy(&out.stderr));
        let read = kcat_with(&args, &["-C", "-t", "secure", "-o", "beginning", "-e", "-q", "-f", "%k\n"], "");
        let keys = String::from_utf8_lossy(&read.stdout);
        assert!(keys.lines().any(|k| k == mechanism), "{mechanism} read back: {keys}");
    }
    assert_eq!(records(&plain, "secure").len(), 4);
    // A wrong password, an unknown user, a client that does not log in: each fails and
    // appends nothing.
    let bad = [
        sasl_args(&sasl, "SCRAM-SHA-512", "alice", "wrong"),
        sasl_args(&sasl, "PLAIN", "alice", "wrong"),
        sasl_args(&sasl, "SCRAM-SHA-256", "mallory", "alice-secret"),
        vec!["-b".to_string(), sasl.clone()],
    ];
    for args in &bad {
        let out = kcat_with(args, &["-P", "-t", "secure", "-K", ":", "-X", "message.timeout.ms=3000"], "bad:1\n");
        assert!(!out.status.success(), "{args:?} produced");
        let read = kcat_with(args, &["-L", "-m", "3"], "");
        assert!(!read.status.success(), "{args:?} read metadata: {}", String::from_utf8_lossy(&read.stdout));
    }
    assert_eq!(records(&plain, "secure").len(), 4, "nothing appended by a failed login");
    // confluent-kafka, with each mechanism and a group consumer, as a user added while
    // the server runs.
    let out = sluice(&["user", "add", "bob", "--password", "bob-secret"], &dir);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    script("confluent_sasl.py", &[&sasl, "secure-py", "bob", "bob-secret"]);
    // Deleting a user: the next login fails.
    let out = sluice(&["user", "delete", "bob"], &dir);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = kcat_with(&sasl_args(&sasl, "PLAIN", "bob", "bob-secret"), &["-L", "-m", "3"], "");
    assert!(!out.status.success(), "a deleted user logged in");
    stop(server);
    // The users survive a restart.
    let listed = sluice(&["user", "list"], &dir);
    let text = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(text.lines().filter(|l| l.starts_with("alice\t")).count(), 3, "{text}");
    assert!(!text.contains("bob"), "{text}");
    let (server, _, sasl) = serve(&dir);
    let out = kcat_with(&sasl_args(&sasl, "SCRAM-SHA-512", "alice", "alice-secret"), &["-L", "-m", "5"], "");
    assert!(out.status.success(), "after a restart: {}", String::from_utf8_lossy(&out.stderr));
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_refuses_to_let_anyone_in_from_outside_loopback_unless_told() {
    let dir = common::data_dir("security", "refuse");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--data-dir"])
        .arg(&dir)
        .args(["--shards", "1", "--listen", "0.0.0.0:0"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("--allow-plaintext"), "{err}");
    // Users are checked: a bad name, an empty password, too few iterations.
    std::fs::create_dir_all(&dir).expect("dir");
    for args in [
        &["user", "add", "", "--password", "x"][..],
        &["user", "add", "carol", "--password", ""],
        &["user", "add", "carol", "--password", "x", "--iterations", "10"],
        &["user", "add", "carol", "--password", "x", "--mechanism", "GSSAPI"],
        &["user", "delete", "nobody"],
    ] {
        let out = sluice(args, &dir);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
