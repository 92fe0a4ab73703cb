//! Datasets: a file of cases, JSON Lines (one case a line; a first line
//! `{"dataset": {…}}` holds what every case defaults to) or YAML (a list of
//! cases, or a map with `cases:` and the defaults beside it). Parsed and
//! checked whole before anything runs: a problem names the file, the line
//! and the field (`evals/support.jsonl:3: expected_tools.calls[0].args.query:
//! bad regex …`).

use std::{collections::BTreeMap, sync::Arc};

use serde::Deserialize;
use serde_json::{Map, Value};

use super::score::{Matcher, Scorer, Trajectory};
pub use super::spec::{
    CallSpec, CaseSpec, Defaults, Fault, MatchedSpec, RecordedCall, RecordingSpec, Scored,
    ToolsMode, TrajectorySpec,
};

/// A case, checked.
#[derive(Debug, Clone)]
pub struct Case {
    /// Its id.
    pub id: String,
    /// The line it starts on.
    pub line: u32,
    /// Its user messages (one, usually).
    pub messages: Vec<String>,
    /// Which answers are scored.
    pub scored: Scored,
    /// Its run context.
    pub context: Map<String, Value>,
    /// The expected answer.
    pub expected: Option<Value>,
    /// The expected tool calls.
    pub trajectory: Option<Trajectory>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its target; empty: the experiment's.
    pub agent: String,
    /// Its target when a pipeline (an object of a pipeline file's
    /// fields); none: its agent's, or the experiment's.
    pub pipeline: Option<Value>,
    /// Its scorers.
    pub scorers: Vec<Arc<Scorer>>,
    /// Where its tool calls are answered from.
    pub tools: ToolsMode,
    /// Its recording.
    pub recording: Option<RecordingSpec>,
    /// Faults injected.
    pub faults: Vec<Fault>,
}

/// A dataset, parsed and checked (its targets and models are checked
/// against the server by the experiment).
#[derive(Debug, Clone, Default)]
pub struct Dataset {
    /// The file's name.
    pub name: String,
    /// The default target the file names.
    pub agent: Option<String>,
    /// Or the pipeline they run (see [`Case::pipeline`]).
    pub pipeline: Option<Value>,
    /// The cases, in the file's order.
    pub cases: Vec<Case>,
}

/// A problem with a dataset: where and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bad {
    /// The line (1-based; 0 when the file as a whole).
    pub line: u32,
    /// The field within the case (`expected_tools.calls[0].tool`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl Bad {
    pub(crate) fn new(line: u32, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            line,
            field: field.into(),
            message: message.into(),
        }
    }

    /// The problem as one line naming `file`.
    pub fn said(&self, file: &str) -> String {
        match (self.line, self.field.is_empty()) {
            (0, true) => format!("{file}: {}", self.message),
            (0, false) => format!("{file}: {}: {}", self.field, self.message),
            (l, true) => format!("{file}:{l}: {}", self.message),
            (l, false) => format!("{file}:{l}: {}: {}", self.field, self.message),
        }
    }
}

/// Most cases in a dataset.
pub const MAX_CASES: usize = 10_000;

