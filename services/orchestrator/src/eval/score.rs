//! Scorers: what a case's run is judged by. The built-in ones that need
//! nothing but the run's answer and tool calls score here; a judge (a
//! model) and a custom scorer (a tool) are asked by the experiment
//! (`app::experiment`), which gives them the case and the run's result.
//!
//! Each scorer gives a score from 0 to 1 and passes at its threshold:
//! 1 by default, except a judge's and a custom tool's, 0.5. A case passes
//! when all of its scorers do.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use super::trajectory::{ActualCall, ExpectedCall, Matcher, Order, Trajectory};
use super::trajectory::{compile_schema, number};

/// A scorer's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The answer equals `expected` (after trimming).
    Exact,
    /// The answer contains `value` (else `expected`).
    Contains,
    /// The regex `pattern` finds a match in the answer.
    Regex,
    /// The answer is JSON the `schema` validates.
    JsonSchema,
    /// The run's tool calls match `expected_tools`.
    Trajectory,
    /// The answer's number is within `tolerance` of `expected`'s.
    Numeric,
    /// A model judges the answer by a `rubric`.
    Judge,
    /// A tool (ToolHost or MCP) scores it.
    Tool,
}

/// A scorer as a dataset writes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScorerSpec {
    /// Its kind.
    pub kind: Kind,
    /// Its name in results; none: the kind's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The score it passes at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// `exact`, `contains`: letter case does not count.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_case: bool,
    /// `contains`: the text looked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `regex`: the pattern.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// `json_schema`: the schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// `numeric`: how far off the number may be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<f64>,
    /// `numeric`: the tolerance is a share of the expected number.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub relative: bool,
    /// `judge`: its model, `provider:model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `judge`: what it judges by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rubric: Option<String>,
    /// `judge`: times it is asked (its verdicts' mean is the score, their
    /// agreement is reported); 1 by default, at most 9.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u32>,
    /// `tool`: the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
}

/// A scorer, compiled.
#[derive(Debug, Clone)]
pub struct Scorer {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// The score it passes at.
    pub threshold: f64,
    /// What it is, beyond its kind.
    pub how: How,
}

/// What a scorer needs beyond its kind.
#[derive(Debug, Clone)]
pub enum How {
    /// Nothing.
    Plain {
        /// Letter case does not count.
        ignore_case: bool,
    },
    /// `contains`.
    Contains {
        /// The text looked for (none: `expected`).
        value: Option<String>,
        /// Letter case does not count.
        ignore_case: bool,
    },
    /// `regex`.
    Regex(regex::Regex),
    /// `json_schema`.
    Schema(Arc<jsonschema::Validator>),
    /// `numeric`.
    Numeric {
        /// How far off.
        tolerance: f64,
        /// A share of the expected number.
        relative: bool,
    },
    /// `judge`.
    Judge {
        /// Its model.
        model: String,
        /// Its rubric.
        rubric: String,
        /// Times asked.
        repeat: u32,
    },
    /// `tool`.
    Tool(String),
}

/// One scorer's verdict.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The scorer.
    pub scorer: String,
    /// 0 to 1.
    pub score: f64,
    /// Whether it reached the threshold.
    pub passed: bool,
    /// Why.
    pub reason: String,
    /// A repeated judge's agreement with itself (1: unanimous).
    #[serde(default)]
    pub agreement: f64,
    /// The scorer could not say (its judge did not answer, its tool failed
    /// or timed out): neither a pass nor a failure of what it scored.
    #[serde(default)]
    pub errored: bool,
}

impl Scorer {
    /// `exact` with its defaults.
    pub fn exact() -> Self {
        Self {
            name: "exact".into(),
            kind: Kind::Exact,
            threshold: 1.0,
            how: How::Plain { ignore_case: false },
        }
    }

    /// `trajectory` with its defaults.
    pub fn trajectory() -> Self {
        Self {
            name: "trajectory".into(),
            kind: Kind::Trajectory,
            threshold: 1.0,
            how: How::Plain { ignore_case: false },
        }
    }

