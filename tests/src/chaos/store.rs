//! Rule `store` (i): the context store against the runs' outcomes, read
//! once every run ended. For each run with a log, in its trace's store:
//!
//! - every key a `write_context` call of the log wrote (a `ContextWritten`
//!   for it) holds the value the call was given, at the last version the
//!   log recorded or a later one: a write the run recorded is never lost;
//! - a `write_context` whose approval was denied (by a person, or closed
//!   by its deadline) left no slot, unless another call of the run wrote
//!   that key: what a run refused did not happen;
//! - a slot a pipeline wrote (its initial slots and its steps' outputs: a
//!   `ContextWritten` with no `write_context` call for its key) is gone
//!   once the run ended, as a pipeline without `keep_context` removes
//!   what it owns.
//!
//! A slot at a version above the last one the log recorded is a *late
//! write*: it reached the store with no event for it. Counted in the
//! summary, not a violation: a replica checks its lease before each side
//! effect, but a write already on the wire when its process is paused
//! lands whenever the process runs again, after its run was resumed
//! elsewhere. Only a fencing token checked by the store itself could
//! refuse it (the value is the same: these agents write the same value on
//! every attempt).

use std::collections::{BTreeMap, HashMap, HashSet};

use baton_client::{
    StoreClient,
    pb::{self, run_event::Payload},
};
use serde_json::Value;
use tonic::Code;

use super::summary::Violation;

/// What the rule counted over one run.
#[derive(Debug, Default, Clone, Copy)]
pub struct StoreFacts {
    /// Slots checked (written, or denied).
    pub slots: usize,
    /// Slots at a version above the log's last.
    pub late_writes: usize,
}

/// Rule (i) over run `id`, whose log is `log`.
pub async fn check(
    store: &StoreClient,
    id: &str,
    log: &[pb::RunEvent],
    out: &mut Vec<Violation>,
) -> StoreFacts {
    let mut facts = StoreFacts::default();
    let Some(trace) = log.first().map(|e| e.trace_id.as_str()) else {
        return facts;
    };
    let reading = Reading::of(log);
    let mut violation = |what: String| out.push(Violation::run(id, "store", what));
    for (key, version) in &reading.written {
        facts.slots += 1;
        let slot = match read(store, trace, key).await {
            Ok(slot) => slot,
            Err(e) => {
                violation(e);
                continue;
            }
        };
        let Some(want) = reading.values.get(key) else {
            // A pipeline's.
            if let Some((at, _)) = slot {
                violation(format!(
                    "slot {key:?} of a pipeline (version {at}) is left after the run ended"
                ));
            }
            continue;
        };
        let Some((at, value)) = slot else {
            violation(format!(
                "slot {key:?} is missing; the log recorded its write at version {version}"
            ));
            continue;
        };
        if at < *version {
            violation(format!(
                "slot {key:?} is at version {at}; the log recorded version {version}"
            ));
        }
        facts.late_writes += usize::from(at > *version);
        if let Some(want) = want
            && &value != want
        {
            violation(format!(
                "slot {key:?} holds {value:?}; the run wrote {want:?}"
            ));
        }
    }
    for key in &reading.denied {
        if reading.written.contains_key(key) {
            continue;
        }
        facts.slots += 1;
        match read(store, trace, key).await {
            Ok(None) => {}
            Ok(Some((at, _))) => violation(format!(
                "slot {key:?} was written (version {at}), though the write's approval was denied and the log records no write of it"
            )),
            Err(e) => violation(e),
        }
    }
    facts
}

/// Slot `key` of `trace`: its version and value, or `None` when absent.
async fn read(
    store: &StoreClient,
    trace: &str,
    key: &str,
) -> Result<Option<(u64, String)>, String> {
    match store.get(trace, key).await {
        Ok(got) => Ok(Some((
            got.slot.map(|s| s.version).unwrap_or_default(),
            String::from_utf8_lossy(&got.value).into_owned(),
        ))),
        Err(e) if e.code() == Code::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read slot {key:?} of trace {trace}: {e}")),
    }
}

/// What a log says of its `write_context` calls.
#[derive(Debug, Default, PartialEq)]
struct Reading {
    /// Key → the last version a `ContextWritten` recorded.
    written: BTreeMap<String, u64>,
    /// Key → the value its calls were given (`None` when two calls gave
    /// different ones: not checked).
    values: HashMap<String, Option<String>>,
    /// Keys of calls whose approval was denied.
    denied: HashSet<String>,
}

impl Reading {
    fn of(log: &[pb::RunEvent]) -> Self {
        let mut r = Self::default();
        let mut asked: HashMap<&str, String> = HashMap::new();
        for e in log {
            match &e.payload {
                Some(Payload::ToolCallStarted(c)) if c.tool == "write_context" => {
                    if let Some((key, value)) = key_value(&c.arguments_json) {
                        r.values
                            .entry(key)
                            .and_modify(|v| {
                                if v.as_deref() != Some(value.as_str()) {
                                    *v = None;
                                }
                            })
                            .or_insert(Some(value));
                    }
                }
                Some(Payload::ContextWritten(w)) => {
                    let v = r.written.entry(w.key.clone()).or_default();
                    *v = (*v).max(w.version);
                }
                Some(Payload::ApprovalRequested(q)) if q.tool == "write_context" => {
                    if let Some((key, _)) = key_value(&q.arguments_json) {
                        asked.insert(&q.approval_id, key);
                    }
                }
                Some(Payload::ApprovalResolved(a)) if !a.approved => {
                    if let Some(key) = asked.get(a.approval_id.as_str()) {
                        r.denied.insert(key.clone());
                    }
                }
                _ => {}
            }
        }
        r
    }
}

