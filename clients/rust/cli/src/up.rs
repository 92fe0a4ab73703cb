//! `baton up`: the orchestrator and the context store in one process, on one
//! in-memory store, serving the example agents. No Redis, no API key.

use std::{io::IsTerminal as _, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;
use baton_orchestrator::{app::Orchestrator, run::record::RunRecord, run::shared::Shared};
use baton_store::{ContextStore, memory::MemoryStore};
use clap::Args;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// The example agents, used when no agents file is given or found.
const EXAMPLE_AGENTS: &str = include_str!("../../../../deploy/config/agents.yaml");

/// `baton up` arguments.
#[derive(Args)]
pub struct UpArgs {
    /// The orchestrator's address.
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// The context store's address.
    #[arg(long, default_value = "127.0.0.1:50052")]
    store_listen: SocketAddr,
    /// An agents file; default: deploy/config/agents.yaml when it exists,
    /// else the built-in copy of it.
    #[arg(long)]
    agents: Option<PathBuf>,
    /// Serve the orchestrator's Prometheus metrics here (`/metrics`).
    #[arg(long, default_value = "")]
    metrics_listen: String,
    /// Serve the context store's Prometheus metrics here.
    #[arg(long, default_value = "")]
    store_metrics_listen: String,
    /// Require API keys from this file (lines of `<tenant> <key>`; see the
    /// orchestrator's `auth.api_keys_file`). Default: no authentication.
    #[arg(long)]
    api_keys_file: Option<PathBuf>,
    /// A setting of either service, `orchestrator.<path>=value` or
    /// `store.<path>=value`, with the paths of their config files (e.g.
    /// `store.limits.max_value_bytes=2097152`,
    /// `orchestrator.runs.max_turns=20`); repeatable.
    #[arg(long = "set", value_name = "SERVICE.PATH=VALUE")]
    sets: Vec<String>,
    /// Print the effective config of both services (TOML) and exit.
    #[arg(long)]
    print_config: bool,
    /// How the log lines on stderr look: `text` — at a terminal, one line
    /// per event fitting its width (time, level, message, ids shortened),
    /// elsewhere tracing's full text lines — or `json` (one object per
    /// line, for machines). Same as `--set orchestrator.log.format=…`.
    #[arg(long, value_name = "text|json")]
    log_format: Option<baton_common::logging::LogFormat>,
}

/// The default log settings of `baton up`: its services' lines at `info`,
/// the rest at `warn`; no audit log (one process on a developer's machine).
const LOG_LEVEL: &str = "warn,baton_orchestrator=info,baton_context_store=info,baton_store=info";

/// Settings of the two services that `baton up` decides itself, by path:
/// `--set` refuses them (saying why) and `--print-config` shows why instead
/// of a value.
const FIXED: &[(&str, &str)] = &[
    (
        "orchestrator.worker_threads",
        "baton up runs both services on one runtime",
    ),
    (
        "orchestrator.store",
        "the orchestrator uses baton up's in-process context store (its limits are store.limits)",
    ),
    (
        "store.worker_threads",
        "baton up runs both services on one runtime",
    ),
    (
        "store.backend",
        "baton up keeps the context store in memory (Redis: run baton-context-store)",
    ),
    (
        "store.redis",
        "baton up keeps the context store in memory (Redis: run baton-context-store)",
    ),
    (
        "store.log",
        "baton up logs once for both services: set orchestrator.log",
    ),
];

/// Why `path` (`service.a.b`) may not be set, if it may not.
fn fixed(path: &str) -> Option<&'static str> {
    FIXED.iter().find_map(|(prefix, why)| {
        (path == *prefix || path.starts_with(&format!("{prefix}."))).then_some(*why)
    })
}

