//! Evaluations: datasets of cases ([`dataset`], [`spec`]), scorers
//! ([`score`], [`trajectory`]) and two experiments compared ([`compare`],
//! with [`stats`]); experiments run and are kept by `app::experiment`.
//!
//! An experiment (`app::experiment`) runs each case of a dataset as an
//! ordinary run labelled with it (`GetRun.experiment_id`), `repeat` times,
//! at most `concurrency` runs at once, and scores each run. A case with
//! `tools: recorded` runs its model live and answers each call of a tool
//! outside Baton from a recording — the recording's fourth use, after
//! resume, fork and replay, through the same reader and matcher
//! (`run::recording::rerun::Rerun::tools`).

pub mod compare;
pub mod dataset;
pub mod score;
pub mod spec;
pub mod stats;
pub mod trajectory;

use baton_proto::v1 as pb;

/// Fills a case's pass rate, pass@k and interval from its tries.
/// A try that could not run (`errored_tries`) counts as one that failed.
pub fn tally_case(c: &mut pb::CaseResult) {
    let n = c.tries.len() as u32 + c.errored_tries;
    let passed = c.tries.iter().filter(|t| t.passed).count() as u32;
    c.passed = n > 0 && passed == n;
    c.pass_at_k = passed > 0;
    c.pass_rate = if n == 0 {
        0.0
    } else {
        f64::from(passed) / f64::from(n)
    };
    let (lo, hi) = stats::wilson(passed, n);
    c.pass_rate_low = lo;
    c.pass_rate_high = hi;
}

/// An experiment's totals over its cases scored so far.
pub fn totals(cases: &[pb::CaseResult], duration: std::time::Duration) -> pb::ExperimentTotals {
    let mut t = pb::ExperimentTotals {
        cases: cases.len() as u32,
        ..Default::default()
    };
    let mut at_k = 0;
    for c in cases {
        if !c.error.is_empty() && c.tries.is_empty() {
            t.errored += 1;
        } else if c.passed {
            t.passed += 1;
        } else {
            t.failed += 1;
        }
        if c.pass_at_k {
            at_k += 1;
        }
        t.tries += c.tries.len() as u32 + c.errored_tries;
        t.tries_passed += c.tries.iter().filter(|x| x.passed).count() as u32;
    }
    t.pass_rate = if t.tries == 0 {
        0.0
    } else {
        f64::from(t.tries_passed) / f64::from(t.tries)
    };
    let (lo, hi) = stats::wilson(t.tries_passed, t.tries);
    t.pass_rate_low = lo;
    t.pass_rate_high = hi;
    if t.cases > 0 {
        t.pass_at_k = f64::from(at_k) / f64::from(t.cases);
        t.pass_hat_k = f64::from(t.passed) / f64::from(t.cases);
    }
    t.duration = Some(duration.into());
    t
}
