//! Expected tool calls (`expected_tools`) and how a run's calls are
//! matched against them: argument matchers (exact, regex, a number within
//! a tolerance, anything, a JSON Schema) and the order (`exact`,
//! `in_order`, `any_order`, `subset`). The `trajectory` scorer
//! (`super::score`) scores with [`Trajectory::score`].

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How expected tool calls are matched against a run's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// The run made exactly these calls, in this order.
    Exact,
    /// The run made these calls in this order, others between allowed.
    #[default]
    InOrder,
    /// The run made exactly these calls, in any order.
    AnyOrder,
    /// The run made these calls (each once at least), in any order, others
    /// allowed.
    Subset,
}

/// How one argument is matched.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// Equal (numbers by value: 3 matches 3.0).
    Exact(Value),
    /// A string the regex finds a match in.
    Regex(regex::Regex),
    /// A number within `tolerance` of `value`.
    Approx {
        /// The number.
        value: f64,
        /// How far off it may be.
        tolerance: f64,
    },
    /// Anything (the argument is given).
    Any,
    /// A value the JSON Schema validates.
    Schema(Arc<jsonschema::Validator>, Value),
}

impl Matcher {
    /// A matcher as a dataset writes it: a plain value is matched exactly;
    /// an object with one of `regex`, `approx` (and `tolerance`), `any`,
    /// `schema` or `exact` is that matcher. An error names the field under
    /// the argument (`.regex`).
    pub fn compile(v: Value) -> Result<Self, (String, String)> {
        let Value::Object(m) = &v else {
            return Ok(Self::Exact(v));
        };
        let keys: Vec<&str> = m.keys().map(String::as_str).collect();
        match keys.as_slice() {
            ["regex"] => match &m["regex"] {
                Value::String(p) => regex::Regex::new(p)
                    .map(Self::Regex)
                    .map_err(|e| (".regex".into(), e.to_string())),
                _ => Err((".regex".into(), "must be a string".into())),
            },
            ["any"] => match &m["any"] {
                Value::Bool(true) => Ok(Self::Any),
                _ => Err((".any".into(), "must be true".into())),
            },
            ["exact"] => Ok(Self::Exact(m["exact"].clone())),
            ["schema"] => compile_schema(&m["schema"])
                .map(|s| Self::Schema(s, m["schema"].clone()))
                .map_err(|e| (".schema".into(), e)),
            ["approx"] | ["approx", "tolerance"] | ["tolerance", "approx"] => {
                let value = m["approx"]
                    .as_f64()
                    .ok_or_else(|| (".approx".to_owned(), "must be a number".to_owned()))?;
                let tolerance = match m.get("tolerance") {
                    None => 1e-9,
                    Some(t) => t.as_f64().filter(|t| *t >= 0.0).ok_or_else(|| {
                        (".tolerance".to_owned(), "must be a number ≥ 0".to_owned())
                    })?,
                };
                Ok(Self::Approx { value, tolerance })
            }
            _ => Ok(Self::Exact(v)),
        }
    }

    /// Whether `v` (the argument, `None` when not given) matches.
    pub fn matches(&self, v: Option<&Value>) -> bool {
        let Some(v) = v else { return false };
        match self {
            Self::Exact(want) => same(want, v),
            Self::Regex(r) => match v {
                Value::String(s) => r.is_match(s),
                other => r.is_match(&other.to_string()),
            },
            Self::Approx { value, tolerance } => {
                number(v).is_some_and(|n| (n - value).abs() <= *tolerance)
            }
            Self::Any => true,
            Self::Schema(s, _) => s.is_valid(v),
        }
    }

    /// The matcher as a dataset writes it.
    pub fn to_value(&self) -> Value {
        match self {
            Self::Exact(v) => match v {
                Value::Object(_) => serde_json::json!({"exact": v}),
                v => v.clone(),
            },
            Self::Regex(r) => serde_json::json!({"regex": r.as_str()}),
            Self::Approx { value, tolerance } => {
                serde_json::json!({"approx": value, "tolerance": tolerance})
            }
            Self::Any => serde_json::json!({"any": true}),
            Self::Schema(_, s) => serde_json::json!({"schema": s}),
        }
    }
}

/// Equal, numbers by value.
pub(crate) fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        (a, b) => a == b,
    }
}

/// A number, or a string that is one.
pub(crate) fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

pub(crate) fn compile_schema(schema: &Value) -> Result<Arc<jsonschema::Validator>, String> {
    jsonschema::validator_for(schema)
        .map(Arc::new)
        .map_err(|e| format!("not a JSON Schema: {e}"))
}

