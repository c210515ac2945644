//! One connection to PostgreSQL over a blocking socket (TCP, or the server's Unix socket
//! when the host is a directory): the startup and authentication (trust, cleartext, MD5,
//! SCRAM-SHA-256), simple queries with their rows as text, and the copy-both stream of
//! replication. Frontend messages and SCRAM come from `postgres-protocol`; the few
//! backend messages are read here.

use std::{
    io::{self, Read, Write},
    net::TcpStream,
    os::unix::net::UnixStream,
    time::Duration,
};

use bytes::{Buf, Bytes, BytesMut};
use postgres_protocol::{
    authentication::{
        md5_hash,
        sasl::{ChannelBinding, SCRAM_SHA_256, ScramSha256},
    },
    message::frontend,
};

use super::{PostgresError, dsn::Dsn};

/// The largest backend message accepted (PostgreSQL's own limit for one is 1 GiB).
const MESSAGE_BYTES_MAX: usize = 1 << 30;

trait Socket: Read + Write + Send {
    fn set_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
}

impl Socket for TcpStream {
    fn set_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)
    }
}

impl Socket for UnixStream {
    fn set_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)
    }
}

/// One backend message: its tag and body.
#[derive(Debug)]
pub(crate) struct Message {
    pub tag: u8,
    pub body: Bytes,
}

/// A query's result: column names and type oids, and each row's values as text.
#[derive(Debug, Default)]
pub(crate) struct Rows {
    pub columns: Vec<(String, u32)>,
    pub rows: Vec<Vec<Option<String>>>,
}

/// A connection after authentication.
pub(crate) struct Connection {
    socket: Box<dyn Socket>,
    input: BytesMut,
    output: BytesMut,
    /// The socket's read timeout as last set (set again only when it changes: one
    /// system call each time).
    timeout: Option<Duration>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}

fn io_error(op: &'static str) -> impl FnOnce(io::Error) -> PostgresError {
    move |source| PostgresError::Io { op, source }
}

pub(crate) fn protocol(problem: impl Into<String>) -> PostgresError {
    PostgresError::Protocol(problem.into())
}

/// Reads a NUL-terminated string off `body`.
pub(crate) fn cstr(body: &mut Bytes) -> Result<String, PostgresError> {
    let end = body.iter().position(|&b| b == 0).ok_or_else(|| protocol("a string without its NUL"))?;
    let text = String::from_utf8_lossy(&body[..end]).into_owned();
    body.advance(end + 1);
    Ok(text)
}

/// An ErrorResponse's fields as a typed error.
fn server_error(mut body: Bytes) -> PostgresError {
    let (mut severity, mut code, mut message) = (String::new(), String::new(), String::new());
    while body.has_remaining() {
        let field = body.get_u8();
        if field == 0 {
            break;
        }
        let Ok(value) = cstr(&mut body) else { break };
        match field {
            b'S' => severity = value,
            b'C' => code = value,
            b'M' => message = value,
            _ => {}
        }
    }
    PostgresError::Server { severity, code, message }
}

impl Connection {
    /// Connects and authenticates; with `replication`, as a logical replication
    /// connection (`replication=database`), which also takes simple queries.
    pub(crate) fn connect(dsn: &Dsn, replication: bool) -> Result<Connection, PostgresError> {
        let socket: Box<dyn Socket> = if dsn.host.starts_with('/') {
            let path = format!("{}/.s.PGSQL.{}", dsn.host, dsn.port);
            Box::new(UnixStream::connect(&path).map_err(io_error("connect"))?)
        } else {
            let stream = TcpStream::connect((dsn.host.as_str(), dsn.port)).map_err(io_error("connect"))?;
            stream.set_nodelay(true).map_err(io_error("connect"))?;
            Box::new(stream)
        };
        let mut c =
            Connection { socket, input: BytesMut::with_capacity(1 << 16), output: BytesMut::new(), timeout: None };
        let mut params = vec![
            ("user", dsn.user.as_str()),
            ("database", dsn.dbname.as_str()),
            ("application_name", "sluice"),
            ("client_encoding", "UTF8"),
        ];
        if replication {
            params.push(("replication", "database"));
        }
        frontend::startup_message(params, &mut c.output).map_err(io_error("startup"))?;
        c.flush()?;
        c.authenticate(dsn)?;
        // ParameterStatus, BackendKeyData, then ReadyForQuery.
        loop {
            let m = c.read()?;
            match m.tag {
                b'Z' => return Ok(c),
                b'E' => return Err(server_error(m.body)),
                _ => {}
            }
        }
    }

