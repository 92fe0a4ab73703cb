//! The pure part of executing a [`Plan`](super::Plan): which step starts
//! next, which are skipped when a step fails, how the pipeline ends and
//! which output is the run's. No I/O, no clock: the executor
//! (`super::run`) calls it as steps end, and its unit tests below pin the
//! semantics of every mode and policy.
//!
//! A step is ready when every dependency succeeded and (sequential mode) the
//! step before it in the list ended, whichever way: list order is the order
//! of execution, not a dependency. A step a dependency of which did not
//! succeed is skipped: at once in DAG mode, at its turn in sequential mode;
//! its own dependents follow. Each edge is looked at once.

use std::collections::{BTreeSet, VecDeque};

use super::{Policy, Step};

/// Where a step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Not started yet.
    Pending,
    /// Started, not ended.
    Running,
    /// Ended with an output.
    Succeeded,
    /// Ended without one (its last attempt failed).
    Failed,
    /// Never ran (or was cancelled): a dependency did not succeed, or the
    /// pipeline was aborted.
    Skipped,
}

impl Status {
    fn ended(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Skipped)
    }
}

/// A step skipped because its dependency `because` did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skip {
    /// The skipped step.
    pub step: usize,
    /// The dependency that did not succeed.
    pub because: usize,
}

/// The scheduling state of one pipeline run.
#[derive(Debug)]
pub struct Scheduler {
    status: Vec<Status>,
    /// The steps that depend on each step.
    dependents: Vec<Vec<usize>>,
    /// Sequential mode: the step after each step.
    follower: Vec<Option<usize>>,
    /// Sequential mode: the step before each step.
    after: Vec<Option<usize>>,
    /// Dependencies not yet succeeded, plus the predecessor not yet ended.
    waiting: Vec<usize>,
    /// A dependency that did not succeed.
    blocked: Vec<Option<usize>>,
    /// Ready steps, started in list order.
    ready: BTreeSet<usize>,
}

impl Scheduler {
    /// The state before anything ran.
    pub fn new(steps: &[Step]) -> Self {
        let n = steps.len();
        let mut dependents = vec![Vec::new(); n];
        let mut follower = vec![None; n];
        let mut waiting = vec![0; n];
        for (i, s) in steps.iter().enumerate() {
            waiting[i] = s.deps.len() + usize::from(s.after.is_some());
            for &d in &s.deps {
                dependents[d].push(i);
            }
            if let Some(a) = s.after {
                follower[a] = Some(i);
            }
        }
        Self {
            status: vec![Status::Pending; n],
            ready: (0..n).filter(|&i| waiting[i] == 0).collect(),
            dependents,
            follower,
            after: steps.iter().map(|s| s.after).collect(),
            waiting,
            blocked: vec![None; n],
        }
    }

    /// Where step `i` is.
    pub fn status(&self, i: usize) -> Status {
        self.status[i]
    }

    /// Every step's status, in list order.
    pub fn statuses(&self) -> &[Status] {
        &self.status
    }

    /// Starts the first ready step in list order (now running), if any.
    pub fn start_next(&mut self) -> Option<usize> {
        let i = self.ready.pop_first()?;
        self.status[i] = Status::Running;
        Some(i)
    }

    /// Step `i` succeeded; returns the steps skipped because of earlier
    /// failures whose turn this ended.
    pub fn succeeded(&mut self, i: usize) -> Vec<Skip> {
        self.ended(i, Status::Succeeded)
    }

    /// Step `i` failed; returns the steps skipped because of it (or of an
    /// earlier failure, at their turn).
    pub fn failed(&mut self, i: usize) -> Vec<Skip> {
        self.ended(i, Status::Failed)
    }

    /// Step `i` failed, and the pipeline is about to be aborted: nothing
    /// is skipped because of it (the abort ends everything).
    pub fn failed_alone(&mut self, i: usize) {
        self.status[i] = Status::Failed;
    }

    /// Ends every step: running ones (cancelled) and pending ones become
    /// skipped; returns both lists, in list order. Nothing starts after.
    pub fn abort(&mut self) -> (Vec<usize>, Vec<usize>) {
        let (mut running, mut pending) = (Vec::new(), Vec::new());
        for (i, s) in self.status.iter_mut().enumerate() {
            match s {
                Status::Running => running.push(i),
                Status::Pending => pending.push(i),
                _ => continue,
            }
            *s = Status::Skipped;
        }
        self.ready.clear();
        (running, pending)
    }

