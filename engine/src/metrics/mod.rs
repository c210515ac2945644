//! Metrics: what every shard and listener executor counts, gathered on a scrape and
//! rendered in the Prometheus text format (or OpenMetrics, when asked) with the
//! `prometheus-client` crate.
//!
//! Nothing here is on the data path's critical section, and nothing is shared between
//! shards:
//!
//! - A shard counts into plain cells its own executor owns: each log's [`LogStats`]
//!   (records and bytes appended, rolls, fsync latency), the shard's thread-local
//!   [`ShardCells`] (append latency), the cleaner's `CleanerStats`. A scrape sends each
//!   shard one `Request::Metrics` over the request path every host call uses, and the
//!   shard answers with a [`ShardSample`] built on its own thread (partitions' offsets and
//!   sizes, groups, committed offsets).
//! - A listener executor, which has no request path, counts into [`owned`] cells: atomics
//!   that only their owner writes (a Relaxed load and store, no read-modify-write, no
//!   lock) and a scrape only reads.
//!
//! [`Families`] is the scrape's model: metric families by name, each a map from label
//! values to a value, merged over every source (values of one series add up), with at
//! most a cap of series per family (labels from clients: topics, group ids); what the cap
//! left out is counted in `sluice_metrics_series_dropped`. [`Families::render`] hands the
//! whole to `prometheus-client`, which writes the text and escapes label values.
//!
//! [`LogStats`]: sluice_io::stats::LogStats

pub mod http;
mod overview;
pub mod owned;
pub(crate) mod shard;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, Weak};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use sluice_io::LatencyCounts;
use sluice_io::stats::LATENCY_BOUNDS_SECONDS;

pub(crate) use shard::ShardCells;
pub use shard::ShardSample;

/// The most series a family keeps in one scrape unless it says otherwise.
pub const SERIES_MAX: usize = 1_000;
/// The most series a per-partition family keeps in one scrape.
pub const PARTITION_SERIES_MAX: usize = 10_000;

/// The content type of the Prometheus text format (version 0.0.4).
pub const PROMETHEUS_TEXT: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;
/// The content type of OpenMetrics text (1.0.0).
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Label names and values of one series, in the family's label order.
pub type Labels = Vec<(&'static str, String)>;

/// A number: integers stay integers in the text.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    /// A count, an offset, bytes.
    Int(i64),
    /// Seconds, ratios.
    Float(f64),
}

impl Num {
    fn add(self, other: Num) -> Num {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Num::Int(a.saturating_add(b)),
            (a, b) => Num::Float(a.as_f64() + b.as_f64()),
        }
    }

    /// As a float.
    #[must_use]
    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

impl From<u64> for Num {
    fn from(v: u64) -> Num {
        Num::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<i64> for Num {
    fn from(v: i64) -> Num {
        Num::Int(v)
    }
}

impl From<usize> for Num {
    fn from(v: usize) -> Num {
        Num::from(v as u64)
    }
}

impl From<f64> for Num {
    fn from(v: f64) -> Num {
        Num::Float(v)
    }
}

/// One series' value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Only goes up (rendered with the `_total` suffix).
    Counter(Num),
    /// Goes up and down.
    Gauge(Num),
    /// Latencies in [`LATENCY_BOUNDS_SECONDS`] buckets.
    Histogram(LatencyCounts),
}

impl Value {
    fn merge(&mut self, other: &Value) {
        match (self, other) {
            (Value::Counter(a), Value::Counter(b)) | (Value::Gauge(a), Value::Gauge(b)) => *a = a.add(*b),
            (Value::Histogram(a), Value::Histogram(b)) => a.add(b),
            (a, b) => debug_assert!(false, "one family, two kinds: {a:?} and {b:?}"),
        }
    }

    fn metric_type(&self) -> MetricType {
        match self {
            Value::Counter(_) => MetricType::Counter,
            Value::Gauge(_) => MetricType::Gauge,
            Value::Histogram(_) => MetricType::Histogram,
        }
    }
}

/// A metric family: its help line, its cap, and its series.
#[derive(Clone, Debug)]
pub struct Family {
    help: &'static str,
    cap: usize,
    series: BTreeMap<Labels, Value>,
}

/// Metric families by name: one scrape's worth, merged from every source.
#[derive(Clone, Debug, Default)]
pub struct Families {
    families: BTreeMap<&'static str, Family>,
    /// Series left out by a family's cap, by family.
    dropped: BTreeMap<&'static str, u64>,
}

impl Families {
    /// Adds `value` to the series `labels` of family `name` (created with `help` and the
    /// default cap if new). A new series past the family's cap is dropped and counted.
    pub fn add(&mut self, name: &'static str, help: &'static str, labels: Labels, value: Value) {
        self.add_capped(name, help, SERIES_MAX, labels, value);
    }

