//! `baton` in scripts and at 80 columns (issue 30, items 7, 8 and 10): the
//! id alone from `run --detach` into `$(…)`, `runs watch` answering
//! questions, `runs get` for people and `--json` for programs, `runs list`
//! saying which runs wait for a person and their traces, the input from
//! stdin with `-`; lists and the banner fitting 80 and 60 columns; how
//! people's answers are worded and checked. Each runs the binary against a
//! real `baton up`, on a pseudo-terminal (util-linux `script`) where what
//! it does depends on one.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `baton ARGS` with `input` on stdin.
fn with_stdin(up: &Up, args: &[&str], input: &str) -> std::process::Output {
    let mut child = Command::new(BATON)
        .args(args)
        .env("BATON_ENDPOINT", &up.endpoint)
        .env_remove("BATON_API_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run baton");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}

/// `baton run AGENT x --detach` into a pipe: the run's id.
fn detach(up: &Up, agent: &str) -> String {
    let out = up.cli(&["run", agent, "x", "--detach"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim_end().to_owned()
}

/// Item 8: `RID=$(baton run … --detach)` is the id; `-` reads the input
/// from stdin.
#[test]
fn detach_prints_the_id_alone_into_a_pipe_and_dash_reads_stdin() {
    let up = Up::start(&[]);
    let id = detach(&up, "long");
    assert!(
        id.len() == 36 && !id.contains(char::is_whitespace),
        "the id alone: {id:?}"
    );
    let got = up.cli(&["runs", "get", &id, "--json"]);
    assert!(got.status.success(), "{}", text(&got.stderr));

    let out = with_stdin(&up, &["run", "fact_checker", "-"], "the tides\n");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("Checked: the tides."),
        "{}",
        text(&out.stdout)
    );
}

/// Item 8: `baton runs watch` answers approvals and questions as `baton
/// run` does.
#[test]
fn runs_watch_approves_denies_and_answers() {
    let up = Up::start(&[]);
    let payer = detach(&up, "payer");
    let out = up.cli(&["runs", "watch", &payer, "--approve"]);
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{shown}{}", text(&out.stderr));
    assert!(
        shown.contains("✔ approved write_context (--approve)"),
        "{shown}"
    );
    assert!(shown.contains("paid: "), "{shown}");

    let payer = detach(&up, "payer");
    let out = up.cli(&["runs", "watch", &payer, "--deny"]);
    let shown = text(&out.stdout);
    assert!(shown.contains("✘ denied write_context (--deny)"), "{shown}");

    let interviewer = detach(&up, "interviewer");
    let out = up.cli(&["runs", "watch", &interviewer, "--answer", "Lisbon"]);
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{shown}{}", text(&out.stderr));
    assert!(shown.contains("Planning a trip to Lisbon."), "{shown}");
}

/// Item 8: `baton runs get` is for people (the answer whole), `--json`
/// for programs; `baton runs list` says which runs wait for a person, and
/// their traces.
#[test]
fn runs_get_and_list_for_people_and_scripts() {
    let up = Up::start(&[]);
    let done = detach(&up, "long");
    let out = up.cli(&["runs", "watch", &done]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = up.cli(&["runs", "get", &done]);
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(serde_json::from_str::<serde_json::Value>(&shown).is_err());
    assert!(shown.contains("status   completed"), "{shown}");
    assert!(shown.contains("target   long (agent)"), "{shown}");
    assert!(shown.contains("It has a list:\n"), "whole: {shown}");
    let json: serde_json::Value =
        serde_json::from_slice(&up.cli(&["runs", "get", &done, "--json"]).stdout).expect("json");
    assert_eq!(json["output"], LONG);

    let waiting = detach(&up, "interviewer");
    let trace = {
        let out = up.cli(&["runs", "get", &waiting, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        v["traceId"].as_str().expect("trace").to_owned()
    };
    // Until it asks.
    let end = std::time::Instant::now() + Duration::from_secs(10);
    let row = loop {
        let out = up.cli(&["runs", "list"]);
        let list = text(&out.stdout);
        let row = list
            .lines()
            .find(|l| l.starts_with(&waiting))
            .unwrap_or_default()
            .to_owned();
        if row.contains("waiting") || std::time::Instant::now() > end {
            break row;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(row.contains("waiting"), "{row}");
    assert!(row.contains(&trace), "{row}");
    let out = up.cli(&["runs", "list", "--json"]);
    let mine = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .find(|r| r["runId"] == waiting.as_str())
        .expect("listed");
    assert_eq!(mine["waitingFor"], "an answer");
    let out = up.cli(&["runs", "get", &waiting]);
    let shown = text(&out.stdout);
    assert!(
        shown.contains("status   running, waiting for an answer"),
        "{shown}"
    );
}

/// Item 7: `baton runs list` and `baton up`'s banner fit 80 and 60
/// columns, every id whole.
#[test]
fn lists_and_the_banner_fit_80_and_60_columns() {
    let up = Up::start(&[]);
    for line in up.banner.lines() {
        assert!(columns(line) <= 80, "the banner fits 80 columns: {line:?}");
    }
    let ids = [detach(&up, "interviewer"), detach(&up, "long")];
    std::thread::sleep(Duration::from_millis(500));
    for cols in [80, 60] {
        let pty = Pty::start(&["runs", "list"], &up.endpoint, cols);
        let (status, screen) = pty.exit(Duration::from_secs(20));
        assert!(status.success(), "{screen}");
        let lines = visible_lines(&screen);
        for line in &lines {
            assert!(
                columns(line) <= cols,
                "fits {cols} columns: {line:?} in\n{screen}"
            );
        }
        for id in &ids {
            assert!(
                lines.iter().any(|l| l.starts_with(id.as_str())),
                "{id} whole at {cols} columns:\n{screen}"
            );
        }
        assert!(words(&screen).contains("waits for an answer"), "{screen}");
    }
}

/// Item 10: `--deny` names the tool and why; with stdin closed the error
/// names the question; a question with options asks again until one is
/// chosen.
#[test]
fn answers_are_worded_alike_and_checked_against_the_options() {
    let up = Up::start(&[]);
    let out = up.cli(&["run", "payer", "x", "--deny"]);
    let shown = text(&out.stdout);
    assert!(
        shown.contains("✘ denied write_context (the run's approval mode, auto_deny)"),
        "{shown}"
    );
    assert!(!shown.contains("denied  ("), "{shown}");

    let out = up.cli(&["run", "interviewer", "x"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.starts_with(
            "error: the run asks \"Which city should I plan for? [Paris/Lisbon]\" and stdin is closed"
        ),
        "{err}"
    );

    let mut pty = Pty::start(&["run", "interviewer", "x"], &up.endpoint, 80);
    pty.wait_for("[Paris/Lisbon] ");
    pty.type_keys(b"\n");
    pty.wait_for("(answer one of: Paris, Lisbon)");
    pty.type_keys(b"Rome\n");
    let screen = pty.wait_for("Rome");
    assert!(!screen.contains("Planning a trip to Rome"), "{screen}");
    pty.type_keys(b"lisbon\n");
    let (status, screen) = pty.exit(Duration::from_secs(20));
    assert!(status.success(), "{screen}");
    assert!(screen.contains("Planning a trip to Lisbon."), "{screen}");
    assert_eq!(
        screen.matches("(answer one of: Paris, Lisbon)").count(),
        2,
        "{screen}"
    );
}

/// Item 9: habits from kubectl and gh: `did you mean` for an unknown
/// agent, a tip to quote an input of several words, connection flags
/// before the command, examples in every leaf command's `--help`.
#[test]
fn habits_from_kubectl_and_gh() {
    let up = Up::start(&[]);
    let out = up.cli(&["run", "fact_chekcer", "x"]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.starts_with(
            "error: no agent or group is called \"fact_chekcer\": did you mean \"fact_checker\"?"
        ),
        "{err}"
    );
    assert!(err.contains("agents: "), "{err}");
    for line in err.lines() {
        assert!(columns(line) <= 80, "{line:?}");
    }

    let out = up.cli(&["run", "fact_checker", "the", "tides"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "tip: quote an input of several words: baton run AGENT \"the history of Rust\""
        ),
        "{err}"
    );

    let out = Command::new(BATON)
        .args(["--endpoint", &up.endpoint, "agents"])
        .env_remove("BATON_ENDPOINT")
        .output()
        .expect("run baton");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("fact_checker"));
    let out = Command::new(BATON)
        .args([&format!("--endpoint={}", up.endpoint), "runs", "list"])
        .env_remove("BATON_ENDPOINT")
        .output()
        .expect("run baton");
    assert!(out.status.success(), "{}", text(&out.stderr));

    for leaf in [
        &["runs", "get"][..],
        &["runs", "watch"],
        &["runs", "cancel"],
        &["runs", "list"],
        &["store", "put"],
        &["store", "get"],
        &["store", "list"],
        &["store", "delete"],
        &["store", "put-many"],
        &["store", "delete-many"],
        &["store", "clear"],
        &["store", "watch"],
        &["completion"],
        &["run"],
        &["agents"],
        &["pipeline"],
        &["up"],
    ] {
        let out = Command::new(BATON)
            .args(leaf)
            .arg("--help")
            .output()
            .expect("help");
        let help = text(&out.stdout);
        assert!(
            help.contains("Examples"),
            "baton {} --help has examples:\n{help}",
            leaf.join(" ")
        );
    }
}

/// Item 7: a pipeline's summary keeps its failed and skipped lists whole,
/// wrapped at 80 and 60 columns.
#[test]
fn a_pipeline_summary_keeps_its_failed_and_skipped_lists_whole() {
    let up = Up::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("p.yaml");
    std::fs::write(
        &file,
        "name: p\nmode: dag\npolicy: continue\nsteps:\n  \
         - {id: a_step_that_runs_out_of_time, agent: forever, task: go, timeout: 200ms}\n  \
         - {id: the_first_step_that_needed_it, agent: long, task: go, depends_on: [a_step_that_runs_out_of_time]}\n  \
         - {id: the_second_step_that_needed_it, agent: long, task: go, depends_on: [a_step_that_runs_out_of_time]}\n  \
         - {id: a_step_that_did_not_need_it, agent: fact_checker, task: go}\n",
    )
    .expect("write");
    let file = file.to_str().expect("path");
    for cols in [80, 60] {
        let pty = Pty::start(&["pipeline", file], &up.endpoint, cols);
        let (_, screen) = pty.exit(Duration::from_secs(30));
        let lines = visible_lines(&screen);
        for line in &lines {
            assert!(columns(line) <= cols, "fits {cols}: {line:?} in\n{screen}");
        }
        let all = words(&lines.join("\n"));
        let summary = &all[all.find("■ pipeline").unwrap_or_else(|| panic!("{screen}"))..];
        assert!(
            summary.contains("failed [a_step_that_runs_out_of_time]"),
            "{summary}"
        );
        assert!(
            summary.contains(
                "skipped [the_first_step_that_needed_it, the_second_step_that_needed_it]"
            ),
            "{summary}"
        );
    }
}

/// `baton run res<TAB>` (issue 30, item 9): the shell asks the binary for
/// candidates, as the script of `baton completion bash` does
/// (`COMPLETE=bash baton -- baton run res`, clap_complete's protocol), and
/// it offers the agents the server at `BATON_ENDPOINT` or `--endpoint`
/// serves; with no server, or one that never answers, nothing, quickly and
/// without a word on stderr.
#[test]
fn completion_offers_the_servers_agents() {
    let up = Up::start(&[]);
    let complete = |endpoint: &str, words: &[&str]| {
        let start = std::time::Instant::now();
        let out = Command::new(BATON)
            .arg("--")
            .args(words)
            .env("COMPLETE", "bash")
            .env("_CLAP_COMPLETE_INDEX", (words.len() - 1).to_string())
            .env("_CLAP_IFS", "\n")
            .env("BATON_ENDPOINT", endpoint)
            .env_remove("BATON_API_KEY")
            .stdin(Stdio::null())
            .output()
            .expect("complete");
        let took = start.elapsed();
        assert!(out.status.success(), "{words:?}: {}", text(&out.stderr));
        assert!(out.stderr.is_empty(), "{words:?}: {}", text(&out.stderr));
        (text(&out.stdout), took)
    };
    let (offered, _) = complete(&up.endpoint, &["baton", "run", "res"]);
    assert_eq!(offered.lines().collect::<Vec<_>>(), ["researcher"]);
    let (all, _) = complete(&up.endpoint, &["baton", "run", ""]);
    for agent in ["researcher", "summarizer", "interviewer", "fact_checker"] {
        assert!(all.lines().any(|l| l == agent), "{agent} in {all}");
    }

    // Nothing listens on a port just freed; a listener that never accepts
    // takes the connection and never answers.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}", l.local_addr().expect("addr"))
    };
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent = format!("http://{}", silent.local_addr().expect("addr"));

    // `--endpoint` on the line wins over the environment.
    for words in [
        ["baton", "run", "--endpoint", up.endpoint.as_str(), "res"].as_slice(),
        &["baton", "--endpoint", up.endpoint.as_str(), "run", "res"],
        &[
            "baton",
            "run",
            &format!("--endpoint={}", up.endpoint),
            "res",
        ],
    ] {
        let (offered, _) = complete(&dead, words);
        assert_eq!(offered.trim(), "researcher", "{words:?}");
    }

    for endpoint in [&dead, &silent] {
        let (offered, took) = complete(endpoint, &["baton", "run", "res"]);
        assert!(offered.is_empty(), "{endpoint}: {offered}");
        assert!(took < Duration::from_secs(2), "{endpoint}: took {took:?}");
    }

    // Subcommands still complete, and the registration script asks the
    // binary.
    let (offered, _) = complete(&dead, &["baton", "ru"]);
    assert_eq!(offered.lines().collect::<Vec<_>>(), ["run", "runs"]);
    let script = text(&up.cli(&["completion", "bash"]).stdout);
    assert!(script.contains("COMPLETE=\"bash\""), "{script}");
    assert!(script.contains("-F _clap_complete_baton baton"), "{script}");
}

/// The subcommands `baton ARGS --help` lists under "Commands:".
fn subcommands(args: &[&str]) -> Vec<String> {
    let out = Command::new(BATON)
        .args(args)
        .arg("--help")
        .env("COLUMNS", "200")
        .output()
        .expect("baton --help");
    let help = text(&out.stdout);
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A command's line; its description's continuations are indented
        // further.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// Issue 35, item 9: every command's `--help` wraps to the terminal (80
/// and 60 columns, where only the usage line may be longer): no line is
/// longer than the terminal, so the terminal never breaks a word (it used
/// to: `requires on|e`).
#[test]
fn every_help_wraps_to_the_terminal() {
    let mut commands: Vec<Vec<String>> = vec![Vec::new()];
    let mut i = 0;
    while i < commands.len() {
        let args: Vec<&str> = commands[i].iter().map(String::as_str).collect();
        for sub in subcommands(&args) {
            let mut next = commands[i].clone();
            next.push(sub);
            commands.push(next);
        }
        i += 1;
    }
    assert!(commands.len() > 15, "{commands:?}");
    for cols in [80, 60] {
        for command in &commands {
            let mut args: Vec<&str> = command.iter().map(String::as_str).collect();
            args.push("--help");
            let pty = Pty::start(&args, "http://127.0.0.1:1", cols);
            let (status, screen) = pty.exit(Duration::from_secs(10));
            assert!(status.success(), "baton {args:?}: {screen}");
            let lines = visible_lines(&screen);
            assert!(lines.len() > 3, "baton {args:?}: {screen}");
            // (clap never breaks a usage line; at 80 columns every one fits)
            for line in lines
                .iter()
                .filter(|l| cols >= 80 || !l.starts_with("Usage:"))
            {
                assert!(
                    columns(line) <= cols,
                    "baton {} at {cols} columns: a line of {}:\n{line}",
                    args.join(" "),
                    columns(line)
                );
            }
        }
    }
}

/// Issue 35, item 9: a prompt longer than the terminal wraps at spaces —
/// `[y/N]` and every word whole — and the Ctrl-C hint keeps the run id
/// whole on its line (80 and 60 columns).
#[test]
fn prompts_and_hints_wrap_at_spaces() {
    let up = Up::start(&[]);
    let input = "a refund of the duplicate charge on the invoice of last month, please";
    for cols in [80, 60] {
        let mut pty = Pty::start(&["run", "refunder", input], &up.endpoint, cols);
        let shown = pty.wait_for("[y/N]");
        let lines = visible_lines(&shown);
        let prompt: Vec<&String> = lines
            .iter()
            .skip_while(|l| !l.starts_with("approve"))
            .collect();
        assert!(prompt.len() > 1, "the prompt wraps at {cols}: {shown}");
        for line in &prompt {
            assert!(
                columns(line) <= cols,
                "{cols} columns: {line:?} in\n{shown}"
            );
        }
        assert!(
            prompt
                .last()
                .is_some_and(|l| l.trim_end().ends_with("[y/N]")),
            "{shown}"
        );
        assert!(
            words(&shown).contains(&words(input)),
            "every word whole: {shown}"
        );
        pty.type_keys(b"y\n");
        let (status, screen) = pty.exit(Duration::from_secs(20));
        assert!(status.success(), "{screen}");
    }
    // `runs watch`'s Ctrl-C hint: the id whole on its own line at 60.
    let id = detach(&up, "interviewer");
    let mut pty = Pty::start(&["runs", "watch", &id], &up.endpoint, 60);
    pty.wait_for("Which city");
    // Ctrl-C, as the terminal sends it.
    pty.type_keys(&[3]);
    let (_, screen) = pty.exit(Duration::from_secs(20));
    let lines = visible_lines(&screen);
    assert!(
        lines.iter().any(|l| l.contains(&id)),
        "the id whole on a line: {screen}"
    );
    for line in &lines {
        assert!(columns(line) <= 60, "{line:?} in\n{screen}");
    }
}

/// Issue 35, item 11: with BATON_ENDPOINT set, a missing input's usage
/// line does not read as if --endpoint were required; a pipeline step
/// naming an unknown agent gets the "did you mean" `baton run` gives.
#[test]
fn usage_lines_and_unknown_step_agents_say_what_a_person_needs() {
    let out = Command::new(BATON)
        .args(["run", "assistant"])
        .env("BATON_ENDPOINT", "http://127.0.0.1:1")
        .env("BATON_API_KEY", "k")
        .output()
        .expect("baton");
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("<INPUT>"), "{err}");
    let usage = err
        .lines()
        .find(|l| l.starts_with("Usage:"))
        .unwrap_or_else(|| panic!("{err}"));
    assert_eq!(usage, "Usage: baton run <AGENT> <INPUT>", "{err}");

    let up = Up::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("p.yaml");
    std::fs::write(
        &file,
        "name: p\nsteps:\n  - {id: first, agent: long, task: go}\n  - {id: check, agent: summarizr, task: go}\n",
    )
    .expect("write");
    let out = up.cli(&["pipeline", file.to_str().expect("path")]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(
            r#"step "check": no agent or group is called "summarizr": did you mean "summarizer"?"#
        ),
        "{err}"
    );
    assert!(err.contains("agents: fact_checker"), "{err}");
}

/// Issue 35, item 7: a run is named by the end of its id (what tells runs
/// started in the same minute apart), or any unique start, like git's
/// short hashes; a start several runs share, or too short a piece, says so.
#[test]
fn short_run_ids_name_runs_like_git_short_hashes() {
    let up = Up::start(&[]);
    let a = detach(&up, "forever");
    let b = detach(&up, "forever");
    assert_eq!(a[..8], b[..8], "UUIDv7s of one minute share their start");
    for (cmd, extra) in [("get", vec![]), ("cancel", vec!["--reason", "short ids"])] {
        let mut args = vec!["runs", cmd, &a[a.len() - 8..]];
        args.extend(extra);
        let out = up.cli(&args);
        assert!(out.status.success(), "{cmd}: {}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains(&a),
            "{cmd}: {}",
            text(&out.stdout)
        );
    }
    let out = up.cli(&["runs", "get", &format!("…{}", &b[b.len() - 8..])]);
    assert!(text(&out.stdout).contains(&b), "{}", text(&out.stdout));
    let out = up.cli(&["runs", "get", &a[..8]]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("names several runs") && text(&out.stderr).contains(&a),
        "{}",
        text(&out.stderr)
    );
    let out = up.cli(&["runs", "get", "abc"]);
    assert!(
        text(&out.stderr).contains("at least 4 characters"),
        "{}",
        text(&out.stderr)
    );
    let out = up.cli(&["runs", "get", "ffffffff"]);
    assert!(
        text(&out.stderr).contains("no run of yours starts or ends with \"ffffffff\""),
        "{}",
        text(&out.stderr)
    );
    let _ = up.cli(&["runs", "cancel", &b]);
}

/// Issue 35, item 10: `baton up`'s log at a terminal is for a person — a
/// line per event of at most the terminal's width (time, level, message,
/// ids shortened) — while into a pipe, and with `--log-format json`, the
/// lines stay as they were for machines.
#[test]
fn baton_ups_log_is_for_a_person_at_a_terminal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agents = dir.path().join("agents.yaml");
    std::fs::write(&agents, AGENTS).expect("write agents");
    let agents = agents.to_str().expect("path");
    let mut pty = Pty::start(
        &[
            "up",
            "--listen",
            "127.0.0.1:0",
            "--store-listen",
            "127.0.0.1:0",
            "--agents",
            agents,
        ],
        "http://127.0.0.1:1",
        80,
    );
    let banner = pty.wait_for("Ctrl-C stops it.");
    let endpoint = visible_lines(&banner)
        .iter()
        .find(|l| l.trim_start().starts_with("orchestrator"))
        .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_else(|| panic!("{banner}"));
    let ran = Command::new(BATON)
        .args(["run", "long", "x", "--endpoint", &endpoint])
        .output()
        .expect("baton run");
    assert!(ran.status.success(), "{}", text(&ran.stderr));
    let shown = pty.wait_for("run ended");
    pty.type_keys(&[3]);
    let lines = visible_lines(&shown);
    let started = lines
        .iter()
        .find(|l| l.contains(" INFO  run started"))
        .unwrap_or_else(|| panic!("{shown}"));
    let at = regex::Regex::new(
        r"^\d\d:\d\d:\d\d INFO  run started run_id=…[0-9a-f]{8} trace_id=…[0-9a-f]{8}",
    )
    .expect("regex");
    assert!(at.is_match(started), "{started}");
    for line in lines.iter().filter(|l| {
        regex::Regex::new(r"^\d\d:\d\d:\d\d ")
            .expect("re")
            .is_match(l)
    }) {
        assert!(columns(line) <= 80, "{line:?} in\n{shown}");
    }

    // Into a pipe, and with --log-format json: lines for machines.
    let json = Up::start(&["--log-format", "json"]);
    let out = json.cli(&["run", "long", "x"]);
    assert!(out.status.success());
    let log = wait_for(
        &json.stderr,
        "run ended",
        Duration::from_secs(10),
        "baton up's log",
    );
    let line = log
        .lines()
        .find(|l| l.contains("run started"))
        .expect("logged");
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["message"], "run started", "{line}");
    assert_eq!(
        v["run_id"].as_str().map(str::len),
        Some(36),
        "ids whole: {line}"
    );
}

/// Forks and replays in scripts and for people: `runs fork --detach` and
/// `runs replay --detach` into `$(…)` print the new run's id alone (as
/// `baton run --detach` does), `--json` camelCase as the events;
/// `runs list` and `runs get` say a run is a fork or a replay, and of
/// which run, in text and `--json`; `baton pipeline FILE --detach` starts
/// a pipeline detached.
#[test]
fn forks_replays_and_detached_pipelines_in_scripts() {
    let up = Up::start(&[]);
    let origin = detach(&up, "researcher");
    let out = up.cli(&["runs", "watch", &origin, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let at = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .find(|e| e["contextId"] == "root" && e.get("toolCallCompleted").is_some())
        .and_then(|e| e["seq"].as_str().map(str::to_owned))
        .expect("a tool result in the root context");

    let out = up.cli(&["runs", "fork", &origin, "--at", &at, "--detach"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let fork = text(&out.stdout).trim_end().to_owned();
    assert!(
        fork.len() == 36 && !fork.contains(char::is_whitespace),
        "the fork's id alone: {fork:?}"
    );
    let out = up.cli(&["runs", "fork", &origin, "--at", &at, "--detach", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["forkedFrom"]["runId"], origin.as_str(), "{json}");
    assert_eq!(json["forkedFrom"]["seq"], at.parse::<u64>().expect("seq"));
    assert_eq!(json["runId"].as_str().map(str::len), Some(36), "{json}");

    let out = up.cli(&["runs", "watch", &origin, "--json"]);
    assert!(out.status.success());
    let out = up.cli(&["runs", "replay", &origin, "--detach"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let replay = text(&out.stdout).trim_end().to_owned();
    assert_eq!(replay.len(), 36, "the replay's id alone: {replay:?}");

    // An edited model turn keeps the turn's tool calls unless told not to.
    let turn = text(&up.cli(&["runs", "watch", &origin, "--json"]).stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .find(|e| e["contextId"] == "root" && e.get("messageCompleted").is_some())
        .and_then(|e| e["seq"].as_str().map(str::to_owned))
        .expect("the root's first model turn");
    let ended = |args: &[&str]| -> String {
        let out = up.cli(args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let last = text(&out.stdout)
            .lines()
            .last()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
            .expect("events");
        last["runCompleted"]["output"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let kept = ended(&[
        "runs",
        "fork",
        &origin,
        "--at",
        &turn,
        "--text",
        "Looking again.",
        "--json",
    ]);
    assert!(kept.starts_with("Research done."), "the calls ran: {kept}");
    let dropped = ended(&[
        "runs",
        "fork",
        &origin,
        "--at",
        &turn,
        "--text",
        "Looking again.",
        "--no-calls",
        "--json",
    ]);
    assert_eq!(dropped, "Looking again.", "no call ran");
    let out = up.cli(&["runs", "fork", &origin, "--at", &at, "--text", "x"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not a model turn"),
        "{}",
        text(&out.stderr)
    );

    // What each is, for people and for programs.
    let out = up.cli(&["runs", "get", &fork]);
    let shown = text(&out.stdout);
    assert!(
        shown.contains(&format!("from     fork of run {origin} at its seq {at}")),
        "{shown}"
    );
    let got: serde_json::Value =
        serde_json::from_slice(&up.cli(&["runs", "get", &fork, "--json"]).stdout).expect("json");
    assert_eq!(got["forkedFrom"]["runId"], origin.as_str(), "{got}");
    let got: serde_json::Value =
        serde_json::from_slice(&up.cli(&["runs", "get", &replay, "--json"]).stdout).expect("json");
    assert_eq!(got["replayOf"], origin.as_str(), "{got}");
    let list = text(&up.cli(&["runs", "list"]).stdout);
    let row = |id: &str| {
        list.lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        row(&fork).contains(&format!("fork of run {origin} at its seq {at}")),
        "{list}"
    );
    assert!(
        row(&replay).contains(&format!("replay of run {origin}")),
        "{list}"
    );
    let listed: Vec<serde_json::Value> = text(&up.cli(&["runs", "list", "--json"]).stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let of = |id: &str| listed.iter().find(|r| r["runId"] == id).expect("listed");
    assert_eq!(of(&fork)["forkedFrom"]["runId"], origin.as_str());
    assert_eq!(of(&replay)["replayOf"], origin.as_str());
    assert!(of(&origin).get("forkedFrom").is_none());
    assert_eq!(of(&fork)["forkedFrom"]["edited"], false, "a retry");
    // A fork whose point was edited says so.
    let out = up.cli(&[
        "runs", "fork", &origin, "--at", &turn, "--text", "Edited.", "--detach",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let edited = text(&out.stdout).trim_end().to_owned();
    let shown = text(&up.cli(&["runs", "get", &edited]).stdout);
    assert!(
        shown.contains(&format!(
            "from     fork of run {origin} at its seq {turn}, edited"
        )),
        "{shown}"
    );

    // A pipeline, detached.
    let dir = std::env::temp_dir().join(format!("baton-cli-pipeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join("two.yaml");
    std::fs::write(
        &file,
        "name: two\nmode: sequential\nsteps:\n  - {id: a, agent: long, task: one}\n  - {id: b, agent: fact_checker, task: two}\n",
    )
    .expect("write the pipeline");
    let out = up.cli(&["pipeline", file.to_str().expect("utf-8"), "--detach"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pipeline = text(&out.stdout).trim_end().to_owned();
    assert_eq!(
        pipeline.len(),
        36,
        "the pipeline run's id alone: {pipeline:?}"
    );
    let got: serde_json::Value =
        serde_json::from_slice(&up.cli(&["runs", "get", &pipeline, "--json"]).stdout)
            .expect("json");
    assert_eq!(got["kind"], "RUN_KIND_PIPELINE", "{got}");
    let _ = std::fs::remove_dir_all(&dir);
}
