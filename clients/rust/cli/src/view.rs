//! The live tree view of `baton run` and `baton pipeline`: one line per
//! event that matters, indented by depth.
//!
//! On a terminal, text streams in as the model writes it (`TextDelta`),
//! a tool's progress bar is redrawn in place, lines are cut to the
//! terminal's width, and the markers are symbols and emoji. Into a pipe or
//! a file the view is plain: no emoji, no ANSI codes, whole lines only, one
//! line per message. Either way an answer is printed once: a message shown
//! (streamed or whole) is not repeated by its agent's completion or the
//! run's, and status codes are printed by name (`UNAVAILABLE`).

use std::collections::HashMap;
use std::io::{IsTerminal, Write};

use baton_client::{pb, pb::run_event::Payload};

/// What the last write left open on the current line.
enum Open {
    /// Streamed text of this context, and the column it reached (past the
    /// width once cut).
    Text(String, usize),
    /// The progress bar of this tool call.
    Progress(String),
}

/// The view's state across events.
pub struct View {
    /// stdout is a terminal.
    live: bool,
    /// The terminal's width, in characters.
    width: usize,
    open: Option<Open>,
    /// The last text each context showed (streamed or whole).
    shown: HashMap<String, String>,
    /// Text streamed in each context since its last message.
    streamed: HashMap<String, String>,
    /// The tool of each pending approval, by approval id.
    approvals: HashMap<String, String>,
}

impl Default for View {
    fn default() -> Self {
        let live = std::io::stdout().is_terminal();
        let width = terminal_size::terminal_size()
            .map(|(w, _)| usize::from(w.0))
            .filter(|w| *w > 0)
            .or_else(|| std::env::var("COLUMNS").ok()?.parse().ok())
            .unwrap_or(80)
            .max(20);
        // One column of slack: a line's emoji marker is two columns wide.
        Self::new(live, width - 1)
    }
}

impl View {
    /// A view for a terminal (`live`) of `width` columns, or plain.
    pub fn new(live: bool, width: usize) -> Self {
        Self {
            live,
            width,
            open: None,
            shown: HashMap::new(),
            streamed: HashMap::new(),
            approvals: HashMap::new(),
        }
    }

    /// `fancy` on a terminal, `plain` elsewhere.
    fn mark<'a>(&self, fancy: &'a str, plain: &'a str) -> &'a str {
        if self.live { fancy } else { plain }
    }

    /// Whether `text` is what context `ctx` last showed as a message: an
    /// agent's or a run's answer is then not printed again.
    fn was_shown(&self, ctx: &str, text: &str) -> bool {
        self.shown.get(ctx).is_some_and(|t| t == text)
    }

    /// Ends an open line, so what comes next starts on its own.
    pub fn close(&mut self) -> std::io::Result<()> {
        if self.open.take().is_some() {
            let mut out = std::io::stdout().lock();
            writeln!(out)?;
            out.flush()?;
        }
        Ok(())
    }

    /// Cuts `line` to the terminal's width (plain output keeps it whole).
    pub(crate) fn fit(&self, line: String) -> String {
        if !self.live {
            return line;
        }
        match line.char_indices().nth(self.width.saturating_sub(1)) {
            Some((cut, _)) => format!("{}…", &line[..cut]),
            None => line,
        }
    }

    fn line(&mut self, line: String) -> std::io::Result<()> {
        self.close()?;
        let line = self.fit(line);
        crate::out::outln!("{line}")
    }