    /// [`add`](Self::add), with the family's cap given (used when the family is created).
    pub fn add_capped(&mut self, name: &'static str, help: &'static str, cap: usize, labels: Labels, value: Value) {
        let family = self.families.entry(name).or_insert_with(|| Family { help, cap, series: BTreeMap::new() });
        let len = family.series.len();
        match family.series.get_mut(&labels) {
            Some(v) => v.merge(&value),
            None if len < family.cap => {
                family.series.insert(labels, value);
            }
            None => *self.dropped.entry(name).or_default() += 1,
        }
    }

    /// A counter.
    pub fn counter(&mut self, name: &'static str, help: &'static str, labels: Labels, v: impl Into<Num>) {
        self.add(name, help, labels, Value::Counter(v.into()));
    }

    /// A gauge.
    pub fn gauge(&mut self, name: &'static str, help: &'static str, labels: Labels, v: impl Into<Num>) {
        self.add(name, help, labels, Value::Gauge(v.into()));
    }

    /// A latency histogram.
    pub fn histogram(&mut self, name: &'static str, help: &'static str, labels: Labels, v: &LatencyCounts) {
        self.add(name, help, labels, Value::Histogram(*v));
    }

    /// Counts series a source left out itself (it stopped gathering at the cap).
    pub fn dropped(&mut self, name: &'static str, series: u64) {
        if series > 0 {
            *self.dropped.entry(name).or_default() += series;
        }
    }

    /// Merges another scrape's families into these.
    pub fn merge(&mut self, other: Families) {
        for (name, family) in other.families {
            for (labels, value) in family.series {
                self.add_capped(name, family.help, family.cap, labels, value);
            }
        }
        for (name, n) in other.dropped {
            self.dropped(name, n);
        }
    }

    /// The value of one series, if present (for tests and host code).
    #[must_use]
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<&Value> {
        let family = self.families.get(name)?;
        family.series.iter().find_map(|(l, v)| {
            let same = l.len() == labels.len() && l.iter().zip(labels).all(|((k, v), (k2, v2))| k == k2 && v == v2);
            same.then_some(v)
        })
    }

    /// The series of family `name`.
    pub fn series(&self, name: &str) -> impl Iterator<Item = (&Labels, &Value)> {
        self.families.get(name).into_iter().flat_map(|f| f.series.iter())
    }

    /// The text a scrape answers: the Prometheus text format (0.0.4), or OpenMetrics 1.0
    /// with `openmetrics` (ending in `# EOF`).
    #[must_use]
    pub fn render(self, openmetrics: bool) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Rendered(self)));
        let mut out = String::new();
        let written = if openmetrics {
            prometheus_client::encoding::text::encode(&mut out, &registry)
        } else {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
        };
        if written.is_err() {
            // Writing into a String fails only if an encoder refuses a value; say so in
            // the text rather than serving half of it.
            out.clear();
            let _ = writeln!(out, "# sluice: the metrics could not be encoded");
        }
        out
    }
}

/// The families, as `prometheus-client` asks a collector for them.
#[derive(Debug)]
struct Rendered(Families);

const DROPPED: &str = "sluice_metrics_series_dropped";
const DROPPED_HELP: &str =
    "Series left out of this scrape because their family reached its cap (labels from clients: topics, groups)";

impl Collector for Rendered {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let families = &self.0;
        for (name, family) in &families.families {
            let Some(kind) = family.series.values().next().map(Value::metric_type) else { continue };
            // A counter family is named without `_total`: the encoder adds it.
            let base = name.strip_suffix("_total").unwrap_or(name);
            let mut metric = encoder.encode_descriptor(base, family.help, None, kind)?;
            for (labels, value) in &family.series {
                let series = metric.encode_family(labels)?;
                encode_value(value, series)?;
            }
        }
        let mut metric = encoder.encode_descriptor(DROPPED, DROPPED_HELP, None, MetricType::Gauge)?;
        for (family, n) in &families.dropped {
            let labels: Labels = vec![("family", (*family).to_string())];
            let series = metric.encode_family(&labels)?;
            ConstGauge::new(i64::try_from(*n).unwrap_or(i64::MAX)).encode(series)?;
        }
        Ok(())
    }
}

fn encode_value(value: &Value, mut encoder: prometheus_client::encoding::MetricEncoder<'_>) -> std::fmt::Result {
    match value {
        Value::Counter(Num::Int(v)) => ConstCounter::new(u64::try_from(*v).unwrap_or(0)).encode(encoder),
        Value::Counter(Num::Float(v)) => ConstCounter::new(*v).encode(encoder),
        Value::Gauge(Num::Int(v)) => ConstGauge::new(*v).encode(encoder),
        Value::Gauge(Num::Float(v)) => ConstGauge::new(*v).encode(encoder),
        Value::Histogram(h) => {
            // Per bucket, not cumulative: the encoder sums them into Prometheus' `le` counts.
            let buckets: Vec<(f64, u64)> = h
                .buckets
                .iter()
                .enumerate()
                .map(|(i, n)| (LATENCY_BOUNDS_SECONDS.get(i).copied().unwrap_or(f64::INFINITY), *n))
                .collect();
            encoder.encode_histogram::<NoLabelSet>(h.sum_ns as f64 / 1e9, h.count(), &buckets, None)
        }
    }
}

