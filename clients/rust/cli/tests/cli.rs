//! The `baton store` commands, run as a person would, against a real store.

use std::process::{Command, Output};

use baton_context_store::config::Backend;
use baton_e2e::{RedisServer, StoreServer};

fn baton(endpoint: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["store", "--endpoint", endpoint])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn baton");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or_default())
        .expect("write stdin");
    drop(input);
    child.wait_with_output().expect("baton output")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_commands_round_trip_and_report_errors() {
    let redis = RedisServer::start().expect("redis-server");
    let server = StoreServer::start(StoreServer::config(Backend::Redis, Some(redis.url())))
        .await
        .expect("store");
    let ep = server.endpoint();
    let t = "4bf92f3577b34da6a3ce929d0e0e4736";
    let endpoint = ep.clone();
    let trace = t.to_owned();
    tokio::task::spawn_blocking(move || {
        let ep = endpoint.as_str();
        let t = trace.as_str();
        let put = json(&baton(
            ep,
            &[
                "put",
                t,
                "notes/plan",
                "step 1",
                "--ttl",
                "10m",
                "--content-type",
                "text/plain",
            ],
            None,
        ));
        assert_eq!(put["version"], 1);
        let put = json(&baton(ep, &["put", t, "raw", "-"], Some(b"from stdin")));
        assert_eq!(put["version"], 2);

        let got = baton(ep, &["get", t, "raw"], None);
        assert_eq!(got.stdout, b"from stdin");
        // On a terminal the value ends its line.
        let shown = on_terminal(&format!("store --endpoint {ep} get {t} raw"), &[]);
        assert_eq!(shown, "from stdin\r\n");
        let meta = json(&baton(ep, &["get", t, "notes/plan", "--meta"], None));
        assert_eq!(meta["contentType"], "text/plain");
        assert_eq!(meta["sizeBytes"], 6);
        // A value given as text is stored as text; stdin stays bytes.
        let other = "5cf92f3577b34da6a3ce929d0e0e4736";
        json(&baton(ep, &["put", other, "note", "hello"], None));
        let meta = json(&baton(ep, &["get", other, "note", "--meta"], None));
        assert_eq!(meta["contentType"], "text/plain; charset=utf-8");
        let meta = json(&baton(ep, &["get", t, "raw", "--meta"], None));
        assert_eq!(meta["contentType"], "application/octet-stream");

        let list = baton(ep, &["list", t, "--prefix", "notes/"], None);
        let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&list.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(lines.len(), 2, "one slot, then usage");
        assert_eq!(lines[0]["key"], "notes/plan");
        assert_eq!(lines[1]["usedKeys"], 2);

        let stale = baton(ep, &["put", t, "raw", "x", "--expected-version", "1"], None);
        assert!(!stale.status.success());
        let err = String::from_utf8_lossy(&stale.stderr);
        assert!(
            err.starts_with("error: ABORTED: expected_version:"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "one line, no backtrace: {err}");

        let bad = baton(ep, &["get", "NOT-A-TRACE", "k"], None);
        assert!(String::from_utf8_lossy(&bad.stderr).contains("INVALID_ARGUMENT: trace_id"));

        assert_eq!(json(&baton(ep, &["delete", t, "raw"], None))["version"], 3);

        // Batches: one line per entry, in order; all or nothing.
        let many = baton(ep, &["put-many", t, "b/1=one", "b/2=two=2", "c=3"], None);
        let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&many.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        let versions: Vec<_> = lines.iter().map(|l| l["version"].clone()).collect();
        assert_eq!(versions, vec![4, 5, 6]);
        assert_eq!(lines[1]["key"], "b/2");
        assert_eq!(baton(ep, &["get", t, "b/2"], None).stdout, b"two=2");
        let twice = baton(ep, &["put-many", t, "d=1", "d=2"], None);
        let err = String::from_utf8_lossy(&twice.stderr);
        assert!(err.contains("entries[1].key"), "{err}");
        let gone = json(&baton(ep, &["delete-many", t, "b/1", "absent"], None));
        assert_eq!(gone["deleted"], 1);
        let gone = json(&baton(ep, &["delete-many", t, "--prefix", "b/"], None));
        assert_eq!(
            (gone["deleted"].clone(), gone["version"].clone()),
            (1.into(), 8.into())
        );
        assert!(
            !baton(ep, &["delete-many", t], None).status.success(),
            "keys or --prefix"
        );
        assert_eq!(json(&baton(ep, &["clear", t], None))["deleted"], 2);
        let missing = baton(ep, &["get", t, "notes/plan"], None);
        assert!(String::from_utf8_lossy(&missing.stderr).contains("NOT_FOUND"));
    })
    .await
    .expect("cli checks");
    server.shutdown().await.expect("shutdown");
}

/// `baton up` as a newcomer runs it, then `baton agents` and `baton run`
/// against it, as the README's walk-through does.
/// What `baton ARGS` shows on a pseudo-terminal of 60 columns (made by
/// util-linux `script`), with `env` set.
fn on_terminal(args: &str, env: &[(&str, &str)]) -> String {
    let mut script = Command::new("script");
    script
        .arg("-qec")
        .arg(format!("{} {args}", env!("CARGO_BIN_EXE_baton")))
        .arg("/dev/null")
        .env("COLUMNS", "60")
        .stdin(std::process::Stdio::null());
    for (k, v) in env {
        script.env(k, v);
    }
    let out = script
        .output()
        .expect("script (util-linux) runs the CLI on a pseudo-terminal");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn up_then_agents_and_run() {
    use std::io::BufRead;
    let mut up = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "up",
            "--listen",
            "127.0.0.1:0",
            "--store-listen",
            "127.0.0.1:0",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn baton up");
    let mut lines = std::io::BufReader::new(up.stdout.take().expect("stdout")).lines();
    let mut endpoint = String::new();
    let mut store = String::new();
    for line in lines.by_ref() {
        let line = line.expect("line");
        let field = |l: &str| l.split_whitespace().nth(1).expect("address").to_owned();
        if line.trim_start().starts_with("orchestrator") {
            endpoint = field(&line);
        }
        if line.trim_start().starts_with("context store") {
            store = line.split_whitespace().nth(2).expect("address").to_owned();
            break;
        }
    }
    assert!(endpoint.starts_with("http://127.0.0.1:"), "{endpoint}");
    std::thread::spawn(move || for _ in lines {});

    let run = |args: &[&str], stdin: &[u8]| {
        use std::io::Write;
        let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(args)
            .env("BATON_ENDPOINT", &endpoint)
            .env("BATON_STORE_ENDPOINT", &store)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn baton");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin)
            .expect("stdin");
        child.wait_with_output().expect("output")
    };
    // On a terminal (a pseudo-terminal made by `script`): text streams in,
    // progress bars are redrawn in place, lines fit the width, emoji.
    let screen = on_terminal(
        "run researcher 'the history of Rust'",
        &[("BATON_ENDPOINT", &endpoint), ("NO_COLOR", "1")],
    );
    assert!(
        screen.contains("💬 researcher: Let me look into"),
        "{screen}"
    );
    assert!(
        screen.contains("\r\x1b[2K"),
        "progress redrawn in place: {screen:?}"
    );
    assert!(screen.contains("✅ completed"), "{screen}");
    for line in screen.split(['\n', '\r']) {
        let visible = line.replace("\x1b[2K", "");
        assert!(
            visible.chars().count() <= 60,
            "fits 60 columns: {visible:?}"
        );
    }

    let agents = run(&["agents"], b"");
    let text = String::from_utf8_lossy(&agents.stdout);
    assert!(
        text.contains("researcher") && text.contains("support"),
        "{text}"
    );
    // `baton agents` on a terminal fits it too.
    let listed = on_terminal("agents", &[("BATON_ENDPOINT", &endpoint)]);
    assert!(listed.contains("Researches a topic"), "{listed}");
    for line in listed.split(['\n', '\r']) {
        assert!(line.chars().count() <= 60, "fits 60 columns: {line:?}");
    }

    let tree = run(&["run", "researcher", "the history of Rust"], b"");
    assert!(
        tree.status.success(),
        "{}",
        String::from_utf8_lossy(&tree.stderr)
    );
    let text = String::from_utf8_lossy(&tree.stdout);
    assert!(
        text.contains("\n    ● fact_checker [root.summarizer.1.fact_checker.1]"),
        "indented by depth:\n{text}"
    );
    assert!(
        text.contains("[####################] 100%"),
        "progress bars:\n{text}"
    );
    // Into a pipe: plain markers, no emoji or colour codes, and the answer
    // once (the run's completion does not repeat the last message).
    assert!(text.contains("\n> researcher: Research done."), "{text}");
    assert!(text.ends_with("\ncompleted\n"), "{text}");
    assert!(!text.contains('✅') && !text.contains('💬') && !text.contains('\u{1b}'));
    assert_eq!(text.matches("Research done.").count(), 1, "{text}");

    let approved = run(&["run", "support", "order 42 is broken"], b"y\n");
    let text = String::from_utf8_lossy(&approved.stdout);
    assert!(text.contains("⇢ handoff triage → billing"), "{text}");
    // The question goes to stderr, never into the (redirectable) output.
    let asked = String::from_utf8_lossy(&approved.stderr);
    assert!(asked.contains("approve write_context"), "{asked}");
    assert!(!text.contains("[y/N]"), "{text}");
    // Nobody to answer (stdin closed) and no flag: a clear failure, not a
    // silent denial.
    let unanswered = run(&["run", "support", "order 43 is broken"], b"");
    assert!(!unanswered.status.success());
    let err = String::from_utf8_lossy(&unanswered.stderr);
    assert!(
        err.contains("stdin is closed: answer it with --approve or --deny"),
        "{err}"
    );
    // A budget's raise is asked as an approval, said plainly.
    let raised = run(&["run", "frugal", "tides"], b"y\n");
    let asked = String::from_utf8_lossy(&raised.stderr);
    assert!(
        asked.contains("raise the budget of agent frugal in root by 1000 tokens (5"),
        "{asked}"
    );
    // Some of it left, too little for the next call: too small, not spent.
    let shown = String::from_utf8_lossy(&raised.stdout);
    let said = regex::Regex::new(
        r"\n! frugal: budget too small \(agent frugal in root\): the next call needs \d+ of the 85 tokens left \(515/600 spent\) → asks for more\n",
    )
    .expect("regex");
    assert!(said.is_match(&shown), "{shown}");
    assert!(
        shown.contains("> frugal: Both sources agree: Checked: "),
        "{shown}"
    );
    // Input requests answered from flags.
    let answered = run(&["run", "interviewer", "trip", "--answer", "Oslo"], b"");
    assert!(
        String::from_utf8_lossy(&answered.stdout).contains("Planning a trip to Oslo."),
        "{}",
        String::from_utf8_lossy(&answered.stderr)
    );
    assert!(
        text.contains("✔ approved write_context"),
        "no internal ids: {text}"
    );
    assert!(
        text.contains("> billing: Done. wrote refunds/last"),
        "{text}"
    );

    let json = run(&["run", "interviewer", "trip", "--json"], b"Lisbon\n");
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&json.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    // The proto3 JSON mapping, as the HTTP face sends events.
    assert_eq!(
        events.last().expect("events")["runCompleted"]["output"],
        "Planning a trip to Lisbon."
    );
    assert!(
        events
            .iter()
            .all(|e| e["traceId"].as_str().is_some_and(|t| t.len() == 32))
    );
    assert_eq!(events[0]["seq"], "1", "64-bit integers are strings");

    // A reader that stops after one line (`| head -1`) ends the CLI quietly.
    let mut piped = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["run", "researcher", "x", "--json"])
        .env("BATON_ENDPOINT", &endpoint)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn baton");
    let mut first = String::new();
    std::io::BufReader::new(piped.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("one line");
    // The pipe is closed now: the reader was dropped with its BufReader.
    let out = piped.wait_with_output().expect("exit");
    assert!(first.contains("\"runStarted\""), "{first}");
    assert!(
        out.status.success(),
        "a closed pipe is not an error: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "and prints nothing: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The example pipeline: research, two analysts, a writer.
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../deploy/config/pipelines/research.yaml"
    );
    let pipeline = run(&["pipeline", file, "--json"], b"");
    assert!(
        pipeline.status.success(),
        "{}",
        String::from_utf8_lossy(&pipeline.stderr)
    );
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&pipeline.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let done = events
        .iter()
        .find_map(|e| e.get("pipelineCompleted"))
        .expect("pipelineCompleted");
    assert_eq!(done["success"], true);
    assert_eq!(
        done["succeeded"],
        serde_json::json!(["research", "economics", "people", "report"])
    );
    assert!(events.iter().any(|e| e.get("stepStarted").is_some()
        && e["contextId"] == "root.report"
        && e["depth"] == 1));
    // A slot seeded from the command line, over the file's.
    let seeded = run(
        &["pipeline", file, "--json", "--input", "topic=tide pools"],
        b"",
    );
    let written: Vec<serde_json::Value> = String::from_utf8_lossy(&seeded.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .filter(|e: &serde_json::Value| {
            e.get("stepStarted").is_some() || e.get("runCompleted").is_some()
        })
        .collect();
    assert!(
        written
            .last()
            .and_then(|e| e["runCompleted"]["output"].as_str())
            .is_some_and(|o| o.contains("tide pools")),
        "{written:?}"
    );
    let agents_json = run(&["agents", "--json"], b"");
    let first: serde_json::Value = serde_json::from_str(
        String::from_utf8_lossy(&agents_json.stdout)
            .lines()
            .next()
            .expect("a line"),
    )
    .expect("json");
    assert_eq!(first["kind"], "agent");
    let version = run(&["--version"], b"");
    assert!(
        String::from_utf8_lossy(&version.stdout).contains("(commit "),
        "{}",
        String::from_utf8_lossy(&version.stdout)
    );
    let tree = run(&["pipeline", file], b"");
    let text = String::from_utf8_lossy(&tree.stdout);
    assert!(
        text.contains("  ▷ step research (attempt 1) on researcher"),
        "{text}"
    );
    assert!(
        text.contains("■ pipeline succeeded: succeeded [research, economics, people, report]"),
        "{text}"
    );

    let failed = run(&["run", "nobody", "x"], b"");
    assert!(!failed.status.success());
    assert!(
        String::from_utf8_lossy(&failed.stderr)
            .starts_with("error: no agent or group is called \"nobody\"\n  agents: ")
    );

    // The store server shares the orchestrator's store: the researcher's
    // write is readable under the run's trace.
    let tree_text = String::from_utf8_lossy(&tree.stdout).into_owned();
    let trace = tree_text
        .split("(trace ")
        .nth(1)
        .and_then(|t| t.get(..32))
        .expect("trace id in the header");
    let slot = run(&["store", "get", trace, "research/topic"], b"");
    assert_eq!(String::from_utf8_lossy(&slot.stdout), "the history of Rust");
    assert!(
        Command::new("kill")
            .args(["-TERM", &up.id().to_string()])
            .status()
            .expect("kill")
            .success()
    );
    assert!(
        up.wait().expect("wait").success(),
        "baton up exits cleanly on SIGTERM"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orchestrator_commands_send_the_api_key() {
    let dir = std::env::temp_dir().join(format!("baton-cli-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let keys = dir.join("keys");
    std::fs::write(&keys, "acme acme-key-0123456789\n").expect("write keys");
    let server = baton_e2e::OrchestratorServer::start(baton_e2e::EXAMPLE_AGENTS, None, |c| {
        c.auth.api_keys_file = keys.clone();
    })
    .await
    .expect("orchestrator");
    let endpoint = server.endpoint();
    let agents = |key: Option<&str>, env: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_baton"));
        cmd.args(["agents", "--endpoint", &endpoint])
            .env_remove("BATON_API_KEY");
        if let Some(k) = key {
            cmd.args(["--api-key", k]);
        }
        if let Some(k) = env {
            cmd.env("BATON_API_KEY", k);
        }
        cmd.output().expect("run baton agents")
    };
    let out = agents(None, None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("UNAUTHENTICATED") && err.contains("--api-key KEY or BATON_API_KEY"),
        "{err}"
    );
    for (key, env) in [
        (Some("acme-key-0123456789"), None),
        (None, Some("acme-key-0123456789")),
    ] {
        let out = agents(key, env);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("researcher"));
    }
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_run_is_listed_watched_and_cancelled_from_the_cli() {
    let agents = r#"
scripts:
  slow: [{calls: [{tool: sleep, args: {ms: 500}}]}, {text: "slept on {{input}}"}]
  forever: [{calls: [{tool: sleep, args: {ms: 60000}}]}, {text: never}]
agents:
  slow: {model: "scripted:slow", tools: [sleep]}
  forever: {model: "scripted:forever", tools: [sleep]}
"#;
    let server = baton_e2e::OrchestratorServer::start(agents, None, |_| {})
        .await
        .expect("orchestrator");
    let endpoint = server.endpoint();
    tokio::task::spawn_blocking(move || {
        let cli = |args: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_baton"))
                .args(args)
                .args(["--endpoint", &endpoint])
                .env_remove("BATON_API_KEY")
                .output()
                .expect("run baton")
        };
        let started = json(&cli(&["run", "slow", "plans", "--detach", "--json"]));
        let id = started["runId"].as_str().expect("run id").to_owned();
        assert_eq!(started["traceId"].as_str().map(str::len), Some(32));

        // The command returned; the run goes on and is listed.
        let listed = cli(&["runs", "list", "--json"]);
        let line = json(&listed);
        assert_eq!(line["runId"], id.as_str());
        assert_eq!(line["detached"], true);
        assert_eq!(line["target"], "slow");

        // Watching follows it to its end.
        let watched = cli(&["runs", "watch", &id, "--json"]);
        assert!(
            watched.status.success(),
            "{}",
            String::from_utf8_lossy(&watched.stderr)
        );
        let last: serde_json::Value = serde_json::from_str(
            String::from_utf8_lossy(&watched.stdout)
                .lines()
                .last()
                .expect("events"),
        )
        .expect("json");
        assert_eq!(last["runCompleted"]["output"], "slept on plans");
        let got = json(&cli(&["runs", "get", &id, "--json"]));
        assert_eq!(got["status"], "completed");
        assert_eq!(got["output"], "slept on plans");

        // A run that would never end is cancelled from another command.
        let forever = json(&cli(&["run", "forever", "x", "--detach", "--json"]));
        let forever = forever["runId"].as_str().expect("id").to_owned();
        let running =
            String::from_utf8_lossy(&cli(&["runs", "list", "--status", "running"]).stdout)
                .into_owned();
        assert!(
            running.contains(&forever) && !running.contains(&id),
            "{running}"
        );
        let cancelled = json(&cli(&[
            "runs", "cancel", &forever, "--reason", "enough", "--json",
        ]));
        assert_eq!(cancelled["status"], "cancelled");
        let out = cli(&["runs", "watch", &forever]);
        assert!(!out.status.success(), "a cancelled run's watch fails");
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains("run cancelled: cancelled by request: enough"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = cli(&["runs", "get", "not-a-run"]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("run_id"));
    })
    .await
    .expect("cli");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_sends_the_model_limits_and_settings_of_its_flags() {
    use baton_e2e::openai::{FakeOpenAi, Reply, finish, text};
    let fake = FakeOpenAi::start(vec![
        Reply::Stream(vec![text("steered"), finish("stop")]),
        Reply::Stream(vec![text("piped"), finish("stop")]),
        Reply::Stream(vec![text("on a budget"), finish("stop")]),
    ])
    .await
    .expect("fake");
    let agents = format!(
        "providers:\n  local: {{kind: openai, base_url: \"{}\", api_key_env: \"\"}}\nagents:\n  open: {{}}\n",
        fake.base_url()
    );
    let server = baton_e2e::OrchestratorServer::start(&agents, None, |_| {})
        .await
        .expect("orchestrator");
    let endpoint = server.endpoint();
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["run", "open", "hello", "--json", "--endpoint", &endpoint])
        .args([
            "--model",
            "local:tiny",
            "--max-turns",
            "3",
            "--timeout",
            "45s",
        ])
        .args(["--set", "temperature=0.7", "--set", "max_tokens=32"])
        .args(["--set", "stop=END", "--set", "extra.cache_prompt=true"])
        .output()
        .expect("baton run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("steered"));
    let body = &fake.requests()[0].body;
    assert_eq!(
        body["model"], "tiny",
        "--model: the model of agents that name none"
    );
    assert_eq!(body["temperature"], 0.7);
    assert_eq!(body["max_tokens"], 32);
    assert_eq!(body["stop"], serde_json::json!(["END"]));
    assert_eq!(body["cache_prompt"], true);
    // A bad value is the server's INVALID_ARGUMENT, naming the field.
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["run", "open", "hello", "--endpoint", &endpoint])
        .args(["--model", "local:tiny", "--set", "temperature=9"])
        .output()
        .expect("baton run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("settings.temperature"), "{err}");
    // And an unknown key is refused before anything is sent.
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["run", "open", "hello", "--endpoint", &endpoint])
        .args(["--set", "warmth=1"])
        .output()
        .expect("baton run");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown setting"));
    // The pipeline command takes the same flags.
    let dir = std::env::temp_dir().join(format!("baton-cli-steer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join("p.yaml");
    std::fs::write(
        &file,
        "name: p\nsteps:\n  - {id: s, agent: open, task: go}\n",
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["pipeline"])
        .arg(&file)
        .args(["--json", "--endpoint", &endpoint, "--model", "local:tiny"])
        .args(["--set", "seed=5"])
        .output()
        .expect("baton pipeline");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(fake.requests()[1].body["seed"], 5);
    assert_eq!(fake.requests().len(), 2, "the refused runs sent nothing");
    // A run's budget: the call's max_tokens is capped at what it leaves
    // (20 tokens less the input's estimate, 2 for "hello" and 4 for each
    // of the 2 messages).
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["run", "open", "hello", "--endpoint", &endpoint])
        .args(["--model", "local:tiny", "--set", "max_tokens=32"])
        .args(["--budget-tokens", "20"])
        .output()
        .expect("baton run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(fake.requests()[2].body["max_tokens"], 10);
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["run", "open", "hello", "--endpoint", &endpoint])
        .args(["--budget-cost=-1"])
        .output()
        .expect("baton run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("limits.budget.cost"), "{err}");
    assert_eq!(fake.requests().len(), 3, "the refused run sent nothing");
    server.shutdown().await.expect("shutdown");
}

/// A call waiting for a provider's rate limit says how long only when that
/// is known and above 0 (never `0.0 s`; a call queued behind others whose
/// wait is not known says `(1 ahead)` alone); a run's budget too small for
/// its first call is said to be too small, not spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_waits_and_small_budgets_are_said_plainly() {
    use baton_e2e::openai::{FakeOpenAi, Reply, finish, text, usage};
    let replies = (0..4)
        .map(|i| {
            Reply::Stream(vec![
                text(&format!("answer {i}")),
                finish("stop"),
                usage(10, 3),
            ])
        })
        .collect();
    let fake = FakeOpenAi::start(replies).await.expect("fake");
    let agents = format!(
        "providers:\n  p: {{kind: openai, base_url: \"{}\", api_key_env: \"\", max_retries: 0, rate_limit: {{requests: 1, window: 2s}}}}\nagents:\n  talker: {{model: \"p:m\"}}\n",
        fake.base_url()
    );
    let server = baton_e2e::OrchestratorServer::start(&agents, None, |_| {})
        .await
        .expect("orchestrator");
    let endpoint = server.endpoint();
    tokio::task::spawn_blocking(move || {
        let start = |args: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_baton"))
                .args(args)
                .args(["--endpoint", &endpoint])
                .env_remove("BATON_API_KEY")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn baton")
        };
        // Four at once, one call a window: one goes, one waits for the
        // window, the others queue behind it (each told about how long).
        let runs: Vec<_> = (0..4).map(|_| start(&["run", "talker", "hi"])).collect();
        let mut waits = Vec::new();
        for run in runs {
            let out = run.wait_with_output().expect("baton run");
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "{stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            waits.extend(
                stdout
                    .lines()
                    .filter(|l| l.contains("rate limit"))
                    .map(str::to_owned),
            );
        }
        let timed = regex::Regex::new(
            r"^~ talker: waiting for p's rate limit, about \d+\.\d s( \(\d+ ahead\))?$",
        )
        .expect("regex");
        let queued = regex::Regex::new(r"^~ talker: waiting for p's rate limit \(\d+ ahead\)$")
            .expect("regex");
        assert!(
            waits
                .iter()
                .all(|l| timed.is_match(l) || queued.is_match(l)),
            "{waits:#?}"
        );
        assert!(waits.iter().all(|l| !l.contains(" 0.0 s")), "{waits:#?}");
        assert!(waits.len() >= 3, "three calls waited: {waits:#?}");

        // A run budget smaller than the first call needs: nothing spent.
        let out = start(&["run", "talker", "hi", "--budget-tokens", "5"])
            .wait_with_output()
            .expect("baton run");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{stdout}");
        let said = regex::Regex::new(
            r"(?m)^! talker: budget too small \(run\): the next call needs \d+ of 5 tokens$",
        )
        .expect("regex");
        assert!(said.is_match(&stdout), "{stdout}");
        assert!(!stdout.contains("budget spent"), "{stdout}");
    })
    .await
    .expect("cli");
    assert_eq!(fake.requests().len(), 4, "the small budget sent nothing");
    server.shutdown().await.expect("shutdown");
}

/// `baton up` with an agents file whose provider key is not set fails at
/// once, non-zero, naming the cause, and never says it is up; with a good
/// file the banner's hint names one of its agents.
#[test]
fn up_says_it_is_up_only_when_it_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broken = dir.path().join("broken.yaml");
    std::fs::write(
        &broken,
        r#"
providers:
  cloud: {kind: openai, base_url: "http://127.0.0.1:9/v1", api_key_env: BATON_TEST_UNSET_KEY}
agents:
  helper: {model: "cloud:some-model"}
"#,
    )
    .expect("write");
    let began = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "up",
            "--listen",
            "127.0.0.1:0",
            "--store-listen",
            "127.0.0.1:0",
            "--agents",
        ])
        .arg(&broken)
        .env_remove("BATON_TEST_UNSET_KEY")
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run baton up");
    assert!(!out.status.success(), "a failed start exits non-zero");
    assert!(began.elapsed() < std::time::Duration::from_secs(20));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stdout.contains("Baton is up"), "{stdout}");
    assert!(stderr.contains("BATON_TEST_UNSET_KEY"), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "no colour codes into a pipe: {stderr}"
    );

    let good = dir.path().join("good.yaml");
    std::fs::write(
        &good,
        "scripts:\n  hi: [{text: hello}]\nagents:\n  greeter: {model: \"scripted:hi\"}\n",
    )
    .expect("write");
    let mut up = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "up",
            "--listen",
            "127.0.0.1:0",
            "--store-listen",
            "127.0.0.1:0",
            "--agents",
        ])
        .arg(&good)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn baton up");
    use std::io::BufRead;
    let lines: Vec<String> = std::io::BufReader::new(up.stdout.take().expect("stdout"))
        .lines()
        .map(|l| l.expect("line"))
        .take_while(|l| !l.starts_with("Ctrl-C"))
        .collect();
    let _ = up.kill();
    let _ = up.wait();
    // Logs go to stderr: stdout is the banner alone.
    assert!(lines[0].starts_with("Baton is up: 1 agent"), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("baton run greeter \"hello\"")),
        "{lines:?}"
    );
}

