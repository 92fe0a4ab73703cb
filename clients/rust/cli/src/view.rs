//! The live tree view of `baton run` and `baton pipeline`: one line per
//! event that matters, indented by depth. `baton chat` draws it in its chat
//! mode ([`Mode::Chat`]): each answer without its run's scaffolding.
//!
//! Answers (an agent's messages, its output, the run's output and failure)
//! are printed whole, keeping their line breaks; continuation lines are
//! indented under the first. On a terminal they are also wrapped to its
//! width (at spaces, a word longer than a line is broken), text streams in
//! as the model writes it (`TextDelta`), a tool's progress bar is redrawn
//! in place, the run's header and a spent budget are wrapped at spaces
//! (ids whole), other lines (tool calls, progress, steps) are cut to the
//! width, and the markers are symbols and emoji. Into a pipe or a file the
//! view is plain: no emoji, no ANSI codes, nothing cut or wrapped. Either
//! way an answer is printed once: a message shown (streamed or whole) is
//! not repeated by its agent's completion or the run's, and status codes
//! are printed by name (`UNAVAILABLE`).

use std::collections::HashMap;
use std::io::{IsTerminal, Write};

use crate::said::{self, bar, short};
use crate::text::{Wrap, cols, terminal_columns, wrap_words};

use baton_client::{pb, pb::run_event::Payload};

/// What the last write left open on the current line.
enum Open {
    /// Streamed text of this context, wrapped as it comes.
    Text(String, Wrap),
    /// The progress bar of this tool call.
    Progress(String),
}

/// What the view draws of a run.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Every event that matters (`baton run`, `baton pipeline`, `baton runs
    /// watch`).
    #[default]
    Tree,
    /// A chat (`baton chat`): the answers, without the scaffolding of each
    /// run — its header, its root agent's start and end, and `completed`
    /// once the answer was shown.
    Chat,
}

/// The view's state across events.
pub struct View {
    /// stdout is a terminal.
    live: bool,
    /// What it draws.
    mode: Mode,
    /// The terminal's width, in characters.
    width: usize,
    open: Option<Open>,
    /// The last text each context showed (streamed or whole).
    shown: HashMap<String, String>,
    /// Text streamed in each context since its last message.
    streamed: HashMap<String, String>,
    /// The tool of each pending approval, by approval id.
    approvals: HashMap<String, String>,
    /// The tool of each call started, by call id.
    calls: HashMap<String, String>,
}

impl Default for View {
    fn default() -> Self {
        let live = std::io::stdout().is_terminal();
        // One column of slack: a line's emoji marker is two columns wide.
        Self::new(live, terminal_columns() - 1)
    }
}

impl View {
    /// A view for a terminal (`live`) of `width` columns, or plain.
    pub fn new(live: bool, width: usize) -> Self {
        Self {
            live,
            mode: Mode::Tree,
            width,
            open: None,
            shown: HashMap::new(),
            streamed: HashMap::new(),
            approvals: HashMap::new(),
            calls: HashMap::new(),
        }
    }

    /// This view drawing in `mode`.
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
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

    /// Ends an open line after Ctrl-C; whether the view is on a terminal
    /// (where `^C` was echoed, on a line of its own only if one was open).
    pub fn close_after_ctrl_c(&mut self) -> bool {
        let open = self.open.is_some();
        let _ = self.close();
        self.live && !open
    }

