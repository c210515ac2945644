//! Headless Chromium driven over the DevTools protocol (a WebSocket, `tungstenite`), for
//! the tests that look at sluice's pages as a person would: `bench/tests/live.rs` (the
//! `--live` page) and `tests/serve_page.rs` (`sluice serve`'s page at `/`, which includes
//! this file). The browser is Debian's `chromium` (`.ci/deps` installs it), or the one
//! `SLUICE_CHROMIUM` names; without it the test fails, naming `.ci/deps`.
//!
//! Everything the page says on its console at level error, every exception it throws and
//! every error the browser logs for it (a failed load, a 404) is kept in
//! [`Browser::errors`].

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket, stream::MaybeTlsStream};

/// One headless Chromium with one page open.
pub struct Browser {
    child: Child,
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    session: String,
    next_id: u64,
    errors: Vec<String>,
    profile: PathBuf,
}

fn chromium() -> String {
    let name = std::env::var("SLUICE_CHROMIUM").unwrap_or_else(|_| "chromium".to_string());
    let found = Command::new(&name).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    match found {
        Ok(status) if status.success() => name,
        _ => panic!(
            "no Chromium to drive: `{name} --version` did not run. Run .ci/deps (it installs Debian's \
             chromium), or set SLUICE_CHROMIUM to a Chromium binary"
        ),
    }
}

impl Browser {
    /// Starts Chromium headless with a fresh profile and opens a blank page.
    pub fn launch() -> Browser {
        let binary = chromium();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let profile = std::env::temp_dir().join(format!("sluice-chromium-{}-{nanos}", std::process::id()));
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).expect("a profile directory");
        let mut child = Command::new(binary)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--window-size=1280,1000",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chromium starts");
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID" on stderr.
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.split("DevTools listening on ").nth(1) {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let Ok(url) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            panic!("chromium did not say where DevTools listens within 60 s");
        };
        let (ws, _) = tungstenite::connect(url.as_str()).expect("connecting to DevTools");
        let mut browser = Browser { child, ws, session: String::new(), next_id: 0, errors: Vec::new(), profile };
        let target = browser.call_on("", "Target.createTarget", json!({ "url": "about:blank" }));
        let target = target["targetId"].as_str().expect("a target id").to_string();
        let attached = browser.call_on("", "Target.attachToTarget", json!({ "targetId": target, "flatten": true }));
        browser.session = attached["sessionId"].as_str().expect("a session id").to_string();
        for domain in ["Runtime.enable", "Log.enable", "Page.enable"] {
            browser.call(domain, json!({}));
        }
        browser
    }

    /// Sends `method` to the page and waits for its answer (keeping the events that
    /// come meanwhile).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.call_on(&session, method, params)
    }

    fn call_on(&mut self, session: &str, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if !session.is_empty() {
            message["sessionId"] = json!(session);
        }
        self.ws.send(Message::text(message.to_string())).expect("sending to DevTools");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            assert!(Instant::now() < deadline, "DevTools did not answer {method} within 60 s");
            let text = match self.ws.read().expect("reading from DevTools") {
                Message::Text(t) => t.to_string(),
                _ => continue,
            };
            let v: Value = serde_json::from_str(&text).expect("DevTools sends JSON");
            if v["id"].as_u64() == Some(id) {
                assert!(v.get("error").is_none(), "{method}: {}", v["error"]);
                return v["result"].clone();
            }
            self.event(&v);
        }
    }

    /// Keeps what an event says went wrong.
    fn event(&mut self, v: &Value) {
        let p = &v["params"];
        match v["method"].as_str() {
            Some("Runtime.consoleAPICalled") if matches!(p["type"].as_str(), Some("error" | "assert")) => {
                self.errors.push(format!("console.{}: {}", p["type"], p["args"]));
            }
            Some("Runtime.exceptionThrown") => self.errors.push(format!("exception: {}", p["exceptionDetails"])),
            Some("Log.entryAdded") if p["entry"]["level"] == "error" => {
                self.errors.push(format!("log: {} {}", p["entry"]["text"], p["entry"]["url"]));
            }
            _ => {}
        }
    }

    /// Opens `url` in the page.
    pub fn navigate(&mut self, url: &str) {
        let r = self.call("Page.navigate", json!({ "url": url }));
        assert!(r.get("errorText").is_none(), "opening {url}: {r}");
        let loaded = format!("location.href === {url:?} && document.readyState === 'complete'");
        self.wait_for(&loaded, Duration::from_secs(60), |v| v == &Value::Bool(true));
    }

    /// The value of `expression` evaluated in the page (JSON-able).
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call("Runtime.evaluate", json!({ "expression": expression, "returnByValue": true }));
        assert!(r.get("exceptionDetails").is_none(), "evaluating {expression}: {r}");
        r["result"]["value"].clone()
    }

    /// The text of the element with id `id`, if there is one.
    pub fn text_of(&mut self, id: &str) -> Option<String> {
        let e = format!("(() => {{ const e = document.getElementById({id:?}); return e ? e.textContent : null; }})()");
        self.eval(&e).as_str().map(str::to_string)
    }

    /// Polls `expression` every 100 ms until `done` holds for its value; the value.
    pub fn wait_for(&mut self, expression: &str, within: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let v = self.eval(expression);
            if done(&v) {
                return v;
            }
            assert!(Instant::now() < deadline, "`{expression}` still {v} after {within:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What went wrong on the page so far (console errors, exceptions, failed loads).
    pub fn errors(&mut self) -> Vec<String> {
        // Events that arrived since the last answer are read with the next one.
        self.eval("0");
        self.errors.clone()
    }

    /// Saves a PNG of the page as it is now.
    pub fn screenshot(&mut self, path: &Path) {
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png", "captureBeyondViewport": true }));
        let png = base64_decode(shot["data"].as_str().expect("screenshot data"));
        std::fs::write(path, png).expect("writing the screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// Standard base64 (what DevTools sends a screenshot in).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let digits: Vec<u8> = text.bytes().filter(|&c| c != b'=' && !c.is_ascii_whitespace()).map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &d)| n | u32::from(d) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

#[test]
fn base64_decodes_what_it_should() {
    assert_eq!(base64_decode("aGVsbG8="), b"hello");
    assert_eq!(base64_decode("aGk="), b"hi");
    assert_eq!(base64_decode("YWJj"), b"abc");
}
