//! The workload: `clients` concurrent clients, each looping until the
//! run's duration is over — pick an item, start it detached on a random
//! replica, follow it to its end with WatchRun from random replicas
//! (re-attaching with `after_seq` = the last seq seen whenever a stream
//! breaks, ends early or goes quiet), and answer its questions on a random
//! replica, preferably not the one watched: approve, or pick an option;
//! sometimes only after letting the run park (no watcher for longer than
//! `park_after`). Every event received and every answer attempt goes to
//! the [`History`].
//!
//! Every call has a deadline (a paused replica never answers), re-attaches
//! and answers are retried a bounded number of times with a small backoff,
//! and no run is followed past the heal deadline.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use baton_client::{OrchestratorClient, pb};
use futures::StreamExt;
use tonic::Code;

use super::{
    calls::{CALL_TIMEOUT, approval_reason, once, rival_reason},
    cluster::lazy_client,
    deadline,
    history::{Answer, Expected, History, Outcome, QuestionKind, Seen},
    items::{self, Item, Start},
    questions::{self, Asked, QuestionState, Reask},
    rng::Rng,
};
use crate::events::is_terminal;

/// Consecutive failed (re-)attaches after which a client stops following a
/// run (the checker still reads its whole log).
const MAX_ATTACH_FAILURES: u32 = 40;

/// Attempts at one answer.
const MAX_ANSWER_ATTEMPTS: u32 = 8;

/// How long a question asked again after its answer was taken may stay
/// open before the client answers it again.
const REASK_GRACE: Duration = Duration::from_secs(3);

/// What every client shares.
pub struct Shared {
    /// The replicas' endpoints, by index.
    pub endpoints: Vec<String>,
    /// Where everything seen goes.
    pub history: History,
    /// The research pipeline's spec.
    pub pipeline: pb::PipelineSpec,
    /// When the chaos run began.
    pub began: Instant,
    /// No run is started after this.
    pub start_until: Instant,
    /// No run is followed after this.
    pub follow_until: Instant,
    /// The replicas' `runs.park_after`.
    pub park_after: Duration,
    /// How long a stream may stay quiet before the client re-attaches
    /// elsewhere (its replica may be paused).
    pub idle: Duration,
}

/// One client: runs until `shared.start_until`, then returns.
pub async fn client(shared: Arc<Shared>, n: usize, mut rng: Rng) {
    let replicas: Vec<OrchestratorClient> =
        shared.endpoints.iter().map(|e| lazy_client(e)).collect();
    let mut k = 0;
    // The client's conversation exists (a chat run of it was started).
    let mut conversed = false;
    while Instant::now() < shared.start_until {
        let item = *rng.pick(&Item::ALL);
        let input = format!("c{n}-{k}");
        k += 1;
        let tight = deadline::tight(&mut rng, item);
        let mut run = Following {
            shared: &shared,
            replicas: &replicas,
            tight,
            rng: &mut rng,
            run_id: String::new(),
            last_seq: 0,
            watching: 0,
            questions: HashMap::new(),
            reask: None,
            conversation: (item == Item::Chat).then(|| (items::conversation_of(n), conversed)),
        };
        run.run(item, &input).await;
        if let Some((_, started)) = run.conversation {
            conversed = started;
        }
    }
}

/// What to do after reading a stream.
enum Next {
    /// The run ended.
    Ended,
    /// Re-attach (the stream broke, ended early or went quiet).
    Reattach,
    /// Re-attach once `wait` passed (the client let the run park).
    Park(PendingAnswer),
}

/// An answer the client gives once the run had time to park.
struct PendingAnswer {
    id: String,
    kind: QuestionKind,
    wait: Duration,
}

/// One client following one run.
struct Following<'a> {
    shared: &'a Shared,
    replicas: &'a [OrchestratorClient],
    /// Started tight (see [`deadline`]).
    tight: bool,
    rng: &'a mut Rng,
    run_id: String,
    last_seq: u64,
    watching: usize,
    questions: HashMap<String, QuestionState>,
    reask: Option<Reask>,
    /// A chat run's conversation, and whether it exists already.
    conversation: Option<(String, bool)>,
}

type Stream = tonic::Streaming<pb::RunEvent>;

