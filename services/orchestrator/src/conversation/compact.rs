//! Compaction: where a long conversation is cut before a run begins
//! ([`plan`]), and the summary request of `summarize` ([`summary_prompt`]).
//!
//! The cut is always at a user message: what is kept starts with a
//! person's message, so an assistant's tool calls are never kept without
//! their results, nor results without their calls (both are folded, or
//! both kept). A summary already there (from an earlier compaction) is
//! folded into the next one.

use baton_proto::v1 as pb;

use super::store::size;

/// The bounds a run's history must fit, the tightest of the server's and
/// the agent's.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Most messages (the new input included).
    pub max_messages: usize,
    /// Most bytes (the new input included).
    pub max_bytes: u64,
    /// Most estimated tokens (the new input included); `None`: no bound.
    pub max_tokens: Option<u64>,
}

/// The estimated tokens of messages (a character count that errs high,
/// as budgets estimate: 3 characters a token, plus 4 a message).
pub fn tokens(messages: &[pb::ConversationMessage], extra_bytes: u64) -> u64 {
    let bytes: u64 = messages.iter().map(size).sum::<u64>() + extra_bytes;
    bytes.div_ceil(3) + 4 * messages.len() as u64
}

/// Which bound a history of `messages` plus an input of `input` bytes is
/// over, if any: `max_messages`, `max_bytes` or `max_tokens`.
pub fn over(messages: &[pb::ConversationMessage], input: u64, b: &Bounds) -> Option<&'static str> {
    if messages.len() + 1 > b.max_messages {
        Some("max_messages")
    } else if messages.iter().map(size).sum::<u64>() + input > b.max_bytes {
        Some("max_bytes")
    } else if b.max_tokens.is_some_and(|t| tokens(messages, input) > t) {
        Some("max_tokens")
    } else {
        None
    }
}

/// How many of the oldest messages to fold so that at most `keep` remain
/// and the rest (with the input) fits `bounds`; the cut moved forward to
/// the next user message. `None` when nothing needs folding.
pub fn plan(
    messages: &[pb::ConversationMessage],
    input: u64,
    bounds: &Bounds,
    keep: usize,
) -> Option<usize> {
    over(messages, input, bounds)?;
    let mut cut = messages.len().saturating_sub(keep);
    loop {
        // To the next user message (or the end: everything folds).
        while cut < messages.len() && !is_user(&messages[cut]) {
            cut += 1;
        }
        // A summary takes one message of the bound's room; counted by
        // leaving one place.
        let rest = &messages[cut..];
        let fits = rest.len() + 2 <= bounds.max_messages
            && rest.iter().map(size).sum::<u64>() + input <= bounds.max_bytes
            && bounds.max_tokens.is_none_or(|t| tokens(rest, input) <= t);
        if fits || cut >= messages.len() {
            return Some(cut);
        }
        cut += 1;
    }
}

fn is_user(m: &pb::ConversationMessage) -> bool {
    !m.summary
        && m.message
            .as_ref()
            .is_some_and(|m| m.role == pb::Role::User as i32)
}

/// The instructions of a summary call.
pub const SUMMARY_INSTRUCTIONS: &str = "You summarize a conversation between a user and an assistant so the assistant can continue it without the messages. Keep every fact, name, number, decision, preference and open question; say which tools were called and what they returned. Answer with the summary only.";

/// The text a summary call is asked to summarize: the folded messages,
/// one per paragraph, tool calls with their arguments and results.
pub fn summary_prompt(folded: &[pb::ConversationMessage]) -> String {
    let mut out = String::new();
    for m in folded {
        let Some(msg) = &m.message else { continue };
        let who = if m.summary {
            "earlier summary"
        } else {
            match pb::Role::try_from(msg.role) {
                Ok(pb::Role::User) => "user",
                Ok(pb::Role::Assistant) => "assistant",
                Ok(pb::Role::Tool) => "tool result",
                _ => "system",
            }
        };
        if !msg.content.is_empty() {
            out.push_str(&format!("{who}: {}\n\n", msg.content));
        }
        for c in &msg.tool_calls {
            out.push_str(&format!(
                "assistant called {}({}) [{}]\n\n",
                c.tool, c.arguments_json, c.call_id
            ));
        }
    }
    out
}

