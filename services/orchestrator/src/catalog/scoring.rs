//! An agent's live scoring (`scoring` in the agents file): which share of
//! its runs is scored as they end, and by which scorers (see
//! `app::live_scoring`).

use std::sync::Arc;

use serde::Deserialize;

use super::error::CatalogError;
use crate::eval::score::{How, Scorer, ScorerSpec};

/// An agent's live scoring: `sample` of its runs (0 to 1; a run is in the
/// sample or not by its id, the same on every replica) are scored by
/// `scorers` as they complete. Scorers that compare with an expected
/// answer or trajectory cannot score live runs (there is none).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveScoring {
    /// The share of runs scored.
    pub sample: f64,
    /// The scorers.
    pub scorers: Vec<ScorerSpec>,
    /// The scorers, compiled (when the catalog is built).
    #[serde(skip)]
    pub compiled: Vec<Arc<Scorer>>,
}

impl LiveScoring {
    /// Whether run `run_id` is in the sample: its id's bits, read as a
    /// share, under `sample` (the same on every replica and every resume).
    pub fn samples(&self, run_id: &str) -> bool {
        // FNV-1a, then murmur3's finalizer: ids differing in their last
        // characters (UUIDv7s of one millisecond) spread over the range.
        let mut h = run_id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^= h >> 33;
        (h as f64 / u64::MAX as f64) < self.sample
    }
}

/// Checks agent `name`'s live scoring (`known_model` says whether a
/// judge's model resolves, `known_tool` whether a server of the file has
/// the tool); the error names the field.
pub(super) fn check(
    name: &str,
    s: &LiveScoring,
    known_model: &dyn Fn(&str) -> Result<(), String>,
    known_tool: &dyn Fn(&str) -> bool,
) -> Result<(), CatalogError> {
    let at = format!("agents.{name}.scoring");
    let bad =
        |field: String, message: String| CatalogError::Scoring(format!("{at}{field}: {message}"));
    if !(s.sample > 0.0 && s.sample <= 1.0) {
        return Err(bad(
            ".sample".into(),
            "must be more than 0 and at most 1".into(),
        ));
    }
    if s.scorers.is_empty() {
        return Err(bad(
            ".scorers".into(),
            "must name at least one scorer".into(),
        ));
    }
    for (i, spec) in s.scorers.iter().enumerate() {
        let scorer = Scorer::compile(spec).map_err(|(f, m)| bad(format!(".scorers[{i}]{f}"), m))?;
        if let Some(need) = scorer.needs() {
            return Err(bad(
                format!(".scorers[{i}]"),
                format!(
                    "{} compares with `{need}`, which a live run has not",
                    scorer.name
                ),
            ));
        }
        if let How::Judge { model, .. } = &scorer.how {
            known_model(model).map_err(|m| bad(format!(".scorers[{i}].model"), m))?;
        }
        if let How::Tool(tool) = &scorer.how
            && !known_tool(tool)
        {
            return Err(bad(
                format!(".scorers[{i}].tool"),
                format!("{tool:?} is no tool of a tool server or MCP server of this file"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::catalog::Catalog;

    fn with(scoring: &str) -> Result<Catalog, String> {
        Catalog::from_yaml(&format!(
            "scripts:\n  a: [{{text: hi}}]\ntool_servers:\n  t: {{endpoint: \"http://127.0.0.1:1\", tools: [grade]}}\nagents:\n  a:\n    model: scripted:a\n    scoring: {scoring}\n"
        ))
        .map_err(|e| e.to_string())
    }

    #[test]
    fn a_live_scoring_is_checked_naming_its_field() {
        assert!(
            with("{sample: 1, scorers: [{kind: regex, pattern: hi}]}").is_ok(),
            "sample 1: every run"
        );
        assert!(with("{sample: 0.001, scorers: [{kind: tool, tool: grade}]}").is_ok());
        for (scoring, said) in [
            (
                "{sample: 1.01, scorers: [{kind: regex, pattern: hi}]}",
                "agents.a.scoring.sample: must be more than 0 and at most 1",
            ),
            (
                "{sample: 0, scorers: [{kind: regex, pattern: hi}]}",
                "agents.a.scoring.sample: must be more than 0 and at most 1",
            ),
            (
                "{sample: 1, scorers: []}",
                "agents.a.scoring.scorers: must name at least one scorer",
            ),
            (
                "{sample: 1, scorers: [{kind: exact}]}",
                "agents.a.scoring.scorers[0]: exact compares with `expected`, which a live run has not",
            ),
            (
                "{sample: 1, scorers: [{kind: regex, pattern: \"(\"}]}",
                "agents.a.scoring.scorers[0].pattern: regex parse error",
            ),
            (
                "{sample: 1, scorers: [{kind: judge, model: \"nowhere:x\", rubric: r}]}",
                "agents.a.scoring.scorers[0].model: \"nowhere:x\": unknown provider \"nowhere\"",
            ),
            (
                "{sample: 1, scorers: [{kind: tool, tool: nope}]}",
                "agents.a.scoring.scorers[0].tool: \"nope\" is no tool of a tool server or MCP server of this file",
            ),
        ] {
            let e = with(scoring).err().unwrap_or_default();
            assert!(e.starts_with(said), "{scoring}: {e}");
        }
    }

    #[test]
    fn a_run_is_in_the_sample_by_its_id_alone() {
        let scoring = super::LiveScoring {
            sample: 0.5,
            ..Default::default()
        };
        let ids: Vec<String> = (0..1000)
            .map(|i| format!("0190f5a2-7b3c-7d4e-8f10-{i:012}"))
            .collect();
        let sampled = ids.iter().filter(|id| scoring.samples(id)).count();
        assert!((400..600).contains(&sampled), "{sampled} of 1000 at 0.5");
        assert!(
            ids.iter()
                .all(|id| scoring.samples(id) == scoring.samples(id))
        );
    }
}
