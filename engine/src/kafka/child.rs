//! Kafka clients run as child processes (kcat, the Python clients) by the tests and the
//! bench, started with an environment in which they load their own librdkafka.

use std::ffi::OsStr;
use std::process::Command;

/// A command for a Kafka client (kcat, a Python client) to run as a child process. Cargo
/// puts the librdkafka that rdkafka-sys builds (without zlib or zstd) on `LD_LIBRARY_PATH`
/// for tests and `cargo run` when the `kafka-client` feature is on, and kcat or
/// confluent-kafka would load it in place of their own: those entries are left out.
pub fn client_command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    if let Some(path) = std::env::var_os("LD_LIBRARY_PATH") {
        let kept: Vec<std::path::PathBuf> =
            std::env::split_paths(&path).filter(|p| !p.to_string_lossy().contains("rdkafka-sys")).collect();
        cmd.env("LD_LIBRARY_PATH", std::env::join_paths(kept).unwrap_or_default());
    }
    cmd
}
