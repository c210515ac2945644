//! One job across processes against the real `sluice serve` binary, which is killed with
//! SIGKILL mid-run (issue 27): the slot job of the engine's multi-process tests
//! (`engine/tests/multi_process/slots.rs`, included here), three member processes
//! (`JobMember`) sharing six slots, exactly-once repartition and output.
//!
//! `serve_job_broker_killed`: once some counts are committed, `sluice serve` is killed
//! with SIGKILL (no flush, no clean shutdown: its log, transaction and group-offset state
//! is what was on disk) and started again on the same data directory and port. The
//! members lose their group (the broker keeps membership in memory only), rejoin and
//! restart their slots from the slots' checkpoints; their transactional producers are
//! fenced or find their open transactions aborted, and the failed slot pipelines are
//! restarted by their members. The committed output, read `read_committed`, must equal
//! the single-process result record for record, and no member process may exit.
//!
//! This test has its own `main` (`harness = false`) and needs the `kafka-client` feature:
//! `cargo test -p sluice --features kafka-client --test serve_job`.

mod common;
#[path = "../engine/tests/multi_process/job.rs"]
mod job;
// Some of its helpers serve only the engine's takeover tests.
#[allow(dead_code)]
#[path = "../engine/tests/multi_process/slots.rs"]
mod slots;

use std::time::{Duration, Instant};

use job::{EVENTS, Output, single_process};
use slots::{Members, OUT};

fn main() {
    if let Ok(spec) = std::env::var(slots::CHILD) {
        slots::child(&spec);
        return;
    }
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    if filter.iter().all(|f| "serve_job_broker_killed".contains(f.as_str())) {
        let started = Instant::now();
        serve_job_broker_killed();
        println!("test serve_job_broker_killed ... ok ({:.1?})", started.elapsed());
    }
}

fn serve_job_broker_killed() {
    let expected = single_process();
    let dir = common::data_dir("serve_job", "broker_killed");
    let (mut server, bootstrap, _) = common::start(&dir);
    slots::create_topics(&bootstrap);
    let root = dir.with_extension("checkpoints");
    let _ = std::fs::remove_dir_all(&root);
    let mut members = Members::start(&bootstrap, &root, 3);
    let mut output = Output::of(&bootstrap, OUT);
    members.wait_spread(&[0, 1, 2], "three members", &[], &mut output);
    let deadline = Instant::now() + Duration::from_secs(180);
    members.wait_committed(&mut output, EVENTS / 5, deadline, &[]);
    println!("{} of {EVENTS} events committed: killing sluice serve (SIGKILL)", output.total());
    server.kill().expect("SIGKILL");
    server.wait().expect("reaped");
    std::thread::sleep(Duration::from_millis(500));
    let (server, again, _) = common::start_on(&dir, &bootstrap);
    assert_eq!(again, bootstrap, "sluice serve is back on its port");
    let failures = members.finish(&mut output, &expected, true, deadline, &[]);
    common::stop(server);
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{} counts committed, equal to the single process's; (slot failures, starts that waited): {failures:?}",
        output.counts.len()
    );
}
