//! Two experiments compared, case by case (matched by case id).
//!
//! A case whose pass rate fell *regressed* when the fall is beyond noise:
//! when Fisher's exact test (one-sided, [`super::stats::fisher`]) gives a
//! p-value at most `alpha`; with a single try on both sides there is no
//! noise to measure, so a fall (pass → fail) is a regression. A try that
//! could not run (an error) counts as failed. A case the candidate did not
//! run because it did not complete regressed (a CI job must not pass on an
//! experiment cut short). Rises are judged the same way.

use std::collections::{BTreeMap, HashMap};

use baton_proto::v1 as pb;

use super::stats::fisher;

/// Tries that passed, and tries (a case that could not run: 0 of 1).
fn counts(c: &pb::CaseResult) -> (u32, u32) {
    let passed = c.tries.iter().filter(|t| t.passed).count() as u32;
    let tries = c.tries.len() as u32 + c.errored_tries;
    (passed, tries.max(1))
}

/// Each scorer's mean score over a case's tries.
fn means(c: &pb::CaseResult) -> BTreeMap<String, f64> {
    let mut sums: BTreeMap<String, (f64, u32)> = BTreeMap::new();
    for t in &c.tries {
        for s in &t.scores {
            let e = sums.entry(s.scorer.clone()).or_default();
            e.0 += s.score;
            e.1 += 1;
        }
    }
    sums.into_iter()
        .map(|(k, (sum, n))| (k, sum / f64::from(n.max(1))))
        .collect()
}

/// The first reason a case failed for.
fn reason(c: &pb::CaseResult) -> String {
    if !c.error.is_empty() {
        return c.error.clone();
    }
    for t in &c.tries {
        if let Some(s) = t.scores.iter().find(|s| !s.passed) {
            return format!("{}: {}", s.scorer, s.reason);
        }
        if !t.error.is_empty() {
            return t.error.clone();
        }
    }
    String::new()
}

