//! `sluice user`: the SASL users of a data directory (`meta/users.json`: salted keys,
//! never a password). It does not start the engine: users can be added and deleted while
//! `sluice serve` runs on the directory, and take effect at the next login.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use sluice_engine::security::scram::MIN_ITERATIONS;
use sluice_engine::security::{Mechanism, UserStore};

use crate::DataDir;

#[derive(Debug, Subcommand)]
pub(crate) enum UserCommand {
    /// Add a user, or give an existing one a new password for the mechanisms named.
    Add(AddArgs),
    /// Delete a user (all its mechanisms, or only those named).
    Delete(DeleteArgs),
    /// List the users and their mechanisms: `name<TAB>mechanism<TAB>iterations`.
    List(ListArgs),
}

#[derive(Debug, Args)]
pub(crate) struct AddArgs {
    /// The user name (any non-empty string without control characters).
    name: String,
    /// The password (stored only as SCRAM's salted keys).
    #[arg(long)]
    password: String,
    /// The mechanisms the user may log in with (repeat for several); all three when not
    /// given: SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN.
    #[arg(long = "mechanism", value_name = "SCRAM-SHA-256|SCRAM-SHA-512|PLAIN")]
    mechanisms: Vec<Mechanism>,
    /// PBKDF2 iterations of the stored keys (4096..=16384, Kafka's bounds).
    #[arg(long, default_value_t = MIN_ITERATIONS)]
    iterations: u32,
    #[command(flatten)]
    dir: DataDir,
}

#[derive(Debug, Args)]
pub(crate) struct DeleteArgs {
    /// The user name.
    name: String,
    /// Delete only these mechanisms' credentials (repeat for several).
    #[arg(long = "mechanism", value_name = "SCRAM-SHA-256|SCRAM-SHA-512|PLAIN")]
    mechanisms: Vec<Mechanism>,
    #[command(flatten)]
    dir: DataDir,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    dir: DataDir,
}

pub(crate) fn run(c: UserCommand) -> Result<()> {
    match c {
        UserCommand::Add(a) => {
            let store = UserStore::at(a.dir.existing()?);
            let mechanisms = if a.mechanisms.is_empty() { Mechanism::ALL.to_vec() } else { a.mechanisms };
            store
                .upsert(&a.name, &a.password, &mechanisms, a.iterations)
                .with_context(|| format!("adding user {:?}", a.name))?;
            let names: Vec<&str> = mechanisms.iter().map(|m| m.name()).collect();
            eprintln!("user {} may log in with {}", a.name, names.join(", "));
            Ok(())
        }
        UserCommand::Delete(a) => {
            let store = UserStore::at(a.dir.existing()?);
            let removed = if a.mechanisms.is_empty() {
                store.remove(&a.name, None)?
            } else {
                let mut any = false;
                for m in a.mechanisms {
                    any |= store.remove(&a.name, Some(m))?;
                }
                any
            };
            if !removed {
                bail!("no user {:?} (with those mechanisms) in {}", a.name, store.path().display());
            }
            Ok(())
        }
        UserCommand::List(a) => {
            let store = UserStore::at(a.dir.existing()?);
            for (name, mechanisms) in store.load()?.list() {
                for (m, iterations) in mechanisms {
                    println!("{name}\t{m}\t{iterations}");
                }
            }
            Ok(())
        }
    }
}
