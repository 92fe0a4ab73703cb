//! The live tree view of `baton run` and `baton pipeline`: one line per
//! event that matters, indented by depth.
//!
//! Answers (an agent's messages, its output, the run's output and failure)
//! are printed whole, keeping their line breaks; continuation lines are
//! indented under the first. On a terminal they are also wrapped to its
//! width (at spaces, a word longer than a line is broken), text streams in
//! as the model writes it (`TextDelta`), a tool's progress bar is redrawn
//! in place, other lines (tool calls, progress, steps) are cut to the
//! width, and the markers are symbols and emoji. Into a pipe or a file the
//! view is plain: no emoji, no ANSI codes, nothing cut or wrapped. Either
//! way an answer is printed once: a message shown (streamed or whole) is not
//! repeated by its agent's completion or the run's, and status codes are
//! printed by name (`UNAVAILABLE`).

use std::collections::HashMap;
use std::io::{IsTerminal, Write};

use crate::said::{self, bar, short};
use baton_client::{pb, pb::run_event::Payload};

/// What the last write left open on the current line.
enum Open {
    /// Streamed text of this context, wrapped as it comes.
    Text(String, Wrap),
    /// The progress bar of this tool call.
    Progress(String),
}

/// Columns a character takes on a terminal: 2 for wide ones (CJK, emoji),
/// 0 for controls, else 1.
fn char_cols(c: char) -> usize {
    let u = u32::from(c);
    if c.is_control() {
        return 0;
    }
    let wide = matches!(u,
        0x1100..=0x115F
        | 0x231A..=0x231B
        | 0x23E9..=0x23EC
        | 0x23F0..=0x23FA
        | 0x25FD..=0x25FE
        | 0x2614..=0x2615
        | 0x26A1 | 0x26AA..=0x26AB | 0x26BD..=0x26BE | 0x26C4..=0x26C5 | 0x26D4
        | 0x26F2..=0x26F5 | 0x26FA | 0x26FD
        | 0x2705 | 0x270A..=0x270B | 0x2728 | 0x274C | 0x274E | 0x2753..=0x2755
        | 0x2757 | 0x2795..=0x2797 | 0x27B0 | 0x27BF
        | 0x2B1B..=0x2B1C | 0x2B50 | 0x2B55
        | 0x2E80..=0x303E
        | 0x3041..=0x33FF
        | 0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xA000..=0xA4CF
        | 0xAC00..=0xD7A3
        | 0xF900..=0xFAFF
        | 0xFE30..=0xFE4F
        | 0xFF00..=0xFF60
        | 0xFFE0..=0xFFE6
        | 0x1F300..=0x1F64F
        | 0x1F680..=0x1F6FF
        | 0x1F900..=0x1F9FF
        | 0x1FA70..=0x1FAFF
        | 0x20000..=0x3FFFD);
    if wide { 2 } else { 1 }
}

/// `text` wrapped at spaces to lines of at most `width` columns, never
/// breaking a word: a word longer than a line (an id, a URL) stands whole
/// on a line of its own. For prompts and hints on a terminal, where the
/// terminal itself would break a word wherever the line ends (`[y/|N]`).
/// Line breaks are kept; so is a trailing space (where a prompt's cursor
/// waits).
pub(crate) fn wrap_whole(text: &str, width: usize) -> String {
    let mut out = String::new();
    for (n, line) in text.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let mut col = 0;
        for word in line.split(' ').filter(|w| !w.is_empty()) {
            let w = cols(word);
            if col > 0 && col + 1 + w > width {
                out.push('\n');
                col = 0;
            } else if col > 0 {
                out.push(' ');
                col += 1;
            }
            out.push_str(word);
            col += w;
        }
        if line.ends_with(' ') && col > 0 {
            if col + 1 > width {
                out.push('\n');
            } else {
                out.push(' ');
            }
        }
    }
    out
}

/// [`wrap_whole`] to the terminal's width when stderr is a terminal (where
/// prompts and hints go); as it is otherwise.
pub(crate) fn for_stderr(text: &str) -> String {
    if std::io::stderr().is_terminal() {
        wrap_whole(text, terminal_columns())
    } else {
        text.to_owned()
    }
}

/// Columns `s` takes on a terminal.
pub(crate) fn cols(s: &str) -> usize {
    s.chars().map(char_cols).sum()
}

/// Writes text after a line's head, keeping its line breaks and, with a
/// width, wrapping it there: at spaces, breaking a word only when it is
/// longer than a line. Continuation lines start with `cont`. Fed piece by
/// piece (streamed text) or at once.
pub(crate) struct Wrap {
    /// Columns a line may take; `None`: never wrap.
    width: Option<usize>,
    /// The start of every continuation line (indentation).
    cont: String,
    /// The column the cursor is at.
    col: usize,
    /// Spaces seen since the last word, not yet written.
    spaces: usize,
    /// The word being written (already on the line).
    word: String,
    /// The spaces written before it.
    lead: usize,
    /// The current line has nothing written after its start yet (`cont`
    /// is written before its first character, so no line ends in spaces).
    fresh: bool,
}

