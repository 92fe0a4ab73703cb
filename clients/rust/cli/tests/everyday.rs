//! `baton` as an everyday tool (issue 30): whole answers wrapped to the
//! terminal, prompts that end when their question is settled elsewhere,
//! Ctrl-C of `baton up` and of `baton run`, `baton up --set
//! orchestrator.log.*`, and one name per meaning for `max_depth`. Each runs
//! the binary against a real `baton up`, on a pseudo-terminal (util-linux
//! `script`) where what it does depends on one.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

/// Item 1: an answer is printed whole, keeping its line breaks, wrapped to
/// the terminal (and never cut into a pipe); a pipeline's final answer too.
#[test]
fn answers_are_whole_wrapped_to_the_terminal_and_keep_their_line_breaks() {
    let up = Up::start(&[]);
    for cols in [80, 60] {
        let pty = Pty::start(&["run", "long", "x"], &up.endpoint, cols);
        let (status, screen) = pty.exit(Duration::from_secs(30));
        assert!(status.success(), "{screen}");
        let lines = visible_lines(&screen);
        for line in &lines {
            assert!(
                columns(line) <= cols,
                "fits {cols} columns: {line:?} in\n{screen}"
            );
        }
        let start = lines
            .iter()
            .position(|l| l.starts_with("💬 long: This is a long answer"))
            .unwrap_or_else(|| panic!("the answer's first line:\n{screen}"));
        let end = lines
            .iter()
            .position(|l| l.starts_with("■ long: done"))
            .expect("the agent's end");
        let answer = &lines[start..end];
        // Every word, in order, the long one broken but whole.
        let shown: String = answer
            .join("")
            .replace("💬 long: ", "")
            .split_whitespace()
            .collect();
        let long: String = LONG.split_whitespace().collect();
        assert_eq!(shown, long, "the whole answer:\n{screen}");
        // Its line breaks: the list items start lines, the paragraphs are
        // apart, indented under the text.
        assert!(
            answer.contains(&"   It has a list:".to_owned()),
            "{answer:#?}"
        );
        assert!(
            answer.contains(&"   - second item".to_owned()),
            "{answer:#?}"
        );
        assert!(answer.iter().any(|l| l.starts_with("   - first item,")));
        assert!(answer.iter().filter(|l| l.is_empty()).count() >= 2);
        assert!(answer.len() > 6, "wrapped: {answer:#?}");
        assert!(!screen.contains('…'), "nothing cut: {screen}");
    }

    // Into a pipe: the same whole answer, its lines as written.
    let out = up.cli(&["run", "long", "x"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "> long: {}\n",
            LONG.lines().next().expect("first line")
        )),
        "{text}"
    );
    for line in LONG.lines().skip(1).filter(|l| !l.is_empty()) {
        assert!(
            text.contains(&format!("\n  {line}\n")),
            "{line:?} in\n{text}"
        );
    }
    assert_eq!(text.matches("first item").count(), 1, "once: {text}");

    // A pipeline's final answer: whole, and once (its step showed it).
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("p.yaml");
    std::fs::write(
        &file,
        "name: p\nsteps:\n  - {id: s, agent: long, task: go}\n",
    )
    .expect("write");
    let file = file.to_str().expect("path");
    let out = up.cli(&["pipeline", file]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("\n    - second item\n"), "{text}");
    assert!(text.ends_with("\ncompleted\n"), "{text}");
    let pty = Pty::start(&["pipeline", file], &up.endpoint, 60);
    let (status, screen) = pty.exit(Duration::from_secs(30));
    assert!(status.success(), "{screen}");
    let lines = visible_lines(&screen);
    assert!(lines.iter().all(|l| columns(l) <= 60), "{screen}");
    assert!(
        lines
            .iter()
            .any(|l| l == "■ pipeline succeeded: succeeded [s] failed [] skipped []"),
        "{screen}"
    );
    assert!(words(&screen).contains("- second item"), "{screen}");
}

