//! Rust source read just far enough to see what a file imports: tokens
//! without comments, literals opaque (a `use` in a string or a doc comment
//! is no import), `#[cfg(test)]` modules left out wherever they are.

use std::ops::Range;

/// A token of Rust source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    /// An identifier or keyword (a raw identifier without its `r#`).
    Ident(String),
    /// `::`.
    PathSep,
    /// Any other punctuation, one character.
    Punct(char),
    /// A string, character or number literal, or a lifetime.
    Literal,
}

/// A token and the bytes of the text it spans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// What it is.
    pub tok: Tok,
    /// Where it starts and ends in the text.
    pub span: Range<usize>,
}

fn ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

fn ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// The end of the string whose opening quote is at `open`.
fn string_end(b: &[u8], open: usize) -> usize {
    let mut i = open + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The end of the raw string whose opening quote is at `open`.
fn raw_string_end(b: &[u8], open: usize, hashes: usize) -> usize {
    let mut i = open + 1;
    while i < b.len() {
        if b[i] == b'"'
            && b.len() - (i + 1) >= hashes
            && b[i + 1..i + 1 + hashes].iter().all(|&h| h == b'#')
        {
            return i + 1 + hashes;
        }
        i += 1;
    }
    b.len()
}

/// The end of the (nested) block comment that starts at `open`.
fn block_comment_end(b: &[u8], open: usize) -> usize {
    let (mut i, mut depth) = (open + 2, 1);
    while i < b.len() && depth > 0 {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            depth += 1;
            i += 2;
        } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
            depth -= 1;
            i += 2;
        } else {
            i += 1;
        }
    }
    i.min(b.len())
}

/// The end of the character literal or lifetime that starts at `quote`.
fn quote_end(text: &str, quote: usize) -> usize {
    let b = text.as_bytes();
    if b.get(quote + 1) == Some(&b'\\') {
        // '\n', '\'', '\\', '\u{..}': skip the escaped character, then close.
        let mut i = quote + 3;
        while i < b.len() && b[i] != b'\'' {
            i += 1;
        }
        return (i + 1).min(b.len());
    }
    let width = text[quote + 1..].chars().next().map_or(0, char::len_utf8);
    if width > 0 && b.get(quote + 1 + width) == Some(&b'\'') {
        return quote + 2 + width; // 'x'
    }
    let mut i = quote + 1; // a lifetime or a label
    while i < b.len() && ident_char(b[i]) {
        i += 1;
    }
    i
}

/// The tokens of `text`; comments (doc comments included) dropped.
pub fn tokens(text: &str) -> Vec<Token> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let c = b[i];
        let next = b.get(i + 1).copied();
        let tok = if c.is_ascii_whitespace() {
            i += 1;
            continue;
        } else if c == b'/' && next == Some(b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        } else if c == b'/' && next == Some(b'*') {
            i = block_comment_end(b, i);
            continue;
        } else if ident_start(c) {
            while i < b.len() && ident_char(b[i]) {
                i += 1;
            }
            let word = &text[start..i];
            let hashes = b[i..].iter().take_while(|&&h| h == b'#').count();
            if matches!(word, "r" | "br" | "cr") && b.get(i + hashes) == Some(&b'"') {
                i = raw_string_end(b, i + hashes, hashes);
                Tok::Literal
            } else if word == "r" && hashes == 1 && b.get(i + 1).is_some_and(|&n| ident_start(n)) {
                i += 1;
                let raw = i;
                while i < b.len() && ident_char(b[i]) {
                    i += 1;
                }
                Tok::Ident(text[raw..i].to_owned())
            } else if matches!(word, "b" | "c") && b.get(i) == Some(&b'"') {
                i = string_end(b, i);
                Tok::Literal
            } else if word == "b" && b.get(i) == Some(&b'\'') {
                i = quote_end(text, i);
                Tok::Literal
            } else {
                Tok::Ident(word.to_owned())
            }
        } else if c.is_ascii_digit() {
            while i < b.len()
                && (ident_char(b[i])
                    || b[i] == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
            {
                i += 1;
            }
            Tok::Literal
        } else if c == b'"' {
            i = string_end(b, i);
            Tok::Literal
        } else if c == b'\'' {
            i = quote_end(text, i);
            Tok::Literal
        } else if c == b':' && next == Some(b':') {
            i += 2;
            Tok::PathSep
        } else {
            i += 1;
            Tok::Punct(c as char)
        };
        out.push(Token {
            tok,
            span: start..i,
        });
    }
    out
}

