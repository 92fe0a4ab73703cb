//! The sandbox Baton's end-to-end tests (and the benchmarks) run in.
//!
//! - [`RedisServer`]: a real `redis-server` child process on a free loopback
//!   port, with nothing persisted, stopped (killed) when dropped. It can be
//!   stopped and restarted on the same port to test reconnection.
//! - [`RedisCluster`]: a real three-node Redis Cluster built the same way.
//! - [`OrchestratorServer`]: the orchestrator, in this process, on a
//!   loopback port, with a handle on its application core.
//! - [`toolhost::TestToolHost`]: a small `ToolHost` server with streaming,
//!   options, input-required and cancellable tools.
//! - [`StoreServer`]: the context-store service, in this process, on
//!   `127.0.0.1:0`, shut down explicitly or on drop.
//!
//! Nothing here uses a fixed port or a shared instance, and nothing skips:
//! a missing `redis-server` is an error that says how to install it.
//!
//! The modules: `ports` (free loopback ports) and [`pki`] are leaves;
//! `redis_server` (Redis), `in_process` (Baton's services) and `probe`
//! (awaiting events, polling, health, reflection, metrics) build on them;
//! [`servers`] holds the third-party servers, [`a2a`] the a2a-sdk peers
//! (an A2A client and a remote agent) and [`mcp_clients`] the MCP SDKs'
//! clients, [`toolhost`], [`openai`] and [`otlp`]
//! stand-ins for what Baton calls; [`events`] the rules every event stream
//! keeps; [`fuzz`] the fuzz targets' bodies; [`chaos`] the chaos test
//! (real processes, a nemesis, a checker). This file declares them
//! and re-exports what the tests use (`baton_e2e::RedisServer`, …).

pub mod a2a;
pub mod chaos;
pub mod events;
pub mod fuzz;
mod in_process;
pub mod mcp_clients;
pub mod openai;
pub mod otlp;
pub mod pki;
mod ports;
mod probe;
mod redis_server;
pub mod servers;
pub mod toolhost;
pub mod webhooks;

pub use in_process::{OrchestratorServer, StoreServer};
pub use ports::{free_addr, free_port};
pub use probe::{eventually, health, reflected_services, scrape, wait_for};
pub use redis_server::{RedisCluster, RedisServer};

/// A RunAgent request of `agent` on `input`, everything else default.
pub fn agent_request(agent: &str, input: &str) -> baton_client::pb::RunAgentRequest {
    baton_client::pb::RunAgentRequest {
        agent: agent.into(),
        input: input.into(),
        ..Default::default()
    }
}

/// The config change that keeps runs in the Redis at `redis_url` (a
/// 500 ms Redis timeout): a durable replica, for
/// `OrchestratorServer::start`; tests add their own lease and the like.
pub fn durable_runs(
    redis_url: String,
) -> impl Fn(&mut baton_orchestrator::config::Config) + Clone + Send + 'static {
    move |c| {
        c.runs.store = baton_orchestrator::config::RunStoreMode::Redis;
        c.runs.redis.url = redis_url.clone();
        c.runs.redis.timeout = std::time::Duration::from_millis(500);
    }
}

/// The example agents file (`deploy/config/agents.yaml`).
pub const EXAMPLE_AGENTS: &str = include_str!("../../deploy/config/agents.yaml");

/// A log writer that keeps what is written (tests read the lines back).
#[derive(Clone, Default)]
pub struct Captured(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