    /// The width text is wrapped at: the terminal's, none in a pipe.
    pub(crate) fn wrap_width(&self) -> Option<usize> {
        self.live.then_some(self.width)
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

    /// Where continuation lines of a block at `indent` start: under the
    /// text after the marker.
    fn cont(&self, indent: &str) -> String {
        format!("{indent}{}", self.mark("   ", "  "))
    }

    /// Prints `head` then `text` whole: its line breaks kept, continuation
    /// lines indented, wrapped at the width on a terminal.
    fn block(&mut self, head: String, indent: &str, text: &str) -> std::io::Result<()> {
        self.close()?;
        let width = self.live.then_some(self.width);
        let mut wrap = Wrap::new(cols(&head), self.cont(indent), width);
        let mut out = head;
        wrap.push(text.trim_end(), &mut out);
        crate::out::outln!("{out}")
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
                let mut text = String::new();
                if !matches!(&self.open, Some(Open::Text(c, _)) if *c == ctx) {
                    if self.open.take().is_some() {
                        text.push('\n');
                    }
                    let head = format!("{indent}{}{who}", self.mark("💬 ", "> "));
                    text.push_str(&head);
                    let wrap = Wrap::new(cols(&head), self.cont(&indent), Some(self.width));
                    self.open = Some(Open::Text(ctx.clone(), wrap));
                }
                // Streamed text wraps at the width as it comes, keeping
                // its line breaks.
                if let Some(Open::Text(_, wrap)) = &mut self.open {
                    wrap.push(&d.text, &mut text);
                }
                let mut out = std::io::stdout().lock();
                write!(out, "{text}")?;
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
                let head = format!("{indent}{}{who}", self.mark("💬 ", "> "));
                return self.block(head, &indent, &m.text);
            }
            Some(Payload::RunStarted(r)) => {
                if self.mode == Mode::Chat {
                    return Ok(());
                }
                // Wrapped at spaces, never cut: its ids stay whole.
                let text = format!("{}{}", self.mark("▶ ", "> "), said::started(r, &e.trace_id));
                self.close()?;
                if !self.live {
                    return crate::out::outln!("{indent}{text}");
                }
                let width = self.width.saturating_sub(cols(&indent));
                let wrapped = wrap_words(&text, width, "   ");
                for line in wrapped.lines() {
                    crate::out::outln!("{indent}{line}")?;
                }
                return Ok(());
            }
            Some(Payload::HistoryCompacted(h)) => {
                format!("{}{who}{}", self.mark("⌇ ", "~ "), said::compacted(h))
            }
            Some(Payload::AgentStarted(_)) if self.mode == Mode::Chat && e.depth == 0 => {
                return Ok(());
            }
            Some(Payload::AgentStarted(a)) => {
                format!("● {} [{}] on {}", a.agent, e.context_id, a.model)
            }
            Some(Payload::Handoff(h)) => format!("⇢ handoff {} → {}", h.from_agent, h.to_agent),
            Some(Payload::ModelFallback(f)) => {
                // The failed model's text is dropped: the next starts over.
                if f.discarded_text {
                    self.streamed.remove(&ctx);
                }
                format!("{}{who}{}", self.mark("↻ ", "~ "), said::fallback(f))
            }
            Some(Payload::RateLimitWait(w)) => {
                format!("{}{who}{}", self.mark("⏳ ", "~ "), said::waiting(w))
            }
            Some(Payload::BudgetExhausted(b)) => {
                // Wrapped, not cut: what the agent does is at its end.
                let head = format!("{indent}{}{who}", self.mark("⊘ ", "! "));
                return self.block(head, &indent, &said::spent(b));
            }
            Some(Payload::ToolCallStarted(c)) => {
                self.calls.insert(c.call_id.clone(), c.tool.clone());
                format!(
                    "{}{who}{} {}",
                    self.mark("🔧 ", "- "),
                    c.tool,
                    short(&c.arguments_json)
                )
            }
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
                // Asked (the approval's tool), or decided by the run's
                // approval mode unasked (the tool of its call).
                let tool = self.approvals.remove(&a.approval_id).or_else(|| {
                    let (_, tool) = self
                        .calls
                        .iter()
                        .find(|(call, _)| a.approval_id.ends_with(call.as_str()))?;
                    Some(tool.clone())
                });
                let verdict = if a.approved {
                    "✔ approved"
                } else {
                    "✘ denied"
                };
                let tool = tool.map(|t| format!(" {t}")).unwrap_or_default();
                let reason = match (a.source(), a.reason.as_str()) {
                    (pb::ApprovalSource::Mode, r) => format!(" (the run's approval mode, {r})"),
                    (pb::ApprovalSource::Fork, "") => " (the fork's edit)".into(),
                    (pb::ApprovalSource::Fork, r) => format!(" (the fork's edit: {r})"),
                    (_, "") => String::new(),
                    (_, r) => format!(" ({r})"),
                };
                format!("{verdict}{tool}{reason}")
            }
            Some(Payload::InputReceived(i)) => format!("✎ answered {}", i.input),
            Some(Payload::InputTimedOut(_)) => "✘ nobody answered in time".to_owned(),
            Some(Payload::ContextWritten(w)) => format!(
                "{}wrote {} v{} ({} bytes)",
                self.mark("⛁ ", "= "),
                w.key,
                w.version,
                w.size_bytes
            ),
            Some(Payload::AgentCompleted(a)) => {
                if self.was_shown(&ctx, &a.output) || a.output.is_empty() {
                    if self.mode == Mode::Chat && e.depth == 0 {
                        return Ok(());
                    }
                    format!("■ {who}done")
                } else {
                    return self.block(format!("{indent}■ {who}done: "), &indent, &a.output);
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
            Some(Payload::PipelineCompleted(p)) => {
                let head = format!(
                    "{indent}■ pipeline {}: ",
                    if p.success { "succeeded" } else { "failed" }
                );
                let text = format!(
                    "succeeded [{}] failed [{}] skipped [{}]",
                    p.succeeded.join(", "),
                    p.failed.join(", "),
                    p.skipped.join(", ")
                );
                return self.block(head, &indent, &text);
            }
            Some(Payload::RunCompleted(r)) => {
                let mark = self.mark("✅ ", "");
                // A pipeline's output is its last step's: shown there.
                let shown = self.shown.values().any(|t| *t == r.output);
                if shown && self.mode == Mode::Chat && !r.output.is_empty() {
                    // The answer says it.
                    return Ok(());
                }
                if shown || r.output.is_empty() {
                    format!("{mark}completed")
                } else {
                    return self.block(format!("{indent}{mark}completed: "), &indent, &r.output);
                }
            }
            Some(Payload::RunFailed(f)) => {
                let head = format!(
                    "{indent}{}failed ({}): ",
                    self.mark("❌ ", ""),
                    baton_common::metrics::code_name(tonic::Code::from(f.code)),
                );
                return self.block(head, &indent, &f.message);
            }
            Some(Payload::RunCancelled(c)) => {
                // "cancelled by request: Ctrl-C" reads "cancelled: Ctrl-C".
                let why = c
                    .reason
                    .strip_prefix("cancelled by request")
                    .map(|r| r.trim_start_matches(':').trim())
                    .unwrap_or(&c.reason);
                let mark = self.mark("⏹ ", "");
                if why.is_empty() {
                    format!("{mark}cancelled")
                } else {
                    format!("{mark}cancelled: {why}")
                }
            }
            Some(Payload::Diverged(d)) => {
                let mark = self.mark("⚠ ", "! ");
                let head = format!("{indent}{mark}{}: ", crate::replay::diverged(d));
                return self.block(head, &indent, &d.diff);
            }
            Some(Payload::RunResumed(r)) => {
                format!("↻ resumed on {} from seq {}", r.replica, r.checkpoint_seq)
            }
            _ => return Ok(()),
        };
        self.line(format!("{indent}{line}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrapped(head: &str, text: &str, width: Option<usize>) -> String {
        let mut out = head.to_owned();
        Wrap::new(cols(head), "  ".into(), width).push(text, &mut out);
        out
    }

    #[test]
    fn text_wraps_at_spaces_and_keeps_its_line_breaks() {
        assert_eq!(
            wrapped("> a: ", "one two three four", Some(12)),
            "> a: one two\n  three four"
        );
        // Line breaks and blank lines kept; no line ends in spaces.
        assert_eq!(
            wrapped("> ", "list:\n\n- x y\n- z", Some(40)),
            "> list:\n\n  - x y\n  - z"
        );
        // A word longer than a line is broken.
        assert_eq!(wrapped("> ", "abcdefghij", Some(6)), "> abcd\n  efgh\n  ij");
        // No width: nothing wrapped, line breaks kept.
        let long = "word ".repeat(40);
        assert_eq!(
            wrapped("> ", long.trim_end(), None),
            format!("> {}", long.trim_end())
        );
        // Wide characters count two columns.
        assert_eq!(cols("💬 日本"), 7);
        assert_eq!(
            wrapped("> ", "日本語 日本語", Some(9)),
            "> 日本語\n  日本語"
        );
    }

    #[test]
    fn a_streamed_word_that_outgrows_its_line_moves_to_the_next() {
        let mut wrap = Wrap::new(2, "  ".into(), Some(10));
        let mut first = String::new();
        wrap.push("one tw", &mut first);
        assert_eq!(first, "one tw");
        // The rest of the word does not fit: what was written of it is
        // erased on the terminal and written again on the next line.
        let mut second = String::new();
        wrap.push("elve", &mut second);
        assert_eq!(second, "el\u{1b}[5D\u{1b}[K\n  twelve");
    }
}