/// The `key` and `value` of a `write_context` call's arguments (a value
/// that is not a string is stored as its JSON).
fn key_value(arguments: &str) -> Option<(String, String)> {
    let args: Value = serde_json::from_str(arguments).ok()?;
    let key = args.get("key")?.as_str()?.to_owned();
    let value = match args.get("value")? {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Some((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(payload: Payload) -> pb::RunEvent {
        pb::RunEvent {
            payload: Some(payload),
            ..Default::default()
        }
    }

    fn write(key: &str, value: &str) -> pb::RunEvent {
        ev(Payload::ToolCallStarted(pb::ToolCallStarted {
            call_id: format!("c-{key}"),
            tool: "write_context".into(),
            arguments_json: serde_json::json!({"key": key, "value": value}).to_string(),
        }))
    }

    fn written(key: &str, version: u64) -> pb::RunEvent {
        ev(Payload::ContextWritten(pb::ContextWritten {
            key: key.into(),
            version,
            size_bytes: 1,
        }))
    }

    #[test]
    fn a_log_reads_as_its_writes_and_its_denials() {
        let asked = ev(Payload::ApprovalRequested(pb::ApprovalRequested {
            approval_id: "approval:c-pay".into(),
            tool: "write_context".into(),
            arguments_json: r#"{"key":"pay","value":"x"}"#.into(),
            ..Default::default()
        }));
        let denied = ev(Payload::ApprovalResolved(pb::ApprovalResolved {
            approval_id: "approval:c-pay".into(),
            approved: false,
            ..Default::default()
        }));
        let log = [
            write("nap", "a"),
            written("nap", 1),
            // Done again after a resume: the last version counts.
            write("nap", "a"),
            written("nap", 2),
            write("two", "a"),
            write("two", "b"),
            written("two", 1),
            asked,
            denied,
        ];
        let r = Reading::of(&log);
        assert_eq!(
            r.written,
            BTreeMap::from([("nap".into(), 2), ("two".into(), 1)])
        );
        assert_eq!(r.values["nap"].as_deref(), Some("a"));
        assert_eq!(r.values["two"], None);
        assert_eq!(r.denied, HashSet::from(["pay".to_owned()]));
    }

    /// Against a real context store: a kept write, a late one, a lost
    /// one, a wrong value, and a denied write that happened.
    #[tokio::test]
    async fn the_store_is_judged_against_the_log() {
        use crate::in_process::StoreServer;
        let server = StoreServer::start(StoreServer::config(
            baton_context_store::config::Backend::Memory,
            None,
        ))
        .await
        .expect("a context store");
        let store = StoreClient::connect(server.endpoint())
            .await
            .expect("connect");
        let trace = "0af7651916cd43dd8448eb211c80319c";
        let put = |key: &'static str, value: &'static str| {
            let store = store.clone();
            async move { store.put(trace, key, value.into()).await.expect("put") }
        };
        put("kept", "a").await;
        put("late", "a").await;
        put("late", "a").await;
        put("wrong", "b").await;
        let asked = |key: &str| {
            [
                ev(Payload::ApprovalRequested(pb::ApprovalRequested {
                    approval_id: format!("approval:{key}"),
                    tool: "write_context".into(),
                    arguments_json: serde_json::json!({"key": key, "value": "a"}).to_string(),
                    ..Default::default()
                })),
                ev(Payload::ApprovalResolved(pb::ApprovalResolved {
                    approval_id: format!("approval:{key}"),
                    approved: false,
                    ..Default::default()
                })),
            ]
        };
        let judge = |log: Vec<pb::RunEvent>| {
            let store = store.clone();
            async move {
                let log: Vec<_> = log
                    .into_iter()
                    .map(|mut e| {
                        e.trace_id = trace.into();
                        e
                    })
                    .collect();
                let mut out = Vec::new();
                let facts = check(&store, "run-1", &log, &mut out).await;
                (out, facts)
            }
        };
        let (out, facts) = judge(vec![
            write("kept", "a"),
            written("kept", 1),
            write("late", "a"),
            written("late", 1),
        ])
        .await;
        assert!(out.is_empty(), "{out:?}");
        assert_eq!((facts.slots, facts.late_writes), (2, 1));

        let (out, _) = judge(vec![write("lost", "a"), written("lost", 1)]).await;
        assert!(out[0].evidence.contains("\"lost\" is missing"), "{out:?}");
        let (out, _) = judge(vec![write("wrong", "a"), written("wrong", 1)]).await;
        assert!(out[0].evidence.contains("holds \"b\""), "{out:?}");
        let (out, _) = judge(vec![write("kept", "a"), written("kept", 2)]).await;
        assert!(out[0].evidence.contains("at version 1"), "{out:?}");

        // A denied write: right when absent, a violation when present.
        let (out, facts) = judge(asked("absent").to_vec()).await;
        assert!(out.is_empty() && facts.slots == 1, "{out:?}");
        let (out, _) = judge(asked("kept").to_vec()).await;
        assert!(out[0].evidence.contains("denied"), "{out:?}");

        // A pipeline's slot (no write_context call for it): gone at the end.
        let (out, _) = judge(vec![written("gone", 2)]).await;
        assert!(out.is_empty(), "{out:?}");
        let (out, _) = judge(vec![written("kept", 1)]).await;
        assert!(out[0].evidence.contains("of a pipeline"), "{out:?}");
        server.shutdown().await.expect("shutdown");
    }
}
