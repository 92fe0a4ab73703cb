//! What the CLI tests on the binary share: `baton up` on free ports with
//! scripted agents, the binary on a pseudo-terminal (util-linux `script`),
//! and reading what a terminal shows.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// Agents of these tests: a long answer with line breaks, a question, a
/// tool that never ends, approvals (one whose prompt carries the input),
/// and the walk-through's three deep.
pub const AGENTS: &str = r#"
scripts:
  long:
    - text: "This is a long answer that a real model would give, spanning many words and more than one line of any terminal.\n\nIt has a list:\n- first item, which is itself long enough to need wrapping at sixty columns\n- second item\n\nAnd a closing paragraph with averyveryverylongwordthatgoesonandonwithoutanyspaceatalltobreakit done."
  interviewer:
    - calls: [{tool: ask_user, args: {question: "Which city should I plan for?", options: [Paris, Lisbon]}}]
    - text: "Planning a trip to {{results}}."
  forever: [{calls: [{tool: sleep, args: {ms: 60000}}]}, {text: never}]
  payer:
    - calls: [{tool: write_context, args: {key: paid, value: "yes"}}]
    - text: "paid: {{results}}"
  refunder:
    - calls: [{tool: write_context, args: {key: refund, value: "{{input}}"}}]
    - text: "refunded"
  researcher:
    - calls: [{tool: summarizer, args: {task: "sum up {{input}}"}}]
    - text: "Research done. {{results}}"
  summarizer:
    - calls: [{tool: fact_checker, args: {task: "check {{input}}"}}]
    - text: "Summary: {{results}}"
  fact_checker:
    - text: "Checked: {{input}}."
agents:
  long: {model: "scripted:long"}
  interviewer: {model: "scripted:interviewer", tools: [ask_user]}
  forever: {model: "scripted:forever", tools: [sleep]}
  payer: {model: "scripted:payer", tools: [write_context], approvals: {write_context: always}}
  refunder: {model: "scripted:refunder", tools: [write_context], approvals: {write_context: always}}
  researcher: {model: "scripted:researcher", tools: [summarizer]}
  summarizer: {model: "scripted:summarizer", tools: [fact_checker]}
  fact_checker: {model: "scripted:fact_checker"}
"#;

/// The long answer, as the model wrote it.
pub const LONG: &str = "This is a long answer that a real model would give, spanning many words and more than one line of any terminal.\n\nIt has a list:\n- first item, which is itself long enough to need wrapping at sixty columns\n- second item\n\nAnd a closing paragraph with averyveryverylongwordthatgoesonandonwithoutanyspaceatalltobreakit done.";

/// Text a reader thread keeps appending to.
pub type Shared = Arc<Mutex<String>>;

pub fn collect(mut from: impl Read + Send + 'static) -> Shared {
    let text = Shared::default();
    let into = text.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock()
                .expect("lock")
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    text
}

