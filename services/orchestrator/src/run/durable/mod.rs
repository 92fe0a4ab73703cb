//! Runs kept in Redis (`runs.store = "redis"`): every run's event log and
//! metadata, so any replica serves `GetRun`, `ListRuns` and `WatchRun` of
//! any run, and an event a client has seen is in Redis first.
//!
//! Keys (every key of one run shares the hash tag `{run_id}`, so Redis
//! Cluster works):
//!
//! - `{prefix}:run:{<id>}:log` — a Stream of the run's events; the entry id
//!   of event `seq` is `0-<seq>`, so `WatchRun(after_seq)` is a range read
//!   (`XRANGE (0-<after_seq> +`) and a blocking tail (`XREAD BLOCK`).
//! - `{prefix}:run:{<id>}:meta` — a hash: the fencing `epoch`, tenant, kind,
//!   target, trace, start, detach flag, and once ended the status, end,
//!   output, run context, usage and error; `last_seq`; `wait_ap` and
//!   `wait_in`, how many approvals and input requests wait for a person
//!   (kept by the append script from the questions' journal records).
//! - `{prefix}:runs:<hex tenant>` — the tenant's runs, a sorted set of run
//!   ids (UUIDv7, so lexical order is start order) for `ListRuns`; entries
//!   whose run has expired are dropped when a listing meets them.
//!
//! - `{prefix}:leases` — every running run's lease end (Redis's clock, ms),
//!   where replicas look for runs whose owner stopped renewing.
//! - `{prefix}:mcp-session:<id>` — an MCP session's `initialize` (the MCP
//!   face's, [`sessions`]).
//!
//! Appends go through one script that checks the run's `epoch` first: a
//! writer whose epoch is not the run's current one writes nothing
//! ([`Append::Fenced`]). A run is owned by one replica through a lease
//! (`owner`, `lease_until` in its hash): the owner renews it; once it
//! lapses any replica may [`RedisRuns::claim`] the run, which raises the
//! epoch — from then on the former owner, paused or partitioned, cannot
//! write a byte of the run. A run's keys live `run_timeout` plus
//! `runs.retention` from its start, and `runs.retention` from its end.

mod append;
mod claims;
mod delete;
pub mod inbox;
mod lease;
mod list;
mod meta;
pub mod sequencer;

use std::{collections::HashMap, sync::Arc, time::Duration};

use lease::decode_claim;
pub use lease::{Abandon, Claim};
pub use meta::{RunEnd, RunMeta};
use meta::{decode_entries, decode_meta};

use baton_proto::v1 as pb;
use baton_store::redis::{
    RedisConfig,
    conn::{ConnRef, Connection},
};
use prost::Message as _;
use redis::{Script, Value};

use crate::error::Error;
use crate::shared_state::SharedState;

pub use super::clock::{mono_ms, now_ms};

/// Webhook deliveries an append writes with its events: each to its
/// stream's list (key, delivery), the lists kept `keep_ms` (see
/// `crate::webhook::outbox`).
#[derive(Debug, Default)]
pub struct Pushes {
    /// (list key, delivery) pairs, in order.
    pub items: Vec<(String, String)>,
    /// How long the lists are kept.
    pub keep_ms: u64,
}

/// How an append ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Append {
    /// Written.
    Done,
    /// Refused: the writer's epoch is not the run's (another replica owns
    /// the run now). Nothing was written.
    Fenced,
    /// Refused: the run's record is gone (its keys expired, or Redis lost
    /// them: restarted without persistence). Nothing was written.
    Gone,
}

/// Runs in Redis (see the module docs).
pub struct RedisRuns {
    /// The connection, clock and keys every replica shares (this run
    /// store's connection is the one pool of `crate::shared_state`).
    shared: Arc<SharedState>,
    config: RedisConfig,
    retention: Duration,
    append: Script,
    /// This replica, as the runs it owns name it.
    owner: String,
    /// How long a lease lasts unless renewed.
    lease: Duration,
    create: Script,
    renew: Script,
    release: Script,
    claim: Script,
}

