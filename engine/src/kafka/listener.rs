//! The listener: executors that accept connections, and each connection's read and write
//! loops.
//!
//! Every executor binds its own socket to the same address with `SO_REUSEPORT`, and the
//! kernel spreads new connections over them; executor `i` is pinned to the core of shard
//! `i` (thread-per-core: the shard and the connections it most likely serves share a
//! core, though a request for a partition another shard owns still crosses to it through
//! the engine handle's channel). A connection stays on the executor that accepted it.
//!
//! A connection is two tasks. The reader reads a frame (its length first; more than
//! `max_request_bytes` closes the connection; the body must arrive within
//! `frame_timeout`, and its buffer grows only with bytes received), starts handling it,
//! and queues the pending response; the queue holds `max_in_flight_per_connection`, so a
//! client that pipelines more waits. Each request is polled once before the next is read,
//! and a produce request's appends are in their shards' queues before the next is read
//! (at once, unless a shard's queue is full: then the connection waits, as Kafka mutes a
//! busy connection), so a connection's produce requests reach each partition in the order
//! they were sent (Kafka's per-connection order). The writer sends responses in request
//! order and gives up on a client that does not read within `write_timeout`. Either loop
//! ending ends the other.

use std::cell::Cell;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use futures_lite::{Future, FutureExt};
use glommio::net::TcpListener;

use crate::engine::EngineHandle;

use super::context::{Context, Shared};
use super::dispatch::{self, Handled, Reply};
use super::session::Session;
use super::{KafkaConfig, KafkaError};