/// A service's config as TOML, each setting `baton up` fixes replaced by a
/// comment saying why.
fn shown(toml: &str, service: &str) -> String {
    let mut out = String::new();
    let mut table = String::new();
    let mut skipping = false;
    for line in toml.lines() {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = name.to_owned();
            let why = fixed(&format!("{service}.{name}"));
            let parent_fixed = why.is_some() && skipping;
            skipping = why.is_some();
            if let Some(why) = why
                && !parent_fixed
            {
                out.push_str(&format!("# [{name}]: {why}\n"));
            }
            if !skipping {
                out.push_str(line);
                out.push('\n');
            }
            continue;
        }
        if skipping {
            if line.trim().is_empty() {
                out.push('\n');
            }
            continue;
        }
        let key = line.split(" = ").next().unwrap_or_default();
        let path = if table.is_empty() {
            format!("{service}.{key}")
        } else {
            format!("{service}.{table}.{key}")
        };
        match (line.contains(" = "), fixed(&path)) {
            (true, Some(why)) => out.push_str(&format!("# {key}: {why}\n")),
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    // One blank line between tables, where dropped ones left more.
    while out.contains("\n\n\n") {
        out = out.replace("\n\n\n", "\n\n");
    }
    out
}

/// Runs both services until Ctrl-C or SIGTERM.
pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let default_file = PathBuf::from("deploy/config/agents.yaml");
    let agents_file = match &args.agents {
        Some(p) => p.clone(),
        None if default_file.is_file() => default_file,
        // The built-in copy.
        None => PathBuf::new(),
    };
    let mut orch_config = baton_orchestrator::config::Config {
        listen: args.listen,
        agents_file,
        ..Default::default()
    };
    orch_config.store.mode = baton_orchestrator::config::StoreMode::Memory;
    orch_config.telemetry.metrics_listen = args.metrics_listen;
    orch_config.log.level = LOG_LEVEL.into();
    orch_config.log.audit = "off".into();
    // A laptop's receiver runs on the laptop: webhooks may go to this
    // machine too (a server allows only public hosts unless told).
    orch_config.webhooks.allowed_hosts = ["*", "localhost", "127.0.0.1", "::1"]
        .map(String::from)
        .to_vec();
    // Trying schedules out: an interval down to ten seconds.
    orch_config.schedules.min_interval = std::time::Duration::from_secs(10);
    if let Some(format) = args.log_format {
        orch_config.log.format = format;
    }
    if let Some(file) = args.api_keys_file {
        orch_config.auth.api_keys_file = file;
    }
    let mut store_config = baton_context_store::config::Config {
        listen: args.store_listen,
        backend: baton_context_store::config::Backend::Memory,
        ..Default::default()
    };
    // One process on a developer's machine, listening on loopback: the
    // store's port takes calls without credentials (its start warns).
    store_config.auth.mode = baton_context_store::auth::AuthMode::None;
    store_config.telemetry.metrics_listen = args.store_metrics_listen;
    let (mut orch_sets, mut store_sets) = (Vec::new(), Vec::new());
    for set in &args.sets {
        let path = set.split_once('=').map_or(set.as_str(), |(p, _)| p);
        if let Some(why) = fixed(path) {
            anyhow::bail!("--set {path}: not a setting of baton up: {why}");
        }
        if let Some(rest) = set.strip_prefix("orchestrator.") {
            orch_sets.push(rest.to_owned());
        } else if let Some(rest) = set.strip_prefix("store.") {
            store_sets.push(rest.to_owned());
        } else {
            anyhow::bail!("--set {set:?}: the path starts with orchestrator. or store.");
        }
    }
    let orch_config = baton_common::config::with_sets(&orch_config, &orch_sets)
        .context("--set orchestrator.…")?;
    let store_config =
        baton_common::config::with_sets(&store_config, &store_sets).context("--set store.…")?;
    orch_config
        .validate()
        .map_err(|e| anyhow::anyhow!("orchestrator config: {e}"))?;
    store_config
        .validate()
        .map_err(|e| anyhow::anyhow!("store config: {e}"))?;
    if args.print_config {
        let orch = baton_common::config::to_toml(&orch_config).map_err(|e| anyhow::anyhow!(e))?;
        let store = baton_common::config::to_toml(&store_config).map_err(|e| anyhow::anyhow!(e))?;
        let orch = shown(&orch, "orchestrator").replace(
            "agents_file = \"\"\n",
            "agents_file = \"\" # the built-in example agents\n",
        );
        crate::out::outln!("# baton up: the orchestrator (--set orchestrator.PATH=VALUE)\n{orch}")?;
        crate::out::outln!(
            "# baton up: the context store (--set store.PATH=VALUE)\n{}",
            shown(&store, "store")
        )?;
        return Ok(());
    }
    // One logger for the process: the orchestrator's log settings, its
    // lines on stderr (stdout is the banner; `log.audit = "stdout"` puts
    // the audit lines there too).
    // At a terminal the lines are for a person: one each, fitting it.
    let _telemetry = if std::io::stderr().is_terminal() {
        baton_common::logging::init_stderr_for_people(
            "baton",
            &orch_config.log,
            crate::text::terminal_columns(),
        )
    } else {
        baton_common::logging::init_stderr("baton", &orch_config.log)
    }
    .map_err(|e| anyhow::anyhow!("orchestrator.log: {e}"))?;
    let (source, yaml) = if orch_config.agents_file.as_os_str().is_empty() {
        (
            "the built-in example agents".to_owned(),
            EXAMPLE_AGENTS.to_owned(),
        )
    } else {
        let p = &orch_config.agents_file;
        (
            p.display().to_string(),
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?,
        )
    };
    let catalog = Arc::new(
        baton_orchestrator::catalog::Catalog::from_yaml(&yaml)
            .map_err(|e| anyhow::anyhow!("{source}: {e}"))?,
    );
    // Spans go where OTEL_EXPORTER_OTLP_ENDPOINT says, when it is set.
    let tracing = baton_orchestrator::build_tracing(&orch_config)?;
    let store: Arc<dyn ContextStore> = Arc::new(MemoryStore::new(store_config.limits.clone()));

    let orch_listener = tokio::net::TcpListener::bind(orch_config.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (is Baton already up?)",
                orch_config.listen
            )
        })?;
    let store_listener = tokio::net::TcpListener::bind(store_config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", store_config.listen))?;
    let shutdown = CancellationToken::new();
    let orch_addr = orch_listener.local_addr()?;
    let store_addr = store_listener.local_addr()?;

    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let summary = format!(
        "{}, {} from {source}",
        plural(catalog.agents.len(), "agent"),
        plural(catalog.groups.len(), "group")
    );
    // The hint names an agent of the loaded file: the walk-through's
    // researcher when it is there.
    let hint = if catalog.agents.contains_key("researcher") {
        Some(("researcher".to_owned(), "the history of Rust"))
    } else {
        catalog.agents.keys().next().map(|a| (a.clone(), "hello"))
    };

    // The orchestrator's core, built here (as `baton_orchestrator::serve`
    // does) so that Ctrl-C can see its runs.
    let tasks = TaskTracker::new();
    let services = Shared::new(
        catalog,
        store.clone(),
        orch_config.runs.clone(),
        tracing,
        &|name| baton_orchestrator::secret_from_env(name, &|k| std::env::var(k).ok()),
    )
    .map_err(|e| anyhow::anyhow!(e))?
    .with_quotas(orch_config.quotas.clone());
    let core = Orchestrator::new(services, shutdown.clone(), tasks.clone());
    let grace = orch_config.shutdown_grace;
    let mut orchestrator = tokio::spawn({
        let (core, store, shutdown) = (core.clone(), store.clone(), shutdown.clone());
        async move {
            baton_orchestrator::serve_core(
                core,
                store,
                &orch_config,
                orch_listener,
                shutdown,
                tasks,
            )
            .await
        }
    });
    let mut context_store = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { baton_context_store::serve(store, &store_config, store_listener, shutdown).await }
    });
    // The banner only once both services answer their health checks; a
    // service that fails to start ends `baton up` at once, with its cause.
    let ready = async {
        tokio::join!(
            serving(orch_addr, "baton.v1.Orchestrator"),
            serving(store_addr, "baton.v1.ContextStore")
        )
    };
    tokio::select! {
        (a, b) = ready => {
            a.context("orchestrator")?;
            b.context("context store")?;
        }
        ended = &mut orchestrator => {
            shutdown.cancel();
            return stopped(ended).context("the orchestrator did not start");
        }
        ended = &mut context_store => {
            shutdown.cancel();
            return stopped(ended).context("the context store did not start");
        }
    }
    println!("Baton is up: {summary}");
    println!("  orchestrator   http://{orch_addr}   (baton agents, baton run …)");
    println!("  web console    http://{orch_addr}/   (the HTTP API: /v1/openapi.json)");
    println!("  context store  http://{store_addr}   (baton store …)");
    println!("  store backend  in memory (lost on exit)");
    if let Some((agent, input)) = hint {
        println!("Try:  baton run {agent} \"{input}\"");
    }
    println!("Ctrl-C stops it.");
    let at_once = Arc::new(std::sync::atomic::AtomicBool::new(false));
    tokio::spawn(stop_on_signals(
        core,
        shutdown.clone(),
        grace,
        at_once.clone(),
    ));

    // Either ending (an error, or Ctrl-C) stops the other.
    let (a, b) = tokio::join!(
        async {
            let r = stopped(orchestrator.await);
            shutdown.cancel();
            r
        },
        async {
            let r = stopped(context_store.await);
            shutdown.cancel();
            r
        }
    );
    a.context("orchestrator")?;
    b.context("context store")?;
    if at_once.load(std::sync::atomic::Ordering::SeqCst) {
        // Stopped by a second Ctrl-C: 130, as a shell says for Ctrl-C.
        std::process::exit(130);
    }
    Ok(())
}

