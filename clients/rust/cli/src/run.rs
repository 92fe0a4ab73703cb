//! `baton run` and `baton agents`: run an agent and draw its event tree live,
//! or list the agents.
//!
//! The tree view prints one line per event that matters to a person,
//! indented by depth; tool progress is drawn as a bar; approvals and input
//! requests are asked on the terminal and answered through the API (see
//! `follow`). `--json` prints every event as one JSON object per line
//! instead (prompts then go to stderr). Ctrl-C cancels the run and says
//! `cancelled`.

use baton_client::{OrchestratorClient, pb};
use clap::Args;
use serde_json::json;

/// `baton run` arguments.
#[derive(Args)]
pub struct RunArgs {
    /// The agent or group to run.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(agent_names))]
    agent: String,
    /// The input (quote it if it has spaces); `-` reads it from stdin.
    input: String,
    #[command(flatten)]
    pub(crate) target: Target,
    /// Print events as JSON lines.
    #[arg(long)]
    json: bool,
    /// Show only events at most this deep (0: the top-level conversation);
    /// the run itself goes as deep as `--max-depth` lets it. The request's
    /// `filter.max_depth`.
    #[arg(long, value_name = "N")]
    filter_max_depth: Option<u32>,
    /// Approve every approval without asking.
    #[arg(long, conflicts_with = "deny")]
    approve: bool,
    /// Deny every approval without asking.
    #[arg(long)]
    deny: bool,
    /// The initial run context, a JSON object.
    #[arg(long)]
    context: Option<String>,
    /// Start the run detached (it outlives this command), print its id and
    /// return; follow it with `baton runs watch`. Into a pipe or `$(…)` the
    /// id alone is printed.
    #[arg(long, conflicts_with_all = ["approve", "deny", "filter_max_depth"])]
    detach: bool,
    /// The answer to the run's next input request, instead of asking;
    /// repeat for several, in order.
    #[arg(long = "answer", value_name = "TEXT")]
    answers: Vec<String>,
    #[command(flatten)]
    steer: crate::steer::Steer,
}

/// Where the orchestrator is and how to authenticate (shared by the
/// orchestrator commands).
#[derive(Args)]
pub struct Target {
    /// The orchestrator's address (`http://host:port`, `https://host:port`
    /// for TLS, or `dns:///host:port` to balance over every address of the
    /// name).
    #[arg(
        long,
        env = "BATON_ENDPOINT",
        default_value = "http://127.0.0.1:50051",
        global = true
    )]
    pub(crate) endpoint: String,
    /// The API key, for an orchestrator that requires one (sent as
    /// `authorization: Bearer <key>`).
    #[arg(long, env = "BATON_API_KEY", hide_env_values = true, global = true)]
    pub(crate) api_key: Option<String>,
    /// For an `https://` endpoint: the CA (PEM) the server's certificate is
    /// checked against, instead of the system's roots.
    #[arg(long, env = "BATON_CA_FILE", global = true)]
    pub(crate) ca_file: Option<std::path::PathBuf>,
}

/// The TLS settings of `--ca-file`.
pub(crate) fn client_tls(ca_file: &Option<std::path::PathBuf>) -> baton_client::ClientTls {
    baton_client::ClientTls {
        ca_file: ca_file.clone(),
        ..Default::default()
    }
}