impl Wrap {
    /// After a head of `head_cols` columns.
    pub(crate) fn new(head_cols: usize, cont: String, width: Option<usize>) -> Self {
        Self {
            width,
            cont,
            col: head_cols,
            spaces: 0,
            word: String::new(),
            lead: 0,
            fresh: false,
        }
    }

    fn newline(&mut self, out: &mut String) {
        out.push('\n');
        self.col = 0;
        self.spaces = 0;
        self.word.clear();
        self.lead = 0;
        self.fresh = true;
    }

    /// Writes the continuation start on a fresh line.
    fn start(&mut self, out: &mut String) {
        if self.fresh {
            out.push_str(&self.cont);
            self.col = cols(&self.cont);
            self.fresh = false;
        }
    }

    /// Appends `text` to `out`. A word that outgrows its line moves to the
    /// next: cut from `out` when it is all there, else (streamed, partly
    /// written already) erased on the terminal with ANSI codes.
    pub(crate) fn push(&mut self, text: &str, out: &mut String) {
        for c in text.chars() {
            match c {
                '\r' => {}
                '\n' => self.newline(out),
                ' ' | '\t' => {
                    self.word.clear();
                    self.spaces += 1;
                }
                c => {
                    self.start(out);
                    let w = char_cols(c);
                    let width = self.width;
                    let room = move |col: usize, need: usize| match width {
                        Some(width) => col + need <= width,
                        None => true,
                    };
                    let line_start = cols(&self.cont);
                    if self.word.is_empty() {
                        let need = self.spaces + w;
                        if self.spaces > 0 && self.col > line_start && !room(self.col, need) {
                            self.newline(out);
                            self.start(out);
                            self.lead = 0;
                        } else {
                            out.extend(std::iter::repeat_n(' ', self.spaces));
                            self.col += self.spaces;
                            self.lead = self.spaces;
                        }
                        self.spaces = 0;
                    } else if !room(self.col, w) {
                        let word_cols = cols(&self.word);
                        let at_line_start = self.col - word_cols - self.lead <= line_start;
                        if !at_line_start && room(line_start, word_cols + w) {
                            // Move the word to the next line.
                            let word = std::mem::take(&mut self.word);
                            let gone = format!("{}{word}", " ".repeat(self.lead));
                            if out.ends_with(&gone) {
                                out.truncate(out.len() - gone.len());
                            } else {
                                let back = word_cols + self.lead;
                                out.push_str(&format!("\x1b[{back}D\x1b[K"));
                            }
                            self.lead = 0;
                            self.newline(out);
                            self.start(out);
                            out.push_str(&word);
                            self.col += word_cols;
                            self.word = word;
                        } else {
                            // Longer than a line: break it.
                            self.newline(out);
                            self.start(out);
                        }
                    }
                    if !room(self.col, w) && self.col > line_start {
                        self.newline(out);
                        self.start(out);
                    }
                    out.push(c);
                    self.col += w;
                    self.word.push(c);
                }
            }
        }
    }
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

/// The terminal's width in columns (`COLUMNS`, else 80, when it says none).
pub(crate) fn terminal_columns() -> usize {
    terminal_size::terminal_size()
        .map(|(w, _)| usize::from(w.0))
        .filter(|w| *w > 0)
        .or_else(|| std::env::var("COLUMNS").ok()?.parse().ok())
        .unwrap_or(80)
        .max(20)
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
            calls: HashMap::new(),
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
                format!("{}{}", self.mark("▶ ", "> "), said::started(r, &e.trace_id))
            }
            Some(Payload::HistoryCompacted(h)) => {
                format!("{}{who}{}", self.mark("⌇ ", "~ "), said::compacted(h))
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
                format!("{}{who}{}", self.mark("⊘ ", "! "), said::spent(b))
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
                if self.shown.values().any(|t| *t == r.output) || r.output.is_empty() {
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
mod wrap_whole_tests {
    use super::wrap_whole;

    #[test]
    fn words_and_ids_stay_whole() {
        assert_eq!(
            wrap_whole("approve write_context {\"key\":\"a\"}? [y/N] ", 20),
            "approve\nwrite_context\n{\"key\":\"a\"}? [y/N] "
        );
        let id = "019abcde-0123-7def-8123-456789abcdef";
        assert_eq!(
            wrap_whole(&format!("stopped watching (baton runs cancel {id})"), 30),
            format!("stopped watching (baton runs\ncancel\n{id})")
        );
        assert_eq!(
            wrap_whole("Which city? [Paris/Lisbon] ", 80),
            "Which city? [Paris/Lisbon] "
        );
        assert_eq!(wrap_whole("one\ntwo three", 5), "one\ntwo\nthree");
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
