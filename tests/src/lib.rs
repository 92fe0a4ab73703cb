//! The sandbox Baton's end-to-end tests (and the benchmarks) run in.
//!
//! - [`RedisServer`]: a real `redis-server` child process on a free loopback
//!   port, with nothing persisted, stopped (killed) when dropped. It can be
//!   stopped and restarted on the same port to test reconnection.
//! - [`RedisCluster`]: a real three-node Redis Cluster built the same way.
//! - [`OrchestratorServer`]: the orchestrator, in this process, on a
//!   loopback port, with a handle on its run registry.
//! - [`toolhost::TestToolHost`]: a small `ToolHost` server with streaming,
//!   options, input-required and cancellable tools.
//! - [`StoreServer`]: the context-store service, in this process, on
//!   `127.0.0.1:0`, shut down explicitly or on drop.
//!
//! Nothing here uses a fixed port or a shared instance, and nothing skips:
//! a missing `redis-server` is an error that says how to install it.

use std::{
    net::{SocketAddr, TcpListener as StdListener},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

pub mod events;
pub mod fuzz;
pub mod openai;
pub mod otlp;
pub mod pki;
pub mod servers;
pub mod toolhost;

/// A loopback address with a port free at the time of the call (for
/// listeners a service binds itself, such as its metrics endpoint).
pub fn free_addr() -> std::io::Result<std::net::SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

use anyhow::{Context, bail};
use baton_context_store::config::{Backend, Config as StoreConfig};
use tokio_util::sync::CancellationToken;

/// How long a Redis process may take to answer after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(15);

fn redis_binary(name: &str) -> anyhow::Result<PathBuf> {
    for dir in std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/bin", "/usr/local/bin"])
    {
        let p = PathBuf::from(dir).join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!(
        "{name} not found on PATH: the tests need a real Redis (7.0+); \
         run ./tests/run, which installs it, or apt-get install redis-server"
    )
}

/// A free loopback port (the OS picks one; we release it for the child).
pub fn free_port() -> anyhow::Result<u16> {
    let l = StdListener::bind("127.0.0.1:0").context("cannot bind a loopback port")?;
    Ok(l.local_addr()?.port())
}

fn ping(port: u16) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
        return false;
    };
    let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
        return false;
    };
    redis::cmd("PING").query::<String>(&mut conn).is_ok()
}