/// Parses `text`, the file `name`: YAML when the name ends in `.yaml` or
/// `.yml`, JSON Lines otherwise.
pub fn parse(name: &str, text: &str) -> Result<Dataset, Bad> {
    let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
    let (defaults, specs) = if yaml {
        parse_yaml(text)?
    } else {
        parse_lines(text)?
    };
    if specs.is_empty() {
        return Err(Bad::new(0, "", "has no cases"));
    }
    if specs.len() > MAX_CASES {
        return Err(Bad::new(
            specs[MAX_CASES].0,
            "",
            format!("over {MAX_CASES} cases"),
        ));
    }
    check_pipeline(
        0,
        "dataset.",
        defaults.agent.is_some(),
        defaults.pipeline.as_ref(),
    )?;
    let mut defaults_scorers = Vec::new();
    for (i, s) in defaults.scorers.iter().enumerate() {
        let scorer = Scorer::compile(s).map_err(|(field, message)| {
            Bad::new(0, format!("dataset.scorers[{i}]{field}"), message)
        })?;
        defaults_scorers.push(Arc::new(scorer));
    }
    let mut ids = std::collections::HashMap::new();
    // Cases of a dataset often score alike: a scorer written the same way
    // is compiled once (a regex or a schema compiles in tens of µs).
    let mut compiled: std::collections::HashMap<String, Arc<Scorer>> = Default::default();
    let mut cases = Vec::with_capacity(specs.len());
    for (line, spec) in specs {
        let case = check(line, spec, &defaults, &defaults_scorers, &mut compiled)?;
        if let Some(first) = ids.insert(case.id.clone(), line) {
            return Err(Bad::new(
                line,
                "id",
                format!("{:?} is the id of the case on line {first} too", case.id),
            ));
        }
        cases.push(case);
    }
    Ok(Dataset {
        name: name.to_owned(),
        agent: defaults.agent,
        pipeline: defaults.pipeline,
        cases,
    })
}

/// JSON Lines: a case a line; blank lines and lines starting with `#` are
/// skipped; a first line `{"dataset": {…}}` holds the defaults.
fn parse_lines(text: &str) -> Result<(Defaults, Vec<(u32, CaseSpec)>), Bad> {
    let mut defaults = Defaults::default();
    let mut specs = Vec::new();
    let mut seen_header = false;
    for (i, raw) in text.lines().enumerate() {
        let line = i as u32 + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        // The first line may be the header, `{"dataset": {…}}`, once.
        let header = specs.is_empty()
            && serde_json::from_str::<Map<String, Value>>(trimmed)
                .is_ok_and(|m| m.len() == 1 && m.contains_key("dataset"));
        if header {
            if seen_header {
                return Err(Bad::new(
                    line,
                    "dataset",
                    "a second header: give the dataset's defaults once, on its first line",
                ));
            }
            seen_header = true;
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Header {
                dataset: Defaults,
            }
            let de = &mut serde_json::Deserializer::from_str(trimmed);
            let header: Header =
                serde_path_to_error::deserialize(de).map_err(|e| bad_at(line, &e))?;
            defaults = header.dataset;
            continue;
        }
        let de = &mut serde_json::Deserializer::from_str(trimmed);
        let spec: CaseSpec = serde_path_to_error::deserialize(de).map_err(|e| bad_at(line, &e))?;
        specs.push((line, spec));
    }
    Ok((defaults, specs))
}

/// A field that does not deserialize, on `line`, as a [`Bad`].
fn bad_at(line: u32, e: &serde_path_to_error::Error<serde_json::Error>) -> Bad {
    Bad::new(
        line,
        path_of(&e.path().to_string()),
        json_message(e.inner()),
    )
}

/// A path as serde_path_to_error says it, `.` being the whole value.
fn path_of(path: &str) -> String {
    if path == "." || path == "?" {
        String::new()
    } else {
        path.to_owned()
    }
}

/// serde_json's message without its " at line 1 column N" (the line is
/// the file's, said already).
fn json_message(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(at) => s[..at].to_owned(),
        None => s,
    }
}

