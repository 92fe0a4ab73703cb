//! What a conversation store does ([`Store`]), in memory
//! ([`super::memory`]) or in Redis ([`super::redis`]), and the values it
//! takes and gives.

use std::collections::BTreeMap;

use baton_proto::v1 as pb;

use crate::error::Result;

/// A conversation's name: its tenant and id (ids are per tenant).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The tenant.
    pub tenant: String,
    /// The id.
    pub id: String,
}

/// Whether a run's turn may start the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// It must exist (`NOT_FOUND` otherwise).
    Existing,
    /// It must not exist yet (`ALREADY_EXISTS` otherwise).
    New,
    /// Either (the A2A face: a client names its context ids).
    Either,
}

/// A run asking for a conversation's turn.
#[derive(Debug, Clone)]
pub struct Begin {
    /// The run.
    pub run_id: String,
    /// Whether it may start the conversation.
    pub open: Open,
    /// How long the turn is held at most (the run's deadline and some):
    /// a turn never given back frees itself then.
    pub hold_ms: i64,
    /// How long the conversation is kept after this use.
    pub ttl_ms: i64,
    /// A new conversation's first messages (a branch's: its origin's).
    pub base: Vec<pb::ConversationMessage>,
    /// A new branch's origin conversation.
    pub branched_from: String,
}

/// What asking for the turn gave.
#[derive(Debug, Clone)]
pub enum Begun {
    /// The turn is the run's: the conversation and its messages.
    Taken {
        /// The conversation.
        meta: Box<Meta>,
        /// Its messages, oldest first.
        messages: Vec<pb::ConversationMessage>,
        /// It was made by this call (a run refused before it starts
        /// deletes it again).
        created: bool,
    },
    /// Another run has it.
    Busy {
        /// That run.
        running: String,
        /// Its hold lapsed: it may be taken from a run nobody runs.
        lapsed: bool,
    },
    /// No such conversation (`Open::Existing`).
    NotFound,
    /// It exists (`Open::New`).
    Exists,
}

/// A run giving its turn back with what it added.
#[derive(Debug, Clone)]
pub struct Finish {
    /// The run.
    pub run_id: String,
    /// How many of the oldest messages compaction folded away.
    pub fold: u32,
    /// What replaces them (compaction `summarize`).
    pub summary: Option<pb::ConversationMessage>,
    /// The run's messages.
    pub messages: Vec<pb::ConversationMessage>,
    /// The agent that answered last.
    pub agent: String,
    /// The run's entry in the conversation's runs.
    pub run: pb::ConversationRun,
    /// The conversation's message count once this is applied.
    pub count: u32,
    /// Its bytes once this is applied.
    pub bytes: u64,
    /// How long it is kept after this use.
    pub ttl_ms: i64,
}

/// A run's append to its conversation as a durable run's record keeps it
/// until it is applied (see `run::durable::sequencer`): the conversation
/// and the [`Finish`], encoded.
#[derive(Clone, PartialEq, prost::Message)]
struct StoredEnd {
    #[prost(string, tag = "1")]
    tenant: String,
    #[prost(string, tag = "2")]
    id: String,
    #[prost(string, tag = "3")]
    run_id: String,
    #[prost(uint32, tag = "4")]
    fold: u32,
    #[prost(message, optional, tag = "5")]
    summary: Option<pb::ConversationMessage>,
    #[prost(message, repeated, tag = "6")]
    messages: Vec<pb::ConversationMessage>,
    #[prost(string, tag = "7")]
    agent: String,
    #[prost(message, optional, tag = "8")]
    run: Option<pb::ConversationRun>,
    #[prost(uint32, tag = "9")]
    count: u32,
    #[prost(uint64, tag = "10")]
    bytes: u64,
    #[prost(int64, tag = "11")]
    ttl_ms: i64,
}

impl Finish {
    /// `self` for conversation `key`, encoded to be kept with the run.
    pub fn encode(&self, key: &Key) -> Vec<u8> {
        prost::Message::encode_to_vec(&StoredEnd {
            tenant: key.tenant.clone(),
            id: key.id.clone(),
            run_id: self.run_id.clone(),
            fold: self.fold,
            summary: self.summary.clone(),
            messages: self.messages.clone(),
            agent: self.agent.clone(),
            run: Some(self.run.clone()),
            count: self.count,
            bytes: self.bytes,
            ttl_ms: self.ttl_ms,
        })
    }

    /// What [`Finish::encode`] made (`None`: not readable).
    pub fn decode(bytes: &[u8]) -> Option<(Key, Self)> {
        let s: StoredEnd = prost::Message::decode(bytes).ok()?;
        Some((
            Key {
                tenant: s.tenant,
                id: s.id,
            },
            Finish {
                run_id: s.run_id,
                fold: s.fold,
                summary: s.summary,
                messages: s.messages,
                agent: s.agent,
                run: s.run.unwrap_or_default(),
                count: s.count,
                bytes: s.bytes,
                ttl_ms: s.ttl_ms,
            },
        ))
    }
}

