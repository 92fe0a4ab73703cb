//! `baton chat AGENT [--conversation ID]`: talk with an agent at the
//! terminal, each message a run in one conversation (docs/conversations.md).
//!
//! The agent is checked first: an unknown one is refused before anything
//! is typed, naming the nearest (as `baton run` does). A line editor reads
//! each message (↑/↓ go through this session's messages); each answer
//! streams as `baton run` draws it, without the run's header and end lines
//! (the view's chat mode), its approvals and questions asked in place.
//! Ctrl-C cancels the answer being given (the conversation keeps the
//! message, marked interrupted) or clears the line being typed; Ctrl-D (or
//! the end of stdin) leaves. A new conversation's id is made here and
//! printed at the end, so `--conversation` continues it later (it also
//! takes a unique start or end of an id); `baton conversations show ID`
//! prints it.

use baton_client::pb;
use clap::Args;
use rustyline::error::ReadlineError;

use crate::follow::{Answers, CtrlC, Interrupted, follow, with_links};
use crate::run::Target;

/// `baton chat` arguments.
#[derive(Args)]
pub struct ChatArgs {
    /// The agent or group to talk with.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(crate::run::agent_names))]
    agent: String,
    /// The conversation to continue (new when not given): its id, or a
    /// unique start or end of one.
    #[arg(long, value_name = "ID")]
    conversation: Option<String>,
    /// Print events as JSON lines.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    target: Target,
}

/// A conversation id made here: `chat-` and 24 hex digits of the clock and
/// process.
fn new_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "chat-{:016x}{:08x}",
        nanos as u64,
        std::process::id().wrapping_mul(2_654_435_761)
    )
}

pub async fn chat(args: ChatArgs) -> anyhow::Result<()> {
    let base = args.target.connect().await?;
    // An unknown agent is said before the first message is typed, as
    // `baton run` says it (when the agents cannot be listed, the first
    // message's run says what is wrong).
    if let Ok(list) = base.list_agents().await
        && !crate::run::is_listed(&list, &args.agent)
    {
        return Err(crate::run::unknown_agent(&args.agent, &list));
    }
    let (id, mut started) = match &args.conversation {
        Some(typed) => {
            let id = crate::conversations::resolve(&base, typed).await?;
            let c = base.get_conversation(&id, 0, "", 4).await?;
            eprintln!(
                "conversation {id}: {}, the last below",
                crate::said::count(c.message_count, "message")
            );
            eprintln!("(Ctrl-D leaves, Ctrl-C cancels an answer)");
            crate::conversations::print_messages(&c.messages, crate::text::terminal_columns())?;
            (id, true)
        }
        None => {
            eprintln!("a new conversation with {}", args.agent);
            eprintln!("(Ctrl-D leaves, Ctrl-C cancels an answer)");
            (new_id(), false)
        }
    };
    let mut editor = rustyline::DefaultEditor::new()?;
    loop {
        let (back, read) = tokio::task::spawn_blocking(move || {
            let read = editor.readline("you> ");
            (editor, read)
        })
        .await?;
        editor = back;
        let text = match read {
            Ok(text) if text.trim().is_empty() => continue,
            Ok(text) => text,
            // Ctrl-C on the prompt: the line is dropped.
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        };
        let _ = editor.add_history_entry(text.as_str());
        let (client, links) = with_links(base.clone());
        let request = pb::RunAgentRequest {
            agent: args.agent.clone(),
            input: text,
            conversation_id: id.clone(),
            new_conversation: !started,
            ..Default::default()
        };
        let events = match client.run_agent(request).await {
            Ok(events) => events,
            Err(e) if e.code() == tonic::Code::InvalidArgument && e.field() == Some("agent") => {
                return Err(crate::run::did_you_mean(&client, &args.agent, e).await);
            }
            Err(e) if !started || e.code() == tonic::Code::NotFound => return Err(e.into()),
            Err(e) => {
                // Busy, over a bound: said, and the next message may do.
                eprintln!(
                    "{}",
                    crate::text::for_stderr(&format!("error: {}", e.message()))
                );
                continue;
            }
        };
        started = true;
        let followed = follow(
            &client,
            events,
            links,
            args.json,
            Answers::default(),
            CtrlC::Cancel,
            crate::view::Mode::Chat,
        )
        .await;
        match followed {
            Ok(()) => {}
            Err(e) if e.downcast_ref::<Interrupted>().is_some() => {}
            Err(e) => eprintln!("{}", crate::text::for_stderr(&format!("error: {e}"))),
        }
    }
    if started {
        eprintln!("conversation {id}");
        eprintln!("continue it: baton chat {} --conversation {id}", args.agent);
    }
    Ok(())
}
