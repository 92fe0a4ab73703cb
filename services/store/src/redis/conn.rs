//! Connections to Redis, shared by the store and whatever else of Baton
//! keeps state in Redis (the orchestrator's durable runs): one node or a
//! cluster, lazily connected, reconnecting by themselves, commands bounded
//! by the configured timeout.

use std::{sync::Arc, time::Duration};

use redis::{
    Cmd, IntoConnectionInfo, RedisFuture, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::ClusterClient,
    cluster_async::ClusterConnection,
};
use tokio::sync::OnceCell;

use super::config::RedisConfig;
use crate::error::{Error, Result};

/// How connections to one node behave: connecting and every command bounded
/// by `timeout`; calls fail fast while Redis is away (the next one
/// reconnects).
pub fn connection_config(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(500))
}

/// rustls's process-wide crypto provider (aws-lc-rs), which the Redis
/// client's TLS needs; installing it twice is harmless.
fn crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// A client of one Redis node at `info` with `config`'s TLS certificates
/// (for `rediss://`).
pub fn client(
    config: &RedisConfig,
    info: impl IntoConnectionInfo,
) -> redis::RedisResult<redis::Client> {
    crypto_provider();
    let certificates = config.tls_certificates().map_err(|e| {
        redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "tls", e.to_string()))
    })?;
    match certificates {
        Some(certs) => redis::Client::build_with_tls(info, certs),
        None => redis::Client::open(info),
    }
}

fn cluster_builder(config: &RedisConfig) -> redis::cluster::ClusterClientBuilder {
    crypto_provider();
    let builder = ClusterClient::builder(config.cluster_urls.clone());
    match config.tls_certificates() {
        Ok(Some(certs)) => builder.certs(certs),
        _ => builder,
    }
}

/// A command connection to Redis: one node (or a proxy) or a cluster,
/// multiplexed, reconnecting by itself. Clones share it.
#[derive(Clone)]
pub enum Connection {
    /// One node (or a proxy).
    Single(ConnectionManager),
    /// Connected on first use, so the service starts while Redis is away.
    Cluster(Arc<(ClusterClient, OnceCell<ClusterConnection>)>),
}

impl Connection {
    /// Connections of `config`, made lazily (this succeeds while Redis is
    /// away) and re-made by themselves.
    pub fn open(config: &RedisConfig) -> Result<Self> {
        let bad = |e: redis::RedisError| Error::Internal(format!("redis config: {e}"));
        Ok(if config.cluster_urls.is_empty() {
            let client = client(config, config.url.as_str()).map_err(bad)?;
            Connection::Single(
                ConnectionManager::new_lazy_with_config(client, connection_config(config.timeout))
                    .map_err(bad)?,
            )
        } else {
            let client = cluster_builder(config)
                .connection_timeout(config.timeout)
                .response_timeout(config.timeout)
                .retries(2)
                .build()
                .map_err(bad)?;
            Connection::Cluster(Arc::new((client, OnceCell::new())))
        })
    }

    /// A connection of its own, not shared with anyone (for commands that
    /// block it, like `XREAD BLOCK`), whose commands may take up to
    /// `timeout`.
    pub async fn dedicated(config: &RedisConfig, timeout: Duration) -> Result<ConnRef> {
        let bad = |e: redis::RedisError| Error::Internal(format!("redis config: {e}"));
        if config.cluster_urls.is_empty() {
            let client = client(config, config.url.as_str()).map_err(bad)?;
            let c = ConnectionManager::new_with_config(client, connection_config(timeout)).await?;
            Ok(ConnRef::Single(c))
        } else {
            let client = cluster_builder(config)
                .connection_timeout(config.timeout)
                .response_timeout(timeout)
                .retries(1)
                .build()
                .map_err(bad)?;
            Ok(ConnRef::Cluster(client.get_async_connection().await?))
        }
    }

    /// A connection to send commands on.
    pub async fn get(&self) -> Result<ConnRef> {
        match self {
            Connection::Single(c) => Ok(ConnRef::Single(c.clone())),
            Connection::Cluster(cluster) => {
                let (client, cell) = &**cluster;
                let c = cell
                    .get_or_try_init(|| client.get_async_connection())
                    .await?;
                Ok(ConnRef::Cluster(c.clone()))
            }
        }
    }
}

/// A ready connection of either kind, usable wherever redis-rs wants one.
pub enum ConnRef {
    /// One node.
    Single(ConnectionManager),
    /// A cluster.
    Cluster(ClusterConnection),
}

impl ConnectionLike for ConnRef {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            ConnRef::Single(c) => c.req_packed_command(cmd),
            ConnRef::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            ConnRef::Single(c) => c.req_packed_commands(pipeline, offset, count),
            ConnRef::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            ConnRef::Single(c) => c.get_db(),
            ConnRef::Cluster(c) => c.get_db(),
        }
    }
}