/// YAML: a list of cases, or a map with `cases` and the defaults.
fn parse_yaml(text: &str) -> Result<(Defaults, Vec<(u32, CaseSpec)>), Bad> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Doc {
        List(Vec<Value>),
        Map(Map<String, Value>),
    }
    let doc: Doc = serde_norway::from_str(text).map_err(|e| {
        let line = e.location().map_or(0, |l| l.line() as u32);
        Bad::new(line, "", yaml_message(&e))
    })?;
    let (defaults, items, list_key) = match doc {
        Doc::List(items) => (Defaults::default(), items, None),
        Doc::Map(mut map) => {
            let items = match map.remove("cases") {
                Some(Value::Array(items)) => items,
                Some(_) => return Err(Bad::new(0, "cases", "must be a list of cases")),
                None => {
                    return Err(Bad::new(
                        0,
                        "cases",
                        "missing: a YAML dataset is a list of cases, or a map with `cases`",
                    ));
                }
            };
            let defaults: Defaults =
                serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| {
                    Bad::new(
                        0,
                        format!("dataset.{}", path_of(&e.path().to_string())),
                        json_message(e.inner()),
                    )
                })?;
            (defaults, items, Some("cases"))
        }
    };
    let lines = item_lines(text, list_key);
    let mut specs = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let line = lines.get(i).copied().unwrap_or(0);
        let spec: CaseSpec =
            serde_path_to_error::deserialize(item).map_err(|e| bad_at(line, &e))?;
        specs.push((line, spec));
    }
    Ok((defaults, specs))
}

fn yaml_message(e: &serde_norway::Error) -> String {
    let s = e.to_string();
    match s.find(" at line ") {
        Some(at) => s[..at].to_owned(),
        None => s,
    }
}

/// The line each item of the YAML list starts on: the `- ` lines at the
/// list's own indentation (under `key:` when the list is a map's).
fn item_lines(text: &str, key: Option<&str>) -> Vec<u32> {
    let mut lines = Vec::new();
    let mut inside = key.is_none();
    let mut indent: Option<usize> = None;
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let at = raw.len() - trimmed.len();
        if !inside {
            if at == 0 && key.is_some_and(|k| trimmed.starts_with(&format!("{k}:"))) {
                inside = true;
            }
            continue;
        }
        if key.is_some() && at == 0 && !trimmed.starts_with('-') {
            // The map's next key: the list is over.
            inside = false;
            continue;
        }
        if trimmed.starts_with("- ") || trimmed == "-" {
            match indent {
                None => {
                    indent = Some(at);
                    lines.push(i as u32 + 1);
                }
                Some(n) if n == at => lines.push(i as u32 + 1),
                _ => {}
            }
        }
    }
    lines
}