impl Following<'_> {
    async fn run(&mut self, item: Item, input: &str) {
        let Some(first) = self.start(item, input).await else {
            return;
        };
        // Half the time the start's own stream is the first attachment;
        // otherwise the client watches from a replica of its choice.
        let mut stream = if self.rng.chance(0.5) {
            Some(first)
        } else {
            drop(first);
            None
        };
        let mut failures = 0;
        let mut backoff = Duration::from_millis(100);
        loop {
            if Instant::now() >= self.shared.follow_until {
                self.note("not followed to its end before the heal deadline".into());
                return;
            }
            let current = match stream.take() {
                Some(s) => s,
                None => match self.watch().await {
                    Ok(s) => s,
                    Err(e) => {
                        failures += 1;
                        if failures >= MAX_ATTACH_FAILURES {
                            self.note(format!(
                                "gave up re-attaching after {failures} failures: {e}"
                            ));
                            return;
                        }
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                        continue;
                    }
                },
            };
            match self.read(current).await {
                Next::Ended => {
                    let run_id = self.run_id.clone();
                    self.shared
                        .history
                        .update(&run_id, |t| t.followed_to_end = true);
                    return;
                }
                Next::Reattach => {}
                Next::Park(pending) => {
                    tokio::time::sleep(pending.wait).await;
                    self.answer(&pending.id, pending.kind, true).await;
                }
            }
            failures = 0;
            backoff = Duration::from_millis(100);
        }
    }

    /// Starts `item` detached on random replicas (a few tries); its stream
    /// once its first event arrived.
    async fn start(&mut self, item: Item, input: &str) -> Option<Stream> {
        let mut last_error = String::new();
        for _ in 0..5 {
            let r = self.rng.below(self.replicas.len());
            let raw = self.replicas[r].raw();
            let started = tokio::time::timeout(CALL_TIMEOUT, async {
                let timeout = self.tight.then_some(deadline::TIGHT);
                let conversation = self
                    .conversation
                    .as_ref()
                    .map(|(id, exists)| (id.as_str(), !exists));
                let request =
                    items::request(item, input, &self.shared.pipeline, timeout, conversation);
                let mut stream = match request {
                    Start::Agent(req) => raw.clone().run_agent(req).await?.into_inner(),
                    Start::Pipeline(req) => raw.clone().run_pipeline(req).await?.into_inner(),
                };
                match stream.next().await {
                    Some(Ok(first)) => Ok((stream, first)),
                    Some(Err(e)) => Err(e),
                    None => Err(tonic::Status::unknown(
                        "the stream ended before its first event",
                    )),
                }
            })
            .await;
            match started {
                Ok(Ok((stream, first))) => {
                    if let Some((_, exists)) = &mut self.conversation {
                        *exists = true;
                    }
                    self.run_id = first.run_id.clone();
                    self.watching = r;
                    let expected = deadline::expected(item, input, self.tight);
                    let history = &self.shared.history;
                    history.started(&self.run_id, item.name(), expected, self.tight);
                    self.seen(first);
                    return Some(stream);
                }
                // An earlier try that timed out had started it after all.
                Ok(Err(status)) if status.code() == Code::AlreadyExists => {
                    if let Some((_, exists)) = &mut self.conversation {
                        *exists = true;
                    }
                    last_error = format!("r{r}: {status}");
                }
                Ok(Err(status)) => last_error = format!("r{r}: {status}"),
                Err(_) => last_error = format!("r{r}: no first event within {CALL_TIMEOUT:?}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.shared
            .history
            .start_failed(format!("{} {input}: {last_error}", item.name()));
        None
    }

    /// WatchRun after the last seq seen, on a random replica.
    async fn watch(&mut self) -> Result<Stream, String> {
        let r = self.rng.below(self.replicas.len());
        self.watching = r;
        let request = pb::WatchRunRequest {
            run_id: self.run_id.clone(),
            after_seq: self.last_seq,
            filter: None,
        };
        match tokio::time::timeout(CALL_TIMEOUT, self.replicas[r].raw().watch_run(request)).await {
            Ok(Ok(s)) => Ok(s.into_inner()),
            Ok(Err(status)) => Err(format!("WatchRun on r{r}: {status}")),
            Err(_) => Err(format!(
                "WatchRun on r{r}: no answer within {CALL_TIMEOUT:?}"
            )),
        }
    }

    /// Reads `stream` until the run ends, the stream breaks or goes quiet,
    /// or the client chooses to let the run park.
    async fn read(&mut self, mut stream: Stream) -> Next {
        loop {
            let quiet = Instant::now() + self.shared.idle;
            let until = match &self.reask {
                Some(r) => r.due.min(quiet),
                None => quiet,
            };
            match tokio::time::timeout_at(until.into(), stream.next()).await {
                Ok(Some(Ok(event))) => {
                    let terminal = is_terminal(&event);
                    let asked = questions::asked(&event);
                    self.seen(event);
                    if terminal {
                        return Next::Ended;
                    }
                    if let Some(asked) = asked
                        && let Some(next) = self.asked(asked).await
                    {
                        return next;
                    }
                }
                Ok(Some(Err(status))) => {
                    self.note(format!(
                        "stream on r{} broke after seq {}: {status}",
                        self.watching, self.last_seq
                    ));
                    return Next::Reattach;
                }
                Ok(None) => {
                    self.note(format!(
                        "stream on r{} ended after seq {} without a terminal event",
                        self.watching, self.last_seq
                    ));
                    return Next::Reattach;
                }
                Err(_) => {
                    if let Some(r) = self.reask.take_if(|r| Instant::now() >= r.due) {
                        self.answer_again(r).await;
                        continue;
                    }
                    self.note(format!(
                        "stream on r{} quiet for {:?} after seq {}",
                        self.watching, self.shared.idle, self.last_seq
                    ));
                    return Next::Reattach;
                }
            }
        }
    }

    /// Keeps a copy of `event` and follows its seq.
    fn seen(&mut self, event: pb::RunEvent) {
        self.last_seq = self.last_seq.max(event.seq);
        if let Some(id) = questions::resolved(&event) {
            self.questions.entry(id.to_owned()).or_default().resolved = true;
            if self.reask.as_ref().is_some_and(|r| r.id == id) {
                self.reask = None;
            }
        }
        let copy = Seen::of(&event);
        self.shared
            .history
            .update(&self.run_id, |t| t.copies.push(copy));
    }

    /// A question was asked (or asked again): answer it now, after letting
    /// the run park, near its deadline on a tight run, or — when an answer
    /// was taken already — only if it stays open.
    async fn asked(&mut self, asked: Asked) -> Option<Next> {
        let Asked {
            id,
            kind,
            seq,
            options,
            deadline,
        } = asked;
        let state = self.questions.entry(id.clone()).or_default();
        state.deadline = deadline.or(state.deadline);
        if state.resolved || state.refused_answered {
            return None;
        }
        if state.taken {
            self.reask = Some(Reask {
                id,
                kind,
                seq,
                due: Instant::now() + REASK_GRACE,
            });
            return None;
        }
        if state.value.is_none() {
            let value = match kind {
                QuestionKind::Approval => "approved".to_owned(),
                QuestionKind::Input if options.is_empty() => "Paris".to_owned(),
                QuestionKind::Input => self.rng.pick(&options).clone(),
            };
            if kind == QuestionKind::Input && !self.tight {
                let expected = Expected::Exact(items::interviewer_output(&value));
                self.shared
                    .history
                    .update(&self.run_id, |t| t.expected = expected);
            }
            self.questions.entry(id.clone()).or_default().value = Some(value);
        }
        if self.tight
            && let Some(deadline) = deadline
        {
            deadline::wait_near(deadline, self.rng).await;
            self.answer(&id, kind, false).await;
            return None;
        }
        if self.rng.chance(0.35) {
            // Let it park: no watcher for longer than park_after.
            let wait = self.shared.park_after
                + self
                    .rng
                    .between(Duration::from_millis(300), Duration::from_millis(1500));
            return Some(Next::Park(PendingAnswer { id, kind, wait }));
        }
        let delay = self.rng.between(Duration::ZERO, Duration::from_millis(300));
        tokio::time::sleep(delay).await;
        self.answer(&id, kind, false).await;
        None
    }

    /// A question asked again after its answer was taken is still open:
    /// noted, and answered again.
    async fn answer_again(&mut self, r: Reask) {
        let run_id = self.run_id.clone();
        let what = format!(
            "asked again at seq {} after an answer was taken, still open {REASK_GRACE:?} later; answering again",
            r.seq
        );
        self.shared.history.update(&run_id, |t| {
            t.asked_again.push((r.id.clone(), r.seq, what));
        });
        if let Some(state) = self.questions.get_mut(&r.id) {
            state.taken = false;
        }
        self.answer(&r.id, r.kind, false).await;
    }

    /// Answers question `id` on a random replica (first one other than the
    /// one watched), retrying while the outcome is unknown.
    async fn answer(&mut self, id: &str, kind: QuestionKind, parked: bool) {
        let value = self
            .questions
            .get(id)
            .and_then(|q| q.value.clone())
            .unwrap_or_default();
        let n = self.replicas.len();
        let mut r = self.rng.other_than(n, self.watching);
        let mut not_found = 0;
        // Now and then a rival answers the same approval at the same moment
        // on another replica (its own reason): one call, recorded.
        let first = !std::mem::replace(
            &mut self.questions.entry(id.to_owned()).or_default().rivalled,
            true,
        );
        let rival = (first && kind == QuestionKind::Approval && self.rng.chance(0.3)).then(|| {
            let on = self.rng.other_than(n, r);
            let client = self.replicas[on].clone();
            let (run_id, question) = (self.run_id.clone(), id.to_owned());
            let (history, began) = (self.shared.history.clone(), self.shared.began);
            let margin_ms = self.margin(id);
            tokio::spawn(async move {
                let reason = rival_reason(&run_id);
                let call = client.resolve_approval(&run_id, &question, true, &reason);
                let outcome = once(call).await;
                let answer = Answer {
                    question,
                    value: "approved".into(),
                    replica: on,
                    at: began.elapsed(),
                    outcome,
                    parked,
                    rival: true,
                    late: false,
                    margin_ms,
                };
                history.update(&run_id, |t| t.answers.push(answer));
            })
        });
        for attempt in 0..MAX_ANSWER_ATTEMPTS {
            if attempt > 0 {
                r = self.rng.below(n);
            }
            let client = &self.replicas[r];
            let margin_ms = self.margin(id);
            let call = async {
                match kind {
                    QuestionKind::Approval => {
                        client
                            .resolve_approval(
                                &self.run_id,
                                id,
                                true,
                                &approval_reason(&self.run_id),
                            )
                            .await
                    }
                    QuestionKind::Input => client.submit_input(&self.run_id, id, &value).await,
                }
            };
            let outcome = match tokio::time::timeout(CALL_TIMEOUT, call).await {
                Ok(Ok(())) => Outcome::Ok,
                Ok(Err(e)) => match e.code() {
                    Code::Unavailable
                    | Code::DeadlineExceeded
                    | Code::Cancelled
                    | Code::Unknown
                    | Code::Aborted
                    | Code::Internal => {
                        Outcome::Unknown(format!("{:?}: {}", e.code(), e.message()))
                    }
                    code => Outcome::Refused {
                        code,
                        message: e.message(),
                    },
                },
                Err(_) => Outcome::Unknown(format!("no answer within {CALL_TIMEOUT:?}")),
            };
            let answer = Answer {
                question: id.to_owned(),
                value: value.clone(),
                replica: r,
                at: self.shared.began.elapsed(),
                outcome: outcome.clone(),
                parked,
                rival: false,
                late: false,
                margin_ms,
            };
            let run_id = self.run_id.clone();
            self.shared
                .history
                .update(&run_id, |t| t.answers.push(answer));
            let state = self.questions.entry(id.to_owned()).or_default();
            match outcome {
                Outcome::Ok => {
                    state.taken = true;
                    // Now and then the client answers again at once on
                    // another replica, as a double click would: the run
                    // goes on, often to its end, as that answer arrives.
                    if self.rng.chance(0.2) {
                        self.answer_late(id, kind, &value, r, parked).await;
                    }
                    return;
                }
                Outcome::Refused { code, .. } if code == Code::NotFound && not_found < 2 => {
                    // A run being resumed asks its questions again in a
                    // moment.
                    not_found += 1;
                }
                o @ Outcome::Refused { .. } => {
                    state.refused_answered = o.already_answered();
                    return;
                }
                Outcome::Unknown(_) => {}
            }
            let pause = Duration::from_millis(150 * u64::from(attempt + 1));
            tokio::time::sleep(pause).await;
        }
        if let Some(rival) = rival {
            let _ = rival.await;
        }
    }

    /// The late second answer (see [`Answer::late`]): one call to another
    /// replica than `first`, recorded.
    async fn answer_late(
        &mut self,
        id: &str,
        kind: QuestionKind,
        value: &str,
        first: usize,
        parked: bool,
    ) {
        let on = self.rng.other_than(self.replicas.len(), first);
        let client = &self.replicas[on];
        let margin_ms = self.margin(id);
        let call = async {
            match kind {
                QuestionKind::Approval => {
                    client
                        .resolve_approval(&self.run_id, id, true, &approval_reason(&self.run_id))
                        .await
                }
                QuestionKind::Input => client.submit_input(&self.run_id, id, value).await,
            }
        };
        let outcome = once(call).await;
        let answer = Answer {
            question: id.to_owned(),
            value: value.to_owned(),
            replica: on,
            at: self.shared.began.elapsed(),
            outcome,
            parked,
            rival: false,
            late: true,
            margin_ms,
        };
        let run_id = self.run_id.clone();
        self.shared
            .history
            .update(&run_id, |t| t.answers.push(answer));
    }

    /// On a tight run: the milliseconds left before question `id`'s
    /// deadline.
    fn margin(&self, id: &str) -> Option<i64> {
        let deadline = self.questions.get(id)?.deadline?;
        self.tight.then(|| deadline::margin_ms(deadline))
    }

    fn note(&mut self, note: String) {
        let run_id = self.run_id.clone();
        self.shared.history.update(&run_id, |t| t.notes.push(note));
    }
}