/// Refuses to send an API key in clear beyond this machine: `http://` (or
/// a bare `host:port`) to a host that is not loopback.
pub(crate) fn key_travels_safely(endpoint: &str, api_key: &Option<String>) -> anyhow::Result<()> {
    if api_key.is_none() {
        return Ok(());
    }
    let endpoint = baton_client::with_scheme(endpoint.to_owned());
    let Some(rest) = endpoint.strip_prefix("http://") else {
        return Ok(());
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.rsplit_once(':') {
        Some((h, _)) if !h.is_empty() => h,
        _ => authority,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    anyhow::ensure!(
        loopback,
        "refusing to send the API key in clear to {endpoint}: use https:// (with --ca-file for a private CA), or reach the service through localhost"
    );
    Ok(())
}

impl Target {
    /// A client of the orchestrator, with the API key if any.
    pub(crate) async fn connect(&self) -> anyhow::Result<OrchestratorClient> {
        key_travels_safely(&self.endpoint, &self.api_key)?;
        let client =
            OrchestratorClient::connect_with(self.endpoint.clone(), &client_tls(&self.ca_file))
                .await?;
        Ok(match &self.api_key {
            Some(key) => client.with_api_key(key)?,
            None => client,
        })
    }
}

/// `baton agents` arguments.
#[derive(Args)]
pub struct AgentsArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// Print one JSON object per agent and group.
    #[arg(long)]
    json: bool,
}

/// Lists agents and groups.
pub async fn agents(args: AgentsArgs) -> anyhow::Result<()> {
    let client = args.target.connect().await?;
    let list = client.list_agents().await?;
    if args.json {
        for a in &list.agents {
            crate::out::outln!(
                "{}",
                serde_json::json!({"kind": "agent", "name": a.name, "model": a.model, "description": a.description, "tools": a.tools, "handoffs": a.handoffs})
            )?;
        }
        for g in &list.groups {
            crate::out::outln!(
                "{}",
                serde_json::json!({"kind": "group", "name": g.name, "root": g.root, "members": g.members, "description": g.description})
            )?;
        }
        return Ok(());
    }
    // Name and model, then the description and what the agent may call on
    // lines of their own, cut to the terminal's width: kubectl-like, and
    // readable at 80 columns.
    let view = crate::view::View::default();
    let out = |line: String| crate::out::outln!("{}", view.fit(line));
    out("AGENTS".into())?;
    for a in &list.agents {
        let model = if a.model.is_empty() {
            "(default model)"
        } else {
            &a.model
        };
        out(format!("  {:<16} {model}", a.name))?;
        if !a.description.is_empty() {
            out(format!("      {}", a.description))?;
        }
        if !a.tools.is_empty() {
            out(format!("      tools: {}", a.tools.join(", ")))?;
        }
        if !a.handoffs.is_empty() {
            out(format!("      hands off to: {}", a.handoffs.join(", ")))?;
        }
    }
    if !list.groups.is_empty() {
        out("GROUPS".into())?;
        for g in &list.groups {
            out(format!(
                "  {:<16} root {} of [{}]",
                g.name,
                g.root,
                g.members.join(", ")
            ))?;
            if !g.description.is_empty() {
                out(format!("      {}", g.description))?;
            }
        }
    }
    Ok(())
}

/// Runs an agent, drawing its events; fails unless the run completes.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let (client, links) = crate::follow::with_links(args.target.connect().await?);
    let approval_mode = if args.approve {
        pb::ApprovalMode::AutoApprove
    } else if args.deny {
        pb::ApprovalMode::AutoDeny
    } else {
        pb::ApprovalMode::Ask
    };
    let (default_model, limits, settings) = args.steer.apply()?;
    let input = read_input(args.input)?;
    let request = pb::RunAgentRequest {
        default_model,
        limits,
        settings,
        agent: args.agent.clone(),
        input,
        run_context_json: args.context.clone().unwrap_or_default(),
        approval_mode: approval_mode as i32,
        filter: args.filter_max_depth.map(|d| pb::EventFilter {
            max_depth: Some(d),
            ..Default::default()
        }),
        detach: args.detach,
        ..Default::default()
    };
    let mut events = match client.run_agent(request).await {
        Ok(events) => events,
        Err(e) if e.code() == tonic::Code::InvalidArgument && e.field() == Some("agent") => {
            return Err(did_you_mean(&client, &args.agent, e).await);
        }
        Err(e) => return Err(e.into()),
    };
    if args.detach {
        // The first event is RunStarted: the run exists and goes on alone.
        let (run_id, trace_id) = crate::detach::started(&mut events).await?;
        let sentence =
            format!("run {run_id} started, detached (trace {trace_id}): baton runs watch {run_id}");
        let json = json!({"runId": run_id, "traceId": trace_id});
        crate::detach::detached(args.json, &json, &run_id, &sentence)?;
        return Ok(());
    }
    crate::follow::follow(
        &client,
        events,
        links,
        args.json,
        crate::follow::Answers {
            approvals: None,
            inputs: args.answers,
        },
        crate::follow::CtrlC::Cancel,
        crate::view::Mode::Tree,
    )
    .await
}

/// An unknown agent's error, with the nearest name (`did you mean …?`)
/// and the agents and groups there are (`error` as it is when they cannot
/// be listed).
pub(crate) async fn did_you_mean(
    client: &OrchestratorClient,
    agent: &str,
    error: baton_client::Error,
) -> anyhow::Error {
    match client.list_agents().await {
        Ok(list) => unknown_agent(agent, &list),
        Err(_) => error.into(),
    }
}

/// Whether `list` has an agent or a group called `name`.
pub(crate) fn is_listed(list: &pb::ListAgentsResponse, name: &str) -> bool {
    list.agents.iter().any(|a| a.name == name) || list.groups.iter().any(|g| g.name == name)
}