/// A run parked while it waits (`runs.park_after`, 300 ms here) and woken
/// by the answer of `baton runs watch --approve`: the watch says it
/// resumed, answers the question once (a woken run asks its open
/// questions again, the same ids) and ends with the run.
#[test]
fn watch_answers_a_parked_run_once_and_follows_it_to_its_end() {
    let up = Up::start(&["--set", "orchestrator.runs.park_after=300ms"]);
    let started = up.cli(&["run", "payer", "order 9", "--detach", "--json"]);
    let started: serde_json::Value = serde_json::from_slice(&started.stdout).expect("json");
    let id = started["runId"].as_str().expect("id").to_owned();
    // Parked once nobody follows it for 300 ms (a keeper's round after).
    std::thread::sleep(Duration::from_millis(1500));
    let watch = Pty::start(&["runs", "watch", &id, "--approve"], &up.endpoint, 80);
    let (status, screen) = watch.exit(Duration::from_secs(20));
    assert!(status.success(), "{screen}");
    let lines = visible_lines(&screen);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("↻ resumed on this server from seq ")),
        "{screen}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("✔ approved")).count(),
        1,
        "{screen}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("✅ completed")),
        "{screen}"
    );
    assert!(lines.iter().all(|l| l.chars().count() <= 80), "{screen}");
}

/// Item 2: a prompt ends as soon as its question is answered elsewhere,
/// the run ends, or the stream breaks, saying which.
#[test]
fn a_prompt_ends_when_its_question_is_settled_elsewhere() {
    let up = Up::start(&[]);
    // Answered at another terminal (`baton runs watch` asks it too).
    let asked = Pty::start(&["run", "interviewer", "a trip"], &up.endpoint, 80);
    asked.wait_for("Which city should I plan for? [Paris/Lisbon]");
    let id = up.running("interviewer");
    let mut other = Pty::start(&["runs", "watch", &id], &up.endpoint, 80);
    other.wait_for("Which city should I plan for? [Paris/Lisbon]");
    other.type_keys(b"Lisbon\n");
    let (status, shown) = other.exit(Duration::from_secs(20));
    assert!(status.success(), "{shown}");
    asked.wait_for("(answered elsewhere: Lisbon)");
    let (status, screen) = asked.exit(Duration::from_secs(20));
    assert!(status.success(), "{screen}");
    assert!(screen.contains("Planning a trip to Lisbon."), "{screen}");

    // The run cancelled from another command.
    let asked = Pty::start(&["run", "interviewer", "a trip"], &up.endpoint, 80);
    asked.wait_for("Which city should I plan for?");
    let id = up.running("interviewer");
    assert!(up.cli(&["runs", "cancel", &id]).status.success());
    let began = Instant::now();
    asked.wait_for("(the run ended: cancelled by request)");
    let (status, screen) = asked.exit(Duration::from_secs(10));
    assert!(began.elapsed() < Duration::from_secs(5));
    assert_eq!(status.code(), Some(1), "{screen}");
    assert!(screen.contains("⏹ cancelled"), "{screen}");

    // The server gone: the stream breaks.
    let mut gone = Up::start(&[]);
    let asked = Pty::start(&["run", "interviewer", "a trip"], &gone.endpoint, 80);
    asked.wait_for("Which city should I plan for?");
    gone.child.kill().expect("kill baton up");
    let screen = asked.wait_for("(the stream broke, the question is unanswered:");
    assert!(
        screen.contains("re-attaching to the run for up to 30 s"),
        "{screen}"
    );
}

/// Item 3: Ctrl-C of `baton up` says how long it waits and for what; runs
/// waiting for a person do not hold it; a second Ctrl-C stops at once.
#[test]
fn ctrl_c_of_baton_up_says_what_it_waits_for_and_a_second_stops_at_once() {
    let up = Up::start(&[]);
    let working = Command::new(BATON)
        .args(["run", "forever", "x"])
        .env("BATON_ENDPOINT", &up.endpoint)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("baton run");
    let parked = up.cli(&["run", "payer", "x", "--detach", "--json"]);
    assert!(parked.status.success());
    up.running("forever");
    up.running("payer");
    // The approval is asked.
    std::thread::sleep(Duration::from_millis(300));
    let mut up = up;
    signal(&up.child, "INT");
    let said = wait_for(
        &up.stdout,
        "Ctrl-C again stops at once",
        Duration::from_secs(10),
        "baton up",
    );
    assert!(
        said.contains("Stopping.\n  cancelled 1 run waiting for a person (payer)\n  waiting up to 30s for 1 run to finish (forever)\n  Ctrl-C again stops at once\n"),
        "{said}"
    );
    std::thread::sleep(Duration::from_millis(500));
    let began = Instant::now();
    signal(&up.child, "INT");
    let status = exit_within(&mut up.child, Duration::from_secs(5), "baton up");
    assert!(began.elapsed() < Duration::from_secs(3), "at once");
    assert_eq!(status.code(), Some(130));
    let said = up.stdout.lock().expect("lock").clone();
    assert!(said.contains("Stopped at once: cancelled 1 run."), "{said}");
    let out = working.wait_with_output().expect("baton run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("cancelled: baton up stopped at once"),
        "{text}"
    );

    // Only a run waiting for a person: it is cancelled and `baton up`
    // stops without waiting out the grace.
    let mut up = Up::start(&[]);
    let asked = Pty::start(&["run", "interviewer", "a trip"], &up.endpoint, 80);
    asked.wait_for("Which city should I plan for?");
    let began = Instant::now();
    signal(&up.child, "INT");
    let status = exit_within(&mut up.child, Duration::from_secs(10), "baton up");
    assert!(status.success());
    assert!(
        began.elapsed() < Duration::from_secs(8),
        "{:?}",
        began.elapsed()
    );
    let said = up.stdout.lock().expect("lock").clone();
    assert!(
        said.contains("Stopping.\n  cancelled 1 run waiting for a person (interviewer)\n"),
        "{said}"
    );
    asked.wait_for("(the run ended: baton up is stopping: it does not wait for a person)");
}

