//! A run's record: its status for GetRun, its cancellation for CancelRun,
//! its event log for WatchRun, and the approvals and inputs it waits for.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Instant, SystemTime},
};

use baton_common::ids::TraceId;
use baton_proto::v1::{self as pb, run_event::Payload};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

pub use super::clock::mono_ms;
use super::log::EventLog;
pub use super::log::{LOG_RETENTION, LogRead, Recorded};
use super::pending::{Pending, ask, earliest_deadline, open_count};
use crate::error::Error;

/// A person's answer to an approval.
#[derive(Debug, Clone)]
pub struct ApprovalAnswer {
    /// Granted or denied.
    pub approved: bool,
    /// The reason given.
    pub reason: String,
}

/// What GetRun reports.
#[derive(Debug, Clone)]
pub struct RunSnapshot {
    /// Where the run is.
    pub status: pb::RunStatus,
    /// When it ended.
    pub ended_at: Option<SystemTime>,
    /// The final output.
    pub output: String,
    /// The final run context.
    pub run_context_json: String,
    /// Totals.
    pub usage: pb::Usage,
    /// The failure's code.
    pub error_code: i32,
    /// The failure's or cancellation's message.
    pub error_message: String,
    /// The last seq emitted.
    pub last_seq: u64,
}

/// Who a run is and where its numbering starts.
struct Started {
    run_id: String,
    started_at: SystemTime,
    last_seq: u64,
}

/// One run.
pub struct RunRecord {
    /// The run's id.
    pub run_id: String,
    /// Its trace.
    pub trace_id: TraceId,
    /// What started it.
    pub kind: pb::RunKind,
    /// Agent, group or pipeline name.
    pub target: String,
    /// The tenant that started it (`""` without authentication); no other
    /// tenant sees it.
    pub tenant: String,
    /// When it started.
    pub started_at: SystemTime,
    /// Whether it outlives its caller (a closed stream does not cancel it).
    pub detached: bool,
    /// For a run resumed here, the seq it was resumed after: its events up
    /// to it are in the run store only (0 for a run started here).
    pub resumed_after: u64,
    /// The epoch this replica owns the run with in the run store (0: runs
    /// are not durable).
    pub epoch: AtomicU64,
    /// Handed over to another replica (drain): stopped here without a
    /// terminal event, its stream ended `UNAVAILABLE`.
    pub handed_over: std::sync::atomic::AtomicBool,
    /// Dropped here: lost (fenced, or its log could not be written) or
    /// given away (parked, handed over); reads go to the run store.
    dropped: AtomicBool,
    /// Until when ([`mono_ms`]) this replica's lease holds as far as it
    /// knows (set at create, claim and renewal, from when the script was
    /// sent): past it, a paused replica may have been fenced.
    lease_until: AtomicI64,
    pub(super) cancel: CancellationToken,
    pub(super) cancel_reason: Mutex<Option<String>>,
    /// Why it was failed from outside its body (history over its bound).
    pub(super) failure: Mutex<Option<super::failure::Failure>>,
    pub(super) seq: AtomicU64,
    pub(super) state: Mutex<RunSnapshot>,
    pub(super) finished: Mutex<Option<Instant>>,
    /// For a replay that has ended: whether it diverged (terminal stats).
    replay_diverged: AtomicBool,
    pub(super) approvals: Mutex<HashMap<String, Pending<ApprovalAnswer>>>,
    pub(super) inputs: Mutex<HashMap<String, Pending<String>>>,
    /// Frames and tool calls of this run alive right now.
    pub live_tasks: AtomicUsize,
    /// Tool calls that were dropped before they finished (cancelled).
    pub cancelled_tool_calls: AtomicUsize,
    pub(super) log: Mutex<EventLog>,
    pub(super) logged: tokio::sync::Notify,
    /// WatchRun streams of this run open now.
    pub watchers: AtomicUsize,
    /// Model calls and tool calls working right now (not waiting for a
    /// person): a run with none, only questions open, and no caller or
    /// watcher attached may be parked.
    pub(super) working: AtomicUsize,
    /// Whether the caller's stream is still attached.
    pub attached: AtomicBool,
    /// When the run last logged an event (ms since the Unix epoch).
    pub(super) last_event_ms: AtomicI64,
    /// For a fork: the run and seq it was forked from.
    pub forked_from: std::sync::OnceLock<super::view::Origin>,
    /// For a replay: the run it replays, and whether strictly.
    pub replay_of: std::sync::OnceLock<(String, bool)>,
    /// For a case of an experiment (RunExperiment): the experiment.
    pub experiment: std::sync::OnceLock<String>,
    /// For a run a schedule started: the schedule and the tick (ms).
    pub schedule: std::sync::OnceLock<(String, i64)>,
    /// Its webhooks (`crate::webhook`), when it has any.
    pub hooks: std::sync::OnceLock<Arc<dyn super::hooks::Hooks>>,
    /// Its live scores, once scored (`app::live_scoring`).
    pub scores: std::sync::OnceLock<Vec<pb::Score>>,
    /// For a run in a conversation: which, and what it appends.
    pub conversation: std::sync::OnceLock<Arc<crate::conversation::link::Link>>,
    /// What its root frame added to its conversation so far: kept here so a
    /// run parked in memory (its frames dropped) still appends it when it
    /// ends asleep.
    pub transcript: Mutex<Option<Arc<crate::conversation::transcript::Transcript>>>,
    /// A durable run's append to its conversation, sent with its terminal
    /// event (one round trip for both; see `durable::sequencer`).
    pub conversation_end: Mutex<Option<crate::conversation::link::PendingEnd>>,
    /// Whether the run is parked in memory, and what it wakes with.
    pub(super) park: super::pending::Parking,
}

