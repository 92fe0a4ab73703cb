//! `baton runs`: list, inspect, follow and cancel runs — the way back to a
//! run started with `baton run --detach`, or by another client.

use baton_client::pb;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

use crate::follow::{CtrlC, follow};
use crate::run::Target;

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
    /// The caller's runs, newest first.
    List {
        /// Only runs with this status.
        #[arg(long)]
        status: Option<Status>,
        /// Most runs to show (every page is followed up to it).
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// One run's status and result.
    Get {
        /// The run's id.
        run_id: String,
    },
    /// Follow a run's events (answering its approvals and input requests),
    /// from its first event or after a seq.
    Watch {
        /// The run's id.
        run_id: String,
        /// Only events after this seq.
        #[arg(long, default_value_t = 0)]
        after: u64,
    },
    /// Cancel a run.
    Cancel {
        /// The run's id.
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

fn time(t: &Option<baton_client::wkt::Timestamp>) -> String {
    t.map(|t| t.to_string()).unwrap_or_default()
}

/// Runs `baton runs …`.
pub async fn run(args: RunsArgs) -> anyhow::Result<()> {
    let client = args.target.connect().await?;
    match args.command {
        RunsCmd::List { status, limit } => {
            let status = status.map_or(pb::RunStatus::Unspecified, Into::into);
            let mut token = String::new();
            let mut shown = 0;
            if !args.json {
                crate::out::outln!(
                    "{:<36}  {:<9}  {:<8}  {:<20}  {:>6}  started",
                    "run",
                    "status",
                    "kind",
                    "target",
                    "events"
                )?;
            }
            'pages: loop {
                let page_size = (limit - shown).min(1000) as i32;
                let page = client.list_runs(status, page_size, &token).await?;
                for r in &page.runs {
                    if shown == limit {
                        break 'pages;
                    }
                    shown += 1;
                    if args.json {
                        crate::out::outln!(
                            "{}",
                            json!({
                                "run_id": r.run_id,
                                "trace_id": r.trace_id,
                                "kind": r.kind().as_str_name(),
                                "target": r.target,
                                "status": status_name(r.status),
                                "started_at": time(&r.started_at),
                                "ended_at": time(&r.ended_at),
                                "last_seq": r.last_seq,
                                "detached": r.detached,
                            })
                        )?;
                    } else {
                        crate::out::outln!(
                            "{:<36}  {:<9}  {:<8}  {:<20}  {:>6}  {}{}",
                            r.run_id,
                            status_name(r.status),
                            r.kind()
                                .as_str_name()
                                .trim_start_matches("RUN_KIND_")
                                .to_lowercase(),
                            r.target,
                            r.last_seq,
                            time(&r.started_at),
                            if r.detached { "  (detached)" } else { "" }
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
            let r = client.get_run(&run_id).await?;
            let value = json!({
                "run_id": r.run_id,
                "trace_id": r.trace_id,
                "kind": r.kind().as_str_name(),
                "target": r.target,
                "status": status_name(r.status),
                "started_at": time(&r.started_at),
                "ended_at": time(&r.ended_at),
                "output": r.output,
                "run_context_json": r.run_context_json,
                "error_code": r.error_code,
                "error_message": r.error_message,
                "last_seq": r.last_seq,
            });
            if args.json {
                crate::out::outln!("{value}")?;
            } else {
                crate::out::outln!("{}", serde_json::to_string_pretty(&value)?)?;
            }
            Ok(())
        }
        RunsCmd::Watch { run_id, after } => {
            let (client, links) = crate::follow::with_links(client);
            let events = client.watch_run(&run_id, after, None).await?;
            follow(
                &client,
                events,
                links,
                args.json,
                Vec::new(),
                CtrlC::StopWatching,
            )
            .await
        }
        RunsCmd::Cancel { run_id, reason } => {
            let status = client.cancel(&run_id, &reason).await?;
            let name = status_name(status as i32);
            if args.json {
                crate::out::outln!("{}", json!({"run_id": run_id, "status": name}))?;
            } else {
                crate::out::outln!("run {run_id}: {name}")?;
            }
            Ok(())
        }
    }
}
