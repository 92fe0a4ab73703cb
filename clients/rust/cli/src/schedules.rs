//! `baton schedules …`: the tenant's schedules (create, list, show, pause,
//! resume, delete). A schedule starts a detached run of an agent, group
//! or pipeline at each tick of a cron expression (in a time zone) or of
//! an interval.

use anyhow::Context as _;
use baton_client::{OrchestratorClient, pb};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

use crate::run::Target;
use crate::text::wrap_words;

/// `baton schedules …`.
#[derive(Args)]
pub struct SchedulesArgs {
    #[command(subcommand)]
    command: Cmd,
    #[command(flatten)]
    target: Target,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Overlap {
    /// The tick is skipped while the previous run runs.
    Skip,
    /// One tick waits for the previous run, then fires.
    QueueOne,
    /// The tick fires anyway.
    Allow,
}

#[derive(Clone, Copy, ValueEnum)]
enum Missed {
    /// Ticks missed while no replica ran are skipped.
    Skip,
    /// One run for the latest missed tick.
    RunOnce,
}

#[derive(Subcommand)]
enum Cmd {
    /// Make a schedule: a run at each tick.
    #[command(
        after_help = "Cron expressions: five fields (minute hour day month weekday), or six
with seconds first; @hourly, @daily, @weekly … too. Read in --tz (default UTC).

Examples:
  baton schedules create --agent researcher --input 'the news' --cron '0 9 * * MON-FRI' --tz Europe/Paris
  baton schedules create --agent assistant --input ping --every 15m --overlap queue-one
  baton schedules create --pipeline nightly.yaml --cron '@daily' --until 2027-01-01T00:00:00Z"
    )]
    Create {
        /// The agent or group to run.
        #[arg(
            long,
            conflicts_with = "pipeline",
            required_unless_present = "pipeline"
        )]
        agent: Option<String>,
        /// The agent's input at each tick.
        #[arg(long, default_value = "")]
        input: String,
        /// A pipeline file to run instead (as `baton pipeline` reads).
        #[arg(long, value_name = "FILE")]
        pipeline: Option<std::path::PathBuf>,
        /// A cron expression.
        #[arg(long, conflicts_with = "every", required_unless_present = "every")]
        cron: Option<String>,
        /// The IANA time zone of --cron (`Europe/Paris`).
        #[arg(long, value_name = "ZONE", default_value = "")]
        tz: String,
        /// Instead of --cron: a run every this long (`15m`, `1h`).
        #[arg(long, value_parser = baton_common::config::duration::parse)]
        every: Option<std::time::Duration>,
        /// No tick after this time (RFC 3339, `2027-01-01T00:00:00Z`).
        #[arg(long, value_name = "TIME")]
        until: Option<String>,
        /// While the previous run still runs.
        #[arg(long, value_enum, default_value = "skip")]
        overlap: Overlap,
        /// Ticks missed while no replica ran.
        #[arg(long, value_enum, default_value = "skip")]
        missed: Missed,
        /// The run context, a JSON object.
        #[arg(long, value_name = "JSON", default_value = "")]
        context: String,
        /// What it is for.
        #[arg(long, default_value = "")]
        description: String,
        /// Made paused (resume it to start).
        #[arg(long)]
        paused: bool,
    },
    /// Your tenant's schedules, with their next tick and last run.
    List,
    /// One schedule: its next fire times and recent ticks.
    Show {
        /// Its id.
        id: String,
    },
    /// Stop a schedule firing until it is resumed.
    Pause {
        /// Its id.
        id: String,
    },
    /// Fire a paused schedule again, from its next tick.
    Resume {
        /// Its id.
        id: String,
    },
    /// Delete a schedule; the runs it started go on.
    Delete {
        /// Its id.
        id: String,
    },
}

fn schedule_json(s: &pb::Schedule) -> serde_json::Value {
    serde_json::to_value(s).unwrap_or_default()
}

fn timestamp(text: &str) -> anyhow::Result<baton_client::wkt::Timestamp> {
    text.parse::<baton_client::wkt::Timestamp>()
        .map_err(|e| anyhow::anyhow!("--until: {text:?} is not an RFC 3339 time: {e}"))
}