/// Item 4: Ctrl-C of `baton run` cancels the run and says `cancelled`,
/// exiting 130; at a prompt too. Ctrl-C of `baton runs watch` leaves the
/// run running.
#[test]
fn ctrl_c_of_baton_run_says_cancelled() {
    let up = Up::start(&[]);
    let mut run = Pty::start(&["run", "forever", "x"], &up.endpoint, 80);
    run.wait_for("sleep {\"ms\":60000}");
    run.type_keys(b"\x03");
    let (status, screen) = run.exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(130), "{screen}");
    assert!(screen.contains("⏹ cancelled: Ctrl-C"), "{screen}");
    assert!(!screen.contains("error"), "{screen}");

    let mut run = Pty::start(&["run", "interviewer", "a trip"], &up.endpoint, 80);
    run.wait_for("Which city should I plan for?");
    run.type_keys(b"\x03");
    let (status, screen) = run.exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(130), "{screen}");
    assert!(screen.contains("(Ctrl-C)"), "{screen}");
    assert!(screen.contains("⏹ cancelled: Ctrl-C"), "{screen}");

    // Into a pipe (`baton run … | tee`), Ctrl-C is SIGINT all the same.
    let mut piped = Command::new(BATON)
        .args(["run", "forever", "x"])
        .env("BATON_ENDPOINT", &up.endpoint)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("baton run");
    let id = up.running("forever");
    std::thread::sleep(Duration::from_millis(300));
    signal(&piped, "INT");
    let status = exit_within(&mut piped, Duration::from_secs(10), "baton run");
    assert_eq!(status.code(), Some(130));
    let out = piped.wait_with_output().expect("output");
    assert!(
        String::from_utf8_lossy(&out.stdout).ends_with("cancelled: Ctrl-C\n"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let got = up.cli(&["runs", "get", &id, "--json"]);
    let got: serde_json::Value = serde_json::from_slice(&got.stdout).expect("json");
    assert_eq!(got["status"], "cancelled");

    // Watching a detached run: Ctrl-C stops watching; the run goes on.
    let started = up.cli(&["run", "forever", "x", "--detach", "--json"]);
    let started: serde_json::Value = serde_json::from_slice(&started.stdout).expect("json");
    let id = started["runId"].as_str().expect("id");
    let mut watch = Pty::start(&["runs", "watch", id], &up.endpoint, 80);
    watch.wait_for("sleep {\"ms\":60000}");
    watch.type_keys(b"\x03");
    let (status, screen) = watch.exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(130), "{screen}");
    // Wrapped at a space: the id whole on its line (issue 35, item 9).
    assert!(
        words(&screen).contains(&format!(
            "stopped watching; the run goes on (baton runs cancel {id})"
        )),
        "{screen}"
    );
    assert!(
        visible_lines(&screen).iter().any(|l| l.starts_with(id)),
        "{screen}"
    );
    let got = up.cli(&["runs", "get", id, "--json"]);
    let got: serde_json::Value = serde_json::from_slice(&got.stdout).expect("json");
    assert_eq!(got["status"], "running");
}

