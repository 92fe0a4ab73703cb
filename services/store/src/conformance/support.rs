//! What every case shares: the suite's [`limits`] and small builders of
//! keys, traces, puts and awaited changes.

use std::time::Duration;

use baton_common::ids::TraceId;
use futures::StreamExt;

use crate::{Change, ChangeStream, Key, Limits, Put, Scope};

/// The limits the suite's stores are built with: small, so every limit can be
/// tested at and just over its value quickly.
pub fn limits() -> Limits {
    Limits {
        max_value_bytes: 1024,
        max_trace_bytes: 4096,
        max_trace_keys: 8,
        max_key_len: 256,
        default_ttl: Duration::from_secs(3600),
        max_ttl: Duration::from_secs(7 * 24 * 3600),
    }
}

/// A key of the test's choosing (always valid).
pub(super) fn key(s: &str) -> Key {
    Key::parse("key", s, 256).expect("test keys are valid")
}

/// A fresh trace of the tenant `""`.
pub(super) fn scope() -> Scope {
    Scope::of_trace(TraceId::random())
}

/// An unconditional put of `value` at `k` in `trace`.
pub(super) fn put(trace: &Scope, k: &str, value: &[u8]) -> Put {
    Put::new(trace.clone(), key(k), value.to_vec())
}

/// The next change of `stream`, within 5 s.
pub(super) async fn next_change(stream: &mut ChangeStream) -> Change {
    tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("a change within 5s")
        .expect("the stream is open")
        .expect("a change, not an error")
}
