//! Real Redis for the tests: a `redis-server` child process on a free
//! loopback port ([`RedisServer`]), with nothing persisted, killed when
//! dropped, and able to stop and start again on the same port; and a
//! three-node Redis Cluster built the same way ([`RedisCluster`]). A missing
//! `redis-server` is an error that says how to install it.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::{pki::TestPki, ports::free_port};

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
    pub fn start_tls(pki: &TestPki) -> anyhow::Result<(Self, u16)> {
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