/// Errors that say what to do: nothing listening names the endpoint and
/// `baton up`; a bare `host:port` is accepted; an API key is not sent in
/// clear beyond loopback.
#[test]
fn connection_errors_say_what_to_do() {
    let baton = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(args)
            .env_remove("BATON_ENDPOINT")
            .env_remove("BATON_API_KEY")
            .output()
            .expect("run baton")
    };
    let port = baton_e2e::free_port().expect("port").to_string();
    let bare = format!("127.0.0.1:{port}");
    let out = baton(&["agents", "--endpoint", &bare]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("http://{bare}")), "{err}");
    assert!(err.contains("Connection refused"), "{err}");
    assert!(err.contains("is `baton up` running?"), "{err}");

    let out = baton(&[
        "store",
        "--endpoint",
        "http://10.1.2.3:50052",
        "--api-key",
        "k",
        "list",
        "4bf92f3577b34da6a3ce929d0e0e4736",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("refusing to send the API key in clear"),
        "{err}"
    );
    let out = baton(&[
        "agents",
        "--endpoint",
        "example.com:50051",
        "--api-key",
        "k",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to send the API key in clear"),
        "{err}"
    );
}

/// Shell completion scripts for the shells people use: each registers
/// `baton` as the one to ask for candidates (`COMPLETE=SHELL baton -- …`).
#[test]
fn completion_scripts() {
    for (shell, marker) in [
        ("bash", "-F _clap_complete_baton baton"),
        ("zsh", "#compdef baton"),
        ("fish", "complete --keep-order --exclusive --command baton"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(["completion", shell])
            .output()
            .expect("run baton");
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(
            script.contains(&format!("COMPLETE=\"{shell}\""))
                || script.contains(&format!("COMPLETE={shell} ")),
            "{shell} asks the binary: {script}"
        );
    }
}

/// `baton up --set SERVICE.PATH=VALUE` and `--print-config`: the settings
/// of both services, checked as their own config files are.
#[test]
fn up_takes_settings_of_both_services() {
    let up = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_baton"))
            .arg("up")
            .args(args)
            .output()
            .expect("run baton up")
    };
    let out = up(&[
        "--set",
        "store.limits.max_value_bytes=2048",
        "--set",
        "orchestrator.runs.max_turns=7",
        "--print-config",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let store = text
        .split("# baton up: the context store")
        .nth(1)
        .expect("the store's section");
    assert!(store.contains("max_value_bytes = 2048"), "{text}");
    assert!(text.contains("max_turns = 7"), "{text}");
    for (bad, says) in [
        (
            "limits.max_value_bytes=1",
            "starts with orchestrator. or store.",
        ),
        (
            "store.limits.max_value_bytes=0",
            "limits.max_value_bytes must be between",
        ),
        ("store.limits.nope=1", "unknown field `nope`"),
    ] {
        let out = up(&["--set", bad, "--print-config"]);
        assert!(!out.status.success(), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{bad}: {err}");
    }
}

/// Every command's `--help` ends with examples.
#[test]
fn help_has_examples() {
    for command in ["up", "agents", "run", "runs", "pipeline", "store"] {
        let out = Command::new(env!("CARGO_BIN_EXE_baton"))
            .args([command, "--help"])
            .output()
            .expect("run baton");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("Examples"), "{command}: {help}");
        assert!(
            help.contains(&format!("baton {command}")),
            "{command}: {help}"
        );
    }
}

/// `baton webhooks`: create (the secret printed once; with `--json` on
/// stdout alone), list, show, rotate, dead letters, delete; a refused URL
/// exits 1 naming the field, and an unknown dead letter names its field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_made_listed_rotated_and_deleted_from_the_cli() {
    let server = baton_e2e::OrchestratorServer::start(baton_e2e::EXAMPLE_AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let endpoint = server.endpoint();
    let webhooks = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_baton"))
            .arg("webhooks")
            .args(args)
            .args(["--endpoint", &endpoint])
            .env("COLUMNS", "80")
            .output()
            .expect("baton webhooks")
    };
    let made = webhooks(&[
        "create",
        "https://hooks.example.com/baton",
        "--event",
        "run.completed",
        "--description",
        "pager",
        "--json",
    ]);
    let made = json(&made);
    let secret = made["secret"].as_str().expect("secret").to_owned();
    assert!(secret.starts_with("whsec_"), "{made}");
    let id = made["webhook"]["webhookId"]
        .as_str()
        .expect("id")
        .to_owned();

    let listed = webhooks(&["list"]);
    let text = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(listed.status.success());
    assert!(
        text.contains(&id)
            && text.contains("https://hooks.example.com/baton")
            && text.contains("run.completed"),
        "{text}"
    );
    assert!(!text.contains(&secret[6..]), "the secret is not listed");
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");

    let shown = webhooks(&["show", &id]);
    assert!(String::from_utf8_lossy(&shown.stdout).contains("pager"));
    let rotated = webhooks(&["rotate", &id, "--keep", "1h"]);
    let text = String::from_utf8_lossy(&rotated.stdout).into_owned();
    assert!(
        rotated.status.success()
            && text.contains("new secret of")
            && text.contains("signs too until"),
        "{text}"
    );

    let dead = webhooks(&["dead"]);
    assert!(dead.status.success());
    assert!(String::from_utf8_lossy(&dead.stderr).contains("no dead letters"));
    let unknown = webhooks(&["redeliver", "msg_nope"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("delivery_id"));

    let refused = webhooks(&["create", "https://10.0.0.1/hook"]);
    assert_eq!(refused.status.code(), Some(1));
    let why = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(
        why.contains("INVALID_ARGUMENT") && why.contains("url:"),
        "{why}"
    );

    assert!(webhooks(&["delete", &id]).status.success());
    let empty = webhooks(&["list"]);
    assert!(String::from_utf8_lossy(&empty.stderr).contains("no webhooks"));
    server.shutdown().await.expect("shutdown");
}

/// `baton schedules`: create (an interval, then a cron in a time zone),
/// list at 80 columns with the next tick and the last run, show, pause,
/// resume, delete; a refused time zone and an interval below the server's
/// shortest exit 1 naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_are_made_listed_paused_and_deleted_from_the_cli() {
    let server = baton_e2e::OrchestratorServer::start(baton_e2e::EXAMPLE_AGENTS, None, |c| {
        c.schedules.min_interval = std::time::Duration::from_secs(1);
        c.schedules.poll = std::time::Duration::from_millis(50);
    })
    .await
    .expect("orchestrator");
    let endpoint = server.endpoint();
    let schedules = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_baton"))
            .arg("schedules")
            .args(args)
            .args(["--endpoint", &endpoint])
            .env("COLUMNS", "80")
            .output()
            .expect("baton schedules")
    };
    let made = json(&schedules(&[
        "create",
        "--agent",
        "assistant",
        "--input",
        "ping",
        "--every",
        "1s",
        "--json",
    ]));
    let id = made["scheduleId"].as_str().expect("id").to_owned();
    assert_eq!(made["target"], "assistant", "{made}");
    let cron = schedules(&[
        "create",
        "--agent",
        "assistant",
        "--input",
        "morning",
        "--cron",
        "0 9 * * MON-FRI",
        "--tz",
        "Europe/Paris",
        "--overlap",
        "queue-one",
        "--description",
        "weekday mornings",
    ]);
    let text = String::from_utf8_lossy(&cron.stdout).into_owned();
    assert!(cron.status.success(), "{text}");
    assert!(
        text.contains("cron '0 9 * * MON-FRI' Europe/Paris")
            && text.contains("on overlap: queue_one")
            && text.contains("weekday mornings")
            && text.contains("next ticks (UTC):"),
        "{text}"
    );
    // A tick fires within a few seconds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let text = loop {
        let listed = schedules(&["list"]);
        assert!(listed.status.success());
        let text = String::from_utf8_lossy(&listed.stdout).into_owned();
        if text.contains("fired run") {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(
        text.contains(&id) && text.contains("every 1s · next"),
        "{text}"
    );
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");

    let paused = schedules(&["pause", &id]);
    let text = String::from_utf8_lossy(&paused.stdout).into_owned();
    assert!(
        paused.status.success() && text.contains("· paused ·"),
        "{text}"
    );
    assert!(!text.contains("next ticks"), "{text}");
    let resumed = schedules(&["resume", &id]);
    assert!(String::from_utf8_lossy(&resumed.stdout).contains("· active ·"));
    let shown = schedules(&["show", &id]);
    let text = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(text.contains("recent ticks (UTC), newest first:"), "{text}");

    for (args, field) in [
        (
            vec![
                "create",
                "--agent",
                "assistant",
                "--input",
                "x",
                "--cron",
                "0 9 * * *",
                "--tz",
                "Europe/Atlantis",
            ],
            "time_zone:",
        ),
        (
            vec![
                "create",
                "--agent",
                "assistant",
                "--input",
                "x",
                "--every",
                "500ms",
            ],
            "interval:",
        ),
        (vec!["pause", "sch_nope"], "schedule_id:"),
    ] {
        let refused = schedules(&args);
        assert_eq!(refused.status.code(), Some(1));
        let why = String::from_utf8_lossy(&refused.stderr).into_owned();
        assert!(why.contains(field), "{why}");
    }

    assert!(schedules(&["delete", &id]).status.success());
    let listed = schedules(&["list", "--json"]);
    let left: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("json")["scheduleId"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert!(!left.contains(&id), "{left:?}");
    assert_eq!(left.len(), 1);
    server.shutdown().await.expect("shutdown");
}
