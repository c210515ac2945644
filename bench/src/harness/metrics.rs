//! `--metrics-listen ADDR`: the run's metrics at `http://ADDR/metrics` while it goes on.
//!
//! A workload registers the metric sources of what it runs (a pipeline's
//! `RunningPipeline::metric_source`) with [`register`] for as long as it holds them; the
//! endpoint ([`serve`], the engine's `MetricsServer` on a thread of its own) renders every
//! source still alive at each scrape. Between rounds, while nothing is registered, a
//! scrape answers an empty text.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use sluice_engine::metrics::http::MetricsServer;
use sluice_engine::metrics::{Families, MetricSource};

static SOURCES: Mutex<Vec<Weak<dyn MetricSource>>> = Mutex::new(Vec::new());

/// Adds `source` to what the endpoint renders, while it lives.
pub fn register(source: &Arc<dyn MetricSource>) {
    let mut sources = SOURCES.lock().unwrap_or_else(PoisonError::into_inner);
    sources.retain(|s| s.strong_count() > 0);
    sources.push(Arc::downgrade(source));
}

/// Every live source's families.
#[must_use]
pub fn gather() -> Families {
    let live: Vec<Arc<dyn MetricSource>> =
        SOURCES.lock().unwrap_or_else(PoisonError::into_inner).iter().filter_map(Weak::upgrade).collect();
    let mut out = Families::default();
    for source in live {
        source.collect(&mut out);
    }
    out
}

/// Serves the registered sources at `addr`, if given; prints `metrics on ADDR` on stderr
/// (stdout is the report's).
pub fn serve(addr: Option<SocketAddr>) -> anyhow::Result<Option<MetricsServer>> {
    let Some(addr) = addr else { return Ok(None) };
    let server = MetricsServer::start(addr, Arc::new(|openmetrics| Ok(gather().render(openmetrics))))
        .map_err(|e| anyhow::anyhow!("starting the metrics endpoint on {addr}: {e}"))?;
    eprintln!("metrics on {}", server.local_addr());
    Ok(Some(server))
}
