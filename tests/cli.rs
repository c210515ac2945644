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

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

/// A failed command: non-zero exit and a one-line error containing `needle`.
fn fails(out: &Output, needle: &str) {
    assert!(!out.status.success(), "expected failure, got: {}", String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(needle), "{needle:?} not in {err:?}");
}

fn data_dir(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn create_produce_consume_round_trip() {
    let dir = data_dir("roundtrip");
    let d = dir.to_str().unwrap();
    let out =
        ok(&sluice(&["topic", "create", "orders", "--data-dir", d, "--partitions", "3", "--fsync", "interval:5"], ""));
    assert!(out.contains("created topic orders with 3 partitions"), "{out}");
    assert_eq!(ok(&sluice(&["topic", "list", "--data-dir", d], "")).trim(), "orders");

    let input: String = (0..300).map(|i| format!("key{}\tvalue {i}\n", i % 7)).collect();
    let placed = ok(&sluice(&["produce", "orders", "--data-dir", d, "--verbose"], &input));
    let placed: Vec<(u32, u64)> = placed
        .lines()
        .map(|l| {
            let (p, o) = l.split_once('\t').unwrap();
            (p.parse().unwrap(), o.parse().unwrap())
        })
        .collect();
    assert_eq!(placed.len(), 300);

    let out = ok(&sluice(&["consume", "orders", "--data-dir", d, "--from-beginning"], ""));
    let mut got: Vec<(u32, u64, String, String)> = out
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].parse().unwrap(), f[1].parse().unwrap(), f[2].to_string(), f[3].to_string())
        })
        .collect();
    got.sort();
    let mut want: Vec<(u32, u64, String, String)> =
        (0..300).map(|i| (placed[i].0, placed[i].1, format!("key{}", i % 7), format!("value {i}"))).collect();
    want.sort();
    assert_eq!(got, want, "consume equals what was produced");
    // Same key, same partition.
    for i in 0..300 {
        assert_eq!(placed[i].0, placed[i % 7].0);
    }

    // Without --from-beginning: only new records, so nothing here.
    assert_eq!(ok(&sluice(&["consume", "orders", "--data-dir", d], "")), "");
    let p = placed[0].0.to_string();
    let out =
        ok(&sluice(&["consume", "orders", "--data-dir", d, "--partition", &p, "--offset", "2", "--max", "2"], ""));
    let offsets: Vec<&str> = out.lines().map(|l| l.split('\t').nth(1).unwrap()).collect();
    assert_eq!(offsets, ["2", "3"]);

    let out = ok(&sluice(&["topic", "describe", "orders", "--data-dir", d], ""));
    assert!(out.contains("partitions 3") && out.contains("fsync interval:5"), "{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("partition ")).count(), 3);
    ok(&sluice(&["topic", "add-partitions", "orders", "--data-dir", d, "--partitions", "4"], ""));
    ok(&sluice(&["topic", "delete", "orders", "--data-dir", d], ""));
    assert_eq!(ok(&sluice(&["topic", "list", "--data-dir", d], "")), "");
}