/// A `redis-server` child process on a free port.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server and waits until it answers PING.
    pub fn start() -> anyhow::Result<Self> {
        Self::start_with(&[])
    }

    /// Starts a server that also listens with TLS on a port of its own
    /// (`--tls-port`, certificates of `pki`, client certificates required:
    /// `tls-auth-clients yes`); its plain port stays for the test's own
    /// commands. The TLS port.
    pub fn start_tls(pki: &pki::TestPki) -> anyhow::Result<(Self, u16)> {
        let tls_port = free_port()?;
        let port = tls_port.to_string();
        let path = |p: &std::path::Path| p.display().to_string();
        let (cert, key, ca) = (path(&pki.server_cert), path(&pki.server_key), path(&pki.ca));
        let server = Self::start_with(&[
            "--tls-port",
            &port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "yes",
        ])?;
        Ok((server, tls_port))
    }

    /// Starts a server with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> anyhow::Result<Self> {
        // The port is free when we ask, but another process may take it before
        // Redis binds it; try a few.
        let mut last = None;
        for _ in 0..5 {
            let mut server = Self {
                port: free_port()?,
                child: None,
                dir: tempfile::tempdir().context("cannot make a temp dir for redis")?,
                extra: extra.iter().map(|s| s.to_string()).collect(),
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("cannot start redis-server")))
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let mut child = Command::new(redis_binary("redis-server")?)
            .arg("--port")
            .arg(self.port.to_string())
            .args([
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot spawn redis-server")?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if ping(self.port) {
                self.child = Some(child);
                return Ok(());
            }
            if let Some(status) = child.try_wait()? {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                bail!(
                    "redis-server on port {} exited with {status}: {err}",
                    self.port
                );
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "redis-server on port {} did not answer within {START_TIMEOUT:?}",
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:{port}`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Freezes the server (SIGSTOP): connections stay open and nothing
    /// answers, as a hung host looks.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen server go on (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        if let Some(child) = &self.child {
            let status = Command::new("kill")
                .arg(sig)
                .arg(child.id().to_string())
                .status()
                .expect("kill runs");
            assert!(status.success(), "kill {sig} failed");
        }
    }

    /// Runs one command with `redis-cli` against the server; its output.
    pub fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(redis_binary("redis-cli")?)
            .arg("-p")
            .arg(self.port.to_string())
            .args(args)
            .output()
            .context("cannot run redis-cli")?;
        anyhow::ensure!(out.status.success(), "redis-cli {args:?} failed");
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Kills the server (as a crash or a network cut would look).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        self.spawn()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A three-node Redis Cluster (no replicas) on free ports.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers, creates the cluster and waits
    /// until every node reports `cluster_state:ok`.
    pub fn start() -> anyhow::Result<Self> {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push(RedisServer::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                "2000",
            ])?);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new(redis_binary("redis-cli")?)
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .context("cannot run redis-cli --cluster create")?;
        if !out.status.success() {
            bail!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        let deadline = Instant::now() + START_TIMEOUT;
        for n in &nodes {
            loop {
                let client = redis::Client::open(n.url())?;
                let mut conn = client.get_connection_with_timeout(Duration::from_millis(500))?;
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn)?;
                if info.contains("cluster_state:ok") {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("cluster did not reach cluster_state:ok: {info}");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(Self { nodes })
    }

    /// The seed URLs of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

/// A service task of this process on a loopback port: shut down explicitly
/// (waiting for it to drain) or, at the latest, when dropped.
struct Running {
    shutdown: CancellationToken,
    handle: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Running {
    fn new(
        shutdown: CancellationToken,
        handle: tokio::task::JoinHandle<anyhow::Result<()>>,
    ) -> Self {
        Self {
            shutdown,
            handle: Some(handle),
        }
    }

    async fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        match self.handle.take() {
            Some(h) => h.await.context("service task panicked")?,
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A context-store service running in this process on a loopback port.
pub struct StoreServer {
    /// Where it listens.
    pub addr: SocketAddr,
    running: Running,
}

impl StoreServer {
    /// A config for tests: loopback, short health interval and grace, no
    /// authentication (`auth.mode = "none"`; the tests of authentication
    /// set it back).
    pub fn config(backend: Backend, redis_url: Option<String>) -> StoreConfig {
        let mut c = StoreConfig {
            backend,
            ..StoreConfig::default()
        };
        c.auth.mode = baton_context_store::auth::AuthMode::None;
        if let Some(url) = redis_url {
            c.redis.url = url;
        }
        c.redis.timeout = Duration::from_millis(500);
        c.health_interval = Duration::from_millis(100);
        // No metrics port unless a test asks for one (tests run in parallel).
        c.telemetry.metrics_listen = String::new();
        c.shutdown_grace = Duration::from_secs(5);
        c
    }

    /// Starts the service with `config` on `127.0.0.1:0`. The listener is
    /// bound before this returns, so clients can connect at once.
    pub async fn start(config: StoreConfig) -> anyhow::Result<Self> {
        config.validate().map_err(|e| anyhow::anyhow!(e))?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(baton_context_store::run(config, listener, shutdown.clone()));
        Ok(Self {
            addr,
            running: Running::new(shutdown, handle),
        })
    }

    /// `http://{addr}` for clients.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Begins shutdown and waits for the service to drain and return.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.running.stop().await
    }
}

/// An orchestrator running in this process on a loopback port, with a handle
/// on its runs so tests can check nothing of a run is left alive.
pub struct OrchestratorServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The application core it serves (shares its runs with the server).
    pub core: baton_orchestrator::app::Orchestrator,
    running: Running,
}

impl OrchestratorServer {
    /// Starts an orchestrator serving the agents in `agents_yaml`, on `store`
    /// (an in-memory store when `None`), with `configure` applied to its
    /// config.
    pub async fn start(
        agents_yaml: &str,
        store: Option<std::sync::Arc<dyn baton_store::ContextStore>>,
        configure: impl FnOnce(&mut baton_orchestrator::config::Config),
    ) -> anyhow::Result<Self> {
        Self::start_with_env(agents_yaml, store, configure, &[]).await
    }

