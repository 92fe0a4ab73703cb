//! The built-in tools.

use std::{sync::atomic::Ordering, time::Duration};

use baton_proto::v1::{self as pb, run_event::Payload};
use baton_store::{DEFAULT_PAGE_SIZE, Key, MAX_PAGE_SIZE, Page, PageToken, Put};
use serde_json::{Value, json};

use super::tool::{Resume, Tool, ToolCtx, ToolOutcome};
use crate::catalog::builtin as names;

/// Every built-in tool the toolbox runs, by name ([`names::TOOLS`] but
/// `run_pipeline`, which the runtime runs).
pub fn all() -> Vec<(&'static str, std::sync::Arc<dyn Tool>)> {
    vec![
        (names::READ_CONTEXT, std::sync::Arc::new(ReadContext)),
        (names::WRITE_CONTEXT, std::sync::Arc::new(WriteContext)),
        (names::LIST_CONTEXT, std::sync::Arc::new(ListContext)),
        (names::ASK_USER, std::sync::Arc::new(AskUser)),
        (names::SLEEP, std::sync::Arc::new(Sleep)),
    ]
}

// The built-ins' argument errors are strings: they become the call's
// `ToolOutcome::Err`, the text the model reads to fix its arguments.
fn str_arg<'a>(args: &'a Value, name: &str) -> Result<&'a str, String> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("argument {name:?} must be a string"))
}

// A string for the same reason as `str_arg`: the model reads it.
fn key_arg(ctx: &ToolCtx<'_>, args: &Value) -> Result<Key, String> {
    let key = str_arg(args, "key")?;
    Key::parse("key", key, ctx.store.limits().max_key_len).map_err(|e| e.to_string())
}

/// `read_context {key}`: a slot of the run's trace, as text.
struct ReadContext;

#[async_trait::async_trait]
impl Tool for ReadContext {
    fn external(&self) -> bool {
        false
    }

    fn describe(&self) -> (String, Value) {
        (
            "Read a slot of the shared context of this request.".into(),
            json!({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}),
        )
    }

    async fn call(&self, ctx: &ToolCtx<'_>, args: &Value, _: Option<Resume>) -> ToolOutcome {
        let key = match key_arg(ctx, args) {
            Ok(k) => k,
            Err(e) => return ToolOutcome::Err(e),
        };
        match ctx.store.get(ctx.scope, &key).await {
            Ok(slot) => ToolOutcome::Ok(String::from_utf8_lossy(&slot.value).into_owned()),
            Err(e) => ToolOutcome::Err(e.to_string()),
        }
    }
}

/// `write_context {key, value, ttl_seconds?}`: writes a slot (strings as
/// text, anything else as JSON) and emits ContextWritten.
struct WriteContext;

#[async_trait::async_trait]
impl Tool for WriteContext {
    fn external(&self) -> bool {
        false
    }

    fn describe(&self) -> (String, Value) {
        (
            "Write a slot of the shared context of this request, for other agents to read.".into(),
            json!({"type": "object", "properties": {
                "key": {"type": "string"},
                "value": {},
                "ttl_seconds": {"type": "integer", "minimum": 1}
            }, "required": ["key", "value"]}),
        )
    }

    async fn call(&self, ctx: &ToolCtx<'_>, args: &Value, _: Option<Resume>) -> ToolOutcome {
        let key = match key_arg(ctx, args) {
            Ok(k) => k,
            Err(e) => return ToolOutcome::Err(e),
        };
        let (value, content_type) = match args.get("value") {
            Some(Value::String(s)) => (s.clone().into_bytes(), "text/plain; charset=utf-8"),
            Some(v) => (v.to_string().into_bytes(), "application/json"),
            None => return ToolOutcome::Err("argument \"value\" is required".into()),
        };
        let mut put = Put::new(ctx.scope.clone(), key.clone(), value);
        put.content_type = content_type.into();
        put.ttl = args
            .get("ttl_seconds")
            .and_then(Value::as_u64)
            .map(Duration::from_secs);
        let size = put.value.len() as u64;
        match ctx.store.put(put).await {
            Ok(w) => {
                let payload = Payload::ContextWritten(pb::ContextWritten {
                    key: key.as_str().to_owned(),
                    version: w.version,
                    size_bytes: size,
                });
                ctx.emit(payload).await;
                ToolOutcome::Ok(format!("wrote {} at version {}", key.as_str(), w.version))
            }
            Err(e) => ToolOutcome::Err(e.to_string()),
        }
    }
}

/// `list_context {prefix?, page_size?, page_token?}`: one page of the slots
/// of the run's trace (AIP-158 paging, as the store's List): `{"slots":
/// [{key, version, size_bytes}], "next_page_token": "…"}`, the token empty
/// on the last page.
struct ListContext;

#[async_trait::async_trait]
impl Tool for ListContext {
    fn external(&self) -> bool {
        false
    }

    fn describe(&self) -> (String, Value) {
        (
            "List the slots of the shared context of this request, a page at a time: pass the \
             answer's next_page_token as page_token for the next page (empty on the last)."
                .into(),
            json!({"type": "object", "properties": {
                "prefix": {"type": "string"},
                "page_size": {"type": "integer", "minimum": 0, "maximum": MAX_PAGE_SIZE},
                "page_token": {"type": "string"}
            }}),
        )
    }

