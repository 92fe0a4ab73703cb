//! A run's history on its record: logging events, reading them for
//! WatchRun, the recording forks replay, and dropping it (evicted for
//! room, or, with durable runs, once the run store is the one to ask).

use std::{collections::HashMap, sync::atomic::Ordering, time::Instant};

use baton_proto::v1::{self as pb, run_event::Payload};
use bytes::Bytes;

use super::{
    log::{Chunked, LOG_RETENTION, LogRead, Outgoing, PackedChunk, Recorded, ids_tail},
    record::{RunRecord, lock, now_ms},
};

impl RunRecord {
    /// Keeps an event (unfiltered) in the run's history.
    /// A run whose history goes over its bound (`runs.max_history_bytes`)
    /// is failed here: the event that took it over is kept, and so are
    /// the few its branches log as they stop, and its end.
    pub(crate) fn log_event(&self, seq: u64, event: Bytes, terminal: bool) {
        let over = {
            let mut log = lock(&self.log);
            if !log.dropped {
                log.events.push_back(seq, event);
            }
            log.ended |= terminal;
            log.over_bound().map(|charged| (charged, log.bound))
        };
        self.last_event_ms.store(now_ms(), Ordering::Relaxed);
        self.logged.notify_waiters();
        if let Some((charged, bound)) = over
            && !terminal
        {
            self.fail(super::failure::Failure::new(
                tonic::Code::ResourceExhausted,
                format!(
                    "the run's history reached {charged} bytes, over runs.max_history_bytes ({bound} bytes): the run is stopped"
                ),
            ));
        }
    }

    /// Bounds the run's history (`runs.max_history_bytes`).
    pub(crate) fn bound_history(&self, bytes: u64) {
        lock(&self.log).bound = bytes;
    }

    /// At most `max` of the logged events after seq `after` (watchers read
    /// the shared log a batch at a time, so none holds a copy of it).
    pub fn events_after(&self, after: u64, max: usize) -> LogRead {
        self.read_log(after, |log, skip| {
            log.read(skip, max, self.trace_id.as_str(), &self.run_id)
        })
    }

    /// The same, as streams carry them: the events of packed chunks not
    /// decoded ([`Outgoing`]).
    pub fn outgoing_after(&self, after: u64, max: usize) -> LogRead<Outgoing> {
        let tail = ids_tail(self.trace_id.as_str(), &self.run_id);
        self.read_log(after, |log, skip| log.read_outgoing(skip, max, &tail))
    }

    fn read_log<E>(&self, after: u64, read: impl FnOnce(&Chunked, usize) -> Vec<E>) -> LogRead<E> {
        let log = lock(&self.log);
        if log.dropped {
            return LogRead::Expired;
        }
        // Saturating: an `after` near 2^64 reads nothing, never wraps. A
        // run resumed here logs from after its checkpoint: what comes
        // before is in the run store.
        let next = after.saturating_add(1);
        let oldest = log.events.first_seq().unwrap_or(self.resumed_after + 1);
        if oldest > next {
            return LogRead::Gone(oldest);
        }
        let skip = usize::try_from(next.saturating_sub(oldest)).unwrap_or(usize::MAX);
        let events = read(&log.events, skip);
        let ended = log.ended && skip.saturating_add(events.len()) >= log.events.len();
        LogRead::Events(events, ended)
    }

    /// A durable run's history here is dropped once the run ended
    /// LOG_RETENTION ago: the run store keeps it for `runs.retention`.
    pub(super) fn drop_old_log(&self, now: Instant) {
        if self.epoch.load(Ordering::Relaxed) > 0
            && lock(&self.finished).is_some_and(|f| now.duration_since(f) > LOG_RETENTION)
        {
            self.drop_history();
        }
    }

    /// Packs the run's history once it ended or while it is parked, a
    /// chunk at a time (watchers read between chunks); the caller is off
    /// the run's event path.
    pub async fn pack_history(&self) {
        loop {
            let packed = {
                let asleep = self.is_asleep();
                let mut log = lock(&self.log);
                let all = log.ended || asleep;
                !log.dropped && log.events.pack_one(all)
            };
            if !packed {
                return;
            }
            tokio::task::yield_now().await;
        }
    }