#[test]
fn bad_input_is_a_one_line_error() {
    let dir = data_dir("bad");
    let d = dir.to_str().unwrap();
    fails(&sluice(&["topic", "create", "../escape", "--data-dir", d], ""), "not valid");
    assert!(!dir.join("..").join("escape-0").exists());
    fails(&sluice(&["topic", "create", "t", "--data-dir", d, "--fsync", "sometimes"], ""), "fsync policy");
    fails(&sluice(&["topic", "create", "t", "--data-dir", d, "--partitions", "0"], ""), "partitions");
    // One prefix, each cause once.
    let out = sluice(&["topic", "create", "t", "--data-dir", d, "--segment-bytes", "10"], "");
    fails(&out, "error: invalid configuration: segment_bytes_max 10 must be within");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("invalid configuration: invalid"), "{out:?}");
    fails(&sluice(&["topic", "create", "t", "--data-dir", d, "--min-cleanable-dirty-ratio", "2"], ""), "within [0, 1]");
    fails(&sluice(&["topic", "create", "t", "--data-dir", d, "--compression", "brotli"], ""), "--compression brotli");
    fails(&sluice(&["produce", "missing", "--data-dir", d], "x\n"), "unknown topic");
    fails(&sluice(&["consume", "missing", "--data-dir", d], ""), "unknown topic");
    ok(&sluice(&["topic", "create", "t", "--data-dir", d, "--max-record-bytes", "10"], ""));
    fails(&sluice(&["topic", "create", "t", "--data-dir", d], ""), "already exists");
    fails(&sluice(&["produce", "t", "--data-dir", d], "this line is too long\n"), "exceeds");
    ok(&sluice(&["produce", "t", "--data-dir", d], "a\n"));
    fails(&sluice(&["consume", "t", "--data-dir", d, "--offset", "5"], ""), "out of range");
    fails(&sluice(&["consume", "t", "--data-dir", d, "--partition", "3"], ""), "out of range");
}

#[test]
fn groups_resume_where_they_committed() {
    let dir = data_dir("groups");
    let d = dir.to_str().unwrap();
    ok(&sluice(&["topic", "create", "events", "--data-dir", d, "--partitions", "2"], ""));
    let input: String = (0..10).map(|i| format!("k{i}\tv{i}\n")).collect();
    ok(&sluice(&["produce", "events", "--data-dir", d], &input));
    let values = |out: &str| -> Vec<String> {
        let mut v: Vec<String> = out.lines().map(|l| l.split('\t').nth(3).unwrap().to_string()).collect();
        v.sort();
        v
    };
    // The first run reads 4 records and commits just those.
    let first =
        ok(&sluice(&["consume", "events", "--data-dir", d, "--group", "g1", "--from-beginning", "--max", "4"], ""));
    assert_eq!(first.lines().count(), 4);
    let rest = ok(&sluice(&["consume", "events", "--data-dir", d, "--group", "g1", "--from-beginning"], ""));
    let mut all = values(&first);
    all.extend(values(&rest));
    all.sort();
    let mut want: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    want.sort();
    assert_eq!(all, want, "the second run resumes exactly after the first");
    assert_eq!(ok(&sluice(&["consume", "events", "--data-dir", d, "--group", "g1"], "")), "");
    assert_eq!(ok(&sluice(&["group", "list", "--data-dir", d], "")).trim(), "g1");
    let described = ok(&sluice(&["group", "describe", "g1", "--data-dir", d], ""));
    assert!(described.lines().filter(|l| l.starts_with("events\t")).all(|l| l.ends_with("lag 0")), "{described}");
    let reset =
        ok(&sluice(&["group", "reset-offsets", "g1", "--data-dir", d, "--topic", "events", "--to-earliest"], ""));
    assert_eq!(reset.lines().count(), 2);
    let again = ok(&sluice(&["consume", "events", "--data-dir", d, "--group", "g1"], ""));
    assert_eq!(values(&again), want);
    fails(&sluice(&["group", "describe", "nobody", "--data-dir", d], ""), "unknown group");
    fails(&sluice(&["group", "reset-offsets", "g1", "--data-dir", d, "--topic", "events"], ""), "required");
}