/// Compares `candidate` with `baseline` (both with their cases) at
/// significance `alpha`.
pub fn compare(
    baseline: pb::Experiment,
    candidate: pb::Experiment,
    alpha: f64,
) -> pb::ExperimentComparison {
    use pb::CaseChangeKind as K;
    let before: HashMap<&str, &pb::CaseResult> = baseline
        .cases
        .iter()
        .map(|c| (c.case_id.as_str(), c))
        .collect();
    let mut changes = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for c in &candidate.cases {
        seen.insert(c.case_id.as_str());
        let (cp, cn) = counts(c);
        let rate_c = f64::from(cp) / f64::from(cn);
        let Some(b) = before.get(c.case_id.as_str()) else {
            changes.push(pb::CaseChange {
                case_id: c.case_id.clone(),
                kind: K::Added as i32,
                candidate_pass_rate: rate_c,
                p_value: 1.0,
                reason: reason(c),
                tries: format!("–, {cp}/{cn}"),
                ..Default::default()
            });
            continue;
        };
        let (bp, bn) = counts(b);
        let rate_b = f64::from(bp) / f64::from(bn);
        let single = bn < 2 && cn < 2;
        let (kind, p) = if (rate_c - rate_b).abs() < 1e-12 {
            (K::Same, 1.0)
        } else if rate_c < rate_b {
            let p = fisher(bp, bn, cp, cn);
            if single || p <= alpha {
                (K::Regressed, p)
            } else {
                (K::WorseWithinNoise, p)
            }
        } else {
            let p = fisher(cp, cn, bp, bn);
            if single || p <= alpha {
                (K::Improved, p)
            } else {
                (K::BetterWithinNoise, p)
            }
        };
        let (mb, mc) = (means(b), means(c));
        let score_deltas = mc
            .iter()
            .filter_map(|(k, v)| mb.get(k).map(|w| (k.clone(), v - w)))
            .collect();
        changes.push(pb::CaseChange {
            case_id: c.case_id.clone(),
            kind: kind as i32,
            baseline_pass_rate: rate_b,
            candidate_pass_rate: rate_c,
            p_value: p,
            score_deltas,
            reason: if cp < cn { reason(c) } else { String::new() },
            tries: format!("{bp}/{bn} → {cp}/{cn}"),
        });
    }
    let cut_short = candidate.status != pb::ExperimentStatus::Completed as i32;
    for b in &baseline.cases {
        if !seen.contains(b.case_id.as_str()) {
            let (bp, bn) = counts(b);
            // Not run because the candidate did not complete: not a case
            // taken out of the dataset.
            let (kind, reason) = if cut_short {
                (
                    K::Regressed,
                    "not run: the candidate experiment did not complete".to_owned(),
                )
            } else {
                (K::Removed, String::new())
            };
            changes.push(pb::CaseChange {
                case_id: b.case_id.clone(),
                kind: kind as i32,
                baseline_pass_rate: f64::from(bp) / f64::from(bn),
                p_value: 1.0,
                reason,
                tries: format!("{bp}/{bn}, –"),
                ..Default::default()
            });
        }
    }
    // Regressions first, then within noise, then the rest; in the
    // dataset's order within each.
    let rank = |k: i32| match K::try_from(k) {
        Ok(K::Regressed) => 0,
        Ok(K::WorseWithinNoise) => 1,
        _ => 2,
    };
    changes.sort_by_key(|c| rank(c.kind));
    let regressed = changes.iter().any(|c| c.kind == K::Regressed as i32);
    pb::ExperimentComparison {
        baseline: Some(baseline),
        candidate: Some(candidate),
        cases: changes,
        regressed,
        alpha,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(id: &str, tries: &[bool]) -> pb::CaseResult {
        pb::CaseResult {
            case_id: id.into(),
            tries: tries
                .iter()
                .map(|&passed| pb::CaseTry {
                    passed,
                    scores: vec![pb::Score {
                        scorer: "exact".into(),
                        score: if passed { 1.0 } else { 0.0 },
                        passed,
                        reason: if passed {
                            "ok".into()
                        } else {
                            "expected a, got b".into()
                        },
                        agreement: 1.0,
                    }],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn exp(cases: Vec<pb::CaseResult>) -> pb::Experiment {
        pb::Experiment {
            cases,
            status: pb::ExperimentStatus::Completed as i32,
            ..Default::default()
        }
    }

    #[test]
    fn a_flip_without_repeats_regresses_and_a_flaky_case_does_not() {
        let c = compare(
            exp(vec![
                case("a", &[true]),
                case("b", &[true]),
                case("gone", &[true]),
            ]),
            exp(vec![
                case("a", &[true]),
                case("b", &[false]),
                case("new", &[false]),
            ]),
            0.05,
        );
        assert!(c.regressed);
        assert_eq!(c.cases[0].case_id, "b");
        assert_eq!(c.cases[0].kind, pb::CaseChangeKind::Regressed as i32);
        assert_eq!(c.cases[0].reason, "exact: expected a, got b");
        assert_eq!(c.cases[0].score_deltas["exact"], -1.0);
        let kinds: Vec<(String, i32)> = c
            .cases
            .iter()
            .map(|c| (c.case_id.clone(), c.kind))
            .collect();
        assert!(kinds.contains(&("gone".into(), pb::CaseChangeKind::Removed as i32)));
        assert!(kinds.contains(&("new".into(), pb::CaseChangeKind::Added as i32)));

        // 4/5 → 3/5: within noise; 5/5 → 0/5: beyond it.
        let c = compare(
            exp(vec![
                case("flaky", &[true, true, true, true, false]),
                case("broke", &[true; 5]),
            ]),
            exp(vec![
                case("flaky", &[true, false, true, true, false]),
                case("broke", &[false; 5]),
            ]),
            0.05,
        );
        assert!(c.regressed);
        assert_eq!(c.cases[0].case_id, "broke");
        assert_eq!(c.cases[1].kind, pb::CaseChangeKind::WorseWithinNoise as i32);
        let c = compare(
            exp(vec![case("flaky", &[true, true, true, true, false])]),
            exp(vec![case("flaky", &[true, false, true, true, false])]),
            0.05,
        );
        assert!(!c.regressed, "a flaky case does not fail a build");
        // One try against many: Fisher decides (1/1 → 19/20 is noise).
        let mut many = vec![true; 19];
        many.push(false);
        let c = compare(
            exp(vec![case("a", &[true])]),
            exp(vec![case("a", &many)]),
            0.05,
        );
        assert_eq!(c.cases[0].kind, pb::CaseChangeKind::WorseWithinNoise as i32);
        // A cancelled candidate's cases not run regressed.
        let mut cut = exp(vec![case("a", &[true])]);
        cut.status = pb::ExperimentStatus::Cancelled as i32;
        let c = compare(exp(vec![case("a", &[true]), case("b", &[true])]), cut, 0.05);
        assert!(c.regressed);
        assert_eq!(c.cases[0].case_id, "b");
        assert_eq!(
            c.cases[0].reason,
            "not run: the candidate experiment did not complete"
        );
        // A try that could not run counts as failed.
        let mut errored = case("a", &[true]);
        errored.errored_tries = 1;
        let c = compare(
            exp(vec![case("a", &[true, true])]),
            exp(vec![errored]),
            0.05,
        );
        assert_eq!(c.cases[0].tries, "2/2 → 1/2");
    }
}
