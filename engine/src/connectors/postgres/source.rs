//! [`PostgresSource`] (opened once, outside the pipeline) and [`PostgresReader`] (its
//! instance on one shard): the [`Source`] side of the replication thread.

use std::{
    collections::HashMap,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError, atomic::Ordering},
    task::{Context, Poll},
    thread::JoinHandle,
};

use futures_lite::Stream as _;

use super::{
    PostgresConfig, PostgresError,
    change::Change,
    pgoutput::Lsn,
    replication::{self, Shared, Unit},
};
use crate::dataflow::{Source, UserError};

/// How many whole transactions the replication thread may have read ahead of the
/// pipeline.
const UNITS_AHEAD: usize = 16;

/// The one split's key in checkpoints.
const SPLIT: u64 = 0;

/// A PostgreSQL source to use in a pipeline: made once, then
/// [`PostgresSource::reader`] on every shard (shard 0's reads; the others' read
/// nothing).
#[derive(Debug, Clone)]
pub struct PostgresSource {
    config: Arc<PostgresConfig>,
    error: Arc<Mutex<Option<PostgresError>>>,
}

impl PostgresSource {
    /// A source reading `config`'s tables. Nothing connects until the pipeline runs.
    #[must_use]
    pub fn new(config: PostgresConfig) -> PostgresSource {
        PostgresSource { config: Arc::new(config), error: Arc::default() }
    }

    /// Connects once and checks that every table exists, so that a wrong DSN, password or
    /// table name is an error before a pipeline starts rather than a failed pipeline.
    ///
    /// # Errors
    ///
    /// What connecting or the catalog answers; [`PostgresError::Config`] for a table that
    /// is not there.
    pub fn check(&self) -> Result<(), PostgresError> {
        let mut sql = super::wire::Connection::connect(&self.config.dsn, false)?;
        super::snapshot::primary_keys(&mut sql, &self.config).map(drop)
    }

    /// This shard's instance.
    #[must_use]
    pub fn reader(&self, shard: usize) -> PostgresReader {
        PostgresReader { source: self.clone(), reads: shard == 0, resume: None, position: None, running: None }
    }

    /// The error that failed a pipeline reading this source, if one did (taken).
    #[must_use]
    pub fn take_error(&self) -> Option<PostgresError> {
        self.error.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

struct Running {
    shared: Arc<Shared>,
    units: Pin<Box<async_channel::Receiver<Result<Unit, PostgresError>>>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.units.close();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One shard's instance of a [`PostgresSource`].
pub struct PostgresReader {
    source: PostgresSource,
    reads: bool,
    /// The restored position, if the pipeline restored one.
    resume: Option<Lsn>,
    /// The end of the last unit emitted: `None` until the snapshot has been.
    position: Option<Lsn>,
    running: Option<Running>,
}

impl std::fmt::Debug for PostgresReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresReader").field("reads", &self.reads).field("position", &self.position).finish()
    }
}

impl PostgresReader {
    fn start(&mut self) -> &mut Running {
        self.running.get_or_insert_with(|| {
            let shared = Arc::new(Shared::default());
            let (tx, units) = async_channel::bounded(UNITS_AHEAD);
            let (config, resume, thread_shared) = (self.source.config.clone(), self.resume, shared.clone());
            let thread = std::thread::Builder::new()
                .name("sluice-postgres".into())
                .spawn(move || replication::run(&config, resume, &thread_shared, &tx))
                .ok();
            if thread.is_none() {
                units.close();
            }
            Running { shared, units: Box::pin(units), thread }
        })
    }
}

impl Source<Change> for PostgresReader {
    fn splits(&self) -> usize {
        usize::from(self.reads)
    }

    /// Emits one whole transaction (or the whole snapshot) per call, however many
    /// changes it holds, so that no checkpoint falls inside one.
    fn poll_next(&mut self, cx: &mut Context<'_>, out: &mut Vec<Change>, _max: usize) -> Poll<Option<usize>> {
        if !self.reads {
            return Poll::Ready(None);
        }
        let running = self.start();
        match running.units.as_mut().poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(unit))) => {
                out.extend(unit.changes);
                self.position = Some(unit.end);
                Poll::Ready(Some(0))
            }
            Poll::Ready(Some(Err(e))) => {
                let message = e.to_string();
                *self.source.error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                panic!("the PostgreSQL source failed: {message}");
            }
            Poll::Ready(None) => {
                let message = "the PostgreSQL source's replication thread could not start";
                panic!("{message}");
            }
        }
    }

    fn positions(&self) -> Option<Vec<(u64, i64)>> {
        // Before the snapshot is out there is nothing to resume from: a restore of such
        // a checkpoint starts over with a new slot and snapshot.
        Some(self.position.and_then(|p| i64::try_from(p).ok()).map(|p| (SPLIT, p)).into_iter().collect())
    }

    fn restore(&mut self, positions: &HashMap<u64, i64>) -> Result<(), UserError> {
        if let Some(&lsn) = positions.get(&SPLIT) {
            let lsn = u64::try_from(lsn).map_err(|_| format!("a negative LSN {lsn} in the checkpoint"))?;
            if self.reads {
                self.resume = Some(lsn);
                self.position = Some(lsn);
            }
        }
        Ok(())
    }

    fn checkpoint_completed(&mut self, positions: &[(u64, i64)]) {
        let Some(running) = &self.running else { return };
        if let Some(&(_, lsn)) = positions.iter().find(|(split, _)| *split == SPLIT) {
            running.shared.acked.fetch_max(u64::try_from(lsn).unwrap_or(0), Ordering::AcqRel);
        }
    }
}
