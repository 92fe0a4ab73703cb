//! The Redis backend.
//!
//! Every mutation is one Lua script (`lua/*.lua`, each prefixed with
//! `lua/prelude.lua`), so a put's version check, quota check, write, index
//! update and change notification happen atomically. All keys of a tenant's
//! trace carry one hash tag, so a script touches one Cluster slot and works
//! unchanged on Redis Cluster. Reads of one slot are a single `HMGET`.
//!
//! Key layout (`p` is `redis.key_prefix`): `p:{<trace>}:…` for the tenant
//! `""` (authentication off; the layout of releases before tenants, so such
//! deployments keep their slots) and `p:{<tenant>/<trace>}:…` for a named
//! tenant. Tenant names are `[a-z0-9_-]` and trace ids hex, so no key of one
//! tenant can be a key of another. The Watch channel is `…:watch` under the
//! same base.
//!
//! Watch is fed by Redis pub/sub: scripts `PUBLISH` each change on the trace's
//! channel inside the same atomic step. One RESP3 connection per store
//! multiplexes every subscription; watchers of one trace share a Redis
//! subscription. If that connection drops, watchers cannot know what they
//! missed, so their streams end with `UNAVAILABLE` and they watch again.
//!
//! Connections reconnect by themselves (`ConnectionManager`, or the cluster
//! client), so calls fail with `UNAVAILABLE` while Redis is away and work
//! again once it is back, without a restart.

use std::path::PathBuf;
use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use bytes::Bytes;
use futures::StreamExt;
use redis::{
    IntoConnectionInfo, ProtocolVersion, PushKind, Script, Value,
    aio::{ConnectionManager, ConnectionManagerConfig},
};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use tokio_stream::wrappers::{BroadcastStream, errors::BroadcastStreamRecvError};

use super::redis_conn::{Connection, connection_config};
use super::{
    Change, ChangeKind, ChangeStream, ContextStore, Key, Limits, Listing, Page, Put, Removed,
    Scope, Selection, Slot, SlotMeta, Written,
};
use crate::error::{Error, Result};

/// Changes a watcher may fall behind before its stream ends with `ABORTED`.
const WATCH_BUFFER: usize = 1024;

/// How to reach Redis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// A single node (or a proxy): `redis://[user:pass@]host:port[/db]`,
    /// `rediss://` for TLS. Ignored when `cluster_urls` is set.
    pub url: String,
    /// Redis Cluster seed nodes; when not empty the cluster client is used.
    pub cluster_urls: Vec<String>,
    /// Prefix of every key and channel the store uses.
    pub key_prefix: String,
    /// Deadline of one Redis command and of one connection attempt.
    #[serde(with = "baton_common::config::duration")]
    pub timeout: Duration,
    /// For `rediss://`: the CA certificate (PEM) Redis's certificate is
    /// checked against; empty: the system's roots.
    pub ca_file: PathBuf,
    /// For `rediss://` to a Redis that wants client certificates
    /// (`tls-auth-clients yes`, its default): this client's certificate
    /// chain and key (PEM); both or neither. Read at start.
    pub cert_file: PathBuf,
    /// See `cert_file`.
    pub key_file: PathBuf,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".into(),
            cluster_urls: Vec::new(),
            key_prefix: "baton".into(),
            timeout: Duration::from_secs(2),
            ca_file: PathBuf::new(),
            cert_file: PathBuf::new(),
            key_file: PathBuf::new(),
        }
    }
}

