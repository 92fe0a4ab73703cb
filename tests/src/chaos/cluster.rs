//! The system under test: one `redis-server`, one `baton-context-store`
//! on it (redis backend, so `write_context` is shared), and three durable
//! `baton-orchestrator` replicas `r0`–`r2` on it. Each replica keeps its
//! gRPC and metrics ports for the whole run — chosen free at the start and
//! reused on every restart — so the peers lists stay valid; its stdout and
//! stderr go (appended across restarts) to `<name>.log` in the run's
//! directory.

use std::{
    fs::File,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use baton_client::OrchestratorClient;

use super::options::Options;
use crate::{RedisServer, free_addr};

/// How long a started process may take to serve.
const START_WITHIN: Duration = Duration::from_secs(20);

/// A child process, killed when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One orchestrator replica.
pub struct Replica {
    /// `r0`, `r1`, `r2`: its `runs.replica`.
    pub name: String,
    /// Its gRPC address.
    pub addr: SocketAddr,
    /// Its Prometheus address (`telemetry.metrics_listen`).
    pub metrics: SocketAddr,
    /// Its log file.
    pub log: PathBuf,
    child: Option<Guard>,
    paused: bool,
    starts: u32,
}

impl Replica {
    /// `http://addr`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sends `signal` (`-KILL`, `-STOP`, …) to the process.
    pub fn signal(&mut self, signal: &str) -> anyhow::Result<()> {
        let child = self
            .child
            .as_ref()
            .with_context(|| format!("{} is not running", self.name))?;
        let ok = Command::new("kill")
            .args([signal, &child.0.id().to_string()])
            .status()
            .context("cannot run kill")?
            .success();
        anyhow::ensure!(ok, "kill {signal} {} failed", self.name);
        match signal {
            "-STOP" => self.paused = true,
            "-CONT" => self.paused = false,
            _ => {}
        }
        Ok(())
    }

    /// Waits up to `within` for the process to exit; whether it did.
    pub async fn exited_within(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let exited = match self.child.as_mut() {
                Some(c) => !matches!(c.0.try_wait(), Ok(None)),
                None => true,
            };
            if exited {
                self.child = None;
                self.paused = false;
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.0.kill();
            let _ = c.0.wait();
        }
        self.paused = false;
    }

    /// Whether the process is stopped (SIGSTOP without SIGCONT yet).
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// Whether a process is running (or stopped).
    pub fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.0.try_wait(), Ok(None)),
            None => false,
        }
    }
}

/// The redis-server, context store and replicas of one chaos run.
pub struct Cluster {
    /// The replicas, `r0`–`r2`.
    pub replicas: Vec<Replica>,
    redis: RedisServer,
    _store: Guard,
    store_addr: SocketAddr,
    orchestrator: PathBuf,
    env: Vec<(String, String)>,
}

impl Cluster {
    /// The run's redis-server.
    pub fn redis(&self) -> &RedisServer {
        &self.redis
    }

