//! Rule (j), conversations: once every run ended, each client's
//! conversation (its `chat` runs') must be the concatenation of its runs'
//! turns, once each and in order — every run listed once; each run's
//! messages together, in the order of the runs; a completed run's pair a
//! user message and the answer that names exactly the user messages
//! before it (so no turn was lost, doubled or interleaved before it was
//! answered) — and every chat run that entered it and ended is in it,
//! listed as it ended (completed, failed or cancelled), a run that did not
//! complete with its messages marked.
//! Compaction folds the oldest runs away whole: what is kept must be the
//! runs' tail, the folded count their messages, and an answer must name at
//! least the messages kept before it.

use std::collections::HashMap;

use baton_client::{OrchestratorClient, pb};

use super::{items::conversation_of, summary::Violation};

/// What the check found, for the summary.
#[derive(Debug, Default)]
pub struct Found {
    /// Conversations read back.
    pub conversations: usize,
    /// Their messages.
    pub messages: usize,
}

/// Every message of `id`, from the first replica that answers.
async fn read(clients: &[OrchestratorClient], id: &str) -> Result<pb::Conversation, String> {
    let mut last = String::new();
    for client in clients {
        let mut whole: Option<pb::Conversation> = None;
        let mut token = String::new();
        let read = loop {
            match client.get_conversation(id, 1000, &token, 0).await {
                Ok(page) => {
                    token.clone_from(&page.next_page_token);
                    match &mut whole {
                        Some(w) => w.messages.extend(page.messages),
                        None => whole = Some(page),
                    }
                    if token.is_empty() {
                        break Ok(());
                    }
                }
                Err(e) => break Err(e.to_string()),
            }
        };
        match read {
            Ok(()) => return whole.ok_or_else(|| "no page".to_owned()),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// How a chat run whose log is `log` ended, when it entered a
/// conversation (its `RunStarted` names one) and has ended.
pub fn ended_in(log: &[pb::RunEvent]) -> Option<pb::RunStatus> {
    use pb::run_event::Payload;
    let entered = log.iter().any(
        |e| matches!(&e.payload, Some(Payload::RunStarted(s)) if !s.conversation_id.is_empty()),
    );
    if !entered {
        return None;
    }
    log.iter().rev().find_map(|e| match &e.payload {
        Some(Payload::RunCompleted(_)) => Some(pb::RunStatus::Completed),
        Some(Payload::RunFailed(_)) => Some(pb::RunStatus::Failed),
        Some(Payload::RunCancelled(_)) => Some(pb::RunStatus::Cancelled),
        _ => None,
    })
}

/// Checks the conversations of `clients_n` clients against the chat runs
/// that entered them and ended (`ended`, with how).
pub async fn check(
    clients: &[OrchestratorClient],
    clients_n: usize,
    ended: &HashMap<String, pb::RunStatus>,
    violations: &mut Vec<Violation>,
) -> Found {
    let mut found = Found::default();
    let mut listed: HashMap<String, i32> = HashMap::new();
    for n in 0..clients_n {
        let id = conversation_of(n);
        let c = match read(clients, &id).await {
            Ok(c) => c,
            // A client that never started a chat run has none.
            Err(e) if e.contains("NotFound") || e.contains("no conversation") => continue,
            Err(e) => {
                violations.push(Violation::cluster(
                    "conversation",
                    format!("{id}: cannot be read: {e}"),
                ));
                continue;
            }
        };
        found.conversations += 1;
        found.messages += c.messages.len();
        let mut bad = |why: String| {
            violations.push(Violation::cluster("conversation", format!("{id}: {why}")))
        };
        if !c.running_run_id.is_empty() {
            bad(format!(
                "still held by run {} after every run ended",
                c.running_run_id
            ));
        }
        let mut order: Vec<&str> = Vec::new();
        for r in &c.runs {
            if listed.insert(r.run_id.clone(), r.status).is_some() {
                bad(format!("run {} listed twice", r.run_id));
            }
            if r.messages > 0 {
                order.push(&r.run_id);
            }
        }
        // The messages, grouped by run: in the runs' order, each group whole.
        let mut groups: Vec<(&str, Vec<&pb::ConversationMessage>)> = Vec::new();
        for m in &c.messages {
            match groups.last_mut() {
                Some((run, group)) if *run == m.run_id => group.push(m),
                _ => groups.push((&m.run_id, vec![m])),
            }
        }
        let grouped: Vec<&str> = groups.iter().map(|(r, _)| *r).collect();
        // Compaction (the example `chat` keeps the newest 10 of 20) folds
        // whole runs away, oldest first: what is left is the runs' tail,
        // and the folded count is the messages of the runs before it.
        let kept_from = order.len().saturating_sub(grouped.len());
        if grouped != order[kept_from..] {
            bad(format!(
                "messages by run {grouped:?} are not the tail of the runs' order {order:?} (interleaved or lost)"
            ));
            continue;
        }
        let folded: u32 = c
            .runs
            .iter()
            .filter(|r| r.messages > 0)
            .take(kept_from)
            .map(|r| r.messages)
            .sum();
        if folded != c.folded {
            bad(format!(
                "{} messages folded away, but its first {kept_from} runs added {folded}",
                c.folded
            ));
        }
        let mut earlier: Vec<String> = Vec::new();
        let kept_runs = c.runs.iter().filter(|r| r.messages > 0).skip(kept_from);
        for ((run, group), r) in groups.iter().zip(kept_runs) {
            if group.len() != r.messages as usize {
                bad(format!(
                    "run {run}: {} messages, its entry says {}",
                    group.len(),
                    r.messages
                ));
            }
            let text = |m: &pb::ConversationMessage| {
                m.message
                    .as_ref()
                    .map(|m| (m.role, m.content.clone()))
                    .unwrap_or_default()
            };
            let user = text(group[0]);
            if user.0 != pb::Role::User as i32 {
                bad(format!("run {run}: its first message is not the user's"));
            }
            if r.status == pb::RunStatus::Completed as i32 {
                // The answer names the user messages the run began with:
                // exactly those kept before it, or (folded since) a list
                // that ends with them.
                let head = format!("You said: {}. Before that: ", user.1);
                let answer = group.get(1).map(|m| text(m));
                let named: Option<Vec<String>> = match &answer {
                    Some((role, said)) if *role == pb::Role::Assistant as i32 => {
                        said.strip_prefix(&head).map(|rest| match rest {
                            "(nothing)" => Vec::new(),
                            rest => rest.split(" | ").map(str::to_owned).collect(),
                        })
                    }
                    _ => None,
                };
                let fits = named.as_ref().is_some_and(|named| {
                    if c.folded == 0 {
                        *named == earlier
                    } else {
                        named.ends_with(&earlier)
                    }
                });
                if !fits {
                    bad(format!(
                        "run {run}: answered {answer:?}, which does not name the {} messages before it ({earlier:?})",
                        earlier.len()
                    ));
                }
                if group.len() != 2 {
                    bad(format!(
                        "run {run}: {} messages, a chat turn is 2",
                        group.len()
                    ));
                }
            } else if !group.iter().all(|m| m.interrupted) {
                bad(format!(
                    "run {run} did not complete and its messages are not marked"
                ));
            }
            earlier.push(user.1);
        }
    }
    for (run, status) in ended {
        match listed.get(run) {
            Some(listed) if *listed == *status as i32 => {}
            Some(listed) => violations.push(Violation::run(
                run,
                "conversation",
                format!(
                    "a chat run that ended {status:?} is listed in its conversation as {:?}",
                    pb::RunStatus::try_from(*listed).unwrap_or(pb::RunStatus::Unspecified)
                ),
            )),
            None => violations.push(Violation::run(
                run,
                "conversation",
                format!(
                    "a chat run that ended {status:?} is in no conversation (its turn was lost)"
                ),
            )),
        }
    }
    found
}