    fn authenticate(&mut self, dsn: &Dsn) -> Result<(), PostgresError> {
        let password = || {
            dsn.password
                .clone()
                .ok_or_else(|| PostgresError::Auth("the server asks for a password; the DSN has none".into()))
        };
        let mut scram: Option<ScramSha256> = None;
        loop {
            let mut m = self.read()?;
            match m.tag {
                b'E' => return Err(server_error(m.body)),
                b'R' if m.body.len() >= 4 => {}
                other => return Err(protocol(format!("expected authentication, got message {:?}", other as char))),
            }
            match m.body.get_i32() {
                0 => return Ok(()),
                3 => frontend::password_message(password()?.as_bytes(), &mut self.output).map_err(io_error("auth"))?,
                5 if m.body.len() >= 4 => {
                    let salt = [m.body[0], m.body[1], m.body[2], m.body[3]];
                    let hash = md5_hash(dsn.user.as_bytes(), password()?.as_bytes(), salt);
                    frontend::password_message(hash.as_bytes(), &mut self.output).map_err(io_error("auth"))?;
                }
                10 => {
                    let mut offered = Vec::new();
                    while let Ok(name) = cstr(&mut m.body) {
                        if name.is_empty() {
                            break;
                        }
                        offered.push(name);
                    }
                    if !offered.iter().any(|n| n == SCRAM_SHA_256) {
                        return Err(PostgresError::Auth(format!("no supported SASL mechanism in {offered:?}")));
                    }
                    let s = ScramSha256::new(password()?.as_bytes(), ChannelBinding::unsupported());
                    frontend::sasl_initial_response(SCRAM_SHA_256, s.message(), &mut self.output)
                        .map_err(io_error("auth"))?;
                    scram = Some(s);
                }
                11 => {
                    let s = scram.as_mut().ok_or_else(|| protocol("SASL continue before SASL"))?;
                    s.update(&m.body).map_err(|e| PostgresError::Auth(format!("SCRAM: {e}")))?;
                    frontend::sasl_response(s.message(), &mut self.output).map_err(io_error("auth"))?;
                }
                12 => {
                    let s = scram.as_mut().ok_or_else(|| protocol("SASL final before SASL"))?;
                    s.finish(&m.body).map_err(|e| PostgresError::Auth(format!("SCRAM: {e}")))?;
                    continue;
                }
                code => return Err(PostgresError::Auth(format!("unsupported authentication method {code}"))),
            }
            self.flush()?;
        }
    }

    fn flush(&mut self) -> Result<(), PostgresError> {
        self.socket.write_all(&self.output).map_err(io_error("write"))?;
        self.output.clear();
        Ok(())
    }

    /// Reads the next backend message, skipping notices and parameter changes; an
    /// `io::ErrorKind::WouldBlock`/`TimedOut` (a read timeout) is passed on as
    /// `Ok(None)` by [`Connection::read_timeout`].
    pub(crate) fn read(&mut self) -> Result<Message, PostgresError> {
        loop {
            if let Some(m) = self.message()? {
                return Ok(m);
            }
            if self.fill(None).map_err(io_error("read"))? == 0 {
                return Err(PostgresError::Closed);
            }
        }
    }

    /// [`Connection::read`], each read of the socket waiting at most `timeout`: `None`
    /// if one timed out (a message part read so far stays for the next call).
    pub(crate) fn read_timeout(&mut self, timeout: Duration) -> Result<Option<Message>, PostgresError> {
        loop {
            if let Some(m) = self.message()? {
                return Ok(Some(m));
            }
            match self.fill(Some(timeout)) {
                Ok(0) => return Err(PostgresError::Closed),
                Ok(_) => {}
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => return Ok(None),
                Err(e) => return Err(PostgresError::Io { op: "read", source: e }),
            }
        }
    }

    /// The next whole message in the input, skipping notices and parameter changes.
    fn message(&mut self) -> Result<Option<Message>, PostgresError> {
        while let Some(m) = self.parse()? {
            if !matches!(m.tag, b'N' | b'S') {
                return Ok(Some(m));
            }
        }
        Ok(None)
    }