/// An event as the run's log in Redis keeps it: its seq, and its whole
/// encoding (the run's ids included).
pub trait Loggable {
    /// Its seq.
    fn seq(&self) -> u64;
    /// Its encoding.
    fn encoded(&self) -> Vec<u8>;
}

impl Loggable for pb::RunEvent {
    fn seq(&self) -> u64 {
        self.seq
    }

    fn encoded(&self) -> Vec<u8> {
        self.encode_to_vec()
    }
}

/// An event as the sequencer encoded it: not encoded again.
impl Loggable for crate::run::log::PackedEvent {
    fn seq(&self) -> u64 {
        crate::run::log::PackedEvent::seq(self)
    }

    fn encoded(&self) -> Vec<u8> {
        self.to_vec()
    }
}

pub(super) use crate::shared_state::{redis_error, store_error};

pub use crate::shared_state::OpenError;

impl RedisRuns {
    /// Runs in the Redis `config` names, kept `retention` after they end,
    /// owned by this replica (`owner`) through leases of `lease`. Connects
    /// lazily: this succeeds while Redis is away.
    pub fn new(
        config: &RedisConfig,
        retention: Duration,
        owner: &str,
        lease: Duration,
    ) -> Result<Self, OpenError> {
        let shared = SharedState::open(config, owner, retention)?;
        Ok(Self::with_shared(shared, config, retention, lease))
    }

    /// Runs kept in `shared` (the replica's one shared state, whose
    /// replica owns them): see [`Self::new`].
    pub fn with_shared(
        shared: Arc<SharedState>,
        config: &RedisConfig,
        retention: Duration,
        lease: Duration,
    ) -> Self {
        let owner = shared.replica().to_owned();
        Self {
            shared,
            config: config.clone(),
            retention,
            append: Script::new(append::APPEND),
            owner,
            lease,
            create: Script::new(&format!("{}{}", lease::NOW, lease::CREATE)),
            renew: Script::new(&format!("{}{}", lease::NOW, lease::RENEW)),
            release: Script::new(lease::RELEASE),
            claim: Script::new(&format!("{}{}", lease::NOW, lease::CLAIM)),
        }
    }

    /// What replicas share, of which this run store is part.
    pub fn shared(&self) -> &Arc<SharedState> {
        &self.shared
    }