    /// Draws one event.
    pub fn draw(&mut self, e: &pb::RunEvent) -> std::io::Result<()> {
        let indent = "  ".repeat(e.depth as usize);
        let who = if e.agent.is_empty() {
            String::new()
        } else {
            format!("{}: ", e.agent)
        };
        let ctx = e.context_id.clone();
        let line = match e.payload.as_ref() {
            Some(Payload::TextDelta(d)) if self.live => {
                let mut out = std::io::stdout().lock();
                if !matches!(&self.open, Some(Open::Text(c, _)) if *c == ctx) {
                    if self.open.take().is_some() {
                        writeln!(out)?;
                    }
                    let head = format!("{indent}{}{who}", self.mark("💬 ", "> "));
                    write!(out, "{head}")?;
                    self.open = Some(Open::Text(ctx.clone(), head.chars().count()));
                }
                // Streamed text stays on its line (newlines become spaces)
                // and stops at the width, with an ellipsis.
                let width = self.width;
                if let Some(Open::Text(_, col)) = &mut self.open
                    && *col < width
                {
                    let room = width - 1 - (*col).min(width - 1);
                    let text: String = d.text.replace(['\n', '\r'], " ");
                    let fits: String = text.chars().take(room).collect();
                    *col += fits.chars().count();
                    write!(out, "{fits}")?;
                    if fits.chars().count() < text.chars().count() {
                        write!(out, "…")?;
                        *col = width;
                    }
                }
                out.flush()?;
                self.streamed.entry(ctx).or_default().push_str(&d.text);
                return Ok(());
            }
            Some(Payload::MessageCompleted(m)) => {
                let streamed = self.streamed.remove(&ctx).unwrap_or_default();
                if m.text.is_empty() {
                    return Ok(());
                }
                self.shown.insert(ctx.clone(), m.text.clone());
                if !streamed.is_empty() {
                    // Already on screen: end its line.
                    return self.close();
                }
                format!("{}{who}{}", self.mark("💬 ", "> "), short(&m.text))
            }
            Some(Payload::RunStarted(r)) => format!(
                "{}run of {} (trace {})",
                self.mark("▶ ", "> "),
                r.target,
                e.trace_id
            ),
            Some(Payload::AgentStarted(a)) => {
                format!("● {} [{}] on {}", a.agent, e.context_id, a.model)
            }
            Some(Payload::Handoff(h)) => format!("⇢ handoff {} → {}", h.from_agent, h.to_agent),
            Some(Payload::ToolCallStarted(c)) => format!(
                "{}{who}{} {}",
                self.mark("🔧 ", "- "),
                c.tool,
                short(&c.arguments_json)
            ),
            Some(Payload::ToolProgress(p)) => {
                let line = self.fit(format!(
                    "{indent}   {} {} {}",
                    p.tool,
                    bar(p.percent),
                    p.message
                ));
                if !self.live {
                    return crate::out::outln!("{line}");
                }
                // Redrawn in place while nothing else was printed.
                let mut out = std::io::stdout().lock();
                match &self.open {
                    Some(Open::Progress(id)) if *id == p.call_id => write!(out, "\r\x1b[2K{line}")?,
                    Some(_) => write!(out, "\n{line}")?,
                    None => write!(out, "{line}")?,
                }
                out.flush()?;
                self.open = Some(Open::Progress(p.call_id.clone()));
                return Ok(());
            }
            Some(Payload::ToolOptions(o)) => format!(
                "   {} asks {}: {}",
                o.tool,
                o.question,
                o.options.join(" / ")
            ),
            Some(Payload::ToolCallCompleted(c)) if c.error.is_empty() => {
                format!("✔ {} → {}", c.tool, short(&c.result))
            }
            Some(Payload::ToolCallCompleted(c)) => format!("✘ {} → {}", c.tool, short(&c.error)),
            Some(Payload::ApprovalRequested(a)) => {
                self.approvals.insert(a.approval_id.clone(), a.tool.clone());
                return self.close();
            }
            Some(Payload::ApprovalResolved(a)) => {
                let tool = self.approvals.remove(&a.approval_id).unwrap_or_default();
                let verdict = if a.approved {
                    "✔ approved"
                } else {
                    "✘ denied"
                };
                let reason = if a.reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", a.reason)
                };
                format!("{verdict} {tool}{reason}")
            }
            Some(Payload::InputReceived(i)) => format!("✎ answered {}", i.input),
            Some(Payload::ContextWritten(w)) => format!(
                "{}wrote {} v{} ({} bytes)",
                self.mark("⛁ ", "= "),
                w.key,
                w.version,
                w.size_bytes
            ),
            Some(Payload::AgentCompleted(a)) => {
                if self.was_shown(&ctx, &a.output) {
                    format!("■ {who}done")
                } else {
                    format!("■ {who}done: {}", short(&a.output))
                }
            }
            Some(Payload::StepStarted(st)) => format!(
                "▷ step {} (attempt {}) on {}",
                st.step_id, st.attempt, st.agent
            ),
            Some(Payload::StepCompleted(st)) => format!(
                "✔ step {} in {:.2}s → {}",
                st.step_id,
                st.duration
                    .map_or(0.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9),
                short(&st.output)
            ),
            Some(Payload::StepFailed(st)) => format!(
                "✘ step {} attempt {}: {}{}",
                st.step_id,
                st.attempt,
                short(&st.error),
                if st.will_retry { " (retrying)" } else { "" }
            ),
            Some(Payload::StepSkipped(st)) => {
                format!("⤼ step {} skipped: {}", st.step_id, st.reason)
            }
            Some(Payload::PipelineCompleted(p)) => format!(
                "■ pipeline {}: succeeded [{}] failed [{}] skipped [{}]",
                if p.success { "succeeded" } else { "failed" },
                p.succeeded.join(", "),
                p.failed.join(", "),
                p.skipped.join(", ")
            ),
            Some(Payload::RunCompleted(r)) => {
                let mark = self.mark("✅ ", "");
                if self.was_shown(&ctx, &r.output) {
                    format!("{mark}completed")
                } else {
                    format!("{mark}completed: {}", short(&r.output))
                }
            }
            Some(Payload::RunFailed(f)) => format!(
                "{}failed ({}): {}",
                self.mark("❌ ", ""),
                baton_common::metrics::code_name(tonic::Code::from(f.code)),
                f.message
            ),
            Some(Payload::RunCancelled(c)) => {
                format!("{}cancelled: {}", self.mark("⏹ ", ""), c.reason)
            }
            Some(Payload::RunResumed(r)) => {
                format!("↻ resumed on {} from seq {}", r.replica, r.checkpoint_seq)
            }
            _ => return Ok(()),
        };
        self.line(format!("{indent}{line}"))
    }
}

fn bar(percent: u32) -> String {
    let filled = (percent.min(100) / 5) as usize;
    format!(
        "[{}{}] {percent:>3}%",
        "#".repeat(filled),
        ".".repeat(20 - filled)
    )
}

/// Text for one line of the tree view: whitespace collapsed, at most 160
/// characters (`--json` keeps everything).
fn short(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(160) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}
