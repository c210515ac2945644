//! Which stored state belongs to which operator: operator uids, build positions, and the
//! type tags a restore checks.
//!
//! A stateful operator given a uid (`Stream::uid`) stores its state under that uid and
//! takes back the state stored under it, wherever it now sits in the graph. One without a
//! uid stores and restores by its build position among the job's stateful operators
//! (`#0`, `#1`, ...): adding or removing a stateful operator before it hands it another
//! operator's state, which the type check catches only when the types differ.

use std::collections::{HashMap, HashSet};

use sluice_io::CheckpointId;

use super::{CheckpointError, Restored};

/// The name a stateful operator's state is stored under.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum OperatorKey {
    /// Given with `Stream::uid`.
    Uid(String),
    /// The operator's build position among the job's stateful operators (no uid given).
    Position(u32),
}

impl std::fmt::Display for OperatorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OperatorKey::Uid(uid) => write!(f, "uid {uid:?}"),
            OperatorKey::Position(n) => write!(f, "#{n} (no uid: matched by build position)"),
        }
    }
}

/// What an operator's stored state is: the operator kind, and the key and state types by
/// `std::any::type_name` (which names a type by its path: stable across builds of one
/// program, though Rust does not promise it across compiler versions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StateTypes {
    pub(crate) kind: String,
    pub(crate) key: String,
    pub(crate) state: String,
}

impl StateTypes {
    /// The tags of an operator of `kind` keyed by `K` whose state is `S`.
    pub(crate) fn of<K: ?Sized, S: ?Sized>(kind: &str) -> StateTypes {
        StateTypes {
            kind: kind.to_string(),
            key: std::any::type_name::<K>().to_string(),
            state: std::any::type_name::<S>().to_string(),
        }
    }

    /// The first difference between stored tags and the job's: (what, stored, job's).
    fn difference(&self, has: &StateTypes) -> Option<(&'static str, String, String)> {
        [
            ("operator kind", &self.kind, &has.kind),
            ("key type", &self.key, &has.key),
            ("state type", &self.state, &has.state),
        ]
        .into_iter()
        .find(|(_, had, has)| had != has)
        .map(|(what, had, has)| (what, had.clone(), has.clone()))
    }
}

/// Checks a restored checkpoint against the job's stateful operators (`job`: each one's
/// key and types): every stored operator must be one of the job's (unless
/// `allow_non_restored` drops it) with the same kind and types. Operators of the job the
/// checkpoint does not name start empty.
pub(crate) fn check_restored(
    restored: &Restored,
    job: &HashMap<OperatorKey, StateTypes>,
    sources: &HashSet<OperatorKey>,
    allow_non_restored: bool,
) -> Result<(), CheckpointError> {
    let id: CheckpointId = restored.id;
    let mut stored: Vec<_> = restored.sources.keys().filter(|key| !sources.contains(key)).collect();
    stored.sort();
    if let Some(key) = stored.first() {
        if !allow_non_restored {
            return Err(CheckpointError::UnknownOperator { id, operator: format!("source {key}") });
        }
        for key in stored {
            eprintln!("sluice: checkpoint {id}: dropping the positions of source {key}, which this job does not have");
        }
    }
    let mut stored: Vec<_> = restored.operators.iter().collect();
    stored.sort_by(|a, b| a.0.cmp(b.0));
    for (key, op) in stored {
        let Some(has) = job.get(key) else {
            if allow_non_restored {
                eprintln!(
                    "sluice: checkpoint {id}: dropping the state of operator {key}, which this job does not have"
                );
                continue;
            }
            return Err(CheckpointError::UnknownOperator { id, operator: key.to_string() });
        };
        // Legacy checkpoints carry no tags: nothing to check against.
        let Some(had) = &op.types else { continue };
        if let Some((what, had, has)) = had.difference(has) {
            return Err(CheckpointError::IncompatibleState { id, operator: key.to_string(), what, had, has });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::checkpoint::RestoredOperator;

    fn restored(ops: Vec<(OperatorKey, Option<StateTypes>)>) -> Restored {
        let mut r = Restored { id: CheckpointId(7), ..Restored::default() };
        for (key, types) in ops {
            r.operators.insert(key, RestoredOperator { watermark: 0, watermark_max: 0, types, groups: Vec::new() });
        }
        r
    }

    #[test]
    fn uid_state_the_job_lacks_is_refused_unless_allowed() {
        let r = restored(vec![(OperatorKey::Uid("gone".into()), Some(StateTypes::of::<u64, u64>("process")))]);
        let none = HashSet::new();
        let err = check_restored(&r, &HashMap::new(), &none, false).unwrap_err();
        assert!(matches!(&err, CheckpointError::UnknownOperator { operator, .. } if operator.contains("\"gone\"")));
        check_restored(&r, &HashMap::new(), &none, true).unwrap();
        // A source's positions likewise.
        let mut r = restored(Vec::new());
        r.sources.insert(OperatorKey::Uid("events".into()), HashMap::new());
        let err = check_restored(&r, &HashMap::new(), &none, false).unwrap_err().to_string();
        assert!(err.contains("source uid \"events\""), "{err}");
        let job = HashSet::from([OperatorKey::Uid("events".into())]);
        check_restored(&r, &HashMap::new(), &job, false).unwrap();
    }

    #[test]
    fn uid_with_another_state_type_is_refused_naming_both_types() {
        let key = OperatorKey::Uid("counts".into());
        let r = restored(vec![(key.clone(), Some(StateTypes::of::<u64, u64>("window(aligned)")))]);
        let job = HashMap::from([(key, StateTypes::of::<u64, String>("window(aligned)"))]);
        let err = check_restored(&r, &job, &HashSet::new(), true).unwrap_err().to_string();
        assert!(err.contains("counts") && err.contains("state type"), "{err}");
        assert!(err.contains("`u64`") && err.contains("alloc::string::String"), "{err}");
    }

    #[test]
    fn uid_legacy_state_without_tags_restores_by_position() {
        let r = restored(vec![(OperatorKey::Position(0), None)]);
        let job = HashMap::from([(OperatorKey::Position(0), StateTypes::of::<u64, u64>("process"))]);
        check_restored(&r, &job, &HashSet::new(), false).unwrap();
    }
}
