//! `sluice serve`: Kafka clients produce and consume through it, and SIGTERM stops it
//! cleanly (the data directory is released and what was produced is there afterwards).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{kcat, script, stop};
use sluice_engine::kafka::child::client_command as client;

fn data_dir(name: &str) -> PathBuf {
    common::data_dir("kafka-serve", name)
}

#[test]
fn serve_answers_kafka_clients_and_stops_on_sigterm() {
    let dir = data_dir("sigterm");
    let (server, addr) = start_serve(&dir, "127.0.0.1:0").unwrap_or_else(|e| panic!("sluice serve: {e}"));
    let addr = addr.as_str();
    assert!(addr.starts_with("127.0.0.1:"), "loopback by default: {addr}");

    // kcat produces to a topic that does not exist yet (created on first use, as Kafka's
    // auto.create.topics.enable does), then reads it back.
    let out = kcat(&["-b", addr, "-P", "-t", "served", "-K:"], "a:1\nb:2\nc:3\n");
    assert!(out.status.success(), "kcat -P: {}", String::from_utf8_lossy(&out.stderr));
    let out = kcat(&["-b", addr, "-C", "-t", "served", "-e", "-q", "-f", "%k=%s\n"], "");
    assert!(out.status.success(), "kcat -C: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a=1\nb=2\nc=3\n");

    stop(server);

    // The directory is free again and holds what was produced.
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["consume", "served", "--from-beginning", "--data-dir"])
        .arg(&dir)
        .output()
        .expect("sluice consume runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 3, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts `sluice serve` on `listen`; returns the child and the address it printed, or
/// the child's stderr if it exited instead.
fn start_serve(dir: &Path, listen: &str) -> Result<(std::process::Child, String), String> {
    start_serve_with(dir, listen, &[])
}

/// [`start_serve`] with more options.
fn start_serve_with(dir: &Path, listen: &str, options: &[&str]) -> Result<(std::process::Child, String), String> {
    let mut server = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--data-dir"])
        .arg(dir)
        .args(["--listen", listen, "--shards", "2"])
        .args(options)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice serve starts");
    let mut line = String::new();
    BufReader::new(server.stdout.take().expect("stdout")).read_line(&mut line).expect("a line");
    match line.trim().strip_prefix("listening on ") {
        Some(addr) => Ok((server, addr.to_string())),
        None => {
            let out = server.wait_with_output().expect("exited");
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

#[test]
fn a_restart_right_after_kill_9_binds_the_port_while_clients_were_connected() {
    let dir = data_dir("rebind");
    let (mut server, addr) = start_serve(&dir, "127.0.0.1:0").expect("first start");
    let out = kcat(&["-b", &addr, "-P", "-t", "rebind"], "x\n");
    assert!(out.status.success(), "kcat -P: {}", String::from_utf8_lossy(&out.stderr));
    // Consumers that stay connected: when the server dies they close their ends, which
    // leaves the server's ends in TIME_WAIT on the listening port.
    let mut consumers: Vec<std::process::Child> = ["-o", "-G"]
        .iter()
        .map(|mode| {
            let args: &[&str] = if *mode == "-G" {
                &["-b", &addr, "-C", "-q", "-G", "rebind-group", "rebind"]
            } else {
                &["-b", &addr, "-C", "-q", "-t", "rebind", "-o", "beginning"]
            };
            client("kcat").args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("kcat")
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    server.kill().expect("kill -9");
    server.wait().expect("reaped");
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let (mut again, addr_again) = start_serve(&dir, &addr).unwrap_or_else(|e| panic!("restart on {addr}: {e}"));
    assert_eq!(addr_again, addr);
    assert!(started.elapsed() < Duration::from_secs(10), "bound after {:?}", started.elapsed());
    // It serves: a record produced now reads back. (The one produced before the kill was
    // acknowledged under the default interval:5 fsync, which a kill may take back.)
    let out = kcat(&["-b", &addr, "-P", "-t", "rebind"], "y\n");
    assert!(out.status.success(), "kcat -P: {}", String::from_utf8_lossy(&out.stderr));
    let out = kcat(&["-b", &addr, "-C", "-t", "rebind", "-e", "-q"], "");
    assert!(String::from_utf8_lossy(&out.stdout).ends_with("y\n"), "{}", String::from_utf8_lossy(&out.stderr));
    for c in &mut consumers {
        let _ = c.kill();
        let _ = c.wait();
    }
    again.kill().expect("kill");
    let _ = again.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn admin_clients_alter_configs_and_partitions_and_a_restart_keeps_them() {
    let dir = data_dir("admin");
    let options = ["--num-partitions", "3", "--retention-check-ms", "200"];
    let (server, addr) =
        start_serve_with(&dir, "127.0.0.1:0", &options).unwrap_or_else(|e| panic!("sluice serve: {e}"));
    script("confluent_admin.py", &[&addr, "adm", "before"]);
    script("kafka_python_admin.py", &[&addr, "kpadm"]);
    stop(server);

    // What the clients altered is in the metadata: the CLI sees it too.
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["topic", "describe", "adm", "--data-dir"])
        .arg(&dir)
        .output()
        .expect("sluice topic describe runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("config retention.bytes\tvalue 8192\tsource topic"), "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("partition ")).count(), 4, "{text}");

    let options = ["--auto-create-topics", "false", "--transaction-max-timeout-ms", "60000"];
    let (server, addr) = start_serve_with(&dir, "127.0.0.1:0", &options).unwrap_or_else(|e| panic!("restart: {e}"));
    script("confluent_admin.py", &[&addr, "adm", "after"]);
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_refuses_broker_settings_out_of_range() {
    let dir = data_dir("bad-settings");
    for (options, needle) in [
        (&["--num-partitions", "0"][..], "--num-partitions"),
        (&["--auto-create-topics", "maybe"][..], "--auto-create-topics"),
        (&["--transaction-max-timeout-ms", "0"][..], "--transaction-max-timeout-ms"),
    ] {
        let err = start_serve_with(&dir, "127.0.0.1:0", options).map(|(mut s, _)| s.kill()).expect_err("refused");
        assert!(err.contains(needle) && err.lines().count() == 1, "{options:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