/// Something a scrape gathers from besides the shards: a Kafka listener's executors, a
/// pipeline. Registered with the engine handle ([`MetricsHub`]); a scrape calls
/// `collect` from the scraping thread, so it may only read what its owners write
/// ([`owned`] cells, or state behind a lock the data path does not take).
pub trait MetricSource: Send + Sync + std::fmt::Debug {
    /// Adds this source's families.
    fn collect(&self, out: &mut Families);
}

/// The sources registered on one engine. The lock is taken to register a source (when
/// a listener starts) and by a scrape, never on the data path.
#[derive(Debug, Default)]
pub(crate) struct MetricsHub {
    sources: Mutex<Vec<Weak<dyn MetricSource>>>,
}

impl MetricsHub {
    /// Registers `source` for as long as it lives (the hub holds it weakly).
    pub(crate) fn register(&self, source: &Arc<dyn MetricSource>) {
        let mut sources = self.sources.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        sources.retain(|s| s.strong_count() > 0);
        sources.push(Arc::downgrade(source));
    }

    /// Every live source's families.
    pub(crate) fn collect(&self, out: &mut Families) {
        let live: Vec<Arc<dyn MetricSource>> = {
            let sources = self.sources.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            sources.iter().filter_map(Weak::upgrade).collect()
        };
        for source in live {
            source.collect(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&'static str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| (*k, (*v).to_string())).collect()
    }

    #[test]
    fn series_of_one_name_add_up_and_render_in_the_text_format() {
        let mut a = Families::default();
        a.counter("sluice_test_requests_total", "Requests.", labels(&[("api", "Produce")]), 2u64);
        let mut b = Families::default();
        b.counter("sluice_test_requests_total", "Requests.", labels(&[("api", "Produce")]), 3u64);
        b.gauge("sluice_test_end_offset", "End.", labels(&[("topic", "t"), ("partition", "0")]), 7u64);
        let mut h = LatencyCounts::default();
        h.record(std::time::Duration::from_micros(300));
        b.histogram("sluice_test_seconds", "Latency.", vec![], &h);
        a.merge(b);
        assert_eq!(a.get("sluice_test_requests_total", &[("api", "Produce")]), Some(&Value::Counter(Num::Int(5))));
        let text = a.render(false);
        assert!(text.contains("# TYPE sluice_test_requests_total counter\n"), "{text}");
        assert!(text.contains("sluice_test_requests_total{api=\"Produce\"} 5\n"), "{text}");
        assert!(text.contains("sluice_test_end_offset{topic=\"t\",partition=\"0\"} 7\n"), "{text}");
        assert!(text.contains("sluice_test_seconds_bucket{le=\"0.00025\"} 0\n"), "{text}");
        assert!(text.contains("sluice_test_seconds_bucket{le=\"0.0005\"} 1\n"), "{text}");
        assert!(text.contains("sluice_test_seconds_bucket{le=\"+Inf\"} 1\n"), "{text}");
        assert!(text.contains("sluice_test_seconds_count 1\n"), "{text}");
        assert!(!text.contains("# EOF"), "{text}");
    }

    #[test]
    fn openmetrics_ends_with_eof() {
        let mut a = Families::default();
        a.counter("sluice_test_total", "T.", vec![], 1u64);
        let text = a.render(true);
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(text.contains("sluice_test_total 1\n"), "{text}");
    }

    #[test]
    fn label_values_from_clients_are_escaped() {
        let mut a = Families::default();
        a.gauge("sluice_test_members", "M.", labels(&[("group", "a\"b\\c\nd")]), 1u64);
        let text = a.render(false);
        assert!(text.contains(r#"sluice_test_members{group="a\"b\\c\nd"} 1"#), "{text}");
    }

    #[test]
    fn a_family_keeps_at_most_its_cap_and_counts_the_rest() {
        let mut a = Families::default();
        for i in 0..SERIES_MAX + 25 {
            a.gauge("sluice_test_members", "M.", labels(&[("group", &format!("g{i}"))]), 1u64);
        }
        // A series already kept still adds up past the cap.
        a.gauge("sluice_test_members", "M.", labels(&[("group", "g0")]), 1u64);
        assert_eq!(a.series("sluice_test_members").count(), SERIES_MAX);
        assert_eq!(a.get("sluice_test_members", &[("group", "g0")]), Some(&Value::Gauge(Num::Int(2))));
        let text = a.render(false);
        assert!(text.contains("sluice_metrics_series_dropped{family=\"sluice_test_members\"} 25\n"), "{text}");
    }
}
