//! The physical reference: how fast this machine writes one file sequentially with O_DIRECT.
//!
//! [`baseline_write`] drives the `io-uring` crate directly (no glommio, no log format): a few
//! large page-aligned writes in flight, into a file preallocated with `fallocate` the way
//! the log preallocates its segments, with `fdatasync` at the cadence the log's `--fsync`
//! policy implies. The log's append throughput is reported against this number.
//!
//! Buffers are plain heap memory aligned to 4 KiB, not registered with io_uring: registered
//! buffers count against the 8 MiB memlock limit of a non-root user, which the glommio
//! executors of the same run need.

use std::{
    alloc::{self, Layout},
    fs::{self, File, OpenOptions},
    io,
    os::{fd::AsRawFd, unix::fs::OpenOptionsExt},
    path::Path,
    ptr::NonNull,
    time::{Duration, Instant},
};

use anyhow::{Context, ensure};
use io_uring::{IoUring, opcode, types};

use sluice_io::FsyncPolicy;

/// Name of the file [`baseline_write`] creates (or truncates) in its directory.
pub const BASELINE_FILE_NAME: &str = "baseline.dat";
/// Default size of each write: 1 MiB.
pub const DEFAULT_CHUNK_BYTES: usize = 1 << 20;
/// Writes kept in flight at once.
pub const QUEUE_DEPTH: usize = 4;
/// Alignment of buffers, offsets and lengths. O_DIRECT needs the logical block size (512
/// here); the page size is safe everywhere.
const ALIGN: usize = 4096;
/// `user_data` of fdatasync completions; writes carry their buffer index.
const SYNC_TAG: u64 = u64::MAX;

/// What [`baseline_write`] measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BaselineResult {
    /// Bytes written: the requested total rounded up to 4 KiB. Also the final file size.
    pub bytes: u64,
    /// From the first write submitted to the last fdatasync completed (excludes opening and
    /// preallocating the file).
    pub elapsed: Duration,
    /// `bytes / elapsed`.
    pub bytes_per_sec: f64,
    /// Number of fdatasyncs issued, the final one included.
    pub fsyncs: u64,
}

/// Writes `total_bytes` (rounded up to a multiple of 4096) sequentially to
/// `dir/`[`BASELINE_FILE_NAME`] with O_DIRECT, `chunk_bytes` per write and [`QUEUE_DEPTH`]
/// writes in flight, and measures the rate. `dir` is created if missing.
///
/// The file is first preallocated with `fallocate(FALLOC_FL_KEEP_SIZE)`, as the log does.
/// `fsync` sets the `fdatasync` cadence:
///
/// - [`FsyncPolicy::Always`]: as if each of `append_count` equal appends were synced: every
///   `total_bytes / append_count` bytes (rounded up to 4096) the in-flight writes are drained
///   and an fdatasync is waited for before writing on. A write never crosses such a boundary.
/// - [`FsyncPolicy::Interval`]: an fdatasync every `ms` of elapsed time, issued alongside the
///   writes (at most one in flight), plus one at the end.
/// - [`FsyncPolicy::Never`]: one fdatasync at the end.
///
/// `chunk_bytes` must be a non-zero multiple of 4096 no larger than `u32::MAX`, and
/// `append_count` non-zero when `fsync` is `Always`.
pub fn baseline_write(
    dir: &Path,
    total_bytes: u64,
    chunk_bytes: usize,
    fsync: FsyncPolicy,
    append_count: u64,
) -> anyhow::Result<BaselineResult> {
    ensure!(total_bytes > 0, "baseline: nothing to write");
    ensure!(
        chunk_bytes > 0 && chunk_bytes.is_multiple_of(ALIGN) && u32::try_from(chunk_bytes).is_ok(),
        "baseline: chunk size {chunk_bytes} is not a non-zero multiple of {ALIGN} below 4 GiB"
    );
    let total = total_bytes.next_multiple_of(ALIGN as u64);
    let sync_every = match fsync {
        FsyncPolicy::Always => {
            ensure!(append_count > 0, "baseline: fsync=always needs appends");
            Some(total_bytes.div_ceil(append_count).next_multiple_of(ALIGN as u64))
        }
        FsyncPolicy::Interval(_) | FsyncPolicy::Never => None,
    };
    let sync_period = match fsync {
        FsyncPolicy::Interval(every) => Some(every),
        FsyncPolicy::Always | FsyncPolicy::Never => None,
    };

    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(BASELINE_FILE_NAME);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .with_context(|| format!("opening {} with O_DIRECT", path.display()))?;
    preallocate(&file, total).with_context(|| format!("preallocating {}", path.display()))?;

    let mut writer = DirectWriter::new(file, QUEUE_DEPTH, chunk_bytes)?;
    let start = Instant::now();
    let mut offset = 0;
    // Always: the end of the current append; writes stop there until it is synced.
    let mut barrier = sync_every.map_or(total, |every| every.min(total));
    let mut next_sync_at = sync_period.map(|period| start + period);
    while offset < total {
        while offset < barrier && writer.has_free_buffer() {
            let len = (barrier - offset).min(chunk_bytes as u64);
            writer.queue_write(offset, len as usize)?;
            offset += len;
        }
        if let Some(every) = sync_every
            && offset == barrier
        {
            writer.sync_now()?;
            barrier = (barrier + every).min(total);
            continue;
        }
        if let (Some(period), Some(due)) = (sync_period, next_sync_at) {
            let now = Instant::now();
            if now >= due && !writer.sync_in_flight() {
                writer.queue_sync()?;
                next_sync_at = Some(now + period);
            }
        }
        writer.wait()?;
    }
    if sync_every.is_none() {
        writer.sync_now()?;
    }
    let elapsed = start.elapsed();
    let fsyncs = writer.syncs;
    drop(writer);

    let size = fs::metadata(&path)?.len();
    ensure!(size == total, "baseline: {} is {size} bytes after writing {total}", path.display());
    Ok(BaselineResult {
        bytes: total,
        elapsed,
        bytes_per_sec: total as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE),
        fsyncs,
    })
}

