//! Waiting for SIGINT or SIGTERM without a handler: the signals are blocked in every
//! thread and taken synchronously with `sigwait`.

/// SIGINT and SIGTERM, blocked in the calling thread (and so in threads it starts).
pub(crate) fn block_termination() -> anyhow::Result<libc::sigset_t> {
    // SAFETY: `set` is a local the libc calls initialise before use (sigemptyset
    // first); pthread_sigmask only changes this thread's mask. Covered by the
    // `serve` test in tests/kafka_serve.rs, which stops the server with SIGTERM.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            anyhow::bail!("blocking SIGINT and SIGTERM: {}", std::io::Error::from_raw_os_error(rc));
        }
        Ok(set)
    }
}

/// One of the blocked signals, if one is pending; does not wait.
pub(crate) fn pending(set: &libc::sigset_t) -> anyhow::Result<Option<i32>> {
    let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `set` was filled by `block_termination`; a null info pointer is allowed;
    // `zero` is a valid timeout. Covered by tests/cli.rs, which stops a following group
    // consumer with SIGTERM.
    let rc = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &zero) };
    if rc >= 0 {
        return Ok(Some(rc));
    }
    match std::io::Error::last_os_error() {
        e if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR)) => Ok(None),
        e => anyhow::bail!("checking for a signal: {e}"),
    }
}

/// Waits for one of the blocked signals; returns its number.
pub(crate) fn wait(set: &libc::sigset_t) -> anyhow::Result<i32> {
    let mut signal = 0;
    // SAFETY: `set` was filled by `block_termination`; `signal` is a valid out-pointer.
    let rc = unsafe { libc::sigwait(set, &mut signal) };
    if rc != 0 {
        anyhow::bail!("waiting for a signal: {}", std::io::Error::from_raw_os_error(rc));
    }
    Ok(signal)
}
