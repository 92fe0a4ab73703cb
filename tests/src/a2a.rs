//! The A2A peers nobody here wrote: programs built on the official
//! `a2a-sdk` 1.3.0 (`tests/a2a/`), run from the `.tools/a2a-venv` that
//! `./tests/run` installs (from `tests/a2a/requirements.txt`).
//!
//! - [`SdkClient`]: `tests/a2a/client.py`, one subprocess per call, its JSON
//!   lines parsed; [`SdkClient::spawn`] follows a streaming call line by
//!   line; [`raw`] sends one plain HTTP request through it.
//! - [`RemoteAgent`]: `tests/a2a/remote_agent.py` on a free port (it prints
//!   `LISTENING <port>`), with `--log` so a test reads every message it
//!   received; killed when dropped.
//!
//! A missing venv fails the test saying how to install it; nothing skips.
//! Every wait is bounded.

use std::{
    io::BufRead as _,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::Value;
use tokio::io::AsyncBufReadExt as _;

use crate::servers::repo_root;

/// The longest a `client.py` call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The three bindings, as A2A cards name them.
pub const BINDINGS: [&str; 3] = ["JSONRPC", "HTTP+JSON", "GRPC"];

/// Baton's A2A extension: where in the run's tree an update happened.
pub const EXTENSION: &str = "https://baton.dev/a2a/extensions/context/v1";

/// The Python of `.tools/a2a-venv` (with `a2a-sdk`).
pub fn python() -> PathBuf {
    let path = repo_root().join(".tools/a2a-venv/bin/python");
    assert!(
        path.exists(),
        "the A2A test tools' Python (a2a-sdk 1.3.0) is not installed at {}: run ./tests/run once, or \
         `python3 -m venv .tools/a2a-venv && .tools/a2a-venv/bin/pip install -r tests/a2a/requirements.txt`",
        path.display()
    );
    path
}

/// A script of `tests/a2a/`.
pub fn script(name: &str) -> PathBuf {
    repo_root().join("tests/a2a").join(name)
}

fn python_command(script_name: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(python());
    cmd.arg(script(script_name))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// What one `client.py` call printed, and how it exited.
#[derive(Debug)]
pub struct Output {
    /// The exit code (0, or 3 after an error line).
    pub code: i32,
    /// Its stdout, one JSON value a line.
    pub lines: Vec<Value>,
    /// Its stderr.
    pub stderr: String,
}

impl Output {
    /// The lines of a call that must have succeeded.
    #[track_caller]
    pub fn ok(&self) -> &[Value] {
        assert_eq!(
            self.code, 0,
            "client.py failed: {:?}\n{}",
            self.lines, self.stderr
        );
        &self.lines
    }

    /// The only line of a call that succeeded.
    #[track_caller]
    pub fn one(&self) -> &Value {
        let lines = self.ok();
        assert_eq!(lines.len(), 1, "{lines:?}");
        &lines[0]
    }

    /// The `{"type", "message"}` of a call that must have failed.
    #[track_caller]
    pub fn error(&self) -> &Value {
        assert_eq!(
            self.code, 3,
            "client.py should have failed: {:?}\n{}",
            self.lines, self.stderr
        );
        self.lines
            .last()
            .and_then(|l| l.get("error"))
            .unwrap_or_else(|| panic!("no error line: {:?}", self.lines))
    }

    /// The error's SDK exception class.
    #[track_caller]
    pub fn error_type(&self) -> &str {
        self.error()["type"].as_str().unwrap_or_default()
    }

    /// The error's message.
    #[track_caller]
    pub fn error_message(&self) -> &str {
        self.error()["message"].as_str().unwrap_or_default()
    }
}

/// `tests/a2a/client.py` against one agent card.
#[derive(Debug, Clone)]
pub struct SdkClient {
    card_url: String,
    binding: Option<String>,
    key: Option<String>,
    version: Option<String>,
}

impl SdkClient {
    /// A client of the agent at `card_url` (its base URL or card URL),
    /// on whichever binding the card offers first.
    pub fn new(card_url: impl Into<String>) -> Self {
        Self {
            card_url: card_url.into(),
            binding: None,
            key: None,
            version: None,
        }
    }

    /// Only over `binding` (`JSONRPC`, `HTTP+JSON`, `GRPC`).
    pub fn binding(mut self, binding: &str) -> Self {
        self.binding = Some(binding.to_owned());
        self
    }

    /// Sending `Authorization: Bearer key`.
    pub fn key(mut self, key: &str) -> Self {
        self.key = Some(key.to_owned());
        self
    }

    /// Sending `A2A-Version: version` (`none`: no header, HTTP only).
    pub fn version(mut self, version: &str) -> Self {
        self.version = Some(version.to_owned());
        self
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = python_command("client.py");
        cmd.arg("--card-url").arg(&self.card_url);
        if let Some(b) = &self.binding {
            cmd.arg("--binding").arg(b);
        }
        if let Some(k) = &self.key {
            cmd.arg("--key").arg(k);
        }
        if let Some(v) = &self.version {
            cmd.arg("--version").arg(v);
        }
        cmd.args(args);
        cmd
    }

    /// Runs one scenario (`send TEXT`, `get TASK --history 1`, …) to its
    /// end.
    pub async fn run(&self, args: &[&str]) -> Output {
        run_to_end(self.command(args), args).await
    }

    /// Starts a streaming scenario (`stream`, `subscribe`) whose lines are
    /// read as they come.
    pub fn spawn(&self, args: &[&str]) -> Streaming {
        Streaming::start(self.command(args), args)
    }
}

async fn run_to_end(mut cmd: tokio::process::Command, args: &[&str]) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("start client.py");
    let out = tokio::time::timeout(CALL_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("client.py {args:?} did not end within {CALL_TIMEOUT:?}"))
        .expect("client.py output");
    Output {
        code: out.status.code().unwrap_or(-1),
        lines: json_lines(&String::from_utf8_lossy(&out.stdout), args),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn json_lines(stdout: &str, args: &[&str]) -> Vec<Value> {
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("client.py {args:?} printed a non-JSON line {l:?}: {e}"))
        })
        .collect()
}

