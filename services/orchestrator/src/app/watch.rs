//! The watch producers: a run's logged events after a seq, then live ones
//! until the terminal event, filtered on the server. Watchers share the
//! run's one log and read it a batch at a time; how many may watch one run
//! is bounded.

use std::sync::Arc;

use baton_proto::v1 as pb;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    error::{Error, Result},
    run::{
        durable::RedisRuns,
        events::{self, EventStream, Filter, Outgoing},
        record::{LogRead, RunRecord},
    },
};

/// The stream of a run's events after `after_seq` (see the module docs);
/// `RESOURCE_EXHAUSTED` when the run has `max_watchers` watchers already,
/// `FAILED_PRECONDITION` when the events after `after_seq` are no longer
/// kept.
pub(super) fn stream(
    run: Arc<RunRecord>,
    after_seq: u64,
    filter: Filter,
    max_watchers: usize,
    shutdown: &CancellationToken,
    tasks: &TaskTracker,
) -> Result<EventStream> {
    match run.events_after(after_seq, 0) {
        LogRead::Gone(oldest) => {
            return Err(Error::FailedPrecondition {
                field: "after_seq",
                message: format!(
                    "this replica has the run's events from seq {oldest} on (it resumed the run there)"
                ),
            });
        }
        LogRead::Expired => return Err(history_gone(&run.run_id)),
        LogRead::Events(..) => {}
    }
    let watching = Watching::new(&run, max_watchers)?;
    let (tx, stream) = events::channel();
    let shutdown = shutdown.clone();
    tasks.spawn(async move {
            let _watching = watching;
            let mut cursor = after_seq;
            loop {
                let next = run.next_logged();
                let (batch, ended) = match run.outgoing_after(cursor, WATCH_BATCH) {
                    LogRead::Events(batch, ended) => (batch, ended),
                    LogRead::Expired => {
                        let _ = tx.send(Err(history_gone(&run.run_id))).await;
                        return;
                    }
                    LogRead::Gone(oldest) => {
                        let status = Error::Aborted(format!(
                            "events after {cursor} are not on this replica (its oldest: {oldest})"
                        ));
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                };
                let full = batch.len() == WATCH_BATCH;
                for event in batch {
                    cursor = event.seq();
                    // A packed event is not looked at: the run's terminal
                    // event is its last, so `ended` holds when it is read.
                    let terminal = matches!(&event, Outgoing::Event(e)
                        if e.payload.as_ref().is_some_and(events::is_terminal));
                    if let Some(event) = filter.admit(event)
                        && tx.send(Ok(event)).await.is_err()
                    {
                        return;
                    }
                    if terminal {
                        return;
                    }
                }
                if ended {
                    return;
                }
                if full {
                    continue;
                }
                // Dropped here (another replica owns it, it parked, or this
                // replica handed it over): its log goes on in the run store.
                if run.is_dropped() {
                    let _ = tx
                        .send(Err(Error::Unavailable(format!(
                            "the run left this replica ({}): re-attach with WatchRun(after_seq = {cursor})",
                            run.cancel_reason()
                        ))))
                        .await;
                    return;
                }
                tokio::select! {
                    _ = next => {}
                    _ = tx.closed() => return,
                    _ = shutdown.cancelled() => {
                        let _ = tx.send(Err(Error::ShuttingDown)).await;
                        return;
                    }
                }
            }
        });
    Ok(stream)
}

/// A run whose history this replica no longer keeps: evicted to make room
/// for newer runs' (`runs.max_finished_bytes`).
pub(crate) fn history_gone(run_id: &str) -> Error {
    Error::FailedPrecondition {
        field: "run_id",
        message: format!(
            "the history of run {run_id} is no longer kept: it was evicted to make room for newer runs' (runs.max_finished_bytes); GetRun still has its result"
        ),
    }
}

/// Events a watcher takes from its run's log at a time: watchers share the
/// log and hold at most this many (plus the stream's buffer) each.
const WATCH_BATCH: usize = 128;

/// One open WatchRun stream of a run, counted until dropped.
struct Watching(Arc<RunRecord>);

impl Watching {
    /// Counts a watcher of `run` unless it has `max` already.
    fn new(run: &Arc<RunRecord>, max: usize) -> Result<Self> {
        let open = run
            .watchers
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if open >= max {
            run.watchers
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            return Err(Error::Exhausted {
                field: "run_id".into(),
                message: format!(
                    "run {} already has {open} open WatchRun streams on this replica, the limit (runs.max_watchers_per_run)",
                    run.run_id
                ),
            });
        }
        Ok(Self(run.clone()))
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.0
            .watchers
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// How long one blocking read of a stored run's log waits before the
/// watcher looks whether its client or the server is still there.
const TAIL_BLOCK: std::time::Duration = std::time::Duration::from_secs(1);

/// The stream of a run kept in Redis that is not on this replica: its
/// logged events after `after_seq`, read a batch at a time, then its new
/// ones as they are logged (a blocking read on a connection of the
/// watcher's own), until its terminal event. `UNAVAILABLE` when Redis stops
/// answering or the server shuts down.
pub(super) fn stored(
    runs: Arc<RedisRuns>,
    run_id: String,
    after_seq: u64,
    filter: Filter,
    shutdown: &CancellationToken,
    tasks: &TaskTracker,
) -> EventStream {
    let (tx, stream) = events::channel();
    let shutdown = shutdown.clone();
    tasks.spawn(async move {
        let send_all = async |events: Vec<pb::RunEvent>, cursor: &mut u64| -> Option<bool> {
            for e in events {
                *cursor = e.seq;
                let Some(payload) = e.payload.as_ref() else {
                    continue;
                };
                let terminal = events::is_terminal(payload);
                if filter.passes_at(&e.context_id, e.depth, payload)
                    && tx.send(Ok(e.into())).await.is_err()
                {
                    return None;
                }
                if terminal {
                    return Some(true);
                }
            }
            Some(false)
        };
        let mut cursor = after_seq;
        // What is logged already.
        loop {
            let batch = tokio::select! {
                _ = shutdown.cancelled() => Err(Error::ShuttingDown),
                r = runs.events_after(&run_id, cursor, WATCH_BATCH) => r,
            };
            match batch {
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
                Ok(batch) if batch.is_empty() => break,
                Ok(batch) => match send_all(batch, &mut cursor).await {
                    None | Some(true) => return,
                    Some(false) => {}
                },
            }
        }
        // Then what comes.
        let mut conn = match runs.tail_connection(TAIL_BLOCK).await {
            Ok(c) => c,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        loop {
            let batch = tokio::select! {
                _ = tx.closed() => return,
                _ = shutdown.cancelled() => Err(Error::ShuttingDown),
                r = runs.tail(&mut conn, &run_id, cursor, TAIL_BLOCK, WATCH_BATCH) => r,
            };
            match batch {
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
                Ok(batch) => match send_all(batch, &mut cursor).await {
                    None | Some(true) => return,
                    Some(false) => {}
                },
            }
        }
    });
    stream
}