/// Longest approval or input id the runtime makes (context id, turn and
/// call number); a longer one is malformed and is not echoed back.
pub(crate) const MAX_ID_LEN: usize = 4096;

pub(crate) fn check_id(field: &'static str, id: &str) -> Result<(), Error> {
    if id.len() > MAX_ID_LEN {
        return Err(Error::invalid(
            field,
            format!(
                "{} bytes is longer than any id this server makes ({MAX_ID_LEN})",
                id.len()
            ),
        ));
    }
    Ok(())
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RunRecord {
    /// Whether this replica may answer about the run from memory: not
    /// dropped, and for a durable run still running its lease holds.
    pub fn is_ours(&self) -> bool {
        if self.dropped.load(Ordering::SeqCst) {
            return false;
        }
        if self.epoch.load(Ordering::Relaxed) == 0
            || self.snapshot().status != pb::RunStatus::Running
        {
            return true;
        }
        mono_ms() < self.lease_until.load(Ordering::SeqCst)
    }

    /// Whether this replica's lease of the durable run has lapsed as far
    /// as it knows (its monotonic clock past the last renewal's lease): a
    /// replica paused past its lease may have been fenced, and does
    /// nothing more for the run (see `Run::hold_lease`).
    pub fn lease_lapsed(&self) -> bool {
        self.epoch.load(Ordering::Relaxed) > 0
            && mono_ms() >= self.lease_until.load(Ordering::SeqCst)
    }

    /// Resolves when this replica's lease of the durable run lapses as far
    /// as it knows, renewals counted (never, for a run in memory).
    pub async fn lease_lost(&self) {
        if self.epoch.load(Ordering::Relaxed) == 0 {
            return std::future::pending().await;
        }
        loop {
            let left = self.lease_left();
            if left <= 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(left as u64)).await;
        }
    }

    /// How long this replica's lease holds as far as it knows (ms).
    pub fn lease_left(&self) -> i64 {
        self.lease_until
            .load(Ordering::SeqCst)
            .saturating_sub(mono_ms())
    }

    /// Whether the run was dropped here (see [`Self::drop_here`]).
    pub fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::SeqCst)
    }

    /// This replica's lease holds until `until` ([`mono_ms`]).
    pub fn lease_holds_until(&self, until: i64) {
        self.lease_until.store(until, Ordering::SeqCst);
    }

    /// Stops the run here without a terminal event and forgets it: another
    /// replica owns it now, it is parked, or its log cannot be written (its
    /// lease lapses and a replica resumes it). Nothing more of it is
    /// written or shown here; its caller's stream ends `UNAVAILABLE` (the
    /// client re-attaches elsewhere). The first `reason` wins.
    pub fn drop_here(&self, reason: &str) {
        self.handed_over.store(true, Ordering::SeqCst);
        self.dropped.store(true, Ordering::SeqCst);
        self.cancel(reason);
        self.logged.notify_waiters();
    }

    /// A new running run whose token is a child of `parent`, with a new
    /// id, or `run_id` when one was chosen before (a schedule's tick names
    /// its run first: see `crate::schedule`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        run_id: Option<String>,
        trace_id: TraceId,
        kind: pb::RunKind,
        target: String,
        tenant: String,
        detached: bool,
        parent: &CancellationToken,
    ) -> Arc<Self> {
        let started = Started {
            run_id: run_id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
            started_at: SystemTime::now(),
            last_seq: 0,
        };
        Self::with(started, trace_id, kind, target, tenant, detached, parent)
    }

    /// The record of a run resumed on this replica: its id and start, its
    /// events numbered on from `last_seq`.
    #[allow(clippy::too_many_arguments)]
    pub fn resumed(
        run_id: String,
        started_at: SystemTime,
        last_seq: u64,
        trace_id: TraceId,
        kind: pb::RunKind,
        target: String,
        tenant: String,
        parent: &CancellationToken,
    ) -> Arc<Self> {
        let started = Started {
            run_id,
            started_at,
            last_seq,
        };
        // Nobody is attached to a resumed run: it goes on to its end.
        let record = Self::with(started, trace_id, kind, target, tenant, true, parent);
        record.attached.store(false, Ordering::Relaxed);
        record
    }

    fn with(
        started: Started,
        trace_id: TraceId,
        kind: pb::RunKind,
        target: String,
        tenant: String,
        detached: bool,
        parent: &CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self {
            run_id: started.run_id,
            trace_id,
            kind,
            target,
            tenant,
            started_at: started.started_at,
            detached,
            resumed_after: started.last_seq,
            epoch: AtomicU64::new(0),
            handed_over: std::sync::atomic::AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            lease_until: AtomicI64::new(i64::MAX),
            cancel: parent.child_token(),
            cancel_reason: Mutex::new(None),
            failure: Mutex::new(None),
            seq: AtomicU64::new(started.last_seq),
            state: Mutex::new(RunSnapshot {
                status: pb::RunStatus::Running,
                ended_at: None,
                output: String::new(),
                run_context_json: String::new(),
                usage: pb::Usage::default(),
                error_code: 0,
                error_message: String::new(),
                last_seq: started.last_seq,
            }),
            finished: Mutex::new(None),
            approvals: Mutex::new(HashMap::new()),
            inputs: Mutex::new(HashMap::new()),
            live_tasks: AtomicUsize::new(0),
            cancelled_tool_calls: AtomicUsize::new(0),
            log: Mutex::new(EventLog::default()),
            logged: tokio::sync::Notify::new(),
            watchers: AtomicUsize::new(0),
            working: AtomicUsize::new(0),
            attached: AtomicBool::new(true),
            last_event_ms: AtomicI64::new(now_ms()),
            forked_from: std::sync::OnceLock::new(),
            replay_of: std::sync::OnceLock::new(),
            experiment: std::sync::OnceLock::new(),
            schedule: std::sync::OnceLock::new(),
            hooks: std::sync::OnceLock::new(),
            scores: std::sync::OnceLock::new(),
            conversation: std::sync::OnceLock::new(),
            transcript: Mutex::default(),
            conversation_end: Mutex::new(None),
            replay_diverged: AtomicBool::new(false),
            park: Default::default(),
        })
    }

    /// Resolves when the next event is logged (create it before reading the
    /// log, then await it).
    pub fn next_logged(&self) -> tokio::sync::futures::Notified<'_> {
        self.logged.notified()
    }

    /// The run's cancellation token.
    pub fn token(&self) -> &CancellationToken {
        &self.cancel
    }

    pub(crate) fn next_seq(&self) -> u64 {
        let s = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.state).last_seq = s;
        s
    }

    /// Records the terminal event.
    pub(crate) fn finish(&self, payload: &Payload, seq: u64) {
        let mut s = lock(&self.state);
        s.last_seq = seq;
        s.ended_at = Some(SystemTime::now());
        match payload {
            Payload::RunCompleted(c) => {
                s.status = pb::RunStatus::Completed;
                s.output = c.output.clone();
                s.run_context_json = c.run_context_json.clone();
                s.usage = c.usage.clone().unwrap_or_default();
            }
            Payload::RunFailed(f) => {
                s.status = pb::RunStatus::Failed;
                s.error_code = f.code;
                s.error_message = f.message.clone();
                s.usage = f.usage.clone().unwrap_or_default();
            }
            Payload::RunCancelled(c) => {
                s.status = pb::RunStatus::Cancelled;
                s.error_message = c.reason.clone();
                s.usage = c.usage.clone().unwrap_or_default();
            }
            _ => {}
        }
        let stats = match payload {
            Payload::RunCompleted(c) => c.replay.as_ref(),
            Payload::RunFailed(f) => f.replay.as_ref(),
            Payload::RunCancelled(c) => c.replay.as_ref(),
            _ => None,
        };
        if stats.is_some_and(|r| r.diverged) {
            self.replay_diverged.store(true, Ordering::Relaxed);
        }
        *lock(&self.finished) = Some(Instant::now());
        // Nobody can answer a finished run's questions any more; their ids
        // stay known, so a late answer is FAILED_PRECONDITION, not NOT_FOUND.
        for p in lock(&self.approvals).values_mut() {
            *p = Pending::Answered;
        }
        for p in lock(&self.inputs).values_mut() {
            *p = Pending::Answered;
        }
    }

    /// What the core answers about the run (GetRun, ListRuns).
    pub fn view(&self) -> super::view::RunView {
        let s = self.snapshot();
        super::view::RunView {
            run_id: self.run_id.clone(),
            trace_id: self.trace_id.to_string(),
            kind: self.kind,
            target: self.target.clone(),
            status: s.status,
            started_at: self.started_at,
            ended_at: s.ended_at,
            output: s.output,
            run_context_json: s.run_context_json,
            usage: s.usage,
            error_code: s.error_code,
            error_message: s.error_message,
            last_seq: s.last_seq,
            detached: self.detached,
            waiting_for: if s.status == pb::RunStatus::Running {
                super::view::waiting_for(
                    earliest_deadline(&lock(&self.approvals)).is_some(),
                    earliest_deadline(&lock(&self.inputs)).is_some(),
                )
            } else {
                Vec::new()
            },
            forked_from: self.forked_from.get().cloned(),
            replay_of: self.replay_of.get().map(|(id, _)| id.clone()),
            experiment: self.experiment.get().cloned(),
            schedule: self.schedule.get().cloned(),
            scores: self.scores.get().cloned().unwrap_or_default(),
            replay_diverged: self.replay_diverged.load(Ordering::Relaxed),
            conversation_id: self
                .conversation
                .get()
                .map(|l| l.id.clone())
                .unwrap_or_default(),
            // Dropped from a replica with durable runs: the store has it.
            history_gone: self.epoch.load(Ordering::Relaxed) == 0 && !self.has_history(),
        }
    }

    /// Where the run is, read now (GetRun, ListRuns).
    pub fn snapshot(&self) -> RunSnapshot {
        lock(&self.state).clone()
    }

    /// How many approvals and inputs the run waits for now: asked, not
    /// answered, and still waited for (a branch dropped while it waited
    /// waits no more).
    pub fn open_questions(&self) -> (usize, usize) {
        (
            open_count(&lock(&self.approvals)),
            open_count(&lock(&self.inputs)),
        )
    }

    /// The run's totals so far (whole once it ended).
    pub fn usage(&self) -> pb::Usage {
        lock(&self.state).usage.clone()
    }

    /// Adds what a model turn spent to the totals GetRun and ListRuns
    /// show while the run runs (its end sets them whole).
    pub fn add_usage(&self, usage: &pb::Usage) {
        let mut s = lock(&self.state);
        if s.status == pb::RunStatus::Running {
            super::usage::add(&mut s.usage, usage);
        }
    }

    /// Registers an approval the run waits for until `deadline_ms`.
    pub fn await_approval(&self, id: &str, deadline_ms: i64) -> oneshot::Receiver<ApprovalAnswer> {
        let (tx, rx) = oneshot::channel();
        ask(&mut lock(&self.approvals), id, tx, deadline_ms);
        rx
    }

    /// Marks an approval answered without a person (deadline, cancel).
    pub fn close_approval(&self, id: &str) {
        if let Some(p) = lock(&self.approvals).get_mut(id) {
            *p = Pending::Answered;
        }
    }

    /// A person's answer to an approval.
    pub fn resolve_approval(&self, id: &str, answer: ApprovalAnswer) -> Result<(), Error> {
        check_id("approval_id", id)?;
        let mut approvals = lock(&self.approvals);
        let pending = approvals.get_mut(id).ok_or_else(|| Error::NotFound {
            field: "approval_id",
            message: format!("run {} has no approval {id:?} waiting", self.run_id),
        })?;
        let answer = pending.answer(answer, now_ms());
        self.settle_answer(id, answer, ("approval_id", "approval", "resolved"), |a| {
            serde_json::to_vec(&(a.approved, a.reason)).unwrap_or_default()
        })
    }

    /// Registers an input request the run waits for until `deadline_ms`.
    pub fn await_input(&self, id: &str, deadline_ms: i64) -> oneshot::Receiver<String> {
        let (tx, rx) = oneshot::channel();
        ask(&mut lock(&self.inputs), id, tx, deadline_ms);
        rx
    }

    /// An answer the run took from its record ([`Answer::Taken`] counted
    /// it as working): working until the guard, held until the answer is
    /// journaled, drops.
    pub fn answer_taken(&self) -> Working<'_> {
        Working(&self.working)
    }

    /// Counts a model or tool call as working while the guard lives.
    pub fn work(&self) -> Working<'_> {
        self.working.fetch_add(1, Ordering::SeqCst);
        Working(&self.working)
    }

    /// When the run may be parked (see `runs.park_after`): it has a
    /// question open and nothing else to do — no model or tool call
    /// working, no caller or watcher attached, no event for `quiet` — the
    /// earliest deadline of its open questions (ms since the Unix epoch).
    pub fn parkable(&self, quiet: std::time::Duration) -> Option<i64> {
        if self.attached.load(Ordering::SeqCst)
            || self.watchers.load(Ordering::SeqCst) > 0
            || self.working.load(Ordering::SeqCst) > 0
            || now_ms() - self.last_event_ms.load(Ordering::Relaxed) < quiet.as_millis() as i64
        {
            return None;
        }
        let approvals = earliest_deadline(&lock(&self.approvals));
        let inputs = earliest_deadline(&lock(&self.inputs));
        approvals.into_iter().chain(inputs).min()
    }

    /// Whether the run only waits for people now: a question open and no
    /// model or tool call working (`baton up` cancels such a run when it
    /// stops instead of holding its shutdown for it).
    pub fn waits_for_people(&self) -> bool {
        self.working.load(Ordering::SeqCst) == 0
            && (earliest_deadline(&lock(&self.approvals)).is_some()
                || earliest_deadline(&lock(&self.inputs)).is_some())
    }

    /// Marks an input request closed without an answer.
    pub fn close_input(&self, id: &str) {
        if let Some(p) = lock(&self.inputs).get_mut(id) {
            *p = Pending::Answered;
        }
    }

    /// A person's answer to an input request.
    pub fn submit_input(&self, id: &str, input: String) -> Result<(), Error> {
        check_id("input_id", id)?;
        let mut inputs = lock(&self.inputs);
        let pending = inputs.get_mut(id).ok_or_else(|| Error::NotFound {
            field: "input_id",
            message: format!("run {} has no input request {id:?} waiting", self.run_id),
        })?;
        let answer = pending.answer(input, now_ms());
        self.settle_answer(id, answer, ("input_id", "input request", "answered"), |i| {
            serde_json::to_vec(&i).unwrap_or_default()
        })
    }

    /// When the run finished.
    pub(super) fn finished_at(&self) -> Option<Instant> {
        *lock(&self.finished)
    }

    /// Bytes its result holds (output, run context, error message).
    pub(super) fn result_bytes(&self) -> u64 {
        let s = lock(&self.state);
        (s.output.len() + s.run_context_json.len() + s.error_message.len()) as u64
    }
}