    fn ended(&mut self, i: usize, how: Status) -> Vec<Skip> {
        self.status[i] = how;
        let mut skips = Vec::new();
        let mut told: VecDeque<usize> = VecDeque::from([i]);
        while let Some(i) = told.pop_front() {
            let ok = self.status[i] == Status::Succeeded;
            let mut woken: Vec<usize> = Vec::new();
            for &j in &self.dependents[i] {
                if ok {
                    self.waiting[j] -= 1;
                } else {
                    self.blocked[j].get_or_insert(i);
                }
                woken.push(j);
            }
            if let Some(j) = self.follower[i] {
                self.waiting[j] -= 1;
                woken.push(j);
            }
            for j in woken {
                if self.status[j] != Status::Pending {
                    continue;
                }
                let turn_came = self.after[j].is_none_or(|a| self.status[a].ended());
                match self.blocked[j] {
                    Some(because) if turn_came => {
                        self.status[j] = Status::Skipped;
                        skips.push(Skip { step: j, because });
                        told.push_back(j);
                    }
                    None if self.waiting[j] == 0 => {
                        self.ready.insert(j);
                    }
                    _ => {}
                }
            }
        }
        skips
    }
}

/// Whether a pipeline whose steps ended as `status` succeeded under
/// `policy`: `best_effort` when any step succeeded; `fail` and `continue`
/// unless a required step failed (a non-required step's failure, and the
/// skips it caused, never fail the run).
pub fn success(policy: Policy, steps: &[Step], status: &[Status]) -> bool {
    match policy {
        Policy::BestEffort => status.contains(&Status::Succeeded),
        Policy::Fail | Policy::Continue => !steps
            .iter()
            .zip(status)
            .any(|(s, st)| s.required && *st == Status::Failed),
    }
}

