//! `sluice-bench pipeline --live`: a real run watched in headless Chromium. The page loads
//! without console errors, its figures and chart update at least three times while the
//! run goes on, and at the end the figures it shows are the run's `--json` report's.
//! With `SLUICE_LIVE_SCREENSHOT=PATH` the test also saves a screenshot of the page in
//! the middle of the run there.
//!
//! Also: `--live-linger` without `--live`, and `--live` on a workload with nothing to
//! show per second, are refused.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

#[path = "support/browser.rs"]
mod browser;
use browser::Browser;

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice-bench"))
}

/// Kills the run when the test ends, whatever happened.
struct Run(Child);

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The page's text for a report's number, as `live.js` writes it (`fmt`).
fn shown(v: &Value) -> String {
    match (v.as_u64(), v.as_f64()) {
        (Some(n), _) => n.to_string(),
        (None, Some(f)) if f.fract() == 0.0 => format!("{f}"),
        (None, Some(f)) if f >= 100.0 => format!("{f:.1}"),
        (None, Some(f)) => format!("{f:.3}"),
        _ => v.to_string(),
    }
}

#[test]
fn the_live_page_shows_a_pipeline_run_and_ends_with_its_report() {
    let dir = std::env::temp_dir().join(format!("sluice-live-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let _ = std::fs::remove_file(&json);
    // Six seconds at 20 000 events/s: a result each second, each second an update.
    let mut child = bench()
        .args(["pipeline", "--rate", "20000", "--duration", "6", "--shards", "2"])
        .args(["--live", "127.0.0.1:0", "--live-linger", "120", "--json"])
        .arg(&json)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice-bench starts");
    let stderr = child.stderr.take().unwrap();
    let run = Run(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("live page on ") {
                let _ = tx.send(url.to_string());
            }
        }
    });
    let url = rx.recv_timeout(Duration::from_secs(60)).expect("`live page on URL` on stderr");

    let mut page = Browser::launch();
    page.navigate(&url);
    // The figures while the run goes on: at least three updates, each a second's.
    let mut seen: Vec<(u64, String, u64)> = Vec::new();
    loop {
        let state = page.eval(
            "[Number(document.body.dataset.updates || 0), document.getElementById('fig-throughput').textContent, \
             document.querySelectorAll('#chart-throughput polyline')[0] ? \
             document.querySelectorAll('#chart-throughput polyline')[0].getAttribute('points').split(' ').length : 0, \
             document.body.dataset.final || '']",
        );
        let updates = state[0].as_u64().unwrap();
        if state[3] != "" {
            assert_eq!(state[3], "1", "the run failed: {:?}", page.text_of("status"));
            break;
        }
        if seen.last().is_none_or(|l| l.0 != updates) {
            seen.push((updates, state[1].as_str().unwrap().to_string(), state[2].as_u64().unwrap()));
        }
        if updates == 4
            && let Ok(path) = std::env::var("SLUICE_LIVE_SCREENSHOT")
        {
            page.screenshot(std::path::Path::new(&path));
        }
        assert!(seen.len() < 1000, "the run never ended: {seen:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let live: Vec<_> = seen.iter().filter(|s| s.0 > 0).collect();
    assert!(live.len() >= 3, "the page updated {} times during the run: {seen:?}", live.len());
    // Each update drew one more point of the throughput line.
    assert!(live.windows(2).all(|w| w[1].2 > w[0].2), "{seen:?}");
    assert!(live.iter().any(|s| s.1 != "-" && s.1 != "0"), "no throughput shown: {seen:?}");

    // The final figures are the report's.
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("the --json report")).unwrap();
    let latency = &report["latency_us"];
    for (id, key) in [("final-p50", "p50"), ("final-p99", "p99"), ("final-p999", "p999"), ("final-max", "max")] {
        assert_eq!(page.text_of(id).as_deref(), Some(shown(&latency[key]).as_str()), "{id} against {latency}");
    }
    assert_eq!(page.text_of("final-count"), Some(latency["count"].to_string()));
    let row = |key: &str| {
        format!(
            "(() => {{ const e = document.querySelector('td[data-key=\"{key}\"]'); return e ? e.textContent : null; }})()"
        )
    };
    for key in ["events_per_sec", "events", "results", "rate"] {
        assert_eq!(page.eval(&row(key)).as_str(), Some(shown(&report[key]).as_str()), "{key}");
    }
    // The percentile curve, drawn from the report's points.
    let points = page.eval("document.querySelector('#chart-curve polyline').getAttribute('points').split(' ').length");
    assert_eq!(points.as_u64(), Some(report["latency_curve"]["points"].as_array().unwrap().len() as u64));
    let errors = page.errors();
    assert!(errors.is_empty(), "the page logged errors: {errors:#?}");
    drop(run);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn live_flags_that_cannot_apply_are_refused() {
    let out = bench().args(["pipeline", "--rate", "1000", "--duration", "1", "--live-linger", "5"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--live-linger needs --live ADDR"), "{out:?}");
    let out = bench().args(["ring", "--live", "127.0.0.1:0"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--live is refused"), "{out:?}");
}
