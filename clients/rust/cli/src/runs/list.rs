//! How `baton runs list` and `baton runs get` show runs to a person: each
//! run on two lines fitting the terminal (id, status and target; then its
//! trace id, kind, events and start), one line a run into a pipe; whether
//! a running run waits for a person, as the server says it.

use baton_client::pb;
use serde_json::{Value, json};

use crate::text::{Wrap, cols};

pub(super) fn time(t: &Option<baton_client::wkt::Timestamp>) -> String {
    t.map(|t| t.to_string()).unwrap_or_default()
}

/// `2026-11-26 15:48:02` (UTC), from a timestamp.
pub(crate) fn date(t: &Option<baton_client::wkt::Timestamp>) -> String {
    time(t).get(..19).unwrap_or_default().replace('T', " ")
}

/// `15:48:02` (UTC): a time of today.
pub(super) fn clock(t: &Option<baton_client::wkt::Timestamp>) -> String {
    date(t).get(11..).unwrap_or_default().to_owned()
}

/// What a running run waits for, as the server says it (`waiting_for`):
/// `an approval` or `an answer`.
pub(super) fn waits_for(waiting_for: &[String]) -> Option<&'static str> {
    if waiting_for.iter().any(|w| w == "approval") {
        Some("an approval")
    } else if waiting_for.iter().any(|w| w == "input") {
        Some("an answer")
    } else {
        None
    }
}

/// The status shown: `waiting` for a run waiting for a person.
fn shown_status(status: &str, waits: Option<&str>) -> String {
    match waits {
        Some(_) => "waiting".into(),
        None => status.into(),
    }
}

/// The run a fork was forked from, or a replay replays: `fork of run …ID
/// at its seq N`, `replay of run …ID` (the id's last 8 characters, as
/// `runs list` shows ids that fit).
fn origin(forked_from: &Option<pb::RunOrigin>, replay_of: &str, short: bool) -> Option<String> {
    let id = |id: &str| {
        let tail = id.len().saturating_sub(8);
        match short {
            true => format!("…{}", id.get(tail..).unwrap_or(id)),
            false => id.to_owned(),
        }
    };
    if let Some(from) = forked_from {
        Some(format!(
            "fork of run {} at its seq {}{}",
            id(&from.run_id),
            from.seq,
            if from.edited { ", edited" } else { "" }
        ))
    } else if !replay_of.is_empty() {
        Some(format!("replay of run {}", id(replay_of)))
    } else {
        None
    }
}

/// `conversation ID` after `lead`, for a run in one; nothing else.
fn in_conversation(id: &str, lead: &str) -> String {
    if id.is_empty() {
        String::new()
    } else {
        format!("{lead}conversation {id}")
    }
}

/// What a run spent, for people: `in 2107 · out 513 tokens · 3 model
/// calls · 0.0091 USD` (`1 call unpriced` when a model had no price; no
/// cost when none had one). `None` before its first model call.
pub fn usage_text(u: Option<&pb::Usage>) -> Option<String> {
    let u = u.filter(|u| u.model_calls > 0 || u.tool_calls > 0)?;
    let mut parts = vec![format!(
        "in {} · out {} tokens",
        u.input_tokens, u.output_tokens
    )];
    if u.cached_input_tokens > 0 {
        parts.push(format!("{} cached", u.cached_input_tokens));
    }
    let plural = |n: u64, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
    parts.push(plural(u.model_calls, "model call"));
    // Priced when a call had a price (a run stored before prices has no
    // currency, and no cost to show).
    let priced = !u.currency.is_empty();
    if priced {
        parts.push(format!(
            "{} {}",
            crate::out::money(u.cost_nanos),
            u.currency
        ));
    }
    if priced && u.unpriced_model_calls > 0 {
        parts.push(format!(
            "{} unpriced",
            plural(u.unpriced_model_calls, "call")
        ));
    }
    Some(parts.join(" · "))
}

