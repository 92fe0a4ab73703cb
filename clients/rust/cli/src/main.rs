//! `baton`: the command line for Baton.
//!
//! - `baton up`: orchestrator + context store in one process, in memory,
//!   with the example agents.
//! - `baton agents`, `baton run AGENT "input"`: list agents, run one and
//!   draw its event tree live (or `--json`).
//! - `baton pipeline FILE.yaml`: run a pipeline and draw its steps live.
//! - `baton store …`: read, write and watch a context store's slots.
//!
//! This file parses the command line and hands each command to its module;
//! no module reads this file. `out` (the `outln!` every command prints
//! with) is the leaf; `view` draws event trees; `follow` follows a run
//! (its events, its questions, Ctrl-C); `run` holds what the run commands
//! share (`Target`), which `pipeline`, `runs` and `store` use.

/// mimalloc instead of the system allocator: the runtime allocates many
/// small, short-lived objects across threads; on the pipeline benchmark's
/// fan-out it took 53 ms down to 34 ms (see docs/performance.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod chat;
mod complete;
mod conversations;
mod detach;
mod eval;
mod eval_report;
mod follow;
mod jsonl;
mod out;
mod pipeline;
mod replay;
mod run;
mod runs;
mod said;
mod schedules;
mod steer;
mod store;
mod text;
mod up;
mod view;
mod webhooks;

use clap::{Parser, Subcommand};

