//! A run's recording, and the three ways a run starts from one.
//!
//! Words, each with one meaning here:
//!
//! - a **unit** ([`mod@unit`]) names a durable point of a run: a model turn, a
//!   tool call's result, a person's answer, a step's output
//!   (`t/root.writer.1/3`);
//! - the **journal** is a run's records of its durable points by unit (the
//!   map a run is given as a [`Walk`]; in Redis the `…:journal` hash, where
//!   `#{unit}` also holds the seq of the event that ended each point: the
//!   index forks read); the **recording** is the same records in the order
//!   they were made, each with its seq (`log::Recorded`), as forks and
//!   replays read them;
//! - a **walk** is a run taking points from its journal instead of doing
//!   them again: nothing is asked, nothing is sent again; it lets its
//!   worker go now and then ([`pace`]);
//! - a **replay** is ReplayRun only ([`rerun`]): a new run of a recorded
//!   run's request, answered from the recording where its requests match;
//!   **replayed** is the mark (`RunEvent.replayed`) on the events a fork
//!   took from its origin.
//!
//! The three that start from stored state, on one interface — a run
//! built from its stored request (`app::resume::check_stored`), given a
//! [`Walk`] and/or a [`rerun::Rerun`]:
//!
//! | | history read | walks | answers from a recording |
//! |---|---|---|---|
//! | resume (a claimed durable run) | its journal and inbox | [`Walk::resumed`] | its origin's, when it is a replay |
//! | wake (a memory-mode run parked, `run::park`) | its recording | [`Walk::woken`] | — |
//! | fork (ForkRun) | the origin's, up to the point ([`fork::plan`]) | [`Walk::forked`] | — |
//! | replay (ReplayRun) | the origin's, whole | — | [`rerun::Rerun`] |
//!
//! The modules: [`mod@unit`] and [`pace`] are leaves; `scan` reads the few
//! fields of a packed event a fork's plan needs, `flight` finds what was
//! in flight at a fork point with it; [`fork`] plans a fork; [`rerun`]
//! answers a replay's calls. The durable sequencer, which writes the
//! journal to Redis as the run goes, is `run::durable::sequencer`.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use serde_json::{Map, Value};

mod flight;
pub mod fork;
pub mod pace;
pub mod rerun;
mod scan;
pub mod unit;

/// A journal by unit (looked up at every point a walk passes: a fast
/// hasher).
pub type Journal = foldhash::HashMap<Arc<str>, Arc<[u8]>>;

/// What a run walks through before it goes live: a resumed run's journal,
/// or a fork's (its origin's up to the point, the point edited). A unit
/// found here is not done again and its events are not sent again.
#[derive(Debug, Default)]
pub struct Walk {
    /// The records, by unit.
    pub journal: Journal,
    /// The replica that resumed the run (empty for a fork).
    pub replica: String,
    /// The seq of the run's last logged event before.
    pub checkpoint_seq: u64,
    /// Answers people gave (on any replica) that the run had not taken
    /// yet, by question id; `cancel`: a CancelRun's reason.
    pub inbox: HashMap<String, Vec<u8>>,
    /// A fork starting (ForkRun): its replayed events, `RunStarted`
    /// first, are logged already; nothing says it resumed.
    pub fork: bool,
    /// A fork's tool calls in flight at its fork point, by unit: their
    /// `ToolCallStarted` is among its replayed events, so making the call
    /// again does not send it twice.
    pub announced: HashSet<String>,
    /// Whether the journal holds a run-context edit (`rc/…`): looked up
    /// only then.
    pub run_context_at: bool,
}

impl Walk {
    /// A durable run claimed by `replica`: its journal as the run store
    /// holds it, its last seq, and the answers and cancel its inbox holds.
    pub fn resumed(
        journal: HashMap<String, Vec<u8>>,
        replica: String,
        checkpoint_seq: u64,
        inbox: HashMap<String, Vec<u8>>,
    ) -> Self {
        let run_context_at = journal.keys().any(|k| k.starts_with("rc/"));
        Self {
            journal: journal
                .into_iter()
                .map(|(unit, record)| (unit.into(), record.into()))
                .collect(),
            replica,
            checkpoint_seq,
            inbox,
            fork: false,
            announced: HashSet::new(),
            run_context_at,
        }
    }

    /// A memory-mode run woken from parking (see `run::park`): its own
    /// recording, its last seq; answers given while it slept are on its
    /// record.
    pub fn woken(
        recording: &[crate::run::log::Recorded],
        replica: String,
        checkpoint_seq: u64,
    ) -> Self {
        Self {
            journal: recording
                .iter()
                .map(|r| (r.unit.clone(), r.record.clone()))
                .collect(),
            replica,
            checkpoint_seq,
            inbox: HashMap::new(),
            fork: false,
            announced: HashSet::new(),
            run_context_at: recording.iter().any(|r| r.unit.starts_with("rc/")),
        }
    }

    /// A fork as `plan` says it starts (its journal and the calls it
    /// announced are taken out of the plan).
    pub fn forked(plan: &mut fork::Plan) -> Self {
        Self {
            journal: std::mem::take(&mut plan.journal),
            replica: String::new(),
            checkpoint_seq: plan.checkpoint(),
            inbox: HashMap::new(),
            fork: true,
            announced: std::mem::take(&mut plan.announced),
            run_context_at: plan.recording.iter().any(|r| r.unit.starts_with("rc/")),
        }
    }

    /// The record of `unit` when the walk has it. A point a fork edited
    /// the run context at (`rc/{unit}`, see [`fork`]) sets `run_context`
    /// as it is taken.
    pub fn take(&self, unit: &str, run_context: &Mutex<Map<String, Value>>) -> Option<&[u8]> {
        let record = self.journal.get(unit)?;
        if self.run_context_at
            && let Some(context) = self.journal.get(format!("rc/{unit}").as_str())
            && let Ok(context) = serde_json::from_slice::<Map<String, Value>>(context)
        {
            *run_context.lock().unwrap_or_else(|p| p.into_inner()) = context;
        }
        Some(record)
    }
}