/// Checks one case's fields (what needs no server) and compiles its
/// scorers and matchers.
fn check(
    line: u32,
    spec: CaseSpec,
    defaults: &Defaults,
    default_scorers: &[Arc<Scorer>],
    compiled: &mut std::collections::HashMap<String, Arc<Scorer>>,
) -> Result<Case, Bad> {
    let messages = match (spec.input, spec.messages.is_empty()) {
        (Some(_), false) => {
            return Err(Bad::new(
                line,
                "messages",
                "give `input` or `messages`, not both",
            ));
        }
        (Some(input), true) => vec![input],
        (None, false) => spec.messages,
        (None, true) => {
            return Err(Bad::new(
                line,
                "input",
                "missing: a case needs `input` or `messages`",
            ));
        }
    };
    if let Some(i) = messages.iter().position(|m| m.trim().is_empty()) {
        let field = if messages.len() == 1 {
            "input".to_owned()
        } else {
            format!("messages[{i}]")
        };
        return Err(Bad::new(line, field, "must not be empty"));
    }
    if messages.len() > 50 {
        return Err(Bad::new(line, "messages", "at most 50 messages a case"));
    }
    check_pipeline(line, "", spec.agent.is_some(), spec.pipeline.as_ref())?;
    if spec.pipeline.is_some() && messages.len() > 1 {
        return Err(Bad::new(
            line,
            "messages",
            "a pipeline case takes one `input` (its `input` slot)",
        ));
    }
    let id = if spec.id.is_empty() {
        format!("line-{line}")
    } else {
        spec.id
    };
    if id.len() > 128 || id.chars().any(|c| c.is_control()) {
        return Err(Bad::new(
            line,
            "id",
            "at most 128 characters, no control characters",
        ));
    }
    let trajectory = match spec.expected_tools {
        None => None,
        Some(t) => Some(
            compile_trajectory(t)
                .map_err(|(field, m)| Bad::new(line, format!("expected_tools{field}"), m))?,
        ),
    };
    let mut scorers: Vec<Arc<Scorer>> = default_scorers.to_vec();
    for (i, s) in spec.scorers.iter().enumerate() {
        let key = serde_json::to_string(s).unwrap_or_default();
        let scorer = match compiled.get(&key) {
            Some(scorer) => scorer.clone(),
            None => {
                let scorer = Arc::new(
                    Scorer::compile(s)
                        .map_err(|(field, m)| Bad::new(line, format!("scorers[{i}]{field}"), m))?,
                );
                compiled.insert(key, scorer.clone());
                scorer
            }
        };
        scorers.push(scorer);
    }
    if scorers.is_empty() {
        // What a user would expect of a case that says what it expects.
        if spec.expected.is_some() {
            scorers.push(Arc::new(Scorer::exact()));
        }
        if trajectory.is_some() {
            scorers.push(Arc::new(Scorer::trajectory()));
        }
    }
    if scorers.is_empty() {
        return Err(Bad::new(
            line,
            "scorers",
            "the case has no scorer and nothing to compare with: give `expected`, `expected_tools` or `scorers`",
        ));
    }
    for (i, s) in scorers.iter().enumerate() {
        if let Some(need) = s.needs() {
            let has = match need {
                "expected" => spec.expected.is_some(),
                "expected_tools" => trajectory.is_some(),
                _ => true,
            };
            if !has {
                return Err(Bad::new(
                    line,
                    need,
                    format!("missing: scorer {} ({}) compares with it", i, s.name),
                ));
            }
        }
    }
    // An empty recording (a run that called no tool outside Baton) is one:
    // every such call the case makes is not in it.
    let recording = spec.recording;
    if let Some(r) = &recording
        && !r.run_id.is_empty()
        && !r.calls.is_empty()
    {
        return Err(Bad::new(
            line,
            "recording",
            "give `run_id` or `calls`, not both",
        ));
    }
    if let Some(r) = &recording {
        for (i, c) in r.calls.iter().enumerate() {
            if c.tool.is_empty() {
                return Err(Bad::new(
                    line,
                    format!("recording.calls[{i}].tool"),
                    "missing",
                ));
            }
        }
    }
    let tools = spec
        .tools
        .or(defaults.tools)
        .unwrap_or(if recording.is_some() {
            ToolsMode::Recorded
        } else {
            ToolsMode::Live
        });
    if tools != ToolsMode::Live && recording.is_none() {
        return Err(Bad::new(
            line,
            "recording",
            "missing: `tools: recorded` answers tool calls from a recording (`recording: {run_id}` or `recording: {calls}`)",
        ));
    }
    for (i, f) in spec.faults.iter().enumerate() {
        if f.tool.is_empty() {
            return Err(Bad::new(line, format!("faults[{i}].tool"), "missing"));
        }
        if f.error.is_empty() && f.delay_ms.is_none() && !f.timeout {
            return Err(Bad::new(
                line,
                format!("faults[{i}]"),
                "says nothing: give `error`, `delay_ms` or `timeout`",
            ));
        }
        if f.delay_ms.is_some_and(|d| d > 600_000) {
            return Err(Bad::new(
                line,
                format!("faults[{i}].delay_ms"),
                "at most 600000 (ten minutes)",
            ));
        }
    }
    Ok(Case {
        id,
        line,
        messages,
        scored: spec.score,
        context: spec.context.unwrap_or_default(),
        expected: spec.expected,
        trajectory,
        labels: spec.labels,
        agent: spec.agent.unwrap_or_default(),
        pipeline: spec.pipeline,
        scorers,
        tools,
        recording,
        faults: spec.faults,
    })
}

