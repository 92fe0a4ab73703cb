//! What reaches a durable run from outside while it is elsewhere: answers
//! of people and cancels given on a replica that does not run it, and the
//! parking of a run that only waits for people.
//!
//! - `{prefix}:run:{<id>}:inbox` — a hash: question id → answer (JSON),
//!   `cancel` → the reason. A replica that is asked about a run it does not
//!   run records the answer here (one script checks that the question is
//!   open: asked — its `q/{id}` record — not answered, deadline not past).
//!   The owner records answers given to it here too, before handing them
//!   to the run, so that of two answers given anywhere exactly one is
//!   taken, and a taken answer outlives the replica that took it. The
//!   owner sees the inbox at its next renewal (every third of the lease)
//!   and hands what it holds to the run; a parked run is claimed and
//!   resumed by the replica that took the answer (and is claimable at once
//!   by any replica, should that one stop first), and a resumed run reads
//!   its inbox when it starts. A question's answer leaves the inbox when
//!   the run journals it (the append script); a cancel stays until the
//!   run's keys expire.
//! - `{prefix}:run:{<id>}:taken` — a hash: question id → who took its
//!   answer: the token of the call whose answer was recorded (each
//!   ResolveApproval/SubmitInput has one, and a call forwarded to a peer
//!   carries its caller's), or `!` when its owner closed it at its
//!   deadline. So a call whose answer was taken is told OK even when it
//!   asks again (a forwarded call that timed out, then the inbox; the run
//!   may have ended meanwhile), any other caller is told it was answered
//!   already or came too late, and a question closed at its deadline takes
//!   no answer after (whatever the clocks of the replica and Redis say).
//! - Closing at the deadline: when nobody answered in time, as far as the
//!   owner knows, it asks the run store before it records a denial (or a
//!   time-out): one script hands over an answer the inbox took before the
//!   deadline (given on a replica that does not run the run, it reaches
//!   the owner only at its next renewal), or closes the question. An
//!   answer told OK is never lost to the deadline.
//! - Parking: the owner of a run that only waits (see
//!   `RunRecord::parkable`) stops it and gives its lease up until the
//!   earliest deadline of its questions (`parked` in its hash): no replica
//!   holds it in memory until an answer or that deadline wakes it.

use std::{collections::HashMap, sync::LazyLock};

use redis::{Script, Value};

use super::{Claim, RedisRuns, lease::NOW, redis_error};
use crate::error::Error;

/// Records an answer if its question is open.
static ANSWER: LazyLock<Script> = LazyLock::new(|| Script::new(&format!("{NOW}{ANSWER_BODY}")));

const ANSWER_BODY: &str = r"
-- KEYS[1] meta, KEYS[2] journal, KEYS[3] inbox, KEYS[4] taken;
-- ARGV[1] question id, ARGV[2] its answered unit, ARGV[3] the answer,
-- ARGV[4] the call's token.
local by = redis.call('HGET', KEYS[4], ARGV[1])
-- This very call's answer was taken (asked again: a forward that timed
-- out, then the inbox), whatever happened since.
if by and by == ARGV[4] then
  return {4}
end
local m = redis.call('HMGET', KEYS[1], 'status', 'parked', 'owner')
if not m[1] then
  return {-2}
end
if m[1] ~= '1' then
  return {-1}
end
local deadline = redis.call('HGET', KEYS[2], 'q/' .. ARGV[1])
if not deadline then
  return {0}
end
-- Closed by its owner at the deadline, or timed out (journaled).
if by == '!' or redis.call('HEXISTS', KEYS[2], 'it/' .. ARGV[1]) == 1 then
  return {3}
end
if by or redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 or redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  return {2}
end
if tonumber(deadline) < now then
  return {3}
