//! The nemesis: one fault at a time on a random replica, every
//! `fault_every` (a random pause in its range), until the run's duration
//! is over — SIGKILL and a restart; SIGSTOP shorter than the lease
//! (0.3–0.6×) or longer (1.3–2.5×, so its runs are taken over) and then
//! SIGCONT; SIGTERM, a drain that must end within `shutdown_grace` (plus
//! a margin), and a restart. Every fault is logged with its time.

use std::{collections::BTreeMap, time::Instant};

use super::{
    cluster::Cluster,
    options::Options,
    rng::Rng,
    summary::{FaultKind, Violation},
};

/// What the nemesis did.
#[derive(Debug, Default)]
pub struct Report {
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, usize>,
    /// Drains that did not end in time, and faults that could not be
    /// injected or healed.
    pub violations: Vec<Violation>,
}

/// Injects faults into `cluster` until `began + options.duration`.
pub async fn run(cluster: &mut Cluster, options: &Options, mut rng: Rng, began: Instant) -> Report {
    let mut report = Report::default();
    for kind in FaultKind::ALL {
        report.faults.insert(kind.name(), 0);
    }
    let end = began + options.duration;
    // Every kind once first (in a random order), so every run has each;
    // then any.
    let mut first = FaultKind::ALL.to_vec();
    for i in (1..first.len()).rev() {
        first.swap(i, rng.below(i + 1));
    }
    let mut injected = 0;
    loop {
        let pause = rng.between(options.fault_every.0, options.fault_every.1);
        if Instant::now() + pause >= end {
            tokio::time::sleep_until(end.into()).await;
            return report;
        }
        tokio::time::sleep(pause).await;
        let i = rng.below(cluster.replicas.len());
        let kind = match first.get(injected) {
            Some(kind) => *kind,
            None => *rng.pick(&FaultKind::ALL),
        };
        injected += 1;
        let at = began.elapsed();
        let name = cluster.replicas[i].name.clone();
        let what = match inject(cluster, options, &mut rng, i, kind).await {
            Ok(what) => what,
            Err(e) => {
                report.violations.push(Violation::cluster(
                    "nemesis",
                    format!("{} on {name} at {at:.1?}: {e:#}", kind.name()),
                ));
                format!("failed: {e:#}")
            }
        };
        *report.faults.entry(kind.name()).or_insert(0) += 1;
        eprintln!(
            "chaos: +{:.1}s nemesis: {} {name}: {what} (+{:.1}s)",
            at.as_secs_f64(),
            kind.name(),
            began.elapsed().as_secs_f64()
        );
        if what.starts_with("drain did not end") {
            report.violations.push(Violation::cluster(
                "drain",
                format!("{name} at {at:.1?}: {what}"),
            ));
        }
    }
}

/// One fault on replica `i`: what happened, in words.
async fn inject(
    cluster: &mut Cluster,
    options: &Options,
    rng: &mut Rng,
    i: usize,
    kind: FaultKind,
) -> anyhow::Result<String> {
    match kind {
        FaultKind::Kill => {
            cluster.replicas[i].signal("-KILL")?;
            let t = Instant::now();
            cluster.restart(i).await?;
            Ok(format!("SIGKILL, serving again after {:.1?}", t.elapsed()))
        }
        FaultKind::ShortPause | FaultKind::LongPause => {
            let (low, high) = if kind == FaultKind::ShortPause {
                (0.3, 0.6)
            } else {
                (1.3, 2.5)
            };
            let pause = rng.scaled(options.lease, low, high);
            cluster.replicas[i].signal("-STOP")?;
            tokio::time::sleep(pause).await;
            cluster.replicas[i].signal("-CONT")?;
            Ok(format!(
                "SIGSTOP for {pause:.1?} (lease {:?}), SIGCONT",
                options.lease
            ))
        }
        FaultKind::Drain => {
            let within = options.shutdown_grace + options.drain_margin;
            let t = Instant::now();
            cluster.replicas[i].signal("-TERM")?;
            let ended = cluster.replicas[i].exited_within(within).await;
            let took = t.elapsed();
            let what = if ended {
                format!("SIGTERM, exited after {took:.1?}")
            } else {
                cluster.replicas[i].kill();
                format!(
                    "drain did not end within its grace: still running {took:.1?} after SIGTERM (shutdown_grace {:?} + {:?}); SIGKILLed",
                    options.shutdown_grace, options.drain_margin
                )
            };
            cluster.restart(i).await?;
            Ok(what)
        }
    }
}
