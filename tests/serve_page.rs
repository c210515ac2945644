//! `sluice serve --metrics-listen`'s page at `/`, in headless Chromium: it loads without
//! console errors and shows a topic a Kafka client (kcat) created and produced to, with
//! its end offset, and the end offset moves when more is produced (the page refreshes
//! itself). `/api/overview` answers its JSON, other methods get 405, other paths 404.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::{start, stop};

#[path = "../bench/tests/support/browser.rs"]
mod browser;
use browser::Browser;

fn kcat(args: &[&str], stdin: &str) {
    let out = common::kcat(args, stdin);
    assert!(out.status.success(), "kcat {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// An HTTP/1.0 request's status line and body.
fn http(addr: &str, method: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(s, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    (head.lines().next().unwrap_or("").to_string(), body.to_string())
}

/// The rows of the page's partitions table, as their cells' texts.
const PARTITION_ROWS: &str = "Array.from(document.querySelectorAll('#partitions tbody tr'))\
    .map((tr) => Array.from(tr.children).map((td) => td.textContent))";

fn end_offset_shown(rows: &Value, topic: &str) -> Option<u64> {
    rows.as_array()?.iter().find(|r| r[0] == topic && r[1] == "0").and_then(|r| r[3].as_str()?.parse().ok())
}

#[test]
fn the_overview_page_shows_a_produced_topic_and_its_end_offset() {
    let dir = common::data_dir("serve-page", "overview");
    let (server, kafka, metrics) = start(&dir);
    kcat(&["-b", &kafka, "-P", "-t", "shown", "-p", "0"], "a\nb\nc\nd\ne\n");

    let (status, body) = http(&metrics, "GET", "/api/overview");
    assert!(status.contains(" 200 "), "{status}\n{body}");
    let overview: Value = serde_json::from_str(&body).expect("JSON");
    let shown =
        overview["partitions"].as_array().unwrap().iter().find(|p| p["topic"] == "shown" && p["partition"] == 0);
    assert_eq!(shown.map(|p| p["end_offset"].as_f64()), Some(Some(5.0)), "{body}");
    assert!(http(&metrics, "POST", "/").0.contains(" 405 "));
    assert!(http(&metrics, "GET", "/nope").0.contains(" 404 "));
    assert!(http(&metrics, "GET", "/metrics").1.contains("sluice_log_end_offset{topic=\"shown\",partition=\"0\"} 5"));

    let mut page = Browser::launch();
    page.navigate(&format!("http://{metrics}/"));
    let rows = page.wait_for(PARTITION_ROWS, Duration::from_secs(30), |rows| end_offset_shown(rows, "shown").is_some());
    assert_eq!(end_offset_shown(&rows, "shown"), Some(5), "{rows}");
    // More records: the page shows the new end offset by itself.
    kcat(&["-b", &kafka, "-P", "-t", "shown", "-p", "0"], "f\ng\nh\n");
    let rows =
        page.wait_for(PARTITION_ROWS, Duration::from_secs(30), |rows| end_offset_shown(rows, "shown") == Some(8));
    assert_eq!(end_offset_shown(&rows, "shown"), Some(8), "{rows}");
    // The request rates: kcat's Produce requests are listed.
    let apis = page
        .eval("Array.from(document.querySelectorAll('#requests tbody tr td:first-child')).map((td) => td.textContent)");
    assert!(apis.as_array().unwrap().iter().any(|a| a == "Produce"), "{apis}");
    let errors = page.errors();
    assert!(errors.is_empty(), "the page logged errors: {errors:#?}");
    drop(page);
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
