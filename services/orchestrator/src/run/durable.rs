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
//!   output, run context, usage and error; `last_seq`.
//! - `{prefix}:runs:<hex tenant>` — the tenant's runs, a sorted set of run
//!   ids (UUIDv7, so lexical order is start order) for `ListRuns`; entries
//!   whose run has expired are dropped when a listing meets them.
//!
//! Appends go through one script that checks the run's `epoch` first: a
//! writer whose epoch is not the run's current one writes nothing
//! ([`Append::Fenced`]). A run's keys live `run_timeout` plus
//! `runs.retention` from its start, and `runs.retention` from its end.

use std::{collections::HashMap, time::Duration};

use baton_common::ids::TraceId;
use baton_context_store::{
    error::Error as StoreError,
    store::{
        redis::RedisConfig,
        redis_conn::{ConnRef, Connection},
    },
};
use baton_proto::v1 as pb;
use prost::Message as _;
use redis::{Script, Value};

use crate::error::Error;

/// How a run started, as its metadata keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunMeta {
    /// The run's id.
    pub run_id: String,
    /// Its trace.
    pub trace_id: String,
    /// The tenant that started it.
    pub tenant: String,
    /// What started it.
    pub kind: pb::RunKind,
    /// Agent, group or pipeline name.
    pub target: String,
    /// When it started (ms since the epoch).
    pub started_ms: i64,
    /// Whether it outlives its caller.
    pub detached: bool,
    /// Where it is.
    pub status: pb::RunStatus,
    /// When it ended (ms since the epoch), once ended.
    pub ended_ms: Option<i64>,
    /// The final output, once completed.
    pub output: String,
    /// The run context, once ended.
    pub run_context_json: String,
    /// Totals, once ended.
    pub usage: pb::Usage,
    /// The failure's code, once failed.
    pub error_code: i32,
    /// The failure's or cancellation's message.
    pub error_message: String,
    /// The seq of its last logged event.
    pub last_seq: u64,
}

impl RunMeta {
    /// What GetRun answers.
    pub fn to_response(&self) -> pb::GetRunResponse {
        pb::GetRunResponse {
            run_id: self.run_id.clone(),
            trace_id: self.trace_id.clone(),
            kind: self.kind as i32,
            target: self.target.clone(),
            status: self.status as i32,
            started_at: Some(timestamp(self.started_ms)),
            ended_at: self.ended_ms.map(timestamp),
            output: self.output.clone(),
            run_context_json: self.run_context_json.clone(),
            usage: Some(self.usage),
            error_code: self.error_code,
            error_message: self.error_message.clone(),
            last_seq: self.last_seq,
        }
    }

    /// What ListRuns shows.
    pub fn to_summary(&self) -> pb::RunSummary {
        pb::RunSummary {
            run_id: self.run_id.clone(),
            trace_id: self.trace_id.clone(),
            kind: self.kind as i32,
            target: self.target.clone(),
            status: self.status as i32,
            started_at: Some(timestamp(self.started_ms)),
            ended_at: self.ended_ms.map(timestamp),
            last_seq: self.last_seq,
            detached: self.detached,
        }
    }
}

fn timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// How an append ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Append {
    /// Written.
    Done,
    /// Refused: the writer's epoch is not the run's (another replica owns
    /// the run now, or its keys expired). Nothing was written.
    Fenced,
}

/// Runs in Redis (see the module docs).
pub struct RedisRuns {
    conn: Connection,
    config: RedisConfig,
    retention: Duration,
    append: Script,
}

const APPEND: &str = r"
-- KEYS[1] meta, KEYS[2] log
-- ARGV[1] epoch, ARGV[2] events n, ARGV[3] ttl ms (0: keep), ARGV[4] fields m,
-- then n pairs (seq, event bytes), then m pairs (field, value).
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return 0
end
local n, m, i = tonumber(ARGV[2]), tonumber(ARGV[4]), 5
local last = nil
for _ = 1, n do
  redis.call('XADD', KEYS[2], '0-' .. ARGV[i], 'e', ARGV[i + 1])
  last = ARGV[i]
  i = i + 2
end
if last then
  redis.call('HSET', KEYS[1], 'last_seq', last)
end
for _ = 1, m do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  i = i + 2
end
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
";

fn store_error(e: StoreError) -> Error {
    match e {
        StoreError::Unavailable(m) => Error::Unavailable(format!("run store: {m}")),
        other => Error::Unavailable(format!("run store: {other}")),
    }
}

