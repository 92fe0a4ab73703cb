//! `baton conversations list|show|delete`: a tenant's conversations, one
//! conversation's messages, deleting one (its runs' histories with it).
//! Ids are listed whole; `show`, `delete` and `baton chat --conversation`
//! take one whole or a unique start or end of one ([`resolve`]).

use baton_client::{OrchestratorClient, pb};
use clap::{Args, Subcommand};
use serde_json::json;

use crate::run::Target;
use crate::text::{Wrap, cols};

/// `baton conversations …`.
#[derive(Args)]
pub struct ConversationsArgs {
    #[command(subcommand)]
    command: Cmd,
    #[command(flatten)]
    target: Target,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// The caller's conversations, most recently used first.
    #[command(after_help = "Examples:
  baton conversations list
  baton conversations list --json | jq -r .id")]
    List {
        /// Most conversations to show (every page is followed up to it).
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// A conversation's messages, oldest first.
    #[command(after_help = "Examples:
  baton conversations show chat-18ec7f2e878ee034dd188631
  baton conversations show dd188631      # a unique start or end of an id
  baton conversations show ID --last 10")]
    Show {
        /// The conversation: its id, or a unique start or end of one.
        id: String,
        /// Only the newest N messages.
        #[arg(long, value_name = "N")]
        last: Option<u32>,
    },
    /// Delete a conversation, its messages and its runs' histories.
    Delete {
        /// The conversation: its id, or a unique start or end of one.
        id: String,
    },
}

pub async fn run(args: ConversationsArgs) -> anyhow::Result<()> {
    let client = args.target.connect().await?;
    let width = crate::text::terminal_columns();
    match args.command {
        Cmd::List { limit } => {
            let mut token = String::new();
            let mut shown = 0;
            let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
            // On a terminal: a header, and each row cut to fit (its agent
            // and title); into a pipe every row whole.
            let mut header = !args.json && tty;
            let fit = tty.then_some(width.saturating_sub(1));
            while shown < limit {
                let page = client.list_conversations(100, &token).await?;
                let rows = &page.conversations[..page.conversations.len().min(limit - shown)];
                shown += rows.len();
                if args.json {
                    for c in rows {
                        crate::out::outln!("{}", conversation_json(c))?;
                    }
                } else {
                    // Whole ids, padded to the longest of the page.
                    let id_cols = rows.iter().map(|c| cols(&c.id)).max().unwrap_or(0).max(2);
                    if header && !rows.is_empty() {
                        header = false;
                        crate::out::outln!(
                            "{:<id_cols$} {:>5} {:<19} AGENT / TITLE",
                            "ID",
                            "MSGS",
                            "USED (UTC)"
                        )?;
                    }
                    for c in rows {
                        crate::out::outln!("{}", row(c, id_cols, fit))?;
                    }
                }
                if page.next_page_token.is_empty() {
                    break;
                }
                token = page.next_page_token;
            }
            if shown == 0 && !args.json {
                eprintln!("no conversations (start one: baton chat AGENT)");
            }
        }
        Cmd::Show { id, last } => {
            let id = resolve(&client, &id).await?;
            let mut token = String::new();
            let mut first = true;
            loop {
                let c = client
                    .get_conversation(&id, 200, &token, if first { last.unwrap_or(0) } else { 0 })
                    .await?;
                if first && !args.json {
                    // The title is what is cut to fit; the id and the
                    // counts stay whole.
                    let head = format!("conversation {}", c.id);
                    let counts = format!(
                        ": {}, {}",
                        crate::said::count(c.message_count, "message"),
                        crate::said::count(c.runs.len() as u64, "run")
                    );
                    let room = width
                        .saturating_sub(1)
                        .saturating_sub(cols(&head) + cols(&counts) + 3);
                    let title = match flat(&c.title) {
                        t if t.is_empty() => flat(&c.preview),
                        t => t,
                    };
                    let title = if title.is_empty() || room < 4 {
                        String::new()
                    } else {
                        format!(" “{}”", cut(&title, room))
                    };
                    crate::out::outln!("{head}{title}{counts}")?;
                }
                first = false;
                if args.json {
                    for m in &c.messages {
                        crate::out::outln!("{}", message_json(m))?;
                    }
                } else {
                    print_messages(&c.messages, width)?;
                }
                if c.next_page_token.is_empty() || last.is_some() {
                    break;
                }
                token = c.next_page_token;
            }
        }
        Cmd::Delete { id } => {
            let id = resolve(&client, &id).await?;
            let deleted = client.delete_conversation(&id).await?;
            if args.json {
                crate::out::outln!("{}", json!({"id": id, "runsDeleted": deleted.runs_deleted}))?;
            } else {
                crate::out::outln!(
                    "deleted conversation {id} and the histories of {}",
                    crate::said::count(deleted.runs_deleted, "run")
                )?;
            }
        }
    }
    Ok(())
}

/// Most of the caller's conversations (most recently used first) a short
/// id is looked for in.
const MAX_SEARCHED: usize = 10_000;

/// Most matches an ambiguous id's error names.
const MAX_NAMED: usize = 10;

/// The whole id of the caller's conversation that `typed` names: a whole
/// id (as the server knows it), else a unique start or end of one, or its
/// start and end around `…` (`chat-18ec7f2…e878ee034dd1`, as lists once
/// showed them). Ids are case-sensitive. An error naming `typed` when it
/// names none, and the matches when it names several.
pub(crate) async fn resolve(client: &OrchestratorClient, typed: &str) -> anyhow::Result<String> {
    let typed = typed.trim();
    anyhow::ensure!(
        !typed.is_empty(),
        "conversation_id: give a conversation's id, or a unique start or end of one (baton conversations list shows them)"
    );
    match client.get_conversation(typed, 1, "", 0).await {
        Ok(_) => return Ok(typed.to_owned()),
        // Not a whole id (`…` is not a character of one): looked for.
        Err(e)
            if matches!(
                e.code(),
                tonic::Code::NotFound | tonic::Code::InvalidArgument
            ) => {}
        Err(e) => return Err(e.into()),
    }
    let matches = |id: &str| match typed.split_once('…').or_else(|| typed.split_once("...")) {
        Some((head, tail)) => {
            id.len() >= head.len() + tail.len() && id.starts_with(head) && id.ends_with(tail)
        }
        None => id.starts_with(typed) || id.ends_with(typed),
    };
    let mut found: Vec<String> = Vec::new();
    let (mut token, mut searched) = (String::new(), 0);
    loop {
        let page = client.list_conversations(1000, &token).await?;
        searched += page.conversations.len();
        found.extend(
            page.conversations
                .into_iter()
                .map(|c| c.id)
                .filter(|id| matches(id)),
        );
        if page.next_page_token.is_empty() || searched >= MAX_SEARCHED || found.len() > 1 {
            break;
        }
        token = page.next_page_token;
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] if searched == 0 => anyhow::bail!(
            "conversation_id: no conversation is {typed:?}: you have none (start one: baton chat AGENT)"
        ),
        [] => anyhow::bail!(
            "conversation_id: none of your conversations is {typed:?} or starts or ends with it (of the {searched} most recently used; baton conversations list shows them)"
        ),
        several => {
            let mut named = several
                .iter()
                .take(MAX_NAMED)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ");
            if several.len() > MAX_NAMED {
                named.push_str(&format!(" and {} more", several.len() - MAX_NAMED));
            }
            anyhow::bail!(
                "conversation_id: {typed:?} names several conversations ({named}): give more of one"
            )
        }
    }
}