/// A `mod name;` declaration: the file module it names is a child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModDecl {
    /// The inline modules (`mod a { … }`) the declaration sits in.
    pub scope: Vec<String>,
    /// The module declared.
    pub name: String,
    /// Whether it is `#[cfg(test)]`: its file is test code.
    pub test: bool,
}

/// A path the code names, in a `use` tree or inline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathRef {
    /// The inline modules (`mod a { … }`) the path sits in.
    pub scope: Vec<String>,
    /// `crate::a::B`, `super::b`, `child::f`, `std::sync::Arc`…
    pub path: String,
    /// Its line, from 1.
    pub line: usize,
}

/// What a file says about modules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Its `mod name;` declarations (inline modules are not files).
    pub mods: Vec<ModDecl>,
    /// The paths it names outside its `#[cfg(test)]` modules.
    pub paths: Vec<PathRef>,
    /// Its lines, those of its `#[cfg(test)]` modules not counted.
    pub lines: usize,
}

fn is(tokens: &[Token], i: usize, want: &Tok) -> bool {
    tokens.get(i).is_some_and(|t| t.tok == *want)
}

fn ident(tokens: &[Token], i: usize) -> Option<&str> {
    match tokens.get(i).map(|t| &t.tok) {
        Some(Tok::Ident(word)) => Some(word),
        _ => None,
    }
}

fn is_ident(tokens: &[Token], i: usize, word: &str) -> bool {
    ident(tokens, i) == Some(word)
}

/// The index of the bracket closing the one at `open`.
fn closing(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate().skip(open) {
        match t.tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    tokens.len().saturating_sub(1)
}

/// A `#[cfg(test)]` module starting at `i` (more attributes and a
/// visibility may follow the `cfg`): the index after it, its name, and
/// whether it is a declaration (`mod tests;`) rather than a block.
fn test_module(t: &[Token], i: usize) -> Option<(usize, String, bool)> {
    let cfg_test = [
        Tok::Punct('#'),
        Tok::Punct('['),
        Tok::Ident("cfg".into()),
        Tok::Punct('('),
        Tok::Ident("test".into()),
        Tok::Punct(')'),
        Tok::Punct(']'),
    ];
    if !cfg_test
        .iter()
        .enumerate()
        .all(|(k, want)| is(t, i + k, want))
    {
        return None;
    }
    let mut j = i + cfg_test.len();
    while is(t, j, &Tok::Punct('#')) && is(t, j + 1, &Tok::Punct('[')) {
        j = closing(t, j + 1) + 1;
    }
    if is_ident(t, j, "pub") {
        j += 1;
        if is(t, j, &Tok::Punct('(')) {
            j = closing(t, j) + 1;
        }
    }
    if !is_ident(t, j, "mod") {
        return None;
    }
    let name = ident(t, j + 1)?.to_owned();
    match t.get(j + 2).map(|t| &t.tok) {
        Some(Tok::Punct(';')) => Some((j + 3, name, true)),
        Some(Tok::Punct('{')) => Some((closing(t, j + 2) + 1, name, false)),
        _ => None,
    }
}

/// A `use` tree as written (`a::{b, c::d as e}`), renames dropped.
fn use_tree(t: &[Token]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < t.len() {
        match &t[i].tok {
            Tok::Ident(word) if word == "as" => i += 1, // and its new name
            Tok::Ident(word) => out.push_str(word),
            Tok::PathSep => out.push_str("::"),
            Tok::Punct(c @ ('{' | '}' | ',' | '*')) => out.push(*c),
            _ => {}
        }
        i += 1;
    }
    out
}

/// Expands `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e`.
pub fn expand(tree: &str) -> Vec<String> {
    fn go(prefix: &str, tree: &str, out: &mut Vec<String>) {
        let Some(open) = tree.find('{') else {
            out.push(format!("{prefix}{tree}"));
            return;
        };
        let head = &tree[..open];
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len()).max(open + 1)];
        let (mut depth, mut start) = (0, 0);
        let mut items = Vec::new();
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&inner[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        items.push(&inner[start..]);
        for item in items.into_iter().filter(|i| !i.is_empty()) {
            go(&format!("{prefix}{head}"), item, out);
        }
    }
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = Vec::new();
    go("", &tree, &mut out);
    out
}