pub async fn run(args: SchedulesArgs) -> anyhow::Result<()> {
    let client: OrchestratorClient = args.target.connect().await?;
    let s = match args.command {
        Cmd::Create {
            agent,
            input,
            pipeline,
            cron,
            tz,
            every,
            until,
            overlap,
            missed,
            context,
            description,
            paused,
        } => {
            let (agent, pipeline) = match (agent, pipeline) {
                (Some(agent), _) => (
                    Some(pb::RunAgentRequest {
                        agent,
                        input,
                        run_context_json: context,
                        ..Default::default()
                    }),
                    None,
                ),
                (None, Some(file)) => {
                    let text = std::fs::read_to_string(&file)
                        .with_context(|| format!("cannot read {}", file.display()))?;
                    let parsed: baton_orchestrator::pipeline::PipelineFile =
                        serde_norway::from_str(&text).with_context(|| {
                            format!("{} is not a pipeline file", file.display())
                        })?;
                    let mut r = parsed
                        .into_request()
                        .map_err(|e| anyhow::anyhow!("in {}: {e}", file.display()))?;
                    r.run_context_json = context;
                    (None, Some(r))
                }
                (None, None) => anyhow::bail!("give --agent or --pipeline"),
            };
            client
                .create_schedule(pb::CreateScheduleRequest {
                    description,
                    agent,
                    pipeline,
                    cron: cron.unwrap_or_default(),
                    time_zone: tz,
                    interval: every.map(|d| baton_client::wkt::Duration {
                        seconds: d.as_secs() as i64,
                        nanos: d.subsec_nanos() as i32,
                    }),
                    end_at: until.as_deref().map(timestamp).transpose()?,
                    overlap: match overlap {
                        Overlap::Skip => pb::ScheduleOverlap::Skip,
                        Overlap::QueueOne => pb::ScheduleOverlap::QueueOne,
                        Overlap::Allow => pb::ScheduleOverlap::Allow,
                    } as i32,
                    missed: match missed {
                        Missed::Skip => pb::ScheduleMissed::Skip,
                        Missed::RunOnce => pb::ScheduleMissed::RunOnce,
                    } as i32,
                    paused,
                })
                .await?
        }
        Cmd::List => {
            let list = client.list_schedules().await?;
            if args.json {
                for s in &list {
                    crate::out::outln!("{}", schedule_json(s))?;
                }
            } else if list.is_empty() {
                eprintln!(
                    "no schedules (make one: baton schedules create --agent NAME --input TEXT --every 1h)"
                );
            } else {
                for s in &list {
                    print_summary(s)?;
                }
            }
            return Ok(());
        }
        Cmd::Show { id } => client.get_schedule(&id).await?,
        Cmd::Pause { id } => client.pause_schedule(&id).await?,
        Cmd::Resume { id } => client.resume_schedule(&id).await?,
        Cmd::Delete { id } => {
            client.delete_schedule(&id).await?;
            if args.json {
                crate::out::outln!("{}", json!({"deleted": id}))?;
            } else {
                crate::out::outln!("deleted {id} (the runs it started go on)")?;
            }
            return Ok(());
        }
    };
    if args.json {
        crate::out::outln!("{}", schedule_json(&s))?;
    } else {
        print_detail(&s)?;
    }
    Ok(())
}

/// `cron '0 9 * * *' Europe/Paris` or `every 15m`.
fn when(s: &pb::Schedule) -> String {
    if s.cron.is_empty() {
        let every = s.interval.map_or(0, |d| {
            d.seconds.max(0) as u64 * 1000 + (d.nanos.max(0) / 1_000_000) as u64
        });
        format!(
            "every {}",
            baton_common::config::duration::format(std::time::Duration::from_millis(every))
        )
    } else {
        format!("cron '{}' {}", s.cron, s.time_zone)
    }
}

fn what(s: &pb::Schedule) -> String {
    match (&s.agent, &s.pipeline) {
        (Some(a), _) => format!("{} ({:?})", a.agent, a.input),
        (None, Some(_)) => format!("pipeline {}", s.target),
        _ => s.target.clone(),
    }
}