/// A target given as a pipeline: an object, and not beside an agent (its
/// fields are checked against the pipelines' rules as the experiment is
/// planned). `prefix`: `dataset.` for the defaults.
fn check_pipeline(
    line: u32,
    prefix: &str,
    agent: bool,
    pipeline: Option<&Value>,
) -> Result<(), Bad> {
    match pipeline {
        None => Ok(()),
        Some(_) if agent => Err(Bad::new(
            line,
            format!("{prefix}pipeline"),
            "give `agent` or `pipeline`, not both",
        )),
        Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(Bad::new(
            line,
            format!("{prefix}pipeline"),
            "must be an object: a pipeline file's fields (name, mode, steps, …)",
        )),
    }
}

/// Compiles expected calls; an error names the field within
/// `expected_tools` (`.calls[0].args.query`).
fn compile_trajectory(t: TrajectorySpec) -> Result<Trajectory, (String, String)> {
    let (spec, prefix) = match t {
        TrajectorySpec::Calls(calls) => (
            MatchedSpec {
                calls,
                ..Default::default()
            },
            "",
        ),
        TrajectorySpec::Matched(m) => (m, ".calls"),
    };
    let mut calls = Vec::with_capacity(spec.calls.len());
    for (i, c) in spec.calls.into_iter().enumerate() {
        if c.tool.is_empty() {
            return Err((format!("{prefix}[{i}].tool"), "missing".into()));
        }
        let mut args = Vec::with_capacity(c.args.len());
        for (name, m) in c.args {
            let matcher = Matcher::compile(m)
                .map_err(|(f, e)| (format!("{prefix}[{i}].args.{name}{f}"), e))?;
            args.push((name, matcher));
        }
        calls.push(super::score::ExpectedCall {
            tool: c.tool,
            args,
            args_exact: c.args_exact,
        });
    }
    Ok(Trajectory {
        order: spec.order,
        calls,
        top_level_only: spec.top_level_only,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(name: &str, text: &str) -> String {
        parse(name, text)
            .map(|_| ())
            .expect_err("refused")
            .said(name)
    }

    #[test]
    fn a_header_is_read_however_spaced_and_only_once() {
        let d = parse(
            "d.jsonl",
            "{ \"dataset\" : {\"agent\": \"a\"} }\n{\"input\": \"x\", \"expected\": \"y\"}\n",
        )
        .expect("parses");
        assert_eq!(d.agent.as_deref(), Some("a"));
        assert_eq!(
            bad(
                "d.jsonl",
                "{\"dataset\": {}}\n{\"dataset\": {}}\n{\"input\": \"x\", \"expected\": \"y\"}"
            ),
            "d.jsonl:2: dataset: a second header: give the dataset's defaults once, on its first line"
        );
        // An empty recording is one (a run that called no tool outside Baton).
        let d = parse(
            "d.jsonl",
            "{\"input\": \"x\", \"expected\": \"y\", \"recording\": {\"calls\": []}}",
        )
        .expect("parses");
        assert_eq!(d.cases[0].tools, ToolsMode::Recorded);
    }

    #[test]
    fn json_lines_parse_with_defaults_and_comments() {
        let d = parse(
            "d.jsonl",
            "{\"dataset\": {\"agent\": \"chat\"}}\n# a comment\n\n{\"input\": \"hi\", \"expected\": \"You said: hi\"}\n{\"id\": \"two\", \"messages\": [\"a\", \"b\"], \"score\": \"each\", \"scorers\": [{\"kind\": \"contains\", \"value\": \"b\"}]}\n",
        )
        .expect("parses");
        assert_eq!(d.agent.as_deref(), Some("chat"));
        assert_eq!(d.cases.len(), 2);
        assert_eq!(d.cases[0].id, "line-4");
        assert_eq!(d.cases[0].scorers[0].name, "exact");
        assert_eq!(d.cases[1].messages, ["a", "b"]);
        assert_eq!(d.cases[1].scored, Scored::Each);
    }

    #[test]
    fn a_bad_line_names_file_line_and_field() {
        assert_eq!(
            bad(
                "d.jsonl",
                "{\"input\": \"a\", \"expected\": \"b\"}\n{\"input\": \"a\", \"expected\": 1, \"scorers\": [{\"kind\": \"regex\", \"pattern\": \"(\"}]}\n"
            ),
            "d.jsonl:2: scorers[0].pattern: regex parse error:\n    (\n    ^\nerror: unclosed group"
        );
        assert_eq!(
            bad("d.jsonl", "{\"input\": \"a\", \"expectd\": \"b\"}"),
            "d.jsonl:1: expectd: unknown field `expectd`, expected one of `id`, `input`, `messages`, `score`, `context`, `expected`, `expected_tools`, `labels`, `agent`, `pipeline`, `scorers`, `tools`, `recording`, `faults`"
        );
        assert_eq!(
            bad("d.jsonl", "{\"input\": \"a\"\n"),
            "d.jsonl:1: EOF while parsing an object"
        );
        assert_eq!(
            bad("d.jsonl", "{\"expected\": \"a\"}"),
            "d.jsonl:1: input: missing: a case needs `input` or `messages`"
        );
        assert_eq!(
            bad(
                "d.jsonl",
                "{\"input\": \"a\", \"expected_tools\": [{\"tool\": \"s\", \"args\": {\"q\": {\"schema\": {\"type\": 12}}}}]}"
            ),
            "d.jsonl:1: expected_tools[0].args.q.schema: not a JSON Schema: 12 is not valid under any of the schemas listed in the 'anyOf' keyword"
        );
        assert_eq!(
            bad(
                "d.jsonl",
                "{\"input\": \"a\", \"scorers\": [{\"kind\": \"judge\", \"rubric\": \"good?\"}]}"
            ),
            "d.jsonl:1: scorers[0].model: missing: a judge names its model (`provider:model`)"
        );
        assert_eq!(
            bad("d.jsonl", "{\"input\": \"a\"}"),
            "d.jsonl:1: scorers: the case has no scorer and nothing to compare with: give `expected`, `expected_tools` or `scorers`"
        );
        assert_eq!(
            bad(
                "d.jsonl",
                "{\"input\": \"a\", \"scorers\": [{\"kind\": \"exact\"}]}"
            ),
            "d.jsonl:1: expected: missing: scorer 0 (exact) compares with it"
        );
        assert_eq!(
            bad(
                "d.jsonl",
                "{\"id\": \"x\", \"input\": \"a\", \"expected\": \"\"}\n{\"id\": \"x\", \"input\": \"b\", \"expected\": \"\"}"
            ),
            "d.jsonl:2: id: \"x\" is the id of the case on line 1 too"
        );
        assert_eq!(bad("d.jsonl", "\n\n"), "d.jsonl: has no cases");
    }

    #[test]
    fn yaml_lists_and_maps_say_each_cases_line() {
        let text = "agent: chat\nscorers:\n  - kind: contains\n    value: hi\ncases:\n  - input: hi\n  - input: ho\n    labels: {k: v}\n  - input: hu\n    expected_tools:\n      - tool: search\n        args: {q: {regex: \"[\"}}\n";
        assert_eq!(
            bad("d.yaml", text),
            "d.yaml:9: expected_tools[0].args.q.regex: regex parse error:\n    [\n    ^\nerror: unclosed character class"
        );
        let d = parse(
            "d.yml",
            "- input: a\n  expected: b\n- id: two\n  input: c\n  expected: d\n",
        )
        .expect("parses");
        assert_eq!(d.cases.iter().map(|c| c.line).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(
            bad("d.yaml", "cases:\n  - input: a\n    expected: [\n"),
            bad("d.yaml", "cases:\n  - input: a\n    expected: [\n")
        );
        assert!(
            bad("d.yaml", "cases:\n  - input: a\n    expected: [\n").starts_with("d.yaml:4: "),
            "{}",
            bad("d.yaml", "cases:\n  - input: a\n    expected: [\n")
        );
        assert_eq!(
            bad("d.yaml", "cases: 3\n"),
            "d.yaml: cases: must be a list of cases"
        );
    }
}
