//! Conversations kept in Redis (durable runs): any replica continues any
//! conversation.
//!
//! Keys, per conversation (one hash tag, so Redis Cluster works):
//!
//! - `{prefix}:conv:{<hex tenant>:<id>}:meta` — a hash: `created`,
//!   `updated` (Redis's clock, ms), `ttl`, `count`, `bytes`, `folded`,
//!   `agent`, `title`, `bf` (branched from), `running` and `running_until`
//!   (the run holding the turn, and when its hold lapses), `l:<key>` per
//!   label.
//! - `…:msgs` — a list of its messages (`baton.v1.ConversationMessage`).
//! - `…:runs` — a list of its runs (`baton.v1.ConversationRun`).
//! - `{prefix}:convs:<hex tenant>` — the tenant's conversations, a sorted
//!   set by last use (when it was made or a run last appended to it, on
//!   Redis's clock: its `updated`), for listing; entries whose
//!   conversation expired are skipped and dropped when a listing meets
//!   them. A message refused, or a run that appended nothing, moves
//!   nothing.
//!
//! Taking the turn reads the messages in the same script (one round trip);
//! giving it back appends in one script that applies only while the turn
//! is the run's, so a run resumed after its replica died and ending again
//! appends nothing twice.

use std::{collections::BTreeMap, collections::HashMap};

use baton_proto::v1 as pb;
use std::sync::Arc;

use baton_store::redis::conn::ConnRef;
use prost::Message as _;
use redis::{Script, Value};

use super::store::{Begin, Begun, Finish, Key, Meta, Open, Page, Store};
use crate::error::{Error, Result};

mod scripts;

use scripts::{BEGIN, DISCARD, FINISH, HOLD, RELEASE, UPDATE};

use crate::shared_state::{NOW, SharedState, hex};

/// Conversations in Redis (see the module docs).
pub struct RedisStore {
    /// The replica's shared state: its one connection, clock and keys.
    shared: Arc<SharedState>,
    begin: Script,
    finish: Script,
    release: Script,
    discard: Script,
    hold: Script,
    update: Script,
}

impl RedisStore {
    /// Conversations kept in `shared` (the run store's Redis, through the
    /// same connection).
    pub fn new(shared: Arc<SharedState>) -> Self {
        Self {
            shared,
            begin: Script::new(&format!("{NOW}{BEGIN}")),
            finish: Script::new(&format!("{NOW}{FINISH}")),
            release: Script::new(RELEASE),
            discard: Script::new(DISCARD),
            hold: Script::new(&format!("{NOW}{HOLD}")),
            update: Script::new(UPDATE),
        }
    }

    async fn conn(&self) -> Result<ConnRef> {
        self.shared.conn().await
    }

    fn key(&self, key: &Key, what: &str) -> String {
        let tag = format!("{}:{}", hex(&key.tenant), key.id);
        self.shared.key("conv", &tag, what)
    }

    fn index(&self, tenant: &str) -> String {
        self.shared.plain_key(&format!("convs:{}", hex(tenant)))
    }

    /// Marks `key` used at `at` (Redis's clock, as its `updated`) in its
    /// tenant's index; never earlier than it was.
    async fn touch(&self, key: &Key, at: i64) -> Result<()> {
        let mut c = self.conn().await?;
        redis::cmd("ZADD")
            .arg(self.index(&key.tenant))
            .arg("GT")
            .arg(at)
            .arg(&key.id)
            .query_async::<i64>(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(())
    }
}

fn redis_error(e: redis::RedisError) -> Error {
    Error::Unavailable(format!("conversation store: redis: {e}"))
}

fn decode_meta(id: &str, fields: &HashMap<String, Vec<u8>>) -> Meta {
    let text = |k: &str| {
        fields
            .get(k)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    };
    let num = |k: &str| text(k).parse::<i64>().unwrap_or(0);
    Meta {
        id: id.to_owned(),
        title: text("title"),
        labels: fields
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix("l:")
                    .map(|k| (k.to_owned(), String::from_utf8_lossy(v).into_owned()))
            })
            .collect(),
        created_ms: num("created"),
        updated_ms: num("updated"),
        ttl_ms: num("ttl"),
        count: num("count") as u32,
        bytes: num("bytes") as u64,
        running: text("running"),
        agent: text("agent"),
        branched_from: text("bf"),
        folded: num("folded") as u32,
        preview: text("preview"),
    }
}

