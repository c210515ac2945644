//! `sluice acl`: the ACLs of a data directory (`meta/acls.json`), which `sluice serve
//! --authorizer acl` applies. Like `sluice user`, it does not start the engine: rules can
//! change while the server runs, and count from its next request.

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use sluice_engine::security::acl::{AclBinding, AclStore, CLUSTER, Operation, PatternType, Permission, ResourceType};

use crate::DataDir;

#[derive(Debug, Subcommand)]
pub(crate) enum AclCommand {
    /// Add a rule.
    Add(RuleArgs),
    /// Remove the rule with exactly these fields.
    Remove(RuleArgs),
    /// List the rules: `type<TAB>pattern<TAB>name<TAB>principal<TAB>host<TAB>operation<TAB>permission`.
    List(ListArgs),
}

#[derive(Debug, Args)]
pub(crate) struct RuleArgs {
    /// Who: `User:NAME`, or `User:*` for everyone.
    #[arg(long)]
    principal: String,
    /// What: Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs,
    /// AlterConfigs, IdempotentWrite or All.
    #[arg(long)]
    operation: Operation,
    /// On a topic (a name, or `*` for every topic).
    #[arg(long, group = "resource")]
    topic: Option<String>,
    /// On a consumer group.
    #[arg(long, group = "resource")]
    group: Option<String>,
    /// On a transactional id.
    #[arg(long, group = "resource")]
    transactional_id: Option<String>,
    /// On the cluster.
    #[arg(long, group = "resource")]
    cluster: bool,
    /// The name is a prefix: the rule covers every resource whose name starts with it.
    #[arg(long)]
    prefixed: bool,
    /// A deny rule (deny wins over allow); an allow rule without it.
    #[arg(long)]
    deny: bool,
    /// From this host (an IP address) only; every host without it.
    #[arg(long, default_value = "*")]
    host: String,
    #[command(flatten)]
    dir: DataDir,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    dir: DataDir,
}

impl RuleArgs {
    fn binding(&self) -> Result<AclBinding> {
        let (resource_type, resource_name) = match (&self.topic, &self.group, &self.transactional_id, self.cluster) {
            (Some(t), None, None, false) => (ResourceType::Topic, t.clone()),
            (None, Some(g), None, false) => (ResourceType::Group, g.clone()),
            (None, None, Some(id), false) => (ResourceType::TransactionalId, id.clone()),
            (None, None, None, true) => (ResourceType::Cluster, CLUSTER.to_string()),
            _ => bail!("a rule needs one of --topic, --group, --transactional-id or --cluster"),
        };
        Ok(AclBinding {
            resource_type,
            resource_name,
            pattern: if self.prefixed { PatternType::Prefixed } else { PatternType::Literal },
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: self.operation,
            permission: if self.deny { Permission::Deny } else { Permission::Allow },
        })
    }
}

pub(crate) fn run(c: AclCommand) -> Result<()> {
    match c {
        AclCommand::Add(a) => {
            let b = a.binding()?;
            if AclStore::at(a.dir.existing()?).add(std::slice::from_ref(&b))? == 0 {
                eprintln!("the rule was there already");
            }
            Ok(())
        }
        AclCommand::Remove(a) => {
            let b = a.binding()?;
            let store = AclStore::at(a.dir.existing()?);
            if store.remove(|x| *x == b)?.is_empty() {
                bail!("no such rule in {}", store.path().display());
            }
            Ok(())
        }
        AclCommand::List(a) => {
            for b in AclStore::at(a.dir.existing()?).load()?.bindings() {
                println!(
                    "{:?}\t{:?}\t{}\t{}\t{}\t{}\t{:?}",
                    b.resource_type,
                    b.pattern,
                    b.resource_name,
                    b.principal,
                    b.host,
                    b.operation.name(),
                    b.permission
                );
            }
            Ok(())
        }
    }
}
