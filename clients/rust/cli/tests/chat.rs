//! `baton chat` and `baton conversations`, run as a person would against a
//! real orchestrator: three messages from a pipe, the third answer
//! depending on the first two; the conversation continued with
//! `--conversation` on a pseudo-terminal (the line editor) at 80 columns;
//! listed, shown and deleted; an unknown conversation refused naming it.

use std::io::Write;
use std::process::{Command, Output, Stdio};

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
        assert_eq!(lines[0], format!("conversation {id}: 8 messages, 4 runs"));
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