    /// Like [`Self::start`], with the environment the orchestrator reads
    /// provider keys from (instead of the process's).
    pub async fn start_with_env(
        agents_yaml: &str,
        store: Option<std::sync::Arc<dyn baton_store::ContextStore>>,
        configure: impl FnOnce(&mut baton_orchestrator::config::Config),
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        use baton_orchestrator::config::{Config, StoreMode};
        let mut config = Config::default();
        config.store.mode = StoreMode::Memory;
        config.shutdown_grace = Duration::from_secs(5);
        config.telemetry.metrics_listen = String::new();
        configure(&mut config);
        config.validate().map_err(|e| anyhow::anyhow!(e))?;
        let catalog = std::sync::Arc::new(
            baton_orchestrator::catalog::Catalog::from_yaml(agents_yaml)
                .map_err(|e| anyhow::anyhow!(e))?,
        );
        // The config's telemetry only: tests never export because the
        // process environment says so.
        let tracing = baton_common::otel::Tracing::with_env(
            &config.telemetry,
            baton_orchestrator::SERVICE_NAME,
            |_| None,
        )
        .map_err(|e| anyhow::anyhow!(e))?;
        let store = match store {
            Some(s) => s,
            None => baton_orchestrator::build_store(&config, &tracing)?,
        };
        // Loopback only: a port of the config's if it names a loopback one
        // (tests that need to know the address up front), any port else.
        let port = if config.listen.ip().is_loopback() {
            config.listen.port()
        } else {
            0
        };
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let tasks = tokio_util::task::TaskTracker::new();
        let services = baton_orchestrator::run::shared::Shared::new(
            catalog,
            store.clone(),
            config.runs.clone(),
            tracing,
            &|name| {
                env.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            },
        )
        .map_err(|e| anyhow::anyhow!(e))?
        .with_quotas(config.quotas.clone());
        let core =
            baton_orchestrator::app::Orchestrator::new(services, shutdown.clone(), tasks.clone());
        let handle = tokio::spawn({
            let core = core.clone();
            let shutdown = shutdown.clone();
            async move {
                baton_orchestrator::serve_core(core, store, &config, listener, shutdown, tasks)
                    .await
            }
        });
        Ok(Self {
            addr,
            core,
            running: Running::new(shutdown, handle),
        })
    }

    /// `http://{addr}`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A client connected to it.
    pub async fn client(&self) -> anyhow::Result<baton_client::OrchestratorClient> {
        Ok(baton_client::OrchestratorClient::connect(self.endpoint()).await?)
    }

    /// Begins shutdown and waits for the server to drain and return.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.running.stop().await
    }
}

/// A RunAgent request of `agent` on `input`, everything else default.
pub fn agent_request(agent: &str, input: &str) -> baton_client::pb::RunAgentRequest {
    baton_client::pb::RunAgentRequest {
        agent: agent.into(),
        input: input.into(),
        ..Default::default()
    }
}

/// The example agents file (`deploy/config/agents.yaml`).
pub const EXAMPLE_AGENTS: &str = include_str!("../../deploy/config/agents.yaml");

/// Reads `stream` until an event matches `want` (10 s at most per event) and
/// returns it; every event read is pushed to `seen`. Panics when the run
/// ends first.
pub async fn wait_for(
    stream: &mut baton_client::Events,
    seen: &mut Vec<baton_client::pb::RunEvent>,
    want: impl Fn(&baton_client::pb::RunEvent) -> bool,
) -> baton_client::pb::RunEvent {
    use futures::StreamExt;
    loop {
        let e = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("event in time")
            .expect("stream open")
            .expect("event");
        seen.push(e.clone());
        if want(&e) {
            return e;
        }
        assert!(
            !events::is_terminal(&e),
            "the run ended before the awaited event: {e:?}"
        );
    }
}

/// Polls `f` every 50 ms until it answers true; panics after 20 s naming
/// `what`.
pub async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The grpc.health.v1 status of `service` at `endpoint` (a
/// `ServingStatus` as i32), or -1 when nothing answers.
pub async fn health(endpoint: &str, service: &str) -> i32 {
    let Ok(channel) = baton_client::channel(endpoint.to_owned()).await else {
        return -1;
    };
    let mut h = tonic_health::pb::health_client::HealthClient::new(channel);
    h.check(tonic_health::pb::HealthCheckRequest {
        service: service.into(),
    })
    .await
    .map(|r| r.into_inner().status)
    .unwrap_or(-1)
}

/// The services `endpoint` lists through server reflection v1, sorted.
pub async fn reflected_services(endpoint: &str) -> Vec<String> {
    use futures::StreamExt;
    use tonic_reflection::pb::v1;
    let channel = baton_client::channel(endpoint.to_owned())
        .await
        .expect("channel");
    let mut client = v1::server_reflection_client::ServerReflectionClient::new(channel);
    let req = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut resp = client
        .server_reflection_info(futures::stream::iter([req]))
        .await
        .expect("v1")
        .into_inner();
    let msg = resp.next().await.expect("a reply").expect("ok");
    let Some(v1::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        msg.message_response
    else {
        panic!("unexpected reflection reply");
    };
    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    names
}

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

/// The Prometheus text a `/metrics` endpoint at `addr` serves.
pub async fn scrape(addr: SocketAddr) -> String {
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("scrape")
        .text()
        .await
        .expect("body")
}