/// What a reason says to the run's clients when `baton up` cancels it.
const NOBODY_ANSWERS: &str = "baton up is stopping: it does not wait for a person";

/// Stops on the first Ctrl-C (or SIGTERM): says what it waits for and how
/// long; runs waiting for a person are cancelled, now and during the grace,
/// instead of holding it. A second signal stops at once: every run still
/// running is cancelled, and the process exits 130.
async fn stop_on_signals(
    core: Orchestrator,
    shutdown: CancellationToken,
    grace: Duration,
    at_once: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut signals = Signals::listen();
    signals.next().await;
    let runs = core.runs();
    let (waiting, working): (Vec<_>, Vec<_>) = runs
        .running_runs()
        .into_iter()
        .partition(|r| r.waits_for_people());
    let names = |runs: &[Arc<RunRecord>]| {
        let mut names: Vec<&str> = runs.iter().map(|r| r.target.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        // A line that fits a terminal: the first three names.
        if names.len() > 3 {
            names.truncate(3);
            names.push("…");
        }
        names.join(", ")
    };
    let plural = |n: usize| if n == 1 { "run" } else { "runs" };
    let _ = crate::out::outln!("Stopping.");
    if !waiting.is_empty() {
        let _ = crate::out::outln!(
            "  cancelled {} {} waiting for a person ({})",
            waiting.len(),
            plural(waiting.len()),
            names(&waiting)
        );
        for r in &waiting {
            r.cancel(NOBODY_ANSWERS);
        }
    }
    if !working.is_empty() {
        let _ = crate::out::outln!(
            "  waiting up to {} for {} {} to finish ({})\n  Ctrl-C again stops at once",
            baton_common::config::duration::format(grace),
            working.len(),
            plural(working.len()),
            names(&working)
        );
    }
    shutdown.cancel();
    loop {
        tokio::select! {
            () = signals.next() => break,
            () = tokio::time::sleep(Duration::from_millis(100)) => {
                // A run that comes to wait for a person does not hold the
                // shutdown either.
                for r in runs.running_runs() {
                    if r.waits_for_people() {
                        r.cancel(NOBODY_ANSWERS);
                    }
                }
            }
        }
    }
    at_once.store(true, std::sync::atomic::Ordering::SeqCst);
    let left = runs.running_runs();
    let _ = crate::out::outln!(
        "Stopped at once: cancelled {} {}.",
        left.len(),
        plural(left.len())
    );
    for r in &left {
        r.cancel("baton up stopped at once");
    }
    // Their terminal events have a moment to reach their clients.
    let until = tokio::time::Instant::now() + Duration::from_millis(500);
    while runs.running() > 0 && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::process::exit(130);
}

/// SIGINT (Ctrl-C) and SIGTERM, each time one comes.
struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Self {
                int: signal(SignalKind::interrupt()).expect("SIGINT handler"),
                term: signal(SignalKind::terminate()).expect("SIGTERM handler"),
            }
        }
        #[cfg(not(unix))]
        Self {}
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// A service task's outcome: its own error, or its panic.
fn stopped(ended: Result<anyhow::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
    ended.map_err(|e| anyhow::anyhow!("it crashed: {e}"))?
}

/// Waits until the service at `addr` answers its health check `SERVING`
/// (up to 60 s).
async fn serving(addr: std::net::SocketAddr, service: &str) -> anyhow::Result<()> {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let endpoint = format!("http://{addr}");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let answer = async {
            let channel = tonic::transport::Endpoint::from_shared(endpoint.clone())?
                .connect()
                .await?;
            let status = HealthClient::new(channel)
                .check(HealthCheckRequest {
                    service: service.to_owned(),
                })
                .await?
                .into_inner()
                .status;
            anyhow::Ok(status)
        };
        if let Ok(1) = answer.await {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{service} on {addr} did not report SERVING within 60 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
