//! `sluice serve --metrics-listen`: Kafka clients produce, consume and commit through the
//! listener, and a scrape of `/metrics` shows it (end offsets equal to the records
//! produced, request counters that move, a group's committed offset and lag); the text
//! passes `promtool check metrics`; other methods and paths are refused; a scrape while
//! the server shuts down answers or is refused cleanly.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{script, start, stop};

fn data_dir(name: &str) -> PathBuf {
    common::data_dir("metrics-serve", name)
}

/// kcat with `args`, which must succeed.
fn kcat(args: &[&str], stdin: &str) -> std::process::Output {
    let out = common::kcat(args, stdin);
    assert!(out.status.success(), "kcat {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// An HTTP/1.0 request: the status and the body, or the I/O error.
fn http(addr: &str, method: &str, path: &str, accept: Option<&str>) -> std::io::Result<(u16, String, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    write!(s, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{accept}\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((status, head.to_string(), body.to_string()))
}

fn scrape(addr: &str) -> String {
    let (status, head, body) = http(addr, "GET", "/metrics", None).expect("scrape");
    assert_eq!(status, 200, "{head}\n{body}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4"), "{head}");
    body
}

/// The value of the sample `series` (name and labels exactly as written), if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

fn promtool(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run promtool ({e}): run .ci/deps to install it (Debian's prometheus)"));
    child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("stdin");
    let out = child.wait_with_output().expect("promtool ran");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_scrape_shows_what_kafka_clients_did_and_passes_promtool() {
    let dir = data_dir("scrape");
    let (server, kafka, metrics) = start(&dir);
    assert!(metrics.starts_with("127.0.0.1:"), "{metrics}");

    kcat(&["-b", &kafka, "-P", "-t", "watched", "-K:"], "a:1\nb:2\nc:3\nd:4\ne:5\n");
    let out = kcat(&["-b", &kafka, "-C", "-t", "watched", "-e", "-q"], "");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 5);
    script("confluent_commit.py", &[&kafka, "watched", "watchers \"one\"", "3"]);

    let text = scrape(&metrics);
    let p = r#"{topic="watched",partition="0"}"#;
    assert_eq!(value(&text, &format!("sluice_log_end_offset{p}")), Some(5.0), "{text}");
    assert_eq!(value(&text, &format!("sluice_log_start_offset{p}")), Some(0.0), "{text}");
    assert_eq!(value(&text, &format!("sluice_log_records_appended_total{p}")), Some(5.0), "{text}");
    assert!(value(&text, &format!("sluice_log_size_bytes{p}")).is_some_and(|b| b > 0.0), "{text}");
    let produced = value(&text, r#"sluice_kafka_requests_total{api="Produce"}"#).expect("Produce counted");
    assert!(produced >= 1.0, "{text}");
    assert!(value(&text, r#"sluice_kafka_requests_total{api="Fetch"}"#).is_some_and(|n| n >= 1.0), "{text}");
    assert!(
        value(&text, r#"sluice_kafka_response_errors_total{api="Produce",error="NONE"}"#).is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert!(text.contains(r#"sluice_kafka_request_duration_seconds_bucket{api="Produce",le="+Inf"}"#), "{text}");
    assert!(text.contains("sluice_log_append_duration_seconds_count{shard="), "{text}");
    // The group id a client chose is escaped in its label.
    let g = r#"{group="watchers \"one\"",topic="watched",partition="0"}"#;
    assert_eq!(value(&text, &format!("sluice_group_committed_offset{g}")), Some(3.0), "{text}");
    assert_eq!(value(&text, &format!("sluice_group_lag{g}")), Some(2.0), "{text}");
    let accepted: f64 = text
        .lines()
        .filter(|l| l.starts_with("sluice_kafka_connections_accepted_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(accepted >= 3.0, "three clients connected at least: {text}");
    promtool(&text);

    // Counters move with the next request.
    kcat(&["-b", &kafka, "-P", "-t", "watched"], "f\n");
    let again = scrape(&metrics);
    assert_eq!(value(&again, &format!("sluice_log_end_offset{p}")), Some(6.0), "{again}");
    let produced_again = value(&again, r#"sluice_kafka_requests_total{api="Produce"}"#).expect("Produce counted");
    assert!(produced_again > produced, "{produced} then {produced_again}");

    // OpenMetrics when asked for it.
    let (status, head, body) =
        http(&metrics, "GET", "/metrics", Some("application/openmetrics-text; version=1.0.0")).expect("scrape");
    assert_eq!(status, 200);
    assert!(head.to_ascii_lowercase().contains("content-type: application/openmetrics-text"), "{head}");
    assert!(body.ends_with("# EOF\n"), "{body}");

    // Anything but GET of /metrics is refused.
    let (status, head, _) = http(&metrics, "POST", "/metrics", None).expect("post");
    assert_eq!(status, 405, "{head}");
    assert!(head.to_ascii_lowercase().contains("allow: get"), "{head}");
    assert_eq!(http(&metrics, "GET", "/nothing/here", None).expect("get").0, 404);
    assert_eq!(http(&metrics, "DELETE", "/nothing", None).expect("delete").0, 404);

    // Scrapes while the server shuts down: each answers (200, or 503 once the shards are
    // gone or the endpoint stops) or is refused; none hangs. Only a last request racing
    // the socket's close may get tiny_http's 500 or a closed connection (0).
    let scraper = {
        let metrics = metrics.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut statuses = Vec::new();
            while Instant::now() < deadline {
                match http(&metrics, "GET", "/metrics", None) {
                    Ok((status, _, _)) => statuses.push(status),
                    Err(_) => return (statuses, true),
                }
            }
            (statuses, false)
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    stop(server);
    let (statuses, refused) = scraper.join().expect("scraper");
    assert!(refused, "the port closes once the server stops");
    let settled = &statuses[..statuses.len().saturating_sub(1)];
    assert!(settled.iter().all(|s| [200, 503].contains(s)), "{statuses:?}");
    assert!(statuses.last().is_some_and(|s| [0, 200, 500, 503].contains(s)), "{statuses:?}");
    assert!(statuses.contains(&200), "{statuses:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_metrics_address_in_use_is_refused_at_start() {
    let dir = data_dir("in-use");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--data-dir"])
        .arg(&dir)
        .args(["--listen", "127.0.0.1:0", "--shards", "1", "--metrics-listen", &addr])
        .output()
        .expect("sluice serve runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("metrics endpoint"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
