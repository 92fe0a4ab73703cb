//! `baton chat` and `baton conversations`, run as a person would against a
//! real orchestrator: three messages from a pipe, the third answer
//! depending on the first two; the conversation continued with
//! `--conversation` on a pseudo-terminal (the line editor) at 80 columns;
//! listed, shown and deleted; an unknown conversation refused naming it.
//! Ids listed whole and taken by a unique start or end; a chat's answer
//! without its run's scaffolding; a misspelt agent refused before anything
//! is typed.

mod support;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use support::{Pty, columns, drawn_lines, visible_lines};

fn baton(endpoint: &str, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(args)
        .env("BATON_ENDPOINT", endpoint)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn baton");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin).expect("write stdin");
    drop(input);
    child.wait_with_output().expect("baton output")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_remembers_and_its_conversation_is_listed_shown_and_deleted() {
    let server = baton_e2e::OrchestratorServer::start(baton_e2e::EXAMPLE_AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let endpoint = server.endpoint();
    tokio::task::spawn_blocking(move || {
        let ep = endpoint.as_str();
        let out = baton(
            ep,
            &["chat", "chat"],
            b"my name is Ada\nI like tea\nwhat do you know?\n",
        );
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(
            stdout
                .contains("You said: what do you know?. Before that: my name is Ada | I like tea"),
            "{stdout}"
        );
        let id = stderr
            .lines()
            .find_map(|l| l.strip_prefix("conversation "))
            .expect("the conversation's id on stderr")
            .to_owned();
        assert!(
            stderr.contains(&format!("continue it: baton chat chat --conversation {id}")),
            "{stderr}"
        );

        // Continued on a terminal: the line editor reads the message.
        let mut script = Command::new("script")
            .arg("-qec")
            .arg(format!(
                "stty cols 80; {} chat chat --conversation {id}",
                env!("CARGO_BIN_EXE_baton")
            ))
            .arg("/dev/null")
            .env("BATON_ENDPOINT", ep)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("script (util-linux)");
        let mut tty = script.stdin.take().expect("stdin");
        std::thread::sleep(std::time::Duration::from_millis(800));
        tty.write_all(b"and coffee\r").expect("type");
        std::thread::sleep(std::time::Duration::from_millis(1500));
        tty.write_all(b"\x04").expect("Ctrl-D");
        drop(tty);
        let out = script.wait_with_output().expect("script output");
        let screen = String::from_utf8_lossy(&out.stdout);
        assert!(screen.contains("6 messages, the last below"), "{screen}");
        assert!(
            screen.contains("You said: and coffee. Before that: my name is Ada"),
            "{screen}"
        );
        for line in screen.lines() {
            let shown: String = line
                .split('\x1b')
                .enumerate()
                .map(|(i, part)| {
                    if i == 0 {
                        part
                    } else {
                        part.trim_start_matches(|c: char| !c.is_ascii_alphabetic())
                            .get(1..)
                            .unwrap_or_default()
                    }
                })
                .collect();
            assert!(
                shown.trim_end_matches('\r').chars().count() <= 80,
                "wider than 80 columns: {shown:?}"
            );
        }

        let listed = baton(ep, &["conversations", "list"], b"");
        let (stdout, stderr) = text(&listed);
        assert!(listed.status.success(), "{stderr}");
        assert!(stdout.contains(" 8 "), "8 messages: {stdout}");
        // A run's conversation, where runs are listed.
        let runs = baton(ep, &["runs", "list"], b"");
        let (stdout, _) = text(&runs);
        assert!(stdout.contains(&format!("conversation {id}")), "{stdout}");
        let shown = baton(ep, &["conversations", "show", &id], b"");
        let (stdout, _) = text(&shown);
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            lines[0],
            format!("conversation {id} “my name is Ada”: 8 messages, 4 runs")
        );
        assert_eq!(lines[1], "you: my name is Ada");
        assert!(
            lines[2].starts_with("chat: You said: my name is Ada"),
            "{stdout}"
        );
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("you: ")).count(),
            4,
            "{stdout}"
        );
        assert!(lines.iter().all(|l| l.chars().count() < 80), "{stdout}");
        let last = baton(
            ep,
            &["conversations", "show", &id, "--last", "2", "--json"],
            b"",
        );
        let (stdout, _) = text(&last);
        let rows: Vec<serde_json::Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["content"], "and coffee");
        assert_eq!(rows[0]["index"], 6);

        let deleted = baton(ep, &["conversations", "delete", &id], b"");
        let (stdout, stderr) = text(&deleted);
        assert!(deleted.status.success(), "{stderr}");
        assert_eq!(
            stdout.trim(),
            format!("deleted conversation {id} and the histories of 4 runs")
        );
        let gone = baton(ep, &["chat", "chat", "--conversation", &id], b"hello\n");
        let (_, stderr) = text(&gone);
        assert!(!gone.status.success());
        assert!(stderr.contains("conversation_id"), "{stderr}");
    })
    .await
    .expect("the CLI checks");
    server.shutdown().await.expect("shutdown");
}