impl RedisConfig {
    /// Checks the config is usable; returns what is wrong otherwise.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let urls: Vec<&String> = if self.cluster_urls.is_empty() {
            vec![&self.url]
        } else {
            self.cluster_urls.iter().collect()
        };
        for u in &urls {
            u.as_str()
                .into_connection_info()
                .map_err(|e| format!("redis url {u:?}: {e}"))?;
        }
        if self.key_prefix.is_empty() || self.key_prefix.contains(['{', '}']) {
            return Err("redis.key_prefix must be non-empty and contain no braces".into());
        }
        if self.timeout.is_zero() {
            return Err("redis.timeout must be positive".into());
        }
        if self.cert_file.as_os_str().is_empty() != self.key_file.as_os_str().is_empty() {
            return Err("redis.cert_file and redis.key_file go together".into());
        }
        let tls_files = super::redis_conn::tls_certificates(self)?.is_some();
        if tls_files && let Some(plain) = urls.iter().find(|u| !u.starts_with("rediss://")) {
            return Err(format!(
                "redis.ca_file, cert_file and key_file are for rediss:// URLs, not {plain:?}"
            ));
        }
        Ok(())
    }
}

struct Scripts {
    put: Script,
    put_many: Script,
    delete: Script,
    delete_many: Script,
    clear: Script,
    list: Script,
}

impl Scripts {
    fn new() -> Self {
        let prelude = include_str!("lua/prelude.lua");
        // Flags (Redis 7): a put is refused whole, before it runs, while
        // Redis is out of memory (`maxmemory` with `noeviction`); deletes
        // and clears still run, since they are how a tenant frees memory.
        let with = |flags: &str, body: &str| Script::new(&format!("{flags}\n{prelude}\n{body}"));
        Self {
            put: with("#!lua", include_str!("lua/put.lua")),
            put_many: with("#!lua", include_str!("lua/put_many.lua")),
            delete: with("#!lua flags=allow-oom", include_str!("lua/delete.lua")),
            delete_many: with("#!lua flags=allow-oom", include_str!("lua/delete_many.lua")),
            clear: with("#!lua flags=allow-oom", include_str!("lua/clear.lua")),
            list: with("#!lua flags=no-writes", include_str!("lua/list.lua")),
        }
    }
}

/// How far Redis's clock is from ours, learnt from `TIME` at every ping, so
/// a write can carry its deadline in Redis's clock.
#[derive(Default)]
struct Clock {
    /// Redis's clock minus ours, minus the measurement's uncertainty (half
    /// the round trip), in ms: deadlines err on the early side.
    offset_ms: std::sync::atomic::AtomicI64,
}

impl Clock {
    fn learn(&self, sent_ms: i64, redis_ms: i64, received_ms: i64) {
        let midpoint = (sent_ms + received_ms) / 2;
        let uncertainty = (received_ms - sent_ms + 1) / 2;
        self.offset_ms.store(
            redis_ms - midpoint - uncertainty,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The deadline, in Redis's clock, of a write sent now that the caller
    /// gives up on after `timeout`: a script that starts later refuses to
    /// act, so a write that answered `UNAVAILABLE` is never applied late.
    /// A margin (a tenth of the timeout, 5 to 250 ms) leaves time for the
    /// answer to travel back before the caller gives up.
    fn deadline_ms(&self, timeout: Duration) -> i64 {
        let margin = (timeout / 10).clamp(Duration::from_millis(5), Duration::from_millis(250));
        let budget = timeout.saturating_sub(margin).as_millis() as i64;
        local_ms() + self.offset_ms.load(std::sync::atomic::Ordering::Relaxed) + budget
    }
}

fn local_ms() -> i64 {
    super::now_ms() as i64
}

/// The names of one trace's keys.
struct TraceKeys {
    meta: String,
    exp: String,
    info: String,
    slot_prefix: String,
    channel: String,
}

impl TraceKeys {
    fn new(prefix: &str, scope: &Scope) -> Self {
        let base = if scope.tenant.as_str().is_empty() {
            format!("{prefix}:{{{}}}:", scope.trace_id)
        } else {
            format!("{prefix}:{{{}/{}}}:", scope.tenant, scope.trace_id)
        };
        Self {
            meta: format!("{base}meta"),
            exp: format!("{base}exp"),
            info: format!("{base}info"),
            slot_prefix: format!("{base}s:"),
            channel: format!("{base}watch"),
        }
    }

    fn slot(&self, key: &Key) -> String {
        format!("{}{}", self.slot_prefix, key.as_str())
    }
}

/// The Redis-backed context store.
pub struct RedisStore {
    limits: Limits,
    prefix: String,
    conn: Connection,
    scripts: Scripts,
    hub: Arc<WatchHub>,
    clock: Clock,
    timeout: Duration,
}

impl RedisStore {
    /// Creates the store. Connections are made lazily and re-made by
    /// themselves, so this succeeds while Redis is away; [`ContextStore::ping`]
    /// tells when it answers.
    pub fn new(config: &RedisConfig, limits: Limits) -> Result<Self> {
        let bad = |e: redis::RedisError| Error::Internal(format!("redis config: {e}"));
        let conn = Connection::open(config)?;
        let manager_config = || connection_config(config.timeout);

        // Pub/sub always uses one node: in a cluster, PUBLISH reaches every
        // node's subscribers, so the first seed node is enough.
        let pubsub_url = config.cluster_urls.first().unwrap_or(&config.url);
        let info = pubsub_url.as_str().into_connection_info().map_err(bad)?;
        let redis_settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let info = info.set_redis_settings(redis_settings);
        let hub = WatchHub::new(
            super::redis_conn::client(config, info).map_err(bad)?,
            manager_config(),
            config.timeout,
        )?;

        Ok(Self {
            limits,
            prefix: config.key_prefix.clone(),
            conn,
            scripts: Scripts::new(),
            hub,
            clock: Clock::default(),
            timeout: config.timeout,
        })
    }
}

fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        other => Err(Error::Internal(format!(
            "redis: expected an integer, got {other:?}"
        ))),
    }
}

