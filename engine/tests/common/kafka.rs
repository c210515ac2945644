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
        let dir = data_dir(file, name);
        kafka.listen = "127.0.0.1:0".parse().expect("address");
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