/// A conversation's own fields (no messages).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Meta {
    /// Its id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// When it started (ms since the epoch).
    pub created_ms: i64,
    /// When it was last used.
    pub updated_ms: i64,
    /// How long it is kept after its last use.
    pub ttl_ms: i64,
    /// Messages held.
    pub count: u32,
    /// Their bytes.
    pub bytes: u64,
    /// The run holding its turn ("" when none).
    pub running: String,
    /// The agent that answered last.
    pub agent: String,
    /// The conversation it branched from.
    pub branched_from: String,
    /// Messages folded away so far.
    pub folded: u32,
    /// Its first run's first message, cut (see [`preview_of`]).
    pub preview: String,
}

impl Meta {
    /// As the API says it (without messages and runs).
    pub fn to_pb(&self) -> pb::Conversation {
        let ts = |ms: i64| {
            Some(
                (std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64)).into(),
            )
        };
        pb::Conversation {
            id: self.id.clone(),
            title: self.title.clone(),
            labels: self.labels.clone().into_iter().collect(),
            created_at: ts(self.created_ms),
            updated_at: ts(self.updated_ms),
            expires_at: ts(self.updated_ms + self.ttl_ms),
            message_count: self.count,
            bytes: self.bytes,
            running_run_id: self.running.clone(),
            agent: self.agent.clone(),
            branched_from: self.branched_from.clone(),
            folded: self.folded,
            preview: self.preview.clone(),
            ..Default::default()
        }
    }
}

/// Most characters of a conversation's preview.
pub const PREVIEW_CHARS: usize = 120;

/// The preview `finish` gives a conversation that has none: its first user
/// message, cut at [`PREVIEW_CHARS`] characters (with `…`).
pub fn preview_of(finish: &Finish) -> String {
    let first = finish
        .messages
        .iter()
        .filter_map(|m| m.message.as_ref())
        .find(|m| m.role == pb::Role::User as i32)
        .map_or("", |m| m.content.as_str());
    let line = first.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(PREVIEW_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

/// A page of a conversation.
#[derive(Debug, Clone)]
pub struct Page {
    /// The conversation.
    pub meta: Meta,
    /// Messages `from..from + n`.
    pub messages: Vec<pb::ConversationMessage>,
    /// Its runs, oldest first.
    pub runs: Vec<pb::ConversationRun>,
}

/// Where conversations are kept (see the module docs of
/// `crate::conversation`). Every operation is atomic on one conversation.
#[async_trait::async_trait]
pub trait Store: Send + Sync {
    /// Gives `begin.run_id` the conversation's turn (see [`Begun`]).
    async fn begin(&self, key: &Key, begin: &Begin) -> Result<Begun>;
    /// Applies a run's messages and gives its turn back; `false` (nothing
    /// applied) when the turn is not the run's (applied before, or the
    /// conversation was deleted).
    async fn finish(&self, key: &Key, finish: &Finish) -> Result<bool>;
    /// Gives a run's turn back without appending (it never started).
    async fn release(&self, key: &Key, run_id: &str) -> Result<()>;
    /// Holds the turn of run `run_id` for `hold_ms` from now, while it is
    /// the run's; `false` only when the conversation is gone (deleted): a
    /// run that ended before this (an instant one) gave the turn back
    /// already, and that is `true`.
    async fn hold(&self, key: &Key, run_id: &str, hold_ms: i64) -> Result<bool>;
    /// The ids of `tenant`'s conversations branched from `id` (forks of
    /// its runs).
    async fn branches(&self, tenant: &str, id: &str) -> Result<Vec<String>>;
    /// The conversation, `n` of its messages from `from`, its runs.
    async fn page(&self, key: &Key, from: u32, n: u32) -> Result<Option<Page>>;
    /// A tenant's conversations, most recently used first, after `after`
    /// (`(updated_ms, id)` of the last of the previous page).
    async fn list(&self, tenant: &str, after: Option<(i64, String)>, n: usize)
    -> Result<Vec<Meta>>;
    /// Sets the title (when given) and labels (an empty value removes).
    async fn update(
        &self,
        key: &Key,
        title: Option<String>,
        labels: &BTreeMap<String, String>,
    ) -> Result<Option<Meta>>;
    /// Deletes it; the ids of its runs, `None` when there was none.
    async fn delete(&self, key: &Key) -> Result<Option<Vec<String>>>;
    /// Deletes a conversation made for run `run_id` that did not start,
    /// only while the turn is still that run's (it was not deleted and made
    /// again for another meanwhile).
    async fn discard(&self, key: &Key, run_id: &str) -> Result<()>;
}

/// The text bytes of a message (its content and its calls' arguments).
pub fn size(m: &pb::ConversationMessage) -> u64 {
    m.message.as_ref().map_or(0, |m| {
        m.content.len() as u64
            + m.tool_calls
                .iter()
                .map(|c| (c.tool.len() + c.arguments_json.len()) as u64)
                .sum::<u64>()
    })
}

/// Now, in ms since the Unix epoch (this process's clock).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
