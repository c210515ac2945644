//! End-to-end tests of the `sluice` command line on a real data directory.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn sluice(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sluice");
    match child.stdin.take().expect("stdin").write_all(stdin.as_bytes()) {
        // A command that refuses its arguments may exit before reading its input.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other.expect("write stdin"),
    }
    child.wait_with_output().expect("wait for sluice")
}

fn data_dir(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn produce_then_consume_round_trips() {
    let dir = data_dir("roundtrip");
    let d = dir.to_str().unwrap();
    let input: String = (0..250).map(|i| format!("key{}\tvalue {i}\n", i % 3)).collect();
    let out = sluice(
        &["log", "produce", "--data-dir", d, "--topic", "orders", "--fsync", "interval:5", "--batch", "40"],
        &input,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "appended offsets 0..=249");

    let out = sluice(&["log", "consume", "--data-dir", d, "--topic", "orders"], "");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(String::from).collect();
    assert_eq!(lines.len(), 250);
    for (i, line) in lines.iter().enumerate() {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f[0], i.to_string());
        assert_eq!(f[2], format!("key{}", i % 3));
        assert_eq!(f[3], format!("value {i}"));
    }

    let out = sluice(&["log", "consume", "--data-dir", d, "--topic", "orders", "--from", "200", "--max", "3"], "");
    let text = String::from_utf8(out.stdout).unwrap();
    let offsets: Vec<&str> = text.lines().map(|l| l.split('\t').next().unwrap()).collect();
    assert_eq!(offsets, ["200", "201", "202"]);

    let out = sluice(&["log", "info", "--data-dir", d, "--topic", "orders"], "");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("end_offset\t250"), "{text}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = data_dir("bad");
    let d = dir.to_str().unwrap();
    let out = sluice(&["log", "produce", "--data-dir", d, "--topic", "../escape"], "x\n");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not valid"));
    assert!(!dir.join("..").join("escape-0").exists());

    let out = sluice(&["log", "produce", "--data-dir", d, "--topic", "t", "--fsync", "sometimes"], "x\n");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("fsync policy"));

    let out = sluice(&["log", "consume", "--data-dir", d, "--topic", "missing"], "");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such partition"));

    let out = sluice(&["log", "produce", "--data-dir", d, "--topic", "t"], "a\n");
    assert!(out.status.success());
    let out = sluice(&["log", "consume", "--data-dir", d, "--topic", "t", "--from", "5"], "");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("out of range"));
}
