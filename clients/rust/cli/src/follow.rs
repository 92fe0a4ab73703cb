//! Following a run to its end (`baton run`, `baton pipeline`, `baton runs
//! watch`): its events drawn (tree or JSON), its questions asked on the
//! terminal, Ctrl-C.
//!
//! A question (an approval, a request for input) is asked on stderr and
//! answered from stdin while the stream goes on being read: the prompt ends
//! as soon as the question is answered elsewhere (another terminal, the
//! console, a deadline), the run ends, or the stream breaks, saying which.
//! Events that arrive while a prompt is open are drawn when it ends, so
//! the question stays on its line. On a terminal, a line typed for a prompt
//! that has ended is dropped, never taken as the answer to the next one;
//! from a pipe, lines answer the questions in order.
//!
//! Ctrl-C cancels the run (`baton run`, `baton pipeline`) and prints
//! `cancelled`, or stops watching it (`baton runs watch`); the command then
//! exits 130, as a shell does for Ctrl-C. A second Ctrl-C stops at once.

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal, Write};

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use futures::StreamExt;

/// The command was stopped with Ctrl-C (exit status 130); what happened is
/// printed already.
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// How the questions of a followed run are answered without asking.
#[derive(Default)]
pub struct Answers {
    /// Approve (`true`) or deny every approval (`baton runs watch
    /// --approve/--deny`; `baton run` sets the run's approval mode instead).
    pub approvals: Option<bool>,
    /// The answers to its input requests, in order (`--answer`).
    pub inputs: Vec<String>,
}

/// What Ctrl-C does to the run being followed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum CtrlC {
    /// Cancel it (it was started by this command).
    Cancel,
    /// Leave it running and stop following it (`baton runs watch`).
    StopWatching,
}

/// A question of the run waiting for a person.
struct Question {
    run_id: String,
    context_id: String,
    call_id: String,
    kind: Kind,
}

enum Kind {
    Approval {
        id: String,
        tool: String,
        arguments: String,
    },
    Input {
        id: String,
        prompt: String,
        options: Vec<String>,
    },
}

impl Question {
    /// The question of `e`, if it asks one.
    fn of(e: &pb::RunEvent) -> Option<Self> {
        let (call_id, kind) = match e.payload.as_ref()? {
            Payload::ApprovalRequested(a) => (
                a.call_id.clone(),
                Kind::Approval {
                    id: a.approval_id.clone(),
                    tool: a.tool.clone(),
                    arguments: a.arguments_json.clone(),
                },
            ),
            Payload::InputRequested(i) => (
                i.call_id.clone(),
                Kind::Input {
                    id: i.input_id.clone(),
                    prompt: i.prompt.clone(),
                    options: i.options.clone(),
                },
            ),
            _ => return None,
        };
        Some(Self {
            run_id: e.run_id.clone(),
            context_id: e.context_id.clone(),
            call_id,
            kind,
        })
    }

    /// What the prompt says.
    fn text(&self) -> String {
        match &self.kind {
            Kind::Approval {
                tool, arguments, ..
            } => match crate::said::raise(tool, arguments) {
                Some(asked) => format!("{asked}? [y/N] "),
                None => format!("approve {tool} {arguments}? [y/N] "),
            },
            Kind::Input {
                prompt, options, ..
            } if options.is_empty() => format!("{prompt} "),
            Kind::Input {
                prompt, options, ..
            } => format!("{prompt} [{}] ", options.join("/")),
        }
    }

    /// Whether `e` settles this question without this command's answer,
    /// and how to say so.
    fn settled_by(&self, e: &pb::RunEvent) -> Option<String> {
        match (&self.kind, e.payload.as_ref()?) {
            (Kind::Approval { id, .. }, Payload::ApprovalResolved(a)) if a.approval_id == *id => {
                let verdict = if a.approved { "approved" } else { "denied" };
                let reason = if a.reason.is_empty() {
                    String::new()
                } else {
                    format!(": {}", a.reason)
                };
                Some(match a.source() {
                    pb::ApprovalSource::Deadline => format!("no answer in time: {verdict}"),
                    pb::ApprovalSource::Mode => format!("{verdict} by the run's approval mode"),
                    pb::ApprovalSource::Fork => format!("{verdict} by the fork's edit{reason}"),
                    _ => format!("{verdict} elsewhere{reason}"),
                })
            }
            (Kind::Input { id, .. }, Payload::InputReceived(i)) if i.input_id == *id => {
                Some(format!("answered elsewhere: {}", i.input))
            }
            (Kind::Input { id, .. }, Payload::InputTimedOut(t)) if t.input_id == *id => {
                Some("nobody answered in time: the tool got no answer".to_owned())
            }
            (_, Payload::ToolCallCompleted(c))
                if c.call_id == self.call_id && e.context_id == self.context_id =>
            {
                Some(if c.error.is_empty() {
                    "the tool call ended".to_owned()
                } else {
                    format!("the tool call ended: {}", c.error)
                })
            }
            (_, Payload::RunCompleted(_)) => Some("the run ended: completed".into()),
            (_, Payload::RunFailed(f)) => Some(format!("the run ended: failed: {}", f.message)),
            (_, Payload::RunCancelled(c)) => Some(format!("the run ended: {}", c.reason)),
            _ => None,
        }
    }

