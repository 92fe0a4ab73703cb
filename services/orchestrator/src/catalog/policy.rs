//! Tool-output policies: after every tool execution, success or error, the
//! run-scoped policies run, then the active agent's; each decides `Forward`
//! (unchanged), `Rewrite` (truncate, redact by regex, extract a JSON
//! pointer) or `Final` (this output ends the run as its final output).
//! `record` policies also store the output in the run context (run-scoped)
//! or the per-agent context (which resets when control changes agent).
//! A policy that fails (a pointer into output that is not JSON, say) falls
//! back to `Forward`, and the failure is reported in ToolCallCompleted.
//!
//! A leaf of the catalog: the agents file declares policies, the catalog
//! validates them, and a turn's calls (`crate::agent`) apply them.

use regex::Regex;
use serde::Deserialize;
use serde_json::{Map, Value};

use baton_proto::v1 as pb;

/// A policy as the agents file declares it: exactly one action, optionally
/// limited to some tools.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicySpec {
    /// Apply only to these tools; empty means every tool.
    pub tools: Vec<String>,
    /// Keep at most this many characters.
    pub truncate: Option<usize>,
    /// Replace every match of this regex…
    pub redact: Option<String>,
    /// …with this text (default `[redacted]`).
    pub replacement: Option<String>,
    /// Replace the output (parsed as JSON) with the value at this pointer.
    pub json_pointer: Option<String>,
    /// Store the output under this key of the run or per-agent context.
    pub record: Option<String>,
    /// End the run with this output.
    #[serde(rename = "final")]
    pub final_: bool,
}

#[derive(Debug, Clone)]
enum Action {
    Truncate(usize),
    Redact(Regex, String),
    JsonPointer(String),
    Record(String),
    Final,
}

/// Why a declared policy is refused; the message names the field.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PolicyError {
    /// `redact` is not a regex.
    #[error("policies.{name}.redact: {source}")]
    Redact {
        /// The policy.
        name: String,
        /// What the regex parser said.
        source: regex::Error,
    },
    /// `replacement` without `redact`.
    #[error("policies.{0}.replacement: only goes with redact")]
    Replacement(String),
    /// `json_pointer` is neither empty nor starts with `/`.
    #[error("policies.{name}.json_pointer: {pointer:?} must be empty or start with /")]
    JsonPointer {
        /// The policy.
        name: String,
        /// The pointer.
        pointer: String,
    },
    /// `record` names no key.
    #[error("policies.{0}.record: must name a key")]
    Record(String),
    /// No action, or more than one.
    #[error("policies.{0}: give exactly one of truncate, redact, json_pointer, record, final")]
    Actions(String),
}

/// Why a policy could not act on an output (it forwards the output
/// unchanged, and the message is reported in the call's outcome).
#[derive(Debug, thiserror::Error)]
enum ApplyError {
    /// `json_pointer` on an output that is not JSON.
    #[error("the output is not JSON: {0}")]
    NotJson(serde_json::Error),
    /// `json_pointer` points at nothing in the output.
    #[error("the output has nothing at {0}")]
    NothingAt(String),
}

/// A validated policy.
#[derive(Debug, Clone)]
pub struct Policy {
    name: String,
    tools: Vec<String>,
    action: Action,
}

