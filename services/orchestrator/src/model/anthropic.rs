//! The `anthropic` provider kind: Anthropic's Messages API
//! (`POST {base_url}/messages`, `x-api-key`, `anthropic-version: 2023-06-01`).
//!
//! Streaming (server-sent `message_start`, `content_block_*`,
//! `message_delta`, `message_stop`), tool use (`tool_use` blocks, their
//! input streamed as `input_json_delta`; results go back as `tool_result`
//! blocks of a user message), usage, errors (an `error` event mid-stream is
//! `UNAVAILABLE`; statuses as `super::http` says, 529 "overloaded" being a
//! 5xx) and retries as the OpenAI kind. Settings: `max_tokens` is required
//! by the API and defaults to 4096; `stop` becomes `stop_sequences`;
//! `tool_choice` `required` becomes `any`; `parallel_tool_calls: false`
//! becomes `disable_parallel_tool_use`; `seed` has no equivalent and is not
//! sent; `response_format` is enforced by Baton's check of the answer (pass
//! the API's own structured-output field in `extra` where the model has
//! one).

use std::{collections::BTreeMap, sync::Arc};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::catalog::{
    models::{ProviderKind, ProviderSpec},
    settings::Settings,
};

use super::http::{Endpoint, cause_chain, empty_answer, stream_error};
use super::{
    chat::{ChatMessage, Role, ToolCallRequest},
    error::{ModelError, SetupError},
    turn::{DeltaSink, Model, ModelRequest, ModelTurn, TokenUsage},
};

/// The API version sent with every request.
pub const API_VERSION: &str = "2023-06-01";
/// `max_tokens` when no level sets it (the API requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A configured Messages API endpoint.
pub struct AnthropicProvider {
    endpoint: Endpoint,
    url: String,
}

impl AnthropicProvider {
    /// The provider `providers.<name>`, with the key read through `env`.
    pub fn new(
        name: &str,
        spec: &ProviderSpec,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, SetupError> {
        let endpoint = Endpoint::new(name, spec, ProviderKind::Anthropic, env)?;
        Ok(Self {
            url: format!("{}/messages", endpoint.base_url),
            endpoint,
        })
    }
}

/// One model of the provider.
pub struct AnthropicModel {
    provider: Arc<AnthropicProvider>,
    reference: String,
    model: String,
    settings: Settings,
    stream: bool,
    max_output: Option<u32>,
}

impl AnthropicModel {
    /// `model` on `provider`, with the provider's (and model entry's)
    /// settings.
    pub fn new(
        provider: Arc<AnthropicProvider>,
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

    fn body(&self, request: &ModelRequest<'_>, stream: bool) -> Value {
        let s = request.settings;
        let (system, messages) = wire_messages(request.messages);
        let mut body = json!({
            "model": self.model,
            "max_tokens": s.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            "messages": messages,
        });
        if !system.is_empty() {
            body["system"] = json!(system);
        }
        if stream {
            body["stream"] = json!(true);
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect();
            let mut choice = match s.tool_choice.as_deref() {
                None => None,
                Some("auto") => Some(json!({"type": "auto"})),
                Some("none") => Some(json!({"type": "none"})),
                Some("required") => Some(json!({"type": "any"})),
                Some(tool) => Some(json!({"type": "tool", "name": tool})),
            };
            if s.parallel_tool_calls == Some(false) {
                let c = choice.get_or_insert_with(|| json!({"type": "auto"}));
                c["disable_parallel_tool_use"] = json!(true);
            }
            if let Some(c) = choice {
                body["tool_choice"] = c;
            }
        }
        if let Some(t) = s.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(p) = s.top_p {
            body["top_p"] = json!(p);
        }
        if let Some(stop) = &s.stop {
            body["stop_sequences"] = json!(stop);
        }
        s.add_extra(&mut body);
        body
    }

    async fn post(&self, body: &Value) -> Result<reqwest::Response, ModelError> {
        let p = &self.provider;
        p.endpoint
            .send(&self.reference, || {
                let b = p
                    .endpoint
                    .http
                    .post(&p.url)
                    .header("anthropic-version", API_VERSION)
                    .json(body);
                match &p.endpoint.api_key {
                    Some(key) => b.header("x-api-key", key),
                    None => b,
                }
            })
            .await
    }

    async fn streamed(
        &self,
        request: &ModelRequest<'_>,
        sink: &dyn DeltaSink,
    ) -> Result<ModelTurn, ModelError> {
        let fail = |what: String| stream_error(&self.reference, what);
        let response = self.post(&self.body(request, true)).await?;
        let mut events = response.bytes_stream().eventsource();
        let mut blocks: BTreeMap<u64, Block> = BTreeMap::new();
        let mut text = String::new();
        let mut usage = TokenUsage::default();
        let mut stop_reason = String::new();
        let mut model = String::new();
        let mut stopped = false;
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| fail(format!("stream broke: {}", cause_chain(&e))))?;
            let data: Value = match serde_json::from_str(&event.data) {
                Ok(v) => v,
                Err(_) if event.data.trim().is_empty() => continue,
                Err(e) => return Err(fail(format!("unreadable event: {e}"))),
            };
            match data["type"].as_str().unwrap_or(event.event.as_str()) {
                "message_start" => {
                    let m = &data["message"];
                    model = m["model"].as_str().unwrap_or_default().to_owned();
                    usage.input_tokens = input_tokens(&m["usage"]);
                    usage.cached_input_tokens = cached_tokens(&m["usage"]);
                    usage.output_tokens = m["usage"]["output_tokens"].as_u64().unwrap_or(0);
                }
                "content_block_start" => {
                    let b = &data["content_block"];
                    let index = data["index"].as_u64().unwrap_or(0);
                    if b["type"] == "tool_use" {
                        blocks.insert(
                            index,
                            Block {
                                id: b["id"].as_str().unwrap_or_default().to_owned(),
                                name: b["name"].as_str().unwrap_or_default().to_owned(),
                                input: String::new(),
                            },
                        );
                    }
                }
                "content_block_delta" => {
                    let d = &data["delta"];
                    match d["type"].as_str() {
                        Some("text_delta") => {
                            if let Some(piece) = d["text"].as_str().filter(|t| !t.is_empty()) {
                                text.push_str(piece);
                                sink.delta(piece.to_owned()).await;
                            }
                        }
                        Some("input_json_delta") => {
                            let index = data["index"].as_u64().unwrap_or(0);
                            if let Some(b) = blocks.get_mut(&index) {
                                b.input
                                    .push_str(d["partial_json"].as_str().unwrap_or_default());
                            }
                        }
                        _ => {}
                    }
                }
                "message_delta" => {
                    if let Some(r) = data["delta"]["stop_reason"].as_str() {
                        stop_reason = r.to_owned();
                    }
                    if let Some(o) = data["usage"]["output_tokens"].as_u64() {
                        usage.output_tokens = o;
                    }
                }
                "message_stop" => {
                    stopped = true;
                    break;
                }
                "error" => {
                    return Err(fail(format!(
                        "error in stream: {}",
                        super::http::provider_message(&data.to_string())
                    )));
                }
                _ => {}
            }
        }
        // A stream that ends before the message did is a broken answer,
        // not a short one.
        if !stopped && stop_reason.is_empty() {
            return Err(fail(
                "the stream ended before the answer did (no message_stop)".into(),
            ));
        }
        let calls = blocks
            .into_values()
            .map(|b| (b.id, b.name, parse_input(&b.input)))
            .collect();
        Ok(turn(
            text,
            calls,
            usage,
            &stop_reason,
            model,
            request.call_id_prefix,
        ))
    }