    /// Sends `answer` (a line from stdin, or `--answer`).
    async fn answer(
        &self,
        client: &OrchestratorClient,
        answer: &str,
    ) -> Result<(), baton_client::Error> {
        match &self.kind {
            Kind::Approval { id, .. } => {
                let approved = matches!(answer.trim(), "y" | "Y" | "yes");
                let reason = if approved {
                    ""
                } else {
                    "denied at the terminal"
                };
                client
                    .resolve_approval(&self.run_id, id, approved, reason)
                    .await
            }
            Kind::Input { id, .. } => client.submit_input(&self.run_id, id, answer.trim()).await,
        }
    }

    /// For a question with options, the option `answer` names (its
    /// spelling, any case); `Err` says what to choose from (the terminal
    /// asks again; `--answer` and a pipe are taken as given, options being
    /// suggestions in the API). Anything goes for an approval or a free
    /// question.
    fn check(&self, answer: &str) -> Result<String, String> {
        let answer = answer.trim();
        match &self.kind {
            Kind::Input { options, .. } if !options.is_empty() => options
                .iter()
                .find(|o| o.eq_ignore_ascii_case(answer))
                .cloned()
                .ok_or_else(|| format!("answer one of: {}", options.join(", "))),
            _ => Ok(answer.to_owned()),
        }
    }

    /// The flags that answer it without a terminal.
    fn flags(&self) -> &'static str {
        match self.kind {
            Kind::Approval { .. } => "--approve or --deny",
            Kind::Input { .. } => "--answer TEXT",
        }
    }
}

/// A line read from stdin for a prompt.
enum Line {
    Text(String),
    Closed,
    Failed(std::io::Error),
}

/// stdin, read on a thread of its own one line at a time, only when a
/// prompt asks (a blocked read cannot be cancelled; the thread is left
/// behind when the command ends).
struct Stdin {
    ask: std::sync::mpsc::Sender<u64>,
    lines: tokio::sync::mpsc::UnboundedReceiver<(u64, Line)>,
    /// A read was asked for and has not answered.
    reading: bool,
    /// stdin is a terminal: a line for an ended prompt is dropped.
    tty: bool,
}

impl Stdin {
    fn start() -> Self {
        let (ask, asked) = std::sync::mpsc::channel::<u64>();
        let (send, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for prompt in asked {
                let mut line = String::new();
                let read = match std::io::stdin().lock().read_line(&mut line) {
                    Ok(0) => Line::Closed,
                    Ok(_) => Line::Text(line),
                    Err(e) => Line::Failed(e),
                };
                let closed = !matches!(read, Line::Text(_));
                if send.send((prompt, read)).is_err() || closed {
                    return;
                }
            }
        });
        Self {
            ask,
            lines,
            reading: false,
            tty: std::io::stdin().is_terminal(),
        }
    }

    /// The next line for prompt number `prompt`.
    async fn line(&mut self, prompt: u64) -> Line {
        loop {
            if !self.reading {
                self.reading = self.ask.send(prompt).is_ok();
            }
            let Some((asked_by, line)) = self.lines.recv().await else {
                return Line::Closed;
            };
            self.reading = false;
            if asked_by == prompt || !self.tty || !matches!(line, Line::Text(_)) {
                return line;
            }
            // Typed for a prompt that ended: not an answer to this one.
        }
    }
}

/// SIGINT (Ctrl-C), once it is handled here instead of ending the process.
struct Interrupts(
    #[cfg(unix)] Option<tokio::signal::unix::Signal>,
    #[cfg(not(unix))] (),
);

impl Interrupts {
    fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Self(signal(SignalKind::interrupt()).ok())
        }
        #[cfg(not(unix))]
        Self(())
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        match &mut self.0 {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// What a client's run streams say about their connection.
pub type Links = tokio::sync::mpsc::UnboundedReceiver<baton_client::Link>;

/// `client`, telling the returned receiver when a run stream of it breaks
/// and when it re-attaches (give it to [`follow`]).
pub fn with_links(client: OrchestratorClient) -> (OrchestratorClient, Links) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let client = client.on_link(move |link| {
        let _ = tx.send(link);
    });
    (client, rx)
}