/// `no agent or group is called "reseacher": did you mean "researcher"?`
/// and, under it, the agents and groups of `list`, wrapped as on an
/// 80-column terminal (`baton run` and `baton chat` of an unknown agent).
pub(crate) fn unknown_agent(agent: &str, list: &pb::ListAgentsResponse) -> anyhow::Error {
    let agents: Vec<&str> = list.agents.iter().map(|a| a.name.as_str()).collect();
    let groups: Vec<&str> = list.groups.iter().map(|g| g.name.as_str()).collect();
    let nearest = agents
        .iter()
        .chain(&groups)
        .map(|name| (distance(agent, name), *name))
        .filter(|(d, name)| *d <= 2.max(name.len() / 3))
        .min();
    let mut message = format!("no agent or group is called {agent:?}");
    if let Some((_, name)) = nearest {
        message.push_str(&format!(": did you mean {name:?}?"));
    }
    // Wrapped as on an 80-column terminal, under the names.
    for (what, names) in [("agents", &agents), ("groups", &groups)] {
        if names.is_empty() {
            continue;
        }
        let head = format!("\n  {what}: ");
        message.push_str(&head);
        let mut wrap = crate::text::Wrap::new(head.len() - 1, " ".repeat(10), Some(79));
        wrap.push(&names.join(", "), &mut message);
    }
    anyhow::anyhow!(message)
}

/// Edits (insert, delete, replace a character) from `a` to `b`.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (prev + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The run's input: `input`, or stdin's text when it is `-`.
pub(crate) fn read_input(input: String) -> anyhow::Result<String> {
    if input != "-" {
        return Ok(input);
    }
    use anyhow::Context as _;
    use std::io::Read as _;
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("cannot read the input from stdin")?;
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}

/// How long completing an agent waits for the orchestrator: a shell must
/// not hang.
const COMPLETION_DEADLINE: std::time::Duration = std::time::Duration::from_millis(800);

/// The value of a connection flag on the line being completed
/// (`--endpoint URL` or `--endpoint=URL`), else its environment variable.
fn completion_flag(words: &[String], name: &str, env: &str) -> Option<String> {
    let long = format!("--{name}");
    let mut found = None;
    for (i, w) in words.iter().enumerate() {
        if *w == long {
            found = words.get(i + 1).cloned();
        } else if let Some(v) = w.strip_prefix(&format!("{long}=")) {
            found = Some(v.to_owned());
        }
    }
    found.or_else(|| std::env::var(env).ok().filter(|v| !v.is_empty()))
}

/// The agents and groups starting with `current`; none when the
/// orchestrator does not answer within [`COMPLETION_DEADLINE`]. Prints
/// nothing: a shell asked (`baton completion`).
pub(crate) fn agent_names(
    current: &std::ffi::OsStr,
) -> Vec<clap_complete::engine::CompletionCandidate> {
    let Some(prefix) = current.to_str() else {
        return Vec::new();
    };
    // The words of the line, after clap_complete's `--`.
    let words: Vec<String> = std::env::args().skip_while(|a| a != "--").skip(1).collect();
    let endpoint = completion_flag(&words, "endpoint", "BATON_ENDPOINT")
        .unwrap_or_else(|| "http://127.0.0.1:50051".to_owned());
    let target = Target {
        endpoint,
        api_key: completion_flag(&words, "api-key", "BATON_API_KEY"),
        ca_file: completion_flag(&words, "ca-file", "BATON_CA_FILE").map(Into::into),
    };
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    let names = runtime.block_on(async {
        let list = tokio::time::timeout(COMPLETION_DEADLINE, async {
            target
                .connect()
                .await?
                .list_agents()
                .await
                .map_err(anyhow::Error::from)
        })
        .await;
        match list {
            Ok(Ok(list)) => list
                .agents
                .into_iter()
                .map(|a| (a.name, a.description))
                .chain(list.groups.into_iter().map(|g| (g.name, g.description)))
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        }
    });
    // Dropping a runtime with a connect still under way must not wait.
    runtime.shutdown_background();
    names
        .into_iter()
        .filter(|(name, _)| name.starts_with(prefix))
        .map(|(name, description)| {
            let candidate = clap_complete::engine::CompletionCandidate::new(name);
            match description.lines().next() {
                Some(line) if !line.is_empty() => candidate.help(Some(line.to_owned().into())),
                _ => candidate,
            }
        })
        .collect()
}
