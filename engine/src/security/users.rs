//! SASL users: each user's credentials per mechanism, in `meta/users.json` of the data
//! directory (salts and derived keys only, never a password).
//!
//! The file is replaced whole (written beside, fsynced, renamed, the directory fsynced),
//! under an exclusive lock on `meta/security.lock`, so `sluice user add` and a running
//! `sluice serve` can both change it. The listener reads it again when it changes
//! ([`LiveUsers`]): a user added or deleted while the server runs takes effect at the next
//! login (connections already authenticated stay so, as in Kafka, until they
//! re-authenticate).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::SecurityError;
use super::scram::{Credential, Mechanism};

/// The users file of a data directory.
#[derive(Clone, Debug)]
pub struct UserStore {
    path: PathBuf,
    lock: PathBuf,
}

/// Every user and their credentials, as the file held them.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Users {
    version: u32,
    users: BTreeMap<String, BTreeMap<String, Credential>>,
}

impl Users {
    /// `user`'s credential for `mechanism`, if it has one.
    #[must_use]
    pub fn credential(&self, user: &str, mechanism: Mechanism) -> Option<Credential> {
        self.users.get(user)?.get(mechanism.name()).cloned()
    }

    /// Each user with its mechanisms and their iteration counts, by name.
    #[must_use]
    pub fn list(&self) -> Vec<(String, Vec<(Mechanism, u32)>)> {
        self.users
            .iter()
            .map(|(name, creds)| {
                let mechs = creds.iter().filter_map(|(m, c)| Some((m.parse().ok()?, c.iterations))).collect();
                (name.clone(), mechs)
            })
            .collect()
    }

    /// Whether there is no user at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// Checks a user name: any non-empty string without NUL (PLAIN's separator) or control
/// characters.
///
/// # Errors
///
/// [`SecurityError::InvalidName`] saying why.
pub fn validate_user(name: &str) -> Result<(), SecurityError> {
    if name.is_empty() {
        return Err(SecurityError::InvalidName("a user name cannot be empty".into()));
    }
    if name.chars().any(char::is_control) {
        return Err(SecurityError::InvalidName(format!("user name {name:?} has a control character")));
    }
    Ok(())
}

impl UserStore {
    /// The users file of the data directory `data_dir`.
    #[must_use]
    pub fn at(data_dir: &Path) -> UserStore {
        let meta = data_dir.join("meta");
        UserStore { path: meta.join("users.json"), lock: meta.join("security.lock") }
    }

    /// The file's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the users (none when the file does not exist).
    ///
    /// # Errors
    ///
    /// The file cannot be read, or is not a users file.
    pub fn load(&self) -> Result<Users, SecurityError> {
        super::files::read_json(&self.path)
    }

    /// Gives `user` new credentials for `mechanisms` from `password` (replacing those it
    /// had for them; its others stay).
    ///
    /// # Errors
    ///
    /// A bad user name, iteration count or password, or the file cannot be written.
    pub fn upsert(
        &self,
        user: &str,
        password: &str,
        mechanisms: &[Mechanism],
        iterations: u32,
    ) -> Result<(), SecurityError> {
        validate_user(user)?;
        let creds = mechanisms
            .iter()
            .map(|&m| Ok((m.name().to_string(), Credential::new(m, password, iterations)?)))
            .collect::<Result<Vec<_>, SecurityError>>()?;
        self.change(|users| {
            users.users.entry(user.to_string()).or_default().extend(creds);
            true
        })
    }

    /// Sets `user`'s credential for one mechanism as it is (Kafka's
    /// AlterUserScramCredentials sends the salted password, not the password).
    ///
    /// # Errors
    ///
    /// A bad user name, or the file cannot be written.
    pub fn set_credential(
        &self,
        user: &str,
        mechanism: Mechanism,
        credential: Credential,
    ) -> Result<(), SecurityError> {
        validate_user(user)?;
        self.change(|users| {
            users.users.entry(user.to_string()).or_default().insert(mechanism.name().to_string(), credential);
            true
        })
    }

