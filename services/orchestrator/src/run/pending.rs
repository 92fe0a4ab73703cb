//! A question a run waits for a person on (an approval, an input
//! request), as its record keeps it: waited for until answered, its
//! deadline, or the run stopped waiting.

use std::collections::HashMap;

use tokio::sync::oneshot;

/// A question of the run's: waited for, or answered (or closed).
pub(super) enum Pending<T> {
    /// Asked; answerable until the deadline (ms since the Unix epoch).
    Waiting(oneshot::Sender<T>, i64),
    Answered,
}

impl<T> Pending<T> {
    /// Hands `value` to the waiting run; false when it was answered already
    /// or the run stopped waiting (deadline, cancellation).
    pub(super) fn answer(&mut self, value: T) -> bool {
        match std::mem::replace(self, Pending::Answered) {
            Pending::Waiting(tx, _) => tx.send(value).is_ok(),
            Pending::Answered => false,
        }
    }
}

/// How many of `questions` are still waited for.
pub(super) fn open_count<T>(questions: &HashMap<String, Pending<T>>) -> usize {
    questions
        .values()
        .filter(|p| matches!(p, Pending::Waiting(tx, _) if !tx.is_closed()))
        .count()
}

/// The earliest deadline of the questions still waited for.
pub(super) fn earliest_deadline<T>(questions: &HashMap<String, Pending<T>>) -> Option<i64> {
    questions
        .values()
        .filter_map(|p| match p {
            Pending::Waiting(tx, deadline) if !tx.is_closed() => Some(*deadline),
            _ => None,
        })
        .min()
}