    /// Compiles a scorer; an error names the field under it (`.pattern`).
    pub fn compile(s: &ScorerSpec) -> Result<Self, (String, String)> {
        let missing =
            |field: &str, what: &str| Err((format!(".{field}"), format!("missing: {what}")));
        let kind_name = serde_json::to_value(s.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let how = match s.kind {
            Kind::Exact | Kind::Trajectory => How::Plain {
                ignore_case: s.ignore_case,
            },
            Kind::Contains => How::Contains {
                value: s.value.clone(),
                ignore_case: s.ignore_case,
            },
            Kind::Regex => match &s.pattern {
                None => return missing("pattern", "a regex scorer names its `pattern`"),
                Some(p) => How::Regex(
                    regex::Regex::new(p).map_err(|e| (".pattern".to_owned(), e.to_string()))?,
                ),
            },
            Kind::JsonSchema => match &s.schema {
                None => return missing("schema", "a json_schema scorer gives its `schema`"),
                Some(schema) => {
                    How::Schema(compile_schema(schema).map_err(|e| (".schema".to_owned(), e))?)
                }
            },
            Kind::Numeric => {
                let tolerance = s.tolerance.unwrap_or(0.0);
                if !(tolerance >= 0.0 && tolerance.is_finite()) {
                    return Err((".tolerance".into(), "must be a number ≥ 0".into()));
                }
                How::Numeric {
                    tolerance,
                    relative: s.relative,
                }
            }
            Kind::Judge => {
                let Some(model) = s.model.clone().filter(|m| !m.is_empty()) else {
                    return missing("model", "a judge names its model (`provider:model`)");
                };
                let Some(rubric) = s.rubric.clone().filter(|r| !r.trim().is_empty()) else {
                    return missing("rubric", "a judge is given a `rubric` to judge by");
                };
                let repeat = s.repeat.unwrap_or(1);
                if !(1..=9).contains(&repeat) {
                    return Err((".repeat".into(), "must be 1 to 9".into()));
                }
                How::Judge {
                    model,
                    rubric,
                    repeat,
                }
            }
            Kind::Tool => match s.tool.clone().filter(|t| !t.is_empty()) {
                None => return missing("tool", "a tool scorer names its `tool`"),
                Some(t) => How::Tool(t),
            },
        };
        let threshold = s.threshold.unwrap_or(match s.kind {
            Kind::Judge | Kind::Tool => 0.5,
            _ => 1.0,
        });
        if !(0.0..=1.0).contains(&threshold) {
            return Err((".threshold".into(), "must be 0 to 1".into()));
        }
        Ok(Self {
            name: s
                .name
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or(kind_name),
            kind: s.kind,
            threshold,
            how,
        })
    }

    /// The case field it compares with, if any.
    pub fn needs(&self) -> Option<&'static str> {
        match (&self.kind, &self.how) {
            (Kind::Exact | Kind::Numeric, _) => Some("expected"),
            (Kind::Contains, How::Contains { value: None, .. }) => Some("expected"),
            (Kind::Trajectory, _) => Some("expected_tools"),
            _ => None,
        }
    }

    /// Whether it is asked outside this module (a judge, a tool).
    pub fn asks(&self) -> bool {
        matches!(self.kind, Kind::Judge | Kind::Tool)
    }

    /// The verdict of `score` with `reason`.
    pub fn verdict(&self, score: f64, reason: String) -> Verdict {
        let score = if score.is_finite() {
            score.clamp(0.0, 1.0)
        } else {
            0.0
        };
        Verdict {
            scorer: self.name.clone(),
            score,
            passed: score >= self.threshold,
            reason,
            agreement: 1.0,
            errored: false,
        }
    }

    /// The verdict of a scorer that could not say, and why.
    pub fn errored(&self, reason: String) -> Verdict {
        Verdict {
            scorer: self.name.clone(),
            score: 0.0,
            passed: false,
            reason,
            agreement: 0.0,
            errored: true,
        }
    }

