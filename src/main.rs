//! The `sluice` command line, like Kafka's topic tools and kcat, over a data directory.
//!
//! Every subcommand takes `--data-dir DIR` and starts the engine on it (so it refuses a
//! directory another sluice process holds), except `sluice user` and `sluice acl`, which
//! change only the directory's users or ACL file, under a lock of their own, and may run
//! beside `sluice serve`. Errors print as one line on stderr and the
//! exit status is non-zero.

mod acl;
mod cdc;
mod count;
mod group;
mod records;
mod serve;
mod signals;
mod topic;
mod user;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use futures_lite::future::block_on;
use sluice_engine::{Engine, EngineConfig, EngineHandle};

#[derive(Debug, Parser)]
#[command(name = "sluice", version, about = "sluice: a thread-per-core streaming engine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create, list, describe, grow and delete topics.
    #[command(subcommand)]
    Topic(topic::TopicCommand),
    /// Send stdin to a topic, one record per line: `key<TAB>value`, or a value alone.
    Produce(records::ProduceArgs),
    /// Print a topic's records as `partition<TAB>offset<TAB>key<TAB>value`.
    Consume(records::ConsumeArgs),
    /// List, describe and reset consumer groups.
    #[command(subcommand)]
    Group(group::GroupCommand),
    /// Count a topic's records per key in tumbling event-time windows, with a pipeline on
    /// every shard; prints `window_start<TAB>window_end<TAB>key<TAB>count` (ms since the
    /// epoch) as each window closes.
    Count(count::CountArgs),
    /// Serve the data directory over the Kafka protocol until SIGINT or SIGTERM; prints
    /// `listening on HOST:PORT` once clients can connect.
    Serve(serve::ServeArgs),
    /// Add, delete and list the SASL users `sluice serve`'s SASL listeners accept.
    #[command(subcommand)]
    User(user::UserCommand),
    /// Add, remove and list the ACLs `sluice serve --authorizer acl` applies.
    #[command(subcommand)]
    Acl(acl::AclCommand),
    /// Change data capture: a database's changes into Debezium-format topics.
    #[command(subcommand)]
    Cdc(cdc::CdcCommand),
}

#[derive(Debug, Args)]
pub(crate) struct DataDir {
    /// The data directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) data_dir: PathBuf,
}

impl DataDir {
    /// The directory, which must exist already (for the commands that change one of its
    /// files without starting the engine).
    pub(crate) fn existing(&self) -> Result<&std::path::Path> {
        if !self.data_dir.is_dir() {
            bail!("data directory {} does not exist (check --data-dir)", self.data_dir.display());
        }
        Ok(&self.data_dir)
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line, as every other error: clap's first paragraph names the problem.
            let text = e.render().to_string();
            let first: Vec<&str> = text.lines().take_while(|l| !l.trim().is_empty()).map(str::trim).collect();
            eprintln!("{} (see --help)", first.join(" "));
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that went away (`sluice consume ... | head -1`) ends the output, not in
        // an error.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, each cause once: an error whose message already
/// quotes its source (as the engine's do) is not followed by that source again.
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Topic(c) => topic::run(c),
        Command::Produce(a) => records::run_produce(&a),
        Command::Consume(a) => records::run_consume(&a),
        Command::Count(a) => count::run(&a),
        Command::Serve(a) => serve::serve(&a),
        Command::Group(c) => group::run(c),
        Command::User(c) => user::run(c),
        Command::Acl(c) => acl::run(c),
        Command::Cdc(c) => cdc::run(c),
    }
}

/// [`with_new_engine`] on a data directory that must exist already: a mistyped path is
/// an error, not a new empty store.
pub(crate) fn with_engine(dir: &DataDir, f: impl FnOnce(&EngineHandle) -> Result<()>) -> Result<()> {
    let path = &dir.data_dir;
    if !path.is_dir() {
        bail!("data directory {} does not exist (sluice topic create makes one; check --data-dir)", path.display());
    }
    with_new_engine(dir, f)
}

/// Starts the engine on the data directory (creating it if needed), runs `f` with a
/// handle, and shuts it down.
pub(crate) fn with_new_engine(dir: &DataDir, f: impl FnOnce(&EngineHandle) -> Result<()>) -> Result<()> {
    let engine = block_on(Engine::open(EngineConfig::new(&dir.data_dir)))
        .with_context(|| format!("opening {}", dir.data_dir.display()))?;
    let result = f(&engine.handle());
    let shutdown = block_on(engine.shutdown()).context("shutting down");
    result.and(shutdown)
}
