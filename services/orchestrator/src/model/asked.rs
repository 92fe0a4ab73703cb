//! What a model was asked, in short ([`Asked`]): every model turn's
//! recording keeps it, so a replay (ReplayRun) can tell whether today's
//! request is the one recorded and, when it is not, say what differs. The
//! hashes are FNV-1a 64 over a fixed byte layout: stable across builds and
//! Rust versions, as a recording in the run store outlives the binary that
//! wrote it. JSON (a tool call's arguments, a tool's schema, the settings)
//! is hashed by its structure — type tags, object keys in sorted order,
//! numbers by value — never as serde_json prints it, so a change of its
//! formatting (key order, float printing) changes no hash.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::chat::{ChatMessage, Role, ToolDef};
use crate::catalog::settings::Settings;

/// How many of the last messages an [`Asked`] hashes one by one: enough to
/// name the message that differs (a turn adds the model's answer and a
/// tool's result since the one before).
const TAIL: usize = 2;

/// A model request in short. One is kept with every model turn of every
/// run, so it is written as one short string (see [`Asked::encode`]):
/// about 60 bytes plus the model's name, and the tools' names on an
/// agent's first turn in a context.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Asked {
    /// The model asked.
    pub m: String,
    /// The tools offered, by name, in order: on an agent's first turn in a
    /// context only (they change between turns only when a tool server
    /// lists its tools again, which `th` sees).
    pub t: Vec<String>,
    /// Hash of the tools' names, descriptions and argument schemas.
    pub th: u64,
    /// Hash of the generation settings.
    pub s: u64,
    /// How many messages.
    pub n: usize,
    /// Hash of all the messages.
    pub h: u64,
    /// Hashes of the last messages (up to two), oldest first.
    pub l: Vec<u64>,
}

/// Written as its short string, from a borrow (serde's `into` would copy
/// it first: every model turn of every run is recorded with one).
impl Serialize for Asked {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.encode())
    }
}

