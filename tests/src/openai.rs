//! An HTTP server for the model providers' tests: each request (any path)
//! gets the next scripted reply — a status (429 with `Retry-After`, 5xx,
//! 400) with a JSON error body, a JSON answer, or an SSE stream of `data:`
//! events (OpenAI's `chat.completion.chunk` objects, or Anthropic's typed
//! events) ending in `data: [DONE]` — and every request is recorded with
//! its headers and JSON body.

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Instant,
};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A scripted reply.
pub enum Reply {
    /// An error status with a JSON error body.
    Status {
        /// The HTTP status.
        code: u16,
        /// A `Retry-After` header, in seconds.
        retry_after: Option<&'static str>,
    },
    /// A 200 streaming these chunks (each becomes one `data:` event).
    Stream(Vec<Value>),
    /// An error status whose JSON error says `message`.
    Said {
        /// The HTTP status.
        code: u16,
        /// The error's message.
        message: &'static str,
    },
    /// A 200 with this JSON body (a non-streamed answer).
    Json(Value),
    /// A 200 streaming these chunks, then the connection closed mid-answer
    /// (no finish reason, no `[DONE]`): a provider breaking mid-stream.
    Broken(Vec<Value>),
    /// The reply, after this long (a slow provider; a caller that hangs up
    /// meanwhile closes the connection).
    Slow(std::time::Duration, Box<Reply>),
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Request line and headers, lower-cased names.
    pub headers: Vec<(String, String)>,
    /// The JSON body.
    pub body: Value,
    /// When it arrived.
    pub at: Instant,
}

impl Recorded {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A chunk with a content delta.
pub fn text(piece: &str) -> Value {
    chunk(json!({"content": piece}), None)
}

/// A chunk with one tool-call fragment.
pub fn tool_fragment(index: u32, id: Option<&str>, name: Option<&str>, arguments: &str) -> Value {
    let mut call = json!({"index": index, "function": {"arguments": arguments}});
    if let Some(id) = id {
        call["id"] = json!(id);
        call["type"] = json!("function");
    }
    if let Some(name) = name {
        call["function"]["name"] = json!(name);
    }
    chunk(json!({"tool_calls": [call]}), None)
}

/// The chunk carrying the finish reason.
pub fn finish(reason: &str) -> Value {
    chunk(json!({}), Some(reason))
}

/// The final usage chunk (`choices` empty, as with `include_usage`).
pub fn usage(prompt: u64, completion: u64) -> Value {
    json!({
        "id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    })
}

fn chunk(delta: Value, finish_reason: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        "usage": null
    })
}

/// Where replies come from: a script in order, or an answer made for each
/// request's body.
enum Replies {
    Script(Mutex<VecDeque<Reply>>),
    Made(Box<dyn Fn(&Value) -> Reply + Send + Sync>),
}

/// The server.
pub struct FakeOpenAi {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it received.
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeOpenAi {
    /// Starts serving `replies` in order on `127.0.0.1:0`.
    pub async fn start(replies: Vec<Reply>) -> anyhow::Result<Self> {
        Self::serving(Replies::Script(Mutex::new(VecDeque::from(replies)))).await
    }

    /// Starts answering each request with what `answer` makes of its JSON
    /// body, for as long as it lives.
    pub async fn answering(
        answer: impl Fn(&Value) -> Reply + Send + Sync + 'static,
    ) -> anyhow::Result<Self> {
        Self::serving(Replies::Made(Box::new(answer))).await
    }

    async fn serving(replies: Replies) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let requests: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let replies = Arc::new(replies);
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let recorded = recorded.clone();
                let replies = replies.clone();
                tokio::spawn(async move {
                    let _ = serve(socket, recorded, replies).await;
                });
            }
        });
        Ok(Self {
            addr,
            requests,
            task,
        })
    }

    /// The base URL (`http://…/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The requests so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    mut socket: tokio::net::TcpStream,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    replies: Arc<Replies>,
) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        let mut chunk = [0u8; 4096];
        let n = socket.read(&mut chunk).await?;
        anyhow::ensure!(n > 0, "connection closed before the request ended");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let mut headers = vec![(":request".to_owned(), request_line)];
    for l in lines.filter(|l| !l.is_empty()) {
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let mut chunk = [0u8; 4096];
        let n = socket.read(&mut chunk).await?;
        anyhow::ensure!(n > 0, "connection closed inside the body");
        buf.extend_from_slice(&chunk[..n]);
    }
    let body: Value =
        serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null);
    let mut reply = match &*replies {
        Replies::Script(queue) => queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front(),
        Replies::Made(answer) => Some(answer(&body)),
    };
    recorded
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Recorded {
            headers,
            body,
            at: Instant::now(),
        });
    while let Some(Reply::Slow(after, then)) = reply {
        tokio::time::sleep(after).await;
        reply = Some(*then);
    }
    match reply {
        Some(Reply::Said { code, message }) => {
            let body =
                json!({"error": {"message": message, "type": "test", "code": code}}).to_string();
            socket
                .write_all(
                    format!(
                        "HTTP/1.1 {code} Said\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                )
                .await?;
        }
        Some(Reply::Status { code, retry_after }) => {
            let body = json!({"error": {"message": format!("scripted status {code}"), "type": "test", "code": code}}).to_string();
            let mut head = format!(
                "HTTP/1.1 {code} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            if let Some(s) = retry_after {
                head.push_str(&format!("retry-after: {s}\r\n"));
            }
            socket
                .write_all(format!("{head}\r\n{body}").as_bytes())
                .await?;
        }
        Some(Reply::Json(body)) => {
            let body = body.to_string();
            socket
                .write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                )
                .await?;
        }
        Some(Reply::Stream(chunks)) => {
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n")
                .await?;
            for c in chunks {
                socket
                    .write_all(format!("data: {c}\n\n").as_bytes())
                    .await?;
                socket.flush().await?;
            }
            socket.write_all(b"data: [DONE]\n\n").await?;
        }
        Some(Reply::Broken(chunks)) => {
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n")
                .await?;
            for c in chunks {
                socket
                    .write_all(format!("data: {c}\n\n").as_bytes())
                    .await?;
                socket.flush().await?;
            }
        }
        Some(Reply::Slow(..)) => unreachable!("a slow reply was waited for above"),
        None => {
            let body = r#"{"error":{"message":"no scripted reply left"}}"#;
            socket
                .write_all(format!("HTTP/1.1 500 Internal\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len()).as_bytes())
                .await?;
        }
    }
    socket.shutdown().await?;
    Ok(())
}