fn text(v: &Value) -> Result<String> {
    match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        other => Err(Error::Internal(format!(
            "redis: expected a string, got {other:?}"
        ))),
    }
}

/// The five arguments of one slot's write, as `put.lua` and `put_many.lua`
/// read them: key, value, content type, TTL in ms, expected version (`''`:
/// none).
fn put_args(invocation: &mut redis::ScriptInvocation<'_>, put: &Put, ttl: Duration) {
    invocation
        .arg(put.key.as_str())
        .arg(put.value.as_ref())
        .arg(put.effective_content_type())
        .arg(ttl.as_millis() as u64)
        .arg(
            put.expected_version
                .map(|v| v.to_string())
                .unwrap_or_default(),
        );
}

/// What a write script answers when it started after its deadline.
const LATE: i64 = 9;

fn late() -> Error {
    Error::Unavailable(
        "Redis ran the write only after redis.timeout had passed, so it refused it; nothing was written"
            .into(),
    )
}

fn reply_code(reply: &[Value]) -> Result<i64> {
    reply
        .first()
        .map(int)
        .unwrap_or_else(|| Err(Error::Internal("redis: empty script reply".into())))
}

fn field(reply: &[Value], i: usize) -> Result<i64> {
    reply.get(i).map(int).unwrap_or_else(|| {
        Err(Error::Internal(format!(
            "redis: script reply has no field {i}"
        )))
    })
}

#[async_trait::async_trait]
impl ContextStore for RedisStore {
    fn limits(&self) -> &Limits {
        &self.limits
    }

    async fn put(&self, put: Put) -> Result<Written> {
        let ttl = self.limits.check_put(&put)?;
        let keys = TraceKeys::new(&self.prefix, &put.scope);
        let mut conn = self.conn.get().await?;
        let mut invocation = self.scripts.put.prepare_invoke();
        invocation
            .key(&keys.meta)
            .key(&keys.exp)
            .key(&keys.info)
            .key(keys.slot(&put.key));
        put_args(&mut invocation, &put, ttl);
        let reply: Vec<Value> = invocation
            .arg(self.limits.max_trace_bytes)
            .arg(self.limits.max_trace_keys)
            .arg(&keys.slot_prefix)
            .arg(&keys.channel)
            .arg(super::TRACE_RETENTION.as_millis() as u64)
            .arg(self.clock.deadline_ms(self.timeout))
            .invoke_async(&mut conn)
            .await?;
        match reply_code(&reply)? {
            LATE => Err(late()),
            0 => Ok(Written {
                version: field(&reply, 1)? as u64,
                expires_at_ms: field(&reply, 2)? as u64,
            }),
            1 => {
                let current = field(&reply, 1)?;
                Err(Error::VersionMismatch {
                    key: put.key.as_str().to_owned(),
                    expected: put.expected_version.unwrap_or_default(),
                    current: (current >= 0).then_some(current as u64),
                })
            }
            2 => Err(Error::TraceBytesQuota {
                trace_id: put.scope.trace_id.to_string(),
                size: put.value.len() as u64,
                would_be: field(&reply, 1)? as u64,
                limit: self.limits.max_trace_bytes,
            }),
            3 => Err(Error::TraceKeysQuota {
                trace_id: put.scope.trace_id.to_string(),
                used: field(&reply, 1)? as u64,
                limit: self.limits.max_trace_keys,
            }),
            other => Err(Error::Internal(format!(
                "redis: put script answered {other}"
            ))),
        }
    }