impl Policy {
    /// Validates a declared policy.
    pub fn new(name: &str, spec: &PolicySpec) -> Result<Self, PolicyError> {
        let mut actions = Vec::new();
        if let Some(n) = spec.truncate {
            actions.push(Action::Truncate(n));
        }
        if let Some(re) = &spec.redact {
            let re = Regex::new(re).map_err(|source| PolicyError::Redact {
                name: name.to_owned(),
                source,
            })?;
            actions.push(Action::Redact(
                re,
                spec.replacement
                    .clone()
                    .unwrap_or_else(|| "[redacted]".into()),
            ));
        } else if spec.replacement.is_some() {
            return Err(PolicyError::Replacement(name.to_owned()));
        }
        if let Some(p) = &spec.json_pointer {
            if !(p.is_empty() || p.starts_with('/')) {
                return Err(PolicyError::JsonPointer {
                    name: name.to_owned(),
                    pointer: p.clone(),
                });
            }
            actions.push(Action::JsonPointer(p.clone()));
        }
        if let Some(key) = &spec.record {
            if key.is_empty() {
                return Err(PolicyError::Record(name.to_owned()));
            }
            actions.push(Action::Record(key.clone()));
        }
        if spec.final_ {
            actions.push(Action::Final);
        }
        if actions.len() != 1 {
            return Err(PolicyError::Actions(name.to_owned()));
        }
        let action = actions.remove(0);
        Ok(Self {
            name: name.to_owned(),
            tools: spec.tools.clone(),
            action,
        })
    }

    /// The tools the policy names (checked against the catalog).
    pub fn tools(&self) -> &[String] {
        &self.tools
    }

    fn applies_to(&self, tool: &str) -> bool {
        self.tools.is_empty() || self.tools.iter().any(|t| t == tool)
    }