/// One row of `baton conversations list`: the whole id padded to
/// `id_cols`, the count of messages, when it was last used, its agent and
/// title (else, quoted, its first message) — cut (with `…`) so the row
/// fits `fit` columns, when given.
fn row(c: &pb::Conversation, id_cols: usize, fit: Option<usize>) -> String {
    let used = crate::runs::date(&c.updated_at);
    let running = if c.running_run_id.is_empty() {
        ""
    } else {
        " (answering)"
    };
    let head = format!("{:<id_cols$} {:>5} {:<19} ", c.id, c.message_count, used);
    let mut what = c.agent.clone();
    // Its title, else its first message.
    let title = flat(&c.title);
    let preview = flat(&c.preview);
    if !title.is_empty() {
        what.push_str(&format!(" · {title}"));
    } else if !preview.is_empty() {
        what.push_str(&format!(" · “{preview}”"));
    }
    if let Some(width) = fit {
        what = cut(&what, width.saturating_sub(cols(&head) + cols(running)));
    }
    format!("{head}{what}{running}")
}

/// `text` on one line: its whitespace collapsed.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` cut to at most `room` columns, with `…` where it is cut.
fn cut(text: &str, room: usize) -> String {
    if cols(text) <= room {
        return text.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = cols(c.encode_utf8(&mut [0; 4]));
        if used + w + 1 > room {
            break;
        }
        out.push(c);
        used += w;
    }
    if room > 0 {
        out.push('…');
    }
    out
}