fn state(s: &pb::Schedule) -> &'static str {
    if s.paused {
        "paused"
    } else if s.next_fire_times.is_empty() {
        "ended"
    } else {
        "active"
    }
}

fn outcome(t: &pb::ScheduleTick) -> String {
    let o = pb::ScheduleTickOutcome::try_from(t.outcome).unwrap_or_default();
    let name = o
        .as_str_name()
        .trim_start_matches("SCHEDULE_TICK_OUTCOME_")
        .to_lowercase();
    let status = pb::RunStatus::try_from(t.run_status)
        .ok()
        .filter(|s| *s != pb::RunStatus::Unspecified)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("RUN_STATUS_")
                .to_lowercase()
        });
    let mut line = name;
    if !t.run_id.is_empty() {
        let verb = if o == pb::ScheduleTickOutcome::Fired {
            "run"
        } else {
            "while run"
        };
        line.push_str(&format!(" {verb} {}", t.run_id));
        if let Some(status) = status {
            line.push_str(&format!(" ({status})"));
        }
    }
    if t.missed > 0 {
        line.push_str(&format!(" ({} ticks)", t.missed));
    }
    if !t.message.is_empty() {
        line.push_str(&format!(": {}", t.message));
    }
    line
}

fn width() -> usize {
    crate::text::terminal_columns().saturating_sub(1).max(40)
}

/// `text` after `first` (an indent), wrapped to `w` columns, the lines
/// after under `cont`.
fn line(first: &str, text: &str, w: usize, cont: &str) -> String {
    format!(
        "{first}{}",
        wrap_words(text, w.saturating_sub(first.len()), cont)
    )
}

/// A schedule in a list: its id, state and what it runs; when; its next
/// tick and its last.
fn print_summary(s: &pb::Schedule) -> anyhow::Result<()> {
    let w = width();
    let from = if s.from_agents_file {
        " (agents file)"
    } else {
        ""
    };
    crate::out::outln!(
        "{}",
        line(
            "",
            &format!("{} · {}{from} · {}", s.schedule_id, state(s), what(s)),
            w,
            "  "
        )
    )?;
    let next = s
        .next_fire_times
        .first()
        .map(|t| format!("next {} UTC", crate::runs::date(&Some(*t))))
        .unwrap_or_default();
    crate::out::outln!("{}", line("  ", &format!("{} · {next}", when(s)), w, "  "))?;
    if let Some(t) = s.recent.first() {
        crate::out::outln!(
            "{}",
            line(
                "  ",
                &format!("last {}: {}", crate::runs::date(&t.tick_at), outcome(t)),
                w,
                "    "
            )
        )?;
    }
    Ok(())
}

/// A schedule in full.
fn print_detail(s: &pb::Schedule) -> anyhow::Result<()> {
    let w = width();
    print_summary(s)?;
    if !s.description.is_empty() {
        crate::out::outln!("{}", line("  ", &s.description, w, "  "))?;
    }
    let overlap = pb::ScheduleOverlap::try_from(s.overlap)
        .unwrap_or_default()
        .as_str_name()
        .trim_start_matches("SCHEDULE_OVERLAP_")
        .to_lowercase();
    let missed = pb::ScheduleMissed::try_from(s.missed)
        .unwrap_or_default()
        .as_str_name()
        .trim_start_matches("SCHEDULE_MISSED_")
        .to_lowercase();
    crate::out::outln!("  on overlap: {overlap}; after downtime: {missed}")?;
    if s.end_at.is_some() {
        crate::out::outln!("  ends {} UTC", crate::runs::date(&s.end_at))?;
    }
    if !s.next_fire_times.is_empty() {
        crate::out::outln!("next ticks (UTC):")?;
        for t in &s.next_fire_times {
            crate::out::outln!("  {}", crate::runs::date(&Some(*t)))?;
        }
    }
    if !s.recent.is_empty() {
        crate::out::outln!("recent ticks (UTC), newest first:")?;
        for t in &s.recent {
            crate::out::outln!(
                "{}",
                line(
                    "  ",
                    &format!("{} · {}", crate::runs::date(&t.tick_at), outcome(t)),
                    w,
                    "    "
                )
            )?;
        }
    }
    Ok(())
}