impl TryFrom<String> for Asked {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        Asked::decode(&s).ok_or_else(|| "not a model request's short form".to_owned())
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Base64url without padding.
fn b64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(B64[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

/// See [`b64`].
fn unb64(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.as_bytes().chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            let v = B64.iter().position(|b| b == c)? as u32;
            n |= v << (18 - 6 * i);
        }
        for i in 0..chunk.len().checked_sub(1)? {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

/// FNV-1a 64.
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        self
    }

    /// A length-prefixed string: `"ab","c"` and `"a","bc"` differ.
    fn text(&mut self, text: &str) -> &mut Self {
        self.bytes(&(text.len() as u64).to_le_bytes())
            .bytes(text.as_bytes())
    }

    /// A JSON value by its structure (see the module docs): a tag for its
    /// type, then its content; an object's members in key order; an
    /// integer as its 64 bits, any other number as its f64 bits.
    fn json(&mut self, value: &serde_json::Value) -> &mut Self {
        use serde_json::Value;
        match value {
            Value::Null => self.bytes(b"n"),
            Value::Bool(b) => self.bytes(if *b { b"t" } else { b"f" }),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    self.bytes(b"i").bytes(&i.to_le_bytes())
                } else if let Some(u) = n.as_u64() {
                    self.bytes(b"u").bytes(&u.to_le_bytes())
                } else {
                    let f = n.as_f64().unwrap_or(f64::NAN);
                    // -0.0 and 0.0 are equal values (and equal settings,
                    // which `settings_hash` caches by equality): one hash.
                    let f = if f == 0.0 { 0.0 } else { f };
                    self.bytes(b"d").bytes(&f.to_bits().to_le_bytes())
                }
            }
            Value::String(s) => self.bytes(b"s").text(s),
            Value::Array(items) => {
                self.bytes(b"a").bytes(&(items.len() as u64).to_le_bytes());
                for item in items {
                    self.json(item);
                }
                self
            }
            Value::Object(members) => {
                self.bytes(b"o")
                    .bytes(&(members.len() as u64).to_le_bytes());
                let mut keys: Vec<&String> = members.keys().collect();
                keys.sort_unstable();
                for key in keys {
                    self.text(key).json(&members[key]);
                }
                self
            }
        }
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

fn message_hash(m: &ChatMessage) -> u64 {
    let mut h = Fnv::new();
    h.text(role_name(m.role)).text(&m.content);
    h.text(m.tool_call_id.as_deref().unwrap_or(""));
    for c in &m.tool_calls {
        h.text(&c.id).text(&c.name).json(&c.arguments);
    }
    h.0
}

/// The hash of `settings` as a request carries them, made once per
/// distinct value a thread has seen lately (the last 16): every frame of a
/// pipeline's thousand steps has the same settings, and hashing them (to
/// JSON, sorted, then FNV) cost more than the step's own model call.
fn settings_hash(settings: &Settings) -> u64 {
    thread_local! {
        static HASHED: std::cell::RefCell<Vec<(Settings, u64)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    HASHED.with_borrow_mut(|hashed| {
        if let Some((_, hash)) = hashed.iter().find(|(s, _)| s == settings) {
            return *hash;
        }
        let value = serde_json::to_value(settings).unwrap_or_default();
        let hash = Fnv::new().json(&value).0;
        if hashed.len() == 16 {
            hashed.remove(0);
        }
        hashed.push((settings.clone(), hash));
        hash
    })
}

/// The hash of a conversation, kept up to date as messages are added: a
/// turn loop hashes each message once, not the whole conversation again
/// every turn; and of the tools it is offered, hashed again only when they
/// are other tools (the process shares one list per agent until a tool
/// server lists its tools again).
#[derive(Debug, Clone)]
pub struct Conversation {
    hashed: usize,
    chain: u64,
    /// The hashes of the last messages hashed (up to [`TAIL`]).
    last: Vec<u64>,
    tools: Option<(Arc<[ToolDef]>, u64)>,
    settings: Option<(Settings, u64)>,
}

impl Default for Conversation {
    fn default() -> Self {
        Self {
            hashed: 0,
            chain: Fnv::new().0,
            last: Vec::with_capacity(TAIL),
            tools: None,
            settings: None,
        }
    }
}

impl Conversation {
    /// The hash of all of `messages` (which grew since the last call, or
    /// are hashed again from the start if they did not).
    fn of(&mut self, messages: &[ChatMessage]) -> u64 {
        if messages.len() < self.hashed {
            self.hashed = 0;
            self.chain = Fnv::new().0;
            self.last.clear();
        }
        for m in &messages[self.hashed..] {
            let hash = message_hash(m);
            self.chain = Fnv(self.chain).bytes(&hash.to_le_bytes()).0;
            if self.last.len() == TAIL {
                self.last.remove(0);
            }
            self.last.push(hash);
        }
        self.hashed = messages.len();
        self.chain
    }

    /// The hash of `settings`, made again only when they change (a
    /// handoff's agent has its own).
    fn settings(&mut self, settings: &Settings) -> u64 {
        if let Some((hashed, hash)) = &self.settings
            && hashed == settings
        {
            return *hash;
        }
        let hash = settings_hash(settings);
        self.settings = Some((settings.clone(), hash));
        hash
    }

    /// The hash of `tools`' names, descriptions and schemas.
    fn tools(&mut self, tools: &Arc<[ToolDef]>) -> u64 {
        if let Some((hashed, hash)) = &self.tools
            && Arc::ptr_eq(hashed, tools)
        {
            return *hash;
        }
        let mut th = Fnv::new();
        for t in tools.iter() {
            th.text(&t.name).text(&t.description).json(&t.parameters);
        }
        self.tools = Some((tools.clone(), th.0));
        th.0
    }
}

impl Asked {
    /// `th`, `s`, `n`, `h` and `l` in base64url, `|`, the tools' names
    /// (`,`-separated), `|`, the model (last: a model's name may hold
    /// anything).
    fn encode(&self) -> String {
        let mut bytes = Vec::with_capacity(28 + 8 * self.l.len());
        for v in [self.th, self.s, self.h] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.extend_from_slice(&u32::try_from(self.n).unwrap_or(u32::MAX).to_le_bytes());
        for v in &self.l {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        format!("{}|{}|{}", b64(&bytes), self.t.join(","), self.m)
    }

    /// See [`Self::encode`].
    fn decode(text: &str) -> Option<Self> {
        let mut parts = text.splitn(3, '|');
        let bytes = unb64(parts.next()?)?;
        let tools = parts.next()?;
        let m = parts.next()?.to_owned();
        let word = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(bytes.get(i..i + 8)?.try_into().ok()?))
        };
        let n = u32::from_le_bytes(bytes.get(24..28)?.try_into().ok()?) as usize;
        let tail = bytes.len().checked_sub(28)?;
        if tail % 8 != 0 {
            return None;
        }
        Some(Self {
            m,
            t: if tools.is_empty() {
                Vec::new()
            } else {
                tools.split(',').map(str::to_owned).collect()
            },
            th: word(0)?,
            s: word(8)?,
            n,
            h: word(16)?,
            l: (0..tail / 8)
                .map(|i| word(28 + 8 * i))
                .collect::<Option<_>>()?,
        })
    }

    /// The short form of asking `model` with `messages`, `tools` and
    /// `settings`; `first`: the agent's first turn in its context (the
    /// only one that names the tools).
    pub fn of(
        model: &str,
        messages: &[ChatMessage],
        tools: &Arc<[ToolDef]>,
        settings: &Settings,
        conversation: &mut Conversation,
        first: bool,
    ) -> Self {
        let th = conversation.tools(tools);
        let s = conversation.settings(settings);
        let h = conversation.of(messages);
        Self {
            m: model.to_owned(),
            t: if first {
                tools.iter().map(|t| t.name.clone()).collect()
            } else {
                Vec::new()
            },
            th,
            s,
            n: messages.len(),
            h,
            l: conversation.last.clone(),
        }
    }

    /// What differs between `self` (recorded) and `now` (asked today, with
    /// `messages`), in short: `""` when nothing does.
    pub fn diff(&self, now: &Asked, messages: &[ChatMessage]) -> String {
        let mut parts = Vec::new();
        if self.m != now.m {
            parts.push(format!("model: {} → {}", self.m, now.m));
        }
        if self.t != now.t {
            let added: Vec<_> = now.t.iter().filter(|t| !self.t.contains(t)).collect();
            let gone: Vec<_> = self.t.iter().filter(|t| !now.t.contains(t)).collect();
            let mut tools = Vec::new();
            tools.extend(added.iter().map(|t| format!("+ {t}")));
            tools.extend(gone.iter().map(|t| format!("− {t}")));
            if tools.is_empty() {
                tools.push("reordered".into());
            }
            parts.push(format!("tools: {}", tools.join(", ")));
        } else if self.th != now.th {
            parts.push("tools: a description or schema differs".into());
        }
        if self.s != now.s {
            parts.push("settings differ".into());
        }
        if self.h != now.h {
            parts.push(self.message_diff(now, messages));
        }
        parts.join("; ")
    }

    fn message_diff(&self, now: &Asked, messages: &[ChatMessage]) -> String {
        let mut said = Vec::new();
        if self.n != now.n {
            said.push(format!("messages: {} recorded, {} now", self.n, now.n));
        }
        // The messages both hashed one by one, by index.
        let (was_from, now_from) = (
            self.n.saturating_sub(self.l.len()),
            now.n.saturating_sub(now.l.len()),
        );
        let from = was_from.max(now_from);
        let to = self.n.min(now.n);
        let differing = (from..to).find(|&i| self.l[i - was_from] != now.l[i - now_from]);
        match differing {
            Some(i) => said.push(format!(
                "message {} ({}) differs: now {}",
                i + 1,
                role_name(messages[i].role),
                excerpt(&messages[i])
            )),
            None if now.n > self.n => said.push(format!(
                "message {} ({}) is new: {}",
                self.n + 1,
                role_name(messages[self.n].role),
                excerpt(&messages[self.n])
            )),
            None if self.n == now.n => said.push("an earlier message differs".into()),
            None => {}
        }
        said.join("; ")
    }
}

/// A message in at most 80 characters.
fn excerpt(m: &ChatMessage) -> String {
    let text = if m.content.is_empty() && !m.tool_calls.is_empty() {
        let calls: Vec<_> = m
            .tool_calls
            .iter()
            .map(|c| format!("{}({})", c.name, c.arguments))
            .collect();
        format!("calls {}", calls.join(", "))
    } else {
        m.content.clone()
    };
    let mut short: String = text.chars().take(80).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    format!("{short:?}")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::ToolCallRequest;

    fn asked(messages: &[ChatMessage], tools: &[ToolDef]) -> Asked {
        Asked::of(
            "scripted:a",
            messages,
            &Arc::from(tools),
            &Settings::default(),
            &mut Conversation::default(),
            true,
        )
    }

    fn tool(name: &str) -> ToolDef {
        ToolDef {
            name: name.into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        }
    }

    fn talk() -> Vec<ChatMessage> {
        vec![
            ChatMessage::new(Role::System, "be brief"),
            ChatMessage::new(Role::User, "hi"),
        ]
    }

    /// The hashes are of the JSON's structure, not of how serde_json
    /// prints it: key order and number spelling change nothing; values,
    /// types and nesting do. Pinned: a recording outlives the build.
    #[test]
    fn json_is_hashed_by_structure_and_the_hash_is_pinned() {
        let hash = |v: serde_json::Value| Fnv::new().json(&v).0;
        let a: serde_json::Value = serde_json::from_str(
            r#"{"q": "tides", "n": 2, "f": 0.5, "deep": {"b": [1, true, null], "a": "x"}}"#,
        )
        .expect("json");
        let b: serde_json::Value = serde_json::from_str(
            r#"{"deep":{"a":"x","b":[1,true,null]},"f":5e-1,"n":2,"q":"tides"}"#,
        )
        .expect("json");
        assert_eq!(hash(a.clone()), hash(b));
        assert_eq!(hash(a), 0x1791_a118_b813_5723);
        assert_ne!(hash(json!({"n": 2})), hash(json!({"n": "2"})));
        // Equal values hash alike, as the settings' cache compares them.
        assert_eq!(hash(json!({"t": -0.0})), hash(json!({"t": 0.0})));
        let at = |t: f64| Settings {
            temperature: Some(t),
            ..Settings::default()
        };
        assert_eq!(settings_hash(&at(0.0)), settings_hash(&at(-0.0)));
        assert_ne!(hash(json!({"n": 2})), hash(json!({"n": 2.5})));
        assert_ne!(hash(json!([[1], 2])), hash(json!([1, [2]])));
        assert_ne!(hash(json!({"ab": "c"})), hash(json!({"a": "bc"})));
    }

    #[test]
    fn the_same_request_asks_the_same_and_differs_in_nothing() {
        let a = asked(&talk(), &[tool("x")]);
        let b = asked(&talk(), &[tool("x")]);
        assert_eq!(a, b);
        assert_eq!(a.diff(&b, &talk()), "");
    }

    #[test]
    fn a_conversation_hashed_as_it_grows_hashes_as_one_hashed_at_once() {
        let mut messages = talk();
        let mut growing = Conversation::default();
        growing.of(&messages[..1]);
        let mut reply = ChatMessage::new(Role::Assistant, "");
        reply.tool_calls.push(ToolCallRequest {
            id: "c1".into(),
            name: "x".into(),
            arguments: json!({"q": 1}),
        });
        messages.push(reply);
        assert_eq!(growing.of(&messages), Conversation::default().of(&messages));
        let direct: Vec<u64> = messages[1..].iter().map(message_hash).collect();
        assert_eq!(growing.last, direct, "the last two, hashed as they came");
        // Fewer messages than hashed: hashed again from the start.
        assert_eq!(
            growing.of(&messages[..2]),
            Conversation::default().of(&messages[..2])
        );
    }

    #[test]
    fn the_diff_names_what_differs() {
        let was = asked(&talk(), &[tool("x"), tool("y")]);
        let mut other = talk();
        other[0].content = "be thorough".into();
        let now = asked(&other, &[tool("x"), tool("z")]);
        assert_eq!(
            was.diff(&now, &other),
            r#"tools: + z, − y; message 1 (system) differs: now "be thorough""#
        );
        let mut longer = talk();
        longer.push(ChatMessage::new(Role::User, "x".repeat(100)));
        let now = asked(&longer, &[tool("x"), tool("y")]);
        let diff = was.diff(&now, &longer);
        assert!(
            diff.starts_with("messages: 2 recorded, 3 now; message 3 (user) is new: \"xxx"),
            "{diff}"
        );
        assert!(diff.ends_with("…\""), "{diff}");
        let other_model = Asked {
            m: "scripted:b".into(),
            ..was.clone()
        };
        assert_eq!(
            was.diff(&other_model, &talk()),
            "model: scripted:a → scripted:b"
        );
    }
}
