//! What a chaos run reports: the [`Summary`] of what it did and the
//! [`Violation`]s the checker found, each a line naming the run, the rule
//! and the evidence.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

/// A fault the nemesis injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL, then a restart on the same port under the same name.
    Kill,
    /// SIGSTOP for less than the lease, then SIGCONT.
    ShortPause,
    /// SIGSTOP for longer than the lease (its runs are taken over), then
    /// SIGCONT.
    LongPause,
    /// SIGTERM (a drain that hands runs over), then a restart.
    Drain,
}

impl FaultKind {
    /// Every kind, in the order the summary lists them.
    pub const ALL: [FaultKind; 4] = [Self::Kill, Self::ShortPause, Self::LongPause, Self::Drain];

    /// The kind's name in logs and summaries.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kill => "kill",
            Self::ShortPause => "short-pause",
            Self::LongPause => "long-pause",
            Self::Drain => "drain",
        }
    }
}

/// A broken rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// The rule's short name (`seq-gap`, `answer`, …).
    pub rule: &'static str,
    /// The run it concerns; empty for a replica's (a drain, a gauge).
    pub run_id: String,
    /// What was seen.
    pub evidence: String,
}

impl Violation {
    /// A violation of `rule` by run `run_id`.
    pub fn run(run_id: &str, rule: &'static str, evidence: impl Into<String>) -> Self {
        Self {
            run_id: run_id.to_owned(),
            rule,
            evidence: evidence.into(),
        }
    }

    /// A violation of `rule` that concerns no single run.
    pub fn cluster(rule: &'static str, evidence: impl Into<String>) -> Self {
        Self::run("", rule, evidence)
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.run_id.is_empty() {
            write!(f, "[{}] {}", self.rule, self.evidence)
        } else {
            write!(f, "[{}] run {}: {}", self.rule, self.run_id, self.evidence)
        }
    }
}

/// What a chaos run did and found.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// The seed (replay with `BATON_CHAOS_SEED`).
    pub seed: u64,
    /// How long faults were injected.
    pub duration: Duration,
    /// How long the whole run took (start-up, heal and checks included).
    pub wall: Duration,
    /// Whether replicas forwarded calls to each other.
    pub peers: bool,
    /// Runs the workload started (and learned the id of).
    pub runs_started: usize,
    /// Of them, runs that completed.
    pub runs_completed: usize,
    /// Runs per workload item.
    pub runs_by_item: BTreeMap<&'static str, usize>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, usize>,
    /// `RunResumed` events over every run's log.
    pub resumes: usize,
    /// Answer attempts that the server took.
    pub answers_ok: usize,
    /// Of them, answers given after letting the run park.
    pub answers_after_parking: usize,
    /// Answer attempts that the server refused.
    pub answers_refused: usize,
    /// Answer attempts of unknown outcome.
    pub answers_unknown: usize,
    /// Rivals' answers: another caller answering an approval at the same
    /// moment as the client, on another replica.
    pub rivals: usize,
    /// Of them, the ones the server took (the client's was refused then).
    pub rivals_taken: usize,
    /// Late second answers: the client's, sent again at once on another
    /// replica after its first was told OK.
    pub late: usize,
    /// Of them, the ones refused (none may be taken).
    pub late_refused: usize,
    /// Runs started tight (see `deadline`): their questions answered near
    /// a short deadline.
    pub tight_runs: usize,
    /// The client's answers to tight runs' questions: sent before the
    /// deadline, sent after it.
    pub near_before: usize,
    /// See `near_before`.
    pub near_after: usize,
    /// Of the answers near a deadline, the ones taken.
    pub near_taken: usize,
    /// Tight runs' questions closed by their deadline.
    pub closed_by_deadline: usize,
    /// Slots of the context store checked against the runs' logs.
    pub store_slots: usize,
    /// Conversations read back and checked (rule (j)).
    pub conversations: usize,
    /// Their messages.
    pub conversation_messages: usize,
    /// Of them, slots at a version above the last the log recorded (see
    /// `store`).
    pub store_late_writes: usize,
    /// Starts that failed on every replica tried (no run id learned):
    /// what was started and the last error. Not a violation by itself (the
    /// replicas tried may all have been faulty), but shown.
    pub failed_starts: Vec<String>,
    /// Every broken rule, sorted by rule then run.
    pub violations: Vec<Violation>,
    /// The replicas' logs (kept when there are violations).
    pub logs: PathBuf,
}

impl Summary {
    /// The violations' rule names with their counts.
    pub fn violation_kinds(&self) -> BTreeMap<&'static str, usize> {
        let mut kinds = BTreeMap::new();
        for v in &self.violations {
            *kinds.entry(v.rule).or_insert(0) += 1;
        }
        kinds
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let join = |m: &BTreeMap<&'static str, usize>| {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        writeln!(
            f,
            "chaos summary: seed {} (replay with BATON_CHAOS_SEED={}), peers {}, faults for {:?}, wall {:.1?}",
            self.seed,
            self.seed,
            if self.peers { "on" } else { "off" },
            self.duration,
            self.wall
        )?;
        writeln!(
            f,
            "  runs: {} started, {} completed ({})",
            self.runs_started,
            self.runs_completed,
            join(&self.runs_by_item)
        )?;
        writeln!(f, "  faults: {}", join(&self.faults))?;
        if !self.failed_starts.is_empty() {
            writeln!(
                f,
                "  starts that failed on every replica tried: {} (first: {})",
                self.failed_starts.len(),
                self.failed_starts[0]
            )?;
        }
        writeln!(f, "  resumes (RunResumed events): {}", self.resumes)?;
        writeln!(
            f,
            "  answers: {} taken ({} after letting the run park), {} refused, {} unknown",
            self.answers_ok, self.answers_after_parking, self.answers_refused, self.answers_unknown
        )?;
        writeln!(
            f,
            "  competing answers: {} rivals answered with the client, {} of them taken",
            self.rivals, self.rivals_taken
        )?;
        writeln!(
            f,
            "  late second answers: {} sent once the first was told OK, {} refused",
            self.late, self.late_refused
        )?;
        writeln!(
            f,
            "  near a deadline: {} tight runs, {} answers sent before their deadline and {} after, {} taken, {} questions closed by their deadline",
            self.tight_runs,
            self.near_before,
            self.near_after,
            self.near_taken,
            self.closed_by_deadline
        )?;
        writeln!(
            f,
            "  context store: {} slots checked against the runs' logs, {} late writes",
            self.store_slots, self.store_late_writes
        )?;
        writeln!(
            f,
            "  conversations: {} checked against their runs, {} messages",
            self.conversations, self.conversation_messages
        )?;
        if self.violations.is_empty() {
            write!(f, "  violations: none")
        } else {
            writeln!(
                f,
                "  violations: {} ({}); replica logs in {}",
                self.violations.len(),
                join(&self.violation_kinds()),
                self.logs.display()
            )?;
            for (i, v) in self.violations.iter().enumerate() {
                if i > 0 {
                    writeln!(f)?;
                }
                write!(f, "    {v}")?;
            }
            Ok(())
        }
    }
}
