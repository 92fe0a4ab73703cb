//! Generation settings: what steers a model call besides the conversation.
//!
//! They come from three places, each overriding the one before field by
//! field: the provider (and its per-model entry) in the agents file, the
//! agent in the agents file, and the request (`RunAgentRequest.settings`,
//! `RunPipelineRequest.settings`). `extra` (provider-specific body fields)
//! merges key by key. Providers translate them to their wire format;
//! `response_format` is also enforced here, whatever the provider: the final
//! answer must be JSON matching the schema (see [`ResponseFormat::check`]).

use baton_proto::v1 as pb;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Most `stop` sequences.
pub const MAX_STOP: usize = 16;
/// Longest `stop` sequence, in bytes.
pub const MAX_STOP_BYTES: usize = 256;
/// Most retries of an answer that does not match `response_format`.
pub const MAX_FORMAT_RETRIES: u32 = 5;

/// Generation settings; unset fields leave the choice to the level below
/// (and, at the bottom, to the provider's own default).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Sampling temperature, 0 to 2.
    pub temperature: Option<f64>,
    /// Nucleus sampling, above 0 and at most 1.
    pub top_p: Option<f64>,
    /// Most tokens of one answer, at least 1.
    pub max_tokens: Option<u32>,
    /// Sequences that end the answer (up to 16, each 1 to 256 bytes).
    pub stop: Option<Vec<String>>,
    /// Sampling seed, for providers that take one.
    pub seed: Option<i64>,
    /// `auto`, `none`, `required`, or the name of the one tool to call.
    pub tool_choice: Option<String>,
    /// Whether one turn may ask for several tool calls.
    pub parallel_tool_calls: Option<bool>,
    /// Structured output: the final answer is JSON matching a schema.
    pub response_format: Option<ResponseFormat>,
    /// Provider-specific body fields, sent as they are (they override the
    /// fields above of the same name).
    pub extra: Option<Map<String, Value>>,
}

/// A structured-output schema.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseFormat {
    /// Its name, as providers want one (`[a-zA-Z0-9_-]{1,64}`).
    #[serde(default = "default_format_name")]
    pub name: String,
    /// The JSON Schema of the answer.
    pub schema: Value,
    /// Ask the provider to follow the schema strictly (OpenAI's `strict`).
    #[serde(default)]
    pub strict: bool,
    /// How many times a mismatching answer is sent back to the model with
    /// the validation error before the context fails (0 to 5).
    #[serde(default)]
    pub retries: u32,
}

fn default_format_name() -> String {
    "answer".into()
}

impl Settings {
    /// `self` overridden by `over`, field by field; `extra` key by key.
    pub fn merged(&self, over: &Settings) -> Settings {
        fn pick<T: Clone>(base: &Option<T>, over: &Option<T>) -> Option<T> {
            over.clone().or_else(|| base.clone())
        }
        let extra = match (&self.extra, &over.extra) {
            (Some(a), Some(b)) => {
                let mut m = a.clone();
                m.extend(b.iter().map(|(k, v)| (k.clone(), v.clone())));
                Some(m)
            }
            (a, b) => pick(a, b),
        };
        Settings {
            temperature: pick(&self.temperature, &over.temperature),
            top_p: pick(&self.top_p, &over.top_p),
            max_tokens: pick(&self.max_tokens, &over.max_tokens),
            stop: pick(&self.stop, &over.stop),
            seed: pick(&self.seed, &over.seed),
            tool_choice: pick(&self.tool_choice, &over.tool_choice),
            parallel_tool_calls: pick(&self.parallel_tool_calls, &over.parallel_tool_calls),
            response_format: pick(&self.response_format, &over.response_format),
            extra,
        }
    }