    /// Decides on `output`, maybe rewriting it or recording it in `context`.
    fn apply(
        &self,
        output: &mut String,
        context: &mut Map<String, Value>,
    ) -> Result<pb::PolicyDecision, ApplyError> {
        use pb::PolicyDecision::{Final, Forward, Rewrite};
        match &self.action {
            Action::Truncate(n) => match output.char_indices().nth(*n) {
                Some((cut, _)) => {
                    output.truncate(cut);
                    output.push_str("…[truncated]");
                    Ok(Rewrite)
                }
                None => Ok(Forward),
            },
            Action::Redact(re, with) => {
                if !re.is_match(output) {
                    return Ok(Forward);
                }
                *output = re.replace_all(output, with.as_str()).into_owned();
                Ok(Rewrite)
            }
            Action::JsonPointer(p) => {
                let v: Value = serde_json::from_str(output).map_err(ApplyError::NotJson)?;
                let picked = v
                    .pointer(p)
                    .ok_or_else(|| ApplyError::NothingAt(p.clone()))?;
                *output = match picked {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                Ok(Rewrite)
            }
            Action::Record(key) => {
                let value =
                    serde_json::from_str(output).unwrap_or_else(|_| Value::String(output.clone()));
                context.insert(key.clone(), value);
                Ok(Forward)
            }
            Action::Final => Ok(Final),
        }
    }
}

/// Applies `policies` (of `scope`, `run` or `agent`) to a tool's output in
/// order; stops at the first `Final`. Returns whether the run should end.
pub fn apply_all(
    policies: &[Policy],
    scope: &str,
    tool: &str,
    output: &mut String,
    context: &mut Map<String, Value>,
    outcomes: &mut Vec<pb::PolicyOutcome>,
) -> bool {
    for p in policies.iter().filter(|p| p.applies_to(tool)) {
        let (decision, error) = match p.apply(output, context) {
            Ok(d) => (d, String::new()),
            // A failing policy must not take the call down: forward, report.
            Err(e) => (pb::PolicyDecision::Forward, e.to_string()),
        };
        outcomes.push(pb::PolicyOutcome {
            policy: p.name.clone(),
            scope: scope.into(),
            decision: decision as i32,
            error,
        });
        if decision == pb::PolicyDecision::Final {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml: &str) -> Policy {
        Policy::new("p", &serde_norway::from_str(yaml).expect("yaml")).expect("valid")
    }

    #[test]
    fn each_action_decides() {
        let mut ctx = Map::new();
        let mut out = String::from("héllo world");
        assert_eq!(
            policy("truncate: 5").apply(&mut out, &mut ctx).ok(),
            Some(pb::PolicyDecision::Rewrite)
        );
        assert_eq!(out, "héllo…[truncated]");
        let mut out = String::from("call 555-1234");
        assert_eq!(
            policy("redact: '[0-9]'\nreplacement: '#'")
                .apply(&mut out, &mut ctx)
                .ok(),
            Some(pb::PolicyDecision::Rewrite)
        );
        assert_eq!(out, "call ###-####");
        let mut out = String::from(r#"{"a":{"b":"x"}}"#);
        assert_eq!(
            policy("json_pointer: /a/b").apply(&mut out, &mut ctx).ok(),
            Some(pb::PolicyDecision::Rewrite)
        );
        assert_eq!(out, "x");
        let mut out = String::from("not json");
        assert_eq!(
            policy("json_pointer: /a")
                .apply(&mut out, &mut ctx)
                .expect_err("not JSON")
                .to_string(),
            "the output is not JSON: expected ident at line 1 column 2"
        );
        assert_eq!(out, "not json", "a failing policy leaves the output alone");
        let mut out = String::from("42");
        assert_eq!(
            policy("record: n").apply(&mut out, &mut ctx).ok(),
            Some(pb::PolicyDecision::Forward)
        );
        assert_eq!(ctx["n"], serde_json::json!(42));
        assert_eq!(
            policy("final: true").apply(&mut out, &mut ctx).ok(),
            Some(pb::PolicyDecision::Final)
        );
    }

    #[test]
    fn declarations_are_checked() {
        let bad = |yaml: &str| {
            Policy::new("p", &serde_norway::from_str(yaml).expect("yaml"))
                .expect_err("invalid")
                .to_string()
        };
        assert_eq!(
            bad("{}"),
            "policies.p: give exactly one of truncate, redact, json_pointer, record, final"
        );
        assert!(bad("truncate: 3\nfinal: true").contains("exactly one"));
        assert!(bad("redact: '('").contains("redact"));
        assert!(bad("json_pointer: a").contains("json_pointer"));
        assert!(bad("replacement: x\ntruncate: 1").contains("replacement"));
    }

    #[test]
    fn a_chain_applies_in_order_to_its_tools_and_stops_at_final() {
        let named = |name: &str, yaml: &str| {
            Policy::new(name, &serde_norway::from_str(yaml).expect("yaml")).expect("valid")
        };
        let chain = [
            named("only_search", "tools: [search]\ntruncate: 2"),
            named("pointer", "json_pointer: /answer"),
            named("keep", "record: last"),
            named("stop", "final: true"),
            named("never", "truncate: 1"),
        ];
        let mut ctx = Map::new();
        let mut outcomes = Vec::new();
        let mut out = String::from(r#"{"answer":"forty-two"}"#);
        let ends = apply_all(&chain, "agent", "lookup", &mut out, &mut ctx, &mut outcomes);
        assert!(ends, "the final policy ends the run");
        assert_eq!(out, "forty-two", "rewritten, not truncated (not a search)");
        assert_eq!(ctx["last"], serde_json::json!("forty-two"));
        let seen: Vec<(String, i32, bool)> = outcomes
            .iter()
            .map(|o| (o.policy.clone(), o.decision, o.error.is_empty()))
            .collect();
        assert_eq!(
            seen,
            [
                ("pointer".into(), pb::PolicyDecision::Rewrite as i32, true),
                ("keep".into(), pb::PolicyDecision::Forward as i32, true),
                ("stop".into(), pb::PolicyDecision::Final as i32, true),
            ],
            "only the policies that apply, up to the final one"
        );
        assert!(outcomes.iter().all(|o| o.scope == "agent"));

        // A failing policy forwards, reports its error, and the chain goes on.
        let mut outcomes = Vec::new();
        let mut out = String::from("plain text");
        let ends = apply_all(
            &chain[..3],
            "run",
            "search",
            &mut out,
            &mut ctx,
            &mut outcomes,
        );
        assert!(!ends);
        assert_eq!(out, "pl…[truncated]");
        assert_eq!(outcomes.len(), 3);
        assert_eq!(outcomes[1].decision, pb::PolicyDecision::Forward as i32);
        assert!(!outcomes[1].error.is_empty(), "{:?}", outcomes[1]);
        assert_eq!(ctx["last"], serde_json::json!("pl…[truncated]"));
    }
}