#[test]
fn count_runs_a_windowed_pipeline_over_a_topic_and_prints_each_window() {
    let dir = data_dir("count");
    let d = dir.to_str().unwrap();
    ok(&sluice(&["topic", "create", "clicks", "--data-dir", d, "--partitions", "3", "--fsync", "never"], ""));
    let input: String = (0..500).map(|i| format!("page{}\tclick {i}\n", i % 4)).collect();
    ok(&sluice(&["produce", "clicks", "--data-dir", d], &input));
    // One-hour windows: the records (stamped at produce time) fall in one or two of them.
    let out = ok(&sluice(&["count", "clicks", "--data-dir", d, "--window-ms", "3600000"], ""));
    let mut per_page = std::collections::BTreeMap::<String, u64>::new();
    for line in out.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 4, "{line:?}");
        let (start, end): (i64, i64) = (fields[0].parse().unwrap(), fields[1].parse().unwrap());
        assert_eq!(end - start, 3_600_000, "{line:?}");
        assert_eq!(start % 3_600_000, 0, "{line:?}");
        *per_page.entry(fields[2].to_string()).or_default() += fields[3].parse::<u64>().unwrap();
    }
    let expected: std::collections::BTreeMap<String, u64> = (0..4).map(|p| (format!("page{p}"), 125)).collect();
    assert_eq!(per_page, expected, "{out}");
    fails(&sluice(&["count", "nope", "--data-dir", d], ""), "unknown topic");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn topic_clean_and_trim_apply_retention_compaction_and_delete_records_now() {
    let dir = data_dir("clean");
    let d = dir.to_str().unwrap();
    let create = |name: &str, extra: &[&str]| {
        let mut args = vec!["topic", "create", name, "--data-dir", d, "--segment-bytes", "4096"];
        args.extend_from_slice(extra);
        ok(&sluice(&args, ""));
    };
    create("sized", &["--retention-bytes", "8192"]);
    create("compacted", &["--cleanup", "compact", "--delete-retention-ms", "1000"]);
    // Six runs of 100 records: each run's batch (about 5.6 KB) rolls a 4 KiB segment.
    for run in 0..6 {
        let input: String = (run * 100..run * 100 + 100).map(|i| format!("key{}\tvalue {i:04}\n", i % 3)).collect();
        ok(&sluice(&["produce", "sized", "--data-dir", d], &input));
        ok(&sluice(&["produce", "compacted", "--data-dir", d], &input));
    }
    let describe = ok(&sluice(&["topic", "describe", "compacted", "--data-dir", d], ""));
    assert!(describe.contains("cleanup compact") && describe.contains("delete_retention_ms 1000"), "{describe}");
    assert!(describe.contains("\tcompression producer"), "Kafka's default: {describe}");
    create("zstd", &["--compression", "zstd"]);
    let describe = ok(&sluice(&["topic", "describe", "zstd", "--data-dir", d], ""));
    assert!(describe.contains("\tcompression zstd"), "{describe}");

    let field = |line: &str, name: &str| -> u64 {
        let f: Vec<&str> = line.split('\t').collect();
        let at =
            f.iter().position(|x| x.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name} in {line}"));
        f[at][name.len() + 1..].trim().parse().unwrap()
    };
    let out = ok(&sluice(&["topic", "clean", "sized", "--data-dir", d], ""));
    assert!(field(&out, "segments_deleted") > 0 && field(&out, "start") > 0, "{out}");
    let out = ok(&sluice(&["topic", "clean", "compacted", "--data-dir", d], ""));
    assert!(field(&out, "records_removed") > 0 && field(&out, "bytes_reclaimed") > 0, "{out}");
    let read = ok(&sluice(&["consume", "compacted", "--data-dir", d, "--from-beginning"], ""));
    assert!(read.lines().count() < 600, "compacted: {} records left", read.lines().count());
    assert!(read.contains("key0\tvalue 0597") && read.contains("key2\tvalue 0599"), "latest per key kept");

    // Trim: the start moves into the middle of what is left; reads start there.
    let start = field(&ok(&sluice(&["topic", "clean", "sized", "--data-dir", d], "")), "start");
    let before = (start + 590) / 2;
    let out = ok(&sluice(
        &["topic", "trim", "sized", "--data-dir", d, "--partition", "0", "--before", &before.to_string()],
        "",
    ));
    assert_eq!(out.trim(), format!("partition 0\tstart {before}"));
    let read = ok(&sluice(&["consume", "sized", "--data-dir", d, "--from-beginning", "--max", "1"], ""));
    assert_eq!(read.split('\t').nth(1), Some(before.to_string().as_str()), "{read}");
    fails(
        &sluice(&["topic", "trim", "sized", "--data-dir", d, "--partition", "0", "--before", "601"], ""),
        "out of range",
    );
    fails(
        &sluice(&["topic", "trim", "sized", "--data-dir", d, "--partition", "1", "--before", "1"], ""),
        "out of range",
    );
    fails(&sluice(&["topic", "clean", "missing", "--data-dir", d], ""), "unknown topic");
}