    /// Scores an answer and its calls (`None` for a judge or a tool).
    pub fn score(
        &self,
        output: &str,
        expected: Option<&Value>,
        trajectory: Option<&Trajectory>,
        calls: &[ActualCall],
    ) -> Option<Verdict> {
        let text_of = |v: &Value| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let expected_text = expected.map(text_of).unwrap_or_default();
        let fold = |s: &str, ignore: bool| {
            if ignore {
                s.to_lowercase()
            } else {
                s.to_owned()
            }
        };
        let (score, reason) = match &self.how {
            How::Plain { ignore_case } if self.kind == Kind::Exact => {
                let (a, b) = (
                    fold(output.trim(), *ignore_case),
                    fold(expected_text.trim(), *ignore_case),
                );
                if a == b {
                    (1.0, "the answer is the expected one".to_owned())
                } else {
                    (0.0, format!("expected {:?}, got {:?}", cut(&b), cut(&a)))
                }
            }
            How::Plain { .. } => match trajectory {
                Some(t) => t.score(calls),
                None => (0.0, "no expected_tools".to_owned()),
            },
            How::Contains { value, ignore_case } => {
                let want = value.clone().unwrap_or(expected_text);
                if fold(output, *ignore_case).contains(&fold(&want, *ignore_case)) {
                    (1.0, format!("the answer contains {:?}", cut(&want)))
                } else {
                    (
                        0.0,
                        format!(
                            "the answer does not contain {:?}: {:?}",
                            cut(&want),
                            cut(output)
                        ),
                    )
                }
            }
            How::Regex(r) => {
                if r.is_match(output) {
                    (1.0, format!("the answer matches /{}/", r.as_str()))
                } else {
                    (
                        0.0,
                        format!(
                            "the answer does not match /{}/: {:?}",
                            r.as_str(),
                            cut(output)
                        ),
                    )
                }
            }
            How::Schema(s) => match serde_json::from_str::<Value>(output.trim()) {
                Err(e) => (0.0, format!("the answer is not JSON: {e}")),
                Ok(v) => match s.validate(&v) {
                    Ok(()) => (1.0, "the answer is valid under the schema".to_owned()),
                    Err(e) => (
                        0.0,
                        format!(
                            "the answer is not valid under the schema: {e} (at {})",
                            e.instance_path()
                        ),
                    ),
                },
            },
            How::Numeric {
                tolerance,
                relative,
            } => {
                let want = expected.and_then(|v| number(v).or_else(|| first_number(&text_of(v))));
                match (want, first_number(output)) {
                    (None, _) => (
                        0.0,
                        format!("expected {:?} is not a number", cut(&expected_text)),
                    ),
                    (_, None) => (0.0, format!("the answer has no number: {:?}", cut(output))),
                    (Some(w), Some(got)) => {
                        let allowed = if *relative {
                            tolerance * w.abs()
                        } else {
                            *tolerance
                        };
                        if (got - w).abs() <= allowed {
                            (1.0, format!("{got} is within {allowed} of {w}"))
                        } else {
                            (
                                0.0,
                                format!("{got} is {} off {w} (allowed {allowed})", (got - w).abs()),
                            )
                        }
                    }
                }
            }
            How::Judge { .. } | How::Tool(_) => return None,
        };
        Some(self.verdict(score, reason))
    }
}

/// The first number written in `text` (`-1,234.5` reads as -1234.5).
pub fn first_number(text: &str) -> Option<f64> {
    static NUMBER: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")
            .unwrap_or_else(|_| unreachable!("a valid regex"))
    });
    NUMBER
        .find(text)
        .and_then(|m| m.as_str().replace(',', "").parse().ok())
}