/// Reserves `len` bytes of blocks for `file` without changing its size.
fn preallocate(file: &File, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::other("file too large"))?;
    // SAFETY: plain syscall on a file descriptor `file` keeps open for the whole call; no
    // memory is passed.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, len) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// A zero-initialised heap buffer aligned to [`ALIGN`], as O_DIRECT requires.
#[derive(Debug)]
struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl AlignedBuf {
    /// `len` zero bytes; `len` must be non-zero.
    fn zeroed(len: usize) -> Self {
        assert!(len > 0, "empty aligned buffer");
        let layout = Layout::from_size_align(len, ALIGN).expect("len fits isize when aligned");
        // SAFETY: `layout` has a non-zero size (asserted above).
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        Self { ptr, layout }
    }

    fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points at `layout.size()` initialised (zeroed) bytes owned by `self`,
        // and `&mut self` makes this the only live reference to them.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed(self.layout)` and is freed only here, once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// An io_uring with a fixed set of write buffers cycling through it.
///
/// Invariant: a buffer whose index is not in `free` may be read by the kernel at any time, so
/// it is neither written nor freed until its completion is reaped. `Drop` waits for every
/// operation still in flight and leaks the buffers if it cannot.
struct DirectWriter {
    ring: IoUring,
    file: File,
    buffers: Vec<AlignedBuf>,
    /// Indices of buffers not in flight.
    free: Vec<usize>,
    /// `(offset, len)` of the write in flight from each buffer.
    pending: Vec<(u64, usize)>,
    writes_in_flight: usize,
    sync_in_flight: bool,
    syncs: u64,
    /// The first failed completion, reported by the next [`drain`](Self::drain) or
    /// [`wait`](Self::wait).
    error: Option<io::Error>,
}

impl DirectWriter {
    fn new(file: File, depth: usize, chunk_bytes: usize) -> io::Result<Self> {
        // Room for every write plus one fdatasync.
        let entries =
            u32::try_from((depth + 1).next_power_of_two()).map_err(|_| io::Error::other("queue depth too large"))?;
        let ring = IoUring::new(entries)?;
        let buffers = (0..depth)
            .map(|i| {
                let mut buf = AlignedBuf::zeroed(chunk_bytes);
                // Something other than zeros, different per buffer.
                for (j, byte) in buf.as_mut_slice().iter_mut().enumerate() {
                    *byte = (i as u8 ^ j as u8).wrapping_mul(31) | 1;
                }
                buf
            })
            .collect();
        Ok(Self {
            ring,
            file,
            buffers,
            free: (0..depth).rev().collect(),
            pending: vec![(0, 0); depth],
            writes_in_flight: 0,
            sync_in_flight: false,
            syncs: 0,
            error: None,
        })
    }

    fn has_free_buffer(&self) -> bool {
        !self.free.is_empty()
    }

    fn sync_in_flight(&self) -> bool {
        self.sync_in_flight
    }

    fn in_flight(&self) -> usize {
        self.writes_in_flight + usize::from(self.sync_in_flight)
    }

    /// Queues a write of the first `len` bytes of a free buffer at `offset`; it is submitted
    /// by the next [`wait`](Self::wait). Needs a free buffer and `len` a multiple of 4096 no
    /// larger than the buffers.
    fn queue_write(&mut self, offset: u64, len: usize) -> io::Result<()> {
        let idx = self.free.pop().expect("caller checks has_free_buffer");
        let buf = &self.buffers[idx];
        assert!(len <= buf.layout.size() && len.is_multiple_of(ALIGN), "bad write length {len}");
        let entry = opcode::Write::new(
            types::Fd(self.file.as_raw_fd()),
            buf.as_ptr(),
            u32::try_from(len).expect("buffers are smaller than 4 GiB"),
        )
        .offset(offset)
        .build()
        .user_data(idx as u64);
        // SAFETY: the entry reads `len` bytes from `self.buffers[idx]`, which stays allocated
        // and untouched until this write's completion is reaped: its index is off the free
        // list until then, and `Drop` waits for (or leaks) buffers still in flight. The file
        // descriptor lives as long as `self`.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_err() {
            self.free.push(idx);
            return Err(io::Error::other("io_uring submission queue full"));
        }
        self.pending[idx] = (offset, len);
        self.writes_in_flight += 1;
        Ok(())
    }

    /// Queues an fdatasync of the file; at most one may be in flight.
    fn queue_sync(&mut self) -> io::Result<()> {
        assert!(!self.sync_in_flight, "one fdatasync at a time");
        let entry = opcode::Fsync::new(types::Fd(self.file.as_raw_fd()))
            .flags(types::FsyncFlags::DATASYNC)
            .build()
            .user_data(SYNC_TAG);
        // SAFETY: an fsync entry references no memory, only the file descriptor, which lives
        // as long as `self` (and `Drop` waits for in-flight operations).
        let pushed = unsafe { self.ring.submission().push(&entry) };
        pushed.map_err(|_| io::Error::other("io_uring submission queue full"))?;
        self.sync_in_flight = true;
        self.syncs += 1;
        Ok(())
    }

    /// Submits everything queued, waits for at least one completion if anything is in
    /// flight, and reaps all completions available. Fails with the first failed completion
    /// seen since the last call, if any.
    fn wait(&mut self) -> io::Result<()> {
        self.submit_and_wait()?;
        self.reap();
        self.error.take().map_or(Ok(()), Err)
    }

    /// Waits until nothing is in flight.
    fn drain(&mut self) -> io::Result<()> {
        while self.in_flight() > 0 {
            self.wait()?;
        }
        Ok(())
    }

    /// `io_uring_enter`: submits queued entries and blocks for one completion if anything is
    /// in flight. Fails only if the ring itself does.
    fn submit_and_wait(&mut self) -> io::Result<()> {
        let want = usize::from(self.in_flight() > 0);
        loop {
            match self.ring.submit_and_wait(want) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Handles every available completion: frees write buffers and records the first
    /// failure (error or short write) in `self.error`.
    fn reap(&mut self) {
        for cqe in self.ring.completion() {
            let result = cqe.result();
            let failure = if cqe.user_data() == SYNC_TAG {
                self.sync_in_flight = false;
                (result < 0).then(|| os_error(result, "fdatasync"))
            } else {
                let idx = usize::try_from(cqe.user_data()).expect("buffer index");
                let (offset, len) = self.pending[idx];
                self.free.push(idx);
                self.writes_in_flight -= 1;
                if result < 0 {
                    Some(os_error(result, &format!("write of {len} bytes at {offset}")))
                } else if result as usize != len {
                    Some(io::Error::other(format!("short write at {offset}: {result} of {len} bytes")))
                } else {
                    None
                }
            };
            if self.error.is_none() {
                self.error = failure;
            }
        }
    }

    /// Drains the writes in flight, then issues an fdatasync and waits for it.
    fn sync_now(&mut self) -> io::Result<()> {
        self.drain()?;
        self.queue_sync()?;
        self.drain()
    }
}

impl Drop for DirectWriter {
    fn drop(&mut self) {
        while self.in_flight() > 0 {
            if self.submit_and_wait().is_err() {
                // The kernel may still read these buffers: leak them rather than free memory
                // under an in-flight write.
                std::mem::forget(std::mem::take(&mut self.buffers));
                return;
            }
            self.reap();
        }
    }
}

/// An io_uring completion's negative errno as an `io::Error` saying what failed.
fn os_error(result: i32, what: &str) -> io::Error {
    let e = io::Error::from_raw_os_error(-result);
    io::Error::new(e.kind(), format!("{what}: {e}"))
}