/// A usage as JSON (camelCase, as events are).
fn usage_json(value: &mut Value, u: Option<&pb::Usage>) {
    if let Some(u) = u {
        value["usage"] = json!({
            "inputTokens": u.input_tokens,
            "outputTokens": u.output_tokens,
            "cachedInputTokens": u.cached_input_tokens,
            "modelCalls": u.model_calls,
            "toolCalls": u.tool_calls,
            "costNanos": u.cost_nanos,
            "currency": u.currency,
            "unpricedModelCalls": u.unpriced_model_calls,
        });
    }
}

/// The JSON of `forked_from` and `replay_of`, as events name them.
fn origin_json(value: &mut Value, forked_from: &Option<pb::RunOrigin>, replay_of: &str) {
    if let Some(from) = forked_from {
        value["forkedFrom"] = json!({"runId": from.run_id, "seq": from.seq, "edited": from.edited});
    }
    if !replay_of.is_empty() {
        value["replayOf"] = json!(replay_of);
    }
}

/// `baton runs list --json`: one run (camelCase, as events are).
pub(super) fn summary_json(r: &pb::RunSummary, status: &str, waits: Option<&str>) -> Value {
    let mut value = json!({
        "runId": r.run_id,
        "traceId": r.trace_id,
        "kind": r.kind().as_str_name(),
        "target": r.target,
        "status": status,
        "waitingFor": waits,
        "startedAt": time(&r.started_at),
        "endedAt": time(&r.ended_at),
        "lastSeq": r.last_seq,
        "detached": r.detached,
    });
    if !r.conversation_id.is_empty() {
        value["conversationId"] = json!(r.conversation_id);
    }
    origin_json(&mut value, &r.forked_from, &r.replay_of);
    usage_json(&mut value, r.usage.as_ref());
    value
}

/// `baton runs get --json`.
pub(super) fn get_json(r: &pb::GetRunResponse, status: &str) -> Value {
    let mut value = json!({
        "runId": r.run_id,
        "traceId": r.trace_id,
        "kind": r.kind().as_str_name(),
        "target": r.target,
        "status": status,
        "startedAt": time(&r.started_at),
        "endedAt": time(&r.ended_at),
        "output": r.output,
        "runContextJson": r.run_context_json,
        "errorCode": r.error_code,
        "errorMessage": r.error_message,
        "lastSeq": r.last_seq,
    });
    if !r.conversation_id.is_empty() {
        value["conversationId"] = json!(r.conversation_id);
    }
    origin_json(&mut value, &r.forked_from, &r.replay_of);
    usage_json(&mut value, r.usage.as_ref());
    value
}

/// The header line.
pub(super) fn header(width: Option<usize>) -> String {
    match width {
        Some(_) => format!("{:<36}  {:<9}  TARGET", "RUN", "STATUS"),
        None => format!(
            "{:<36}  {:<9}  {:<8}  {:<20}  {:>6}  {:<19}  TRACE",
            "RUN", "STATUS", "KIND", "TARGET", "EVENTS", "STARTED"
        ),
    }
}

fn kind(r: &pb::RunSummary) -> String {
    r.kind()
        .as_str_name()
        .trim_start_matches("RUN_KIND_")
        .to_lowercase()
}

/// One run: on a terminal of `width` columns two lines (the second
/// wrapped), into a pipe one line with every column.
pub(super) fn row(
    r: &pb::RunSummary,
    status: &str,
    waits: Option<&str>,
    started: &str,
    width: Option<usize>,
) -> String {
    let status = shown_status(status, waits);
    let Some(width) = width else {
        return format!(
            "{:<36}  {:<9}  {:<8}  {:<20}  {:>6}  {:<19}  {}{}",
            r.run_id,
            status,
            kind(r),
            r.target,
            r.last_seq,
            started,
            r.trace_id,
            match (r.detached, origin(&r.forked_from, &r.replay_of, false)) {
                (_, Some(origin)) if r.detached => format!("  detached, {origin}"),
                (_, Some(origin)) => format!("  {origin}"),
                (true, None) => "  detached".into(),
                (false, None) => String::new(),
            } + &in_conversation(&r.conversation_id, "  ")
        );
    };
    let mut first = format!("{:<36}  {:<9}  {}", r.run_id, status, r.target);
    let mut details = vec![];
    if cols(&first) > width {
        // The target moves to the details.
        first = format!("{:<36}  {status}", r.run_id);
        details.push(r.target.clone());
    }
    details.extend([
        format!("trace {}", r.trace_id),
        kind(r),
        format!("{} events", r.last_seq),
        format!("started {started}"),
    ]);
    if r.detached {
        details.push("detached".into());
    }
    details.extend(origin(&r.forked_from, &r.replay_of, true));
    if !r.conversation_id.is_empty() {
        details.push(in_conversation(&r.conversation_id, ""));
    }
    details.extend(usage_text(r.usage.as_ref()));
    if let Some(w) = waits {
        details.push(format!("waits for {w}"));
    }
    let mut out = format!("{first}\n  ");
    let mut wrap = Wrap::new(2, "  ".into(), Some(width));
    wrap.push(&details.join(", "), &mut out);
    out
}

