//! The `openai` provider kind: any OpenAI-compatible Chat Completions
//! endpoint (OpenAI, vLLM, Ollama, llama.cpp, LiteLLM).
//!
//! Requests stream by default (`stream: true` with
//! `stream_options.include_usage`), so text reaches the client as the model
//! writes it; tool calls arrive in fragments (id and name first, arguments
//! in pieces, by `index`) and are assembled here. A streamed answer with
//! neither text nor tool calls (servers that drop tool calls from streams)
//! is asked again without streaming, with a warning in the log; `stream:
//! false` on the provider or model asks for whole answers from the start.
//! Retries and the meaning of failures: see `super::http`. Nothing is
//! retried once text has been streamed, so a client never sees a delta
//! twice. `timeout` bounds the connection and every wait for the next
//! chunk; the run's `model_timeout` bounds the whole call.

use std::{collections::BTreeMap, sync::Arc};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::catalog::{
    models::{ProviderKind, ProviderSpec},
    settings::Settings,
};

use super::http::{Endpoint, empty_answer, stream_error};
use super::{
    chat::{ChatMessage, Role, ToolCallRequest},
    error::{ModelError, SetupError},
    turn::{DeltaSink, Model, ModelRequest, ModelTurn, TokenUsage},
};

/// A configured OpenAI-compatible endpoint.
pub struct OpenAiProvider {
    endpoint: Endpoint,
    url: String,
}

impl OpenAiProvider {
    /// The provider `providers.<name>`, with the key read through `env`.
    pub fn new(
        name: &str,
        spec: &ProviderSpec,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, SetupError> {
        let endpoint = Endpoint::new(name, spec, ProviderKind::Openai, env)?;
        Ok(Self {
            url: format!("{}/chat/completions", endpoint.base_url),
            endpoint,
        })
    }
}

/// One model of the provider.
pub struct OpenAiModel {
    provider: Arc<OpenAiProvider>,
    reference: String,
    model: String,
    settings: Settings,
    stream: bool,
    max_output: Option<u32>,
}

impl OpenAiModel {
    /// `model` on `provider`, with the provider's (and model entry's)
    /// settings.
    pub fn new(
        provider: Arc<OpenAiProvider>,
        reference: &str,
        model: &str,
        settings: Settings,
        stream: bool,
    ) -> Self {
        Self {
            provider,
            reference: reference.to_owned(),
            model: model.to_owned(),
            settings,
            stream,
            max_output: None,
        }
    }

    /// The model's output limit (see `Model::max_output_tokens`).
    pub fn with_max_output(mut self, limit: Option<u32>) -> Self {
        self.max_output = limit;
        self
    }