    async fn call(&self, ctx: &ToolCtx<'_>, args: &Value, _: Option<Resume>) -> ToolOutcome {
        let prefix = args.get("prefix").and_then(Value::as_str).unwrap_or("");
        if let Err(e) = baton_store::validate_key_chars("prefix", prefix, 256) {
            return ToolOutcome::Err(e.to_string());
        }
        let size = match args.get("page_size") {
            None | Some(Value::Null) => DEFAULT_PAGE_SIZE,
            Some(v) => match v.as_u64() {
                Some(0) => DEFAULT_PAGE_SIZE,
                Some(n) => (n as usize).min(MAX_PAGE_SIZE),
                None => {
                    return ToolOutcome::Err(
                        "page_size: must be a whole number from 0 to 1000".into(),
                    );
                }
            },
        };
        let trace = &ctx.scope.trace_id;
        let after = match args.get("page_token").and_then(Value::as_str) {
            None | Some("") => None,
            Some(token) => match PageToken::decode("page_token", token, trace, prefix) {
                Ok(t) => Some(t.after),
                Err(e) => return ToolOutcome::Err(e.to_string()),
            },
        };
        let page = Page { after, size };
        match ctx.store.list_page(ctx.scope, prefix, &page).await {
            Ok(l) => {
                let next_page_token = l
                    .next_after
                    .map(|after| {
                        PageToken {
                            trace_id: trace.to_string(),
                            prefix: prefix.to_owned(),
                            after,
                        }
                        .encode()
                    })
                    .unwrap_or_default();
                let slots: Vec<Value> = l
                    .slots
                    .iter()
                    .map(
                        |s| json!({"key": s.key, "version": s.version, "size_bytes": s.size_bytes}),
                    )
                    .collect();
                ToolOutcome::Ok(
                    json!({"slots": slots, "next_page_token": next_page_token}).to_string(),
                )
            }
            Err(e) => ToolOutcome::Err(e.to_string()),
        }
    }
}

/// `ask_user {question, options?}`: asks a person and returns the answer.
struct AskUser;

#[async_trait::async_trait]
impl Tool for AskUser {
    fn external(&self) -> bool {
        false
    }

    fn describe(&self) -> (String, Value) {
        (
            "Ask the person a question and wait for the answer.".into(),
            json!({"type": "object", "properties": {
                "question": {"type": "string"},
                "options": {"type": "array", "items": {"type": "string"}}
            }, "required": ["question"]}),
        )
    }

    async fn call(&self, _: &ToolCtx<'_>, args: &Value, resume: Option<Resume>) -> ToolOutcome {
        if let Some(r) = resume {
            return ToolOutcome::Ok(r.input);
        }
        let question = match str_arg(args, "question") {
            Ok(q) => q.to_owned(),
            Err(e) => return ToolOutcome::Err(e),
        };
        let options = args
            .get("options")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        ToolOutcome::NeedInput {
            prompt: question,
            options,
            resume_token: "ask_user".into(),
        }
    }
}

/// `sleep {ms, steps?}`: waits `ms` milliseconds, reporting progress in
/// `steps` steps (default 4). Counts itself on the run when dropped before it
/// finished, so tests can see cancellation reach it.
struct Sleep;

struct CancelRecorder<'a> {
    ctx: &'a ToolCtx<'a>,
    done: bool,
}

impl Drop for CancelRecorder<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.ctx.cancelled_calls.fetch_add(1, Ordering::SeqCst);
            tracing::debug!(call_id = self.ctx.call_id, "sleep cancelled");
        }
    }
}

#[async_trait::async_trait]
impl Tool for Sleep {
    fn external(&self) -> bool {
        false
    }

    fn describe(&self) -> (String, Value) {
        (
            "Wait a number of milliseconds, reporting progress.".into(),
            json!({"type": "object", "properties": {
                "ms": {"type": "integer", "minimum": 0, "maximum": 3600000},
                "steps": {"type": "integer", "minimum": 1, "maximum": 100}
            }, "required": ["ms"]}),
        )
    }

    async fn call(&self, ctx: &ToolCtx<'_>, args: &Value, _: Option<Resume>) -> ToolOutcome {
        let Some(ms) = args
            .get("ms")
            .and_then(Value::as_u64)
            .filter(|ms| *ms <= 3_600_000)
        else {
            return ToolOutcome::Err("argument \"ms\" must be an integer from 0 to 3600000".into());
        };
        let steps = args
            .get("steps")
            .and_then(Value::as_u64)
            .unwrap_or(4)
            .clamp(1, 100);
        let mut recorder = CancelRecorder { ctx, done: false };
        for i in 1..=steps {
            tokio::time::sleep(Duration::from_millis(ms / steps)).await;
            ctx.progress((i * 100 / steps) as u32, format!("step {i} of {steps}"))
                .await;
        }
        recorder.done = true;
        ToolOutcome::Ok(format!("slept {ms} ms"))
    }
}

#[cfg(test)]
mod tests {
    use super::{all, names};

    #[test]
    fn the_toolbox_runs_every_builtin_but_run_pipeline() {
        let mut ran: Vec<&str> = all().into_iter().map(|(n, _)| n).collect();
        ran.push(names::RUN_PIPELINE);
        ran.sort_unstable();
        let mut listed = names::TOOLS.to_vec();
        listed.sort_unstable();
        assert_eq!(ran, listed);
    }
}