/// Prints messages as a person reads them: `you:`, the agent's name, tool
/// calls (`→`) and results (`←`) indented, wrapped to `width`.
pub fn print_messages(messages: &[pb::ConversationMessage], width: usize) -> anyhow::Result<()> {
    for m in messages {
        let Some(msg) = &m.message else { continue };
        let mark = match (m.interrupted, m.summary) {
            (_, true) => " (summary)",
            (true, _) => " (interrupted)",
            _ => "",
        };
        let head = match pb::Role::try_from(msg.role) {
            Ok(pb::Role::User) if m.summary => "summary:".to_owned(),
            Ok(pb::Role::User) => "you:".to_owned(),
            Ok(pb::Role::Tool) => "  ←".to_owned(),
            _ => format!(
                "{}:",
                if m.agent.is_empty() {
                    "agent"
                } else {
                    &m.agent
                }
            ),
        };
        if !msg.content.is_empty() || msg.tool_calls.is_empty() {
            let mut line = head.clone();
            line.push(' ');
            let mut wrap = Wrap::new(cols(&line), "    ".into(), Some(width.saturating_sub(1)));
            wrap.push(&format!("{}{mark}", msg.content), &mut line);
            crate::out::outln!("{line}")?;
        }
        for call in &msg.tool_calls {
            let line = format!("  → {}({})", call.tool, call.arguments_json);
            crate::out::outln!("{}", cut(&line, width.saturating_sub(2)))?;
        }
    }
    Ok(())
}

fn conversation_json(c: &pb::Conversation) -> serde_json::Value {
    json!({
        "id": c.id,
        "title": c.title,
        "messageCount": c.message_count,
        "agent": c.agent,
        "updatedAt": crate::runs::date(&c.updated_at),
        "runningRunId": c.running_run_id,
        "labels": c.labels,
    })
}

fn message_json(m: &pb::ConversationMessage) -> serde_json::Value {
    let msg = m.message.clone().unwrap_or_default();
    json!({
        "index": m.index,
        "role": pb::Role::try_from(msg.role).map(|r| r.as_str_name()).unwrap_or("ROLE_UNSPECIFIED"),
        "content": msg.content,
        "toolCalls": msg.tool_calls.iter().map(|c| json!({"callId": c.call_id, "tool": c.tool, "argumentsJson": c.arguments_json})).collect::<Vec<_>>(),
        "toolCallId": msg.tool_call_id,
        "runId": m.run_id,
        "agent": m.agent,
        "interrupted": m.interrupted,
        "summary": m.summary,
    })
}
