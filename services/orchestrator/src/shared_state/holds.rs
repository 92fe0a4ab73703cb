//! The holds on tenants' period budgets that this replica's model calls
//! have in flight (see `shared_state::periods`), renewed in Redis every
//! [`HOLD_TTL`] / 3 by one task while any is: a replica that dies stops
//! renewing, and its holds lapse within [`HOLD_TTL`]. A leaf: it knows the
//! connection and its script, not the run store.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, LazyLock, Mutex, Weak},
    time::Duration,
};

use baton_store::redis::conn::Connection;
use redis::Script;

use super::clock::NOW;

/// How long a hold outlives the last renewal of its replica.
pub const HOLD_TTL: Duration = Duration::from_secs(15);

static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{NOW}{}",
        r"
-- KEYS[1] holds; ARGV[1] time to live (ms), then the ids of holds still in
-- flight. Returns how many had lapsed.
local lapsed = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[i])
  else
    lapsed = lapsed + 1
  end
end
return lapsed
"
    ))
});

/// The holds this replica's calls have in flight, by tenant (its holds
/// key), renewed every [`HOLD_TTL`] / 3 by one task while any is.
#[derive(Default)]
pub struct LiveHolds {
    by_key: Mutex<HashMap<String, HashSet<String>>>,
    renewing: Mutex<bool>,
}

impl LiveHolds {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashSet<String>>> {
        self.by_key.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn add(self: &Arc<Self>, key: &str, id: &str, conn: &Connection) {
        self.map()
            .entry(key.to_owned())
            .or_default()
            .insert(id.to_owned());
        let mut renewing = self.renewing.lock().unwrap_or_else(|p| p.into_inner());
        if !*renewing && tokio::runtime::Handle::try_current().is_ok() {
            *renewing = true;
            tokio::spawn(renew(Arc::downgrade(self), conn.clone()));
        }
    }

    pub(crate) fn remove(&self, key: &str, id: &str) {
        let mut map = self.map();
        if let Some(ids) = map.get_mut(key) {
            ids.remove(id);
            if ids.is_empty() {
                map.remove(key);
            }
        }
    }

    /// How many holds this replica has in flight.
    pub fn len(&self) -> usize {
        self.map().values().map(HashSet::len).sum()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Renews the live holds until none is left (the next hold starts it
/// again) or their owner is gone.
async fn renew(holds: Weak<LiveHolds>, conn: Connection) {
    let mut tick = tokio::time::interval(HOLD_TTL / 3);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(live) = holds.upgrade() else { return };
        let batch: Vec<(String, Vec<String>)> = {
            let map = live.map();
            if map.is_empty() {
                *live.renewing.lock().unwrap_or_else(|p| p.into_inner()) = false;
                return;
            }
            map.iter()
                .map(|(k, ids)| (k.clone(), ids.iter().cloned().collect()))
                .collect()
        };
        drop(live);
        for (key, ids) in batch {
            let Ok(mut c) = conn.get().await else { break };
            let mut script = RENEW.prepare_invoke();
            script.key(&key).arg(HOLD_TTL.as_millis() as i64);
            for id in &ids {
                script.arg(id);
            }
            let renewed: Result<i64, _> = script.invoke_async(&mut c).await;
            match renewed {
                Ok(0) => {}
                Ok(n) => {
                    tracing::warn!(
                        lapsed = n,
                        "holds on a tenant's model budgets lapsed in flight"
                    )
                }
                Err(e) => {
                    tracing::warn!(error = %e, "holds on a tenant's model budgets were not renewed")
                }
            }
        }
    }
}
