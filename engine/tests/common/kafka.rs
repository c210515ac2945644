//! A Kafka listener over a fresh engine, for the Kafka tests: started on an ephemeral
//! loopback port, shut down (listener, then engine) when dropped.

use std::net::SocketAddr;

use futures_lite::future::block_on;
use sluice_engine::kafka::{KafkaConfig, KafkaServer};
use sluice_engine::{Engine, EngineConfig, EngineHandle};

use super::{TestDir, data_dir};

/// An engine of `shards` shards on a fresh directory, served by a listener configured as
/// `kafka` says (whose address is replaced by an ephemeral loopback port).
#[derive(Debug)]
pub struct Served {
    server: Option<KafkaServer>,
    engine: Option<Engine>,
    shards: usize,
    kafka: KafkaConfig,
    request_queue: Option<usize>,
    _dir: TestDir,
}

impl Served {
    /// Starts one, its directory named after the test file and case.
    pub fn launch(file: &str, name: &str, shards: usize, kafka: KafkaConfig) -> Served {
        Served::launch_queued(file, name, shards, kafka, None)
    }

    /// As [`Served::launch`], with shards that queue at most `request_queue` requests
    /// (the engine's default without one).
    pub fn launch_queued(
        file: &str,
        name: &str,
        shards: usize,
        mut kafka: KafkaConfig,
        request_queue: Option<usize>,
    ) -> Served {
        kafka.listen = "127.0.0.1:0".parse().expect("address");
        Served::launch_at(file, name, shards, kafka, request_queue)
    }

    /// As [`Served::launch_queued`], listening where `kafka` says (not moved to loopback).
    pub fn launch_at(
        file: &str,
        name: &str,
        shards: usize,
        kafka: KafkaConfig,
        request_queue: Option<usize>,
    ) -> Served {
        let dir = data_dir(file, name);
        let mut served = Served { server: None, engine: None, shards, kafka, request_queue, _dir: dir };
        served.open();
        served
    }

    fn open(&mut self) {
        let mut config = EngineConfig::new(&*self._dir);
        config.shards = Some(self.shards);
        if let Some(n) = self.request_queue {
            config.request_queue = n;
        }
        let engine = block_on(Engine::open(config)).expect("engine opens");
        self.server = Some(KafkaServer::start(engine.handle(), self.kafka.clone()).expect("listener starts"));
        self.engine = Some(engine);
    }

    /// Stops the listener and the engine, then starts both again on the same directory
    /// (the listener on a new port: see [`Served::addr`]).
    pub fn restart(&mut self) {
        self.stop();
        self.open();
    }

    /// As [`Served::restart`], with the listener on the port it had.
    pub fn restart_same_port(&mut self) {
        let addr = self.addr();
        self.stop();
        self.kafka.listen = addr;
        self.open();
    }

    fn stop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
        if let Some(e) = self.engine.take() {
            let _ = block_on(e.shutdown());
        }
    }

    /// Where the listener listens.
    pub fn addr(&self) -> SocketAddr {
        self.server.as_ref().expect("running").local_addr()
    }

    /// The engine's data directory.
    pub fn dir(&self) -> &std::path::Path {
        &self._dir
    }

    /// The engine behind it.
    pub fn handle(&self) -> EngineHandle {
        self.engine.as_ref().expect("running").handle()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A Kafka client over raw TCP: requests encoded and responses decoded with the
/// `kafka-protocol` crate, one at a time, with the client id given.
#[derive(Debug)]
pub struct RawClient {
    stream: std::net::TcpStream,
    correlation: i32,
    client_id: String,
}

impl RawClient {
    /// Connects to `addr` as client `client_id`.
    pub fn connect(addr: SocketAddr, client_id: &str) -> RawClient {
        let stream = std::net::TcpStream::connect(addr).expect("connects");
        stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).expect("timeout");
        RawClient { stream, correlation: 0, client_id: client_id.to_string() }
    }

    /// The connection itself, to see what the server does next.
    pub fn into_stream(self) -> std::net::TcpStream {
        self.stream
    }

    /// Sends `req` as `api` at `version` and reads its response.
    pub fn call<Req, Resp>(&mut self, api: kafka_protocol::messages::ApiKey, version: i16, req: &Req) -> Resp
    where
        Req: kafka_protocol::protocol::Encodable,
        Resp: kafka_protocol::protocol::Decodable,
    {
        self.call_sized(api, version, req).1
    }

    /// [`call`](Self::call), with the size of the response frame (after its length
    /// prefix).
    pub fn call_sized<Req, Resp>(
        &mut self,
        api: kafka_protocol::messages::ApiKey,
        version: i16,
        req: &Req,
    ) -> (usize, Resp)
    where
        Req: kafka_protocol::protocol::Encodable,
        Resp: kafka_protocol::protocol::Decodable,
    {
        use kafka_protocol::messages::{RequestHeader, ResponseHeader};
        use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
        use std::io::{Read, Write};
        self.correlation += 1;
        let mut buf = bytes::BytesMut::new();
        let mut header = RequestHeader::default();
        header.request_api_key = api as i16;
        header.request_api_version = version;
        header.correlation_id = self.correlation;
        header.client_id = Some(StrBytes::from_string(self.client_id.clone()));
        header.encode(&mut buf, api.request_header_version(version)).expect("header encodes");
        req.encode(&mut buf, version).expect("request encodes");
        let mut frame = (buf.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&buf);
        self.stream.write_all(&frame).expect("send");
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).expect("a response");
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut body).expect("a response body");
        let len = body.len();
        let mut bytes = bytes::Bytes::from(body);
        let h = ResponseHeader::decode(&mut bytes, api.response_header_version(version)).expect("header decodes");
        assert_eq!(h.correlation_id, self.correlation);
        (len, Resp::decode(&mut bytes, version).expect("response decodes"))
    }
}

/// A Kafka client (kcat, a Python client) to run as a child process, with the
/// environment it loads its own librdkafka in (not every test binary runs one).
#[allow(unused_imports)]
pub use sluice_engine::kafka::child::client_command as client;