    async fn get(&self, scope: &Scope, key: &Key) -> Result<Slot> {
        let keys = TraceKeys::new(&self.prefix, scope);
        let mut conn = self.conn.get().await?;
        let (value, content_type, version, expires_at_ms): (
            Option<Bytes>,
            Option<String>,
            Option<u64>,
            Option<u64>,
        ) = redis::cmd("HMGET")
            .arg(keys.slot(key))
            .arg(&["v", "ct", "ver", "exp"])
            .query_async(&mut conn)
            .await?;
        match (value, content_type, version, expires_at_ms) {
            (Some(value), Some(content_type), Some(version), Some(expires_at_ms)) => Ok(Slot {
                meta: SlotMeta {
                    key: key.as_str().to_owned(),
                    content_type,
                    version,
                    size_bytes: value.len() as u64,
                    expires_at_ms,
                },
                value,
            }),
            _ => Err(Error::NotFound {
                trace_id: scope.trace_id.to_string(),
                key: key.as_str().to_owned(),
            }),
        }
    }

    async fn list_page(&self, scope: &Scope, prefix: &str, page: &Page) -> Result<Listing> {
        let keys = TraceKeys::new(&self.prefix, scope);
        let mut conn = self.conn.get().await?;
        let reply: Vec<Value> = self
            .scripts
            .list
            .key(&keys.exp)
            .key(&keys.info)
            .arg(prefix)
            .arg(&keys.slot_prefix)
            .arg(page.after.as_deref().unwrap_or(""))
            .arg(page.size.clamp(1, super::MAX_PAGE_SIZE))
            .invoke_async(&mut conn)
            .await?;
        let mut listing = Listing {
            slots: Vec::with_capacity(reply.len().saturating_sub(3) / 5),
            used_bytes: field(&reply, 0)? as u64,
            used_keys: field(&reply, 1)? as u64,
            next_after: None,
        };
        let more = field(&reply, 2)? == 1;
        for chunk in reply[3..].chunks(5) {
            let [key, ct, ver, size, exp] = chunk else {
                return Err(Error::Internal(
                    "redis: list script reply is not in fives".into(),
                ));
            };
            listing.slots.push(SlotMeta {
                key: text(key)?,
                content_type: text(ct)?,
                version: int(ver)? as u64,
                size_bytes: int(size)? as u64,
                expires_at_ms: int(exp)? as u64,
            });
        }
        if more {
            listing.next_after = listing.slots.last().map(|s| s.key.clone());
        }
        Ok(listing)
    }