#[test]
fn the_cli_is_careful_at_its_edges() {
    let dir = data_dir("edges");
    let d = dir.to_str().unwrap();
    // A mistyped data directory is refused by every command but create, and not made.
    let missing = dir.join("missing");
    let m = missing.to_str().unwrap();
    for args in [
        vec!["topic", "list", "--data-dir", m],
        vec!["consume", "t", "--data-dir", m],
        vec!["group", "list", "--data-dir", m],
        vec!["produce", "t", "--data-dir", m],
    ] {
        fails(&sluice(&args, "x\n"), "does not exist");
    }
    assert!(!missing.exists(), "no empty store was made");
    // Out of range and negative numbers: one clear line.
    fails(&sluice(&["topic", "create", "t", "--data-dir", d, "--partitions", "-1"], ""), "-1 is not in 1..=10000");
    fails(&sluice(&["topic", "create", "t", "--data-dir", d, "--partitions", "10001"], ""), "10001 is not in");
    fails(&sluice(&["consume", "t", "--data-dir", d, "--max", "-5"], ""), "'-5'");

    // produce stops at the first bad line: everything before it written, nothing after.
    ok(&sluice(&["topic", "create", "t", "--data-dir", d, "--max-record-bytes", "20"], ""));
    let input: String = (1..=2600)
        .map(|i| if i == 2501 { "a line far longer than twenty bytes\n".to_string() } else { format!("v{i}\n") })
        .collect();
    let out = sluice(&["produce", "t", "--data-dir", d], &input);
    fails(&out, "line 2501: a record of 35 bytes exceeds");
    assert!(String::from_utf8_lossy(&out.stderr).contains("2500 records written"), "{out:?}");
    let describe = ok(&sluice(&["topic", "describe", "t", "--data-dir", d], ""));
    assert!(describe.contains("start 0\tend 2500"), "{describe}");

    // An unknown group: the error alone.
    let out = sluice(&["group", "describe", "nosuch", "--data-dir", d], "");
    fails(&out, "unknown group");
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));

    // A reader that goes away ends the output quietly, with status 0.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["consume", "t", "--data-dir", d, "--from-beginning"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("consume");
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut first).unwrap();
    assert!(first.starts_with("0\t0\t"), "{first:?}");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");

    // A following group consumer stopped by SIGTERM commits what it printed.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["consume", "t", "--data-dir", d, "--group", "g", "--from-beginning", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("consume --group");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    for _ in 0..2500 {
        lines.next().expect("a record").unwrap();
    }
    // SAFETY: kill(2) on a child we started and have not reaped, with SIGTERM.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let described = ok(&sluice(&["group", "describe", "g", "--data-dir", d], ""));
    assert!(described.contains("committed 2500\tend 2500\tlag 0"), "{described}");
}

