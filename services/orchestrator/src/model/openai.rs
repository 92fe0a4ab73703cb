//! The `openai` provider: any OpenAI-compatible Chat Completions endpoint
//! (OpenAI, vLLM, Ollama, llama.cpp, LiteLLM).
//!
//! Requests stream (`stream: true` with `stream_options.include_usage`), so
//! text reaches the client as the model writes it; tool calls arrive in
//! fragments (id and name first, arguments in pieces, by `index`) and are
//! assembled here. A 429 or 5xx answer, or a connection failure, is retried
//! with exponential backoff, waiting as long as `Retry-After` says when the
//! server says; nothing is retried once text has been streamed, so a client
//! never sees a delta twice. `timeout` bounds the connection and every wait
//! for the next chunk; the run's `model_timeout` bounds the whole call.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::catalog::models::OpenAiSpec;

use super::{
    ChatMessage, DeltaSink, ModelError, ModelRequest, ModelTurn, Role, TokenUsage, ToolCallRequest,
};

/// A configured OpenAI-compatible endpoint.
pub struct OpenAiProvider {
    http: reqwest::Client,
    url: String,
    api_key: Option<String>,
    max_retries: u32,
    backoff: Duration,
}

impl OpenAiProvider {
    /// The provider for `spec`, with the key read through `env`.
    pub fn new(spec: &OpenAiSpec, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, String> {
        let api_key = if spec.api_key_env.is_empty() {
            None
        } else {
            Some(env(&spec.api_key_env).filter(|k| !k.is_empty()).ok_or_else(|| {
                format!(
                    "providers.openai.api_key_env: {0} is not set (set it or {0}_FILE, or set api_key_env to \"\" for a server without keys)",
                    spec.api_key_env
                )
            })?)
        };
        let http = reqwest::Client::builder()
            .connect_timeout(spec.timeout)
            .read_timeout(spec.timeout)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| format!("providers.openai: cannot build the HTTP client: {e}"))?;
        Ok(Self {
            http,
            url: format!("{}/chat/completions", spec.base_url.trim_end_matches('/')),
            api_key,
            max_retries: spec.max_retries,
            backoff: spec.backoff,
        })
    }
}

/// One model of the provider.
pub struct OpenAiModel {
    provider: Arc<OpenAiProvider>,
    reference: String,
    model: String,
}

impl OpenAiModel {
    /// `model` on `provider`.
    pub fn new(provider: Arc<OpenAiProvider>, reference: &str, model: &str) -> Self {
        Self {
            provider,
            reference: reference.to_owned(),
            model: model.to_owned(),
        }
    }
}

fn wire_message(m: &ChatMessage) -> Option<Value> {
    Some(match m.role {
        Role::System if m.content.is_empty() => return None,
        Role::System => json!({"role": "system", "content": m.content}),
        Role::User => json!({"role": "user", "content": m.content}),
        Role::Assistant if m.tool_calls.is_empty() => {
            json!({"role": "assistant", "content": m.content})
        }
        Role::Assistant => json!({
            "role": "assistant",
            "content": if m.content.is_empty() { Value::Null } else { Value::String(m.content.clone()) },
            "tool_calls": m.tool_calls.iter().map(|c| json!({
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments.to_string()},
            })).collect::<Vec<_>>(),
        }),
        Role::Tool => json!({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}),
    })
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// How long to wait before retry `attempt` (from 0).
fn retry_wait(response: Option<&reqwest::Response>, backoff: Duration, attempt: u32) -> Duration {
    let told = response
        .and_then(|r| r.headers().get(reqwest::header::RETRY_AFTER))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| Duration::from_secs_f64(s.min(300.0)));
    told.unwrap_or_else(|| backoff.saturating_mul(1 << attempt.min(10)))
}

#[async_trait::async_trait]
impl super::Model for OpenAiModel {
    fn reference(&self) -> &str {
        &self.reference
    }

