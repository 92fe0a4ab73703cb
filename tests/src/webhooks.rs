//! A webhook receiver for the tests: `tests/webhooks/receiver.py`, which
//! checks every delivery's signature with the PyPI `standardwebhooks`
//! package, as a child process (killed when dropped), configured and read
//! over HTTP.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

/// The receiver process, killed when dropped.
pub struct Receiver {
    child: Child,
    port: u16,
    http: reqwest::Client,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Receiver {
    /// Starts it (the servers' Python, with `standardwebhooks`).
    pub fn start() -> Self {
        let script = crate::servers::repo_root().join("tests/webhooks/receiver.py");
        let mut child = Command::new(crate::servers::servers_python())
            .arg(script)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the receiver starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the receiver says its port");
        let port = line
            .trim()
            .strip_prefix("listening ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the receiver said {line:?}"));
        Self {
            child,
            port,
            http: reqwest::Client::new(),
        }
    }

    /// Its URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Sets what `path` checks signatures with and how it answers (see
    /// the script's docs).
    pub async fn config(&self, path: &str, secrets: &[&str], mode: &str) {
        self.http
            .post(self.url("/_config"))
            .json(&serde_json::json!({"path": path, "secrets": secrets, "mode": mode}))
            .send()
            .await
            .expect("configure the receiver")
            .error_for_status()
            .expect("configured");
    }

    /// Every delivery to `path` so far, in order.
    pub async fn log(&self, path: &str) -> Vec<Value> {
        let all: Vec<Value> = self
            .http
            .get(self.url("/_log"))
            .send()
            .await
            .expect("the receiver's log")
            .json()
            .await
            .expect("json");
        all.into_iter().filter(|e| e["path"] == path).collect()
    }

    /// The deliveries to `path` once `done` holds of them (within
    /// `within`); fails naming what arrived.
    pub async fn wait(
        &self,
        path: &str,
        within: Duration,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + within;
        loop {
            let log = self.log(path).await;
            if done(&log) {
                return log;
            }
            assert!(
                Instant::now() < deadline,
                "{path} did not get what was expected within {within:?}: {log:#?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