fn redis_error(e: redis::RedisError) -> Error {
    Error::Unavailable(format!("run store: redis: {e}"))
}

impl RedisRuns {
    /// Runs in the Redis `config` names, kept `retention` after they end.
    /// Connects lazily: this succeeds while Redis is away.
    pub fn new(config: &RedisConfig, retention: Duration) -> Result<Self, String> {
        config.validate()?;
        Ok(Self {
            conn: Connection::open(config).map_err(|e| e.to_string())?,
            config: config.clone(),
            retention,
            append: Script::new(APPEND),
        })
    }

    fn meta_key(&self, run_id: &str) -> String {
        format!("{}:run:{{{run_id}}}:meta", self.config.key_prefix)
    }

    fn log_key(&self, run_id: &str) -> String {
        format!("{}:run:{{{run_id}}}:log", self.config.key_prefix)
    }

    fn index_key(&self, tenant: &str) -> String {
        let hex: String = tenant.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{}:runs:{hex}", self.config.key_prefix)
    }

    async fn conn(&self) -> Result<ConnRef, Error> {
        self.conn.get().await.map_err(store_error)
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

    /// Records a new run (epoch 1) and lists it under its tenant; its keys
    /// live `live_for` (its deadline) plus the retention, until it ends.
    pub async fn create(&self, meta: &RunMeta, live_for: Duration) -> Result<u64, Error> {
        let mut c = self.conn().await?;
        let key = self.meta_key(&meta.run_id);
        let ttl = (live_for + self.retention).as_millis() as i64;
        redis::pipe()
            .atomic()
            .cmd("HSET")
            .arg(&key)
            .arg("epoch")
            .arg(1)
            .arg("tenant")
            .arg(&meta.tenant)
            .arg("kind")
            .arg(meta.kind as i32)
            .arg("target")
            .arg(&meta.target)
            .arg("trace_id")
            .arg(&meta.trace_id)
            .arg("started_ms")
            .arg(meta.started_ms)
            .arg("detached")
            .arg(u8::from(meta.detached))
            .arg("status")
            .arg(pb::RunStatus::Running as i32)
            .arg("last_seq")
            .arg(0)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&key)
            .arg(ttl)
            .ignore()
            .query_async::<()>(&mut c)
            .await
            .map_err(redis_error)?;
        redis::cmd("ZADD")
            .arg(self.index_key(&meta.tenant))
            .arg(0)
            .arg(&meta.run_id)
            .query_async::<()>(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(1)
    }

    /// Appends events (each with its `seq`) to the run's log, and, with
    /// `end`, records how it ended and starts its retention — all in one
    /// script, only while `epoch` is the run's.
    pub async fn append(
        &self,
        run_id: &str,
        epoch: u64,
        events: &[pb::RunEvent],
        end: Option<&RunEnd>,
    ) -> Result<Append, Error> {
        let mut c = self.conn().await?;
        let mut invocation = self.append.prepare_invoke();
        invocation
            .key(self.meta_key(run_id))
            .key(self.log_key(run_id))
            .arg(epoch)
            .arg(events.len());
        let ttl = if end.is_some() {
            self.retention.as_millis() as i64
        } else {
            0
        };
        let fields = end.map(RunEnd::fields).unwrap_or_default();
        invocation.arg(ttl).arg(fields.len());
        for e in events {
            invocation.arg(e.seq).arg(e.encode_to_vec());
        }
        for (field, value) in &fields {
            invocation.arg(*field).arg(value.as_slice());
        }
        let written: i64 = invocation.invoke_async(&mut c).await.map_err(redis_error)?;
        Ok(if written == 1 {
            Append::Done
        } else {
            Append::Fenced
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

    /// A page of `tenant`'s runs (of `status` when set), newest first,
    /// after the run `after`; and whether more follow.
    pub async fn list(
        &self,
        tenant: &str,
        status: Option<pb::RunStatus>,
        after: Option<&str>,
        size: usize,
    ) -> Result<(Vec<RunMeta>, bool), Error> {
        let mut c = self.conn().await?;
        let index = self.index_key(tenant);
        let batch = (size + 1).max(64);
        let mut cursor = after.map(str::to_owned);
        let mut found = Vec::new();
        loop {
            let max = cursor
                .as_ref()
                .map_or_else(|| "+".to_owned(), |id| format!("({id}"));
            let ids: Vec<String> = redis::cmd("ZREVRANGEBYLEX")
                .arg(&index)
                .arg(&max)
                .arg("-")
                .arg("LIMIT")
                .arg(0)
                .arg(batch)
                .query_async(&mut c)
                .await
                .map_err(redis_error)?;
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.cmd("HGETALL").arg(self.meta_key(id));
            }
            let metas: Vec<HashMap<String, Vec<u8>>> = if ids.is_empty() {
                Vec::new()
            } else {
                pipe.query_async(&mut c).await.map_err(redis_error)?
            };
            let mut expired = Vec::new();
            for (id, fields) in ids.iter().zip(&metas) {
                match decode_meta(id, fields) {
                    None => expired.push(id.clone()),
                    Some(m) if m.tenant != tenant => {}
                    Some(m) if status.is_some_and(|s| s != m.status) => {}
                    Some(m) => found.push(m),
                }
            }
            if !expired.is_empty() {
                // Their keys expired: forget them (best effort).
                let _ = redis::cmd("ZREM")
                    .arg(&index)
                    .arg(&expired)
                    .query_async::<()>(&mut c)
                    .await;
            }
            if found.len() > size || ids.len() < batch {
                break;
            }
            cursor = ids.last().cloned();
        }
        let more = found.len() > size;
        found.truncate(size);
        Ok((found, more))
    }
}

/// How a run ended, written with its terminal event.
#[derive(Debug, Clone)]
pub struct RunEnd {
    /// Completed, failed or cancelled.
    pub status: pb::RunStatus,
    /// When (ms since the epoch).
    pub ended_ms: i64,
    /// The final output.
    pub output: String,
    /// The run context.
    pub run_context_json: String,
    /// Totals.
    pub usage: pb::Usage,
    /// The failure's code.
    pub error_code: i32,
    /// The failure's or cancellation's message.
    pub error_message: String,
}

impl RunEnd {
    fn fields(&self) -> Vec<(&'static str, Vec<u8>)> {
        vec![
            ("status", (self.status as i32).to_string().into_bytes()),
            ("ended_ms", self.ended_ms.to_string().into_bytes()),
            ("output", self.output.clone().into_bytes()),
            (
                "run_context_json",
                self.run_context_json.clone().into_bytes(),
            ),
            ("usage", self.usage.encode_to_vec()),
            ("error_code", self.error_code.to_string().into_bytes()),
            ("error_message", self.error_message.clone().into_bytes()),
        ]
    }
}

fn decode_meta(run_id: &str, f: &HashMap<String, Vec<u8>>) -> Option<RunMeta> {
    if !f.contains_key("epoch") {
        return None;
    }
    let text = |k: &str| {
        f.get(k)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    };
    let num = |k: &str| text(k).parse::<i64>().unwrap_or(0);
    Some(RunMeta {
        run_id: run_id.to_owned(),
        trace_id: text("trace_id"),
        tenant: text("tenant"),
        kind: pb::RunKind::try_from(num("kind") as i32).unwrap_or(pb::RunKind::Unspecified),
        target: text("target"),
        started_ms: num("started_ms"),
        detached: num("detached") == 1,
        status: pb::RunStatus::try_from(num("status") as i32).unwrap_or(pb::RunStatus::Unspecified),
        ended_ms: f.contains_key("ended_ms").then(|| num("ended_ms")),
        output: text("output"),
        run_context_json: text("run_context_json"),
        usage: f
            .get("usage")
            .and_then(|u| pb::Usage::decode(u.as_slice()).ok())
            .unwrap_or_default(),
        error_code: num("error_code") as i32,
        error_message: text("error_message"),
        last_seq: num("last_seq").max(0) as u64,
    })
}

/// Events of `XRANGE`/`XREAD` entries: `[[id, [field, value, …]], …]`.
fn decode_entries(reply: &Value) -> Result<Vec<pb::RunEvent>, Error> {
    let Value::Array(entries) = reply else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(parts) = entry else { continue };
        let Some(Value::Array(fields)) = parts.get(1) else {
            continue;
        };
        if let Some(Value::BulkString(bytes)) = fields.get(1) {
            let event = pb::RunEvent::decode(bytes.as_slice())
                .map_err(|e| Error::Internal(format!("run store: a logged event: {e}")))?;
            out.push(event);
        }
    }
    Ok(out)
}

/// A trace id as the metadata keeps it.
pub fn trace_text(trace: &TraceId) -> String {
    trace.to_string()
}