/// Baton: run LLM agents and pipelines, and inspect their shared context.
#[derive(Parser)]
#[command(
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("BATON_GIT_COMMIT"), ")"),
    about
)]
struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run Baton locally: orchestrator and context store in one process,
    /// in memory, with the example agents.
    #[command(after_help = "Examples:
  baton up                                   the example agents on :50051 and :50052
  baton up --agents my-agents.yaml           your own agents file
  baton up --set orchestrator.runs.max_turns=20 --print-config")]
    Up(up::UpArgs),
    /// List the agents and groups of an orchestrator.
    #[command(after_help = "Examples:
  baton agents
  baton agents --json | jq -r .name
  baton agents --endpoint https://baton.example.com --ca-file ca.pem --api-key $KEY")]
    Agents(run::AgentsArgs),
    /// Run an agent and draw its event tree live.
    #[command(after_help = "Examples:
  baton run researcher \"the history of Rust\"
  baton run support \"order 42 arrived broken\" --approve
  baton run interviewer \"a trip\" --answer Lisbon
  baton run researcher \"tides\" --model local:qwen2.5 --set temperature=0 --max-turns 6
  baton run researcher \"tides\" --filter-max-depth 0  only the top-level conversation
  baton run researcher \"tides\" --max-depth 1         agents call agents one deep at most
  baton run researcher \"tides\" --json > events.jsonl
  baton run researcher \"tides\" --detach           then: baton runs watch RUN_ID")]
    Run(run::RunArgs),
    /// Talk with an agent: each line a message of one conversation.
    #[command(after_help = "Examples:
  baton chat chat                               a new conversation
  baton chat chat --conversation chat-0192…     continue one
  printf 'hi\\nand again\\n' | baton chat chat     from a pipe")]
    Chat(chat::ChatArgs),
    /// List, show and delete conversations.
    #[command(after_help = "Examples:
  baton conversations list
  baton conversations show ID --last 10
  baton conversations delete ID")]
    Conversations(conversations::ConversationsArgs),
    /// List, inspect, follow and cancel runs (detached ones too).
    #[command(after_help = "Examples:
  baton runs list
  baton runs watch RUN_ID
  baton runs cancel RUN_ID")]
    Runs(runs::RunsArgs),
    /// Run a dataset of cases against an agent and score it; compare two
    /// experiments (exit status 1 on a regression: the CI use).
    #[command(after_help = "Examples:
  baton eval deploy/config/evals/examples.jsonl
  baton eval cases.jsonl --agent support --repeat 5 --name main
  baton eval cases.jsonl --agent support --name pr-42 --junit eval.xml
  baton eval compare main pr-42 --junit compare.xml
  baton eval list
  baton eval show pr-42")]
    Eval(eval::EvalArgs),
    /// Your tenant's webhooks and dead letters.
    #[command(after_help = "Examples:
  baton webhooks create https://hooks.example.com/baton --event run.completed
  baton webhooks list
  baton webhooks rotate wh_0123…
  baton webhooks dead
  baton webhooks redeliver msg_0123…")]
    Webhooks(webhooks::WebhooksArgs),
    /// Your tenant's schedules: runs started at a cron expression's or an
    /// interval's ticks.
    #[command(after_help = "Examples:
  baton schedules create --agent researcher --input 'the news' --cron '0 9 * * MON-FRI' --tz Europe/Paris
  baton schedules create --agent assistant --input ping --every 15m
  baton schedules list
  baton schedules show sch_0123…
  baton schedules pause sch_0123…")]
    Schedules(schedules::SchedulesArgs),
    /// Run a pipeline from a YAML file and draw its steps live.
    #[command(after_help = "Examples:
  baton pipeline deploy/config/pipelines/research.yaml
  baton pipeline research.yaml --input topic=\"tide pools\" --deny
  baton pipeline research.yaml --json")]
    Pipeline(pipeline::PipelineArgs),
    /// Read, write and watch a context store's slots.
    #[command(after_help = "Examples (a trace id is 32 lowercase hex characters):
  baton store put $TRACE notes/plan \"step 1\" --ttl 10m
  baton store get $TRACE notes/plan
  baton store list $TRACE --prefix notes/
  baton store put-many $TRACE a=1 b=2
  baton store delete-many $TRACE --prefix notes/
  baton store watch $TRACE")]
    Store(store::StoreArgs),
    /// Print a shell completion script: `source <(baton completion bash)`,
    /// `baton completion zsh > "${fpath[1]}/_baton"`, `baton completion
    /// fish > ~/.config/fish/completions/baton.fish`. The script asks
    /// `baton` for candidates: `baton run res<TAB>` offers the agents of
    /// the orchestrator at --endpoint / BATON_ENDPOINT.
    #[command(after_help = "Examples:
  source <(baton completion bash)                 in ~/.bashrc
  baton completion zsh > \"${fpath[1]}/_baton\"
  baton completion fish > ~/.config/fish/completions/baton.fish
  baton run res<TAB>                              researcher (agents from the orchestrator)")]
    Completion {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

/// The connection flags every command takes, also before the command
/// (`baton --endpoint URL runs list`, as kubectl and gh take theirs).
const GLOBAL_FLAGS: [&str; 3] = ["--endpoint", "--api-key", "--ca-file"];

/// The command line, with connection flags given before the command moved
/// after it; a stray word after `run AGENT INPUT` says to quote the input.
fn parse() -> Args {
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut hoisted = Vec::new();
    let mut i = 1;
    while i < argv.len() {
        let arg = argv[i].to_string_lossy().into_owned();
        let flag = GLOBAL_FLAGS
            .iter()
            .find(|f| arg == **f || arg.starts_with(&format!("{f}=")));
        match flag {
            Some(f) if arg == *f && i + 1 < argv.len() => {
                hoisted.extend(argv.drain(i..i + 2));
            }
            Some(_) => hoisted.push(argv.remove(i)),
            None if arg.starts_with('-') => i += 1,
            // The command: the flags go after it.
            None => {
                argv.splice(i + 1..i + 1, std::mem::take(&mut hoisted));
                break;
            }
        }
    }
    argv.extend(hoisted);
    match Args::try_parse_from(&argv) {
        Ok(args) => args,
        Err(e) => {
            let run = argv.get(1).is_some_and(|a| a == "run");
            let word = e
                .get(clap::error::ContextKind::InvalidArg)
                .is_some_and(|a| !a.to_string().starts_with('-'));
            if run && word && e.kind() == clap::error::ErrorKind::UnknownArgument {
                let _ = e.print();
                eprintln!(
                    "  tip: quote an input of several words: baton run AGENT \"the history of Rust\""
                );
                std::process::exit(e.exit_code());
            }
            if e.use_stderr() {
                // clap's usage line names every argument that was given, an
                // environment variable's (BATON_ENDPOINT, BATON_API_KEY)
                // included, which reads as if it were required: the global
                // flags leave the usage line (`[OPTIONS]` covers them).
                eprint!("{}", without_global_flags(&e.render().to_string()));
                std::process::exit(e.exit_code());
            }
            e.exit()
        }
    }
}

/// `message` with the global flags (`--endpoint <ENDPOINT>`, …) taken out
/// of its usage lines.
fn without_global_flags(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for line in message.split_inclusive('\n') {
        if line.trim_start().starts_with("Usage:") {
            let mut line = line.to_owned();
            for flag in GLOBAL_FLAGS {
                let value = flag
                    .trim_start_matches('-')
                    .replace('-', "_")
                    .to_uppercase();
                line = line.replace(&format!(" {flag} <{value}>"), "");
            }
            out.push_str(&line);
        } else {
            out.push_str(line);
        }
    }
    out
}

fn main() -> std::process::ExitCode {
    // A shell asking for candidates (`COMPLETE=bash baton -- …`): answer
    // and exit, before any runtime starts.
    complete::answer_if_asked(<Args as clap::CommandFactory>::command);
    run_command()
}

#[tokio::main]
async fn run_command() -> std::process::ExitCode {
    baton_common::runtime::disable_transparent_huge_pages();
    let result = match parse().command {
        Cmd::Up(args) => Box::pin(up::run(args)).await,
        Cmd::Agents(args) => run::agents(args).await,
        Cmd::Run(args) => run::run(args).await,
        Cmd::Chat(args) => chat::chat(args).await,
        Cmd::Conversations(args) => conversations::run(args).await,
        Cmd::Pipeline(args) => pipeline::run(args).await,
        Cmd::Eval(args) => eval::run(args).await,
        Cmd::Webhooks(args) => webhooks::run(args).await,
        Cmd::Schedules(args) => schedules::run(args).await,
        Cmd::Runs(args) => runs::run(args).await,
        Cmd::Store(args) => store::run(args).await,
        Cmd::Completion { shell } => complete::registration(shell),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The reader went away (`| head`): stop quietly, as Unix tools do.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            std::process::ExitCode::SUCCESS
        }
        // Ctrl-C: what it did is printed already; 130, as a shell says.
        Err(e) if e.downcast_ref::<follow::Interrupted>().is_some() => {
            std::process::ExitCode::from(130)
        }
        Err(e) => {
            // One line a person can act on; the chain only when it adds to
            // it. Wrapped on a terminal.
            use std::io::IsTerminal as _;
            let message = e.to_string();
            // A message of several lines is laid out already.
            let width = (std::io::stderr().is_terminal() && !message.contains('\n'))
                .then(|| text::terminal_columns() - 1);
            match width {
                Some(width) => {
                    let mut line = String::from("error: ");
                    text::Wrap::new(7, "  ".into(), Some(width)).push(&message, &mut line);
                    eprintln!("{line}");
                }
                None => eprintln!("error: {message}"),
            }
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            let unauthenticated = e.chain().any(|c| {
                c.downcast_ref::<baton_client::Error>()
                    .is_some_and(|b| b.code() == tonic::Code::Unauthenticated)
            });
            let unreachable =
                e.chain()
                    .find_map(|c| match c.downcast_ref::<baton_client::Error>() {
                        Some(baton_client::Error::Connect { endpoint, .. }) => {
                            Some(endpoint.clone())
                        }
                        _ => None,
                    });
            if let Some(endpoint) = unreachable {
                eprintln!(
                    "  (nothing answered at {endpoint}: is `baton up` running? Otherwise point --endpoint at the service)"
                );
            }
            if unauthenticated {
                eprintln!(
                    "  (this orchestrator requires an API key: --api-key KEY or BATON_API_KEY)"
                );
            }
            std::process::ExitCode::FAILURE
        }
    }
}
