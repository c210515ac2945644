//! Locked memory for io_uring: the `RLIMIT_MEMLOCK` limit, what an executor's rings cost
//! against it, and waiting until memory that exited executors still hold is released.
//!
//! For a non-root user (root is exempt) the kernel charges registered buffers and ring
//! memory to a per-user locked-memory count checked against `RLIMIT_MEMLOCK` (8 MiB here,
//! not raisable). Rings are freed asynchronously: for some 10-50 ms after an executor
//! exits, in this process or another of the same user, its memory still counts, and glommio
//! silently runs an executor started meanwhile without registered buffers.

use std::{
    io, mem, thread,
    time::{Duration, Instant},
};

use io_uring::IoUring;

/// The soft `RLIMIT_MEMLOCK` in bytes (`u64::MAX` when unlimited or unreadable).
pub(crate) fn limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `getrlimit` only writes a `struct rlimit` through the pointer, which points at
    // a live, properly aligned `libc::rlimit` owned by this frame.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    if rc == 0 { limit.rlim_cur } else { u64::MAX }
}

/// Kernel memory of one io_uring with `depth` submission entries, rounded up generously:
/// 64-byte SQEs, twice as many 16-byte CQEs, a 4-byte SQ index each, two pages of headers.
/// (Measured on Linux 6.18: three rings of depth 128 cost 32-92 KiB, of depth 1024
/// 152-392 KiB; this gives 72 KiB and 336 KiB.)
pub(crate) fn ring_bytes_estimate(depth: usize) -> u64 {
    let entries = (depth as u64).next_power_of_two();
    (entries * (64 + 2 * 16 + 4)).next_multiple_of(4096) + 2 * 4096
}

/// Waits until `bytes` more can be locked under this user's limit, probing by registering
/// (and at once unregistering) a buffer of that size with a scratch io_uring every few
/// milliseconds. Returns whether there was room before `timeout`; also `true` when the limit
/// is infinite or `bytes` is 0, and `false` if probing itself fails.
pub(crate) fn wait_until_lockable(bytes: u64, timeout: Duration) -> bool {
    if bytes == 0 || limit() == u64::MAX {
        return true;
    }
    let Ok(len) = usize::try_from(bytes) else {
        return false;
    };
    let Ok(ring) = IoUring::new(1) else {
        return false;
    };
    let mut buf = vec![0u8; len];
    let deadline = Instant::now() + timeout;
    loop {
        match can_lock(&ring, &mut buf) {
            Ok(true) => return true,
            Ok(false) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
            Ok(false) | Err(_) => return false,
        }
    }
}

/// Whether registering `buf` with `ring` fits the locked-memory limit right now.
fn can_lock(ring: &IoUring, buf: &mut Vec<u8>) -> io::Result<bool> {
    let iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: `iov` describes `buf`, which is live and not otherwise accessed while it is
    // registered: it is unregistered below before this function returns (or leaked if that
    // fails), and no I/O is ever submitted on `ring`.
    match unsafe { ring.submitter().register_buffers(&[iov]) } {
        Ok(()) => {
            if let Err(e) = ring.submitter().unregister_buffers() {
                // Still registered: the kernel may keep a reference to the pages.
                mem::forget(mem::take(buf));
                return Err(e);
            }
            Ok(true)
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => Ok(false),
        Err(e) => Err(e),
    }
}