    /// Forgets the run's history (evicted for room; see [`LogRead::Expired`]).
    pub(super) fn drop_history(&self) {
        let mut log = lock(&self.log);
        if !log.dropped {
            log.drop_history();
        }
    }

    /// Whether the run's history is still kept here.
    pub fn has_history(&self) -> bool {
        !lock(&self.log).dropped
    }

    /// Bytes the run's history holds here, about.
    pub(super) fn history_bytes(&self) -> u64 {
        lock(&self.log).bytes()
    }

    /// The run's first `n` events, without the run's ids (a fork's
    /// history): those that are packed, as chunks (shared, not decoded),
    /// then the others, decoded; `None` when they are not all here.
    pub fn first_events(&self, n: usize) -> Option<(Vec<PackedChunk>, Vec<pb::RunEvent>)> {
        let log = lock(&self.log);
        if log.dropped || log.events.first_seq().is_some_and(|s| s != 1) {
            return None;
        }
        let packed = log.events.packed_prefix(n);
        let skip = packed.iter().map(PackedChunk::len).sum::<usize>();
        let rest = log.events.read(skip, n.saturating_sub(skip), "", "");
        Some((packed, rest))
    }

    /// Keeps a durable point of the run (memory mode).
    pub(crate) fn record_point(&self, point: Recorded) {
        let mut log = lock(&self.log);
        if !log.dropped {
            log.record(point);
        }
    }

    /// Keeps durable points of the run at once (a fork's journal, memory
    /// mode).
    pub(crate) fn record_points(&self, points: Vec<Recorded>) {
        let mut log = lock(&self.log);
        if !log.dropped {
            for point in points {
                log.record(point);
            }
        }
    }

    /// The run's recording and the request that started it, while its
    /// history is kept here; `None` once it is not.
    pub fn recording(&self) -> Option<(Vec<Recorded>, Vec<u8>)> {
        let log = lock(&self.log);
        (!log.dropped).then(|| (log.recording.clone(), log.request.clone()))
    }

    /// Keeps the request that started the run (memory mode: forks start
    /// from it).
    pub(crate) fn keep_request(&self, request: Vec<u8>) {
        lock(&self.log).keep_request(request);
    }
    /// Logs a fork's first events (see [`super::fork::plan`]) before it
    /// starts: its numbering goes on after them. `chunks` are whole packed
    /// chunks (shared with its origin), `events` the ones after them.
    pub fn preload(&self, chunks: Vec<PackedChunk>, events: &[pb::RunEvent]) {
        use std::sync::{Arc, atomic::AtomicBool};

        use super::{context::ContextInfo, log::Logged};
        // Whole chunks go in packed, at once; the rest one by one.
        let (taken, last) = {
            let mut log = lock(&self.log);
            let taken = log.events.preload_packed(chunks, events);
            (taken, log.events.len() as u64)
        };
        if last > 0 {
            self.seq.store(last, Ordering::Relaxed);
            lock(&self.state).last_seq = last;
        }
        let mut contexts: HashMap<&str, Arc<ContextInfo>> = HashMap::new();
        for e in &events[taken..] {
            let ctx = contexts
                .entry(e.context_id.as_str())
                .or_insert_with(|| {
                    Arc::new(ContextInfo {
                        id: e.context_id.clone(),
                        parent: e.parent_context_id.clone(),
                        depth: e.depth,
                        span_id: e.span_id.clone(),
                        otel: opentelemetry::Context::new(),
                        span_recorded: AtomicBool::new(false),
                    })
                })
                .clone();
            let seq = self.next_seq();
            let logged = Logged {
                seq,
                time: e.time.unwrap_or_default(),
                ctx,
                agent: Arc::from(e.agent.as_str()),
                payload: e
                    .payload
                    .clone()
                    .unwrap_or(Payload::RunStarted(Default::default())),
                replayed: e.replayed,
            };
            self.log_event(seq, logged.encode(), false);
        }
    }
}
