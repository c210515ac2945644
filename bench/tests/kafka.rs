//! `sluice-bench kafka` with tiny parameters, so the workload cannot rot: kcat's records
//! must all arrive (the run checks the partitions), and every latency record must come
//! back through the listener. Needs the clients `.ci/deps` installs.

use clap::Parser;
use sluice_bench::workloads::kafka::{self, KafkaArgs};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: KafkaArgs,
}

#[test]
fn produces_through_the_listener_and_measures_latency() {
    let line = ["kafka", "--records", "3000", "--record-bytes", "64", "--latency-records", "200", "--rate", "2000"];
    let args = Cli::try_parse_from(line).expect("valid arguments").args;
    let report = kafka::run(&args).expect("kafka workload");
    assert_eq!(report.workload, "kafka");
    assert_eq!(report.records, 3000);
    assert!(report.embedded_records_per_s > 0.0 && report.kafka_records_per_s > 0.0, "{report:?}");
    assert_eq!(report.produce_to_consume_us.count, 200);
    assert!(report.produce_to_consume_us.p50 <= report.produce_to_consume_us.max);
}

#[test]
fn either_client_and_either_listener_placement_produce_every_record() {
    let mut cases = vec![("kcat", "executors"), ("kcat", "shards")];
    if cfg!(feature = "kafka-client") {
        cases.push(("rdkafka", "executors"));
    }
    if cfg!(feature = "rskafka-client") {
        cases.push(("rskafka", "executors"));
    }
    for (client, listener) in cases {
        // 2 000 records in batches of 300: rskafka's last batch per partition is short.
        let line = [
            "kafka",
            "--records",
            "2000",
            "--batch-records",
            "300",
            "--record-bytes",
            "32",
            "--latency-records",
            "0",
            "--client",
            client,
            "--listener",
            listener,
        ];
        let args = Cli::try_parse_from(line).expect("valid arguments").args;
        let report = kafka::run(&args).unwrap_or_else(|e| panic!("{client} through a listener on {listener}: {e:#}"));
        // The run itself checks that the partitions hold every record.
        assert_eq!(report.records, 2000);
        let json = serde_json::to_value(&report).expect("serializes");
        assert_eq!((json["client"].as_str(), json["listener"].as_str()), (Some(client), Some(listener)));
        assert!(report.table().to_string().contains(&format!("{client} produce via listener")));
    }
    for (client, feature, built) in [
        ("rdkafka", "kafka-client", cfg!(feature = "kafka-client")),
        ("rskafka", "rskafka-client", cfg!(feature = "rskafka-client")),
    ] {
        if !built {
            let line = ["kafka", "--records", "10", "--latency-records", "0", "--client", client];
            let args = Cli::try_parse_from(line).expect("valid arguments").args;
            let err = kafka::run(&args).expect_err("needs the feature");
            assert!(format!("{err:#}").contains(feature), "{err:#}");
        }
    }
}

#[test]
fn every_codec_arrives_compressed_and_comes_back_through_the_latency_run() {
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        // The run checks that the partitions hold every record and that a stored batch
        // arrived compressed with the codec.
        let latency = if codec == "zstd" { "100" } else { "0" };
        let line = [
            "kafka",
            "--records",
            "2000",
            "--record-bytes",
            "64",
            "--latency-records",
            latency,
            "--compression",
            codec,
        ];
        let args = Cli::try_parse_from(line).expect("valid arguments").args;
        let report = kafka::run(&args).unwrap_or_else(|e| panic!("{codec}: {e:#}"));
        assert_eq!(report.records, 2000);
        assert_eq!(serde_json::to_value(&report).expect("serializes")["compression"], codec);
        assert!(report.table().to_string().contains(&format!("{codec} batches")), "{}", report.table());
        if codec == "zstd" {
            assert_eq!(report.produce_to_consume_us.count, 100);
            assert!(report.machine_wake_latency_us.is_some_and(|m| m.count > 0), "the wake-up probe ran");
        }
    }
    let bad = Cli::try_parse_from(["kafka", "--compression", "brotli"]).expect_err("no such codec");
    assert!(bad.to_string().contains("brotli"), "{bad}");
}

#[test]
fn rounds_alternate_into_fresh_topics_and_report_medians() {
    let line = ["kafka", "--records", "1500", "--record-bytes", "16", "--latency-records", "0", "--rounds", "3"];
    let args = Cli::try_parse_from(line).expect("valid arguments").args;
    // Each round checks that its own topics hold exactly its records.
    let report = kafka::run(&args).expect("three rounds");
    assert_eq!(report.rounds, 3);
    assert_eq!(report.round_embedded_records_per_s.len(), 3);
    assert_eq!(report.round_kafka_records_per_s.len(), 3);
    let mut ratios: Vec<f64> =
        report.round_kafka_records_per_s.iter().zip(&report.round_embedded_records_per_s).map(|(k, e)| k / e).collect();
    ratios.sort_by(f64::total_cmp);
    assert_eq!(report.kafka_over_embedded, ratios[1], "the median round's ratio");
    let mut embedded = report.round_embedded_records_per_s.clone();
    embedded.sort_by(f64::total_cmp);
    assert_eq!(report.embedded_records_per_s, embedded[1]);
    assert!(report.table().to_string().contains("rounds (listener/embedded)"));
    assert_eq!(serde_json::to_value(&report).expect("serializes")["rounds"], 3);
}

#[test]
fn the_sasl_ssl_run_produces_every_record_through_tls_and_a_scram_login() {
    let line = [
        "kafka",
        "--records",
        "2000",
        "--rounds",
        "2",
        "--latency-records",
        "0",
        "--security",
        "sasl_ssl",
        "--client",
        "kcat",
    ];
    let args = Cli::try_parse_from(line).expect("valid arguments").args;
    let report = kafka::run(&args).expect("kafka workload over SASL_SSL");
    let s = report.sasl_ssl.as_ref().expect("the SASL_SSL figures");
    assert_eq!(s.round_sasl_ssl_records_per_s.len(), 2);
    assert!(s.sasl_ssl_records_per_s > 0.0 && s.sasl_ssl_over_plaintext > 0.0, "{s:?}");
    assert!(s.sasl_ssl_listener_cpu_us_per_record > 0.0, "{s:?}");
    let json = serde_json::to_value(&report).expect("json");
    assert!(json["sasl_ssl_over_plaintext"].is_number(), "{json}");
    // Another client is refused: only kcat is measured both ways.
    let line = ["kafka", "--records", "10", "--latency-records", "0", "--security", "sasl_ssl", "--client", "rskafka"];
    if let Ok(cli) = Cli::try_parse_from(line) {
        assert!(kafka::run(&cli.args).is_err());
    }
}