/// The lines of `text` outside `skipped` (a line is where its first
/// non-blank character is; a blank line, where it starts).
fn lines_outside(text: &str, skipped: &[Range<usize>]) -> usize {
    let mut offset = 0;
    let mut count = 0;
    for line in text.split_inclusive('\n') {
        let at = if line.trim().is_empty() {
            offset
        } else {
            offset + line.len() - line.trim_start().len()
        };
        if !skipped.iter().any(|r| r.contains(&at)) {
            count += 1;
        }
        offset += line.len();
    }
    count
}

/// Reads a file: its `mod` declarations, the paths it names outside its
/// `#[cfg(test)]` modules, its length without them.
pub fn parse(text: &str) -> Parsed {
    let t = tokens(text);
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let line_of = |at: usize| line_starts.partition_point(|&s| s <= at);
    let mut parsed = Parsed::default();
    let mut skipped = Vec::new();
    // Inline modules open around here: name, brace depth inside.
    let mut scopes: Vec<(String, usize)> = Vec::new();
    let scope = |scopes: &[(String, usize)]| scopes.iter().map(|(n, _)| n.clone()).collect();
    let mut depth = 0usize;
    let mut i = 0;
    while i < t.len() {
        if let Some((end, name, declaration)) = test_module(&t, i) {
            if declaration {
                parsed.mods.push(ModDecl {
                    scope: scope(&scopes),
                    name,
                    test: true,
                });
            }
            skipped.push(t[i].span.start..t[end - 1].span.end);
            i = end;
            continue;
        }
        let prev = |back: usize| i.checked_sub(back).map(|p| &t[p].tok);
        match &t[i].tok {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                while scopes.last().is_some_and(|(_, d)| *d > depth) {
                    scopes.pop();
                }
            }
            Tok::Ident(word) if word == "mod" => {
                if let Some(name) = ident(&t, i + 1) {
                    if is(&t, i + 2, &Tok::Punct(';')) {
                        let name = name.to_owned();
                        parsed.mods.push(ModDecl {
                            scope: scope(&scopes),
                            name,
                            test: false,
                        });
                        i += 3;
                        continue;
                    }
                    if is(&t, i + 2, &Tok::Punct('{')) {
                        depth += 1;
                        scopes.push((name.to_owned(), depth));
                        i += 3;
                        continue;
                    }
                }
            }
            Tok::Ident(word) if word == "use" && prev(1) != Some(&Tok::PathSep) => {
                let end = (i..t.len())
                    .find(|&j| is(&t, j, &Tok::Punct(';')))
                    .unwrap_or(t.len());
                let line = line_of(t[i].span.start);
                for path in expand(&use_tree(&t[i + 1..end])) {
                    // `a::{self, B}` names `a`.
                    let path = path
                        .strip_suffix("::self")
                        .map_or(path.clone(), str::to_owned);
                    parsed.paths.push(PathRef {
                        scope: scope(&scopes),
                        path,
                        line,
                    });
                }
                i = end + 1;
                continue;
            }
            // A path written inline: its first segment, not one in the
            // middle of a path, a method's turbofish or `pub(in …)`.
            Tok::Ident(first)
                if is(&t, i + 1, &Tok::PathSep)
                    && !matches!(prev(1), Some(Tok::PathSep | Tok::Punct('.')))
                    && !(prev(1) == Some(&Tok::Ident("in".into()))
                        && prev(2) == Some(&Tok::Punct('('))) =>
            {
                let mut path = first.clone();
                let mut j = i;
                while is(&t, j + 1, &Tok::PathSep) {
                    let Some(segment) = ident(&t, j + 2) else {
                        break;
                    };
                    path.push_str("::");
                    path.push_str(segment);
                    j += 2;
                }
                let line = line_of(t[i].span.start);
                parsed.paths.push(PathRef {
                    scope: scope(&scopes),
                    path,
                    line,
                });
                i = j + 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    parsed.lines = lines_outside(text, &skipped);
    parsed
}
