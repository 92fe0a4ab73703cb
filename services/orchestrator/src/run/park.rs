//! Parking a memory-mode run that only waits for people: its task — the
//! whole tree of its futures, its channels, its span — is dropped, and
//! what stays is its record (status, log, recording, the request that
//! started it, the questions it waits for). An answer, a cancel, a
//! question's deadline or the run's `run_timeout` wakes it: the run is
//! built again from its request and walks its recording to where it was,
//! as a durable run resumed on another replica does (`RunResumed`, then
//! its open questions asked again with their ids and deadlines).
//!
//! A run is parked when it may be ([`RunRecord::parkable`]: quiet for
//! `runs.park_after`, no call working, nobody attached), it is detached,
//! not a replay (which answers from another run's recording) and not
//! durable (durable runs park in Redis, see `app::upkeep`). The states:
//!
//! - running: its task runs (the states and what a parked run keeps are
//!   its record's `Parking`, in `run::pending`);
//! - parking: asked to stop ([`RunRecord::park_in_memory`]); `run::drive`
//!   returns without a terminal event and the task ends
//!   ([`RunRecord::settle_park`]);
//! - asleep: no task; answers are kept for it ([`RunRecord::keep_answer`]);
//! - waking: sent to the keeper (`app::park`), which starts it again or
//!   ends it (cancelled, or past its `run_timeout`) with its one terminal
//!   event ([`RunRecord::end_parked`]).
//!
//! An answer is never lost nor told OK twice: one the running run took
//! from its record counts as working until it is journaled (so a run is
//! never parked with an answer in hand), and once parked its questions are
//! [`Pending::Parked`]: an answer before the deadline is kept, after it
//! refused, and a woken run asking again keeps what was answered meanwhile.

use std::{sync::atomic::Ordering, time::Duration};

use baton_proto::v1::{self as pb, run_event::Payload};
use prost::Message as _;

use crate::error::Error;
use tokio::sync::mpsc;

use super::{
    pending::{Answer, Pending, earliest_deadline, late},
    record::{RunRecord, lock, now_ms},
};

const RUNNING: u8 = 0;
const PARKING: u8 = 1;
const ASLEEP: u8 = 2;
const WAKING: u8 = 3;

/// Why a woken run ends instead of going on.
pub enum Ending {
    /// Cancelled while it was parked (CancelRun, shutdown).
    Cancelled,
    /// Its `run_timeout` passed.
    TimedOut,
}