    async fn whole(
        &self,
        request: &ModelRequest<'_>,
        sink: &dyn DeltaSink,
    ) -> Result<ModelTurn, ModelError> {
        let response = self.post(&self.body(request, false)).await?;
        let answer: Value = response.json().await.map_err(|e| {
            stream_error(
                &self.reference,
                format!("unreadable answer: {}", cause_chain(&e)),
            )
        })?;
        let mut text = String::new();
        let mut calls = Vec::new();
        for b in answer["content"].as_array().into_iter().flatten() {
            match b["type"].as_str() {
                Some("text") => text.push_str(b["text"].as_str().unwrap_or_default()),
                Some("tool_use") => calls.push((
                    b["id"].as_str().unwrap_or_default().to_owned(),
                    b["name"].as_str().unwrap_or_default().to_owned(),
                    b["input"].clone(),
                )),
                _ => {}
            }
        }
        if !text.is_empty() {
            sink.delta(text.clone()).await;
        }
        let usage = TokenUsage {
            input_tokens: input_tokens(&answer["usage"]),
            output_tokens: answer["usage"]["output_tokens"].as_u64().unwrap_or(0),
            cached_input_tokens: cached_tokens(&answer["usage"]),
        };
        Ok(turn(
            text,
            calls,
            usage,
            answer["stop_reason"].as_str().unwrap_or_default(),
            answer["model"].as_str().unwrap_or_default().to_owned(),
            request.call_id_prefix,
        ))
    }
}

/// Input tokens read from the prompt cache.
fn cached_tokens(u: &Value) -> u64 {
    u["cache_read_input_tokens"].as_u64().unwrap_or(0)
}

/// Input tokens, cached ones included.
fn input_tokens(u: &Value) -> u64 {
    [
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ]
    .iter()
    .map(|k| u[k].as_u64().unwrap_or(0))
    .sum()
}

struct Block {
    id: String,
    name: String,
    input: String,
}

fn parse_input(s: &str) -> Value {
    if s.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_owned()))
    }
}

