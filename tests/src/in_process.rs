//! Baton's own services, started in this process on loopback ports: the
//! context store ([`StoreServer`]) and the orchestrator
//! ([`OrchestratorServer`]), each bound before `start` returns and shut down
//! explicitly (waiting for it to drain) or, at the latest, when dropped.

use std::{net::SocketAddr, time::Duration};

use anyhow::Context;
use baton_context_store::config::{Backend, Config as StoreConfig};
use tokio_util::sync::CancellationToken;

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
        // The catalog comes from `agents_yaml`: no file is watched unless
        // the test names one (and writes the same YAML there).
        config.agents_file = std::path::PathBuf::new();
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
        .with_quotas(config.quotas.clone())
        .with_conversations(config.conversations.clone());
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