/// A running listener. Dropping it stops it (as [`KafkaServer::shutdown`] does).
#[derive(Debug)]
pub struct KafkaServer {
    addrs: Vec<SocketAddr>,
    stop: Option<async_channel::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl KafkaServer {
    /// Binds the address and starts `config.executors` listener executors serving
    /// `engine`. Returns once every executor is accepting.
    pub fn start(engine: EngineHandle, config: KafkaConfig) -> Result<KafkaServer, KafkaError> {
        super::listeners::validate(&config)?;
        // Bind once without SO_REUSEPORT first: this fails if anything already listens
        // there (a reuse-port socket would silently share the port with it) and resolves
        // port 0 to the port every executor then binds.
        let mut addrs = Vec::new();
        for (want, _) in super::listeners::listeners(&config) {
            let probe = StdListener::bind(want).map_err(|source| KafkaError::Bind { addr: want, source })?;
            addrs.push(probe.local_addr().map_err(|source| KafkaError::Bind { addr: want, source })?);
        }
        let advertised = super::listeners::advertised(&config, &addrs);
        let protocols: Vec<_> = super::listeners::listeners(&config).into_iter().map(|(_, p)| p).collect();
        let (executors, on_shards) = (config.executors, config.on_shards);
        // Finish what the last run's transactions left undone before any client is served.
        let (txns, note) =
            futures_lite::future::block_on(super::transactions::recover(&engine)).map_err(KafkaError::Transactions)?;
        if let Some(note) = note {
            eprintln!("{note}");
        }
        let shared = Arc::new(Shared {
            engine: engine.clone(),
            users: config.users.clone(),
            config,
            listeners: protocols
                .iter()
                .zip(&addrs)
                .zip(&advertised)
                .map(|((p, a), adv)| (*p, *a, adv.clone()))
                .collect(),
            txns,
            stable: super::stable::StableIndex::default(),
            errors: super::context::ErrorLog::default(),
            metrics: super::observe::ListenerMetrics::default(),
        });
        let contexts: Vec<Arc<Context>> = (0..addrs.len())
            .map(|i| {
                let (protocol, addr, advertised) = shared.listeners[i].clone();
                Arc::new(Context { shared: shared.clone(), advertised, protocol, addr })
            })
            .collect();
        // A scrape of the engine gathers the listener's counts while the listener runs.
        engine.register_metrics(&(shared.clone() as Arc<dyn crate::metrics::MetricSource>));
        let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
        let cpus: Vec<usize> = core_affinity::get_core_ids().unwrap_or_default().into_iter().map(|c| c.id).collect();
        let mut server = KafkaServer { addrs, stop: Some(stop_tx), threads: Vec::with_capacity(executors) };
        let first = server.addrs[0];
        if on_shards {
            for i in 0..engine.shard_count() {
                let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<std::io::Result<()>>(1);
                let (contexts, stop_rx, engine) = (contexts.clone(), stop_rx.clone(), engine.clone());
                // The loop runs on the shard; this thread only waits for it to end.
                server.threads.push(std::thread::spawn(move || {
                    let served = engine.run_on(i, move || accept_loop(i, contexts, stop_rx, ready_tx));
                    let _ = futures_lite::future::block_on(served);
                }));
                let ready = ready_rx.recv().unwrap_or_else(|_| Err(std::io::Error::other("the shard exited")));
                ready.map_err(|source| KafkaError::Bind { addr: first, source })?;
            }
            return Ok(server);
        }
        for i in 0..executors {
            let placement = match cpus.get(i % cpus.len().max(1)) {
                Some(&cpu) => glommio::Placement::Fixed(cpu),
                None => glommio::Placement::Unbound,
            };
            let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<std::io::Result<()>>(1);
            let (contexts, stop_rx) = (contexts.clone(), stop_rx.clone());
            let builder = glommio::LocalExecutorBuilder::new(placement)
                .name(&format!("sluice-kafka-{i}"))
                // Sockets need no registered buffers to speak of: keep locked memory for
                // the shards' direct I/O.
                .io_memory(64 << 10)
                .ring_depth(128);
            let handle = builder
                .spawn(move || accept_loop(i, contexts, stop_rx, ready_tx))
                .map_err(|e| KafkaError::Executor { executor: i, reason: e.to_string() })?;
            server.threads.push(std::thread::spawn(move || {
                let _ = handle.join();
            }));
            // On an error the server is dropped, which stops the executors started so far.
            let ready = ready_rx.recv().unwrap_or_else(|_| Err(std::io::Error::other("the executor exited")));
            ready.map_err(|source| KafkaError::Bind { addr: first, source })?;
        }
        Ok(server)
    }

    /// The bound address of the first listener (`KafkaConfig::listen`, with the port
    /// chosen when the configuration said 0).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Every listener's bound address, in configuration order (`listen` first).
    #[must_use]
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Stops accepting, closes every connection and waits for the executors to exit.
    /// Requests being handled are abandoned; the engine itself keeps running.
    pub fn shutdown(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop.close();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for KafkaServer {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// A listening socket on `addr` for this executor: `SO_REUSEPORT`, so every executor
/// binds its own socket to the one address and the kernel spreads connections over them,
/// and `SO_REUSEADDR`, so a restart binds at once even while connections of the last run
/// linger in TIME_WAIT (after a kill with clients connected they would block the port for
/// a minute).
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    use std::os::fd::{FromRawFd, IntoRawFd};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    let fd = socket.into_raw_fd();
    // SAFETY: `fd` is a TCP socket this function created, bound and set listening, and
    // `into_raw_fd` gave up its ownership, so the listener built here is its only owner
    // (glommio's `from_raw_fd` wants exactly that: a bound, listening socket). Exercised
    // by every listener test, and by tests/kafka_serve.rs's restart after a kill with a
    // client connected.
    #[allow(unsafe_code)]
    let listener = unsafe { TcpListener::from_raw_fd(fd) };
    Ok(listener)
}

/// One executor's share of every listener: binds each (its own `SO_REUSEPORT` socket),
/// says it is ready, and accepts on all of them until the listener stops.
async fn accept_loop(
    executor: usize,
    contexts: Vec<Arc<Context>>,
    stop: async_channel::Receiver<()>,
    ready: std::sync::mpsc::SyncSender<std::io::Result<()>>,
) {
    let Some(ctx) = contexts.first().cloned() else { return };
    ctx.metrics.executor_started(executor);
    let mut bound = Vec::with_capacity(contexts.len());
    for c in &contexts {
        match bind(c.addr) {
            Ok(l) => bound.push(l),
            Err(e) => {
                let _ = ready.send(Err(std::io::Error::other(format!("{}: {e}", c.addr))));
                return;
            }
        }
    }
    let _ = ready.send(Ok(()));
    if executor == 0 {
        // Transactions open past their timeout are aborted from here.
        let (ctx, stop) = (ctx.clone(), stop.clone());
        glommio::spawn_local(async move {
            loop {
                let stopped = async {
                    glommio::timer::sleep(super::transactions::TIMEOUT_CHECK).await;
                    false
                }
                .or(async {
                    let _ = stop.recv().await;
                    true
                });
                if stopped.await {
                    return;
                }
                super::transactions::requests::expire(&ctx).await;
            }
        })
        .detach();
    }
    // The connection limit is the executor's, over all its listeners.
    let open = Rc::new(Cell::new(0usize));
    let accepting: Vec<_> = bound
        .into_iter()
        .zip(contexts)
        .map(|(listener, ctx)| glommio::spawn_local(accept(listener, ctx, stop.clone(), open.clone())))
        .collect();
    for task in accepting {
        task.await;
    }
}

/// Accepts connections on one listener's socket and serves each in a task of its own.
async fn accept(listener: TcpListener, ctx: Arc<Context>, stop: async_channel::Receiver<()>, open: Rc<Cell<usize>>) {
    loop {
        let accepted = async { Some(listener.accept().await) }.or(async {
            let _ = stop.recv().await;
            None
        });
        let stream = match accepted.await {
            None => return, // dropping the listener; connections see `stop` closed too
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                ctx.errors.report(format_args!("accept failed: {e}"));
                glommio::timer::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if open.get() >= ctx.config.max_connections_per_executor {
            drop(stream); // over the limit: closed at once
            super::observe::refused(super::observe::Refusal::ConnectionLimit);
            continue;
        }
        let _ = stream.set_nodelay(true);
        open.set(open.get() + 1);
        super::observe::connection_opened();
        let (ctx, stop, open) = (ctx.clone(), stop.clone(), open.clone());
        glommio::spawn_local(async move {
            // The peer as DescribeGroups reports it (Kafka's `client_host`).
            let host: Arc<str> = stream.peer_addr().map(|a| super::context::kafka_host(&a)).unwrap_or_default().into();
            match &ctx.config.tls {
                Some(tls) if ctx.protocol.tls() => {
                    if let Some((stream, principal)) = super::listeners::tls_handshake(&ctx, tls, stream, &host).await {
                        let session = Session::new(host, ctx.protocol, principal);
                        serve_connection(ctx, stream, session, stop).await;
                    }
                }
                _ => {
                    let session = Session::new(host, ctx.protocol, None);
                    serve_connection(ctx, stream, session, stop).await;
                }
            }
            open.set(open.get() - 1);
            super::observe::connection_closed();
        })
        .detach();
    }
}

/// A response on its way: ready, or still being worked out.
enum Pending {
    Ready(Reply),
    Working(glommio::Task<Reply>),
}

/// `fut`'s output, or `None` once the listener stops or the connection's writer is gone.
async fn until_closed<T>(
    fut: impl Future<Output = T>,
    stop: &async_channel::Receiver<()>,
    writer_gone: &async_channel::Receiver<()>,
) -> Option<T> {
    async { Some(fut.await) }
        .or(async {
            let _ = stop.recv().await;
            None
        })
        .or(async {
            let _ = writer_gone.recv().await;
            None
        })
        .await
}

/// Polls a request's `work` once, so that it reaches its shard before the next request is
/// read, and runs the rest as a task. With `queued`, the next request is read only once
/// that closes (the request's appends are queued): at once, unless a shard's queue is
/// full. `None` if the listener stops or the writer goes first.
async fn start(
    mut work: Pin<Box<dyn Future<Output = Reply>>>,
    queued: Option<async_channel::Receiver<()>>,
    stop: &async_channel::Receiver<()>,
    writer_gone: &async_channel::Receiver<()>,
) -> Option<Pending> {
    if let Some(bytes) = futures_lite::future::poll_once(&mut work).await {
        return Some(Pending::Ready(bytes));
    }
    let task = glommio::spawn_local(work);
    if let Some(queued) = queued {
        // `recv` fails once the request's future drops its sender: that is the signal.
        let _closed = until_closed(queued.recv(), stop, writer_gone).await?;
    }
    Some(Pending::Working(task))
}

/// A connection's byte stream: a TCP socket, or TLS over one.
pub(super) trait Stream: AsyncRead + AsyncWrite + Unpin + 'static {}
impl<S: AsyncRead + AsyncWrite + Unpin + 'static> Stream for S {}

async fn serve_connection<S: Stream>(
    ctx: Arc<Context>,
    stream: S,
    session: Session,
    stop: async_channel::Receiver<()>,
) {
    let session = Rc::new(session);
    let (mut reader, writer) = futures_lite::io::split(stream);
    let (queue_tx, queue_rx) =
        glommio::channels::local_channel::new_bounded::<Pending>(ctx.config.max_in_flight_per_connection);
    // Dropped when the writer stops, which the reader sees as the channel closing.
    let (writer_alive, writer_gone) = async_channel::bounded::<()>(1);
    let writer_ctx = ctx.clone();
    let writer_task = glommio::spawn_local(async move {
        write_loop(writer, queue_rx, &writer_ctx).await;
        drop(writer_alive);
    });
    let mut pool = FramePool::default();
    loop {
        let frame = until_closed(read_frame(&mut reader, &ctx.config, &mut pool), &stop, &writer_gone).await;
        let frame = match frame {
            Some(Ok(Some(frame))) => {
                super::observe::bytes_in(frame.len() + 4);
                let frame = frame.freeze();
                pool.keep(&frame);
                frame
            }
            Some(Err(FrameError::Io(_))) | Some(Ok(None)) | None => break, // gone, or shutting down
            Some(Err(e)) => {
                super::observe::refused(e.refusal());
                ctx.errors.report(format_args!("closing a connection: {e}"));
                break;
            }
        };
        let mut last = false;
        let pending = match dispatch::handle(&ctx, frame, &session) {
            Handled::Close(reason) => {
                ctx.errors.report(format_args!("closing a connection: {reason}"));
                break;
            }
            Handled::Ready(bytes) => Some(Pending::Ready(bytes)),
            Handled::Last(bytes) => {
                last = true;
                Some(Pending::Ready(bytes))
            }
            Handled::Working(work) => start(work, None, &stop, &writer_gone).await,
            Handled::Ordered { work, queued } => start(work, Some(queued), &stop, &writer_gone).await,
        };
        let Some(pending) = pending else { break };
        // A full queue waits for the writer, which may itself give up on the client.
        if !matches!(until_closed(queue_tx.send(pending), &stop, &writer_gone).await, Some(Ok(()))) || last {
            break;
        }
    }
    drop(queue_tx);
    // The writer sends what is queued, then ends; on shutdown it is cut short.
    let _ = writer_task
        .or(async {
            let _ = stop.recv().await;
        })
        .await;
}

async fn write_loop(
    mut writer: WriteHalf<impl Stream>,
    queue: glommio::channels::local_channel::LocalReceiver<Pending>,
    ctx: &Context,
) {
    while let Some(pending) = queue.recv().await {
        let reply = match pending {
            Pending::Ready(r) => r,
            Pending::Working(task) => task.await,
        };
        let bytes = match reply {
            Ok(Some(bytes)) => bytes,
            Ok(None) => continue, // acks=0: no response
            Err(reason) => {
                ctx.errors.report(format_args!("closing a connection: {reason}"));
                return;
            }
        };
        let write = async { writer.write_all(&bytes).await.and(writer.flush().await) };
        let written = with_timeout(ctx.config.write_timeout, write).await;
        if written.is_ok() {
            super::observe::bytes_out(bytes.len());
        }
        if let Err(e) = written {
            if matches!(e, FrameError::TimedOut) {
                ctx.errors.report(format_args!(
                    "closing a connection: the client read no response for {:?} (write_timeout)",
                    ctx.config.write_timeout
                ));
            }
            return;
        }
    }
}

/// Why a frame was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FrameError {
    #[error("{0}")]
    Io(std::io::Error),
    #[error("a request of {0} bytes is over the limit")]
    TooLarge(usize),
    #[error("a request of {0} bytes cannot hold a header")]
    TooSmall(i32),
    #[error("the client was too slow or idle for too long")]
    TimedOut,
    #[error("the client closed the connection in the middle of a request")]
    Truncated,
}

/// Large frames a connection handed on, kept so that a later request can be read into
/// one whose every holder (the produce path's record ranges, a shard's append) is done
/// with it: no allocation, no zeroing and no page faults for a client that keeps sending
/// large produce requests. Frames are kept only while the pool has room, and a kept frame
/// still in use is simply not chosen.
#[derive(Default)]
struct FramePool {
    kept: Vec<Bytes>,
}

/// Frames smaller than this are not kept: allocating them is cheap.
const POOL_MIN_BYTES: usize = 64 << 10;
/// Frames kept per connection (the memory an idle producer holds on to).
const POOL_FRAMES: usize = 2;

impl FramePool {
    /// For a frame of `len` bytes (a large one), a kept frame nothing else holds any
    /// more, cut to `len` if it was longer (its bytes are the old frame's, to be
    /// overwritten).
    fn take(&mut self, len: usize) -> Option<BytesMut> {
        if len < POOL_MIN_BYTES {
            return None;
        }
        let i = self.kept.iter().position(Bytes::is_unique)?;
        let mut buf = self.kept.swap_remove(i).try_into_mut().ok()?;
        buf.truncate(len);
        Some(buf)
    }

    fn keep(&mut self, frame: &Bytes) {
        if frame.len() >= POOL_MIN_BYTES && self.kept.len() < POOL_FRAMES {
            self.kept.push(frame.clone());
        }
    }
}

/// Reads one size-prefixed frame; `Ok(None)` at a clean end of stream.
async fn read_frame(
    reader: &mut ReadHalf<impl Stream>,
    config: &KafkaConfig,
    pool: &mut FramePool,
) -> Result<Option<BytesMut>, FrameError> {
    let mut size = [0u8; 4];
    let first = with_timeout(config.idle_timeout, reader.read(&mut size)).await?;
    if first == 0 {
        return Ok(None);
    }
    let deadline = config.frame_timeout;
    let body = async {
        let mut got = first;
        while got < 4 {
            match reader.read(&mut size[got..]).await.map_err(FrameError::Io)? {
                0 => return Err(FrameError::Truncated),
                n => got += n,
            }
        }
        let len = i32::from_be_bytes(size);
        if len < 8 {
            return Err(FrameError::TooSmall(len));
        }
        let len = len as usize;
        if len > config.max_request_bytes {
            return Err(FrameError::TooLarge(len));
        }
        // Grow with what arrives (at most doubling), never to the declared size up front.
        // The buffer grows only once what it holds is filled: each byte is zeroed once
        // and moved at most once per doubling. (Growing for every read and cutting back
        // to what arrived zeroed up to half the frame again on every read: a 1 MB
        // produce request arriving in 64 KB reads was zeroed about eight times.)
        // A large frame starts in a recycled one, already as long as that one was.
        const CHUNK: usize = 64 << 10;
        let mut buf = pool.take(len).unwrap_or_else(|| BytesMut::with_capacity(len.min(CHUNK)));
        let mut filled = 0;
        while filled < len {
            if filled == buf.len() {
                let grow = (len - filled).min(filled.max(CHUNK));
                buf.resize(filled + grow, 0);
            }
            match reader.read(&mut buf[filled..]).await.map_err(FrameError::Io)? {
                0 => return Err(FrameError::Truncated),
                n => filled += n,
            }
        }
        debug_assert_eq!(buf.len(), len);
        Ok(buf)
    };
    with_timeout(deadline, body).await.map(Some)
}

/// Runs `fut` for at most `limit`.
async fn with_timeout<T, E>(limit: Duration, fut: impl Future<Output = Result<T, E>>) -> Result<T, FrameError>
where
    FrameError: From<E>,
{
    let timed = async {
        glommio::timer::sleep(limit).await;
        Err(FrameError::TimedOut)
    };
    let fut: Pin<Box<dyn Future<Output = Result<T, FrameError>> + '_>> =
        Box::pin(async { fut.await.map_err(FrameError::from) });
    fut.or(timed).await
}

impl FrameError {
    /// The reason a refused frame is counted under.
    fn refusal(&self) -> super::observe::Refusal {
        use super::observe::Refusal;
        match self {
            FrameError::TooLarge(_) | FrameError::TooSmall(_) => Refusal::FrameSize,
            FrameError::TimedOut => Refusal::Timeout,
            FrameError::Io(_) | FrameError::Truncated => Refusal::Malformed,
        }
    }
}

impl From<std::io::Error> for FrameError {
    fn from(e: std::io::Error) -> Self {
        FrameError::Io(e)
    }
}
