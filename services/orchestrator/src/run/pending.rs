//! A question a run waits for a person on (an approval, an input
//! request), as its record keeps it: waited for until answered, its
//! deadline, or the run stopped waiting; and what a run parked in memory
//! keeps to be woken ([`Parking`], see `run::park`). A leaf.

use std::{
    collections::HashMap,
    sync::{
        Mutex, OnceLock,
        atomic::{AtomicI64, AtomicU8, AtomicUsize},
    },
};

use tokio::sync::{Notify, mpsc, oneshot};

use crate::error::Error;

/// A question of the run's: waited for, or answered (or closed).
pub(super) enum Pending<T> {
    /// Asked; answerable until the deadline (ms since the Unix epoch).
    Waiting(oneshot::Sender<T>, i64),
    /// Asked by a run parked in memory (see `run::park`): answerable until
    /// the deadline; an answer is kept for the run, which it wakes. The
    /// sender stays until then: dropped, it would tell the run as it stops
    /// that nobody answers.
    Parked(oneshot::Sender<T>, i64),
    /// Answered while the run was parking: the answer is kept for it (its
    /// inbox), and the sender stays so the body stopping meanwhile is not
    /// told that nobody answered (which it would record as a denial).
    Kept(oneshot::Sender<T>),
    Answered,
}

/// What became of an answer.
pub(super) enum Answer<T> {
    /// The waiting run has it.
    Taken,
    /// The run is parked: the answer is for it to take when it wakes.
    Kept(T),
    /// The question's deadline passed while the run was parked.
    Late,
    /// Answered already, or the run stopped waiting (deadline,
    /// cancellation).
    Closed,
}

impl<T> Pending<T> {
    /// Hands `value` to the waiting run, or keeps it for a parked one
    /// while its deadline (against `now_ms`) has not passed.
    pub(super) fn answer(&mut self, value: T, now_ms: i64) -> Answer<T> {
        match std::mem::replace(self, Pending::Answered) {
            Pending::Waiting(tx, _) => match tx.send(value) {
                Ok(()) => Answer::Taken,
                Err(_) => Answer::Closed,
            },
            Pending::Parked(tx, deadline) if now_ms < deadline => {
                *self = Pending::Kept(tx);
                Answer::Kept(value)
            }
            Pending::Parked(tx, deadline) => {
                *self = Pending::Parked(tx, deadline);
                Answer::Late
            }
            Pending::Kept(tx) => {
                *self = Pending::Kept(tx);
                Answer::Closed
            }
            Pending::Answered => Answer::Closed,
        }
    }

    /// Parks the question: still waited for, it is answerable until its
    /// deadline, which is returned; one nobody waits for any more closes.
    pub(super) fn park(&mut self) -> Option<i64> {
        match std::mem::replace(self, Pending::Answered) {
            Pending::Waiting(tx, deadline) if !tx.is_closed() => {
                *self = Pending::Parked(tx, deadline);
                Some(deadline)
            }
            Pending::Parked(tx, deadline) => {
                *self = Pending::Parked(tx, deadline);
                Some(deadline)
            }
            Pending::Kept(tx) => {
                *self = Pending::Kept(tx);
                None
            }
            _ => None,
        }
    }
}

/// How many of `questions` are still waited for.
pub(super) fn open_count<T>(questions: &HashMap<String, Pending<T>>) -> usize {
    questions
        .values()
        .filter(|p| match p {
            Pending::Waiting(tx, _) => !tx.is_closed(),
            Pending::Parked(..) => true,
            Pending::Kept(_) | Pending::Answered => false,
        })
        .count()
}

/// The earliest deadline of the questions still waited for.
pub(super) fn earliest_deadline<T>(questions: &HashMap<String, Pending<T>>) -> Option<i64> {
    questions
        .values()
        .filter_map(|p| match p {
            Pending::Waiting(tx, deadline) if !tx.is_closed() => Some(*deadline),
            Pending::Parked(_, deadline) => Some(*deadline),
            _ => None,
        })
        .min()
}

/// Registers question `id` as waited for through `tx` until
/// `deadline_ms`, unless it was answered already (a run woken from parking
/// asks again what it had asked: an answer given meanwhile stays the one).
pub(super) fn ask<T>(
    questions: &mut HashMap<String, Pending<T>>,
    id: &str,
    tx: oneshot::Sender<T>,
    deadline_ms: i64,
) {
    match questions.get_mut(id) {
        Some(Pending::Answered | Pending::Kept(_)) => {}
        Some(p) => *p = Pending::Waiting(tx, deadline_ms),
        None => {
            questions.insert(id.to_owned(), Pending::Waiting(tx, deadline_ms));
        }
    }
}

/// An answer to a parked run's question after its deadline.
pub(super) fn late(field: &'static str, what: &str, id: &str) -> Error {
    Error::FailedPrecondition {
        field,
        message: format!("{what} {id:?} passed its deadline without an answer"),
    }
}

/// A run's parking in memory, and what it wakes with (see `run::park`).
#[derive(Default)]
pub struct Parking {
    pub(super) state: AtomicU8,
    /// Tells `run::drive` to stop.
    pub(super) signal: Notify,
    /// Answers given while it was parked, by question id, as a durable
    /// run's inbox holds them (JSON).
    pub(super) inbox: Mutex<HashMap<String, Vec<u8>>>,
    /// Where it is sent to be woken.
    pub(super) wake: OnceLock<mpsc::UnboundedSender<String>>,
    /// Questions open when it was parked (still counted waiting in its
    /// tenant's quota: the woken run asks them again).
    pub(super) open: AtomicUsize,
    /// When it wakes by itself (ms since the Unix epoch): its earliest
    /// question's deadline, or its `run_timeout`.
    pub(super) wake_at: AtomicI64,
    /// Its `run_timeout` from its start (ms since the Unix epoch; 0: none).
    pub(super) run_deadline: AtomicI64,
}