end
local ttl = redis.call('PTTL', KEYS[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
redis.call('PEXPIRE', KEYS[3], ttl)
redis.call('HSET', KEYS[4], ARGV[1], ARGV[4])
redis.call('PEXPIRE', KEYS[4], ttl)
-- A parked run is claimable at once: should the replica that took the
-- answer not wake it, any replica's next round of claims does.
if m[2] == '1' then
  redis.call('HSET', KEYS[1], 'lease_until', 0)
end
return {1, m[2] or '0'}
";

/// Closes a question its owner waited for until the deadline: hands over
/// the answer the inbox took meanwhile, or closes the question for good.
static CLOSE: LazyLock<Script> = LazyLock::new(|| Script::new(CLOSE_BODY));

const CLOSE_BODY: &str = r"
-- KEYS[1] meta, KEYS[2] inbox, KEYS[3] taken; ARGV[1] epoch, ARGV[2]
-- question id.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return {-1}
end
local answer = redis.call('HGET', KEYS[2], ARGV[2])
if answer then
  return {1, answer}
end
redis.call('HSET', KEYS[3], ARGV[2], '!')
redis.call('PEXPIRE', KEYS[3], redis.call('PTTL', KEYS[1]))
return {0}
";

/// Records a cancel of a running run.
static CANCEL: LazyLock<Script> = LazyLock::new(|| Script::new(CANCEL_BODY));

const CANCEL_BODY: &str = r"
-- KEYS[1] meta, KEYS[2] inbox; ARGV[1] reason.
local m = redis.call('HMGET', KEYS[1], 'status', 'parked')
if not m[1] then
  return {-2}
end
if m[1] ~= '1' then
  return {-1, m[1]}
end
redis.call('HSET', KEYS[2], 'cancel', ARGV[1])
redis.call('PEXPIRE', KEYS[2], redis.call('PTTL', KEYS[1]))
if m[2] == '1' then
  redis.call('HSET', KEYS[1], 'lease_until', 0)
end
return {1, m[2] or '0'}
";

/// Parks a run its owner stopped: gives the lease up until ARGV[2] (an
/// inbox that filled meanwhile makes it claimable at once).
static PARK: LazyLock<Script> = LazyLock::new(|| Script::new(PARK_BODY));

const PARK_BODY: &str = r"
-- KEYS[1] meta, KEYS[2] inbox; ARGV[1] epoch, ARGV[2] wake-up time ms.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return -1
end
local wake = tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 1 then
  wake = 0
end
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'owner', '', 'lease_until', wake, 'parked', 1)
return wake
";

/// A question a person answers.
#[derive(Clone, Copy)]
pub enum Question<'a> {
    /// An approval (`ResolveApproval`): its id, the answer.
    Approval(&'a str, bool, &'a str),
    /// An input request (`SubmitInput`): its id, the input.
    Input(&'a str, &'a str),
}

impl Question<'_> {
    /// The question's id, the request field that names it, and what it is
    /// called in messages.
    pub fn named(&self) -> (&str, &'static str, &'static str) {
        match self {
            Question::Approval(id, ..) => (id, "approval_id", "approval"),
            Question::Input(id, _) => (id, "input_id", "input request"),
        }
    }
}

/// How recording an answer, or a cancel, went.
#[derive(Debug, PartialEq, Eq)]
pub enum Answered {
    /// The run is unknown (or expired).
    Gone,
    /// The run has ended (for a cancel: with this status).
    Ended(i32),
    /// The run never asked this question.
    NotAsked,
    /// The question was answered already.
    AlreadyAnswered,
    /// The question's deadline passed.
    TooLate,
    /// Recorded; `parked`: nobody runs the run (the caller wakes it).
    Recorded {
        /// The run is parked.
        parked: bool,
    },
    /// This very call's answer had been taken (the call was made twice:
    /// forwarded to a peer, then recorded here).
    Taken,
}

/// What closing a question at its deadline found (see the module docs).
#[derive(Debug, PartialEq, Eq)]
pub enum Closed {
    /// An answer was taken before the deadline: the run takes it now.
    Answer(Vec<u8>),
    /// Nobody answered: the question takes no answer any more.
    Unanswered,
    /// Another replica owns the run now (this one was fenced).
    Fenced,
}