/// The run's outcome, when `e` is its terminal event.
fn outcome_of(e: &pb::RunEvent) -> Option<anyhow::Result<()>> {
    match &e.payload {
        Some(Payload::RunCompleted(_)) => Some(Ok(())),
        Some(Payload::RunFailed(f)) => Some(Err(anyhow::anyhow!("run failed: {}", f.message))),
        Some(Payload::RunCancelled(c)) => Some(Err(anyhow::anyhow!("run cancelled: {}", c.reason))),
        _ => None,
    }
}

/// Prints a run's events (tree or JSON; the tree drawn in `mode`), answers
/// its input requests with `answers` (in order) and then, like its
/// approvals, from stdin with the question on stderr, and fails unless the
/// run completes.
pub async fn follow(
    client: &OrchestratorClient,
    mut events: baton_client::Events,
    mut links: Links,
    json: bool,
    answers: Answers,
    ctrl_c: CtrlC,
    mode: crate::view::Mode,
) -> anyhow::Result<()> {
    let approvals = answers.approvals;
    let mut answers = VecDeque::from(answers.inputs);
    let mut view = crate::view::View::default().with_mode(mode);
    let mut outcome: Option<anyhow::Result<()>> = None;
    let mut run_id: Option<String> = None;
    // Questions waiting their turn, the one asked now (with its number),
    // and the events that came while it was open.
    let mut waiting: VecDeque<Question> = VecDeque::new();
    // A resumed or woken run asks its open questions again: each id once.
    let mut seen = std::collections::HashSet::new();
    let mut asking: Option<(Question, u64)> = None;
    let mut asked = 0u64;
    let mut held: Vec<pb::RunEvent> = Vec::new();
    let mut stdin: Option<Stdin> = None;
    let mut interrupts = Interrupts::listen();
    // After Ctrl-C: until when the run's cancellation is awaited.
    let mut stopping: Option<tokio::time::Instant> = None;
    // The stream broke and is re-attaching: no prompt until it is back.
    let mut broken = false;
    // A fork's stream: its replayed part first, then a line where it goes
    // live.
    let replaying = std::cell::Cell::new(false);
    let draw = |view: &mut crate::view::View, e: &pb::RunEvent| {
        if json {
            return crate::out::outln!("{}", crate::jsonl::event_json(e));
        }
        if replaying.get() && !e.replayed {
            replaying.set(false);
            view.close()?;
            crate::out::outln!("── live from here (the fork's seq {}) ──", e.seq)?;
        }
        view.draw(e)?;
        if let Some(line) = crate::replay::line(e) {
            view.close()?;
            crate::out::outln!("{line}")?;
        }
        if let Some(pb::run_event::Payload::RunStarted(s)) = &e.payload
            && let Some(from) = &s.forked_from
        {
            replaying.set(e.replayed);
            view.close()?;
            let tail = from.run_id.len().saturating_sub(8);
            crate::out::outln!(
                "── a fork of run …{} at its seq {}, replayed up to there ──",
                from.run_id.get(tail..).unwrap_or(&from.run_id),
                from.seq
            )?;
        }
        Ok(())
    };
    // The end of a prompt: its line closed, then why.
    let end = |note: &str| {
        eprintln!();
        eprintln!("{}", crate::text::for_stderr(&format!("({note})")));
    };
    let ended = loop {
        if asking.is_none() {
            for e in held.drain(..) {
                draw(&mut view, &e)?;
                waiting.retain(|q| q.settled_by(&e).is_none());
                if let Some(q) = Question::of(&e)
                    && let Kind::Approval { id, .. } | Kind::Input { id, .. } = &q.kind
                    && seen.insert(id.clone())
                {
                    waiting.push_back(q);
                }
                if let Some(o) = outcome_of(&e) {
                    outcome = Some(o);
                }
            }
            while stopping.is_none()
                && !broken
                && asking.is_none()
                && let Some(q) = waiting.pop_front()
            {
                if let (Kind::Approval { id, .. }, Some(approved)) = (&q.kind, approvals) {
                    let reason = if approved { "--approve" } else { "--deny" };
                    client
                        .resolve_approval(&q.run_id, id, approved, reason)
                        .await?;
                    continue;
                }
                if matches!(q.kind, Kind::Input { .. })
                    && let Some(answer) = answers.pop_front()
                {
                    let answer = q.check(&answer).unwrap_or(answer);
                    q.answer(client, &answer).await?;
                    continue;
                }
                view.close()?;
                // stdin not a terminal: the question is shown with the
                // line read for it (or in the error if there is none).
                if std::io::stdin().is_terminal() {
                    eprint!("{}", crate::text::for_stderr(&q.text()));
                    std::io::stderr().flush()?;
                }
                asked += 1;
                asking = Some((q, asked));
            }
        }
        if asking.is_some() && stdin.is_none() {
            stdin = Some(Stdin::start());
        }
        let prompt = asking.as_ref().map(|(_, n)| *n);
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(e)) => {
                    if run_id.is_none() {
                        run_id = Some(e.run_id.clone());
                    }
                    if let Some((q, _)) = &asking
                        && let Some(note) = q.settled_by(&e)
                    {
                        end(&note);
                        asking = None;
                    }
                    held.push(e);
                }
                Some(Err(e)) => {
                    if asking.take().is_some() {
                        end(&format!("the stream broke, the question is unanswered: {e}"));
                    }
                    break Some(e);
                }
                None => {
                    if asking.take().is_some() {
                        end("the stream ended, the question is unanswered");
                    }
                    break None;
                }
            },
            line = async {
                match (prompt, stdin.as_mut()) {
                    (Some(n), Some(stdin)) => stdin.line(n).await,
                    _ => std::future::pending().await,
                }
            } => {
                let Some((q, _)) = asking.take() else { continue };
                let tty = std::io::stdin().is_terminal();
                if !tty && let Line::Text(answer) = &line {
                    eprintln!("{}{}", q.text(), answer.trim());
                }
                match line {
                    Line::Text(answer) => match q.check(&answer) {
                        Err(choose) if tty => {
                            // Asked again.
                            eprint!("{}", crate::text::for_stderr(&format!("({choose}) {}", q.text())));
                            std::io::stderr().flush()?;
                            asked += 1;
                            asking = Some((q, asked));
                        }
                        // From a pipe, as from --answer: taken as given.
                        checked => match q.answer(client, &checked.unwrap_or(answer)).await {
                            Ok(()) => {}
                            // Answered elsewhere, or the run ended,
                            // meanwhile: the stream says which.
                            Err(e) if matches!(e.code(), tonic::Code::FailedPrecondition | tonic::Code::NotFound) => {
                                eprintln!("(not taken: {})", e.message());
                            }
                            Err(e) => return Err(e.into()),
                        },
                    },
                    Line::Closed => {
                        if tty {
                            eprintln!();
                        }
                        anyhow::bail!(
                            "the run asks {:?} and stdin is closed: answer it with {}, or run in a terminal",
                            q.text().trim_end(),
                            q.flags()
                        );
                    }
                    Line::Failed(e) => {
                        eprintln!();
                        return Err(anyhow::Error::new(e).context("cannot read the answer from stdin"));
                    }
                }
            }
            Some(link) = links.recv() => match link {
                baton_client::Link::Broken(e) => {
                    view.close()?;
                    if let Some((q, _)) = asking.take() {
                        end(&format!("the stream broke, the question is unanswered: {e}"));
                        waiting.push_front(q);
                    }
                    let secs = baton_client::REATTACH_FOR.as_secs();
                    eprintln!("{}", crate::text::for_stderr(&format!("(re-attaching to the run for up to {secs} s; Ctrl-C stops)")));
                    broken = true;
                }
                baton_client::Link::Reattached => {
                    if broken {
                        eprintln!("(re-attached)");
                    }
                    broken = false;
                }
            },
            () = interrupts.next() => {
                if stopping.is_some() {
                    // The second Ctrl-C: at once.
                    return Err(Interrupted.into());
                }
                if asking.take().is_some() {
                    end("Ctrl-C");
                } else if view.close_after_ctrl_c() {
                    // The terminal echoed `^C` where the cursor was.
                    crate::out::outln!()?;
                }
                match (ctrl_c, &run_id) {
                    (CtrlC::Cancel, Some(id)) => {
                        let cancel = client.cancel(id, "Ctrl-C");
                        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), cancel).await;
                        stopping = Some(tokio::time::Instant::now() + std::time::Duration::from_secs(3));
                    }
                    (CtrlC::Cancel, None) => {
                        // Not started yet: closing the stream cancels it.
                        eprintln!("cancelled");
                        return Err(Interrupted.into());
                    }
                    (CtrlC::StopWatching, id) => {
                        let id = id.as_deref().unwrap_or("RUN_ID");
                        eprintln!("{}", crate::text::for_stderr(&format!("stopped watching; the run goes on (baton runs cancel {id})")));
                        return Err(Interrupted.into());
                    }
                }
            }
            () = async {
                match stopping {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => break None,
        }
    };
    // What came in last (the terminal event) is drawn too.
    for e in held.drain(..) {
        draw(&mut view, &e)?;
        if let Some(o) = outcome_of(&e) {
            outcome = Some(o);
        }
    }
    view.close()?;
    if stopping.is_some() {
        return match outcome {
            Some(Ok(())) => Ok(()),
            Some(Err(_)) if !json => Err(Interrupted.into()),
            _ => {
                eprintln!("cancelled");
                Err(Interrupted.into())
            }
        };
    }
    if let Some(e) = ended {
        return Err(e.into());
    }
    outcome.unwrap_or_else(|| Err(anyhow::anyhow!("the stream ended without a terminal event")))
}
