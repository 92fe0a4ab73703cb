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

/// `2 messages`, `1 message`: `n` and `noun`, plural unless `n` is 1.
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    match n.into() {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

/// `waiting for p's rate limit, about 1.2 s (3 ahead)`; the wait only when
/// it is known and at least a tenth of a second (a call queued behind
/// others, or about to go: `waiting for p's rate limit (1 ahead)`).
pub fn waiting(w: &pb::RateLimitWait) -> String {
    let secs = w
        .wait
        .map_or(0.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9);
    format!(
        "waiting for {}'s rate limit{}{}",
        w.provider,
        if secs >= 0.1 {
            format!(", about {secs:.1} s")
        } else {
            String::new()
        },
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
            "run of {} in conversation {} ({}; trace {trace_id})",
            r.target,
            r.conversation_id,
            count(r.conversation_messages, "earlier message")
        )
    }
}

/// `folded 12 earlier messages (window, over max_messages); 8 kept`.
pub fn compacted(h: &pb::HistoryCompacted) -> String {
    format!(
        "{} {} ({}, over {}); {} kept",
        if h.mode == "summarize" {
            "summarized"
        } else {
            "folded"
        },
        count(h.folded, "earlier message"),
        h.mode,
        h.reason,
        h.kept
    )
}

/// Short enough for a line: what is spent of what, and what the agent
/// does (the whole message is in the event): `budget spent (run): 380/380
/// tokens → asks for more`. A budget with some left, too little for the
/// next call (as much as it is asked for, or all of it when the call needs
/// more than it holds), is too small rather than spent: `budget too small
/// (run): the next call needs 401 of 300 tokens`, `budget too small (agent
/// frugal in root): the next call needs 120 of the 85 tokens left (515/600
/// spent)`.
pub fn spent(b: &pb::BudgetExhausted) -> String {
    let tokens = (b.tokens_limit > 0).then_some((b.tokens_spent, b.tokens_limit));
    let cost = (b.cost_limit_nanos > 0).then_some((b.cost_spent_nanos, b.cost_limit_nanos));
    let used_up = [tokens, cost]
        .into_iter()
        .flatten()
        .any(|(spent, limit)| spent >= limit);
    let mut parts = Vec::new();
    if used_up {
        if let Some((spent, limit)) = tokens {
            parts.push(format!("{spent}/{limit} tokens"));
        }
        if let Some((spent, limit)) = cost {
            parts.push(format!(
                "{}/{} {}",
                crate::out::money(spent),
                crate::out::money(limit),
                b.currency
            ));
        }
    } else {
        let (need_tokens, need_cost) = needs(&b.message, &b.currency);
        if let Some((spent, limit)) = tokens {
            let amount = |n: u64| n.to_string();
            parts.push(too_small(need_tokens, spent, limit, &amount, "tokens"));
        }
        if let Some((spent, limit)) = cost {
            let amount = crate::out::money;
            parts.push(too_small(need_cost, spent, limit, &amount, &b.currency));
        }
    }
    format!(
        "budget {} ({}): {}{}",
        if used_up { "spent" } else { "too small" },
        b.budget,
        parts.join("; "),
        match b.action.as_str() {
            "finish" => " → one last answer, without tools",
            "ask" => " → asks for more",
            _ => "",
        }
    )
}

/// What the next call needs of a budget, and what calls in flight hold of
/// it, as the event's message says them (in tokens or billionths).
struct Need {
    needed: u64,
    held: u64,
}

/// `the next call needs 401 of 300 tokens`, or with some spent (or held
/// by calls in flight) `the next call needs 120 of the 85 tokens left
/// (515/600 spent)`; without what the call needs, `515/600 tokens spent,
/// too few left for the next call`. `amount` writes an amount of `unit`.
fn too_small(
    need: Option<Need>,
    spent: u64,
    limit: u64,
    amount: &dyn Fn(u64) -> String,
    unit: &str,
) -> String {
    match need {
        Some(Need { needed, held: 0 }) if spent == 0 => format!(
            "the next call needs {} of {} {unit}",
            amount(needed),
            amount(limit)
        ),
        Some(Need { needed, held }) => {
            let left = limit.saturating_sub(spent).saturating_sub(held);
            let held = if held > 0 {
                format!(", {} held by calls in flight", amount(held))
            } else {
                String::new()
            };
            format!(
                "the next call needs {} of the {} {unit} left ({}/{} spent{held})",
                amount(needed),
                amount(left),
                amount(spent),
                amount(limit)
            )
        }
        None => format!(
            "{}/{} {unit} spent, too few left for the next call",
            amount(spent),
            amount(limit)
        ),
    }
}