fn decode(reply: &[Value]) -> Answered {
    let int = |v: Option<&Value>| match v {
        Some(Value::Int(i)) => *i,
        Some(Value::BulkString(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        _ => 0,
    };
    match int(reply.first()) {
        -2 => Answered::Gone,
        -1 => Answered::Ended(int(reply.get(1)) as i32),
        0 => Answered::NotAsked,
        2 => Answered::AlreadyAnswered,
        3 => Answered::TooLate,
        4 => Answered::Taken,
        _ => Answered::Recorded {
            parked: int(reply.get(1)) == 1,
        },
    }
}

impl RedisRuns {
    /// Records a person's answer to a run's open question (see the module
    /// docs).
    /// `token` names the call (see the module docs).
    pub async fn answer(
        &self,
        run_id: &str,
        question: Question<'_>,
        token: &str,
    ) -> Result<Answered, Error> {
        let (id, unit, value) = match question {
            Question::Approval(id, approved, reason) => (
                id,
                format!("ap/{id}"),
                serde_json::to_vec(&(approved, reason)).unwrap_or_default(),
            ),
            Question::Input(id, input) => (
                id,
                format!("in/{id}"),
                serde_json::to_vec(input).unwrap_or_default(),
            ),
        };
        let mut c = self.conn().await?;
        let reply: Vec<Value> = ANSWER
            .key(self.meta_key(run_id))
            .key(self.journal_key(run_id))
            .key(self.inbox_key(run_id))
            .key(self.taken_key(run_id))
            .arg(id)
            .arg(unit)
            .arg(value)
            .arg(token)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        self.claimable_now(&mut c, run_id, decode(&reply)).await
    }

    /// Records a CancelRun of a running run (see the module docs).
    pub async fn request_cancel(&self, run_id: &str, reason: &str) -> Result<Answered, Error> {
        let mut c = self.conn().await?;
        let reply: Vec<Value> = CANCEL
            .key(self.meta_key(run_id))
            .key(self.inbox_key(run_id))
            .arg(reason)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        self.claimable_now(&mut c, run_id, decode(&reply)).await
    }

    /// A parked run that got an answer or a cancel is due in the lease set
    /// at once (its own `lease_until` was zeroed by the script; the lease
    /// set is a key of its own, so a separate command).
    async fn claimable_now(
        &self,
        c: &mut baton_store::redis::conn::ConnRef,
        run_id: &str,
        answered: Answered,
    ) -> Result<Answered, Error> {
        if answered == (Answered::Recorded { parked: true }) {
            redis::cmd("ZADD")
                .arg(self.leases_key())
                .arg(0)
                .arg(run_id)
                .query_async::<()>(c)
                .await
                .map_err(redis_error)?;
        }
        Ok(answered)
    }

    /// Closes question `id` of run `run_id` (owned with `epoch`) at its
    /// deadline: the answer taken before it, if any (see the module docs).
    pub async fn close(&self, run_id: &str, epoch: u64, id: &str) -> Result<Closed, Error> {
        let mut c = self.conn().await?;
        let reply: Vec<Value> = CLOSE
            .key(self.meta_key(run_id))
            .key(self.inbox_key(run_id))
            .key(self.taken_key(run_id))
            .arg(epoch)
            .arg(id)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(match (reply.first(), reply.get(1)) {
            (Some(Value::Int(1)), Some(Value::BulkString(answer))) => {
                Closed::Answer(answer.clone())
            }
            (Some(Value::Int(0)), _) => Closed::Unanswered,
            _ => Closed::Fenced,
        })
    }

    /// What a run's inbox holds.
    pub async fn inbox(&self, run_id: &str) -> Result<HashMap<String, Vec<u8>>, Error> {
        let mut c = self.conn().await?;
        redis::cmd("HGETALL")
            .arg(self.inbox_key(run_id))
            .query_async(&mut c)
            .await
            .map_err(redis_error)
    }

    /// Drops entries of a run's inbox that can no longer be delivered.
    pub async fn drop_from_inbox(&self, run_id: &str, ids: &[String]) {
        if ids.is_empty() {
            return;
        }
        if let Ok(mut c) = self.conn().await {
            let _ = redis::cmd("HDEL")
                .arg(self.inbox_key(run_id))
                .arg(ids)
                .query_async::<()>(&mut c)
                .await;
        }
    }

    /// Parks a run this replica stopped (owned with `epoch`) until
    /// `wake_ms`; `false` when it was not ours any more.
    pub async fn park(&self, run_id: &str, epoch: u64, wake_ms: i64) -> Result<bool, Error> {
        let mut c = self.conn().await?;
        let wake: i64 = PARK
            .key(self.meta_key(run_id))
            .key(self.inbox_key(run_id))
            .arg(epoch)
            .arg(wake_ms)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        if wake < 0 {
            return Ok(false);
        }
        redis::cmd("ZADD")
            .arg(self.leases_key())
            .arg(wake)
            .arg(run_id)
            .query_async::<()>(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(true)
    }

    /// Claims a parked run for this replica before its wake-up time (a
    /// person answered it); [`Claim::Owned`] when it is not parked (its
    /// owner runs it, or another replica woke it first).
    pub async fn claim_parked(&self, run_id: &str) -> Result<Claim, Error> {
        self.claim_if(run_id, true).await
    }
}