/// The step whose output is the run's: the last succeeded sink (a step
/// nothing depends on), else the last succeeded step, in list order.
pub fn output_step(steps: &[Step], status: &[Status]) -> Option<usize> {
    let succeeded = |i: &usize| status[*i] == Status::Succeeded;
    let is_sink = |i: &usize| steps.iter().all(|s| !s.deps.contains(i));
    (0..steps.len())
        .rev()
        .filter(is_sink)
        .find(succeeded)
        .or_else(|| (0..steps.len()).rev().find(succeeded))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Steps named by index: `deps` per step; `sequential` chains them.
    fn steps(deps: &[&[usize]], sequential: bool) -> Vec<Step> {
        deps.iter()
            .enumerate()
            .map(|(i, d)| Step {
                id: format!("s{i}"),
                agent: "a".into(),
                task: String::new(),
                input_from: Vec::new(),
                output_to: None,
                deps: d.to_vec(),
                after: if sequential { i.checked_sub(1) } else { None },
                waits_for: Vec::new(),
                required: true,
                timeout: Duration::from_secs(1),
                retries: 0,
            })
            .collect()
    }

    fn start_all(s: &mut Scheduler) -> Vec<usize> {
        std::iter::from_fn(|| s.start_next()).collect()
    }

    #[test]
    fn sequential_steps_run_one_after_another_in_list_order() {
        let plan = steps(&[&[], &[], &[]], true);
        let mut s = Scheduler::new(&plan);
        for i in 0..3 {
            assert_eq!(start_all(&mut s), vec![i]);
            assert!(s.succeeded(i).is_empty());
        }
        assert_eq!(s.start_next(), None);
        assert_eq!(s.statuses(), &[Status::Succeeded; 3]);
    }

    #[test]
    fn sequential_failure_skips_only_its_dependents_at_their_turn() {
        // 0; 1 fails; 2 needs 1; 3 is independent; 4 needs 0.
        let plan = steps(&[&[], &[], &[1], &[], &[0]], true);
        let mut s = Scheduler::new(&plan);
        assert_eq!(start_all(&mut s), vec![0]);
        assert!(s.succeeded(0).is_empty());
        assert_eq!(start_all(&mut s), vec![1]);
        // 2's turn comes as 1 ends: skipped at once; 3 is next.
        assert_eq!(
            s.failed(1),
            vec![Skip {
                step: 2,
                because: 1
            }]
        );
        assert_eq!(start_all(&mut s), vec![3]);
        assert!(s.succeeded(3).is_empty());
        assert_eq!(start_all(&mut s), vec![4]);
        s.succeeded(4);
        use Status::*;
        assert_eq!(
            s.statuses(),
            &[Succeeded, Failed, Skipped, Succeeded, Succeeded]
        );
    }

    #[test]
    fn sequential_skip_waits_for_its_turn_and_cascades() {
        // 0 fails; 1 runs; 2 needs 0 (skipped when 1 ends); 3 needs 2.
        let plan = steps(&[&[], &[], &[0], &[2]], true);
        let mut s = Scheduler::new(&plan);
        assert_eq!(start_all(&mut s), vec![0]);
        assert!(s.failed(0).is_empty(), "2's turn has not come");
        assert_eq!(start_all(&mut s), vec![1]);
        assert_eq!(
            s.succeeded(1),
            vec![
                Skip {
                    step: 2,
                    because: 0
                },
                Skip {
                    step: 3,
                    because: 2
                }
            ]
        );
        assert_eq!(s.start_next(), None);
    }

    #[test]
    fn dag_skips_at_once_and_transitively_while_the_rest_goes_on() {
        // 0 → 1 → 2, 0 → 3; 4 independent.
        let plan = steps(&[&[], &[0], &[1], &[0], &[]], false);
        let mut s = Scheduler::new(&plan);
        assert_eq!(
            start_all(&mut s),
            vec![0, 4],
            "ready ones start in list order"
        );
        assert!(s.succeeded(0).is_empty());
        assert_eq!(start_all(&mut s), vec![1, 3]);
        assert_eq!(
            s.failed(1),
            vec![Skip {
                step: 2,
                because: 1
            }]
        );
        assert_eq!(s.start_next(), None);
        s.succeeded(3);
        s.succeeded(4);
        use Status::*;
        assert_eq!(
            s.statuses(),
            &[Succeeded, Failed, Skipped, Succeeded, Succeeded]
        );
    }

    #[test]
    fn a_step_with_two_dependencies_waits_for_both() {
        let plan = steps(&[&[], &[], &[0, 1]], false);
        let mut s = Scheduler::new(&plan);
        assert_eq!(start_all(&mut s), vec![0, 1]);
        s.succeeded(0);
        assert_eq!(s.start_next(), None);
        s.succeeded(1);
        assert_eq!(start_all(&mut s), vec![2]);
    }

    #[test]
    fn abort_skips_the_running_and_the_pending() {
        let plan = steps(&[&[], &[], &[0]], false);
        let mut s = Scheduler::new(&plan);
        assert_eq!(s.start_next(), Some(0));
        assert_eq!(s.abort(), (vec![0], vec![1, 2]));
        assert_eq!(s.start_next(), None);
        assert_eq!(s.statuses(), &[Status::Skipped; 3]);
        // A fatal failure: the step failed, the rest is aborted (its
        // dependents as "not started", not as skipped because of it).
        let mut s = Scheduler::new(&plan);
        assert_eq!(start_all(&mut s), vec![0, 1]);
        s.failed_alone(0);
        assert_eq!(s.abort(), (vec![1], vec![2]));
        use Status::*;
        assert_eq!(s.statuses(), &[Failed, Skipped, Skipped]);
    }

    #[test]
    fn policies_decide_success_and_the_output_is_the_last_succeeded_sink() {
        use Status::*;
        let mut plan = steps(&[&[], &[0], &[]], false);
        let st = [Succeeded, Failed, Succeeded];
        assert!(!success(Policy::Fail, &plan, &st));
        assert!(!success(Policy::Continue, &plan, &st));
        assert!(success(Policy::BestEffort, &plan, &st));
        assert!(!success(
            Policy::BestEffort,
            &plan,
            &[Failed, Skipped, Failed]
        ));
        plan[1].required = false;
        assert!(
            success(Policy::Fail, &plan, &st),
            "an optional step never fails the run"
        );
        // Sinks are 1 and 2: 2 is the last succeeded one.
        assert_eq!(output_step(&plan, &st), Some(2));
        // No succeeded sink: the last succeeded step.
        assert_eq!(output_step(&plan, &[Succeeded, Failed, Failed]), Some(0));
        assert_eq!(output_step(&plan, &[Failed, Skipped, Failed]), None);
    }
}
