//! Experiments' records in Redis (`eval::store`): each a string key
//! `{prefix}:exp:{tenant}:<id>` holding the record (`baton.v1.Experiment`,
//! protobuf), kept `runs.retention` from its last write, and a sorted set
//! per tenant, `{prefix}:exp:{tenant}:index`, of ids by start time (an id
//! whose record expired is dropped from it as a listing finds it); a name
//! is looked up in the hash `{prefix}:exp:{tenant}:names`. The three keys
//! share the tenant's hash tag.

use super::{SharedState, hex, redis_error};
use crate::error::Error;

impl SharedState {
    fn experiment_key(&self, tenant: &str, part: &str) -> String {
        self.key("exp", &hex(tenant), part)
    }

    /// Writes experiment `id`'s `record` (named `name`, started at
    /// `started_ms`) for its retention.
    pub async fn put_experiment(
        &self,
        tenant: &str,
        id: &str,
        name: &str,
        started_ms: i64,
        record: &[u8],
    ) -> Result<(), Error> {
        let mut c = self.conn().await?;
        let ttl = self.retention().as_millis().max(1) as u64;
        redis::pipe()
            .atomic()
            .cmd("SET")
            .arg(self.experiment_key(tenant, &format!("r:{id}")))
            .arg(record)
            .arg("PX")
            .arg(ttl)
            .ignore()
            .cmd("ZADD")
            .arg(self.experiment_key(tenant, "index"))
            .arg(started_ms)
            .arg(id)
            .ignore()
            .cmd("HSET")
            .arg(self.experiment_key(tenant, "names"))
            .arg(name)
            .arg(id)
            .ignore()
            .cmd("PEXPIRE")
            .arg(self.experiment_key(tenant, "index"))
            .arg(ttl)
            .ignore()
            .cmd("PEXPIRE")
            .arg(self.experiment_key(tenant, "names"))
            .arg(ttl)
            .ignore()
            .query_async::<()>(&mut c)
            .await
            .map_err(redis_error)
    }

    /// Experiment `id`'s record, if kept.
    pub async fn experiment(&self, tenant: &str, id: &str) -> Result<Option<Vec<u8>>, Error> {
        let mut c = self.conn().await?;
        redis::cmd("GET")
            .arg(self.experiment_key(tenant, &format!("r:{id}")))
            .query_async(&mut c)
            .await
            .map_err(redis_error)
    }

    /// The id of the experiment named `name`, if any.
    pub async fn experiment_named(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<String>, Error> {
        let mut c = self.conn().await?;
        redis::cmd("HGET")
            .arg(self.experiment_key(tenant, "names"))
            .arg(name)
            .query_async(&mut c)
            .await
            .map_err(redis_error)
    }

    /// A page of the tenant's experiments, newest first, from `offset`:
    /// their records, and whether more follow.
    pub async fn experiments(
        &self,
        tenant: &str,
        offset: usize,
        count: usize,
    ) -> Result<(Vec<Vec<u8>>, bool), Error> {
        let mut c = self.conn().await?;
        let index = self.experiment_key(tenant, "index");
        let ids: Vec<String> = redis::cmd("ZREVRANGE")
            .arg(&index)
            .arg(offset)
            .arg(offset + count)
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        let more = ids.len() > count;
        let ids = &ids[..ids.len().min(count)];
        if ids.is_empty() {
            return Ok((Vec::new(), false));
        }
        let keys: Vec<String> = ids
            .iter()
            .map(|id| self.experiment_key(tenant, &format!("r:{id}")))
            .collect();
        let records: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
            .arg(&keys)
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        let gone: Vec<&String> = ids
            .iter()
            .zip(&records)
            .filter(|(_, r)| r.is_none())
            .map(|(id, _)| id)
            .collect();
        if !gone.is_empty() {
            redis::cmd("ZREM")
                .arg(&index)
                .arg(&gone)
                .query_async::<()>(&mut c)
                .await
                .map_err(redis_error)?;
        }
        Ok((records.into_iter().flatten().collect(), more))
    }
}
