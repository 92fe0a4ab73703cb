//! `baton eval`: run a dataset as an experiment, list, show and cancel
//! experiments, compare two (the CI use: a non-zero exit on a regression,
//! `--junit` for what CI systems show).

use std::{io::IsTerminal as _, path::PathBuf, time::Instant};

use anyhow::Context as _;
use baton_client::pb;
use clap::{Args, Subcommand};
use futures::StreamExt as _;

use crate::{
    eval_report::{junit_of_comparison, junit_of_experiment, kind, reason},
    out::outln,
    run::Target,
};

/// `baton eval` arguments.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct EvalArgs {
    #[command(subcommand)]
    command: Option<EvalCmd>,
    #[command(flatten)]
    run: RunEval,
    #[command(flatten)]
    target: Target,
    /// Print JSON instead of text (an experiment: one line a case, then
    /// the record).
    #[arg(long, global = true)]
    json: bool,
}

/// Running a dataset.
#[derive(Args)]
struct RunEval {
    /// The dataset: JSON Lines, or YAML (`.yaml`, `.yml`).
    dataset: Option<PathBuf>,
    /// The agent or group each case runs unless it names its own.
    #[arg(long)]
    agent: Option<String>,
    /// Runs of each case (pass rate, pass@k, pass^k).
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Most runs at once.
    #[arg(long, default_value_t = 8)]
    concurrency: u32,
    /// The experiment's name (`compare` takes it).
    #[arg(long)]
    name: Option<String>,
    /// The model of agents that name none, `provider:model`.
    #[arg(long)]
    model: Option<String>,
    /// Tokens every run of the experiment may spend together.
    #[arg(long, value_name = "TOKENS")]
    budget_tokens: Option<u64>,
    /// Cost every run of the experiment may spend together.
    #[arg(long, value_name = "COST")]
    budget_cost: Option<f64>,
    /// Also write the result as JUnit XML.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

#[derive(Subcommand)]
enum EvalCmd {
    /// Compare two experiments case by case; exit status 1 when the
    /// candidate regresses a case beyond noise.
    #[command(after_help = "Examples:
  baton eval compare baseline candidate
  baton eval compare exp-0192… exp-0193… --junit eval.xml
  baton eval compare main pr-42 --json | jq '.cases[] | select(.kind == \"CASE_CHANGE_KIND_REGRESSED\")'")]
    Compare {
        /// The reference experiment (id or name).
        baseline: String,
        /// The experiment judged against it.
        candidate: String,
        /// Write the comparison as JUnit XML (a regression is a failure).
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// The significance level of a change in a case's pass rate.
        #[arg(long, default_value_t = 0.05)]
        alpha: f64,
    },
    /// The caller's experiments, newest first.
    List {
        /// Most experiments to show.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// One experiment's cases, scores and reasons.
    Show {
        /// Its id or name.
        experiment: String,
    },
    /// Stop a running experiment (started elsewhere: Ctrl-C stops the one
    /// `baton eval` runs); the cases that finished are kept.
    Cancel {
        /// Its id or name.
        experiment: String,
    },
}

/// Runs `baton eval`.
pub async fn run(args: EvalArgs) -> anyhow::Result<()> {
    let client = args.target.connect().await?;
    match args.command {
        Some(EvalCmd::Compare {
            baseline,
            candidate,
            junit,
            alpha,
        }) => {
            let c = client
                .compare_experiments(&baseline, &candidate, alpha)
                .await?;
            if let Some(path) = &junit {
                std::fs::write(path, junit_of_comparison(&c))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            if args.json {
                outln!("{}", serde_json::to_string(&c)?)?;
            } else {
                print_comparison(&c)?;
            }
            let regressed = c
                .cases
                .iter()
                .filter(|x| x.kind == pb::CaseChangeKind::Regressed as i32)
                .count();
            anyhow::ensure!(
                regressed == 0,
                "{} regressed beyond noise",
                crate::said::count(regressed as u64, "case")
            );
            Ok(())
        }
        Some(EvalCmd::List { limit }) => {
            let mut token = String::new();
            let mut shown = 0;
            if !args.json {
                outln!(
                    "{:<36} {:<9} {:>5} {:>6} {:>7}  NAME",
                    "ID",
                    "STATUS",
                    "CASES",
                    "PASSED",
                    "RATE"
                )?;
            }
            loop {
                let page = client.list_experiments(100, &token).await?;
                for e in &page.experiments {
                    if shown >= limit {
                        return Ok(());
                    }
                    shown += 1;
                    if args.json {
                        outln!("{}", serde_json::to_string(e)?)?;
                        continue;
                    }
                    let t = e.totals.unwrap_or_default();
                    outln!(
                        "{:<36} {:<9} {:>5} {:>6} {:>6.0}%  {}",
                        e.id,
                        status(e.status),
                        t.cases,
                        t.passed,
                        t.pass_rate * 100.0,
                        e.name
                    )?;
                }
                if page.next_page_token.is_empty() {
                    return Ok(());
                }
                token = page.next_page_token;
            }
        }
        Some(EvalCmd::Show { experiment }) => {
            let e = client.get_experiment(&experiment).await?;
            if args.json {
                outln!("{}", serde_json::to_string(&e)?)?;
                return Ok(());
            }
            for c in &e.cases {
                print_case(c)?;
            }
            print_totals(&e)?;
            Ok(())
        }
        Some(EvalCmd::Cancel { experiment }) => {
            let e = client.cancel_experiment(&experiment).await?;
            if args.json {
                outln!("{}", serde_json::to_string(&e)?)?;
                return Ok(());
            }
            let kept = format!(
                "{} of {}",
                crate::said::count(e.cases.len() as u64, "case"),
                e.case_count
            );
            let said = match pb::ExperimentStatus::try_from(e.status) {
                Ok(pb::ExperimentStatus::Cancelled) => format!("cancelled: {kept} kept"),
                Ok(pb::ExperimentStatus::Running) => {
                    format!("asked to stop; its replica has not said it did yet ({kept} so far)")
                }
                _ => format!("ended {} before the cancel: {kept}", status(e.status)),
            };
            let line = format!("experiment {} {said}", e.id);
            if std::io::stdout().is_terminal() {
                outln!(
                    "{}",
                    crate::text::wrap_whole(&line, crate::text::terminal_columns())
                )?;
            } else {
                outln!("{line}")?;
            }
            Ok(())
        }
        None => run_dataset(&client, args.run, args.json).await,
    }
}

async fn run_dataset(
    client: &baton_client::OrchestratorClient,
    r: RunEval,
    json: bool,
) -> anyhow::Result<()> {
    let Some(path) = r.dataset else {
        anyhow::bail!(
            "name a dataset: baton eval DATASET --agent NAME (or baton eval compare A B)"
        );
    };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let request = pb::RunExperimentRequest {
        dataset: text,
        dataset_name: path.display().to_string(),
        agent: r.agent.unwrap_or_default(),
        name: r.name.unwrap_or_default(),
        repeat: r.repeat,
        concurrency: r.concurrency,
        default_model: r.model.unwrap_or_default(),
        budget: (r.budget_tokens.is_some() || r.budget_cost.is_some()).then(|| {
            pb::ExperimentBudget {
                tokens: r.budget_tokens.unwrap_or(0),
                cost: r.budget_cost.unwrap_or(0.0),
            }
        }),
    };
    let mut events = Box::pin(client.run_experiment(request).await?);
    let tty = std::io::stderr().is_terminal() && !json;
    let started = Instant::now();
    let (mut passed, mut failed, mut total) = (0u32, 0u32, 0u32);
    let mut id = String::new();
    let mut ended: Option<pb::Experiment> = None;
    loop {
        let next = tokio::select! {
            e = events.next() => e,
            _ = tokio::signal::ctrl_c() => {
                if tty {
                    eprint!("\r\x1b[2K");
                }
                eprintln!(
                    "{}",
                    crate::text::for_stderr(&format!(
                        "interrupted: the runs still going are cancelled; {} finished and kept (baton eval show {id})",
                        crate::said::count(passed + failed, "case")
                    ))
                );
                return Err(crate::follow::Interrupted.into());
            }
        };
        let Some(event) = next else { break };
        match event?.event {
            Some(pb::experiment_event::Event::Started(e)) => {
                id = e.id.clone();
                total = e.case_count;
                if !json {
                    eprintln!(
                        "experiment {}: {}{}",
                        e.name,
                        crate::said::count(e.case_count, "case"),
                        if e.repeat > 1 {
                            format!(", {} tries each", e.repeat)
                        } else {
                            String::new()
                        }
                    );
                }
            }
            Some(pb::experiment_event::Event::CaseScored(c)) => {
                if c.passed {
                    passed += 1;
                } else {
                    failed += 1;
                }
                if json {
                    outln!("{}", serde_json::to_string(&c)?)?;
                    continue;
                }
                if tty {
                    eprint!("\r\x1b[2K");
                }
                print_case(&c)?;
                if tty {
                    let done = passed + failed;
                    let width = 24usize;
                    let filled = if total == 0 {
                        0
                    } else {
                        (done as usize * width) / total as usize
                    };
                    eprint!(
                        "[{}{}] {done}/{total}  {passed} passed  {failed} failed  {:.0} s",
                        "█".repeat(filled),
                        "·".repeat(width - filled),
                        started.elapsed().as_secs_f64()
                    );
                }
            }
            Some(pb::experiment_event::Event::Ended(e)) => ended = Some(e),
            None => {}
        }
    }
    if tty {
        eprint!("\r\x1b[2K");
    }
    let e = ended.context("the experiment's stream ended before the experiment did")?;
    if let Some(path) = &r.junit {
        std::fs::write(path, junit_of_experiment(&e))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if json {
        outln!("{}", serde_json::to_string(&e)?)?;
    } else {
        print_totals(&e)?;
    }
    let t = e.totals.unwrap_or_default();
    // Stopped before its end (cancelled elsewhere, its replica gone): not
    // a pass, whatever the cases that ran said.
    anyhow::ensure!(
        e.status == pb::ExperimentStatus::Completed as i32,
        "the experiment was {} after {} of {}",
        status(e.status),
        crate::said::count(e.cases.len() as u64, "case"),
        e.case_count
    );
    anyhow::ensure!(
        t.failed + t.errored == 0,
        "{} of {} did not pass",
        t.failed + t.errored,
        crate::said::count(t.cases, "case")
    );
    Ok(())
}

fn status(s: i32) -> String {
    pb::ExperimentStatus::try_from(s)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("EXPERIMENT_STATUS_")
                .to_lowercase()
        })
        .unwrap_or_default()
}

/// A case as one line (two when it failed: the reason under it).
fn print_case(c: &pb::CaseResult) -> anyhow::Result<()> {
    let n = c.tries.len();
    let passed = c.tries.iter().filter(|t| t.passed).count();
    let mark = if c.passed { "✓" } else { "✗" };
    let tries = if n > 1 {
        format!("  {passed}/{n}")
    } else {
        String::new()
    };
    let run = c
        .tries
        .first()
        .map(|t| t.run_id.as_str())
        .unwrap_or_default();
    outln!("{mark} {}{tries}  {run}", c.case_id)?;
    if !c.passed {
        let width = crate::text::terminal_columns().saturating_sub(5).max(20);
        let why: String = reason(c)
            .replace('\n', " ")
            .chars()
            .take(width * 2)
            .collect();
        let mut line = String::from("    ");
        crate::text::Wrap::new(4, "    ".into(), Some(width)).push(&why, &mut line);
        outln!("{line}")?;
    }
    Ok(())
}

fn print_totals(e: &pb::Experiment) -> anyhow::Result<()> {
    let t = e.totals.unwrap_or_default();
    let u = e.usage.clone().unwrap_or_default();
    let secs = t
        .duration
        .map_or(0.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9);
    outln!(
        "{}: {} passed, {} failed, {} errors · pass rate {:.0}% [{:.0}–{:.0}%]",
        crate::said::count(t.cases, "case"),
        t.passed,
        t.failed,
        t.errored,
        t.pass_rate * 100.0,
        t.pass_rate_low * 100.0,
        t.pass_rate_high * 100.0
    )?;
    if e.repeat > 1 {
        outln!(
            "pass@{k} {:.0}% · pass^{k} {:.0}%",
            t.pass_at_k * 100.0,
            t.pass_hat_k * 100.0,
            k = e.repeat
        )?;
    }
    let cost = if u.cost_nanos > 0 {
        format!(" · {} {}", crate::out::money(u.cost_nanos), u.currency)
    } else {
        String::new()
    };
    outln!(
        "{} tokens{cost} · {:.1} s · {}",
        u.input_tokens + u.output_tokens,
        secs,
        status(e.status)
    )?;
    outln!("experiment {} {}", e.id, e.name)?;
    Ok(())
}

fn print_comparison(c: &pb::ExperimentComparison) -> anyhow::Result<()> {
    let name = |e: &Option<pb::Experiment>| e.as_ref().map(|e| e.name.clone()).unwrap_or_default();
    outln!("{} → {}", name(&c.baseline), name(&c.candidate))?;
    for x in &c.cases {
        let p = if x.p_value < 1.0 {
            format!("  p={:.3}", x.p_value)
        } else {
            String::new()
        };
        outln!("{:<14} {}  {}{p}", kind(x.kind), x.case_id, x.tries)?;
        if !x.reason.is_empty() && x.kind != pb::CaseChangeKind::Same as i32 {
            let why: String = x.reason.replace('\n', " ").chars().take(150).collect();
            outln!("               {why}")?;
        }
    }
    let count = |k: pb::CaseChangeKind| c.cases.iter().filter(|x| x.kind == k as i32).count();
    let rate = |e: &Option<pb::Experiment>| {
        e.as_ref()
            .and_then(|e| e.totals.as_ref())
            .map_or(0.0, |t| t.pass_rate * 100.0)
    };
    outln!(
        "{} regressed, {} improved, {} within noise · pass rate {:.0}% → {:.0}%",
        count(pb::CaseChangeKind::Regressed),
        count(pb::CaseChangeKind::Improved),
        count(pb::CaseChangeKind::WorseWithinNoise) + count(pb::CaseChangeKind::BetterWithinNoise),
        rate(&c.baseline),
        rate(&c.candidate)
    )?;
    Ok(())
}
