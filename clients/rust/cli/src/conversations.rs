//! `baton conversations list|show|delete`: a tenant's conversations, one
//! conversation's messages, deleting one (its runs' histories with it).

use baton_client::pb;
use clap::{Args, Subcommand};
use serde_json::json;

use crate::run::Target;
use crate::view::{Wrap, cols};

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
  baton conversations show conv-0192…
  baton conversations show ID --last 10")]
    Show {
        /// The conversation.
        id: String,
        /// Only the newest N messages.
        #[arg(long, value_name = "N")]
        last: Option<u32>,
    },
    /// Delete a conversation, its messages and its runs' histories.
    Delete {
        /// The conversation.
        id: String,
    },
}

pub async fn run(args: ConversationsArgs) -> anyhow::Result<()> {
    let client = args.target.connect().await?;
    let width = crate::view::terminal_columns();
    match args.command {
        Cmd::List { limit } => {
            let mut token = String::new();
            let mut shown = 0;
            let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
            if !args.json && tty {
                crate::out::outln!(
                    "{:<24} {:>5} {:<19} AGENT / TITLE",
                    "ID",
                    "MSGS",
                    "USED (UTC)"
                )?;
            }
            loop {
                let page = client.list_conversations(100, &token).await?;
                for c in &page.conversations {
                    if shown == limit {
                        return Ok(());
                    }
                    shown += 1;
                    if args.json {
                        crate::out::outln!("{}", conversation_json(c))?;
                        continue;
                    }
                    let used = crate::runs::date(&c.updated_at);
                    let running = if c.running_run_id.is_empty() {
                        ""
                    } else {
                        " (answering)"
                    };
                    let line = format!(
                        "{:<24} {:>5} {:<19} {}{}{}",
                        short_id(&c.id),
                        c.message_count,
                        used,
                        c.agent,
                        if c.title.is_empty() {
                            String::new()
                        } else {
                            format!(" · {}", c.title)
                        },
                        running
                    );
                    crate::out::outln!("{}", fit(&line, width))?;
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
            let mut token = String::new();
            let mut first = true;
            loop {
                let c = client
                    .get_conversation(&id, 200, &token, if first { last.unwrap_or(0) } else { 0 })
                    .await?;
                if first && !args.json {
                    let title = if c.title.is_empty() {
                        String::new()
                    } else {
                        format!(" “{}”", c.title)
                    };
                    crate::out::outln!(
                        "{}",
                        fit(
                            &format!(
                                "conversation {}{title}: {} messages, {} runs",
                                c.id,
                                c.message_count,
                                c.runs.len()
                            ),
                            width
                        )
                    )?;
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
            let deleted = client.delete_conversation(&id).await?;
            if args.json {
                crate::out::outln!("{}", json!({"id": id, "runsDeleted": deleted.runs_deleted}))?;
            } else {
                crate::out::outln!(
                    "deleted conversation {id} and the histories of {} runs",
                    deleted.runs_deleted
                )?;
            }
        }
    }
    Ok(())
}

/// An id that fits its column: its start and end around `…`.
fn short_id(id: &str) -> String {
    if id.chars().count() <= 24 {
        return id.to_owned();
    }
    let chars: Vec<char> = id.chars().collect();
    let head: String = chars[..11].iter().collect();
    let tail: String = chars[chars.len() - 12..].iter().collect();
    format!("{head}…{tail}")
}

/// `line` cut to `width` columns (with `…`).
fn fit(line: &str, width: usize) -> String {
    if cols(line) <= width {
        return line.to_owned();
    }
    let mut out = String::new();
    for c in line.chars() {
        if cols(&out) + 2 > width {
            break;
        }
        out.push(c);
    }
    out.push('…');
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
            crate::out::outln!("{}", fit(&line, width.saturating_sub(1)))?;
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