/// The message a summary becomes: a user-role message marked `summary`.
pub fn summary_message(text: &str, run_id: &str) -> pb::ConversationMessage {
    pb::ConversationMessage {
        message: Some(pb::Message {
            role: pb::Role::User as i32,
            content: format!("[Summary of the earlier conversation]\n{text}"),
            ..Default::default()
        }),
        run_id: run_id.to_owned(),
        summary: true,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: pb::Role, text: &str) -> pb::ConversationMessage {
        pb::ConversationMessage {
            message: Some(pb::Message {
                role: role as i32,
                content: text.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn call(id: &str) -> pb::ConversationMessage {
        pb::ConversationMessage {
            message: Some(pb::Message {
                role: pb::Role::Assistant as i32,
                tool_calls: vec![pb::ToolCall {
                    call_id: id.into(),
                    tool: "lookup".into(),
                    arguments_json: "{}".into(),
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn result(id: &str) -> pb::ConversationMessage {
        pb::ConversationMessage {
            message: Some(pb::Message {
                role: pb::Role::Tool as i32,
                content: "42".into(),
                tool_call_id: id.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn bounds(max_messages: usize) -> Bounds {
        Bounds {
            max_messages,
            max_bytes: u64::MAX,
            max_tokens: None,
        }
    }

    /// user, assistant(call), tool, assistant — three times.
    fn turns(n: usize) -> Vec<pb::ConversationMessage> {
        (0..n)
            .flat_map(|i| {
                let id = format!("c{i}");
                [
                    msg(pb::Role::User, "q"),
                    call(&id),
                    result(&id),
                    msg(pb::Role::Assistant, "a"),
                ]
            })
            .collect()
    }

    #[test]
    fn nothing_folds_at_the_bound_and_one_over_folds() {
        let history = turns(2); // 8 messages, plus the input: 9
        assert_eq!(plan(&history, 1, &bounds(9), 4), None);
        assert_eq!(plan(&history, 1, &bounds(8), 4), Some(4));
    }

    #[test]
    fn the_cut_never_separates_a_tool_call_from_its_result() {
        let history = turns(3); // 12
        // Keeping 5 would start at message 7 (a tool result): the cut
        // moves on to the next user message, 8.
        let cut = plan(&history, 1, &bounds(10), 5).expect("folds");
        assert_eq!(cut, 8);
        let kept = &history[cut..];
        for (i, m) in kept.iter().enumerate() {
            let m = m.message.as_ref().expect("a message");
            if m.role == pb::Role::Tool as i32 {
                let asked = kept[..i].iter().any(|k| {
                    k.message
                        .as_ref()
                        .is_some_and(|k| k.tool_calls.iter().any(|c| c.call_id == m.tool_call_id))
                });
                assert!(asked, "a kept result without its call");
            }
        }
    }

    #[test]
    fn bytes_and_tokens_fold_too() {
        let history = vec![
            msg(pb::Role::User, &"x".repeat(100)),
            msg(pb::Role::Assistant, "ok"),
            msg(pb::Role::User, "y"),
            msg(pb::Role::Assistant, "ok"),
        ];
        let b = Bounds {
            max_messages: 100,
            max_bytes: 50,
            max_tokens: None,
        };
        assert_eq!(over(&history, 1, &b), Some("max_bytes"));
        assert_eq!(plan(&history, 1, &b, 100), Some(2));
        let t = Bounds {
            max_messages: 100,
            max_bytes: u64::MAX,
            max_tokens: Some(30),
        };
        assert_eq!(over(&history, 1, &t), Some("max_tokens"));
        assert_eq!(plan(&history, 1, &t, 100), Some(2));
    }

    #[test]
    fn the_prompt_names_calls_and_results() {
        let text = summary_prompt(&turns(1));
        assert!(text.contains("user: q"), "{text}");
        assert!(text.contains("assistant called lookup({}) [c0]"), "{text}");
        assert!(text.contains("tool result: 42"), "{text}");
    }
}
