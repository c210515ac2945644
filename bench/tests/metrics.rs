//! `sluice-bench --metrics-listen ADDR`: while a pipeline run goes on, a scrape of
//! `/metrics` shows the pipeline's streams counting records; workloads with nothing to
//! serve (the closed-loop log on bare logs, the ring) refuse the option with the reason.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use clap::Parser;
use sluice_bench::harness::metrics;
use sluice_bench::workloads::pipeline::{self, PipelineArgs};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: PipelineArgs,
}

fn scrape(addr: std::net::SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(s, "GET /metrics HTTP/1.0\r\n\r\n").expect("request");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("response");
    raw
}

#[test]
fn a_scrape_during_the_run_shows_the_pipelines_streams() {
    let line =
        ["pipeline", "--events", "3000000", "--shards", "2", "--rounds", "1", "--latency-seconds", "0", "--no-pin"];
    let args = Cli::try_parse_from(line).expect("valid arguments").args;
    let server = metrics::serve(Some("127.0.0.1:0".parse().unwrap())).expect("endpoint").expect("started");
    let addr = server.local_addr();
    let watcher = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let text = scrape(addr);
            let moving = text.lines().any(|l| {
                l.starts_with(r#"sluice_pipeline_stream_records_total{pipeline="sluice",stream="0-source""#)
                    && l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).is_some_and(|v| v > 0.0)
            });
            if moving {
                return Some(text);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    });
    let report = pipeline::run(&args).expect("pipeline workload");
    assert_eq!(report.events, 3_000_000);
    let text = watcher.join().expect("watcher").expect("a scrape during the run saw the source's records");
    assert!(text.starts_with("HTTP/1.0 200") || text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("sluice_pipeline_late_records_total{pipeline=\"sluice\",policy=\"drop\"}"), "{text}");
    server.shutdown();
}

#[test]
fn the_footprint_run_serves_its_engines_metrics() {
    use sluice_bench::workloads::footprint::{self, FootprintArgs};
    #[derive(Debug, Parser)]
    struct FootprintCli {
        #[command(flatten)]
        args: FootprintArgs,
    }
    let server = metrics::serve(Some("127.0.0.1:0".parse().unwrap())).expect("endpoint").expect("started");
    let addr = server.local_addr();
    let args = FootprintCli::try_parse_from(["footprint", "--partitions", "200", "--shards", "1"]).expect("args").args;
    let watcher = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let text = scrape(addr);
            // The topic's partitions, as soon as the engine serves them (the run is short:
            // a scrape may come while the topic is still being made).
            if text.contains(r#"topic="footprint""#) && text.contains("end_offset") {
                return Some(text);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    });
    let report = footprint::run(&args).expect("footprint workload");
    assert_eq!(report.partitions, 200);
    let text = watcher.join().expect("watcher").expect("a scrape during the run saw the topic's partitions");
    assert!(text.starts_with("HTTP/1.0 200") || text.starts_with("HTTP/1.1 200"), "{text}");
    server.shutdown();
}

#[test]
fn workloads_with_nothing_to_serve_refuse_the_option_with_the_reason() {
    use sluice_bench::workloads::{log, ring};

    #[derive(Debug, Parser)]
    struct LogCli {
        #[command(flatten)]
        args: log::LogArgs,
    }
    #[derive(Debug, Parser)]
    struct RingCli {
        #[command(flatten)]
        args: ring::RingArgs,
    }
    let line = ["log", "--records", "1000", "--metrics-listen", "127.0.0.1:0"];
    let args = LogCli::try_parse_from(line).expect("valid arguments").args;
    let err = log::run(&args).expect_err("refused").to_string();
    assert!(err.contains("--metrics-listen is refused") && err.contains("--rate"), "{err}");
    let line = ["ring", "--metrics-listen", "127.0.0.1:0"];
    let args = RingCli::try_parse_from(line).expect("valid arguments").args;
    let err = ring::run(&args).expect_err("refused").to_string();
    assert!(err.contains("--metrics-listen is refused"), "{err}");
}

#[test]
fn a_scrape_during_a_kafka_run_shows_the_listeners_requests() {
    use sluice_bench::workloads::kafka::{self, KafkaArgs};

    #[derive(Debug, Parser)]
    struct KafkaCli {
        #[command(flatten)]
        args: KafkaArgs,
    }
    // The endpoint is started here, as `metrics::serve` is by the workload with
    // --metrics-listen; the workload registers its engine, which the listener registered with.
    let server = metrics::serve(Some("127.0.0.1:0".parse().unwrap())).expect("endpoint").expect("started");
    let addr = server.local_addr();
    let watcher = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let text = scrape(addr);
            if text.lines().any(|l| l.starts_with(r#"sluice_kafka_requests_total{api="Produce"}"#)) {
                return Some(text);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    });
    let line = ["kafka", "--records", "20000", "--record-bytes", "64", "--latency-records", "300", "--rate", "1000"];
    let args = KafkaCli::try_parse_from(line).expect("valid arguments").args;
    let report = kafka::run(&args).expect("kafka workload");
    assert_eq!(report.records, 20_000);
    let text = watcher.join().expect("watcher").expect("a scrape during the run saw Produce requests");
    assert!(text.contains(r#"sluice_log_end_offset{topic="#), "{text}");
    server.shutdown();
}

/// Scrapes `addr` until a line starts with `prefix` (or two minutes pass).
fn watch(addr: std::net::SocketAddr, prefix: &'static str) -> std::thread::JoinHandle<Option<String>> {
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let mut raw = String::new();
            let read = TcpStream::connect(addr).and_then(|mut s| {
                write!(s, "GET /metrics HTTP/1.0\r\n\r\n")?;
                s.read_to_string(&mut raw)
            });
            if read.is_ok() && raw.lines().any(|l| l.starts_with(prefix)) {
                return Some(raw);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    })
}

#[test]
fn log_at_a_rate_serves_its_engines_metrics_on_the_address_given() {
    use sluice_bench::workloads::{e2e, log};

    #[derive(Debug, Parser)]
    struct LogCli {
        #[command(flatten)]
        args: log::LogArgs,
    }
    // A fixed port of this helper's range: the workload prints the one it bound only on
    // stderr.
    let addr: std::net::SocketAddr = "127.0.0.1:23951".parse().unwrap();
    let watcher = watch(addr, r#"sluice_log_end_offset{topic="e2e",partition="0"}"#);
    let line = ["log", "--rate", "20000", "--duration", "2", "--metrics-listen", "127.0.0.1:23951"];
    let args = LogCli::try_parse_from(line).expect("valid arguments").args;
    let report = e2e::run(&args).expect("log --rate");
    assert!(report.achieved_rate > 0.0);
    let text = watcher.join().expect("watcher").expect("a scrape during the run saw the engine's partition");
    assert!(text.contains("sluice_log_append_duration_seconds_bucket"), "{text}");
}