impl RunRecord {
    /// The run must end by `run_timeout` from its start (kept for when it
    /// is parked).
    pub fn set_run_timeout(&self, run_timeout: Duration) {
        let started = self
            .started_at
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let deadline = started.saturating_add(run_timeout).as_millis();
        self.park.run_deadline.store(
            i64::try_from(deadline).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
    }

    /// When the run's `run_timeout` ends (ms since the Unix epoch), if set.
    pub fn run_deadline_ms(&self) -> Option<i64> {
        Some(self.park.run_deadline.load(Ordering::Relaxed)).filter(|d| *d > 0)
    }

    /// What is left of the run's `run_timeout`.
    pub fn run_time_left(&self) -> Duration {
        let left = self.park.run_deadline.load(Ordering::Relaxed) - now_ms();
        Duration::from_millis(left.max(0) as u64)
    }

    /// Asks a memory-mode run that only waits for people (quiet for
    /// `quiet`) to park: its questions become answerable while it sleeps
    /// and `run::drive` is told to stop. Returns when it wakes by itself;
    /// `None` when it may not park now.
    pub fn park_in_memory(
        &self,
        quiet: Duration,
        wake: &mpsc::UnboundedSender<String>,
    ) -> Option<i64> {
        if !self.detached
            || self.epoch.load(Ordering::Relaxed) != 0
            || self.replay_of.get().is_some()
            || self.is_dropped()
            || self.park.state.load(Ordering::SeqCst) != RUNNING
        {
            return None;
        }
        self.parkable(quiet)?;
        let mut approvals = lock(&self.approvals);
        let mut inputs = lock(&self.inputs);
        // Again under the locks an answer is taken under: an answer taken
        // and not yet journaled counts as working.
        if self.working.load(Ordering::SeqCst) > 0
            || self.attached.load(Ordering::SeqCst)
            || self.watchers.load(Ordering::SeqCst) > 0
        {
            return None;
        }
        let earliest = earliest_deadline(&approvals)
            .into_iter()
            .chain(earliest_deadline(&inputs))
            .min()?;
        if self
            .park
            .state
            .compare_exchange(RUNNING, PARKING, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return None;
        }
        let open = approvals.values_mut().filter_map(Pending::park).count()
            + inputs.values_mut().filter_map(Pending::park).count();
        drop((approvals, inputs));
        let run_deadline = self.park.run_deadline.load(Ordering::Relaxed);
        let wake_at = if run_deadline > 0 {
            earliest.min(run_deadline)
        } else {
            earliest
        };
        self.park.open.store(open, Ordering::Relaxed);
        self.park.wake_at.store(wake_at, Ordering::SeqCst);
        // Answers taken from the inbox by the run before are journaled.
        lock(&self.park.inbox).clear();
        let _ = self.park.wake.set(wake.clone());
        self.park.signal.notify_one();
        Some(wake_at)
    }

    /// Resolves when the run is asked to park (see `run::drive`).
    pub async fn park_signal(&self) {
        self.park.signal.notified().await;
    }

    /// Whether the run is asked to park, or parked.
    pub fn is_parked(&self) -> bool {
        self.park.state.load(Ordering::SeqCst) != RUNNING
    }

    /// Its task ended: when it was parking and has not ended, it is asleep
    /// now (true), and woken at once if an answer, a cancel or its wake
    /// time came meanwhile; otherwise it runs (or ended) as before.
    pub fn settle_park(&self) -> bool {
        if self.park.state.load(Ordering::SeqCst) != PARKING {
            return false;
        }
        if self.snapshot().status != pb::RunStatus::Running || self.is_dropped() {
            self.park.state.store(RUNNING, Ordering::SeqCst);
            return false;
        }
        self.park.state.store(ASLEEP, Ordering::SeqCst);
        if self.wake_due() {
            self.wake();
        }
        true
    }

    /// Whether an asleep run has something to wake for now.
    pub fn wake_due(&self) -> bool {
        self.token().is_cancelled()
            || now_ms() >= self.park.wake_at.load(Ordering::SeqCst)
            || !lock(&self.park.inbox).is_empty()
    }

    /// Sends an asleep run to be woken (once).
    pub fn wake(&self) {
        if self
            .park
            .state
            .compare_exchange(ASLEEP, WAKING, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return;
        }
        let sent = self
            .park
            .wake
            .get()
            .is_some_and(|tx| tx.send(self.run_id.clone()).is_ok());
        if !sent {
            // Nobody wakes runs any more (shutting down).
            self.park.state.store(ASLEEP, Ordering::SeqCst);
        }
    }

    /// Whether the run was sent to be woken and is not started again yet.
    pub fn is_waking(&self) -> bool {
        self.park.state.load(Ordering::SeqCst) == WAKING
    }

    /// Whether the run is asleep.
    pub fn is_asleep(&self) -> bool {
        self.park.state.load(Ordering::SeqCst) == ASLEEP
    }

    /// Takes an asleep run to be woken (the keeper's sweep at shutdown).
    pub fn take_to_wake(&self) -> bool {
        self.park
            .state
            .compare_exchange(ASLEEP, WAKING, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// What a person's answer to question `id` became (called under the
    /// lock it was given under): taken by the waiting run (counted working
    /// until journaled: see `Self::answer_taken`), or kept for the parked
    /// run (`encode`d as a durable inbox holds it), which it wakes; or
    /// refused naming `field` (the question is `what`, answered already is
    /// `done`).
    pub(super) fn settle_answer<T>(
        &self,
        id: &str,
        answer: Answer<T>,
        (field, what, done): (&'static str, &str, &str),
        encode: impl FnOnce(T) -> Vec<u8>,
    ) -> Result<(), Error> {
        match answer {
            Answer::Taken => {
                self.working.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
            Answer::Kept(value) => {
                lock(&self.park.inbox).insert(id.to_owned(), encode(value));
                self.wake();
                Ok(())
            }
            Answer::Late => Err(late(field, what, id)),
            Answer::Closed => Err(Error::FailedPrecondition {
                field,
                message: format!("{what} {id:?} was already {done}"),
            }),
        }
    }

    /// The answer to question `id` given while the run was parked.
    pub fn take_parked_answer(&self, id: &str) -> Option<Vec<u8>> {
        lock(&self.park.inbox).remove(id)
    }

    /// A woken run starts again: its questions open at parking, which it
    /// asks again, leave its tenant's waiting count meanwhile (returned);
    /// its totals are counted again as it walks its recording.
    pub fn start_again(&self) -> usize {
        lock(&self.state).usage = pb::Usage::default();
        self.park.state.store(RUNNING, Ordering::SeqCst);
        self.park.open.swap(0, Ordering::Relaxed)
    }

    /// Why a woken run ends now, if it does.
    pub fn ending(&self) -> Option<Ending> {
        if self.token().is_cancelled() {
            return Some(Ending::Cancelled);
        }
        let deadline = self.park.run_deadline.load(Ordering::Relaxed);
        (deadline > 0 && now_ms() >= deadline).then_some(Ending::TimedOut)
    }

    /// Ends a woken run here with `payload`, its terminal event (in its
    /// root context), without starting it again.
    pub fn end_parked(&self, payload: Payload) {
        let seq = self.next_seq();
        let span_id = match self.events_after(0, 1) {
            super::log::LogRead::Events(first, _) => {
                first.first().map(|e| e.span_id.clone()).unwrap_or_default()
            }
            _ => String::new(),
        };
        let event = pb::RunEvent {
            seq,
            context_id: "root".into(),
            span_id,
            time: Some(baton_proto::wkt::Timestamp::from(
                std::time::SystemTime::now(),
            )),
            payload: Some(payload.clone()),
            ..Default::default()
        };
        self.finish(&payload, seq);
        self.park.state.store(RUNNING, Ordering::SeqCst);
        self.log_event(seq, event.encode_to_vec().into(), true);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use baton_common::ids::TraceId;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::run::record::ApprovalAnswer;

    fn detached() -> Arc<RunRecord> {
        let run = RunRecord::new(
            None,
            TraceId::random(),
            pb::RunKind::Agent,
            "a".into(),
            String::new(),
            true,
            &CancellationToken::new(),
        );
        run.attached.store(false, Ordering::SeqCst);
        run
    }

    fn yes() -> ApprovalAnswer {
        ApprovalAnswer {
            approved: true,
            reason: String::new(),
        }
    }

    #[test]
    fn an_answer_given_while_the_run_parks_is_kept_and_the_stopping_body_is_not_told_nobody_answered()
     {
        let run = detached();
        let (tx, _wakes) = mpsc::unbounded_channel();
        let mut rx = run.await_approval("approval:c1", now_ms() + 60_000);
        assert!(run.park_in_memory(Duration::ZERO, &tx).is_some());
        // Parking: its body has not stopped yet when the answer comes.
        run.resolve_approval("approval:c1", yes()).expect("told OK");
        assert!(
            matches!(
                rx.try_recv(),
                Err(tokio::sync::oneshot::error::TryRecvError::Empty)
            ),
            "the body still waits: it records no denial"
        );
        assert!(run.take_parked_answer("approval:c1").is_some());
        // A second answer is refused: the first stays the answer.
        assert!(run.resolve_approval("approval:c1", yes()).is_err());
    }

    #[test]
    fn an_answer_taken_and_not_journaled_keeps_the_run_from_parking() {
        let run = detached();
        let (tx, mut wakes) = mpsc::unbounded_channel();
        let _rx = run.await_approval("approval:c1", now_ms() + 60_000);
        run.resolve_approval("approval:c1", yes()).expect("open");
        assert_eq!(run.park_in_memory(Duration::ZERO, &tx), None);
        drop(run.answer_taken());
        // Nothing open any more.
        assert_eq!(run.park_in_memory(Duration::ZERO, &tx), None);
        assert!(wakes.try_recv().is_err());
    }

    #[test]
    fn a_parked_runs_answer_is_kept_once_and_wakes_it() {
        let run = detached();
        let (tx, mut wakes) = mpsc::unbounded_channel();
        let deadline = now_ms() + 60_000;
        let rx = run.await_approval("approval:c1", deadline);
        let _input = run.await_input("input:c2:1", deadline + 1);
        assert_eq!(run.park_in_memory(Duration::ZERO, &tx), Some(deadline));
        drop(rx);
        assert!(run.settle_park(), "asleep");
        assert_eq!(run.open_questions(), (1, 1), "still waited for");
        run.resolve_approval("approval:c1", yes()).expect("kept");
        assert_eq!(wakes.try_recv().ok(), Some(run.run_id.clone()));
        let again = run.resolve_approval("approval:c1", yes());
        assert!(
            matches!(again, Err(crate::error::Error::FailedPrecondition { .. })),
            "{again:?}"
        );
        // Asked again as the run wakes: the answer given stays the one.
        let rx = run.await_approval("approval:c1", deadline);
        assert!(run.take_parked_answer("approval:c1").is_some());
        drop(rx);
        assert!(
            run.resolve_approval("approval:c1", yes()).is_err(),
            "answered once"
        );
        assert_eq!(run.start_again(), 2);
        assert!(!run.is_parked());
    }

    #[test]
    fn a_parked_question_past_its_deadline_refuses_an_answer() {
        let run = detached();
        let (tx, _wakes) = mpsc::unbounded_channel();
        let deadline = now_ms() + 30;
        let rx = run.await_input("input:c1:1", deadline);
        assert!(run.park_in_memory(Duration::ZERO, &tx).is_some());
        drop(rx);
        run.settle_park();
        std::thread::sleep(Duration::from_millis(40));
        let late = run.submit_input("input:c1:1", "x".into());
        assert!(
            matches!(&late, Err(crate::error::Error::FailedPrecondition { message, .. })
                if message.contains("deadline")),
            "{late:?}"
        );
        assert!(run.wake_due(), "its deadline wakes it");
    }

    #[test]
    fn a_cancel_while_parked_wakes_the_run_and_it_ends_cancelled() {
        let run = detached();
        let (tx, mut wakes) = mpsc::unbounded_channel();
        let _rx = run.await_approval("approval:c1", now_ms() + 60_000);
        run.park_in_memory(Duration::ZERO, &tx);
        run.settle_park();
        run.cancel("stop");
        assert_eq!(wakes.try_recv().ok(), Some(run.run_id.clone()));
        assert!(matches!(run.ending(), Some(Ending::Cancelled)));
        run.end_parked(Payload::RunCancelled(pb::RunCancelled {
            reason: run.cancel_reason(),
            ..Default::default()
        }));
        assert_eq!(run.snapshot().status, pb::RunStatus::Cancelled);
        assert_eq!(run.snapshot().last_seq, 1);
    }
}