    async fn delete(&self, scope: &Scope, key: &Key, expected_version: Option<u64>) -> Result<u64> {
        let keys = TraceKeys::new(&self.prefix, scope);
        let mut conn = self.conn.get().await?;
        let reply: Vec<Value> = self
            .scripts
            .delete
            .key(&keys.meta)
            .key(&keys.exp)
            .key(&keys.info)
            .key(keys.slot(key))
            .arg(key.as_str())
            .arg(expected_version.map(|v| v.to_string()).unwrap_or_default())
            .arg(&keys.slot_prefix)
            .arg(&keys.channel)
            .arg(self.clock.deadline_ms(self.timeout))
            .invoke_async(&mut conn)
            .await?;
        match reply_code(&reply)? {
            LATE => Err(late()),
            0 => Ok(field(&reply, 1)? as u64),
            1 => Err(Error::VersionMismatch {
                key: key.as_str().to_owned(),
                expected: expected_version.unwrap_or_default(),
                current: Some(field(&reply, 1)? as u64),
            }),
            4 => Err(Error::NotFound {
                trace_id: scope.trace_id.to_string(),
                key: key.as_str().to_owned(),
            }),
            other => Err(Error::Internal(format!(
                "redis: delete script answered {other}"
            ))),
        }
    }

    async fn clear(&self, scope: &Scope) -> Result<u64> {
        let keys = TraceKeys::new(&self.prefix, scope);
        let mut conn = self.conn.get().await?;
        let reply: Vec<Value> = self
            .scripts
            .clear
            .key(&keys.meta)
            .key(&keys.exp)
            .key(&keys.info)
            .arg(&keys.slot_prefix)
            .arg(&keys.channel)
            .arg(self.clock.deadline_ms(self.timeout))
            .invoke_async(&mut conn)
            .await?;
        match reply_code(&reply)? {
            LATE => Err(late()),
            0 => Ok(field(&reply, 2)? as u64),
            other => Err(Error::Internal(format!(
                "redis: clear script answered {other}"
            ))),
        }
    }

    async fn put_many(&self, scope: &Scope, puts: Vec<Put>) -> Result<Vec<Written>> {
        let ttls = self.limits.check_batch(scope, &puts)?;
        let keys = TraceKeys::new(&self.prefix, scope);
        let mut invocation = self.scripts.put_many.prepare_invoke();
        invocation.key(&keys.meta).key(&keys.exp).key(&keys.info);
        for put in &puts {
            invocation.key(keys.slot(&put.key));
        }
        invocation
            .arg(self.limits.max_trace_bytes)
            .arg(self.limits.max_trace_keys)
            .arg(&keys.slot_prefix)
            .arg(&keys.channel)
            .arg(super::TRACE_RETENTION.as_millis() as u64)
            .arg(self.clock.deadline_ms(self.timeout));
        for (put, ttl) in puts.iter().zip(&ttls) {
            put_args(&mut invocation, put, *ttl);
        }
        let mut conn = self.conn.get().await?;
        let reply: Vec<Value> = invocation.invoke_async(&mut conn).await?;
        // The entry an error tuple names (1-based in the script).
        let entry = |reply: &[Value]| -> Result<(usize, &Put)> {
            let i = (field(reply, 1)? as usize).saturating_sub(1);
            let put = puts
                .get(i)
                .ok_or_else(|| Error::Internal(format!("redis: put_many named entry {i}")))?;
            Ok((i, put))
        };
        match reply_code(&reply)? {
            LATE => Err(late()),
            0 => reply[1..]
                .chunks(2)
                .map(|c| {
                    Ok(Written {
                        version: int(&c[0])? as u64,
                        expires_at_ms: int(c.get(1).unwrap_or(&Value::Nil))? as u64,
                    })
                })
                .collect(),
            1 => {
                let (i, put) = entry(&reply)?;
                let current = field(&reply, 2)?;
                Err(Error::in_entry(
                    i,
                    put.key.as_str(),
                    Error::VersionMismatch {
                        key: put.key.as_str().to_owned(),
                        expected: put.expected_version.unwrap_or_default(),
                        current: (current >= 0).then_some(current as u64),
                    },
                ))
            }
            2 => {
                let (i, put) = entry(&reply)?;
                Err(Error::in_entry(
                    i,
                    put.key.as_str(),
                    Error::TraceBytesQuota {
                        trace_id: scope.trace_id.to_string(),
                        size: put.value.len() as u64,
                        would_be: field(&reply, 2)? as u64,
                        limit: self.limits.max_trace_bytes,
                    },
                ))
            }
            3 => {
                let (i, put) = entry(&reply)?;
                Err(Error::in_entry(
                    i,
                    put.key.as_str(),
                    Error::TraceKeysQuota {
                        trace_id: scope.trace_id.to_string(),
                        used: field(&reply, 2)? as u64,
                        limit: self.limits.max_trace_keys,
                    },
                ))
            }
            other => Err(Error::Internal(format!(
                "redis: put_many script answered {other}"
            ))),
        }
    }

