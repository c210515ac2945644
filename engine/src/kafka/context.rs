//! What every connection of the listener shares, and all a request handler may reach:
//! the engine handle, the listener's configuration, and the listener-wide state (the
//! transaction coordinator, the stable-offset index, the groups' join barriers). The
//! handlers take this, never the listener; it depends on the state types only, not on
//! any handler.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::KafkaConfig;
use super::groups::JoinBarrier;
use super::stable::StableIndex;
use super::transactions::TransactionCoordinator;
use crate::engine::EngineHandle;

/// What every connection of the listener shares.
#[derive(Debug)]
pub(crate) struct Context {
    pub(crate) engine: EngineHandle,
    pub(crate) config: KafkaConfig,
    /// The host and port clients are told to connect to.
    pub(crate) advertised: (String, i32),
    /// Transactional ids and their transactions (persisted in `__transaction_state`).
    pub(crate) txns: TransactionCoordinator,
    /// Last stable offsets and aborted transactions for read_committed fetches.
    pub(crate) stable: StableIndex,
    /// Each group's join barrier (`groups::JoinBarrier`).
    pub(crate) joins: Mutex<HashMap<String, JoinBarrier>>,
}

impl Context {
    /// The groups' join barriers, locked (a panic elsewhere leaves them usable).
    pub(crate) fn joins(&self) -> MutexGuard<'_, HashMap<String, JoinBarrier>> {
        self.joins.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
