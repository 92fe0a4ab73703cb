//! Pieces of the CLI's lines: a fallback, a wait for a rate limit, a
//! spent budget and an approval to raise one in one line each; a progress
//! bar; a text cut to fit a line.

use baton_client::pb;

/// `a:m failed (unavailable): b:m answers instead[; the text above is
/// discarded]`.
pub fn fallback(f: &pb::ModelFallback) -> String {
    format!(
        "{} failed ({}): {} answers instead{}",
        f.from_model,
        f.reason,
        f.to_model,
        if f.discarded_text {
            "; the text above is discarded"
        } else {
            ""
        }
    )
}

/// `waiting for p's rate limit, 1.2 s (3 ahead)`.
pub fn waiting(w: &pb::RateLimitWait) -> String {
    format!(
        "waiting for {}'s rate limit, {:.1} s{}",
        w.provider,
        w.wait
            .map_or(0.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9),
        if w.ahead > 0 {
            format!(" ({} ahead)", w.ahead)
        } else {
            String::new()
        }
    )
}

/// `run of chat (trace …)`, or `run of chat in conversation c (2 earlier
/// messages; trace …)`.
pub fn started(r: &pb::RunStarted, trace_id: &str) -> String {
    if r.conversation_id.is_empty() {
        format!("run of {} (trace {trace_id})", r.target)
    } else {
        format!(
            "run of {} in conversation {} ({} earlier messages; trace {trace_id})",
            r.target, r.conversation_id, r.conversation_messages
        )
    }
}

/// `folded 12 earlier messages (window, over max_messages); 8 kept`.
pub fn compacted(h: &pb::HistoryCompacted) -> String {
    format!(
        "{} {} earlier messages ({}, over {}); {} kept",
        if h.mode == "summarize" {
            "summarized"
        } else {
            "folded"
        },
        h.folded,
        h.mode,
        h.reason,
        h.kept
    )
}

/// Short enough for a line: what is spent of what, and what the agent
/// does (the whole message is in the event): `budget spent (run):
/// 380/380 tokens → asks for more`.
pub fn spent(b: &pb::BudgetExhausted) -> String {
    let mut spent = Vec::new();
    if b.tokens_limit > 0 {
        spent.push(format!("{}/{} tokens", b.tokens_spent, b.tokens_limit));
    }
    if b.cost_limit_nanos > 0 {
        spent.push(format!(
            "{}/{} {}",
            crate::out::money(b.cost_spent_nanos),
            crate::out::money(b.cost_limit_nanos),
            b.currency
        ));
    }
    format!(
        "budget spent ({}): {}{}",
        b.budget,
        spent.join(", "),
        match b.action.as_str() {
            "finish" => " → one last answer, without tools",
            "ask" => " → asks for more",
            _ => "",
        }
    )
}

/// An approval to raise a budget (tool `raise_budget`), said plainly:
/// `raise budget run by 500 tokens (480 of 500 spent)`.
pub fn raise(tool: &str, arguments: &str) -> Option<String> {
    if tool != "raise_budget" {
        return None;
    }
    let a: serde_json::Value = serde_json::from_str(arguments).ok()?;
    let mut parts = Vec::new();
    if let Some(t) = a.get("tokens") {
        parts.push(format!(
            "{} tokens ({} of {} spent)",
            t["more"], t["spent"], t["limit"]
        ));
    }
    if let Some(c) = a.get("cost") {
        let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        parts.push(format!(
            "{} {} ({} of {} spent)",
            s(&c["more"]),
            s(&c["currency"]),
            s(&c["spent"]),
            s(&c["limit"])
        ));
    }
    Some(format!(
        "raise budget {} by {}",
        a["budget"].as_str().unwrap_or("?"),
        parts.join(" and ")
    ))
}

/// A progress bar: `[#####...............]  25%`.
pub fn bar(percent: u32) -> String {
    let filled = (percent.min(100) / 5) as usize;
    format!(
        "[{}{}] {percent:>3}%",
        "#".repeat(filled),
        ".".repeat(20 - filled)
    )
}

/// Text for one line of the tree view: whitespace collapsed, at most 160
/// characters (`--json` keeps everything).
pub fn short(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(160) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}