fn turn(
    text: String,
    calls: Vec<(String, String, Value)>,
    usage: TokenUsage,
    stop_reason: &str,
    model: String,
    call_id_prefix: &str,
) -> ModelTurn {
    let calls: Vec<ToolCallRequest> = calls
        .into_iter()
        .enumerate()
        .map(|(i, (id, name, arguments))| ToolCallRequest {
            id: if id.is_empty() {
                format!("{call_id_prefix}{}", i + 1)
            } else {
                id
            },
            name,
            arguments,
        })
        .collect();
    let finish_reason = match stop_reason {
        "tool_use" => "tool_calls",
        "max_tokens" => "length",
        "" if !calls.is_empty() => "tool_calls",
        _ => "stop",
    }
    .to_owned();
    ModelTurn {
        text,
        calls,
        usage,
        finish_reason,
        model,
        answered_by: String::new(),
    }
}

/// Tool-use ids the API accepts (`[a-zA-Z0-9_-]+`): ids made by other
/// providers (a handoff between models) are mapped the same way in the
/// call and in its result.
fn wire_id(id: &str) -> String {
    let s: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() { "call".into() } else { s }
}

/// The system prompt and the messages, in the API's form: tool results are
/// `tool_result` blocks of one user message per turn.
fn wire_messages(messages: &[ChatMessage]) -> (String, Vec<Value>) {
    let mut system = Vec::new();
    let mut out: Vec<Value> = Vec::new();
    for m in messages {
        match m.role {
            Role::System => {
                if !m.content.is_empty() {
                    system.push(m.content.clone());
                }
            }
            Role::User => out.push(json!({"role": "user", "content": m.content})),
            Role::Assistant => {
                let mut content = Vec::new();
                if !m.content.is_empty() {
                    content.push(json!({"type": "text", "text": m.content}));
                }
                for c in &m.tool_calls {
                    let input = if c.arguments.is_object() {
                        c.arguments.clone()
                    } else {
                        json!({"value": c.arguments})
                    };
                    content.push(json!({"type": "tool_use", "id": wire_id(&c.id), "name": c.name, "input": input}));
                }
                if content.is_empty() {
                    content.push(json!({"type": "text", "text": "(no answer)"}));
                }
                out.push(json!({"role": "assistant", "content": content}));
            }
            Role::Tool => {
                let block = json!({
                    "type": "tool_result",
                    "tool_use_id": wire_id(m.tool_call_id.as_deref().unwrap_or_default()),
                    "content": m.content,
                    "is_error": m.content.starts_with("error: "),
                });
                let joins = out.last().is_some_and(|last| {
                    last["role"] == "user"
                        && last["content"]
                            .as_array()
                            .is_some_and(|c| c.iter().all(|b| b["type"] == "tool_result"))
                });
                match out.last_mut() {
                    Some(last) if joins => {
                        if let Some(c) = last["content"].as_array_mut() {
                            c.push(block);
                        }
                    }
                    _ => out.push(json!({"role": "user", "content": [block]})),
                }
            }
        }
    }
    (system.join("\n\n"), out)
}

#[async_trait::async_trait]
impl Model for AnthropicModel {
    fn reference(&self) -> &str {
        &self.reference
    }

    fn max_output_tokens(&self) -> Option<u32> {
        self.max_output
    }

    fn system(&self) -> &str {
        "anthropic"
    }

    fn settings(&self) -> &Settings {
        &self.settings
    }

    async fn turn(
        &self,
        request: ModelRequest<'_>,
        sink: &dyn DeltaSink,
    ) -> Result<ModelTurn, ModelError> {
        let turn = if self.stream {
            self.streamed(&request, sink).await?
        } else {
            self.whole(&request, sink).await?
        };
        if turn.text.is_empty() && turn.calls.is_empty() {
            return Err(empty_answer(&self.reference, &turn.finish_reason));
        }
        Ok(turn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_results_of_one_turn_share_a_user_message_and_ids_are_mapped() {
        let mut assistant = ChatMessage::new(Role::Assistant, "");
        assistant.tool_calls = vec![
            ToolCallRequest {
                id: "root/1/1".into(),
                name: "a".into(),
                arguments: json!({}),
            },
            ToolCallRequest {
                id: "root/1/2".into(),
                name: "b".into(),
                arguments: json!({"x": 1}),
            },
        ];
        let mut r1 = ChatMessage::new(Role::Tool, "one");
        r1.tool_call_id = Some("root/1/1".into());
        let mut r2 = ChatMessage::new(Role::Tool, "error: two");
        r2.tool_call_id = Some("root/1/2".into());
        let (system, wire) = wire_messages(&[
            ChatMessage::new(Role::System, "be brief"),
            ChatMessage::new(Role::User, "go"),
            assistant,
            r1,
            r2,
        ]);
        assert_eq!(system, "be brief");
        assert_eq!(wire.len(), 3);
        assert_eq!(wire[1]["content"][0]["id"], "root_1_1");
        assert_eq!(wire[2]["content"].as_array().map(Vec::len), Some(2));
        assert_eq!(wire[2]["content"][1]["tool_use_id"], "root_1_2");
        assert_eq!(wire[2]["content"][1]["is_error"], true);
    }
}
