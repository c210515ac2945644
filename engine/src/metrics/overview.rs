//! `GET /api/overview` of `sluice serve --metrics-listen`: the page at `/`'s data, as JSON,
//! built from the same scrape (`Families`) `/metrics` renders: every partition's start and
//! end offsets, every group's committed offset and lag per partition, the Kafka requests
//! handled by API (the page turns two readings into a rate) and the connections open.

use serde::Serialize;
use serde_json::json;

use super::{Families, Num, Value};

/// One partition's offsets.
#[derive(Debug, Serialize)]
struct PartitionRow {
    topic: String,
    partition: u32,
    start_offset: Option<f64>,
    end_offset: f64,
}

/// One group's position in one partition.
#[derive(Debug, Serialize)]
struct GroupRow {
    group: String,
    topic: String,
    partition: u32,
    committed_offset: f64,
    lag: Option<f64>,
}

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Counter(n) | Value::Gauge(n) => Some(Num::as_f64(*n)),
        Value::Histogram(_) => None,
    }
}

fn label<'a>(labels: &'a [(&'static str, String)], name: &str) -> &'a str {
    labels.iter().find(|(k, _)| *k == name).map_or("", |(_, v)| v.as_str())
}

fn partition_of(labels: &[(&'static str, String)]) -> u32 {
    label(labels, "partition").parse().unwrap_or(0)
}

impl Families {
    /// The overview's JSON (see the module's documentation); `unix_ms` is when it was taken.
    #[must_use]
    pub fn overview_json(&self, unix_ms: u64) -> String {
        let with = |name: &str, labels: &[(&str, &str)]| self.get(name, labels).and_then(number);
        let mut partitions: Vec<PartitionRow> = self
            .series("sluice_log_end_offset")
            .filter_map(|(labels, value)| {
                let (topic, partition) = (label(labels, "topic"), label(labels, "partition"));
                let at = [("topic", topic), ("partition", partition)];
                Some(PartitionRow {
                    topic: topic.to_string(),
                    partition: partition_of(labels),
                    start_offset: with("sluice_log_start_offset", &at),
                    end_offset: number(value)?,
                })
            })
            .collect();
        partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        let mut groups: Vec<GroupRow> = self
            .series("sluice_group_committed_offset")
            .filter_map(|(labels, value)| {
                let (group, topic, partition) =
                    (label(labels, "group"), label(labels, "topic"), label(labels, "partition"));
                let at = [("group", group), ("topic", topic), ("partition", partition)];
                Some(GroupRow {
                    group: group.to_string(),
                    topic: topic.to_string(),
                    partition: partition_of(labels),
                    committed_offset: number(value)?,
                    lag: with("sluice_group_lag", &at),
                })
            })
            .collect();
        groups.sort_by(|a, b| (&a.group, &a.topic, a.partition).cmp(&(&b.group, &b.topic, b.partition)));
        let requests: serde_json::Map<String, serde_json::Value> = self
            .series("sluice_kafka_requests_total")
            .filter_map(|(labels, value)| Some((label(labels, "api").to_string(), json!(number(value)?))))
            .collect();
        let sum = |name: &str| self.series(name).filter_map(|(_, v)| number(v)).sum::<f64>();
        json!({
            "unix_ms": unix_ms,
            "partitions": partitions,
            "groups": groups,
            "requests": requests,
            "connections_open": sum("sluice_kafka_connections_open"),
            "bytes_in": sum("sluice_kafka_received_bytes_total"),
            "bytes_out": sum("sluice_kafka_sent_bytes_total"),
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&'static str, &str)]) -> crate::metrics::Labels {
        pairs.iter().map(|(k, v)| (*k, (*v).to_string())).collect()
    }

    #[test]
    fn the_overview_lists_partitions_groups_and_requests() {
        let mut f = Families::default();
        let p = |t: &'static str, n: &'static str| labels(&[("topic", t), ("partition", n)]);
        f.gauge("sluice_log_end_offset", "End.", p("b", "1"), 9u64);
        f.gauge("sluice_log_end_offset", "End.", p("a", "0"), 7u64);
        f.gauge("sluice_log_start_offset", "Start.", p("a", "0"), 2u64);
        let g = labels(&[("group", "g\"1"), ("topic", "a"), ("partition", "0")]);
        f.gauge("sluice_group_committed_offset", "Committed.", g.clone(), 5u64);
        f.gauge("sluice_group_lag", "Lag.", g, 2u64);
        f.counter("sluice_kafka_requests_total", "Requests.", labels(&[("api", "Produce")]), 4u64);
        let v: serde_json::Value = serde_json::from_str(&f.overview_json(17)).unwrap();
        assert_eq!(v["unix_ms"], 17);
        assert_eq!(v["partitions"][0]["topic"], "a");
        assert_eq!(
            (v["partitions"][0]["start_offset"].as_f64(), v["partitions"][0]["end_offset"].as_f64()),
            (Some(2.0), Some(7.0))
        );
        assert_eq!(v["partitions"][1]["start_offset"], serde_json::Value::Null);
        assert_eq!(v["partitions"][1]["end_offset"].as_f64(), Some(9.0));
        assert_eq!(v["groups"][0]["group"], "g\"1");
        assert_eq!(v["groups"][0]["lag"].as_f64(), Some(2.0));
        assert_eq!(v["requests"]["Produce"].as_f64(), Some(4.0));
        assert_eq!(v["connections_open"].as_f64(), Some(0.0));
    }
}