/// Waits until `text` holds `needle`; what it holds then.
pub fn wait_for(text: &Shared, needle: &str, within: Duration, what: &str) -> String {
    let end = Instant::now() + within;
    loop {
        let now = text.lock().expect("lock").clone();
        if now.contains(needle) {
            return now;
        }
        assert!(
            Instant::now() < end,
            "{what} never printed {needle:?}; it printed:\n{now}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for `child` to exit, up to `within`.
pub fn exit_within(child: &mut Child, within: Duration, what: &str) -> ExitStatus {
    let end = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("{what} did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn signal(child: &Child, name: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
}

/// `baton up` on free ports with the test agents, its banner read.
pub struct Up {
    pub child: Child,
    pub endpoint: String,
    pub stdout: Shared,
    pub stderr: Shared,
    /// What it printed before its log.
    pub banner: String,
    _dir: tempfile::TempDir,
}

impl Up {
    pub fn start(extra: &[&str]) -> Self {
        Self::start_with_env(extra, &[])
    }

    /// As `start`, with these environment variables.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let agents = dir.path().join("agents.yaml");
        std::fs::write(&agents, AGENTS).expect("write agents");
        let mut child = Command::new(BATON)
            .args([
                "up",
                "--listen",
                "127.0.0.1:0",
                "--store-listen",
                "127.0.0.1:0",
            ])
            .arg("--agents")
            .arg(&agents)
            .args(extra)
            .envs(env.iter().copied())
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn baton up");
        // Read from the start: a chatty log must not fill its pipe.
        let stderr = collect(child.stderr.take().expect("stderr"));
        let mut lines = BufReader::new(child.stdout.take().expect("stdout"));
        let mut banner = String::new();
        let mut endpoint = String::new();
        while !banner.contains("Ctrl-C stops it.") {
            let mut line = String::new();
            assert!(
                lines.read_line(&mut line).expect("banner") > 0,
                "baton up ended before its banner: {banner}"
            );
            if line.trim_start().starts_with("orchestrator") {
                endpoint = line.split_whitespace().nth(1).expect("address").to_owned();
            }
            banner.push_str(&line);
        }
        let stdout = collect(lines);
        Self {
            child,
            endpoint,
            stdout,
            stderr,
            banner,
            _dir: dir,
        }
    }

    /// `baton ARGS` against it, to the end.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(BATON)
            .args(args)
            .env("BATON_ENDPOINT", &self.endpoint)
            .env_remove("BATON_API_KEY")
            .stdin(Stdio::null())
            .output()
            .expect("run baton")
    }

    /// The id of the one running run of `target`.
    pub fn running(&self, target: &str) -> String {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self.cli(&["runs", "list", "--json", "--status", "running"]);
            let found = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
                .find(|r| r["target"] == target)
                .and_then(|r| r["runId"].as_str().map(str::to_owned));
            if let Some(id) = found {
                return id;
            }
            assert!(Instant::now() < end, "no running run of {target}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `baton ARGS` on a pseudo-terminal of `cols` columns: what it shows
/// (stdout and stderr, as a terminal does), and its keyboard.
pub struct Pty {
    pub child: Child,
    pub keys: std::process::ChildStdin,
    pub screen: Shared,
}

impl Pty {
    pub fn start(args: &[&str], endpoint: &str, cols: usize) -> Self {
        Self::spawn(&Self::command(args), endpoint, cols)
    }

    /// As [`Pty::start`], the terminal's size set too (`stty`): for a line
    /// editor (`baton chat`), which asks the terminal rather than `COLUMNS`.
    pub fn start_sized(args: &[&str], endpoint: &str, cols: usize) -> Self {
        let command = format!("stty cols {cols} rows 24; {}", Self::command(args));
        Self::spawn(&command, endpoint, cols)
    }

    /// `baton ARGS` as a shell command line.
    fn command(args: &[&str]) -> String {
        let quoted: Vec<String> = std::iter::once(BATON)
            .chain(args.iter().copied())
            .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
            .collect();
        quoted.join(" ")
    }

    fn spawn(command: &str, endpoint: &str, cols: usize) -> Self {
        let mut child = Command::new("script")
            .arg("-qec")
            .arg(command)
            .arg("/dev/null")
            .env("COLUMNS", cols.to_string())
            .env("BATON_ENDPOINT", endpoint)
            .env("NO_COLOR", "1")
            .env_remove("BATON_API_KEY")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("script (util-linux) runs the CLI on a pseudo-terminal");
        let keys = child.stdin.take().expect("stdin");
        let screen = collect(child.stdout.take().expect("stdout"));
        Self {
            child,
            keys,
            screen,
        }
    }

    pub fn wait_for(&self, needle: &str) -> String {
        wait_for(
            &self.screen,
            needle,
            Duration::from_secs(20),
            "the terminal",
        )
    }

    pub fn type_keys(&mut self, keys: &[u8]) {
        self.keys.write_all(keys).expect("type");
        self.keys.flush().expect("flush");
    }

    /// Its exit status (within `within`) and everything it showed.
    pub fn exit(mut self, within: Duration) -> (ExitStatus, String) {
        let status = exit_within(&mut self.child, within, "baton on the terminal");
        std::thread::sleep(Duration::from_millis(200));
        let screen = self.screen.lock().expect("lock").clone();
        (status, screen)
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lines a terminal shows: `\r`-redrawn parts and ANSI codes removed.
pub fn visible_lines(screen: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for line in screen.split('\n') {
        let line = line.trim_end_matches('\r');
        let last = line.rsplit('\r').next().unwrap_or_default();
        let mut plain = String::new();
        let mut chars = last.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                plain.push(c);
            }
        }
        lines.push(plain);
    }
    lines
}

/// Columns a line takes (the markers' emoji are two wide).
pub fn columns(line: &str) -> usize {
    line.chars()
        .map(|c| {
            if u32::from(c) >= 0x1F000 || c == '✅' {
                2
            } else {
                1
            }
        })
        .sum()
}

pub fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The lines a terminal shows, drawn as it draws them: `\r` returns to the
/// line's start and what follows overwrites it, `ESC[nC`/`ESC[nD` move the
/// cursor right/left, `ESC[K` clears to the line's end; other codes are
/// dropped. For a line editor's prompt (`you> `, then `\r ESC[5C hello`).
pub fn drawn_lines(screen: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for line in screen.split('\n') {
        let mut cells: Vec<char> = Vec::new();
        let mut at = 0;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\r' => at = 0,
                '\u{1b}' => {
                    let mut code = String::new();
                    for c in chars.by_ref() {
                        code.push(c);
                        if c.is_ascii_alphabetic() {
                            break;
                        }
                    }
                    let n = || {
                        code.trim_start_matches('[')
                            .trim_end_matches(|c: char| c.is_ascii_alphabetic())
                            .parse::<usize>()
                            .unwrap_or(1)
                    };
                    if code.starts_with('[') && code.ends_with('C') {
                        at += n();
                    } else if code.starts_with('[') && code.ends_with('D') {
                        at = at.saturating_sub(n());
                    } else if code == "[K" {
                        cells.truncate(at);
                    }
                }
                c => {
                    if cells.len() < at {
                        cells.resize(at, ' ');
                    }
                    if at < cells.len() {
                        cells[at] = c;
                    } else {
                        cells.push(c);
                    }
                    at += 1;
                }
            }
        }
        lines.push(cells.into_iter().collect());
    }
    lines
}