    async fn delete_many(&self, scope: &Scope, selection: &Selection) -> Result<Removed> {
        self.limits.check_selection(selection)?;
        let keys = TraceKeys::new(&self.prefix, scope);
        let mut invocation = self.scripts.delete_many.prepare_invoke();
        invocation
            .key(&keys.meta)
            .key(&keys.exp)
            .key(&keys.info)
            .arg(&keys.slot_prefix)
            .arg(&keys.channel)
            .arg(self.clock.deadline_ms(self.timeout));
        match selection {
            Selection::Keys(list) => {
                invocation.arg("k");
                for k in list {
                    invocation.arg(k.as_str());
                }
            }
            Selection::Prefix(p) => {
                invocation.arg("p").arg(p.as_str());
            }
        }
        let mut conn = self.conn.get().await?;
        let reply: Vec<Value> = invocation.invoke_async(&mut conn).await?;
        match reply_code(&reply)? {
            LATE => Err(late()),
            0 => Ok(Removed {
                deleted: reply.len().saturating_sub(2) as u64,
                version: field(&reply, 1)? as u64,
                keys: reply[2..].iter().map(text).collect::<Result<_>>()?,
            }),
            other => Err(Error::Internal(format!(
                "redis: delete_many script answered {other}"
            ))),
        }
    }

    async fn watch(&self, scope: &Scope, prefix: &str) -> Result<ChangeStream> {
        let channel = TraceKeys::new(&self.prefix, scope).channel;
        self.hub.watch(channel, prefix.to_owned()).await
    }

    async fn ping(&self) -> Result<()> {
        let mut conn = self.conn.get().await?;
        // TIME rather than PING: it also tells how far Redis's clock is from
        // ours (for the deadlines of writes).
        let sent = local_ms();
        let (seconds, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await?;
        self.clock
            .learn(sent, seconds * 1000 + micros / 1000, local_ms());
        Ok(())
    }
}

/// What the hub hands its watchers.
#[derive(Debug, Clone)]
enum Signal {
    Change(Change),
    Broken(String),
}

struct Channel {
    tx: broadcast::Sender<Signal>,
    watchers: usize,
}

type Channels = Arc<Mutex<HashMap<String, Channel>>>;

/// Multiplexes every Watch over one RESP3 pub/sub connection.
struct WatchHub {
    /// Serialises (un)subscribing so a channel's Redis subscription always
    /// matches whether it has watchers.
    conn: tokio::sync::Mutex<ConnectionManager>,
    channels: Channels,
    /// Bound on a new watch's wait for its subscription (its turn at the
    /// lock included), so watches fail fast while Redis hangs.
    timeout: Duration,
}

impl WatchHub {
    fn new(
        client: redis::Client,
        config: ConnectionManagerConfig,
        timeout: Duration,
    ) -> Result<Arc<Self>> {
        let channels: Channels = Arc::default();
        let dispatch = channels.clone();
        let config = config
            .set_push_sender(move |push: redis::PushInfo| {
                dispatch_push(&dispatch, push);
                Ok::<(), std::convert::Infallible>(())
            })
            .set_automatic_resubscription();
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| Error::Internal(format!("redis pub/sub config: {e}")))?;
        Ok(Arc::new(Self {
            conn: tokio::sync::Mutex::new(conn),
            channels,
            timeout,
        }))
    }