/// Item 5: `baton up --set orchestrator.log.*` takes effect; what `baton
/// up` decides itself is refused, saying why, and `--print-config` says so
/// instead of showing a value.
#[test]
fn baton_up_log_settings_take_effect_and_fixed_ones_are_refused() {
    // log.level
    let mut up = Up::start(&["--set", "orchestrator.log.level=debug"]);
    assert!(up.cli(&["run", "long", "x"]).status.success());
    wait_for(&up.stderr, " DEBUG ", Duration::from_secs(10), "baton up");
    signal(&up.child, "TERM");
    assert!(exit_within(&mut up.child, Duration::from_secs(10), "baton up").success());

    // log.format
    let mut up = Up::start(&["--set", "orchestrator.log.format=json"]);
    assert!(up.cli(&["run", "long", "x"]).status.success());
    signal(&up.child, "TERM");
    exit_within(&mut up.child, Duration::from_secs(10), "baton up");
    std::thread::sleep(Duration::from_millis(200));
    let logs = up.stderr.lock().expect("lock").clone();
    assert!(logs.contains("\"message\":\"run ended\""), "{logs}");
    for line in logs.lines() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("a JSON line: {line:?}: {e}"));
    }

    // log.audit (off by default)
    let mut up = Up::start(&["--set", "orchestrator.log.audit=stdout"]);
    assert!(up.cli(&["run", "long", "x"]).status.success());
    let out = wait_for(
        &up.stdout,
        "\"rpc\":\"RunAgent\"",
        Duration::from_secs(10),
        "baton up",
    );
    let audit = out
        .lines()
        .find(|l| l.contains("\"rpc\":\"RunAgent\""))
        .expect("line");
    let audit: serde_json::Value = serde_json::from_str(audit).expect("json");
    assert_eq!(audit["outcome"], "OK");
    signal(&up.child, "TERM");
    exit_within(&mut up.child, Duration::from_secs(10), "baton up");

    // --set orchestrator.listen is where it listens.
    let port = baton_e2e::free_port().expect("port");
    let up = Up::start(&["--set", &format!("orchestrator.listen=127.0.0.1:{port}")]);
    assert_eq!(up.endpoint, format!("http://127.0.0.1:{port}"));
    drop(up);

    let print = |sets: &[&str]| {
        let mut cmd = Command::new(BATON);
        cmd.arg("up");
        for set in sets {
            cmd.args(["--set", set]);
        }
        cmd.arg("--print-config").output().expect("baton up")
    };
    let out = print(&["orchestrator.log.level=debug"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let (orch, store) = text
        .split_once("# baton up: the context store")
        .expect("two sections");
    assert!(
        orch.contains("\n[log]\nformat = \"text\"\nlevel = \"debug\"\naudit = \"off\"\n"),
        "{orch}"
    );
    assert!(
        orch.contains("# [store]: the orchestrator uses baton up's in-process context store"),
        "{orch}"
    );
    assert!(!orch.contains("[store.limits]"), "{orch}");
    assert!(
        store.contains("# [log]: baton up logs once for both services: set orchestrator.log"),
        "{store}"
    );
    assert!(
        store.contains("# backend: baton up keeps the context store in memory"),
        "{store}"
    );
    assert!(
        !store.contains("\n[log]") && !store.contains("\n[redis]"),
        "{store}"
    );
    for (set, says) in [
        (
            "store.log.level=debug",
            "baton up logs once for both services",
        ),
        ("store.backend=redis", "keeps the context store in memory"),
        (
            "orchestrator.store.limits.max_value_bytes=9",
            "in-process context store",
        ),
        ("orchestrator.worker_threads=2", "one runtime"),
        (
            "orchestrator.log.level=a=loud",
            "orchestrator.log: invalid log level",
        ),
    ] {
        let out = Command::new(BATON)
            .args([
                "up",
                "--listen",
                "127.0.0.1:0",
                "--store-listen",
                "127.0.0.1:0",
                "--set",
                set,
            ])
            .env_remove("RUST_LOG")
            .output()
            .expect("baton up");
        assert!(!out.status.success(), "{set}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{set}: {err}");
    }
}

/// Item 6: `--max-depth` is the run's depth limit, as `max_depth` is in
/// the proto's `limits` and the Python and TypeScript clients;
/// `--filter-max-depth` only chooses what is shown.
#[test]
fn max_depth_limits_the_run_and_filter_max_depth_what_is_shown() {
    let up = Up::start(&[]);
    let out = up.cli(&["run", "researcher", "tides", "--max-depth", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("would be at depth 2, over max_depth 1"),
        "the limit refused the third level:\n{text}"
    );
    assert!(!text.contains("● fact_checker"), "{text}");

    let out = up.cli(&["run", "researcher", "tides", "--filter-max-depth", "0"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("Research done. Summary: Checked: check sum up tides."),
        "the run went three deep:\n{text}"
    );
    assert!(
        text.lines().all(|l| !l.starts_with("  ")),
        "only depth 0 shown:\n{text}"
    );

    let help = Command::new(BATON)
        .args(["run", "--help"])
        .output()
        .expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--max-depth <N>"), "{help}");
    assert!(help.contains("limits.max_depth"), "{help}");
    assert!(help.contains("--filter-max-depth <N>"), "{help}");
    assert!(help.contains("filter.max_depth"), "{help}");
}

/// `baton eval`: Ctrl-C cancels the experiment's runs still going and
/// keeps the case that finished; `baton eval cancel` stops one started
/// elsewhere (here another `baton eval`, into a pipe), which then ends,
/// and refuses one that ended, naming why.
#[test]
fn ctrl_c_and_eval_cancel_stop_an_experiment_and_keep_what_finished() {
    let up = Up::start(&[]);
    let dir = tempfile::tempdir().expect("dir");
    let dataset = dir.path().join("slow.jsonl");
    std::fs::write(
        &dataset,
        "{\"id\": \"quick\", \"agent\": \"fact_checker\", \"input\": \"x\", \"scorers\": [{\"kind\": \"contains\", \"value\": \"Checked\"}]}\n\
         {\"id\": \"slow-1\", \"input\": \"x\", \"expected\": \"never\"}\n\
         {\"id\": \"slow-2\", \"input\": \"x\", \"expected\": \"never\"}\n",
    )
    .expect("write");
    let dataset = dataset.to_str().expect("path");
    let mut run = Pty::start(
        &["eval", dataset, "--agent", "forever", "--name", "cli-slow"],
        &up.endpoint,
        80,
    );
    run.wait_for("✓ quick");
    run.type_keys(b"\x03");
    let (status, screen) = run.exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(130), "{screen}");
    assert!(
        words(&screen).contains("interrupted: the runs still going are cancelled; 1 case finished and kept (baton eval show exp-"),
        "{screen}"
    );
    for line in visible_lines(&screen) {
        assert!(columns(&line) <= 80, "wider than 80 columns: {line:?}");
    }
    let shown = up.cli(&["eval", "show", "cli-slow", "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("json");
    assert_eq!(shown["status"], "EXPERIMENT_STATUS_CANCELLED", "{shown}");
    assert_eq!(shown["cases"].as_array().map(Vec::len), Some(1), "{shown}");

    // Started into a pipe, stopped by `baton eval cancel`.
    let mut piped = Command::new(BATON)
        .args(["eval", dataset, "--agent", "forever", "--name", "cli-far"])
        .env("BATON_ENDPOINT", &up.endpoint)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("baton eval");
    let out = collect(piped.stdout.take().expect("stdout"));
    wait_for(&out, "✓ quick", Duration::from_secs(10), "baton eval");
    let cancel = up.cli(&["eval", "cancel", "cli-far"]);
    let said = String::from_utf8_lossy(&cancel.stdout).into_owned();
    assert!(cancel.status.success(), "{said}");
    assert!(said.starts_with("experiment exp-"), "{said}");
    assert!(said.ends_with(" cancelled: 1 case of 3 kept\n"), "{said}");
    assert!(said.lines().all(|l| columns(l) <= 80), "{said}");
    let err = collect(piped.stderr.take().expect("stderr"));
    let status = exit_within(&mut piped, Duration::from_secs(10), "baton eval");
    assert_eq!(status.code(), Some(1), "a cancelled experiment is no pass");
    wait_for(
        &err,
        "error: the experiment was cancelled after 1 case of 3",
        Duration::from_secs(5),
        "baton eval",
    );
    let again = up.cli(&["eval", "cancel", "cli-far"]);
    assert!(!again.status.success());
    let why = String::from_utf8_lossy(&again.stderr).into_owned();
    assert!(
        words(&why).contains("is cancelled: only a running experiment can be cancelled"),
        "{why}"
    );
}
