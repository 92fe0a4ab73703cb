//! Experiments' records in Redis (`app::experiment_store`), per tenant, every key
//! kept `runs.retention` from its last write and sharing the tenant's hash
//! tag: `{prefix}:exp:{tenant}:r:<id>` the record (`baton.v1.Experiment`,
//! protobuf), `…:s:<id>` its summary (the record without its cases, what
//! a listing reads), `…:n:<name>` the id of the newest experiment of that
//! name (written at its first write only, so a running experiment never
//! takes its name back from a newer one), and `…:index`, a sorted set of
//! ids by start time (entries older than the retention are trimmed at each
//! first write; an id whose record expired is dropped as a listing finds
//! it); `…:c:<id>` a request to cancel a running experiment (CancelExperiment
//! on any replica; the one running it looks every second), kept an hour.

use super::{SharedState, hex, redis_error};
use crate::error::Error;

/// One write of an experiment's record.
pub struct ExperimentWrite<'a> {
    /// Its id.
    pub id: &'a str,
    /// Its name.
    pub name: &'a str,
    /// When it started (ms since the Unix epoch).
    pub started_ms: i64,
    /// The record.
    pub record: &'a [u8],
    /// The record without its cases.
    pub summary: &'a [u8],
    /// Whether this is its first write.
    pub first: bool,
}

impl SharedState {
    fn experiment_key(&self, tenant: &str, part: &str) -> String {
        self.key("exp", &hex(tenant), part)
    }

    /// Writes an experiment's record (new or updated) for its retention.
    pub async fn put_experiment(&self, tenant: &str, w: ExperimentWrite<'_>) -> Result<(), Error> {
        let mut c = self.conn().await?;
        let ttl = self.retention().as_millis().max(1) as u64;
        let index = self.experiment_key(tenant, "index");
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("SET")
            .arg(self.experiment_key(tenant, &format!("r:{}", w.id)))
            .arg(w.record)
            .arg("PX")
            .arg(ttl)
            .ignore()
            .cmd("SET")
            .arg(self.experiment_key(tenant, &format!("s:{}", w.id)))
            .arg(w.summary)
            .arg("PX")
            .arg(ttl)
            .ignore()
            .cmd("ZADD")
            .arg(&index)
            .arg(w.started_ms)
            .arg(w.id)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&index)
            .arg(ttl)
            .ignore();
        if w.first {
            pipe.cmd("SET")
                .arg(self.experiment_key(tenant, &format!("n:{}", w.name)))
                .arg(w.id)
                .arg("PX")
                .arg(ttl)
                .ignore()
                .cmd("ZREMRANGEBYSCORE")
                .arg(&index)
                .arg("-inf")
                .arg(format!("({}", w.started_ms - ttl as i64))
                .ignore();
        }
        pipe.query_async::<()>(&mut c).await.map_err(redis_error)
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

    /// Asks the replica running experiment `id` to cancel it.
    pub async fn request_experiment_cancel(&self, tenant: &str, id: &str) -> Result<(), Error> {
        let mut c = self.conn().await?;
        redis::cmd("SET")
            .arg(self.experiment_key(tenant, &format!("c:{id}")))
            .arg(1)
            .arg("PX")
            .arg(3_600_000)
            .query_async::<()>(&mut c)
            .await
            .map_err(redis_error)
    }

    /// Whether experiment `id` was asked to cancel.
    pub async fn experiment_cancel_requested(&self, tenant: &str, id: &str) -> Result<bool, Error> {
        let mut c = self.conn().await?;
        redis::cmd("EXISTS")
            .arg(self.experiment_key(tenant, &format!("c:{id}")))
            .query_async(&mut c)
            .await
            .map_err(redis_error)
    }

    /// The id of the newest experiment named `name`, if kept.
    pub async fn experiment_named(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<String>, Error> {
        let mut c = self.conn().await?;
        redis::cmd("GET")
            .arg(self.experiment_key(tenant, &format!("n:{name}")))
            .query_async(&mut c)
            .await
            .map_err(redis_error)
    }

    /// A page of the tenant's experiments' summaries, newest first, from
    /// `offset`, and whether more follow.
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
            .map(|id| self.experiment_key(tenant, &format!("s:{id}")))
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
