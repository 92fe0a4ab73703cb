//! What the orchestrator's replicas share through Redis, behind one module
//! (durable runs, `runs.store = "redis"`): provider rate limits
//! ([`limits`]), circuit breakers ([`breakers`]), tenants' budgets per
//! period and the holds on them ([`periods`], [`holds`]), tenants' run
//! quotas ([`quota`]) and MCP sessions ([`sessions`]) here; the run store
//! (`run::durable`) and the conversation store (`conversation::redis`) on
//! top of it.
//!
//! One of each, for all of them:
//!
//! - **one connection pool** ([`SharedState::conn`]): every store of a
//!   replica talks to Redis through the same multiplexed connection (or
//!   cluster connection), so commands sent one after another reach Redis in
//!   that order;
//! - **one clock**: Redis's. Every time written for another replica to read
//!   (a lease, a hold's expiry, a conversation's last use, a window's
//!   entries) is taken inside the script that writes it ([`NOW`]), so
//!   replicas whose clocks differ agree;
//! - **one key scheme** ([`SharedState::key`]): `{prefix}:{kind}:{{tag}}:{part}`,
//!   where the hash tag is the run's id, or the tenant's (hex) with the
//!   thing's own name — every key a script touches shares its tag, so Redis
//!   Cluster works;
//! - **the scripts** of each thing next to it here (the run store's in
//!   `run::durable`, the conversation store's in `conversation::redis`),
//!   each built once and run by its SHA.

pub mod breakers;
mod clock;
pub mod experiments;
pub mod holds;
pub mod limits;
pub mod periods;
pub mod quota;
pub mod sessions;

use std::{sync::Arc, time::Duration};

use baton_store::{
    error::Error as StoreError,
    redis::{
        RedisConfig, RedisConfigError,
        conn::{ConnRef, Connection},
    },
};

use crate::error::Error;

pub use clock::{NOW, now_ms as clock_now_ms};

/// Why the shared state cannot be opened at start.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// `runs.redis` is refused (the message names the field within it).
    #[error(transparent)]
    Config(#[from] RedisConfigError),
    /// The connection cannot be set up (its TLS files, say).
    #[error(transparent)]
    Connection(#[from] StoreError),
}

/// The connection, clock and keys every replica shares (see the module
/// docs).
pub struct SharedState {
    conn: Connection,
    prefix: String,
    /// This replica, as what it holds names it.
    replica: String,
    /// How long a finished thing is kept (an MCP session's handshake).
    retention: Duration,
    /// The holds on tenants' period budgets of this replica's calls in
    /// flight, renewed while they are.
    holds: Arc<holds::LiveHolds>,
}

impl SharedState {
    /// The shared state in the Redis `config` names, for replica `replica`;
    /// what ends is kept `retention`. Connects lazily: this succeeds while
    /// Redis is away.
    pub fn open(
        config: &RedisConfig,
        replica: &str,
        retention: Duration,
    ) -> Result<Arc<Self>, OpenError> {
        config.validate()?;
        Ok(Arc::new(Self {
            conn: Connection::open(config)?,
            prefix: config.key_prefix.clone(),
            replica: replica.to_owned(),
            retention,
            holds: Default::default(),
        }))
    }

    /// A connection of the one pool.
    pub async fn conn(&self) -> Result<ConnRef, Error> {
        self.conn.get().await.map_err(store_error)
    }

    /// The pool itself (what tasks of their own clone).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// This replica's name.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// How long what ends is kept.
    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// The key of `part` of the thing of `kind` whose hash tag is `tag`:
    /// `{prefix}:{kind}:{{tag}}:{part}`. An empty tag (the default tenant's
    /// name in hex) is `-`: `{}` is no hash tag to Redis Cluster, which
    /// would spread one thing's keys over slots.
    pub fn key(&self, kind: &str, tag: &str, part: &str) -> String {
        let tag = if tag.is_empty() { "-" } else { tag };
        format!("{}:{kind}:{{{tag}}}:{part}", self.prefix)
    }

    /// A key of no hash tag (an index another slot may hold):
    /// `{prefix}:{name}`.
    pub fn plain_key(&self, name: &str) -> String {
        format!("{}:{name}", self.prefix)
    }

    /// The holds this replica's calls have in flight.
    pub fn live_holds(&self) -> &holds::LiveHolds {
        &self.holds
    }
}

/// `s` in hexadecimal: a tenant's or a provider's name in a key, whatever
/// characters it has.
pub fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn store_error(e: StoreError) -> Error {
    match e {
        StoreError::Unavailable(m) => Error::Unavailable(format!("run store: {m}")),
        other => Error::Unavailable(format!("run store: {other}")),
    }
}

/// A Redis error, as the core's.
pub fn redis_error(e: redis::RedisError) -> Error {
    Error::Unavailable(format!("run store: redis: {e}"))
}
