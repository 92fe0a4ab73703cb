//! The runs of this replica: every run it started, and finished runs for
//! GetRun within the retention bounds.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use baton_proto::v1 as pb;

use super::record::{RunRecord, lock};
use crate::{config::RunDefaults, error::Error};

/// Every run this process started, and finished runs for GetRun within
/// the retention bounds (`runs.finished_retention`, `max_finished_runs`,
/// `max_finished_bytes`; the oldest go first).
pub struct Runs {
    map: Mutex<HashMap<String, Arc<RunRecord>>>,
    /// When finished runs were last swept (at most once a second, so a
    /// busy server does not scan every run on every start).
    swept: Mutex<Option<Instant>>,
    retention: Duration,
    max_finished: usize,
    max_finished_bytes: u64,
}

impl Default for Runs {
    fn default() -> Self {
        Self::new(&RunDefaults::default())
    }
}

impl Runs {
    /// An empty registry with the retention bounds of `defaults`.
    pub fn new(defaults: &RunDefaults) -> Self {
        Self {
            map: Mutex::default(),
            swept: Mutex::default(),
            retention: defaults.finished_retention,
            max_finished: defaults.max_finished_runs,
            max_finished_bytes: defaults.max_finished_bytes,
        }
    }

    /// Adds a run, forgetting finished runs past the retention bounds.
    pub fn insert(&self, record: Arc<RunRecord>) {
        let now = Instant::now();
        let mut map = lock(&self.map);
        let mut swept = lock(&self.swept);
        if swept.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1)) {
            *swept = Some(now);
            self.sweep(&mut map, now);
        }
        map.insert(record.run_id.clone(), record);
    }

    /// Drops finished runs older than the retention; then, while the
    /// finished runs hold more than the byte bound, the oldest ones'
    /// histories (their results stay for GetRun); then the oldest finished
    /// runs while over the count or byte bound. A durable run's history is
    /// dropped here LOG_RETENTION after its end (the run store keeps it).
    fn sweep(&self, map: &mut HashMap<String, Arc<RunRecord>>, now: Instant) {
        map.retain(|_, r| {
            !r.is_dropped()
                && r.finished_at()
                    .is_none_or(|f| now.duration_since(f) <= self.retention)
        });
        // (ended, result bytes, history bytes, run)
        let mut finished: Vec<(Instant, u64, u64, Arc<RunRecord>)> = map
            .values()
            .filter_map(|r| {
                r.drop_old_log(now);
                r.finished_at()
                    .map(|f| (f, r.result_bytes(), r.history_bytes(), r.clone()))
            })
            .collect();
        let mut bytes: u64 = finished.iter().map(|(_, r, h, _)| r + h).sum();
        if finished.len() <= self.max_finished && bytes <= self.max_finished_bytes {
            return;
        }
        finished.sort_by_key(|(f, ..)| *f);
        for (_, _, history, run) in &mut finished {
            if bytes <= self.max_finished_bytes {
                break;
            }
            if *history > 0 {
                run.drop_history();
                bytes -= *history;
                *history = 0;
            }
        }
        let mut count = finished.len();
        for (_, result, history, run) in finished {
            if count <= self.max_finished && bytes <= self.max_finished_bytes {
                break;
            }
            map.remove(&run.run_id);
            count -= 1;
            bytes -= result + history;
        }
    }

    /// Drops the histories of every finished run now, as eviction for room
    /// does (tests: what a replica serves of a run whose history it no
    /// longer holds).
    pub fn expire_finished_logs_now(&self) {
        for run in lock(&self.map).values() {
            if run.finished_at().is_some() {
                run.drop_history();
            }
        }
    }

    /// Applies the retention bounds now (tests).
    pub fn sweep_now(&self) {
        let mut map = lock(&self.map);
        self.sweep(&mut map, Instant::now());
    }

    /// Finds a run; `NOT_FOUND` naming `run_id` otherwise.
    pub fn get(&self, run_id: &str) -> Result<Arc<RunRecord>, Error> {
        if run_id.is_empty() {
            return Err(Error::invalid("run_id", "must not be empty"));
        }
        if uuid::Uuid::try_parse(run_id).is_err() {
            // Not echoed: the field may be any size.
            return Err(Error::invalid(
                "run_id",
                format!(
                    "is not a run id (a UUID such as 0190f5a2-7b3c-7d4e-8f10-1a2b3c4d5e6f; got {} bytes)",
                    run_id.len()
                ),
            ));
        }
        lock(&self.map)
            .get(run_id)
            .filter(|r| !r.is_dropped())
            .cloned()
            .ok_or_else(|| Error::NotFound {
                field: "run_id",
                message: format!("no run {run_id:?} on this orchestrator"),
            })
    }

    /// How many runs are still running.
    /// A page of `tenant`'s runs (only those with `status`, when set),
    /// newest first, starting after the run `after` (the last of the
    /// previous page), at most `size`; and whether more follow. Run ids are
    /// UUIDv7, so their order is the order the runs started in.
    pub fn list(
        &self,
        tenant: &str,
        status: Option<pb::RunStatus>,
        after: Option<&str>,
        size: usize,
    ) -> (Vec<Arc<RunRecord>>, bool) {
        self.list_waiting(tenant, status, false, after, size)
    }

    /// [`Self::list`], only of runs waiting for a person when `waiting`.
    pub fn list_waiting(
        &self,
        tenant: &str,
        status: Option<pb::RunStatus>,
        waiting: bool,
        after: Option<&str>,
        size: usize,
    ) -> (Vec<Arc<RunRecord>>, bool) {
        let mut runs: Vec<Arc<RunRecord>> = lock(&self.map)
            .values()
            .filter(|r| r.tenant == tenant && !r.is_dropped())
            .filter(|r| after.is_none_or(|a| r.run_id.as_str() < a))
            .filter(|r| status.is_none_or(|s| r.snapshot().status == s))
            .filter(|r| !waiting || !r.view().waiting_for.is_empty())
            .cloned()
            .collect();
        runs.sort_unstable_by(|a, b| b.run_id.cmp(&a.run_id));
        let more = runs.len() > size;
        runs.truncate(size);
        (runs, more)
    }

    /// Forgets a run (handed over to another replica: its record is the
    /// run store's now).
    pub fn remove(&self, run_id: &str) {
        lock(&self.map).remove(run_id);
    }

    /// The runs running here (not those dropped here: another replica
    /// owns them, or they are parked).
    pub fn running_runs(&self) -> Vec<Arc<RunRecord>> {
        lock(&self.map)
            .values()
            .filter(|r| r.snapshot().status == pb::RunStatus::Running && !r.is_dropped())
            .cloned()
            .collect()
    }

    /// How many runs are running here.
    pub fn running(&self) -> usize {
        lock(&self.map)
            .values()
            .filter(|r| r.snapshot().status == pb::RunStatus::Running && !r.is_dropped())
            .count()
    }

    /// Stops run `run` here and forgets it (see [`RunRecord::drop_here`]).
    pub fn drop_run(&self, run: &RunRecord, reason: &str) {
        run.drop_here(reason);
        let mut map = lock(&self.map);
        if map
            .get(&run.run_id)
            .is_some_and(|r| std::ptr::eq(Arc::as_ptr(r), run))
        {
            map.remove(&run.run_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use baton_proto::v1::{self as pb, run_event::Payload};

    use baton_common::ids::TraceId;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::run::{
        context::ContextInfo,
        log::{LOG_RETENTION, LogRead, Logged},
    };

    fn logged(seq: u64, payload: Payload) -> Logged {
        Logged {
            seq,
            time: baton_proto::wkt::Timestamp::default(),
            ctx: Arc::new(ContextInfo {
                id: "root".into(),
                parent: String::new(),
                depth: 0,
                span_id: "0000000000000001".into(),
                otel: opentelemetry::Context::new(),
                span_recorded: Default::default(),
            }),
            agent: Arc::from(""),
            payload,
            replayed: false,
        }
    }

    fn log(run: &RunRecord, event: Logged, terminal: bool) {
        run.log_event(event.seq, event.encode(), terminal);
    }

    fn new_run() -> Arc<RunRecord> {
        RunRecord::new(
            None,
            TraceId::random(),
            pb::RunKind::Agent,
            "a".into(),
            String::new(),
            false,
            &CancellationToken::new(),
        )
    }

    fn finished_run(output: &str) -> Arc<RunRecord> {
        let run = new_run();
        let done = Payload::RunCompleted(pb::RunCompleted {
            output: output.into(),
            ..Default::default()
        });
        run.finish(&done, 1);
        run
    }

    #[test]
    fn finished_runs_are_kept_within_count_and_byte_bounds_oldest_first() {
        let defaults = RunDefaults {
            max_finished_runs: 2,
            max_finished_bytes: 1000,
            ..Default::default()
        };
        let runs = Runs::new(&defaults);
        let ids: Vec<String> = (0..3)
            .map(|_| {
                let r = finished_run("out");
                std::thread::sleep(Duration::from_millis(2));
                let id = r.run_id.clone();
                runs.insert(r);
                id
            })
            .collect();
        runs.sweep_now();
        assert!(runs.get(&ids[0]).is_err(), "the oldest went over the count");
        assert!(
            runs.get(&ids[1]).is_ok() && runs.get(&ids[2]).is_ok(),
            "2 is the limit"
        );

        let defaults = RunDefaults {
            max_finished_bytes: 10,
            ..Default::default()
        };
        let runs = Runs::new(&defaults);
        let a = finished_run("12345");
        std::thread::sleep(Duration::from_millis(2));
        let b = finished_run("12345");
        let (a_id, b_id) = (a.run_id.clone(), b.run_id.clone());
        runs.insert(a);
        runs.insert(b);
        runs.sweep_now();
        assert!(
            runs.get(&a_id).is_ok() && runs.get(&b_id).is_ok(),
            "10 bytes is the limit"
        );
        std::thread::sleep(Duration::from_millis(2));
        let c = finished_run("1");
        let c_id = c.run_id.clone();
        runs.insert(c);
        runs.sweep_now();
        assert!(runs.get(&a_id).is_err(), "11 bytes: the oldest goes");
        assert!(runs.get(&b_id).is_ok() && runs.get(&c_id).is_ok());

        // A running run is never dropped, whatever the bounds.
        let defaults = RunDefaults {
            max_finished_runs: 1,
            max_finished_bytes: 0,
            ..Default::default()
        };
        let runs = Runs::new(&defaults);
        let running = new_run();
        let id = running.run_id.clone();
        runs.insert(running);
        runs.sweep_now();
        assert!(runs.get(&id).is_ok());
    }

    #[test]
    fn watchers_read_the_log_in_batches_and_never_wrap() {
        let run = new_run();
        for seq in 1..=10 {
            log(
                &run,
                logged(seq, Payload::TextDelta(pb::TextDelta::default())),
                false,
            );
        }
        let seqs = |r: LogRead| match r {
            LogRead::Events(e, ended) => (e.iter().map(|e| e.seq).collect::<Vec<_>>(), ended),
            _ => panic!("events"),
        };
        assert_eq!(seqs(run.events_after(0, 4)), (vec![1, 2, 3, 4], false));
        assert_eq!(seqs(run.events_after(8, 4)), (vec![9, 10], false));
        let done = Payload::RunCompleted(pb::RunCompleted::default());
        run.finish(&done, 11);
        log(&run, logged(11, done), true);
        assert_eq!(
            seqs(run.events_after(8, 2)),
            (vec![9, 10], false),
            "more follows"
        );
        assert_eq!(seqs(run.events_after(10, 2)), (vec![11], true));
        for after in [11, u64::MAX - 1, u64::MAX] {
            assert_eq!(seqs(run.events_after(after, 2)), (vec![], true), "{after}");
        }
    }

    fn logged_run(events: u64) -> Arc<RunRecord> {
        let run = new_run();
        log(
            &run,
            logged(1, Payload::RunStarted(pb::RunStarted::default())),
            false,
        );
        for seq in 2..events {
            log(
                &run,
                logged(
                    seq,
                    Payload::TextDelta(pb::TextDelta {
                        text: "word".into(),
                    }),
                ),
                false,
            );
        }
        let done = Payload::RunCompleted(pb::RunCompleted::default());
        run.finish(&done, events);
        log(&run, logged(events, done), true);
        run
    }

    /// A fork's stream: its first events read from its log as the stream
    /// is read (filtered), then its live ones; if the log is dropped before
    /// they have gone out, the stream ends with the error it was given and
    /// the live channel is closed (the run sees its client go).
    #[tokio::test]
    async fn a_forks_stream_reads_its_replayed_part_from_the_log_then_goes_live() {
        use futures::StreamExt as _;

        use crate::run::events::{self, Filter};
        let run = logged_run(300);
        run.pack_history().await;
        let live = || {
            let (tx, stream) = events::channel();
            let after = stream.after_replayed(
                run.clone(),
                299,
                Filter::default(),
                crate::error::Error::Aborted("gone".into()),
            );
            (tx, after)
        };
        let (tx, mut stream) = live();
        tx.send(Ok(pb::RunEvent {
            seq: 300,
            ..Default::default()
        }
        .into()))
            .await
            .expect("open");
        drop(tx);
        let seqs: Vec<u64> = (&mut stream).map(|e| e.expect("event").seq).collect().await;
        assert_eq!(seqs, (1..=300).collect::<Vec<_>>());
        // Only the kinds asked for (terminal events always pass).
        let (tx, stream) = events::channel();
        let deltas = Filter {
            kinds: [pb::EventKind::RunStarted as i32].into(),
            listed_kinds: 1,
            ..Filter::default()
        };
        let stream =
            stream.after_replayed(run.clone(), 299, deltas, crate::error::Error::ShuttingDown);
        drop(tx);
        let kinds: Vec<u64> = stream.map(|e| e.expect("event").seq).collect().await;
        assert_eq!(kinds, [1]);
        // The log dropped after the first batch went out.
        let (tx, mut stream) = live();
        let first = stream.next().await.expect("an event").expect("ok");
        assert_eq!(first.seq, 1);
        run.drop_history();
        let mut rest = Vec::new();
        while let Some(e) = stream.next().await {
            rest.push(e.map(|e| e.seq).map_err(|e| e.to_string()));
        }
        let (sent, end) = rest.split_at(rest.len() - 1);
        assert!(
            sent.iter().all(Result::is_ok) && sent.len() < 299,
            "{} sent",
            sent.len()
        );
        assert!(matches!(&end[0], Err(e) if e.contains("gone")), "{end:?}");
        assert!(tx.is_closed(), "the run sees its client go");
    }

    #[test]
    fn a_finished_runs_history_is_kept_in_memory_mode_and_dropped_here_when_durable() {
        let run = logged_run(2);
        let ended = run.finished_at().expect("finished");
        let much_later = ended + LOG_RETENTION * 100;
        run.drop_old_log(much_later);
        assert!(
            matches!(run.events_after(0, 10), LogRead::Events(ref e, true) if e.len() == 2),
            "memory mode: kept for the run's retention"
        );
        // A durable run's history is the run store's: dropped here
        // LOG_RETENTION after the end.
        let durable = logged_run(2);
        durable.epoch.store(1, std::sync::atomic::Ordering::Relaxed);
        let ended = durable.finished_at().expect("finished");
        durable.drop_old_log(ended + LOG_RETENTION);
        assert!(
            matches!(durable.events_after(0, 10), LogRead::Events(..)),
            "at the limit"
        );
        durable.drop_old_log(ended + LOG_RETENTION + Duration::from_millis(1));
        assert!(
            matches!(durable.events_after(0, 10), LogRead::Expired),
            "just over"
        );
        assert_eq!(
            durable.snapshot().status,
            pb::RunStatus::Completed,
            "the result stays"
        );
    }

    #[test]
    fn over_the_byte_bound_the_oldest_histories_go_first_and_their_results_stay() {
        let (a, b) = (logged_run(300), logged_run(300));
        let (ha, hb) = (a.history_bytes(), b.history_bytes());
        assert!(ha > 0 && hb > 0);
        // Room for both results and one history.
        let defaults = RunDefaults {
            max_finished_bytes: ha.max(hb) + 10,
            ..Default::default()
        };
        let runs = Runs::new(&defaults);
        runs.insert(a.clone());
        std::thread::sleep(Duration::from_millis(2));
        runs.insert(b.clone());
        runs.sweep_now();
        assert!(
            runs.get(&a.run_id).is_ok() && runs.get(&b.run_id).is_ok(),
            "both results stay"
        );
        assert!(
            matches!(a.events_after(0, 1), LogRead::Expired),
            "the oldest history went"
        );
        assert!(matches!(b.events_after(0, 400), LogRead::Events(ref e, true) if e.len() == 300));
        assert!(a.recording().is_none() && b.recording().is_some());
    }
}