    /// Removes `user`'s credential for `mechanism`, or all of them with `None` (the user
    /// is gone once it has none). False if there was nothing to remove.
    ///
    /// # Errors
    ///
    /// The file cannot be read or written.
    pub fn remove(&self, user: &str, mechanism: Option<Mechanism>) -> Result<bool, SecurityError> {
        let mut removed = false;
        self.change(|users| {
            removed = match mechanism {
                None => users.users.remove(user).is_some(),
                Some(m) => {
                    let creds = users.users.get_mut(user);
                    let gone = creds.is_some_and(|c| c.remove(m.name()).is_some());
                    users.users.retain(|_, c| !c.is_empty());
                    gone
                }
            };
            removed
        })?;
        Ok(removed)
    }

    /// Reads, changes and writes the file under the lock; `f` says whether it changed.
    fn change(&self, f: impl FnOnce(&mut Users) -> bool) -> Result<(), SecurityError> {
        let _lock = super::files::lock(&self.lock)?;
        let mut users = self.load()?;
        users.version = 1;
        if f(&mut users) {
            super::files::write_json(&self.path, &users)?;
        }
        Ok(())
    }
}

/// The users as a running listener sees them: read again whenever the file's
/// modification time or size changes (one `stat` per login).
#[derive(Debug)]
pub struct LiveUsers {
    store: UserStore,
    users: super::files::Watched<Users>,
}

impl LiveUsers {
    /// The users of `store`, read now.
    ///
    /// # Errors
    ///
    /// The file exists and cannot be read.
    pub fn new(store: UserStore) -> Result<LiveUsers, SecurityError> {
        let users = super::files::Watched::new(store.path())?;
        Ok(LiveUsers { store, users })
    }

    /// The users now. A file that changed and cannot be read leaves the last good copy in
    /// use (the error is returned beside it, for the log).
    pub fn current(&self) -> (Arc<Users>, Option<SecurityError>) {
        self.users.current()
    }

    /// The store it reads.
    #[must_use]
    pub fn store(&self) -> &UserStore {
        &self.store
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::scram::MIN_ITERATIONS;

    #[test]
    fn users_are_added_listed_removed_and_reloaded_by_a_live_reader() {
        let dir = std::env::temp_dir().join(format!("sluice-users-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = UserStore::at(&dir);
        let live = LiveUsers::new(store.clone()).unwrap();
        assert!(live.current().0.is_empty());
        store.upsert("alice", "pw1", &[Mechanism::ScramSha512, Mechanism::Plain], MIN_ITERATIONS).unwrap();
        store.upsert("bob,=x", "pw2", &[Mechanism::ScramSha256], MIN_ITERATIONS).unwrap();
        let text = std::fs::read_to_string(store.path()).unwrap();
        assert!(!text.contains("pw1") && !text.contains("pw2"), "no password is stored");
        let users = live.current().0;
        assert!(users.credential("alice", Mechanism::Plain).unwrap().verify(Mechanism::Plain, "pw1"));
        assert!(users.credential("alice", Mechanism::ScramSha256).is_none());
        assert_eq!(users.list().len(), 2);
        assert!(store.remove("alice", Some(Mechanism::Plain)).unwrap());
        assert!(!store.remove("alice", Some(Mechanism::Plain)).unwrap());
        assert!(store.remove("bob,=x", None).unwrap());
        let users = live.current().0;
        assert_eq!(users.list(), vec![("alice".to_string(), vec![(Mechanism::ScramSha512, MIN_ITERATIONS)])]);
        assert!(store.upsert("", "pw", &[Mechanism::Plain], MIN_ITERATIONS).is_err());
        assert!(store.upsert("a\nb", "pw", &[Mechanism::Plain], MIN_ITERATIONS).is_err());
        std::fs::write(store.path(), b"{ not json").unwrap();
        let (kept, err) = live.current();
        assert!(err.is_some(), "a damaged file is reported");
        assert_eq!(kept.list().len(), 1, "and the last good copy kept");
        assert!(matches!(store.load(), Err(SecurityError::Corrupt { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
