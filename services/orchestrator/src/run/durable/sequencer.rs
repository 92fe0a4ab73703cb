//! The sequencer of a durable run (`runs.store = "redis"`): numbers a run's
//! events as [`crate::run::events::sequence`] does, but writes every batch to
//! the run's log in Redis (with the run's end, when the batch holds it)
//! before any client sees one of its events — so an event a client has
//! seen is never lost or rewritten.
//!
//! Batches are whatever the run produced while the previous batch was
//! being written (up to [`MAX_BATCH`]): one script call carries many
//! events when the run is fast, one when it is slow.
//!
//! When the log cannot be written (Redis does not answer, after one retry)
//! or another replica's epoch fences this one out, the run is dropped here
//! (stopped without a terminal event, its record no longer answered from:
//! `RunRecord::drop_here`) and the caller's stream ends with
//! `UNAVAILABLE`: nothing is shown, kept or answered here that the log does
//! not have. A fenced run goes on on the replica that claimed it; one whose
//! log could not be written is claimed once its lease lapses (by any
//! replica, this one included) and resumed from what the log has.

use std::{sync::Arc, time::SystemTime};

use baton_proto::v1::{self as pb, run_event::Payload};
use tokio::sync::mpsc;

use super::{Append, Pushes, RedisRuns, RunEnd, now_ms};
use crate::{
    error::Error,
    run::{
        events::{self, Draft, Filter, is_terminal},
        log::{Logged, Outgoing, PackedEvent, ids_tail},
        record::RunRecord,
    },
};

/// Most events written to Redis in one script call.
pub const MAX_BATCH: usize = 512;

/// Where a durable run's events go (its log in the run store), and with
/// which epoch.
pub struct DurableLog {
    /// The run store.
    pub runs: Arc<RedisRuns>,
    /// The epoch this replica owns the run with.
    pub epoch: u64,
}

/// How a terminal payload ends the run, as the run store records it.
fn run_end(payload: &Payload) -> Option<RunEnd> {
    let base = |status: pb::RunStatus, usage: &Option<pb::Usage>| RunEnd {
        status,
        ended_ms: now_ms(),
        output: String::new(),
        run_context_json: String::new(),
        usage: Some(usage.clone().unwrap_or_default()),
        error_code: 0,
        error_message: String::new(),
        replay_diverged: false,
        conversation: None,
    };
    let diverged = |stats: &Option<pb::ReplayStats>| stats.as_ref().is_some_and(|r| r.diverged);
    Some(match payload {
        Payload::RunCompleted(c) => RunEnd {
            output: c.output.clone(),
            run_context_json: c.run_context_json.clone(),
            replay_diverged: diverged(&c.replay),
            ..base(pb::RunStatus::Completed, &c.usage)
        },
        Payload::RunFailed(f) => RunEnd {
            error_code: f.code,
            error_message: f.message.clone(),
            replay_diverged: diverged(&f.replay),
            ..base(pb::RunStatus::Failed, &f.usage)
        },
        Payload::RunCancelled(c) => RunEnd {
            error_message: c.reason.clone(),
            replay_diverged: diverged(&c.replay),
            ..base(pb::RunStatus::Cancelled, &c.usage)
        },
        _ => return None,
    })
}