/// What the next call needs, of the tokens and of the cost budget, as the
/// event's message says it: `budget run exhausted: 0 of 300 tokens spent[
/// (200 more held by calls in flight)], the next model call needs at least
/// 401[; 0 of 1 USD spent, … at least 0.02]`.
fn needs(message: &str, currency: &str) -> (Option<Need>, Option<Need>) {
    // An amount as the message writes it: tokens, or a decimal of
    // `currency` (billionths here).
    let amount = |text: &str, tokens: bool| -> Option<u64> {
        let text = text.trim();
        if tokens {
            text.parse().ok()
        } else {
            let v: f64 = text.parse().ok()?;
            (v >= 0.0).then(|| (v * 1e9).round() as u64)
        }
    };
    let (mut tokens, mut cost) = (None, None);
    let parts = message.split_once(" exhausted: ").map_or("", |(_, p)| p);
    for part in parts.split("; ") {
        let Some((what, needed)) = part.split_once(", the next model call needs at least ") else {
            continue;
        };
        let is_tokens = what.contains(" tokens spent");
        if !is_tokens && (currency.is_empty() || !what.contains(&format!(" {currency} spent"))) {
            continue;
        }
        let Some(needed) = amount(needed, is_tokens) else {
            continue;
        };
        let held = what
            .split_once(" (")
            .and_then(|(_, h)| h.split_once(" more held"))
            .and_then(|(h, _)| amount(h.trim_end_matches(currency).trim(), is_tokens))
            .unwrap_or(0);
        let need = Some(Need { needed, held });
        if is_tokens {
            tokens = need;
        } else {
            cost = need;
        }
    }
    (tokens, cost)
}

/// An approval to raise a budget (tool `raise_budget`), said plainly:
/// `raise the budget of agent frugal in root by 1000 tokens (515 of 600
/// spent)` (an agent's own budget, or an enclosing agent's: a run's is its
/// caller's cap, which nobody in the run is asked to raise).
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
    let budget = match a["budget"].as_str().unwrap_or("?") {
        "run" => "the run's budget".to_owned(),
        budget => format!("the budget of {budget}"),
    };
    Some(format!("raise {budget} by {}", parts.join(" and ")))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(count(1u32, "message"), "1 message");
        assert_eq!(count(0u32, "message"), "0 messages");
        assert_eq!(count(2u64, "earlier message"), "2 earlier messages");
        let started = pb::RunStarted {
            target: "chat".into(),
            conversation_id: "c".into(),
            conversation_messages: 1,
            ..Default::default()
        };
        assert_eq!(
            super::started(&started, "t"),
            "run of chat in conversation c (1 earlier message; trace t)"
        );
    }

    fn wait(secs: Option<(i64, i32)>, ahead: u32) -> String {
        waiting(&pb::RateLimitWait {
            provider: "p".into(),
            wait: secs.map(|(seconds, nanos)| baton_client::wkt::Duration { seconds, nanos }),
            ahead,
            ..Default::default()
        })
    }

    #[test]
    fn a_wait_is_said_only_when_known_and_above_zero() {
        assert_eq!(
            wait(Some((0, 0)), 1),
            "waiting for p's rate limit (1 ahead)"
        );
        assert_eq!(wait(None, 0), "waiting for p's rate limit");
        assert_eq!(
            wait(Some((1, 200_000_000)), 3),
            "waiting for p's rate limit, about 1.2 s (3 ahead)"
        );
        assert_eq!(
            wait(Some((2, 0)), 0),
            "waiting for p's rate limit, about 2.0 s"
        );
    }

    fn budget(spent: u64, limit: u64, action: &str, message: &str) -> pb::BudgetExhausted {
        pb::BudgetExhausted {
            budget: "run".into(),
            tokens_limit: limit,
            tokens_spent: spent,
            action: action.into(),
            message: message.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_budget_with_some_left_is_too_small_not_spent() {
        let b = budget(
            0,
            300,
            "fail",
            "budget run exhausted: 0 of 300 tokens spent, the next model call needs at least 401",
        );
        assert_eq!(
            spent(&b),
            "budget too small (run): the next call needs 401 of 300 tokens"
        );
        let mut b = budget(
            515,
            600,
            "ask",
            "budget agent frugal in root exhausted: 515 of 600 tokens spent, the next model call needs at least 120",
        );
        b.budget = "agent frugal in root".into();
        assert_eq!(
            spent(&b),
            "budget too small (agent frugal in root): the next call needs 120 of the 85 tokens left (515/600 spent) → asks for more"
        );
        let b = budget(
            0,
            300,
            "fail",
            "budget run exhausted: 0 of 300 tokens spent (200 more held by calls in flight), the next model call needs at least 101",
        );
        assert_eq!(
            spent(&b),
            "budget too small (run): the next call needs 101 of the 100 tokens left (0/300 spent, 200 held by calls in flight)"
        );
        // Without the message: what is spent, and that it is too little.
        assert_eq!(
            spent(&budget(10, 300, "finish", "")),
            "budget too small (run): 10/300 tokens spent, too few left for the next call → one last answer, without tools"
        );
        // Spent: as before.
        assert_eq!(
            spent(&budget(380, 380, "ask", "")),
            "budget spent (run): 380/380 tokens → asks for more"
        );
        // A cost budget.
        let b = pb::BudgetExhausted {
            budget: "run".into(),
            cost_limit_nanos: 50_000_000,
            cost_spent_nanos: 0,
            currency: "USD".into(),
            action: "fail".into(),
            message:
                "budget run exhausted: 0 of 0.05 USD spent, the next model call needs at least 0.07"
                    .into(),
            ..Default::default()
        };
        assert_eq!(
            spent(&b),
            "budget too small (run): the next call needs 0.0700 of 0.0500 USD"
        );
    }

    #[test]
    fn a_raise_names_whose_budget() {
        let args = r#"{"budget": "agent frugal in root", "tokens": {"limit": 600, "spent": 515, "more": 1000}}"#;
        assert_eq!(
            raise("raise_budget", args).as_deref(),
            Some("raise the budget of agent frugal in root by 1000 tokens (515 of 600 spent)")
        );
        assert_eq!(raise("write_context", "{}"), None);
    }
}
