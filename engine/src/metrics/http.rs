//! The metrics endpoint: a small HTTP server (`tiny_http`) on a thread of its own, off the
//! data path, serving `GET /metrics` and, when started with an overview
//! ([`MetricsServer::start_with_page`], as `sluice serve` does), the overview page at `/`
//! (HTML and its script, compiled into the binary: `page/serve.html`, `page/serve.js`) and
//! its data at `/api/overview` (JSON, [`Families::overview_json`](super::Families)), which
//! the page fetches every second.
//!
//! A scrape renders on this thread: it asks every shard for its sample over the request
//! path (`EngineHandle::metrics`) and reads the listener's owned cells. `GET /metrics`
//! answers the Prometheus text format (0.0.4), or OpenMetrics 1.0 when the client's
//! `Accept` names `application/openmetrics-text` (as a Prometheus server's does). Any
//! other method on a known path gets 405 with `Allow: GET`; any other path 404. While the
//! engine shuts down a scrape gets 503 with the reason; once the server stops, requests
//! still queued get 503 too and the port refuses connections (a request whose
//! connection was accepted in the instant between the last of those and the socket's
//! close gets tiny_http's 500). Requests are answered one at a time, in the order they arrive.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use tiny_http::{Header, Method, Response, Server};

use super::{OPENMETRICS_TEXT, PROMETHEUS_TEXT};

/// Renders a scrape: `openmetrics` asks for OpenMetrics rather than the Prometheus text
/// format; an error is the reason no metrics can be given now (503).
pub type Render = dyn Fn(bool) -> Result<String, String> + Send + Sync;

/// Gives `/api/overview`'s JSON; an error is the reason none can be given now (503).
pub type Overview = dyn Fn() -> Result<String, String> + Send + Sync;

/// The overview page and its script.
const PAGE_HTML: &str = include_str!("page/serve.html");
const PAGE_JS: &str = include_str!("page/serve.js");

/// A `tiny_http` server answering on a thread of its own: what the metrics endpoint and
/// `sluice-bench`'s live page share. Dropping it stops it: the stop flag is set, the
/// server unblocked, and the thread joined.
pub struct HttpThread {
    addr: SocketAddr,
    server: Arc<Server>,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for HttpThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpThread").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl HttpThread {
    /// Binds `addr` (port 0 picks one) and runs `serve` on a thread named `name`, with the
    /// server and the flag that is set once the server is stopping (`serve` returns when
    /// `incoming_requests` ends, or earlier when it sees the flag).
    ///
    /// # Errors
    ///
    /// Binding `addr`, or starting the thread.
    pub fn start(
        addr: SocketAddr,
        name: &str,
        serve: impl FnOnce(&Server, &Arc<AtomicBool>) + Send + 'static,
    ) -> std::io::Result<HttpThread> {
        let server = Server::http(addr).map_err(|e| std::io::Error::other(format!("binding {addr}: {e}")))?;
        let bound = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| std::io::Error::other(format!("{addr} is not an IP address")))?;
        let server = Arc::new(server);
        let stopping = Arc::new(AtomicBool::new(false));
        let (serving, stop) = (server.clone(), stopping.clone());
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || serve(&serving, &stop))?;
        Ok(HttpThread { addr: bound, server, stopping, thread: Some(thread) })
    }

    /// The bound address (with the port chosen when the address said 0).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for HttpThread {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A running metrics endpoint. Dropping it stops it.
#[derive(Debug)]
pub struct MetricsServer {
    http: HttpThread,
}

impl MetricsServer {
    /// Binds `addr` (port 0 picks one) and serves what `render` gives.
    pub fn start(addr: SocketAddr, render: Arc<Render>) -> std::io::Result<MetricsServer> {
        Self::serve(addr, render, None)
    }

    /// As [`start`](Self::start), and serves the overview page at `/` with its data,
    /// `overview`, at `/api/overview`.
    pub fn start_with_page(
        addr: SocketAddr,
        render: Arc<Render>,
        overview: Arc<Overview>,
    ) -> std::io::Result<MetricsServer> {
        Self::serve(addr, render, Some(overview))
    }

    fn serve(addr: SocketAddr, render: Arc<Render>, overview: Option<Arc<Overview>>) -> std::io::Result<MetricsServer> {
        let http = HttpThread::start(addr, "sluice-metrics", move |server, stop| {
            for request in server.incoming_requests() {
                // Requests still queued when the server stops get 503 and the loop
                // ends (a client that keeps scraping would otherwise hold it open).
                if stop.load(Ordering::Acquire) {
                    let _ = request.respond(text(503, "no metrics now: the server is stopping\n"));
                    break;
                }
                let response = respond(&request, &*render, overview.as_deref());
                let _ = request.respond(response);
            }
            while let Ok(Some(request)) = server.try_recv() {
                let _ = request.respond(text(503, "no metrics now: the server is stopping\n"));
            }
        })?;
        Ok(MetricsServer { http })
    }

    /// The bound address (with the port chosen when the address said 0).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }

    /// Stops serving: the request being answered is finished, the port closes.
    pub fn shutdown(self) {
        drop(self);
    }
}

/// A header from a name and value known to be valid.
#[must_use]
pub fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a valid header")
}

/// A text response with `status`.
#[must_use]
pub fn text(status: u16, body: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_string(body)
        .with_status_code(status)
        .with_header(header("Content-Type", "text/plain; charset=utf-8"))
}

/// A page asset of `content_type`, not to be cached (the binary serves what it holds).
#[must_use]
pub fn asset(body: &str, content_type: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_string(body)
        .with_header(header("Content-Type", content_type))
        .with_header(header("Cache-Control", "no-store"))
}

/// The answer to one request.
fn respond(
    request: &tiny_http::Request,
    render: &Render,
    overview: Option<&Overview>,
) -> Response<std::io::Cursor<Vec<u8>>> {
    let path = request.url().split(['?', '#']).next().unwrap_or("");
    let page = overview.is_some() && matches!(path, "/" | "/serve.js" | "/api/overview");
    if path != "/metrics" && !page {
        let paths = if overview.is_some() { "/, /api/overview and /metrics" } else { "/metrics" };
        return text(404, &format!("not found: this server serves GET {paths}\n"));
    }
    if *request.method() != Method::Get {
        return text(405, "method not allowed: GET only\n").with_header(header("Allow", "GET"));
    }
    match (path, overview) {
        ("/", _) => return asset(PAGE_HTML, "text/html; charset=utf-8"),
        ("/serve.js", _) => return asset(PAGE_JS, "text/javascript; charset=utf-8"),
        ("/api/overview", Some(overview)) => {
            return match overview() {
                Ok(body) => asset(&body, "application/json"),
                Err(reason) => text(503, &format!("no overview now: {reason}\n")),
            };
        }
        _ => {}
    }
    let openmetrics = request.headers().iter().any(|h| {
        h.field.equiv("Accept") && h.value.as_str().to_ascii_lowercase().contains("application/openmetrics-text")
    });
    match render(openmetrics) {
        Ok(body) => {
            let content_type = if openmetrics { OPENMETRICS_TEXT } else { PROMETHEUS_TEXT };
            Response::from_string(body).with_header(header("Content-Type", content_type))
        }
        Err(reason) => text(503, &format!("no metrics now: {reason}\n")),
    }
}
