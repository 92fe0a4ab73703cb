//! The Redis backend ([`RedisStore`]), on a single node or a Redis Cluster.
//!
//! Every mutation is one Lua script (`lua/*.lua`, each prefixed with
//! `lua/prelude.lua`), so a put's version check, quota check, write, index
//! update and change notification happen atomically. All keys of a tenant's
//! trace carry one hash tag ([`keys`]), so a script touches one Cluster slot
//! and works unchanged on Redis Cluster. Reads of one slot are a single
//! `HMGET`. Scripts answer a status code first ([`reply`]); writes carry a
//! deadline in Redis's clock ([`clock`]) so a write that timed out here is
//! never applied late. Watch is fed by Redis pub/sub ([`watch`]).
//!
//! [`config`] is how to reach Redis; [`conn`] makes the connections, which
//! reconnect by themselves (`ConnectionManager`, or the cluster client), so
//! calls fail with `UNAVAILABLE` while Redis is away and work again once it
//! is back, without a restart. The orchestrator's durable runs use the same
//! two modules.

mod clock;
pub mod config;
pub mod conn;
mod keys;
mod reply;
mod watch;

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use redis::{IntoConnectionInfo, ProtocolVersion, Script, Value};

pub use self::config::{RedisConfig, RedisConfigError};
use self::{
    clock::{Clock, local_ms},
    conn::{Connection, connection_config},
    keys::TraceKeys,
    reply::{LATE, field, int, late, reply_code, text},
    watch::WatchHub,
};
use crate::{
    ContextStore, TRACE_RETENTION,
    batch::{Removed, Selection},
    change::ChangeStream,
    error::{Error, Result},
    key::{Key, Scope},
    limits::Limits,
    page::{Listing, MAX_PAGE_SIZE, Page},
    slot::{Put, Slot, SlotMeta, Written},
};

/// The scripts of the mutations and of a listing.
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
            conn::client(config, info).map_err(bad)?,
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
            .arg(TRACE_RETENTION.as_millis() as u64)
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
            .arg(page.size.clamp(1, MAX_PAGE_SIZE))
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
            .arg(TRACE_RETENTION.as_millis() as u64)
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