/// Numbers, logs in Redis, records, filters and forwards a run's events
/// until every frame has dropped its sender (see the module docs).
pub async fn sequence(
    mut drafts: mpsc::Receiver<Box<Draft>>,
    out: events::EventSender,
    filter: Filter,
    record: Arc<RunRecord>,
    log: DurableLog,
    emitted: prometheus_client::metrics::counter::Counter,
) {
    let tail = ids_tail(record.trace_id.as_str(), &record.run_id);
    let run_id = record.run_id.clone();
    let mut client_gone = false;
    // Once the log cannot be written, the run is cancelled and its last
    // events are kept here only.
    let mut broken = false;
    let mut batch: Vec<Box<Draft>> = Vec::with_capacity(MAX_BATCH);
    loop {
        let first = tokio::select! {
            biased;
            d = drafts.recv() => match d {
                Some(d) => d,
                None => {
                    if record.handed_over.load(std::sync::atomic::Ordering::SeqCst) && !client_gone {
                        let why = if record.is_dropped() { record.cancel_reason() } else { "this replica is shutting down".into() };
                        let _ = out
                            .send(Err(Error::Unavailable(format!(
                                "{why}; the run goes on on another replica: re-attach with WatchRun(after_seq)"
                            ))))
                            .await;
                    }
                    return;
                }
            },
            _ = out.closed(), if !client_gone => {
                client_gone = true;
                record.attached.store(false, std::sync::atomic::Ordering::SeqCst);
                if !record.detached {
                    record.cancel("client disconnected");
                }
                continue;
            }
        };
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match drafts.try_recv() {
                Ok(d) => batch.push(d),
                Err(_) => break,
            }
        }
        let now = baton_proto::wkt::Timestamp::from(SystemTime::now());
        let mut records: Vec<(String, Vec<u8>)> = Vec::new();
        let logged: Vec<Logged> = batch
            .drain(..)
            .map(|mut d| {
                let seq = record.next_seq();
                if d.record_span {
                    records.push((
                        format!("sp/{}", d.ctx.id),
                        d.ctx.span_id.clone().into_bytes(),
                    ));
                }
                if let Some((unit, value)) = d.journal.take() {
                    // Where the point ended, for forks: `#{unit}` = seq.
                    records.push((format!("#{unit}"), seq.to_string().into_bytes()));
                    records.push((unit, value));
                }
                Logged {
                    seq,
                    time: now,
                    ctx: d.ctx,
                    agent: d.agent,
                    payload: d.payload,
                    replayed: false,
                }
            })
            .collect();
        emitted.inc_by(logged.len() as u64);
        // Each encoded once: what Redis is sent, the log keeps and the
        // client is sent.
        let events: Vec<PackedEvent> = logged
            .iter()
            .map(|l| PackedEvent::new(l.encode(), l.seq, tail.clone()))
            .collect();
        // The webhooks' deliveries of this batch, written with it.
        let hooks = record.hooks.get();
        let queued: Vec<crate::run::hooks::Queued> = hooks
            .map(|h| logged.iter().flat_map(|l| h.deliveries(l)).collect())
            .unwrap_or_default();
        let mut forget_lease = false;
        if !broken {
            let end = logged.iter().find_map(|l| run_end(&l.payload));
            let ended = end.is_some();
            // A model turn changed the totals: every replica's GetRun
            // reads them from the run's hash.
            let usage = logged
                .iter()
                .any(|l| matches!(l.payload, Payload::MessageCompleted(_)))
                .then(|| record.usage());
            // A run in a conversation appends to it in two phases: its
            // append is written with its end (one script, fenced by its
            // epoch: a fenced replica appends nothing), then applied,
            // before its caller sees the end. Should this replica stop
            // between the two, the next message to the conversation finds
            // the run ended and applies what its record keeps (see
            // `app::conversations`); applying twice applies once.
            let conversation = ended
                .then(|| {
                    record
                        .conversation_end
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .take()
                })
                .flatten();
            let mut end = end;
            if let (Some(end), Some(c)) = (end.as_mut(), &conversation) {
                end.conversation = Some(c.encoded.clone());
            }
            let written = match (hooks, queued.is_empty()) {
                (Some(h), false) => {
                    let streams: Vec<String> = queued.iter().map(|q| q.stream.clone()).collect();
                    let mut pushes = Pushes::default();
                    for q in queued {
                        let (key, keep_ms) = h.queue_key(&q.stream);
                        pushes.keep_ms = keep_ms;
                        pushes.items.push((key, q.raw));
                    }
                    // Due before written: a replica killed between the two
                    // leaves a due stream, never a stranded delivery; and
                    // due again once written, in case a worker found the
                    // stream empty between the two and let it go. Tried
                    // twice, as the write is (a reconnecting connection
                    // fails its first command).
                    let marked = match h.mark_due(&streams).await {
                        Err(_) => h.mark_due(&streams).await,
                        ok => ok,
                    };
                    match marked {
                        Ok(()) => {
                            let w = write(
                                &log,
                                &run_id,
                                &events,
                                &records,
                                end.as_ref(),
                                usage,
                                &pushes,
                            )
                            .await;
                            if w.is_ok() {
                                if h.mark_due(&streams).await.is_err()
                                    && let Err(e) = h.mark_due(&streams).await
                                {
                                    tracing::debug!(run_id = %run_id, error = %e, "webhook streams not marked due again (they are due from before)");
                                }
                                h.written();
                            }
                            w
                        }
                        Err(e) => Err(e),
                    }
                }
                _ => {
                    write(
                        &log,
                        &run_id,
                        &events,
                        &records,
                        end.as_ref(),
                        usage,
                        &Pushes::default(),
                    )
                    .await
                }
            };
            if let (Ok(()), Some(c)) = (&written, conversation)
                && let Err(e) = c.apply.await
            {
                tracing::warn!(run_id = %run_id, error = %e, "a run's messages were not appended to its conversation yet: the next message applies them");
            }
            forget_lease = written.is_ok() && ended;
            if let Err(e) = written {
                broken = true;
                tracing::warn!(run_id = %run_id, error = %e, "cannot log the run's events; dropping it here");
                record.drop_here(&format!("the run's log cannot be written here: {e}"));
                if !client_gone {
                    let _ = out.send(Err(e)).await;
                    client_gone = true;
                }
            }
        }
        // Nothing the log does not have is kept or shown.
        if broken {
            continue;
        }
        // The run ended once its log says so: GetRun here says so too from
        // now on, before the batch's events are through to the caller (a
        // watcher reading the log in Redis may see the end first).
        if let Some(end) = logged.iter().find(|l| is_terminal(&l.payload)) {
            record.finish(&end.payload, end.seq);
        }
        for (logged, event) in logged.into_iter().zip(events) {
            let terminal = is_terminal(&logged.payload);
            let forward = !client_gone && filter.passes(&logged.ctx, &logged.payload);
            record.log_event(logged.seq, event.bytes().clone(), terminal);
            if forward && out.send(Ok(Outgoing::Packed(event))).await.is_err() {
                client_gone = true;
                record
                    .attached
                    .store(false, std::sync::atomic::Ordering::SeqCst);
                if !record.detached {
                    record.cancel("client disconnected");
                }
            }
        }
        // The run ended: out of the lease set, once its caller has the end.
        if forget_lease {
            log.runs.forget_lease(&run_id).await;
        }
    }
}

/// Appends a batch, retrying once (a reconnecting connection fails its
/// first command); fenced or still failing is an error.
async fn write(
    log: &DurableLog,
    run_id: &str,
    events: &[PackedEvent],
    records: &[(String, Vec<u8>)],
    end: Option<&RunEnd>,
    usage: Option<pb::Usage>,
    pushes: &Pushes,
) -> Result<(), Error> {
    let mut tried = 0;
    loop {
        tried += 1;
        match log
            .runs
            .append(
                run_id,
                log.epoch,
                events,
                records,
                end,
                usage.clone(),
                pushes,
            )
            .await
        {
            Ok(Append::Done) => return Ok(()),
            Ok(Append::Gone) => {
                return Err(Error::Unavailable(
                    "the run's record is gone from Redis (restarted without persistence?)".into(),
                ));
            }
            Ok(Append::Fenced) => {
                return Err(Error::Unavailable(
                    "another replica owns this run now".into(),
                ));
            }
            Err(e) if tried >= 2 => return Err(e),
            Err(_) => {}
        }
    }
}