    /// Subscribes (or joins the subscription of) `channel` within the
    /// hub's timeout: `UNAVAILABLE` when Redis does not answer in time.
    async fn watch(self: &Arc<Self>, channel: String, prefix: String) -> Result<ChangeStream> {
        match tokio::time::timeout(self.timeout, self.join(&channel)).await {
            Ok(Ok(rx)) => Ok(self.stream(channel, prefix, rx)),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                // The SUBSCRIBE may still reach Redis later: undo it then
                // unless somebody watches the channel by that time.
                let hub = self.clone();
                let stale = channel.clone();
                tokio::spawn(async move { hub.unsubscribe_if_unwatched(stale).await });
                Err(Error::Unavailable(format!(
                    "Redis did not confirm the subscription within redis.timeout ({:?})",
                    self.timeout
                )))
            }
        }
    }

    /// Subscribes the channel in Redis unless it has watchers already. A
    /// subscription on a connection that died with a Redis restart fails
    /// once while the connection manager reconnects: it is tried once more.
    async fn join(&self, channel: &str) -> Result<broadcast::Receiver<Signal>> {
        let mut conn = self.conn.lock().await;
        let existing = {
            let mut channels = lock(&self.channels);
            channels.get_mut(channel).map(|c| {
                c.watchers += 1;
                c.tx.subscribe()
            })
        };
        if let Some(rx) = existing {
            return Ok(rx);
        }
        let (tx, rx) = broadcast::channel(WATCH_BUFFER);
        lock(&self.channels).insert(channel.to_owned(), Channel { tx, watchers: 1 });
        // Until Redis confirms, the entry is this call's alone (the lock is
        // held): if the call is dropped (timed out), the entry goes too, so
        // no later watcher joins a subscription that was never made.
        struct Unconfirmed<'a>(&'a Channels, Option<&'a str>);
        impl Drop for Unconfirmed<'_> {
            fn drop(&mut self) {
                if let Some(channel) = self.1 {
                    lock(self.0).remove(channel);
                }
            }
        }
        let mut unconfirmed = Unconfirmed(&self.channels, Some(channel));
        let mut subscribed = conn.subscribe(channel).await;
        if let Err(e) = &subscribed
            && (e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error())
        {
            subscribed = conn.subscribe(channel).await;
        }
        subscribed?;
        unconfirmed.1 = None;
        Ok(rx)
    }

    async fn unsubscribe_if_unwatched(&self, channel: String) {
        let mut conn = self.conn.lock().await;
        let unwatched = !lock(&self.channels).contains_key(&channel);
        if unwatched {
            let _ = tokio::time::timeout(self.timeout, conn.unsubscribe(&channel)).await;
        }
    }

    fn stream(
        self: &Arc<Self>,
        channel: String,
        prefix: String,
        rx: broadcast::Receiver<Signal>,
    ) -> ChangeStream {
        let guard = WatchGuard {
            hub: Arc::downgrade(self),
            channel: Some(channel),
        };
        let stream = BroadcastStream::new(rx)
            .filter_map(move |item| {
                let out = match item {
                    Ok(Signal::Change(c)) if c.matches(&prefix) => Some(Ok(c)),
                    Ok(Signal::Change(_)) => None,
                    Ok(Signal::Broken(why)) => Some(Err(Error::Unavailable(why))),
                    Err(BroadcastStreamRecvError::Lagged(missed)) => {
                        Some(Err(Error::WatchLagged { missed }))
                    }
                };
                futures::future::ready(out)
            })
            .scan((false, guard), |(ended, _guard), item| {
                if *ended {
                    return futures::future::ready(None);
                }
                *ended = item.is_err();
                futures::future::ready(Some(item))
            });
        Box::pin(stream)
    }

    async fn release(&self, channel: String) {
        let mut conn = self.conn.lock().await;
        let last = {
            let mut channels = lock(&self.channels);
            match channels.get_mut(&channel) {
                Some(c) if c.watchers > 1 => {
                    c.watchers -= 1;
                    false
                }
                Some(_) => {
                    channels.remove(&channel);
                    true
                }
                None => false,
            }
        };
        if last && let Err(e) = conn.unsubscribe(&channel).await {
            // The connection is gone; with it the subscription.
            tracing::debug!(error = %e, channel, "unsubscribe failed");
        }
    }
}