/// `s` in at most 200 characters.
pub fn cut(s: &str) -> String {
    let mut out: String = s.chars().take(200).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn scorer(v: Value) -> Scorer {
        Scorer::compile(&serde_json::from_value(v).expect("spec")).expect("compiles")
    }

    fn call(tool: &str, args: Value, depth: u32) -> ActualCall {
        ActualCall {
            tool: tool.into(),
            arguments: args,
            depth,
        }
    }

    #[test]
    fn text_scorers_score_and_say_why() {
        let exact = Scorer::exact();
        let v = exact
            .score(" Paris ", Some(&json!("Paris")), None, &[])
            .expect("scored");
        assert!(v.passed && v.score == 1.0);
        let v = exact
            .score("paris", Some(&json!("Paris")), None, &[])
            .expect("scored");
        assert_eq!(
            (v.passed, v.reason.as_str()),
            (false, "expected \"Paris\", got \"paris\"")
        );
        let v = scorer(json!({"kind": "contains", "value": "PAR", "ignore_case": true}))
            .score("in paris", None, None, &[])
            .expect("scored");
        assert!(v.passed);
        let v = scorer(json!({"kind": "regex", "pattern": "^\\d+ items$"}))
            .score("12 items", None, None, &[])
            .expect("scored");
        assert!(v.passed);
        let s =
            scorer(json!({"kind": "json_schema", "schema": {"type": "object", "required": ["a"]}}));
        assert!(
            s.score("{\"a\": 1}", None, None, &[])
                .expect("scored")
                .passed
        );
        let v = s.score("{\"b\": 1}", None, None, &[]).expect("scored");
        assert!(
            !v.passed && v.reason.contains("\"a\" is a required property"),
            "{}",
            v.reason
        );
        let n = scorer(json!({"kind": "numeric", "tolerance": 0.01, "relative": true}));
        assert!(
            n.score("about 1,000.5 km", Some(&json!(1000)), None, &[])
                .expect("scored")
                .passed
        );
        assert!(
            !n.score("about 1,020 km", Some(&json!("1000")), None, &[])
                .expect("scored")
                .passed
        );
        assert!(
            scorer(json!({"kind": "judge", "model": "m:x", "rubric": "r"}))
                .score("", None, None, &[])
                .is_none()
        );
    }

    #[test]
    fn trajectories_match_in_order_any_order_subset_and_exactly() {
        let calls = [
            call("search", json!({"q": "rust async", "limit": 10}), 0),
            call("fetch", json!({"url": "https://a"}), 1),
            call("search", json!({"q": "tokio"}), 0),
        ];
        let t = |order: &str, expected: Value| {
            let spec: super::super::dataset::TrajectorySpec =
                serde_json::from_value(json!({"order": order, "calls": expected})).expect("spec");
            let d = super::super::dataset::parse(
                "t.jsonl",
                &json!({"input": "x", "expected_tools": spec}).to_string(),
            )
            .expect("parses");
            d.cases[0]
                .trajectory
                .clone()
                .expect("trajectory")
                .score(&calls)
        };
        let (s, _) = t(
            "in_order",
            json!([{"tool": "search", "args": {"q": {"regex": "^rust"}}}, {"tool": "search"}]),
        );
        assert_eq!(s, 1.0);
        let (s, why) = t(
            "in_order",
            json!([{"tool": "search", "args": {"q": "tokio"}}, {"tool": "fetch"}]),
        );
        assert_eq!(s, 0.5);
        assert!(
            why.starts_with("expected call fetch (in order) not made; closest: fetch("),
            "{why}"
        );
        let (s, _) = t(
            "any_order",
            json!([{"tool": "search"}, {"tool": "search"}, {"tool": "fetch", "args": {"url": {"any": true}}}]),
        );
        assert_eq!(s, 1.0);
        let (s, _) = t("any_order", json!([{"tool": "search"}, {"tool": "fetch"}]));
        assert!(
            (s - 2.0 / 3.0).abs() < 1e-9,
            "an extra call counts against any_order"
        );
        let (s, _) = t(
            "subset",
            json!([{"tool": "search", "args": {"limit": {"approx": 10.2, "tolerance": 0.5}}}]),
        );
        assert_eq!(s, 1.0);
        let (s, why) = t(
            "subset",
            json!([{"tool": "search", "args": {"q": "rust async"}, "args_exact": true}]),
        );
        assert_eq!(s, 0.0, "limit was given too");
        assert!(why.contains("closest: search("), "{why}");
        let (s, _) = t(
            "exact",
            json!([{"tool": "search"}, {"tool": "fetch", "args": {"url": {"schema": {"type": "string", "pattern": "^https://"}}}}, {"tool": "search"}]),
        );
        assert_eq!(s, 1.0);
        let (s, why) = t("exact", json!([{"tool": "fetch"}]));
        assert_eq!(s, 0.0);
        assert!(
            why.contains("expected call fetch (in order) not made"),
            "{why}"
        );
    }
}