#[test]
fn a_relative_data_dir_works_for_every_command() {
    let base = data_dir("relative");
    std::fs::create_dir_all(&base).unwrap();
    let run = |args: &[&str], stdin: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .current_dir(&base)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run sluice");
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    ok(&run(&["topic", "create", "t", "--data-dir", "rel/data", "--partitions", "2"], ""));
    ok(&run(&["produce", "t", "--data-dir", "rel/data"], "a\tone\nb\ttwo\n"));
    let out = ok(&run(&["consume", "t", "--data-dir", "rel/data", "--from-beginning"], ""));
    assert_eq!(out.lines().count(), 2, "{out}");
    ok(&run(&["topic", "clean", "t", "--data-dir", "./rel/data"], ""));
    assert!(base.join("rel/data/topics/t-1").is_dir());
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn headers_and_null_values_go_in_and_come_out() {
    let dir = data_dir("headers");
    let d = dir.to_str().unwrap();
    ok(&sluice(&["topic", "create", "t", "--data-dir", d, "--partitions", "1", "--fsync", "never"], ""));
    let args = ["produce", "t", "--data-dir", d, "--header", "trace=abc", "--header", "flag", "--header", "e="];
    ok(&sluice(&args, "k1\tv1\nk2\t\n"));
    ok(&sluice(&["produce", "t", "--data-dir", d, "--null-empty"], "k3\t\nk4\tv4\n"));
    let out = ok(&sluice(&["consume", "t", "--data-dir", d, "--from-beginning", "--headers", "--null", "NULL"], ""));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        ["0\t0\tk1\tv1\ttrace=abc,flag,e=", "0\t1\tk2\t\ttrace=abc,flag,e=", "0\t2\tk3\tNULL\t", "0\t3\tk4\tv4\t",],
        "an empty value is empty, a null one NULL; a header without '=' is null"
    );
    // Without the flags, the output is as before: four columns, null printed as empty.
    let out = ok(&sluice(&["consume", "t", "--data-dir", d, "--from-beginning", "--max", "3"], ""));
    assert_eq!(out.lines().nth(2), Some("0\t2\tk3\t"));
    // Unkeyed records print the null marker for the key.
    ok(&sluice(&["produce", "t", "--data-dir", d], "no key\n"));
    let out = ok(&sluice(&["consume", "t", "--data-dir", d, "--offset", "4", "--null", "-"], ""));
    assert_eq!(out.trim(), "0\t4\t-\tno key");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn topic_alter_changes_settings_by_kafkas_names_and_describe_shows_them() {
    let dir = data_dir("alter");
    let d = dir.to_str().unwrap();
    ok(&sluice(&["topic", "create", "t", "--data-dir", d, "--partitions", "2", "--segment-bytes", "4096"], ""));
    let out = ok(&sluice(
        &[
            "topic",
            "alter",
            "t",
            "--data-dir",
            d,
            "--config",
            "retention.bytes=8192",
            "--config",
            "cleanup.policy=delete,compact",
            "--config",
            "flush.messages=1",
        ],
        "",
    ));
    assert_eq!(out.trim(), "altered topic t: retention.bytes=8192, cleanup.policy=compact,delete, flush.messages=1");
    let described = ok(&sluice(&["topic", "describe", "t", "--data-dir", d], ""));
    // The first line keeps its fields; a line per setting follows, then the partitions.
    let first = described.lines().next().unwrap();
    assert!(first.starts_with("topic t\tpartitions 2\tfsync always\tcleanup compact,delete"), "{first}");
    assert!(described.contains("config retention.bytes\tvalue 8192\tsource topic"), "{described}");
    assert!(described.contains("config retention.ms\tvalue -1\tsource default"), "{described}");
    assert!(described.contains("config flush.ms\tvalue 9223372036854775807\tsource topic"), "{described}");
    assert_eq!(described.lines().filter(|l| l.starts_with("partition ")).count(), 2);

    // Bad input: one line naming the setting, and nothing changes.
    fails(&sluice(&["topic", "alter", "t", "--data-dir", d, "--config", "retention.ms=soon"], ""), "retention.ms");
    fails(
        &sluice(&["topic", "alter", "t", "--data-dir", d, "--config", "colour=blue"], ""),
        "Unknown topic config name: colour",
    );
    fails(&sluice(&["topic", "alter", "t", "--data-dir", d, "--config", "retention.ms"], ""), "NAME=VALUE");
    fails(&sluice(&["topic", "alter", "t", "--data-dir", d, "--config", "flush.ms=100"], ""), "flush.ms");
    fails(&sluice(&["topic", "alter", "nope", "--data-dir", d, "--config", "retention.ms=1"], ""), "unknown topic");
    assert_eq!(ok(&sluice(&["topic", "describe", "t", "--data-dir", d], "")), described, "nothing changed");

    // Back to the default, and a new fsync interval, in one run (any order).
    let out = ok(&sluice(
        &["topic", "alter", "t", "--data-dir", d, "--delete-config", "flush.messages", "--config", "flush.ms=250"],
        "",
    ));
    assert!(out.contains("flush.ms=250") && out.contains("flush.messages=9223372036854775807"), "{out}");
    let described = ok(&sluice(&["topic", "describe", "t", "--data-dir", d], ""));
    assert!(described.lines().next().unwrap().contains("fsync interval:250"), "{described}");

    // The new retention reaches the cleaner: produce past it and clean.
    for run in 0..5 {
        let input: String = (0..100).map(|i| format!("k{i}\tvalue {run}-{i:04}\n")).collect();
        ok(&sluice(&["produce", "t", "--data-dir", d], &input));
    }
    let out = ok(&sluice(&["topic", "clean", "t", "--data-dir", d], ""));
    assert!(out.lines().any(|l| !l.contains("segments_deleted 0\t")), "retention.bytes=8192 deleted segments: {out}");

    // Partitions grow, never shrink.
    fails(
        &sluice(&["topic", "add-partitions", "t", "--data-dir", d, "--partitions", "1"], ""),
        "Topic currently has 2 partitions, which is higher than the requested 1.",
    );
    fails(
        &sluice(&["topic", "add-partitions", "t", "--data-dir", d, "--partitions", "2"], ""),
        "Topic already has 2 partitions.",
    );
    let out = ok(&sluice(&["topic", "add-partitions", "t", "--data-dir", d, "--partitions", "3"], ""));
    assert_eq!(out.trim(), "topic t now has 3 partitions");
}

#[test]
fn count_stops_with_a_savepoint_on_sigterm_and_resumes_from_it() {
    let dir = data_dir("count-savepoint");
    let d = dir.to_str().unwrap();
    let savepoint = dir.join("savepoint");
    let sp = savepoint.to_str().unwrap();
    ok(&sluice(&["topic", "create", "clicks", "--data-dir", d, "--partitions", "2", "--fsync", "never"], ""));
    // Two batches more than a window apart: at least two one-second windows.
    let batch = |from: usize| -> String { (from..from + 300).map(|i| format!("page{}\tclick {i}\n", i % 3)).collect() };
    ok(&sluice(&["produce", "clicks", "--data-dir", d], &batch(0)));
    std::thread::sleep(std::time::Duration::from_millis(1100));
    ok(&sluice(&["produce", "clicks", "--data-dir", d], &batch(300)));
    let lines = |out: &str| -> Vec<String> {
        let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
        lines.sort();
        lines
    };
    let want = lines(&ok(&sluice(&["count", "clicks", "--data-dir", d, "--window-ms", "1000"], "")));
    assert!(want.len() >= 6, "{want:?}");

    // A following count, stopped with SIGTERM once the first window fired: the windows
    // still open go into the savepoint.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["count", "clicks", "--data-dir", d, "--window-ms", "1000", "--follow", "--savepoint-dir", sp])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("count --follow");
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    // SAFETY: kill(2) on a child we started and have not reaped, with SIGTERM.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("stopped with savepoint"), "{stderr}");
    let mut got = lines(&(first + &rest));
    assert!(got.len() < want.len(), "the first run stopped before the last window: {got:?}");

    // Resumed from the savepoint (to the end of the topic): the remaining windows.
    let resumed = ok(&sluice(&["count", "clicks", "--data-dir", d, "--window-ms", "1000", "--from-savepoint", sp], ""));
    got.extend(lines(&resumed));
    got.sort();
    assert_eq!(got, want, "the stopped run and the resumed one count each window once");
    fails(
        &sluice(&["count", "clicks", "--data-dir", d, "--from-savepoint", dir.join("none").to_str().unwrap()], ""),
        "no such directory",
    );
    let _ = std::fs::remove_dir_all(&dir);
}
