//! Real `baton-orchestrator` processes sharing a real `redis-server`
//! (`runs.store = "redis"`, a 1 s lease), for the fault tests.
#![allow(dead_code)]

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use baton_client::OrchestratorClient;
use baton_e2e::{RedisServer, free_addr};

use super::AGENTS;

pub struct Replica {
    pub child: Child,
    pub endpoint: String,
    pub addr: std::net::SocketAddr,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Replica {
    pub async fn start(name: &str, redis: &RedisServer, agents: &PathBuf) -> Replica {
        Self::start_with(name, redis, agents, &[]).await
    }

    /// [`Self::start`] with more settings (`BATON_ORCH_…` variables).
    pub async fn start_with(
        name: &str,
        redis: &RedisServer,
        agents: &PathBuf,
        env: &[(&str, &str)],
    ) -> Replica {
        let addr = free_addr().expect("free port");
        Self::start_at(name, redis, agents, addr, env).await
    }

    /// [`Self::start_with`] listening on `addr` (its peers must know it
    /// beforehand).
    pub async fn start_at(
        name: &str,
        redis: &RedisServer,
        agents: &PathBuf,
        addr: std::net::SocketAddr,
        env: &[(&str, &str)],
    ) -> Replica {
        let child = Command::new(env!("CARGO_BIN_EXE_baton-orchestrator"))
            .env("BATON_ORCH_LISTEN", addr.to_string())
            .env("BATON_ORCH_TELEMETRY__METRICS_LISTEN", "")
            .env("BATON_ORCH_STORE__MODE", "memory")
            .env("BATON_ORCH_AGENTS_FILE", agents)
            .env("BATON_ORCH_RUNS__STORE", "redis")
            .env("BATON_ORCH_RUNS__REDIS__URL", redis.url())
            .env("BATON_ORCH_RUNS__REDIS__TIMEOUT", "300ms")
            .env("BATON_ORCH_RUNS__LEASE", "1s")
            .env("BATON_ORCH_RUNS__REPLICA", name)
            .env("BATON_ORCH_SHUTDOWN_GRACE", "1s")
            .envs(env.iter().copied())
            // With BATON_TEST_REPLICA_LOGS: `log.level` too, if it is a level.
            .envs(
                std::env::var("BATON_TEST_REPLICA_LOGS")
                    .ok()
                    .filter(|l| l != "1")
                    .map(|l| ("BATON_ORCH_LOG__LEVEL", l)),
            )
            .env_remove("RUST_LOG")
            // BATON_TEST_REPLICA_LOGS=1: the replicas' logs on the test's
            // output (to see what a failing test's replicas did).
            .stdout(logs())
            .stderr(logs())
            .spawn()
            .expect("spawn baton-orchestrator");
        let replica = Replica {
            child,
            endpoint: format!("http://{addr}"),
            addr,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(c) = OrchestratorClient::connect(replica.endpoint.clone()).await
                && c.list_agents().await.is_ok()
            {
                return replica;
            }
            assert!(Instant::now() < deadline, "{name} did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn client(&self) -> OrchestratorClient {
        OrchestratorClient::connect(self.endpoint.clone())
            .await
            .expect("connect")
    }

    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill {signal}");
    }
}

fn logs() -> Stdio {
    if std::env::var_os("BATON_TEST_REPLICA_LOGS").is_some() {
        Stdio::inherit()
    } else {
        Stdio::null()
    }
}

pub fn agents_file() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("baton-failover-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let path = dir.join("agents.yaml");
    std::fs::write(&path, AGENTS).expect("write agents");
    path
}

/// The events of `run_id` after `after`, watched on `replica` to the run's
/// end (within `within`).
pub async fn follow_on(
    replica: &Replica,
    run_id: &str,
    after: u64,
    within: Duration,
) -> Vec<baton_client::pb::RunEvent> {
    use futures::StreamExt;
    tokio::time::timeout(within, async {
        replica
            .client()
            .await
            .watch_run(run_id, after, None)
            .await
            .expect("watch")
            .map(|e| e.expect("event"))
            .collect()
            .await
    })
    .await
    .expect("the run ends in time")
}

/// A `redis-server` and two replicas sharing it, `replica-a` and
/// `replica-b` (with `env`), serving the test's agents.
pub async fn pair(env: &[(&str, &str)]) -> (RedisServer, Replica, Replica) {
    let redis = RedisServer::start().expect("redis-server");
    let agents = agents_file();
    let a = Replica::start_with("replica-a", &redis, &agents, env).await;
    let b = Replica::start_with("replica-b", &redis, &agents, env).await;
    (redis, a, b)
}

/// A `redis-server` and three replicas `replica-0`…`replica-2` sharing it,
/// each with `env` and, with `peers`, the peer list the Kubernetes
/// manifests give: every replica's address, its own included (one headless
/// Service resolves to all pods).
pub async fn trio(peers: bool, env: &[(&str, &str)]) -> (RedisServer, Vec<Replica>) {
    let redis = RedisServer::start().expect("redis-server");
    let agents = agents_file();
    let addrs: Vec<std::net::SocketAddr> =
        (0..3).map(|_| free_addr().expect("free port")).collect();
    let list = format!(
        "[{}]",
        addrs
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut env = env.to_vec();
    if peers {
        env.push(("BATON_ORCH_PEERS__ENDPOINTS", &list));
    }
    let mut replicas = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        replicas
            .push(Replica::start_at(&format!("replica-{i}"), &redis, &agents, *addr, &env).await);
    }
    (redis, replicas)
}

/// Starts a run of `request` and reads its bare stream (no re-attaching)
/// until `stop` holds for an event; the stream, kept open (closing it
/// would cancel an attached run), and the events so far.
pub async fn start_until(
    client: &OrchestratorClient,
    request: baton_client::pb::RunAgentRequest,
    stop: impl Fn(&baton_client::pb::RunEvent) -> bool,
) -> (
    tonic::Streaming<baton_client::pb::RunEvent>,
    Vec<baton_client::pb::RunEvent>,
) {
    use futures::StreamExt;
    let mut stream = client
        .raw()
        .run_agent(request)
        .await
        .expect("run")
        .into_inner();
    let mut seen = Vec::new();
    loop {
        let e = stream.next().await.expect("open").expect("event");
        let done = stop(&e);
        seen.push(e);
        if done {
            return (stream, seen);
        }
    }
}

/// Blocks `redis` for `ms` (a script that waits): every command sent
/// meanwhile waits behind it.
pub fn block_redis(redis: &RedisServer, ms: u64) -> std::thread::JoinHandle<()> {
    let url = redis.url();
    let script = format!(
        "local t = redis.call('TIME') local until_ms = t[1] * 1000 + t[2] / 1000 + {ms} \
         while true do local n = redis.call('TIME') if n[1] * 1000 + n[2] / 1000 >= until_ms then break end end \
         return 1"
    );
    let port = url.rsplit(':').next().expect("port").to_owned();
    std::thread::spawn(move || {
        let ok = std::process::Command::new("redis-cli")
            .args(["-p", &port, "EVAL", &script, "0"])
            .output()
            .expect("redis-cli")
            .status
            .success();
        assert!(ok, "the blocking script ran");
    })
}
