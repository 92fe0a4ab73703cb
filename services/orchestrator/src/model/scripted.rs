//! The `scripted` provider: a deterministic model whose turns are written in
//! the agents file. Turn `n` of an agent in a context answers with the
//! script's `n`-th turn (after expanding `repeat`), so tests and the demo see
//! the same run every time.
//!
//! A turn may stream text (split into `deltas` pieces, or word by word), call
//! one or several tools (`calls`), hand off (`handoff: agent`), wait
//! (`delay`), or fail (`fail`). In text and string arguments, `{{input}}` is
//! the context's task and `{{results}}` the previous turn's tool results;
//! in text, `{{history}}` is the earlier user messages of the conversation
//! (a history's or a conversation's), joined by ` | ` (`(nothing)` when
//! there is none).

use std::sync::Arc;

use serde_json::Value;

use crate::catalog::models::{ScriptTurn, empty_object};

use super::{
    chat::{ChatMessage, Role, ToolCallRequest, ToolDef},
    error::{ModelError, ModelErrorKind},
    turn::{DeltaSink, Model, ModelRequest, ModelTurn, TokenUsage},
};

/// A scripted model.
pub struct ScriptedModel {
    reference: String,
    turns: Arc<Vec<ScriptTurn>>,
    max_output: Option<u32>,
}

impl ScriptedModel {
    /// A model playing `turns`.
    pub fn new(reference: &str, turns: Arc<Vec<ScriptTurn>>) -> Self {
        Self {
            reference: reference.to_owned(),
            turns,
            max_output: None,
        }
    }

    /// The model's output limit (see `Model::max_output_tokens`).
    pub fn with_max_output(mut self, limit: Option<u32>) -> Self {
        self.max_output = limit;
        self
    }

    /// The turn for index `n`, counting repeats.
    fn nth(&self, mut n: usize) -> Option<&ScriptTurn> {
        for t in self.turns.iter() {
            let times = t.repeat.unwrap_or(1) as usize;
            if n < times {
                return Some(t);
            }
            n -= times;
        }
        None
    }
}

fn template(s: &str, input: &str, results: &str) -> String {
    if !s.contains("{{") {
        return s.to_owned();
    }
    s.replace("{{input}}", input)
        .replace("{{results}}", results)
}

/// The user messages before the last one (a conversation's earlier
/// messages), joined by ` | `: `{{history}}` in a scripted text.
fn earlier_user_messages(messages: &[ChatMessage]) -> String {
    let users: Vec<&str> = messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.content.as_str())
        .collect();
    let earlier = &users[..users.len().saturating_sub(1)];
    if earlier.is_empty() {
        "(nothing)".to_owned()
    } else {
        earlier.join(" | ")
    }
}

fn template_value(v: &Value, input: &str, results: &str) -> Value {
    match v {
        Value::String(s) => Value::String(template(s, input, results)),
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|x| template_value(x, input, results))
                .collect(),
        ),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), template_value(x, input, results)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A scripted turn's input tokens when its script gives no usage: a token
/// per 4 bytes of the messages, plus one.
fn input_tokens(messages: &[ChatMessage]) -> u64 {
    messages.iter().map(|m| m.content.len() as u64).sum::<u64>() / 4 + 1
}

/// The tool results that answered the last assistant turn.
fn last_results(messages: &[ChatMessage]) -> String {
    let tail: Vec<&str> = messages
        .iter()
        .rev()
        .take_while(|m| m.role == Role::Tool)
        .map(|m| m.content.as_str())
        .collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("; ")
}

#[async_trait::async_trait]
impl Model for ScriptedModel {
    fn reference(&self) -> &str {
        &self.reference
    }

    fn max_output_tokens(&self) -> Option<u32> {
        self.max_output
    }

    /// Exact: the script's usage, else what [`Self::turn`] will count.
    fn estimate_input_tokens(&self, messages: &[ChatMessage], _: &[ToolDef], turn: usize) -> u64 {
        match self.nth(turn).and_then(|t| t.usage) {
            Some(u) => u.input_tokens,
            None => input_tokens(messages),
        }
    }

    async fn turn(
        &self,
        request: ModelRequest<'_>,
        sink: &dyn DeltaSink,
    ) -> Result<ModelTurn, ModelError> {
        let fail = |message: String| {
            ModelError::new(
                &self.reference,
                ModelErrorKind::Unavailable,
                "scripted",
                message,
            )
        };
        let turn = self.nth(request.turn).ok_or_else(|| {
            fail(format!(
                "the script has no turn {} (it has run out)",
                request.turn + 1
            ))
        })?;
        if let Some(d) = turn.delay {
            tokio::time::sleep(d).await;
        }
        if let Some(message) = &turn.fail {
            return Err(match turn.fail_status {
                None => fail(message.clone()),
                Some(status) => {
                    let kind = match status {
                        429 => ModelErrorKind::RateLimited,
                        408 => ModelErrorKind::Timeout,
                        401 | 403 => ModelErrorKind::ProviderKey,
                        500..=599 => ModelErrorKind::Unavailable,
                        _ => ModelErrorKind::Rejected,
                    };
                    ModelError::new(&self.reference, kind, status.to_string(), message.clone())
                }
            });
        }
        let results = last_results(request.messages);
        let mut text = template(&turn.text, request.input, &results);
        if text.contains("{{history}}") {
            text = text.replace("{{history}}", &earlier_user_messages(request.messages));
        }
        let mut calls: Vec<ToolCallRequest> = turn
            .calls
            .iter()
            .enumerate()
            .map(|(i, c)| ToolCallRequest {
                id: format!("{}{}", request.call_id_prefix, i + 1),
                name: c.tool.clone(),
                arguments: template_value(&c.args, request.input, &results),
            })
            .collect();
        if let Some(to) = &turn.handoff {
            calls.push(ToolCallRequest {
                id: format!("{}{}", request.call_id_prefix, calls.len() + 1),
                name: format!("transfer_to_{to}"),
                arguments: empty_object(),
            });
        }
        let mut usage = turn.usage.map_or_else(
            || TokenUsage {
                input_tokens: input_tokens(request.messages),
                output_tokens: (text.len() as u64) / 4 + calls.len() as u64,
                cached_input_tokens: 0,
            },
            |u| TokenUsage {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
                cached_input_tokens: u.cached_input_tokens,
            },
        );
        let mut finish_reason = if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        // `max_tokens` cuts the answer as a provider would: its text at 4
        // bytes a token, and no tool call (a cut call is no call).
        if let Some(max) = request.settings.max_tokens
            && usage.output_tokens > u64::from(max)
        {
            usage.output_tokens = u64::from(max);
            let mut end = (max as usize * 4).min(text.len());
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            calls.clear();
            finish_reason = "length";
        }
        match turn.deltas {
            Some(n) if !text.is_empty() => {
                // n nearly equal pieces on char boundaries; a text shorter than
                // n is sent whole n times.
                let n = n as usize;
                let chars: Vec<char> = text.chars().collect();
                for i in 0..n {
                    let piece: String = if chars.len() >= n {
                        chars[i * chars.len() / n..(i + 1) * chars.len() / n]
                            .iter()
                            .collect()
                    } else {
                        text.clone()
                    };
                    sink.delta(piece).await;
                }
            }
            _ => {
                for word in text.split_inclusive(' ') {
                    sink.delta(word.to_owned()).await;
                }
            }
        }
        let finish_reason = finish_reason.to_owned();
        Ok(ModelTurn {
            text,
            calls,
            usage,
            finish_reason,
            model: String::new(),
            answered_by: String::new(),
        })
    }
}
