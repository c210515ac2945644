//! The machine's own floor under a latency figure: how late a sleeping thread wakes while
//! a run goes on.
//!
//! A [`WakeProbe`] is a thread beside the run that sleeps 1 ms at a time and records how
//! much later than asked each sleep ended. A busy host or a throttled VM shows there: while
//! the VM is paused, the probe's sleep overruns by the pause, and every record an
//! open-loop run schedules in that time waits as long. The probe's p99.9 and max are then
//! about the length of the machine's stalls, which no engine can hide (a record waits on
//! at least two wake-ups, the producer's and the consumer's). It adds 1 000 wake-ups a
//! second to the run, a small share of the engine's own.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{LatencyRecorder, LatencySummary};

/// The sleep each sample asks for.
pub const WAKE_SLEEP: Duration = Duration::from_millis(1);

/// The name of a probe's rows in a result table.
pub const WAKE_ROWS: &str = "machine: 1 ms sleep late by";

/// A running probe; [`WakeProbe::finish`] stops it and returns what it saw.
#[derive(Debug)]
pub struct WakeProbe {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<LatencyRecorder>,
}

impl WakeProbe {
    /// Starts the probe's thread.
    ///
    /// # Errors
    ///
    /// The thread could not be started.
    pub fn start() -> std::io::Result<WakeProbe> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new().name("sluice-wake-probe".into()).spawn(move || {
            let mut late = LatencyRecorder::new();
            while !stopped.load(Ordering::Relaxed) {
                let asked = Instant::now();
                std::thread::sleep(WAKE_SLEEP);
                late.record(asked.elapsed().saturating_sub(WAKE_SLEEP));
            }
            late
        })?;
        Ok(WakeProbe { stop, thread })
    }

    /// Stops the probe and summarizes how late its sleeps ended, in microseconds.
    #[must_use]
    pub fn finish(self) -> LatencySummary {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().map(|late| late.summary()).unwrap_or_default()
    }

    /// Runs `run` with a probe beside it (unless `probe` is false) and returns its output
    /// with what the probe saw.
    ///
    /// # Errors
    ///
    /// The probe's thread could not be started, or `run` failed.
    pub fn around<T>(
        probe: bool,
        run: impl FnOnce() -> anyhow::Result<T>,
    ) -> anyhow::Result<(T, Option<LatencySummary>)> {
        let probe = if probe { Some(WakeProbe::start()?) } else { None };
        let out = run()?;
        Ok((out, probe.map(WakeProbe::finish)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_counts_its_sleeps_until_it_is_stopped() {
        let probe = WakeProbe::start().expect("a thread");
        std::thread::sleep(Duration::from_millis(50));
        let s = probe.finish();
        // At most one sample per millisecond of the 50, and some of them.
        assert!(s.count >= 1 && s.count <= 51, "{s:?}");
        assert!(s.p50 <= s.p99 && s.p99 <= s.max, "{s:?}");
    }

    #[test]
    fn around_probes_a_run_only_when_asked() {
        let (out, seen) = WakeProbe::around(true, || {
            std::thread::sleep(Duration::from_millis(20));
            Ok(7)
        })
        .expect("runs");
        assert_eq!(out, 7);
        assert!(seen.is_some_and(|s| s.count >= 1), "{seen:?}");
        let (_, seen) = WakeProbe::around(false, || Ok(())).expect("runs");
        assert_eq!(seen, None);
        assert!(WakeProbe::around(true, || anyhow::bail!("failed") as anyhow::Result<()>).is_err());
    }
}