fn hash_of(v: &Value) -> HashMap<String, Vec<u8>> {
    let mut out = HashMap::new();
    match v {
        Value::Array(items) => {
            for pair in items.chunks(2) {
                if let [Value::BulkString(k), Value::BulkString(v)] = pair {
                    out.insert(String::from_utf8_lossy(k).into_owned(), v.clone());
                }
            }
        }
        Value::Map(items) => {
            for (k, v) in items {
                if let (Value::BulkString(k), Value::BulkString(v)) = (k, v) {
                    out.insert(String::from_utf8_lossy(k).into_owned(), v.clone());
                }
            }
        }
        _ => {}
    }
    out
}

fn decoded<M: prost::Message + Default>(items: &[Vec<u8>], what: &str) -> Result<Vec<M>> {
    items
        .iter()
        .map(|b| {
            M::decode(b.as_slice())
                .map_err(|e| Error::Internal(format!("conversation store: a {what}: {e}")))
        })
        .collect()
}

fn bulk_list(v: &Value) -> Vec<Vec<u8>> {
    match v {
        Value::Array(items) => items
            .iter()
            .filter_map(|i| match i {
                Value::BulkString(b) => Some(b.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[async_trait::async_trait]
impl Store for RedisStore {
    async fn begin(&self, key: &Key, begin: &Begin) -> Result<Begun> {
        let mut c = self.conn().await?;
        let mut call = self.begin.prepare_invoke();
        for what in ["meta", "msgs", "runs"] {
            call.key(self.key(key, what));
        }
        let open = match begin.open {
            Open::Existing => 0,
            Open::New => 1,
            Open::Either => 2,
        };
        call.arg(&begin.run_id)
            .arg(open)
            .arg(begin.hold_ms)
            .arg(begin.ttl_ms)
            .arg(&begin.branched_from)
            .arg(begin.base.iter().map(super::store::size).sum::<u64>())
            .arg(begin.base.len());
        for m in &begin.base {
            call.arg(m.encode_to_vec());
        }
        let reply = call
            .invoke_async::<Value>(&mut c)
            .await
            .map_err(redis_error)?;
        let Value::Array(parts) = reply else {
            return Err(Error::Internal(
                "conversation store: a malformed answer".into(),
            ));
        };
        let code = match parts.first() {
            Some(Value::Int(n)) => *n,
            _ => -1,
        };
        Ok(match code {
            0 => Begun::NotFound,
            3 => Begun::Exists,
            1 => Begun::Busy {
                running: match parts.get(1) {
                    Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                    _ => String::new(),
                },
                lapsed: matches!(parts.get(2), Some(Value::Int(1))),
            },
            2 => {
                let meta = decode_meta(&key.id, &hash_of(parts.get(1).unwrap_or(&Value::Nil)));
                let messages = decoded(&bulk_list(parts.get(2).unwrap_or(&Value::Nil)), "message")?;
                let created = matches!(parts.get(3), Some(Value::Int(1)));
                // The tenant's index is a key of its own (another slot of
                // a Cluster): a command of its own, at the script's time.
                // Not fatal: the turn is the run's now, and its append
                // writes the entry again.
                if created
                    && let Some(Value::Int(at)) = parts.get(4)
                    && let Err(e) = self.touch(key, *at).await
                {
                    tracing::warn!(conversation = %key.id, error = %e, "a new conversation is not listed yet");
                }
                Begun::Taken {
                    meta: Box::new(meta),
                    messages,
                    created,
                }
            }
            _ => {
                return Err(Error::Internal(
                    "conversation store: a malformed answer".into(),
                ));
            }
        })
    }

    async fn finish(&self, key: &Key, finish: &Finish) -> Result<bool> {
        let mut c = self.conn().await?;
        let mut call = self.finish.prepare_invoke();
        for what in ["meta", "msgs", "runs"] {
            call.key(self.key(key, what));
        }
        call.arg(&finish.run_id)
            .arg(finish.fold)
            .arg(
                finish
                    .summary
                    .as_ref()
                    .map(prost::Message::encode_to_vec)
                    .unwrap_or_default(),
            )
            .arg(&finish.agent)
            .arg(finish.run.encode_to_vec())
            .arg(finish.count)
            .arg(finish.bytes)
            .arg(finish.ttl_ms)
            .arg(finish.messages.len());
        for m in &finish.messages {
            call.arg(m.encode_to_vec());
        }
        call.arg(super::store::preview_of(finish));
        let applied: i64 = call.invoke_async(&mut c).await.map_err(redis_error)?;
        if applied == 0 {
            return Ok(false);
        }
        // Applied: an index entry not moved is not worth failing it.
        if let Err(e) = self.touch(key, applied).await {
            tracing::warn!(conversation = %key.id, error = %e, "a conversation's place in its list was not moved");
        }
        Ok(true)
    }

    async fn release(&self, key: &Key, run_id: &str) -> Result<()> {
        let mut c = self.conn().await?;
        self.release
            .key(self.key(key, "meta"))
            .key(self.key(key, "msgs"))
            .key(self.key(key, "runs"))
            .arg(run_id)
            .invoke_async::<i64>(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(())
    }

    async fn discard(&self, key: &Key, run_id: &str) -> Result<()> {
        let mut c = self.conn().await?;
        let gone: i64 = self
            .discard
            .key(self.key(key, "meta"))
            .key(self.key(key, "msgs"))
            .key(self.key(key, "runs"))
            .arg(run_id)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        if gone == 1 {
            redis::cmd("ZREM")
                .arg(self.index(&key.tenant))
                .arg(&key.id)
                .query_async::<i64>(&mut c)
                .await
                .map_err(redis_error)?;
        }
        Ok(())
    }

    async fn hold(&self, key: &Key, run_id: &str, hold_ms: i64) -> Result<bool> {
        let mut c = self.conn().await?;
        let held: i64 = self
            .hold
            .key(self.key(key, "meta"))
            .key(self.key(key, "msgs"))
            .key(self.key(key, "runs"))
            .arg(run_id)
            .arg(hold_ms)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(held == 1)
    }

    async fn branches(&self, tenant: &str, id: &str) -> Result<Vec<String>> {
        let mut c = self.conn().await?;
        let all: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.index(tenant))
            .arg(0)
            .arg(-1)
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        // One command per conversation: their keys are in different slots.
        let from = futures::future::try_join_all(all.iter().map(|other| async move {
            let key = Key {
                tenant: tenant.to_owned(),
                id: other.clone(),
            };
            let mut c = self.conn().await?;
            redis::cmd("HGET")
                .arg(self.key(&key, "meta"))
                .arg("bf")
                .query_async::<Option<String>>(&mut c)
                .await
                .map_err(redis_error)
        }))
        .await?;
        Ok(all
            .into_iter()
            .zip(from)
            .filter(|(_, bf)| bf.as_deref() == Some(id))
            .map(|(other, _)| other)
            .collect())
    }

    async fn page(&self, key: &Key, from: u32, n: u32) -> Result<Option<Page>> {
        let mut c = self.conn().await?;
        let (fields, messages, runs): (HashMap<String, Vec<u8>>, Vec<Vec<u8>>, Vec<Vec<u8>>) =
            redis::pipe()
                .cmd("HGETALL")
                .arg(self.key(key, "meta"))
                .cmd("LRANGE")
                .arg(self.key(key, "msgs"))
                .arg(from)
                .arg(i64::from(from) + i64::from(n) - 1)
                .cmd("LRANGE")
                .arg(self.key(key, "runs"))
                .arg(0)
                .arg(-1)
                .query_async(&mut c)
                .await
                .map_err(redis_error)?;
        if fields.is_empty() {
            return Ok(None);
        }
        Ok(Some(Page {
            meta: decode_meta(&key.id, &fields),
            messages: if n == 0 {
                Vec::new()
            } else {
                decoded(&messages, "message")?
            },
            runs: decoded(&runs, "run")?,
        }))
    }

    async fn list(
        &self,
        tenant: &str,
        after: Option<(i64, String)>,
        n: usize,
    ) -> Result<Vec<Meta>> {
        let index = self.index(tenant);
        let mut found = Vec::new();
        let mut max = after.as_ref().map_or(i64::MAX, |(t, _)| *t);
        let mut skip_from: Option<String> = after.map(|(_, id)| id);
        loop {
            let mut c = self.conn().await?;
            let batch = (n + 1).max(64);
            let page: Vec<(String, f64)> = redis::cmd("ZREVRANGEBYSCORE")
                .arg(&index)
                .arg(max)
                .arg("-inf")
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(0)
                .arg(batch)
                .query_async(&mut c)
                .await
                .map_err(redis_error)?;
            let done = page.len() < batch;
            let mut progressed = false;
            for (id, score) in &page {
                let score = *score as i64;
                // Ties at the page's edge: ids at or after the cursor's
                // were given (same score, descending ids).
                if score == max
                    && let Some(cursor) = &skip_from
                    && id >= cursor
                {
                    continue;
                }
                progressed = true;
                let key = Key {
                    tenant: tenant.to_owned(),
                    id: id.clone(),
                };
                let mut c = self.conn().await?;
                let fields: HashMap<String, Vec<u8>> = redis::cmd("HGETALL")
                    .arg(self.key(&key, "meta"))
                    .query_async(&mut c)
                    .await
                    .map_err(redis_error)?;
                if fields.is_empty() {
                    // Expired: dropped from the index.
                    redis::cmd("ZREM")
                        .arg(&index)
                        .arg(id)
                        .query_async::<i64>(&mut c)
                        .await
                        .map_err(redis_error)?;
                    continue;
                }
                // Listed at its place in the index, so the page token (its
                // `updated`) is where the next page starts.
                let mut meta = decode_meta(id, &fields);
                meta.updated_ms = score;
                found.push(meta);
                if found.len() == n {
                    return Ok(found);
                }
                max = score;
                skip_from = Some(id.clone());
            }
            if done || !progressed {
                return Ok(found);
            }
        }
    }

    async fn update(
        &self,
        key: &Key,
        title: Option<String>,
        labels: &BTreeMap<String, String>,
    ) -> Result<Option<Meta>> {
        let mut c = self.conn().await?;
        let mut call = self.update.prepare_invoke();
        call.key(self.key(key, "meta"))
            .arg(u8::from(title.is_some()))
            .arg(title.unwrap_or_default());
        for (k, v) in labels {
            call.arg(k).arg(v);
        }
        let found: i64 = call.invoke_async(&mut c).await.map_err(redis_error)?;
        if found == 0 {
            return Ok(None);
        }
        Ok(self.page(key, 0, 0).await?.map(|p| p.meta))
    }

    async fn delete(&self, key: &Key) -> Result<Option<Vec<String>>> {
        // What it holds and its deletion in one round trip (its keys share
        // a slot); then its entry in the tenant's index, a key of its own.
        let mut c = self.conn().await?;
        let (running, runs, deleted): (Option<String>, Vec<Vec<u8>>, i64) = redis::pipe()
            .cmd("HGET")
            .arg(self.key(key, "meta"))
            .arg("running")
            .cmd("LRANGE")
            .arg(self.key(key, "runs"))
            .arg(0)
            .arg(-1)
            .cmd("DEL")
            .arg(self.key(key, "meta"))
            .arg(self.key(key, "msgs"))
            .arg(self.key(key, "runs"))
            .query_async(&mut c)
            .await
            .map_err(redis_error)?;
        redis::cmd("ZREM")
            .arg(self.index(&key.tenant))
            .arg(&key.id)
            .query_async::<i64>(&mut c)
            .await
            .map_err(redis_error)?;
        if deleted == 0 {
            return Ok(None);
        }
        let mut ids: Vec<String> = decoded::<pb::ConversationRun>(&runs, "run")?
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        ids.extend(running.filter(|r| !r.is_empty()));
        Ok(Some(ids))
    }
}