    /// This replica's name in the runs it owns.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// How long a lease lasts unless renewed.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    fn meta_key(&self, run_id: &str) -> String {
        format!("{}:run:{{{run_id}}}:meta", self.config.key_prefix)
    }

    fn log_key(&self, run_id: &str) -> String {
        format!("{}:run:{{{run_id}}}:log", self.config.key_prefix)
    }

    fn inbox_key(&self, run_id: &str) -> String {
        format!("{}:run:{{{run_id}}}:inbox", self.config.key_prefix)
    }

    fn taken_key(&self, run_id: &str) -> String {
        format!("{}:run:{{{run_id}}}:taken", self.config.key_prefix)
    }

    fn journal_key(&self, run_id: &str) -> String {
        format!("{}:run:{{{run_id}}}:journal", self.config.key_prefix)
    }

    /// The records of a run's durable points, by unit (see
    /// [`crate::run::state::Replay`]).
    pub async fn journal(&self, run_id: &str) -> Result<HashMap<String, Vec<u8>>, Error> {
        let mut c = self.conn().await?;
        redis::cmd("HGETALL")
            .arg(self.journal_key(run_id))
            .query_async(&mut c)
            .await
            .map_err(redis_error)
    }

    /// The request that started a run, as it was sent (to resume it).
    pub async fn request(&self, run_id: &str) -> Result<Option<Vec<u8>>, Error> {
        let mut c = self.conn().await?;
        redis::cmd("HGET")
            .arg(self.meta_key(run_id))
            .arg("request")
            .query_async(&mut c)
            .await
            .map_err(redis_error)
    }

    fn leases_key(&self) -> String {
        format!("{}:leases", self.config.key_prefix)
    }

    fn index_key(&self, tenant: &str) -> String {
        let hex: String = tenant.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{}:runs:{hex}", self.config.key_prefix)
    }

    async fn conn(&self) -> Result<ConnRef, Error> {
        self.shared.conn().await
    }

    /// Whether Redis answers.
    pub async fn ping(&self) -> bool {
        let Ok(mut c) = self.conn().await else {
            return false;
        };
        redis::cmd("PING")
            .query_async::<String>(&mut c)
            .await
            .is_ok()
    }

    /// Records a new run (epoch 1) owned by this replica for a lease, and
    /// lists it under its tenant; its keys live `live_for` (its deadline)
    /// plus the retention, until it ends.
    pub async fn create(
        &self,
        meta: &RunMeta,
        request: &[u8],
        live_for: Duration,
    ) -> Result<u64, Error> {
        let (owner, lease) = (self.owner.as_str(), self.lease);
        let mut c = self.conn().await?;
        let ttl = (live_for + self.retention).as_millis() as i64;
        let mut invocation = self.create.prepare_invoke();
        invocation
            .key(self.meta_key(&meta.run_id))
            .arg(lease.as_millis() as i64)
            .arg(ttl);
        invocation.arg("request").arg(request);
        for (field, value) in [
            ("epoch", "1".to_owned()),
            ("owner", owner.to_owned()),
            ("tenant", meta.tenant.clone()),
            ("kind", (meta.kind as i32).to_string()),
            ("target", meta.target.clone()),
            ("trace_id", meta.trace_id.clone()),
            ("started_ms", meta.started_ms.to_string()),
            ("detached", u8::from(meta.detached).to_string()),
            ("status", (pb::RunStatus::Running as i32).to_string()),
            ("last_seq", "0".to_owned()),
        ] {
            invocation.arg(field).arg(value);
        }
        if let Some(origin) = &meta.forked_from {
            invocation.arg("ff").arg(origin.to_field());
            if origin.edited {
                invocation.arg("fe").arg("1");
            }
            // Not resumable until its history is written (see
            // [`Self::started`]).
            invocation.arg("starting").arg("1");
        }
        if let Some(link) = &meta.conversation {
            invocation.arg("cv").arg(link.to_field());
        }
        if let Some(experiment) = &meta.experiment {
            invocation.arg("ex").arg(experiment);
        }
        if let Some((schedule, tick)) = &meta.schedule {
            invocation.arg("sd").arg(schedule).arg("st").arg(tick);
        }
        if let Some(origin) = &meta.replay_of {
            invocation.arg("ro").arg(origin);
            invocation
                .arg("rs")
                .arg(u8::from(meta.replay_strict).to_string());
        }
        // The tenant's index and the lease set are keys of their own (not
        // the run's hash tag): separate commands, so a Cluster can route
        // each, sent together (one round trip on one connection). The
        // lease's score is this replica's clock until its first renewal.
        let (mut index_conn, mut leases_conn) = (self.conn().await?, self.conn().await?);
        let index = self.index_key(&meta.tenant);
        let leases = self.leases_key();
        let lease_end = now_ms() + lease.as_millis() as i64;
        let mut add_index = redis::cmd("ZADD");
        add_index.arg(&index).arg(0).arg(&meta.run_id);
        let mut add_lease = redis::cmd("ZADD");
        add_lease.arg(&leases).arg(lease_end).arg(&meta.run_id);
        // (A lease set entry ahead of Redis's clock is harmless: a claim
        // checks the run's own `lease_until`, set by the script.)
        let (created, indexed, leased) = futures::join!(
            invocation.invoke_async::<i64>(&mut c),
            add_index.query_async::<()>(&mut index_conn),
            add_lease.query_async::<()>(&mut leases_conn),
        );
        if created.map_err(redis_error)? == -1 {
            return Err(Error::AlreadyExists {
                field: "run_id",
                message: format!("run {:?} exists already", meta.run_id),
            });
        }
        indexed.map_err(redis_error)?;
        leased.map_err(redis_error)?;
        Ok(1)
    }

    /// Runs whose lease lapsed (by Redis's clock), at most `count`.
    pub async fn lapsed(&self, count: usize) -> Result<Vec<String>, Error> {
        let mut c = self.conn().await?;
        let (secs, micros): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        let now = secs * 1000 + micros / 1000;
        redis::cmd("ZRANGEBYSCORE")
            .arg(self.leases_key())
            .arg("-inf")
            .arg(format!("({now}"))
            .arg("LIMIT")
            .arg(0)
            .arg(count)
            .query_async(&mut c)
            .await
            .map_err(redis_error)
    }

    /// Takes a run whose lease lapsed over for this replica (see
    /// [`Claim`]); runs that are gone or ended leave the lease set.
    pub async fn claim(&self, run_id: &str) -> Result<Claim, Error> {
        self.claim_if(run_id, false).await
    }

    /// [`Self::claim`], also of a parked run whose wake-up time has not
    /// come (`parked`: a person answered it).
    async fn claim_if(&self, run_id: &str, parked: bool) -> Result<Claim, Error> {
        let (owner, lease) = (self.owner.as_str(), self.lease);
        let mut c = self.conn().await?;
        let reply: Vec<Value> = self
            .claim
            .key(self.meta_key(run_id))
            .arg(owner)
            .arg(lease.as_millis() as i64)
            .arg(u8::from(parked))
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        let claim = decode_claim(&reply);
        if let Claim::Claimed { .. } = &claim {
            redis::cmd("ZADD")
                .arg(self.leases_key())
                .arg(now_ms() + lease.as_millis() as i64)
                .arg(run_id)
                .query_async::<()>(&mut c)
                .await
                .map_err(redis_error)?;
        }
        if matches!(claim, Claim::Gone | Claim::Ended) {
            self.forget_lease(run_id).await;
        }
        Ok(claim)
    }

    /// Drops a run from the lease set (it ended); best effort.
    pub async fn forget_lease(&self, run_id: &str) {
        if let Ok(mut c) = self.conn().await {
            let _ = redis::cmd("ZREM")
                .arg(self.leases_key())
                .arg(run_id)
                .query_async::<()>(&mut c)
                .await;
        }
    }

    /// Appends events (each with its `seq`) to the run's log with the
    /// records of the durable points they end (`journal`: unit, record),
    /// and, with `end`, records how it ended and starts its retention;
    /// without, `usage` (the run's totals so far, when they changed) goes
    /// to its hash, for GetRun and ListRuns on every replica — all in one
    /// script, only while `epoch` is the run's.
    // Each argument is a part of the one script's call (see `APPEND`).
    #[allow(clippy::too_many_arguments)]
    pub async fn append(
        &self,
        run_id: &str,
        epoch: u64,
        events: &[impl Loggable],
        journal: &[(String, Vec<u8>)],
        end: Option<&RunEnd>,
        usage: Option<pb::Usage>,
        hooks: &Pushes,
    ) -> Result<Append, Error> {
        let mut c = self.conn().await?;
        let mut invocation = self.append.prepare_invoke();
        invocation
            .key(self.meta_key(run_id))
            .key(self.log_key(run_id))
            .key(self.journal_key(run_id))
            .key(self.inbox_key(run_id));
        for (key, _) in &hooks.items {
            invocation.key(key);
        }
        invocation.arg(epoch).arg(events.len());
        let ttl = if end.is_some() {
            self.retention.as_millis() as i64
        } else {
            0
        };
        let fields = match (end, usage) {
            (Some(end), _) => end.fields(),
            (None, Some(usage)) => vec![("usage", usage.encode_to_vec())],
            (None, None) => Vec::new(),
        };
        invocation
            .arg(ttl)
            .arg(fields.len())
            .arg(journal.len())
            .arg(hooks.items.len())
            .arg(hooks.keep_ms);
        for e in events {
            invocation.arg(e.seq()).arg(e.encoded());
        }
        for (field, value) in &fields {
            invocation.arg(*field).arg(value.as_slice());
        }
        for (unit, record) in journal {
            invocation.arg(unit).arg(record.as_slice());
        }
        for (_, raw) in &hooks.items {
            invocation.arg(raw);
        }
        let written: i64 = invocation.invoke_async(&mut c).await.map_err(redis_error)?;
        Ok(match written {
            1 => Append::Done,
            2 => Append::Gone,
            _ => Append::Fenced,
        })
    }

    /// At most `count` logged events after `after_seq`.
    pub async fn events_after(
        &self,
        run_id: &str,
        after_seq: u64,
        count: usize,
    ) -> Result<Vec<pb::RunEvent>, Error> {
        let mut c = self.conn().await?;
        let reply: Value = redis::cmd("XRANGE")
            .arg(self.log_key(run_id))
            .arg(format!("(0-{after_seq}"))
            .arg("+")
            .arg("COUNT")
            .arg(count)
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        decode_entries(&reply)
    }

    /// A connection of its own for [`Self::tail`], whose commands may block
    /// for `block` (plus the configured timeout).
    pub async fn tail_connection(&self, block: Duration) -> Result<ConnRef, Error> {
        Connection::dedicated(&self.config, block + self.config.timeout)
            .await
            .map_err(store_error)
    }

    /// The events after `after_seq`, waiting up to `block` for the first
    /// one when there is none yet (empty when none came).
    pub async fn tail(
        &self,
        conn: &mut ConnRef,
        run_id: &str,
        after_seq: u64,
        block: Duration,
        count: usize,
    ) -> Result<Vec<pb::RunEvent>, Error> {
        let reply: Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(count)
            .arg("BLOCK")
            .arg(block.as_millis().max(1) as u64)
            .arg("STREAMS")
            .arg(self.log_key(run_id))
            .arg(format!("0-{after_seq}"))
            .query_async(conn)
            .await
            .map_err(redis_error)?;
        // Nil on timeout; else [[key, entries]] (a map in RESP3).
        let streams = match reply {
            Value::Nil => return Ok(Vec::new()),
            Value::Array(items) => items,
            Value::Map(pairs) => pairs
                .into_iter()
                .map(|(k, v)| Value::Array(vec![k, v]))
                .collect(),
            other => {
                return Err(Error::Internal(format!(
                    "run store: XREAD answered {other:?}"
                )));
            }
        };
        let mut out = Vec::new();
        for stream in streams {
            if let Value::Array(mut kv) = stream
                && kv.len() == 2
            {
                out.extend(decode_entries(&kv.remove(1))?);
            }
        }
        Ok(out)
    }

    /// A run's metadata, `None` when it is unknown (or expired).
    pub async fn meta(&self, run_id: &str) -> Result<Option<RunMeta>, Error> {
        let mut c = self.conn().await?;
        let fields: HashMap<String, Vec<u8>> = redis::cmd("HGETALL")
            .arg(self.meta_key(run_id))
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(decode_meta(run_id, &fields))
    }

    /// Keeps an ended run's live scores (field `sc`, a `LiveScores`) while
    /// its record is kept: a run deleted meanwhile gets no record back.
    pub async fn set_scores(&self, run_id: &str, scores: &[u8]) -> Result<(), Error> {
        static SET: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
            redis::Script::new(
                "if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'sc', ARGV[1]) end return 0",
            )
        });
        let mut c = self.conn().await?;
        SET.key(self.meta_key(run_id))
            .arg(scores)
            .invoke_async::<i64>(&mut c)
            .await
            .map(|_| ())
            .map_err(redis_error)
    }
}
