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