    /// One read of the socket (at most 64 KiB) onto the input, waiting at most `timeout`
    /// (`None`: as long as it takes): the bytes read, 0 at the end of the stream.
    fn fill(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        if self.timeout != timeout {
            self.socket.set_timeout(timeout)?;
            self.timeout = timeout;
        }
        let mut chunk = [0_u8; 1 << 16];
        let n = self.socket.read(&mut chunk)?;
        self.input.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    fn parse(&mut self) -> Result<Option<Message>, PostgresError> {
        if self.input.len() < 5 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.input[1], self.input[2], self.input[3], self.input[4]]) as usize;
        if !(4..=MESSAGE_BYTES_MAX).contains(&len) {
            return Err(protocol(format!("a message of length {len}")));
        }
        if self.input.len() < len + 1 {
            return Ok(None);
        }
        let mut frame = self.input.split_to(len + 1).freeze();
        let tag = frame.get_u8();
        frame.advance(4);
        Ok(Some(Message { tag, body: frame }))
    }

    /// Runs `sql` (one statement, or several separated by `;`) and returns the last
    /// result's rows, as text.
    pub(crate) fn query(&mut self, sql: &str) -> Result<Rows, PostgresError> {
        frontend::query(sql, &mut self.output).map_err(io_error("query"))?;
        self.flush()?;
        let mut rows = Rows::default();
        let mut failed = None;
        loop {
            let mut m = self.read()?;
            match m.tag {
                b'T' => rows = Rows { columns: row_description(&mut m.body)?, rows: Vec::new() },
                b'D' => rows.rows.push(data_row(&mut m.body)?),
                b'E' => failed = Some(server_error(m.body)),
                b'Z' => return failed.map_or(Ok(rows), Err),
                b'C' | b'I' => {}
                other => return Err(protocol(format!("unexpected message {:?} in a query's answer", other as char))),
            }
        }
    }

    /// Sends a command that switches to the copy-both stream (START_REPLICATION) and
    /// waits for the switch.
    pub(crate) fn start_copy_both(&mut self, sql: &str) -> Result<(), PostgresError> {
        frontend::query(sql, &mut self.output).map_err(io_error("query"))?;
        self.flush()?;
        let m = self.read()?;
        match m.tag {
            b'W' => Ok(()),
            b'E' => {
                // The server goes on with ReadyForQuery: read it, so the connection can
                // be used again.
                while self.read()?.tag != b'Z' {}
                Err(server_error(m.body))
            }
            other => Err(protocol(format!("expected the copy-both stream, got {:?}", other as char))),
        }
    }

    /// Sends one CopyData message.
    pub(crate) fn copy_data(&mut self, data: &[u8]) -> Result<(), PostgresError> {
        frontend::CopyData::new(data).map_err(io_error("copy data"))?.write(&mut self.output);
        self.flush()
    }

    /// The server's error from an ErrorResponse body.
    pub(crate) fn error(body: Bytes) -> PostgresError {
        server_error(body)
    }
}

fn row_description(body: &mut Bytes) -> Result<Vec<(String, u32)>, PostgresError> {
    let short = || protocol("a short RowDescription");
    let count = if body.remaining() >= 2 { body.get_i16() } else { return Err(short()) };
    let mut columns = Vec::with_capacity(count.max(0) as usize);
    for _ in 0..count {
        let name = cstr(body)?;
        if body.remaining() < 18 {
            return Err(short());
        }
        body.advance(6); // table oid, column number
        let oid = body.get_u32();
        body.advance(8); // size, modifier, format
        columns.push((name, oid));
    }
    Ok(columns)
}

fn data_row(body: &mut Bytes) -> Result<Vec<Option<String>>, PostgresError> {
    let short = || protocol("a short DataRow");
    let count = if body.remaining() >= 2 { body.get_i16() } else { return Err(short()) };
    let mut values = Vec::with_capacity(count.max(0) as usize);
    for _ in 0..count {
        if body.remaining() < 4 {
            return Err(short());
        }
        let len = body.get_i32();
        if len < 0 {
            values.push(None);
            continue;
        }
        let len = len as usize;
        if body.remaining() < len {
            return Err(short());
        }
        values.push(Some(String::from_utf8_lossy(&body[..len]).into_owned()));
        body.advance(len);
    }
    Ok(values)
}