    /// Writes the `extra` fields into a request body, over what is there.
    pub fn add_extra(&self, body: &mut Value) {
        if let (Some(extra), Some(b)) = (&self.extra, body.as_object_mut()) {
            b.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == Settings::default()
    }

    /// Checks every field; the error names the field under `at` (e.g.
    /// `settings.temperature`).
    pub fn validate(&self, at: &str) -> Result<(), InvalidSetting> {
        let bad = |field: &str, why: String| {
            Err(InvalidSetting {
                field: format!("{at}.{field}"),
                message: why,
            })
        };
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return bad("temperature", format!("{t} is not between 0 and 2"));
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return bad("top_p", format!("{p} is not above 0 and at most 1"));
        }
        if self.max_tokens == Some(0) {
            return bad("max_tokens", "must be at least 1".into());
        }
        if let Some(stop) = &self.stop {
            if stop.len() > MAX_STOP {
                return bad(
                    "stop",
                    format!("{} sequences is over the limit of {MAX_STOP}", stop.len()),
                );
            }
            if let Some(s) = stop
                .iter()
                .find(|s| s.is_empty() || s.len() > MAX_STOP_BYTES)
            {
                return bad(
                    "stop",
                    format!(
                        "{s:?}: a sequence is 1 to {MAX_STOP_BYTES} bytes ({} bytes)",
                        s.len()
                    ),
                );
            }
        }
        if let Some(choice) = &self.tool_choice
            && !matches!(choice.as_str(), "auto" | "none" | "required")
            && !valid_tool_name(choice)
        {
            return bad(
                "tool_choice",
                format!("{choice:?} is not auto, none, required or a tool name"),
            );
        }
        if let Some(f) = &self.response_format {
            if f.name.is_empty()
                || f.name.len() > 64
                || !f
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return bad(
                    "response_format.name",
                    format!("{:?} does not match [a-zA-Z0-9_-]{{1,64}}", f.name),
                );
            }
            if !f.schema.is_object() {
                return bad("response_format.schema", "must be a JSON object".into());
            }
            if let Err(e) = jsonschema::validator_for(&f.schema) {
                return bad(
                    "response_format.schema",
                    format!("not a valid JSON Schema: {e}"),
                );
            }
            if f.retries > MAX_FORMAT_RETRIES {
                return bad(
                    "response_format.retries",
                    format!("{} is over the limit of {MAX_FORMAT_RETRIES}", f.retries),
                );
            }
        }
        Ok(())
    }
}

/// A generation setting refused by [`Settings::validate`] or
/// [`Settings::from_request`]: the field's path and what is wrong with its
/// value. The message stays text rather than an enum per check: the
/// request face hands field and message on as they are (an
/// `INVALID_ARGUMENT` naming the field), and the agents file prints
/// `{field}: {message}`; nothing branches on which check failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidSetting {
    /// The field, under the path the caller gave (`settings.temperature`,
    /// `agents.a.settings.stop`).
    pub field: String,
    /// What is wrong with its value.
    pub message: String,
}

fn valid_tool_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

impl ResponseFormat {
    /// Checks a final answer: `Ok` when it is JSON matching the schema, else
    /// what is wrong, in words the model can act on.
    // A string is the honest type: the text is sent back to the model as
    // the reason its answer was rejected (and quoted in the run's failure).
    pub fn check(&self, answer: &str) -> Result<(), String> {
        let value: Value = serde_json::from_str(answer.trim())
            .map_err(|e| format!("the answer is not JSON ({e})"))?;
        let validator = jsonschema::validator_for(&self.schema)
            .map_err(|e| format!("the schema does not compile: {e}"))?;
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .take(5)
            .map(|e| {
                let at = e.instance_path().to_string();
                format!("{}: {e}", if at.is_empty() { "/" } else { &at })
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "the answer does not match the schema: {}",
                errors.join("; ")
            ))
        }
    }
}