/// A streaming `client.py` call, read line by line.
pub struct Streaming {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    args: Vec<String>,
}

impl Streaming {
    fn start(mut cmd: tokio::process::Command, args: &[&str]) -> Self {
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("start client.py");
        let stdout = child.stdout.take().expect("stdout");
        Self {
            child,
            lines: tokio::io::BufReader::new(stdout).lines(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    /// The next line; `None` once the call has ended.
    pub async fn next(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(CALL_TIMEOUT, self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("client.py {:?}: no line in time", self.args))
            .expect("read client.py");
        line.map(|l| {
            serde_json::from_str(&l).unwrap_or_else(|e| {
                panic!(
                    "client.py {:?} printed a non-JSON line {l:?}: {e}",
                    self.args
                )
            })
        })
    }

    /// The remaining lines, and the exit code.
    pub async fn finish(mut self) -> (Vec<Value>, i32) {
        let mut rest = Vec::new();
        while let Some(line) = self.next().await {
            rest.push(line);
        }
        let status = tokio::time::timeout(CALL_TIMEOUT, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("client.py {:?} did not exit", self.args))
            .expect("wait client.py");
        (rest, status.code().unwrap_or(-1))
    }
}

/// One plain HTTP request through `client.py raw`: the status and the
/// body as JSON (`version`: the `A2A-Version` header, `none` for none;
/// default `1.0`).
pub async fn raw(
    method: &str,
    url: &str,
    body: Option<&str>,
    version: Option<&str>,
) -> (u16, Value) {
    let mut cmd = python_command("client.py");
    if let Some(v) = version {
        cmd.arg("--version").arg(v);
    }
    cmd.args(["raw", method, url]);
    if let Some(b) = body {
        cmd.arg("--body").arg(b);
    }
    let out = run_to_end(cmd, &["raw", method, url]).await;
    let lines = out.ok();
    assert!(lines.len() >= 2, "{lines:?}");
    let status = lines[0]["status"].as_u64().expect("status") as u16;
    (status, lines[1]["body"].clone())
}

/// `tests/a2a/remote_agent.py` ("remote-echo") on a free port, killed
/// when dropped. Every message it receives is a line of
/// [`RemoteAgent::received`].
pub struct RemoteAgent {
    child: Child,
    /// Its HTTP port.
    pub port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl RemoteAgent {
    /// Starts it with `args` (`--key K`, `--slow-interval S`) and waits up
    /// to 30 s for `LISTENING <port>`.
    pub fn start(args: &[&str]) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let log = dir.path().join("received.jsonl");
        let mut child = Command::new(python())
            .arg(script("remote_agent.py"))
            .args(["--port", "0", "--log"])
            .arg(&log)
            .args(args)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            // Keep draining, so the agent never blocks on a full pipe.
            for _ in lines {}
        });
        let first = rx.recv_timeout(Duration::from_secs(30));
        let port = match first {
            Ok(Some(Ok(line))) => line
                .strip_prefix("LISTENING ")
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|p| p.parse().ok()),
            _ => None,
        };
        let Some(port) = port else {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("remote_agent.py did not print `LISTENING <port>` within 30 s");
        };
        Ok(Self {
            child,
            port,
            log,
            _dir: dir,
        })
    }

    /// Its base URL (`/.well-known/agent-card.json` is its card).
    pub fn card_url(&self) -> String {
        format!("http://127.0.0.1:{}/a2a/remote-echo", self.port)
    }

    /// The messages it has received, oldest first: `{messageId, taskId,
    /// contextId, text, followUp}`.
    pub fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a log line"))
            .collect()
    }
}

impl Drop for RemoteAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The state of a task, status update or `{"task": …}` line
/// (`TASK_STATE_COMPLETED`).
pub fn state(v: &Value) -> &str {
    let inner = v.get("task").or_else(|| v.get("statusUpdate")).unwrap_or(v);
    inner["status"]["state"].as_str().unwrap_or_default()
}

/// The text of a message's or artifact's parts.
pub fn text(parts_owner: &Value) -> String {
    parts_owner["parts"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<String>()
        })
        .unwrap_or_default()
}