/// The id a chat printed at its end (`conversation ID` on stderr).
fn chat_id(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("conversation "))
        .unwrap_or_else(|| panic!("the conversation's id on stderr: {stderr}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_listed_whole_and_taken_by_a_unique_start_or_end() {
    let server = baton_e2e::OrchestratorServer::start(baton_e2e::EXAMPLE_AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let endpoint = server.endpoint();
    tokio::task::spawn_blocking(move || {
        let ep = endpoint.as_str();
        let mut ids = Vec::new();
        for said in ["hello", "good morning"] {
            let out = baton(ep, &["chat", "chat"], format!("{said}\n").as_bytes());
            let (stdout, stderr) = text(&out);
            assert!(out.status.success(), "{stdout}\n{stderr}");
            ids.push(chat_id(&stderr));
        }
        let (a, b) = (ids[0].clone(), ids[1].clone());
        assert_ne!(a, b);

        // Into a pipe: one row a conversation, its whole id first, nothing
        // cut.
        let listed = baton(ep, &["conversations", "list"], b"");
        let (stdout, stderr) = text(&listed);
        assert!(listed.status.success(), "{stderr}");
        let mut first: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        first.sort_unstable();
        let mut want = vec![a.as_str(), b.as_str()];
        want.sort_unstable();
        assert_eq!(first, want, "{stdout}");
        assert!(!stdout.contains('…'), "{stdout}");
        // On a terminal of 80 columns: a header, the ids whole, each row
        // fitting.
        let pty = Pty::start(&["conversations", "list"], ep, 80);
        let (status, screen) = pty.exit(Duration::from_secs(20));
        assert!(status.success(), "{screen}");
        let lines: Vec<String> = visible_lines(&screen)
            .into_iter()
            .filter(|l| !l.is_empty())
            .collect();
        assert!(lines[0].starts_with("ID "), "{screen}");
        for id in [&a, &b] {
            assert!(
                lines.iter().any(|l| l.starts_with(&format!("{id} "))),
                "{id} whole in\n{screen}"
            );
        }
        assert!(lines.iter().all(|l| columns(l) < 80), "{screen}");

        // The shortest start of `a` that `b` does not share, the end of
        // `b`, and `a` as lists once cut it (`head…tail`).
        let common = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
        let start = &a[..common + 1];
        let end = &b[b.len() - 8..];
        let cut = format!("{}…{}", &a[..11], &a[a.len() - 12..]);
        for (typed, id, said) in [
            (start, &a, "hello"),
            (end, &b, "good morning"),
            (cut.as_str(), &a, "hello"),
        ] {
            let shown = baton(ep, &["conversations", "show", typed], b"");
            let (stdout, stderr) = text(&shown);
            assert!(shown.status.success(), "{typed}: {stderr}");
            assert_eq!(
                stdout.lines().next(),
                Some(format!("conversation {id} “{said}”: 2 messages, 1 run").as_str()),
                "{typed}: {stdout}"
            );
        }
        // A start both share: refused, naming both.
        let shared = &a[..common];
        let refused = baton(ep, &["conversations", "show", shared], b"");
        let (_, stderr) = text(&refused);
        assert!(!refused.status.success());
        assert!(
            stderr.contains("names several conversations")
                && stderr.contains(&a)
                && stderr.contains(&b),
            "{stderr}"
        );
        // Nothing like it: refused, naming what was typed.
        let none = baton(ep, &["conversations", "delete", "zz9zz"], b"");
        let (_, stderr) = text(&none);
        assert!(!none.status.success());
        assert!(stderr.contains("\"zz9zz\""), "{stderr}");
        // Case counts.
        let upper = end.to_uppercase();
        if upper != end {
            let refused = baton(ep, &["conversations", "show", &upper], b"");
            assert!(!refused.status.success(), "{upper} is not {end}");
        }

        // Continued by its end.
        let more = baton(ep, &["chat", "chat", "--conversation", end], b"and more\n");
        let (stdout, stderr) = text(&more);
        assert!(more.status.success(), "{stdout}\n{stderr}");
        assert!(
            stderr.contains(&format!("conversation {b}: 2 messages, the last below")),
            "{stderr}"
        );
        assert!(
            stdout.contains("You said: and more. Before that: good morning"),
            "{stdout}"
        );
        assert!(
            stderr.contains(&format!("continue it: baton chat chat --conversation {b}")),
            "{stderr}"
        );

        // Deleted by its start, said with its whole id.
        let deleted = baton(ep, &["conversations", "delete", start], b"");
        let (stdout, stderr) = text(&deleted);
        assert!(deleted.status.success(), "{stderr}");
        assert_eq!(
            stdout.trim(),
            format!("deleted conversation {a} and the histories of 1 run")
        );
        let listed = baton(ep, &["conversations", "list"], b"");
        let (stdout, _) = text(&listed);
        assert!(!stdout.contains(&a) && stdout.contains(&b), "{stdout}");
    })
    .await
    .expect("the CLI checks");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_reads_as_a_chat_and_a_misspelt_agent_is_refused_first() {
    let server = baton_e2e::OrchestratorServer::start(baton_e2e::EXAMPLE_AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let endpoint = server.endpoint();
    tokio::task::spawn_blocking(move || {
        let ep = endpoint.as_str();
        // A misspelt agent: refused before anything is read or sent.
        let out = baton(ep, &["chat", "reseacher"], b"my first message\n");
        let (stdout, stderr) = text(&out);
        assert!(!out.status.success(), "{stdout}");
        assert!(
            stderr.starts_with(
                "error: no agent or group is called \"reseacher\": did you mean \"researcher\"?\n  agents: "
            ),
            "{stderr}"
        );
        assert!(!stderr.contains("a new conversation"), "{stderr}");
        let runs = baton(ep, &["runs", "list", "--json"], b"");
        assert_eq!(text(&runs).0, "", "nothing was run");

        // At 80 columns each answer is its line, right under the message:
        // no run header, agent start, `done` or `completed` around it.
        let mut pty = Pty::start_sized(&["chat", "chat"], ep, 80);
        pty.wait_for("you> ");
        pty.type_keys(b"hello\r");
        pty.wait_for("You said: hello.");
        std::thread::sleep(Duration::from_millis(500));
        pty.type_keys(b"\x04");
        let (status, screen) = pty.exit(Duration::from_secs(20));
        assert!(status.success(), "{screen}");
        let lines: Vec<String> = drawn_lines(&screen)
            .into_iter()
            .map(|l| l.trim_end().to_owned())
            .filter(|l| !l.is_empty())
            .collect();
        let answer = lines
            .iter()
            .position(|l| l.starts_with("💬 chat: You said: hello."))
            .unwrap_or_else(|| panic!("the answer's line in\n{screen}"));
        assert_eq!(lines[answer - 1], "you> hello", "{lines:#?}");
        assert_eq!(lines[answer + 1], "you>", "the next prompt: {lines:#?}");
        for scaffolding in ["▶ ", "● chat", "■ chat", "✅ completed"] {
            assert!(
                !lines.iter().any(|l| l.starts_with(scaffolding)),
                "no {scaffolding:?} line in\n{screen}"
            );
        }
        assert!(lines.iter().all(|l| columns(l) <= 80), "{screen}");

        // Watched as a run, its header is wrapped at spaces, its ids whole.
        let first_json = |args: &[&str]| -> serde_json::Value {
            let out = baton(ep, args, b"");
            let (stdout, stderr) = text(&out);
            serde_json::from_str(stdout.lines().next().unwrap_or_else(|| panic!("{stderr}")))
                .expect("json")
        };
        let run = first_json(&["runs", "list", "--json"]);
        let run_id = run["runId"].as_str().expect("run id");
        let conversation = first_json(&["conversations", "list", "--json"]);
        let id = conversation["id"].as_str().expect("id");
        let watch = Pty::start(&["runs", "watch", run_id], ep, 60);
        let (status, screen) = watch.exit(Duration::from_secs(20));
        assert!(status.success(), "{screen}");
        let lines = visible_lines(&screen);
        let header = lines
            .iter()
            .position(|l| l.starts_with("▶ run of chat in conversation"))
            .unwrap_or_else(|| panic!("the header in\n{screen}"));
        let header = lines[header..lines.len().min(header + 3)].join(" ");
        assert!(header.contains(&format!(" {id} ")), "{header}");
        assert!(header.contains("(0 earlier messages; trace "), "{header}");
        assert!(!screen.contains('…'), "{screen}");
        assert!(lines.iter().all(|l| columns(l) <= 60), "{screen}");
    })
    .await
    .expect("the CLI checks");
    server.shutdown().await.expect("shutdown");
}