    /// The request body: conversation, tools, settings, extra fields.
    fn body(&self, request: &ModelRequest<'_>, stream: bool) -> Value {
        let mut body = json!({
            "model": self.model,
            "messages": request.messages.iter().filter_map(wire_message).collect::<Vec<_>>(),
        });
        if stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        let s = request.settings;
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
                .collect();
            if let Some(choice) = &s.tool_choice {
                body["tool_choice"] = match choice.as_str() {
                    "auto" | "none" | "required" => json!(choice),
                    tool => json!({"type": "function", "function": {"name": tool}}),
                };
            }
            if let Some(p) = s.parallel_tool_calls {
                body["parallel_tool_calls"] = json!(p);
            }
        }
        if let Some(t) = s.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(p) = s.top_p {
            body["top_p"] = json!(p);
        }
        if let Some(m) = s.max_tokens {
            body["max_tokens"] = json!(m);
        }
        if let Some(stop) = &s.stop {
            body["stop"] = json!(stop);
        }
        if let Some(seed) = s.seed {
            body["seed"] = json!(seed);
        }
        if let Some(f) = &s.response_format {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": {"name": f.name, "schema": f.schema, "strict": f.strict},
            });
        }
        s.add_extra(&mut body);
        body
    }

    async fn post(&self, body: &Value) -> Result<reqwest::Response, ModelError> {
        let p = &self.provider;
        p.endpoint
            .send(&self.reference, || {
                let b = p.endpoint.http.post(&p.url).json(body);
                match &p.endpoint.api_key {
                    Some(key) => b.bearer_auth(key),
                    None => b,
                }
            })
            .await
    }

    /// One streamed call.
    async fn streamed(
        &self,
        request: &ModelRequest<'_>,
        sink: &dyn DeltaSink,
    ) -> Result<ModelTurn, ModelError> {
        let fail = |what: String| stream_error(&self.reference, what);
        let response = self.post(&self.body(request, true)).await?;
        let mut events = response.bytes_stream().eventsource();
        let mut text = String::new();
        let mut calls: BTreeMap<u64, PartialCall> = BTreeMap::new();
        let mut usage = TokenUsage::default();
        let mut finish_reason = String::new();
        let mut model = String::new();
        let mut done = false;
        while let Some(event) = events.next().await {
            let event = event
                .map_err(|e| fail(format!("stream broke: {}", super::http::cause_chain(&e))))?;
            if event.data.trim() == "[DONE]" {
                done = true;
                break;
            }
            let chunk: Value = serde_json::from_str(&event.data)
                .map_err(|e| fail(format!("unreadable chunk: {e}")))?;
            if let Some(err) = chunk.get("error") {
                return Err(fail(format!(
                    "error in stream: {}",
                    super::http::provider_message(&json!({"error": err}).to_string())
                )));
            }
            if let Some(m) = chunk.get("model").and_then(Value::as_str)
                && model.is_empty()
            {
                model = m.to_owned();
            }
            if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
                usage = read_usage(u);
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
        // A stream that ends before the answer did (no finish_reason, no
        // `[DONE]`) is a broken answer, not a short one.
        if !done && finish_reason.is_empty() {
            return Err(fail(
                "the stream ended before the answer did (no finish_reason, no [DONE])".into(),
            ));
        }
        Ok(finish(
            text,
            calls.into_values().collect(),
            usage,
            finish_reason,
            model,
            request.call_id_prefix,
        ))
    }

    /// One call without streaming; the text goes to `sink` in one piece.
    async fn whole(
        &self,
        request: &ModelRequest<'_>,
        sink: &dyn DeltaSink,
    ) -> Result<ModelTurn, ModelError> {
        let response = self.post(&self.body(request, false)).await?;
        let answer: Value = response.json().await.map_err(|e| {
            stream_error(
                &self.reference,
                format!("unreadable answer: {}", super::http::cause_chain(&e)),
            )
        })?;
        let choice = &answer["choices"][0];
        let message = &choice["message"];
        let text = message["content"].as_str().unwrap_or_default().to_owned();
        if !text.is_empty() {
            sink.delta(text.clone()).await;
        }
        let calls = message["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| PartialCall {
                id: c["id"].as_str().unwrap_or_default().to_owned(),
                name: c["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                arguments: match &c["function"]["arguments"] {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                },
            })
            .collect();
        Ok(finish(
            text,
            calls,
            read_usage(&answer["usage"]),
            choice["finish_reason"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            answer["model"].as_str().unwrap_or_default().to_owned(),
            request.call_id_prefix,
        ))
    }
}

fn read_usage(u: &Value) -> TokenUsage {
    TokenUsage {
        input_tokens: u["prompt_tokens"].as_u64().unwrap_or(0),
        output_tokens: u["completion_tokens"].as_u64().unwrap_or(0),
        cached_input_tokens: u["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0),
    }
}

/// The turn of an answer's parts: calls get ids when the server gave none,
/// arguments are parsed, the finish reason is filled in when missing.
fn finish(
    text: String,
    calls: Vec<PartialCall>,
    usage: TokenUsage,
    mut finish_reason: String,
    model: String,
    call_id_prefix: &str,
) -> ModelTurn {
    let calls = calls
        .into_iter()
        .enumerate()
        .map(|(i, c)| ToolCallRequest {
            id: if c.id.is_empty() {
                format!("{call_id_prefix}{}", i + 1)
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
    ModelTurn {
        text,
        calls,
        usage,
        finish_reason,
        model,
        answered_by: String::new(),
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

#[async_trait::async_trait]
impl Model for OpenAiModel {
    fn reference(&self) -> &str {
        &self.reference
    }

    fn max_output_tokens(&self) -> Option<u32> {
        self.max_output
    }

    fn system(&self) -> &str {
        "openai"
    }

    fn settings(&self) -> &Settings {
        &self.settings
    }

    async fn turn(
        &self,
        request: ModelRequest<'_>,
        sink: &dyn DeltaSink,
    ) -> Result<ModelTurn, ModelError> {
        if !self.stream {
            let turn = self.whole(&request, sink).await?;
            if turn.text.is_empty() && turn.calls.is_empty() {
                return Err(empty_answer(&self.reference, &turn.finish_reason));
            }
            return Ok(turn);
        }
        let turn = self.streamed(&request, sink).await?;
        if !turn.text.is_empty() || !turn.calls.is_empty() {
            return Ok(turn);
        }
        tracing::warn!(
            model = %self.reference,
            finish_reason = %turn.finish_reason,
            "a streamed answer carried neither text nor tool calls; asking again without streaming (set `stream: false` on the provider or model to skip the streamed try)"
        );
        let again = self.whole(&request, sink).await?;
        if again.text.is_empty() && again.calls.is_empty() {
            return Err(empty_answer(&self.reference, &again.finish_reason));
        }
        Ok(ModelTurn {
            usage: TokenUsage {
                input_tokens: turn.usage.input_tokens + again.usage.input_tokens,
                output_tokens: turn.usage.output_tokens + again.usage.output_tokens,
                cached_input_tokens: turn.usage.cached_input_tokens
                    + again.usage.cached_input_tokens,
            },
            ..again
        })
    }
}
