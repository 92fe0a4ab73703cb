//! `baton runs`: list, inspect, follow and cancel runs — the way back to a
//! run started with `baton run --detach`, or by another client.

use baton_client::pb;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

use crate::follow::{CtrlC, follow};

mod id;
pub(crate) mod list;
use crate::run::Target;
pub(crate) use list::date;
use list::{clock, time};

/// `baton runs …`.
#[derive(Args)]
pub struct RunsArgs {
    #[command(subcommand)]
    command: RunsCmd,
    #[command(flatten)]
    target: Target,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum RunsCmd {
    /// The caller's runs, newest first: `waiting` when a run waits for
    /// a person.
    #[command(after_help = "Examples:
  baton runs list
  baton runs list --status running --limit 10
  baton runs list | awk 'NR > 1 {print $1}'   the ids (into a pipe: one line a run)
  baton runs list --json | jq -r .trace_id")]
    List {
        /// Only runs with this status.
        #[arg(long)]
        status: Option<Status>,
        /// Most runs to show (every page is followed up to it).
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// One run's status and result (`--json`: as JSON).
    #[command(after_help = "Examples:
  baton runs get RUN_ID
  baton runs get 9f3a6c21          # the end of its id, as listed
  baton runs get RUN_ID --json | jq -r .output")]
    Get {
        /// The run's id, or a unique start or end of it (its last 8
        /// characters, as the console and `runs list` show them).
        run_id: String,
    },
    #[command(after_help = "Examples:
  baton runs watch RUN_ID
  baton runs watch RUN_ID --approve --answer Lisbon
  baton runs watch RUN_ID --after 12 --json")]
    /// Follow a run's events (answering its approvals and input requests),
    /// from its first event or after a seq.
    Watch {
        /// The run's id, or a unique start or end of it (its last 8
        /// characters, as the console and `runs list` show them).
        run_id: String,
        /// Only events after this seq.
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// Approve every approval without asking.
        #[arg(long, conflicts_with = "deny")]
        approve: bool,
        /// Deny every approval without asking.
        #[arg(long)]
        deny: bool,
        /// The answer to the run's next input request, instead of asking;
        /// repeat for several, in order.
        #[arg(long = "answer", value_name = "TEXT")]
        answers: Vec<String>,
    },
    /// Fork a run at one of its points (a model turn, a tool's result, a
    /// person's answer, a step): everything before it is replayed from the
    /// run's recording, nothing is called again; the point is done again,
    /// or takes the edit given; then the fork runs live.
    #[command(after_help = "Examples:
  baton runs fork RUN_ID --at 12                      retry from seq 12
  baton runs fork RUN_ID --at 12 --result '{\"temp\": 30}'   another tool result
  baton runs fork RUN_ID --at 7 --text 'Paris.'        another answer, same calls
  baton runs fork RUN_ID --at 7 --text 'Paris.' --no-calls     and no tool call
  baton runs fork RUN_ID --at 7 --text '' --call search='{\"q\":\"x\"}'
  baton runs fork RUN_ID --at 20 --deny --reason 'too costly'
  baton runs fork RUN_ID --at 31 --input Lisbon --detach")]
    Fork {
        /// The run's id, or a unique start or end of it.
        run_id: String,
        /// The seq of the fork point: `baton runs watch RUN_ID --json` gives
        /// every event's seq, the console shows them on the run's page.
        #[arg(long, value_name = "SEQ")]
        at: u64,
        /// At a model turn: the text the model answers instead.
        #[arg(long, group = "edit")]
        text: Option<String>,
        /// With --text: a tool call the turn asks for instead, as
        /// TOOL=ARGUMENTS_JSON; repeat for several. Without --call the
        /// turn keeps the tool calls it made.
        #[arg(long = "call", value_name = "TOOL=JSON", requires = "text")]
        calls: Vec<String>,
        /// With --text: the turn makes no tool call (its recorded ones are
        /// dropped).
        #[arg(long, requires = "text", conflicts_with = "calls")]
        no_calls: bool,
        /// At a tool's result: the result instead.
        #[arg(long, group = "edit")]
        result: Option<String>,
        /// With --result: the result is an error.
        #[arg(long, requires = "result")]
        error: bool,
        /// At an approval: grant it instead.
        #[arg(long, group = "edit")]
        approve: bool,
        /// At an approval: deny it instead.
        #[arg(long, group = "edit")]
        deny: bool,
        /// With --approve or --deny: the reason.
        #[arg(long, default_value = "")]
        reason: String,
        /// At an input request: the answer instead.
        #[arg(long, group = "edit")]
        input: Option<String>,
        /// At a pipeline step: its output instead.
        #[arg(long, group = "edit")]
        step_output: Option<String>,
        /// At any point: the run context from there on (a JSON object);
        /// the point itself is taken as recorded.
        #[arg(long, group = "edit", value_name = "JSON")]
        context: Option<String>,
        /// Start the fork and print its ids, without following it.
        #[arg(long)]
        detach: bool,
    },
    /// Replay an ended run against today's agents and models: its model
    /// calls and calls of tools outside Baton are answered from its
    /// recording while they ask what it asked; at the first that differs
    /// the replay says where and what, then goes live (or, --strict, fails:
    /// a regression check).
    #[command(after_help = "Examples:
  baton runs replay RUN_ID --strict       does the agent still do what it did?
  baton runs replay RUN_ID                live from the first difference
  baton runs replay RUN_ID --detach --json")]
    Replay {
        /// The run's id, or a unique start or end of it.
        run_id: String,
        /// Fail at the first request that differs from the recording (exit
        /// status 1) instead of going live from there.
        #[arg(long)]
        strict: bool,
        /// Start the replay and print its ids, without following it.
        #[arg(long)]
        detach: bool,
    },
    /// Make a dataset case of an ended run: its input, its answer as
    /// `expected`, its tool calls as `expected_tools`, and its recording
    /// to answer tool calls from (`tools: recorded`).
    #[command(after_help = "Examples:
  baton runs save-case RUN_ID --to cases.jsonl       appended as one line
  baton runs save-case RUN_ID --inline --to cases.jsonl  recorded results in the case
  baton eval cases.jsonl")]
    SaveCase {
        /// The run's id, or a unique start or end of it.
        run_id: String,
        /// Append the case to this dataset (JSON Lines) instead of printing it.
        #[arg(long, value_name = "FILE")]
        to: Option<std::path::PathBuf>,
        /// Keep the recorded tool results in the case, so the dataset
        /// outlives the run's retention.
        #[arg(long)]
        inline: bool,
    },
    /// Cancel a run.
    #[command(after_help = "Examples:
  baton runs cancel RUN_ID
  baton runs cancel RUN_ID --reason \"no longer needed\"")]
    Cancel {
        /// The run's id, or a unique start or end of it (its last 8
        /// characters, as the console and `runs list` show them).
        run_id: String,
        /// Why (shown in RunCancelled).
        #[arg(long, default_value = "")]
        reason: String,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Status {
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl From<Status> for pb::RunStatus {
    fn from(s: Status) -> Self {
        match s {
            Status::Running => pb::RunStatus::Running,
            Status::Completed => pb::RunStatus::Completed,
            Status::Failed => pb::RunStatus::Failed,
            Status::Cancelled => pb::RunStatus::Cancelled,
        }
    }
}

/// Lower-case status name, as the CLI takes it.
fn status_name(status: i32) -> String {
    pb::RunStatus::try_from(status)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("RUN_STATUS_")
                .to_lowercase()
        })
        .unwrap_or_else(|_| status.to_string())
}

/// Runs `baton runs …`.
pub async fn run(args: RunsArgs) -> anyhow::Result<()> {
    let client = args.target.connect().await?;
    match args.command {
        RunsCmd::List { status, limit } => {
            let status = status.map_or(pb::RunStatus::Unspecified, Into::into);
            let view = crate::view::View::default();
            let today: String = date(&Some(std::time::SystemTime::now().into()))
                .chars()
                .take(10)
                .collect();
            let mut token = String::new();
            let mut shown = 0;
            if !args.json {
                crate::out::outln!("{}", list::header(view.wrap_width()))?;
            }
            'pages: loop {
                let page_size = (limit - shown).min(1000) as i32;
                let page = client.list_runs(status, page_size, &token).await?;
                for r in &page.runs {
                    if shown == limit {
                        break 'pages;
                    }
                    shown += 1;
                    let waits = list::waits_for(&r.waiting_for);
                    if args.json {
                        crate::out::outln!(
                            "{}",
                            list::summary_json(r, &status_name(r.status), waits,)
                        )?;
                    } else {
                        let started = match time(&r.started_at) {
                            t if !today.is_empty() && t.starts_with(&today) => clock(&r.started_at),
                            _ => date(&r.started_at),
                        };
                        crate::out::outln!(
                            "{}",
                            list::row(
                                r,
                                &status_name(r.status),
                                waits,
                                &started,
                                view.wrap_width()
                            )
                        )?;
                    }
                }
                if page.next_page_token.is_empty() || shown == limit {
                    break;
                }
                token = page.next_page_token;
            }
            Ok(())
        }
        RunsCmd::Get { run_id } => {
            let run_id = id::resolve(&client, &run_id).await?;
            let r = client.get_run(&run_id).await?;
            if args.json {
                let value = list::get_json(&r, &status_name(r.status));
                crate::out::outln!("{value}")?;
                return Ok(());
            }
            let waits = list::waits_for(&r.waiting_for);
            let width = crate::view::View::default().wrap_width();
            crate::out::outln!("{}", list::get(&r, &status_name(r.status), waits, width))?;
            Ok(())
        }
        RunsCmd::Watch {
            run_id,
            after,
            approve,
            deny,
            answers,
        } => {
            let run_id = id::resolve(&client, &run_id).await?;
            let (client, links) = crate::follow::with_links(client);
            let events = client.watch_run(&run_id, after, None).await?;
            let answers = crate::follow::Answers {
                approvals: (approve || deny).then_some(approve),
                inputs: answers,
            };
            follow(
                &client,
                events,
                links,
                args.json,
                answers,
                CtrlC::StopWatching,
                crate::view::Mode::Tree,
            )
            .await
        }
        RunsCmd::Fork {
            run_id,
            at,
            text,
            calls,
            no_calls,
            result,
            error,
            approve,
            deny,
            reason,
            input,
            step_output,
            context,
            detach,
        } => {
            use pb::fork_edit::Edit;
            let run_id = id::resolve(&client, &run_id).await?;
            let edit = if let Some(text) = text {
                let mut tool_calls = Vec::new();
                for (i, c) in calls.iter().enumerate() {
                    let Some((tool, arguments)) = c.split_once('=') else {
                        anyhow::bail!("--call {c:?}: expected TOOL=ARGUMENTS_JSON");
                    };
                    tool_calls.push(pb::ToolCall {
                        call_id: (i + 1).to_string(),
                        tool: tool.to_owned(),
                        arguments_json: arguments.to_owned(),
                    });
                }
                if calls.is_empty() && !no_calls {
                    // The turn's own calls, kept: only its text changes.
                    tool_calls = recorded_calls(&client, &run_id, at).await?;
                }
                Some(Edit::ModelTurn(pb::ModelTurnEdit { text, tool_calls }))
            } else if let Some(result) = result {
                Some(Edit::ToolResult(pb::ToolResultEdit {
                    result,
                    is_error: error,
                }))
            } else if approve || deny {
                Some(Edit::Approval(pb::ApprovalEdit {
                    approved: approve,
                    reason,
                }))
            } else if let Some(input) = input {
                Some(Edit::Input(input))
            } else if let Some(context) = context {
                Some(Edit::RunContextJson(context))
            } else {
                step_output.map(Edit::StepOutput)
            };
            let request = pb::ForkRunRequest {
                run_id: run_id.clone(),
                at_seq: at,
                edit: edit.map(|e| pb::ForkEdit { edit: Some(e) }),
                detach,
                filter: None,
            };
            let (client, links) = crate::follow::with_links(client);
            let mut events = client.fork_run(request).await?;
            if detach {
                let (fork_id, trace_id) = crate::detach::started(&mut events).await?;
                let json = json!({"runId": fork_id, "traceId": trace_id, "forkedFrom": {"runId": run_id, "seq": at}});
                let sentence = format!(
                    "fork {fork_id} of run {run_id} (at its seq {at}) started, detached: baton runs watch {fork_id}"
                );
                return crate::detach::detached(args.json, &json, &fork_id, &sentence);
            }
            follow(
                &client,
                events,
                links,
                args.json,
                crate::follow::Answers::default(),
                CtrlC::Cancel,
                crate::view::Mode::Tree,
            )
            .await
        }
        RunsCmd::SaveCase { run_id, to, inline } => {
            let run_id = id::resolve(&client, &run_id).await?;
            let case = client.save_case(&run_id, inline).await?;
            match to {
                None => crate::out::outln!("{case}")?,
                Some(path) => {
                    use std::io::Write as _;
                    let mut f = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&path)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                    writeln!(f, "{case}")
                        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                    eprintln!(
                        "case of run {run_id} saved to {}: baton eval {}",
                        path.display(),
                        path.display()
                    );
                }
            }
            Ok(())
        }
        RunsCmd::Replay {
            run_id,
            strict,
            detach,
        } => {
            let run_id = id::resolve(&client, &run_id).await?;
            let request = pb::ReplayRunRequest {
                run_id: run_id.clone(),
                strict,
                detach,
                filter: None,
            };
            let (client, links) = crate::follow::with_links(client);
            let mut events = client.replay_run(request).await?;
            if detach {
                let (replay_id, trace_id) = crate::detach::started(&mut events).await?;
                let json = json!({"runId": replay_id, "traceId": trace_id, "replayOf": run_id, "strict": strict});
                let sentence = format!(
                    "replay {replay_id} of run {run_id} started, detached: baton runs watch {replay_id}"
                );
                return crate::detach::detached(args.json, &json, &replay_id, &sentence);
            }
            follow(
                &client,
                events,
                links,
                args.json,
                crate::follow::Answers::default(),
                CtrlC::Cancel,
                crate::view::Mode::Tree,
            )
            .await
        }
        RunsCmd::Cancel { run_id, reason } => {
            let run_id = id::resolve(&client, &run_id).await?;
            let status = client.cancel(&run_id, &reason).await?;
            let name = status_name(status as i32);
            if args.json {
                crate::out::outln!("{}", json!({"runId": run_id, "status": name}))?;
            } else {
                crate::out::outln!("run {run_id}: {name}")?;
            }
            Ok(())
        }
    }
}

/// The tool calls of the model turn that ended at `seq` of run `run_id`
/// (its `MessageCompleted`), to keep when only the turn's text is edited.
async fn recorded_calls(
    client: &baton_client::OrchestratorClient,
    run_id: &str,
    seq: u64,
) -> anyhow::Result<Vec<pb::ToolCall>> {
    use futures::StreamExt as _;
    let mut events = client
        .watch_run(run_id, seq.saturating_sub(1), None)
        .await?;
    while let Some(e) = events.next().await {
        let e = e?;
        if e.seq < seq {
            continue;
        }
        return match e.payload {
            Some(pb::run_event::Payload::MessageCompleted(m)) if e.seq == seq => Ok(m.tool_calls),
            _ => anyhow::bail!(
                "--at {seq}: not a model turn of run {run_id} (--text edits one); see baton runs watch {run_id} --json"
            ),
        };
    }
    anyhow::bail!("--at {seq}: run {run_id} has no event there")
}