    /// Starts Redis, the context store and three replicas serving
    /// `agents`, their logs in `dir`; returns once every replica answers.
    pub async fn start(options: &Options, agents: &Path, dir: &Path) -> anyhow::Result<Self> {
        let redis = RedisServer::start()?;
        let store_addr = free_addr()?;
        let store_log = dir.join("context-store.log");
        let mut store = Command::new(&options.binaries.context_store);
        store
            .env("BATON_STORE_LISTEN", store_addr.to_string())
            .env("BATON_STORE_BACKEND", "redis")
            .env("BATON_STORE_REDIS__URL", redis.url())
            .env("BATON_STORE_AUTH__MODE", "none")
            .env("BATON_STORE_TELEMETRY__METRICS_LISTEN", "")
            .env_remove("RUST_LOG");
        let store = Guard(spawn_logged(store, &store_log)?);
        wait_listening(store_addr, START_WITHIN)
            .await
            .with_context(|| {
                format!(
                    "the context store did not start (see {})",
                    store_log.display()
                )
            })?;

        let mut replicas = Vec::new();
        for i in 0..3 {
            let name = format!("r{i}");
            replicas.push(Replica {
                log: dir.join(format!("{name}.log")),
                name,
                addr: free_addr()?,
                metrics: free_addr()?,
                child: None,
                paused: false,
                starts: 0,
            });
        }
        let peers: Vec<String> = replicas.iter().map(|r| r.addr.to_string()).collect();
        let mut env: Vec<(String, String)> = [
            ("BATON_ORCH_STORE__MODE", "remote".to_owned()),
            ("BATON_ORCH_STORE__ENDPOINT", format!("http://{store_addr}")),
            ("BATON_ORCH_AGENTS_FILE", agents.display().to_string()),
            ("BATON_ORCH_RUNS__STORE", "redis".to_owned()),
            ("BATON_ORCH_RUNS__REDIS__URL", redis.url()),
            ("BATON_ORCH_RUNS__REDIS__TIMEOUT", "500ms".to_owned()),
            ("BATON_ORCH_RUNS__LEASE", ms(options.lease)),
            ("BATON_ORCH_RUNS__PARK_AFTER", ms(options.park_after)),
            (
                "BATON_ORCH_RUNS__APPROVAL_TIMEOUT",
                ms(options.approval_timeout),
            ),
            ("BATON_ORCH_SHUTDOWN_GRACE", ms(options.shutdown_grace)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        env.extend(options.extra_env.iter().cloned());
        if options.peers {
            env.push((
                "BATON_ORCH_PEERS__ENDPOINTS".into(),
                serde_json::to_string(&peers)?,
            ));
        }
        let mut cluster = Self {
            replicas,
            redis,
            _store: store,
            store_addr,
            orchestrator: options.binaries.orchestrator.clone(),
            env,
        };
        for i in 0..cluster.replicas.len() {
            cluster.spawn(i)?;
        }
        for i in 0..cluster.replicas.len() {
            cluster.ready(i).await?;
        }
        Ok(cluster)
    }

    /// The context store's endpoint.
    pub fn store_endpoint(&self) -> String {
        format!("http://{}", self.store_addr)
    }

    /// The replicas' endpoints, by index.
    pub fn endpoints(&self) -> Vec<String> {
        self.replicas.iter().map(Replica::endpoint).collect()
    }

    /// Starts replica `i` again (same name, ports and settings) and waits
    /// until it serves.
    pub async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.replicas[i].kill();
        self.spawn(i)?;
        self.ready(i).await
    }

    /// Every replica up: a stopped one continued, an exited one
    /// restarted.
    pub async fn heal(&mut self) -> anyhow::Result<()> {
        for i in 0..self.replicas.len() {
            if self.replicas[i].paused() {
                self.replicas[i].signal("-CONT")?;
            }
            if !self.replicas[i].alive() {
                self.restart(i).await?;
            }
        }
        Ok(())
    }

    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let r = &mut self.replicas[i];
        r.starts += 1;
        let mut cmd = Command::new(&self.orchestrator);
        cmd.env("BATON_ORCH_LISTEN", r.addr.to_string())
            .env(
                "BATON_ORCH_TELEMETRY__METRICS_LISTEN",
                r.metrics.to_string(),
            )
            .env("BATON_ORCH_RUNS__REPLICA", &r.name)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env_remove("RUST_LOG");
        {
            use std::io::Write as _;
            let mut log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&r.log)?;
            writeln!(log, "=== chaos: start {} of {}", r.starts, r.name)?;
        }
        r.child = Some(Guard(spawn_logged(cmd, &r.log)?));
        r.paused = false;
        Ok(())
    }

    /// Waits until replica `i` answers ListAgents; a replica whose port is
    /// not free yet (a restart right after a kill) is started again.
    async fn ready(&mut self, i: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_WITHIN;
        loop {
            let endpoint = self.replicas[i].endpoint();
            let answered = tokio::time::timeout(Duration::from_secs(1), async {
                match OrchestratorClient::connect(endpoint).await {
                    Ok(c) => c.list_agents().await.is_ok(),
                    Err(_) => false,
                }
            })
            .await
            .unwrap_or(false);
            if answered {
                return Ok(());
            }
            let r = &mut self.replicas[i];
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} did not serve within {START_WITHIN:?} (see {})",
                r.name,
                r.log.display()
            );
            if !r.alive() {
                self.spawn(i)?;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A client of the replica at `endpoint` over a channel that connects
/// when first used, and again after the replica restarted.
pub fn lazy_client(endpoint: &str) -> OrchestratorClient {
    let channel = match tonic::transport::Endpoint::from_shared(endpoint.to_owned()) {
        Ok(e) => e
            .connect_timeout(Duration::from_millis(500))
            .tcp_nodelay(true)
            .connect_lazy(),
        // Endpoints here are `http://127.0.0.1:port`, always valid; a bad
        // one becomes a client whose calls fail.
        Err(_) => tonic::transport::Endpoint::from_static("http://127.0.0.1:9").connect_lazy(),
    };
    OrchestratorClient::new(channel)
}

/// `d` as the config loader reads durations (`1500ms`).
fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// Spawns `cmd` with stdin closed and stdout and stderr appended to `log`.
fn spawn_logged(mut cmd: Command, log: &Path) -> anyhow::Result<Child> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open {}", log.display()))?;
    let err = out.try_clone()?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .with_context(|| format!("cannot start {:?}", cmd.get_program()))
}

/// Waits until `addr` accepts connections.
async fn wait_listening(addr: SocketAddr, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{addr} not listening within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Opens a file for reading the logs back (the checker's log rule).
pub fn read_log(path: &Path) -> String {
    let mut out = String::new();
    if let Ok(mut f) = File::open(path) {
        use std::io::Read as _;
        let _ = f.read_to_string(&mut out);
    }
    out
}