/// `baton runs get`'s view: what the run is, then its answer whole.
pub(super) fn get(
    r: &pb::GetRunResponse,
    status: &str,
    waits: Option<&str>,
    width: Option<usize>,
) -> String {
    let status = match waits {
        Some(w) => format!("{status}, waiting for {w} (baton runs watch {})", r.run_id),
        None => status.to_owned(),
    };
    let ended = date(&r.ended_at);
    let mut lines = vec![
        ("run", r.run_id.clone()),
        ("status", status),
        (
            "target",
            format!(
                "{} ({})",
                r.target,
                r.kind()
                    .as_str_name()
                    .trim_start_matches("RUN_KIND_")
                    .to_lowercase()
            ),
        ),
        ("trace", r.trace_id.clone()),
        ("started", format!("{} UTC", date(&r.started_at))),
    ];
    if let Some(origin) = origin(&r.forked_from, &r.replay_of, false) {
        lines.push(("from", origin));
    }
    if !r.conversation_id.is_empty() {
        lines.push(("in", in_conversation(&r.conversation_id, "")));
    }
    if !ended.is_empty() {
        lines.push(("ended", format!("{ended} UTC")));
    }
    lines.push(("events", r.last_seq.to_string()));
    if let Some(usage) = usage_text(r.usage.as_ref()) {
        lines.push(("usage", usage));
    }
    if !r.error_message.is_empty() || r.error_code != 0 {
        lines.push(("error", format!("{}: {}", r.error_code, r.error_message)));
    }
    if !r.run_context_json.is_empty() && r.run_context_json != "{}" {
        lines.push(("context", r.run_context_json.clone()));
    }
    if !r.output.is_empty() {
        lines.push(("output", r.output.clone()));
    }
    let mut out = String::new();
    for (i, (name, value)) in lines.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let head = format!("{name:<8} ");
        out.push_str(&head);
        let mut wrap = Wrap::new(cols(&head), " ".repeat(9), width);
        wrap.push(value.trim_end(), &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usage_reads_with_its_cost_and_never_an_invented_one() {
        assert_eq!(usage_text(None), None);
        assert_eq!(usage_text(Some(&pb::Usage::default())), None, "nothing yet");
        let mut u = pb::Usage {
            input_tokens: 487,
            output_tokens: 139,
            model_calls: 5,
            tool_calls: 4,
            cost_nanos: 1_972_950,
            currency: "USD".into(),
            unpriced_model_calls: 1,
            ..Default::default()
        };
        assert_eq!(
            usage_text(Some(&u)).as_deref(),
            Some("in 487 · out 139 tokens · 5 model calls · 0.0020 USD · 1 call unpriced")
        );
        u.unpriced_model_calls = 5;
        u.cost_nanos = 0;
        u.currency.clear();
        assert_eq!(
            usage_text(Some(&u)).as_deref(),
            Some("in 487 · out 139 tokens · 5 model calls"),
            "no price, no cost"
        );
        assert_eq!(crate::out::money(35_000), "0.000035");
        assert_eq!(crate::out::money(0), "0.0000");
        assert_eq!(crate::out::money(123_456_000_000), "123.46");
    }
}
