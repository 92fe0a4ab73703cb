//! Tenants' subscriptions: made through the API (kept in the process, or
//! in Redis when runs are durable) or declared in the config. Every
//! replica reads them from a copy refreshed each `webhooks.poll` (when
//! their version in Redis moved) and at once after its own changes, so a
//! run's start never waits on Redis for them.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
};

use serde::{Deserialize, Serialize};

use super::sign::Secret;
use crate::{
    error::Error,
    shared_state::{SharedState, hex, redis_error},
};

/// A tenant's subscription as kept (its secrets with it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stored {
    /// Its id.
    pub id: String,
    /// Its tenant.
    pub tenant: String,
    /// Where.
    pub url: String,
    /// What it asks for, as given (checked).
    pub events: Vec<String>,
    /// What it is for.
    pub description: String,
    /// When it was made.
    pub created_ms: i64,
    /// The current secret's text.
    pub secret: String,
    /// The previous secret's text while it still signs.
    #[serde(default)]
    pub previous: String,
    /// Until when the previous one signs (ms since the epoch).
    #[serde(default)]
    pub previous_until_ms: i64,
    /// Declared in the config.
    #[serde(default)]
    pub from_config: bool,
}

impl Stored {
    /// The secrets it signs with at `now_ms`: the current one, and the
    /// previous one during a rotation's overlap.
    pub fn secrets(&self, now_ms: i64) -> Vec<Secret> {
        let mut out: Vec<Secret> = Secret::parse(&self.secret).into_iter().collect();
        if !self.previous.is_empty() && self.previous_until_ms > now_ms {
            out.extend(Secret::parse(&self.previous));
        }
        out
    }
}

/// Subscriptions by tenant.
type ByTenant = HashMap<String, Arc<[Arc<Stored>]>>;

/// Where API-made subscriptions are kept.
enum Keep {
    Memory(RwLock<Vec<Stored>>),
    Redis(Arc<SharedState>),
}

/// The tenants' subscriptions (see the module docs).
pub struct Tenants {
    keep: Keep,
    config: Vec<Stored>,
    /// The copy runs read: its version, and by tenant, config ones first.
    copy: RwLock<(i64, ByTenant)>,
}

impl Tenants {
    /// The subscriptions kept in `shared`'s Redis (or, without, in the
    /// process), and `config`'s.
    pub fn new(shared: Option<Arc<SharedState>>, config: Vec<Stored>) -> Self {
        let keep = match shared {
            Some(s) => Keep::Redis(s),
            None => Keep::Memory(RwLock::new(Vec::new())),
        };
        let t = Self {
            keep,
            config,
            copy: RwLock::new((-1, HashMap::new())),
        };
        t.rebuild(-1, Vec::new());
        t
    }

    fn rebuild(&self, version: i64, kept: Vec<Stored>) {
        let mut by: HashMap<String, Vec<Arc<Stored>>> = HashMap::new();
        for s in self.config.iter().cloned().chain(kept) {
            by.entry(s.tenant.clone()).or_default().push(Arc::new(s));
        }
        for list in by.values_mut() {
            list.sort_by(|a, b| {
                (!a.from_config, a.created_ms, &a.id).cmp(&(!b.from_config, b.created_ms, &b.id))
            });
        }
        let by = by.into_iter().map(|(k, v)| (k, v.into())).collect();
        let mut copy = self.copy.write().unwrap_or_else(|p| p.into_inner());
        // Never back to an older version (two refreshes racing).
        if version >= copy.0 || version <= 0 {
            *copy = (version, by);
        }
    }

    /// A tenant's subscriptions, as this replica's copy has them.
    pub fn of(&self, tenant: &str) -> Arc<[Arc<Stored>]> {
        self.copy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .get(tenant)
            .cloned()
            .unwrap_or_else(|| Vec::new().into())
    }

    /// One of a tenant's subscriptions.
    pub fn find(&self, tenant: &str, id: &str) -> Option<Arc<Stored>> {
        self.of(tenant).iter().find(|s| s.id == id).cloned()
    }

    fn hash_key(shared: &SharedState) -> String {
        shared.plain_key("wh:subs")
    }

    fn version_key(shared: &SharedState) -> String {
        shared.plain_key("wh:subs:v")
    }

    /// Reads the kept subscriptions again when they changed (in Redis:
    /// their version moved).
    pub async fn refresh(&self) -> Result<(), Error> {
        match &self.keep {
            Keep::Memory(list) => {
                let kept = list.read().unwrap_or_else(|p| p.into_inner()).clone();
                self.rebuild(0, kept);
                Ok(())
            }
            Keep::Redis(shared) => {
                let mut c = shared.conn().await?;
                let version: Option<i64> = redis::cmd("GET")
                    .arg(Self::version_key(shared))
                    .query_async(&mut c)
                    .await
                    .map_err(redis_error)?;
                let version = version.unwrap_or(0);
                if self.copy.read().unwrap_or_else(|p| p.into_inner()).0 == version {
                    return Ok(());
                }
                let all: HashMap<String, String> = redis::cmd("HGETALL")
                    .arg(Self::hash_key(shared))
                    .query_async(&mut c)
                    .await
                    .map_err(redis_error)?;
                let kept = all
                    .values()
                    .filter_map(|v| serde_json::from_str(v).ok())
                    .collect();
                self.rebuild(version, kept);
                Ok(())
            }
        }
    }

    /// Keeps `s` (a new one, or a changed one), then refreshes the copy.
    pub async fn put(&self, s: Stored) -> Result<(), Error> {
        match &self.keep {
            Keep::Memory(list) => {
                let mut l = list.write().unwrap_or_else(|p| p.into_inner());
                l.retain(|o| !(o.tenant == s.tenant && o.id == s.id));
                l.push(s);
            }
            Keep::Redis(shared) => {
                let raw = serde_json::to_string(&s).map_err(|e| Error::Internal(e.to_string()))?;
                let mut c = shared.conn().await?;
                let _: redis::Value = redis::pipe()
                    .hset(
                        Self::hash_key(shared),
                        format!("{}/{}", hex(&s.tenant), s.id),
                        raw,
                    )
                    .incr(Self::version_key(shared), 1)
                    .query_async(&mut c)
                    .await
                    .map_err(redis_error)?;
            }
        }
        self.refresh().await
    }

    /// Forgets a tenant's subscription; false when it was not kept.
    pub async fn remove(&self, tenant: &str, id: &str) -> Result<bool, Error> {
        let removed = match &self.keep {
            Keep::Memory(list) => {
                let mut l = list.write().unwrap_or_else(|p| p.into_inner());
                let before = l.len();
                l.retain(|o| !(o.tenant == tenant && o.id == id));
                before != l.len()
            }
            Keep::Redis(shared) => {
                let mut c = shared.conn().await?;
                let (n, _): (i64, i64) = redis::pipe()
                    .hdel(Self::hash_key(shared), format!("{}/{id}", hex(tenant)))
                    .incr(Self::version_key(shared), 1)
                    .query_async(&mut c)
                    .await
                    .map_err(redis_error)?;
                n == 1
            }
        };
        self.refresh().await?;
        Ok(removed)
    }
}