fn lock(channels: &Channels) -> std::sync::MutexGuard<'_, HashMap<String, Channel>> {
    channels.lock().unwrap_or_else(|p| p.into_inner())
}

/// Routes one push message from Redis to the watchers of its channel.
fn dispatch_push(channels: &Channels, push: redis::PushInfo) {
    match push.kind {
        PushKind::Message => {
            let (Some(Value::BulkString(channel)), Some(Value::BulkString(payload))) =
                (push.data.first(), push.data.get(1))
            else {
                return;
            };
            let channel = String::from_utf8_lossy(channel);
            let Some(change) = parse_change(payload) else {
                tracing::warn!(channel = %channel, "unparseable change notification");
                return;
            };
            if let Some(c) = lock(channels).get(channel.as_ref()) {
                let _ = c.tx.send(Signal::Change(change));
            }
        }
        PushKind::Disconnection => {
            for c in lock(channels).values() {
                let _ = c.tx.send(Signal::Broken(
                    "lost the pub/sub connection to Redis".into(),
                ));
            }
        }
        _ => {}
    }
}

/// Parses a script's notification: `P|ver|size|exp|key|ct`, `D|ver|key`,
/// `E|ver|key` or `C|ver|count`.
fn parse_change(payload: &[u8]) -> Option<Change> {
    let text = std::str::from_utf8(payload).ok()?;
    let (kind, rest) = text.split_once('|')?;
    let empty = |kind, key: &str, version| Change {
        kind,
        key: key.to_owned(),
        version,
        size_bytes: 0,
        content_type: String::new(),
        expires_at_ms: 0,
    };
    match kind {
        "P" => {
            let mut parts = rest.splitn(5, '|');
            let version = parts.next()?.parse().ok()?;
            let size_bytes = parts.next()?.parse().ok()?;
            let expires_at_ms = parts.next()?.parse().ok()?;
            let key = parts.next()?.to_owned();
            let content_type = parts.next()?.to_owned();
            Some(Change {
                kind: ChangeKind::Put,
                key,
                version,
                size_bytes,
                content_type,
                expires_at_ms,
            })
        }
        "D" | "E" => {
            let (version, key) = rest.split_once('|')?;
            let kind = if kind == "D" {
                ChangeKind::Deleted
            } else {
                ChangeKind::Expired
            };
            Some(empty(kind, key, version.parse().ok()?))
        }
        "C" => {
            let (version, _count) = rest.split_once('|')?;
            Some(empty(ChangeKind::Cleared, "", version.parse().ok()?))
        }
        _ => None,
    }
}

/// Releases a watcher's share of its channel when its stream is dropped.
struct WatchGuard {
    hub: Weak<WatchHub>,
    channel: Option<String>,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let (Some(hub), Some(channel)) = (self.hub.upgrade(), self.channel.take()) else {
            return;
        };
        // Unsubscribing talks to Redis, which Drop cannot wait for.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { hub.release(channel).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_notification() {
        let p = parse_change(b"P|7|5|1700000000000|a/b|text/plain; x=|y").expect("put");
        assert_eq!(p.kind, ChangeKind::Put);
        assert_eq!(
            (p.version, p.size_bytes, p.expires_at_ms),
            (7, 5, 1_700_000_000_000)
        );
        assert_eq!(
            (p.key.as_str(), p.content_type.as_str()),
            ("a/b", "text/plain; x=|y")
        );
        assert_eq!(
            parse_change(b"D|8|k").map(|c| (c.kind, c.version)),
            Some((ChangeKind::Deleted, 8))
        );
        assert_eq!(
            parse_change(b"E|3|k").map(|c| c.kind),
            Some(ChangeKind::Expired)
        );
        assert_eq!(
            parse_change(b"C|9|4").map(|c| (c.kind, c.version)),
            Some((ChangeKind::Cleared, 9))
        );
        assert!(parse_change(b"X|1").is_none());
        assert!(parse_change(b"P|x|1|1|k|c").is_none());
    }
}
