//! `sluice group`: list and describe consumer groups, and move their committed offsets.

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use futures_lite::future::block_on;
use sluice_engine::{EngineHandle, SeekTo};
use sluice_io::{Offset, Timestamp};

use crate::{DataDir, with_engine};

#[derive(Debug, Subcommand)]
pub(crate) enum GroupCommand {
    /// List groups with members or committed offsets.
    List(DataDir),
    /// Show a group's members and, per partition, committed offset, end and lag.
    Describe(GroupArgs),
    /// Move a group's committed offsets for a topic (the group must have no members).
    ResetOffsets(ResetArgs),
}

#[derive(Debug, Args)]
pub(crate) struct GroupArgs {
    /// The group.
    group: String,
    #[command(flatten)]
    dir: DataDir,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("to").required(true).args(["to_earliest", "to_latest", "to_offset", "to_datetime"])))]
pub(crate) struct ResetArgs {
    /// The group.
    group: String,
    #[command(flatten)]
    dir: DataDir,
    /// The topic whose partitions to reset.
    #[arg(long)]
    topic: String,
    /// To the first offset held.
    #[arg(long)]
    to_earliest: bool,
    /// To the end.
    #[arg(long)]
    to_latest: bool,
    /// To this offset (clamped to what each partition holds).
    #[arg(allow_negative_numbers = true, long)]
    to_offset: Option<u64>,
    /// To the first record at or after this event time (ms since the epoch).
    #[arg(allow_negative_numbers = true, long)]
    to_datetime: Option<i64>,
}

/// Runs a `sluice group` subcommand.
pub(crate) fn run(command: GroupCommand) -> Result<()> {
    match command {
        GroupCommand::List(dir) => with_engine(&dir, |h| {
            for g in block_on(h.list_groups())? {
                println!("{g}");
            }
            Ok(())
        }),
        GroupCommand::Describe(a) => with_engine(&a.dir, |h| describe_group(h, &a.group)),
        GroupCommand::ResetOffsets(a) => with_engine(&a.dir, |h| {
            let to = match (a.to_earliest, a.to_latest, a.to_offset, a.to_datetime) {
                (true, ..) => SeekTo::Earliest,
                (_, true, ..) => SeekTo::Latest,
                (_, _, Some(o), _) => SeekTo::Offset(Offset(o)),
                (_, _, _, Some(t)) => SeekTo::Timestamp(Timestamp(t)),
                _ => unreachable!("clap requires one target"),
            };
            for (topic, p, offset) in block_on(h.reset_offsets(&a.group, &a.topic, to))? {
                println!("{topic}\t{p}\t{offset}");
            }
            Ok(())
        }),
    }
}

fn describe_group(h: &EngineHandle, group: &str) -> Result<()> {
    let lag = block_on(h.group_lag(group))?;
    let description = block_on(h.describe_group(group))?;
    if lag.is_empty() && description.is_none() {
        bail!("unknown group {group:?}");
    }
    match description {
        Some(d) if !d.members.is_empty() => {
            println!(
                "group {}\tgeneration {}\tassignor {}\tmembers {}",
                d.group,
                d.generation,
                d.assignor,
                d.members.len()
            );
            for (member, topics, parts) in &d.members {
                let parts: Vec<String> = parts.iter().map(ToString::to_string).collect();
                println!("member {member}\ttopics {}\tpartitions {}", topics.join(","), parts.join(","));
            }
        }
        _ => println!("group {group}\tmembers 0"),
    }
    for l in lag {
        println!("{}\t{}\tcommitted {}\tend {}\tlag {}", l.topic, l.partition, l.committed, l.end, l.lag);
    }
    Ok(())
}
