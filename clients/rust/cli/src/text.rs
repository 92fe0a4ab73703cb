//! Text on a terminal: how many columns it takes, and wrapping it at
//! spaces to a width (a word longer than a line is broken), all at once or
//! as it streams in ([`Wrap`]). What the live view (`view`) draws with.

use std::io::IsTerminal;

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
    wrap_words(text, width, "")
}

/// [`wrap_whole`], the lines it breaks continued after `cont` (an
/// indentation).
pub(crate) fn wrap_words(text: &str, width: usize, cont: &str) -> String {
    let mut out = String::new();
    for (n, line) in text.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let mut col = 0;
        // Nothing written on this line yet.
        let mut empty = true;
        for word in line.split(' ').filter(|w| !w.is_empty()) {
            let w = cols(word);
            if !empty && col + 1 + w > width {
                out.push('\n');
                out.push_str(cont);
                col = cols(cont);
            } else if !empty {
                out.push(' ');
                col += 1;
            }
            out.push_str(word);
            col += w;
            empty = false;
        }
        if line.ends_with(' ') && !empty {
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

/// The terminal's width in columns (`COLUMNS`, else 80, when it says none).
pub(crate) fn terminal_columns() -> usize {
    terminal_size::terminal_size()
        .map(|(w, _)| usize::from(w.0))
        .filter(|w| *w > 0)
        .or_else(|| std::env::var("COLUMNS").ok()?.parse().ok())
        .unwrap_or(80)
        .max(20)
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
