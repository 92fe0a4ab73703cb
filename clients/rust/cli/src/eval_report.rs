//! What `baton eval`'s reports say of a case and a change, and the same
//! as JUnit XML (what CI systems show): an experiment (a test case a case,
//! a failure a case that did not pass) and a comparison (a failure a case
//! that regressed beyond noise).

use baton_client::pb;
use serde_json::json;

/// The first reason a case failed for.
pub(crate) fn reason(c: &pb::CaseResult) -> String {
    if !c.error.is_empty() {
        return c.error.clone();
    }
    for t in &c.tries {
        if let Some(s) = t.scores.iter().find(|s| !s.passed) {
            return format!("{}: {}", s.scorer, s.reason);
        }
        if !t.error.is_empty() {
            return format!("the run {}: {}", t.status, t.error);
        }
    }
    String::new()
}

/// A change's kind, as the comparison says it.
pub(crate) fn kind(k: i32) -> &'static str {
    match pb::CaseChangeKind::try_from(k) {
        Ok(pb::CaseChangeKind::Regressed) => "regressed",
        Ok(pb::CaseChangeKind::WorseWithinNoise) => "worse (noise)",
        Ok(pb::CaseChangeKind::Same) => "same",
        Ok(pb::CaseChangeKind::BetterWithinNoise) => "better (noise)",
        Ok(pb::CaseChangeKind::Improved) => "improved",
        Ok(pb::CaseChangeKind::Added) => "added",
        Ok(pb::CaseChangeKind::Removed) => "removed",
        _ => "?",
    }
}

/// `s` escaped for XML text and attributes.
pub(crate) fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 does not allow.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => {}
            c => out.push(c),
        }
    }
    out
}

/// A duration in seconds.
pub(crate) fn seconds(d: &Option<baton_client::wkt::Duration>) -> f64 {
    d.as_ref()
        .map_or(0.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9)
}

/// An experiment as JUnit XML: a test case a case, a failure a case that
/// did not pass.
pub(crate) fn junit_of_experiment(e: &pb::Experiment) -> String {
    let t = e.totals.unwrap_or_default();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    s.push_str(&format!(
        "<testsuites name=\"baton eval\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{:.3}\">\n",
        t.cases, t.failed, t.errored, seconds(&t.duration)
    ));
    s.push_str(&format!(
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{:.3}\">\n",
        xml(&e.name),
        t.cases,
        t.failed,
        t.errored,
        seconds(&t.duration)
    ));
    for c in &e.cases {
        let time: f64 = c.tries.iter().map(|t| seconds(&t.duration)).sum();
        s.push_str(&format!(
            "    <testcase classname=\"{}\" name=\"{}\" time=\"{time:.3}\"",
            xml(&e.dataset_name),
            xml(&c.case_id)
        ));
        if c.passed {
            s.push_str("/>\n");
            continue;
        }
        let tag = if c.tries.is_empty() {
            "error"
        } else {
            "failure"
        };
        s.push_str(&format!(
            ">\n      <{tag} message=\"{}\">{}</{tag}>\n    </testcase>\n",
            xml(&reason(c)),
            xml(&json!({"run_ids": c.tries.iter().map(|t| &t.run_id).collect::<Vec<_>>(), "pass_rate": c.pass_rate}).to_string())
        ));
    }
    s.push_str("  </testsuite>\n</testsuites>\n");
    s
}

/// A comparison as JUnit XML: a regression beyond noise is a failure; a
/// case still failing or worse within noise passes with what it says in
/// `system-out`.
pub(crate) fn junit_of_comparison(c: &pb::ExperimentComparison) -> String {
    let regressed = c
        .cases
        .iter()
        .filter(|x| x.kind == pb::CaseChangeKind::Regressed as i32)
        .count();
    let name = |e: &Option<pb::Experiment>| e.as_ref().map(|e| e.name.clone()).unwrap_or_default();
    let suite = format!("{} → {}", name(&c.baseline), name(&c.candidate));
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    s.push_str(&format!(
        "<testsuites name=\"baton eval compare\" tests=\"{}\" failures=\"{regressed}\">\n",
        c.cases.len()
    ));
    s.push_str(&format!(
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{regressed}\">\n",
        xml(&suite),
        c.cases.len()
    ));
    for x in &c.cases {
        s.push_str(&format!(
            "    <testcase classname=\"{}\" name=\"{}\"",
            xml(&suite),
            xml(&x.case_id)
        ));
        let said = format!("{}: {} (p={:.3})", kind(x.kind), x.tries, x.p_value);
        if x.kind == pb::CaseChangeKind::Regressed as i32 {
            s.push_str(&format!(
                ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>\n",
                xml(&format!("regressed: {}", x.tries)),
                xml(&format!("{said}\n{}", x.reason))
            ));
        } else {
            s.push_str(&format!(
                ">\n      <system-out>{}</system-out>\n    </testcase>\n",
                xml(&said)
            ));
        }
    }
    s.push_str("  </testsuite>\n</testsuites>\n");
    s
}