/// An expected tool call.
#[derive(Debug, Clone)]
pub struct ExpectedCall {
    /// The tool.
    pub tool: String,
    /// Matchers of the arguments named.
    pub args: Vec<(String, Matcher)>,
    /// No other argument allowed.
    pub args_exact: bool,
}

impl ExpectedCall {
    fn matches(&self, call: &ActualCall) -> bool {
        if call.tool != self.tool {
            return false;
        }
        let given = call.arguments.as_object();
        let arg = |name: &str| given.and_then(|g| g.get(name));
        if !self.args.iter().all(|(name, m)| m.matches(arg(name))) {
            return false;
        }
        !self.args_exact
            || given.is_none_or(|g| g.keys().all(|k| self.args.iter().any(|(n, _)| n == k)))
    }

    fn said(&self) -> String {
        if self.args.is_empty() {
            return self.tool.clone();
        }
        let args: Map<String, Value> = self
            .args
            .iter()
            .map(|(n, m)| (n.clone(), m.to_value()))
            .collect();
        format!("{}({})", self.tool, Value::Object(args))
    }
}

/// Expected tool calls, and how they are matched.
#[derive(Debug, Clone)]
pub struct Trajectory {
    /// How.
    pub order: Order,
    /// The calls.
    pub calls: Vec<ExpectedCall>,
    /// Only the top-level agent's calls count.
    pub top_level_only: bool,
}

/// A call a run made (at any depth).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActualCall {
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub arguments: Value,
    /// The depth of the agent that made it (0: the run's own).
    pub depth: u32,
}

impl ActualCall {
    fn said(&self) -> String {
        let args = self.arguments.to_string();
        let args: String = args.chars().take(160).collect();
        format!("{}({args})", self.tool)
    }
}

impl Trajectory {
    /// The score (matched expected calls over the larger of the two counts
    /// for `exact`/`any_order`, over the expected count otherwise) and why.
    pub fn score(&self, calls: &[ActualCall]) -> (f64, String) {
        let calls: Vec<&ActualCall> = calls
            .iter()
            .filter(|c| !self.top_level_only || c.depth == 0)
            .collect();
        let want = self.calls.len();
        let (matched, missing) = match self.order {
            Order::Exact => {
                let matched = self
                    .calls
                    .iter()
                    .zip(&calls)
                    .take_while(|(e, c)| e.matches(c))
                    .count();
                (matched, self.calls.get(matched))
            }
            Order::InOrder => {
                let mut at = 0;
                let mut matched = 0;
                for e in &self.calls {
                    match calls[at..].iter().position(|c| e.matches(c)) {
                        Some(p) => {
                            at += p + 1;
                            matched += 1;
                        }
                        None => break,
                    }
                }
                (matched, self.calls.get(matched))
            }
            Order::AnyOrder | Order::Subset => {
                // Greedy in order of the expected calls; a call matches one
                // expected call at most.
                let mut used = vec![false; calls.len()];
                let mut matched = 0;
                let mut missing = None;
                for e in &self.calls {
                    match (0..calls.len()).find(|&i| !used[i] && e.matches(calls[i])) {
                        Some(i) => {
                            used[i] = true;
                            matched += 1;
                        }
                        None => missing = missing.or(Some(e)),
                    }
                }
                (matched, missing)
            }
        };
        let whole = match self.order {
            Order::Exact | Order::AnyOrder => want.max(calls.len()),
            _ => want,
        };
        let score = if whole == 0 {
            1.0
        } else {
            matched as f64 / whole as f64
        };
        let made = || {
            let list: Vec<String> = calls.iter().take(8).map(|c| c.said()).collect();
            let more = calls.len().saturating_sub(8);
            let mut s = list.join(", ");
            if more > 0 {
                s.push_str(&format!(" and {more} more"));
            }
            if s.is_empty() { "none".to_owned() } else { s }
        };
        let reason = match missing {
            Some(e) => {
                let closest = calls.iter().find(|c| c.tool == e.tool).map(|c| c.said());
                match closest {
                    Some(c) => format!(
                        "expected call {} {}not made; closest: {c}",
                        e.said(),
                        if self.order == Order::InOrder || self.order == Order::Exact {
                            "(in order) "
                        } else {
                            ""
                        }
                    ),
                    None => format!(
                        "expected call {} not made; the run called: {}",
                        e.said(),
                        made()
                    ),
                }
            }
            None if score < 1.0 => format!(
                "{matched} of {want} expected calls, but {} calls made: {}",
                calls.len(),
                made()
            ),
            None => format!("{matched} of {want} expected calls made"),
        };
        (score, reason)
    }
}
