//! Reading what Redis and the scripts answer: integers and strings of a
//! reply, the status code a script answers first, and the answer of a
//! write that started after its deadline. An answer of another shape is a
//! bug (`INTERNAL`), never retried.

use redis::Value;

use crate::error::{Error, Result};

/// An integer of a reply.
pub(super) fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        other => Err(Error::Internal(format!(
            "redis: expected an integer, got {other:?}"
        ))),
    }
}

/// A string of a reply.
pub(super) fn text(v: &Value) -> Result<String> {
    match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        other => Err(Error::Internal(format!(
            "redis: expected a string, got {other:?}"
        ))),
    }
}

/// What a write script answers when it started after its deadline.
pub(super) const LATE: i64 = 9;

/// The error of a write its script refused as late.
pub(super) fn late() -> Error {
    Error::Unavailable(
        "Redis ran the write only after redis.timeout had passed, so it refused it; nothing was written"
            .into(),
    )
}

/// The status code a script answers first.
pub(super) fn reply_code(reply: &[Value]) -> Result<i64> {
    reply
        .first()
        .map(int)
        .unwrap_or_else(|| Err(Error::Internal("redis: empty script reply".into())))
}

/// Field `i` of a script's reply, an integer.
pub(super) fn field(reply: &[Value], i: usize) -> Result<i64> {
    reply.get(i).map(int).unwrap_or_else(|| {
        Err(Error::Internal(format!(
            "redis: script reply has no field {i}"
        )))
    })
}
