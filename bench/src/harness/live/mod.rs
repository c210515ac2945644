//! `--live ADDR`: a page at `http://ADDR/` that shows the run while it goes on.
//!
//! Per second: the records counted and the throughput, the achieved rate since the first
//! record counted, the offered rate, and the latency percentiles (p50, p99, p99.9, max)
//! of that second's interval histograms; at the end the run's JSON report: its figures
//! and its percentile curves (the points `--plot` draws). Updates reach the page as server-sent events
//! (`/events`); the page, its script and its style are compiled into the binary
//! (`page.html`, `live.js`), with no library and nothing fetched from elsewhere.
//!
//! Nothing here is on a record's path. A [`LatencyRecorder`](super::LatencyRecorder) made
//! `with_intervals` hands its interval histogram over when the interval closes (a
//! branch per record, taken once a second, and only while a page is served); a workload
//! registers the cumulative counter its progress line already reads ([`watch`]), which
//! the sampler thread reads once a second. After the run the page stays served for
//! `--live-linger` seconds.

mod feed;
mod http;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;

pub use feed::{Counter, Feed};
pub use http::LiveServer;

/// Whether a feed is active (read on every interval roll-over, a plain load).
static ACTIVE: AtomicBool = AtomicBool::new(false);
static FEED: Mutex<Option<Arc<Feed>>> = Mutex::new(None);

fn feed() -> Option<Arc<Feed>> {
    if !ACTIVE.load(Ordering::Relaxed) {
        return None;
    }
    FEED.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Whether a live page is being fed (a recorder skips handing intervals over otherwise).
#[must_use]
pub fn is_active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Hands a closed latency interval to the page (from `LatencyRecorder::record_at`).
pub fn interval(histogram: &hdrhistogram::Histogram<u64>) {
    if let Some(feed) = feed() {
        feed.interval(histogram);
    }
}

/// From now on the page's records are what `counter` counts (cumulative, from 0), in
/// `unit`, offered `offered` per second (`None`: closed loop). Until [`unwatch`].
pub fn watch(unit: &str, offered: Option<u64>, counter: impl Fn() -> u64 + Send + 'static) {
    if let Some(feed) = feed() {
        feed.watch(unit, offered, Box::new(counter));
    }
}

/// The counter of [`watch`] is done (its run ended); what it counted stays counted.
pub fn unwatch() {
    if let Some(feed) = feed() {
        feed.unwatch();
    }
}

/// The offered rate from now on, per second (`None`: closed loop).
pub fn offer(offered: Option<u64>) {
    if let Some(feed) = feed() {
        feed.offer(offered);
    }
}

/// `--live`'s address: `HOST:PORT`, or a bare port, which means loopback
/// (`127.0.0.1:PORT`): the page is served to other machines only when told so.
///
/// # Errors
///
/// Neither a socket address nor a port.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|e| format!("{e}: give HOST:PORT (e.g. 127.0.0.1:8080) or a port for loopback"))
}

/// What `--live` and `--live-linger` ask for.
#[derive(Debug, Clone, Copy)]
pub struct LiveOptions {
    /// Where to serve the page.
    pub addr: SocketAddr,
    /// How long the page stays served after the run.
    pub linger: Duration,
}

/// Checks `--live` and `--live-linger` together: the linger needs a page.
///
/// # Errors
///
/// `--live-linger` without `--live`.
pub fn options(addr: Option<SocketAddr>, linger: Option<f64>) -> anyhow::Result<Option<LiveOptions>> {
    match (addr, linger) {
        (None, Some(_)) => anyhow::bail!("--live-linger needs --live ADDR: there is no page to keep serving"),
        (None, None) => Ok(None),
        (Some(addr), linger) => Ok(Some(LiveOptions { addr, linger: Duration::from_secs_f64(linger.unwrap_or(0.0)) })),
    }
}

/// A run's live page: serving from [`Live::start`] until dropped.
#[derive(Debug)]
pub struct Live {
    feed: Arc<Feed>,
    server: LiveServer,
    linger: Duration,
}

impl Live {
    /// Serves the page for `workload` on `options.addr` and starts feeding it; prints
    /// `live page on http://ADDR/` on stderr. `unit` names what one measured latency
    /// value counts until a workload [`watch`]es a counter; `offered` is `--rate`.
    ///
    /// # Errors
    ///
    /// The address cannot be bound, or another page is already fed in this process.
    pub fn start(options: LiveOptions, workload: &str, unit: &str, offered: Option<u64>) -> anyhow::Result<Live> {
        let feed = Feed::new(workload, unit, offered);
        let server = LiveServer::start(options.addr, feed.clone())
            .map_err(|e| anyhow::anyhow!("starting the live page on {}: {e}", options.addr))?;
        {
            let mut slot = FEED.lock().unwrap_or_else(PoisonError::into_inner);
            anyhow::ensure!(slot.is_none(), "a live page is already served by this process");
            *slot = Some(feed.clone());
            ACTIVE.store(true, Ordering::Relaxed);
        }
        feed::run_sampler(&feed).map_err(|e| anyhow::anyhow!("starting the live page's sampler: {e}"))?;
        eprintln!("live page on http://{}/", server.local_addr());
        Ok(Live { feed, server, linger: options.linger })
    }

    /// The bound address.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// The run ended: `report` (serialized as its `--json` is) goes to the page, which
    /// stays served for the linger.
    ///
    /// # Errors
    ///
    /// The report does not serialize.
    pub fn finish(self, report: &impl Serialize) -> anyhow::Result<()> {
        let value = serde_json::to_value(report).map_err(|e| anyhow::anyhow!("the report for the live page: {e}"))?;
        self.feed.finish(value);
        self.linger_then_stop();
        Ok(())
    }

    /// The run failed with `error`: the page says so, and stays served for the linger.
    pub fn fail(self, error: &anyhow::Error) {
        self.feed.fail(&format!("{error:#}"));
        self.linger_then_stop();
    }

    fn linger_then_stop(self) {
        if !self.linger.is_zero() {
            eprintln!("live page stays on http://{}/ for {:?}", self.server.local_addr(), self.linger);
            std::thread::sleep(self.linger);
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        ACTIVE.store(false, Ordering::Relaxed);
        FEED.lock().unwrap_or_else(PoisonError::into_inner).take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_port_is_loopback_and_the_linger_needs_a_page() {
        assert_eq!(parse_addr("8080"), Ok("127.0.0.1:8080".parse().unwrap()));
        assert_eq!(parse_addr("0.0.0.0:9"), Ok("0.0.0.0:9".parse().unwrap()));
        assert!(parse_addr("localhost").unwrap_err().contains("HOST:PORT"));
        assert!(options(None, Some(1.0)).unwrap_err().to_string().contains("--live-linger needs --live"));
        assert!(options(None, None).unwrap().is_none());
        let o = options(Some("127.0.0.1:1".parse().unwrap()), Some(2.5)).unwrap().unwrap();
        assert_eq!(o.linger, Duration::from_millis(2500));
    }
}