impl Settings {
    /// A request's settings (`RunAgentRequest.settings`,
    /// `RunPipelineRequest.settings`), checked as the agents file's are;
    /// the error names the request's field.
    pub fn from_request(s: Option<pb::GenerationSettings>) -> Result<Settings, InvalidSetting> {
        let Some(s) = s else {
            return Ok(Settings::default());
        };
        let bad = |field: &str, message: String| InvalidSetting {
            field: field.to_owned(),
            message,
        };
        let json_object = |field: &str, text: &str| -> Result<Value, InvalidSetting> {
            let v: Value =
                serde_json::from_str(text).map_err(|e| bad(field, format!("not JSON: {e}")))?;
            if !v.is_object() {
                return Err(bad(field, "must be a JSON object".into()));
            }
            Ok(v)
        };
        let response_format = match s.response_format {
            None => None,
            Some(f) => {
                if f.schema_json.is_empty() {
                    return Err(bad(
                        "settings.response_format.schema_json",
                        "is required".into(),
                    ));
                }
                Some(ResponseFormat {
                    name: if f.name.is_empty() {
                        default_format_name()
                    } else {
                        f.name
                    },
                    schema: json_object("settings.response_format.schema_json", &f.schema_json)?,
                    strict: f.strict,
                    retries: f.retries,
                })
            }
        };
        let extra = match s.extra_body_json.as_str() {
            "" => None,
            text => match json_object("settings.extra_body_json", text)? {
                Value::Object(m) => Some(m),
                _ => None,
            },
        };
        let settings = Settings {
            temperature: s.temperature,
            top_p: s.top_p,
            max_tokens: s.max_tokens,
            stop: (!s.stop.is_empty()).then_some(s.stop),
            seed: s.seed,
            tool_choice: (!s.tool_choice.is_empty()).then_some(s.tool_choice),
            parallel_tool_calls: s.parallel_tool_calls,
            response_format,
            extra,
        };
        settings.validate("settings").map_err(|mut e| {
            // The schema's field in the request is `schema_json`.
            if e.field == "settings.response_format.schema" {
                e.field = "settings.response_format.schema_json".into();
            }
            e
        })?;
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn s(v: Value) -> Settings {
        serde_json::from_value(v).expect("settings")
    }

    #[test]
    fn later_levels_override_field_by_field_and_extra_key_by_key() {
        let provider = s(json!({"temperature": 0.1, "max_tokens": 100, "extra": {"a": 1, "b": 2}}));
        let agent = s(json!({"max_tokens": 50, "stop": ["x"], "extra": {"b": 3}}));
        let request = s(json!({"temperature": 0.9, "extra": {"c": 4}}));
        let m = provider.merged(&agent).merged(&request);
        assert_eq!(m.temperature, Some(0.9));
        assert_eq!(m.max_tokens, Some(50));
        assert_eq!(m.stop, Some(vec!["x".to_owned()]));
        assert_eq!(
            m.extra,
            Some(
                json!({"a": 1, "b": 3, "c": 4})
                    .as_object()
                    .cloned()
                    .expect("obj")
            )
        );
    }

    #[test]
    fn limits_hold_at_the_limit_and_fail_just_over() {
        let ok = |v: Value| s(v).validate("settings").map(|_| ());
        let field = |v: Value| s(v).validate("settings").expect_err("invalid").field;
        assert!(ok(json!({"temperature": 2.0, "top_p": 1.0, "max_tokens": 1})).is_ok());
        assert_eq!(field(json!({"temperature": 2.01})), "settings.temperature");
        assert_eq!(field(json!({"top_p": 0.0})), "settings.top_p");
        assert_eq!(field(json!({"max_tokens": 0})), "settings.max_tokens");
        let stops = |n: usize, len: usize| json!({"stop": vec!["x".repeat(len); n]});
        assert!(ok(stops(MAX_STOP, MAX_STOP_BYTES)).is_ok());
        assert_eq!(field(stops(MAX_STOP + 1, 1)), "settings.stop");
        assert_eq!(field(stops(1, MAX_STOP_BYTES + 1)), "settings.stop");
        assert_eq!(
            field(json!({"tool_choice": "no spaces"})),
            "settings.tool_choice"
        );
        let format = |retries: u32| json!({"response_format": {"schema": {"type": "object"}, "retries": retries}});
        assert!(ok(format(MAX_FORMAT_RETRIES)).is_ok());
        assert_eq!(
            field(format(MAX_FORMAT_RETRIES + 1)),
            "settings.response_format.retries"
        );
        assert_eq!(
            field(json!({"response_format": {"schema": {"type": 12}}})),
            "settings.response_format.schema"
        );
    }

    #[test]
    fn answers_are_checked_against_the_schema() {
        let f = ResponseFormat {
            name: "a".into(),
            schema: json!({"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}),
            strict: false,
            retries: 0,
        };
        assert!(f.check(r#"{"city": "Oslo"}"#).is_ok());
        assert!(f.check("Oslo").expect_err("not json").contains("not JSON"));
        let e = f.check(r#"{"city": 3}"#).expect_err("mismatch");
        assert!(e.contains("/city"), "{e}");
    }
}