/// A model or tool call working (see [`RunRecord::work`]).
pub struct Working<'a>(&'a AtomicUsize);

impl Drop for Working<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(super) use super::clock::now_ms;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn record() -> Arc<RunRecord> {
        RunRecord::new(
            None,
            TraceId::random(),
            pb::RunKind::Agent,
            "a".into(),
            String::new(),
            true,
            &CancellationToken::new(),
        )
    }

    #[test]
    fn only_a_run_that_only_waits_for_people_may_be_parked() {
        let run = record();
        let quiet = Duration::ZERO;
        // No question open.
        run.attached.store(false, Ordering::SeqCst);
        assert_eq!(run.parkable(quiet), None);
        let approval = run.await_approval("approval:c1", 5_000);
        let input = run.await_input("input:c2:1", 3_000);
        assert_eq!(run.parkable(quiet), Some(3_000), "the earliest deadline");
        // A caller, a watcher or a call working keeps it here.
        run.attached.store(true, Ordering::SeqCst);
        assert_eq!(run.parkable(quiet), None);
        run.attached.store(false, Ordering::SeqCst);
        run.watchers.fetch_add(1, Ordering::SeqCst);
        assert_eq!(run.parkable(quiet), None);
        run.watchers.fetch_sub(1, Ordering::SeqCst);
        {
            let _working = run.work();
            assert_eq!(run.parkable(quiet), None);
        }
        // Not quiet for long enough.
        assert_eq!(run.parkable(Duration::from_secs(60)), None);
        // A question nobody waits for any more does not count.
        drop(input);
        assert_eq!(run.parkable(quiet), Some(5_000));
        run.resolve_approval(
            "approval:c1",
            ApprovalAnswer {
                approved: true,
                reason: String::new(),
            },
        )
        .expect("open");
        drop(approval);
        assert_eq!(run.parkable(quiet), None);
    }
}
