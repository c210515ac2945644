//! The live page's HTTP server: `tiny_http` on a thread of its own (as the metrics
//! endpoint), `GET /` (the page), `GET /live.js` (its script) and `GET /events` (the
//! feed as server-sent events, each stream on a thread of its own, at most
//! [`MAX_STREAMS`] at once). Another method on these paths gets 405 with `Allow: GET`,
//! another path 404. Bound to the address given; loopback unless told otherwise.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use sluice_engine::metrics::http::{HttpThread, asset, header, text};
use tiny_http::{Method, Request};

use super::Feed;

const PAGE_HTML: &str = include_str!("page.html");
const PAGE_JS: &str = include_str!("live.js");

/// Event streams served at once; more get 503.
pub const MAX_STREAMS: usize = 16;

/// How long a stream waits for news before it sends a comment (which also finds a page
/// that went away).
const KEEPALIVE: Duration = Duration::from_secs(10);

/// The page's server. Dropping it stops it (open event streams end at their next write).
#[derive(Debug)]
pub struct LiveServer {
    http: HttpThread,
}

impl LiveServer {
    /// Binds `addr` (port 0 picks one) and serves the page fed by `feed`.
    pub fn start(addr: SocketAddr, feed: Arc<Feed>) -> std::io::Result<LiveServer> {
        let streams = Arc::new(AtomicUsize::new(0));
        let http = HttpThread::start(addr, "sluice-live-http", move |server, stop| {
            for request in server.incoming_requests() {
                if stop.load(Ordering::Acquire) {
                    break;
                }
                serve(request, &feed, &streams, stop);
            }
        })?;
        Ok(LiveServer { http })
    }

    /// The bound address (with the port chosen when the address said 0).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }
}

/// Answers one request (an event stream on a thread of its own).
fn serve(request: Request, feed: &Arc<Feed>, streams: &Arc<AtomicUsize>, stop: &Arc<AtomicBool>) {
    let path = request.url().split(['?', '#']).next().unwrap_or("").to_string();
    if !matches!(path.as_str(), "/" | "/live.js" | "/events") {
        let _ = request.respond(text(404, "not found: this server serves GET /, /live.js and /events\n"));
        return;
    }
    if *request.method() != Method::Get {
        let _ = request.respond(text(405, "method not allowed: GET only\n").with_header(header("Allow", "GET")));
        return;
    }
    match path.as_str() {
        "/" => drop(request.respond(asset(PAGE_HTML, "text/html; charset=utf-8"))),
        "/live.js" => drop(request.respond(asset(PAGE_JS, "text/javascript; charset=utf-8"))),
        _ => {
            if streams.fetch_add(1, Ordering::AcqRel) >= MAX_STREAMS {
                streams.fetch_sub(1, Ordering::AcqRel);
                let _ = request.respond(text(503, "too many event streams open\n"));
                return;
            }
            let (feed, streams, stop) = (feed.clone(), streams.clone(), stop.clone());
            let spawned = std::thread::Builder::new().name("sluice-live-events".into()).spawn(move || {
                let _ = stream(request.into_writer(), &feed, &stop);
                streams.fetch_sub(1, Ordering::AcqRel);
            });
            if spawned.is_err() {
                eprintln!("live page: no thread for an event stream");
            }
        }
    }
}

/// Writes the feed's frames as they come, until the page goes away or the server stops.
fn stream(mut out: Box<dyn Write + Send>, feed: &Feed, stop: &AtomicBool) -> std::io::Result<()> {
    out.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
    )?;
    out.flush()?;
    let mut sent = 0;
    while !stop.load(Ordering::Acquire) {
        let frames = feed.frames_from(sent, KEEPALIVE);
        if frames.is_empty() {
            out.write_all(b": keep-alive\n\n")?;
        }
        for f in &frames {
            out.write_all(f.as_bytes())?;
        }
        sent += frames.len();
        out.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read};
    use std::net::TcpStream;

    fn request(addr: SocketAddr, method: &str, path: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn serves_the_page_the_script_and_the_events_and_refuses_the_rest() {
        let feed = Feed::new("pipeline", "events", None);
        let server = LiveServer::start("127.0.0.1:0".parse().unwrap(), feed.clone()).unwrap();
        let addr = server.local_addr();
        let page = request(addr, "GET", "/");
        assert!(page.starts_with("HTTP/1.1 200"), "{page}");
        assert!(page.contains("text/html") && page.contains("<script src=\"/live.js\">"), "{page}");
        assert!(request(addr, "GET", "/live.js").contains("EventSource"));
        assert!(request(addr, "POST", "/").starts_with("HTTP/1.1 405"));
        assert!(request(addr, "GET", "/nope").starts_with("HTTP/1.1 404"));
        // The stream starts with what the feed holds, then what comes.
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut lines = BufReader::new(s).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "HTTP/1.1 200 OK");
        let mut seen = Vec::new();
        feed.tick();
        for line in lines.by_ref() {
            let line = line.unwrap();
            if line.starts_with("event: ") {
                seen.push(line.clone());
            }
            if line == "event: second" {
                break;
            }
        }
        assert_eq!(seen, ["event: hello", "event: second"]);
        drop(server);
    }
}