    async fn turn(
        &self,
        request: ModelRequest<'_>,
        sink: &dyn DeltaSink,
    ) -> Result<ModelTurn, ModelError> {
        let fail = |message: String| ModelError {
            model: self.reference.clone(),
            message,
        };
        let mut body = json!({
            "model": self.model,
            "messages": request.messages.iter().filter_map(wire_message).collect::<Vec<_>>(),
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
                .collect();
        }

        let p = &self.provider;
        let mut attempt = 0;
        let response = loop {
            let mut builder = p.http.post(&p.url).json(&body);
            if let Some(key) = &p.api_key {
                builder = builder.bearer_auth(key);
            }
            match builder.send().await {
                Ok(r) if r.status().is_success() => break r,
                Ok(r)
                    if (r.status().as_u16() == 429 || r.status().is_server_error())
                        && attempt < p.max_retries =>
                {
                    let wait = retry_wait(Some(&r), p.backoff, attempt);
                    tracing::warn!(model = %self.reference, status = r.status().as_u16(), ?wait, attempt, "model call retried");
                    tokio::time::sleep(wait).await;
                }
                Ok(r) => {
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    return Err(fail(format!(
                        "HTTP {status}: {}",
                        text.chars().take(500).collect::<String>()
                    )));
                }
                Err(e) if (e.is_connect() || e.is_timeout()) && attempt < p.max_retries => {
                    let wait = retry_wait(None, p.backoff, attempt);
                    tracing::warn!(model = %self.reference, error = %e, ?wait, attempt, "model call retried");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(fail(format!("request failed: {e}"))),
            }
            attempt += 1;
        };

        let mut events = response.bytes_stream().eventsource();
        let mut text = String::new();
        let mut calls: BTreeMap<u64, PartialCall> = BTreeMap::new();
        let mut usage = TokenUsage::default();
        let mut finish_reason = String::new();
        let mut model = String::new();
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| fail(format!("stream broke: {e}")))?;
            if event.data.trim() == "[DONE]" {
                break;
            }
            let chunk: Value = serde_json::from_str(&event.data)
                .map_err(|e| fail(format!("unreadable chunk: {e}")))?;
            if let Some(err) = chunk.get("error") {
                return Err(fail(format!("error in stream: {err}")));
            }
            if let Some(m) = chunk.get("model").and_then(Value::as_str)
                && model.is_empty()
            {
                model = m.to_owned();
            }
            if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
                usage.input_tokens = u["prompt_tokens"].as_u64().unwrap_or(0);
                usage.output_tokens = u["completion_tokens"].as_u64().unwrap_or(0);
            }
            for choice in chunk["choices"].as_array().into_iter().flatten() {
                if let Some(r) = choice["finish_reason"].as_str() {
                    finish_reason = r.to_owned();
                }
                let delta = &choice["delta"];
                if let Some(piece) = delta["content"].as_str().filter(|s| !s.is_empty()) {
                    text.push_str(piece);
                    sink.delta(piece.to_owned()).await;
                }
                for tc in delta["tool_calls"].as_array().into_iter().flatten() {
                    let call = calls.entry(tc["index"].as_u64().unwrap_or(0)).or_default();
                    if let Some(id) = tc["id"].as_str() {
                        call.id = id.to_owned();
                    }
                    if let Some(name) = tc["function"]["name"].as_str() {
                        call.name.push_str(name);
                    }
                    if let Some(args) = tc["function"]["arguments"].as_str() {
                        call.arguments.push_str(args);
                    }
                }
            }
        }

        let calls = calls
            .into_values()
            .enumerate()
            .map(|(i, c)| ToolCallRequest {
                id: if c.id.is_empty() {
                    format!("{}{}", request.call_id_prefix, i + 1)
                } else {
                    c.id
                },
                name: c.name,
                // Arguments that are not JSON go to the tool as they are;
                // it reports the error, which the model then sees.
                arguments: if c.arguments.trim().is_empty() {
                    json!({})
                } else {
                    serde_json::from_str(&c.arguments).unwrap_or(Value::String(c.arguments))
                },
            })
            .collect::<Vec<_>>();
        if finish_reason.is_empty() {
            finish_reason = if calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            }
            .into();
        }
        Ok(ModelTurn {
            text,
            calls,
            usage,
            finish_reason,
            model,
        })
    }
}
