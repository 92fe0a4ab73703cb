//! Conversations: a tenant's messages across runs, so a follow-up message
//! continues where the last run ended.
//!
//! A conversation holds the messages of its runs in order: each run's user
//! input, the top-level agent's turns, its tool calls with their results
//! (an agent called as a tool shows as that call and its result; its own
//! turns stay in its run). A run started in a conversation begins with its
//! messages, then its input; when it ends it appends what it added — a run
//! that failed or was cancelled appends its input and the turns it
//! completed, marked `interrupted`, so the next message sees what happened.
//!
//! **One run at a time.** A run takes the conversation's *turn* before it
//! starts ([`Conversations::take_turn`]) and gives it back when it ends,
//! with what it added, in one atomic step of the store
//! ([`store::Store::finish`]): a message sent meanwhile waits (in arrival
//! order on a replica, up to `conversations.max_wait`) or is refused
//! (`ABORTED`, naming the running run). A turn is held at most the run's
//! deadline and a minute: a replica that died holding it frees it then;
//! its run, resumed elsewhere, still appends (the turn stays the run's).
//! A run whose turn was applied once applies nothing again, so a resumed
//! run that ends a second time appends nothing twice.
//!
//! The core (`app::conversations`) maps requests onto this module; each
//! face maps its own notion onto the core: an A2A `contextId`, an HTTP
//! path, the CLI's `--conversation`.
//!
//! - [`store`]: what a store does; [`memory`] and [`redis`] keep it.
//! - [`compact`]: where a long history is cut, and the summary prompt.
//! - [`transcript`]: what a running run has added so far.

pub mod compact;
pub mod link;
pub mod memory;
pub mod redis;
pub mod store;
pub mod transcript;

use std::{collections::HashMap, sync::Arc, time::Duration};

use baton_proto::v1 as pb;
use futures::future::BoxFuture;

use crate::{
    config::conversations::ConversationConfig,
    error::{Error, Result},
    model::{ChatMessage, Role, ToolCallRequest},
};
use store::{Begin, Begun, Finish, Key, Meta, Store};

/// Whether a run waits for the conversation's running run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Busy {
    /// Wait, up to `conversations.max_wait`.
    #[default]
    Wait,
    /// Refuse at once.
    Refuse,
}

/// The conversations of this server, and the waits for their turns.
pub struct Conversations {
    /// Where they are kept.
    pub store: Arc<dyn Store>,
    /// Their bounds.
    pub config: ConversationConfig,
    /// Per conversation, the runs waiting on this replica, in order.
    queues: std::sync::Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
    /// Wakes the waiters when a turn is given back here.
    given_back: tokio::sync::Notify,
}

/// What became of a run holding a conversation's turn.
#[derive(Debug, Clone)]
pub enum Holder {
    /// It runs (here, on another replica, or parked).
    Running,
    /// It ended; with the append its record keeps, when its replica
    /// stopped before applying it (see `run::durable::sequencer`).
    Ended(Option<Box<(Key, store::Finish)>>),
    /// Nobody knows it (not registered yet, or long gone).
    Unknown,
}

/// A turn taken: the conversation and its messages.
pub struct Taken {
    /// The conversation.
    pub meta: Meta,
    /// Its messages, oldest first.
    pub messages: Vec<pb::ConversationMessage>,
    /// It was made for this run.
    pub created: bool,
}

impl Conversations {
    /// Conversations in `store`, bounded by `config`.
    pub fn new(store: Arc<dyn Store>, config: ConversationConfig) -> Self {
        Self {
            store,
            config,
            queues: std::sync::Mutex::default(),
            given_back: tokio::sync::Notify::new(),
        }
    }

    /// Takes `key`'s turn for `begin.run_id`: at once, or after the run
    /// holding it ends (`busy`). `holder` says what became of a run holding
    /// the turn: one that ended without giving it back (its replica was
    /// stopped) frees it; one still running (parked, resumed elsewhere)
    /// keeps it, whatever its hold says; one nobody knows frees it once
    /// its hold lapsed.
    pub async fn take_turn(
        &self,
        key: &Key,
        begin: &Begin,
        busy: Busy,
        holder: &(dyn Fn(String) -> BoxFuture<'static, Holder> + Send + Sync),
    ) -> Result<Taken> {
        let queue = {
            let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            queues.retain(|_, q| Arc::strong_count(q) > 1);
            queues.entry(key.clone()).or_default().clone()
        };
        let deadline = tokio::time::Instant::now() + self.config.max_wait;
        let busy_error = |running: &str| Error::Busy {
            field: "conversation_id",
            message: format!(
                "conversation {:?} has a run going ({running}); send again when it ends{}",
                key.id,
                match busy {
                    Busy::Refuse => String::new(),
                    Busy::Wait => format!(
                        ", or after conversations.max_wait ({:?})",
                        self.config.max_wait
                    ),
                }
            ),
        };
        // First in line on this replica first; a sender that would rather
        // be refused does not queue behind one that waits.
        let place = match busy {
            Busy::Refuse => queue.try_lock().ok(),
            Busy::Wait => tokio::time::timeout_at(deadline, queue.lock()).await.ok(),
        };
        let Some(_place) = place else {
            return Err(busy_error("another message waits before this one"));
        };
        let mut poll = Duration::from_millis(20);
        loop {
            let given_back = self.given_back.notified();
            match self.store.begin(key, begin).await? {
                Begun::Taken {
                    meta,
                    messages,
                    created,
                } => {
                    return Ok(Taken {
                        meta: *meta,
                        messages,
                        created,
                    });
                }
                Begun::NotFound => return Err(not_found(&key.id)),
                Begun::Exists => {
                    return Err(Error::AlreadyExists {
                        field: "conversation_id",
                        message: format!("conversation {:?} exists already", key.id),
                    });
                }
                Begun::Busy { running, lapsed } => {
                    let free = match holder(running.clone()).await {
                        Holder::Ended(end) => {
                            // Applied only while the turn is still its own.
                            if let Some(end) = end
                                && end.0 == *key
                            {
                                self.store.finish(key, &end.1).await?;
                            }
                            true
                        }
                        Holder::Unknown => lapsed,
                        Holder::Running => false,
                    };
                    if free {
                        self.store.release(key, &running).await?;
                        continue;
                    }
                    if busy == Busy::Refuse || tokio::time::Instant::now() >= deadline {
                        return Err(busy_error(&running));
                    }
                    // Given back here: at once; elsewhere: the next poll.
                    let _ = tokio::time::timeout_at(
                        deadline.min(tokio::time::Instant::now() + poll),
                        given_back,
                    )
                    .await;
                    poll = (poll * 2).min(Duration::from_millis(250));
                }
            }
        }
    }

    /// Gives a run's turn back with what it added (see [`Store::finish`]).
    pub async fn finish(&self, key: &Key, finish: &Finish) -> Result<bool> {
        let applied = self.store.finish(key, finish).await;
        self.given_back.notify_waiters();
        applied
    }

    /// Gives back the turn of a run that did not start; a conversation
    /// made for it (`created`) is deleted: a refused request changes
    /// nothing.
    pub async fn release(&self, key: &Key, run_id: &str, created: bool) {
        let released = if created {
            self.store.discard(key, run_id).await
        } else {
            self.store.release(key, run_id).await
        };
        if let Err(e) = released {
            tracing::warn!(conversation = %key.id, run_id, error = %e, "a conversation's turn was not given back; it frees itself when its hold lapses");
        }
        self.given_back.notify_waiters();
    }
}

/// A conversation's turn a run took and has not started with yet: given
/// back — its conversation discarded, when made for the run — when dropped
/// before [`Turn::keep`] (the request that took it was cancelled or its
/// caller left while the run entered or registered).
pub struct Turn {
    conversations: Arc<Conversations>,
    key: Key,
    run_id: String,
    created: bool,
    armed: bool,
}

impl Turn {
    /// The turn of `key` that run `run_id` took (`created`: the
    /// conversation was made for it).
    pub fn new(conversations: Arc<Conversations>, key: Key, run_id: &str, created: bool) -> Self {
        Self {
            conversations,
            key,
            run_id: run_id.to_owned(),
            created,
            armed: true,
        }
    }

    /// The conversation.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Whether taking the turn made the conversation.
    pub fn created(&self) -> bool {
        self.created
    }

    /// The run started: the turn is its own until it ends.
    pub fn keep(mut self) {
        self.armed = false;
    }

    /// Holds the turn `hold_ms` from now, while it is still the run's;
    /// whether it was (not: the conversation was deleted meanwhile).
    pub async fn hold(&self, hold_ms: i64) -> Result<bool> {
        self.conversations
            .store
            .hold(&self.key, &self.run_id, hold_ms)
            .await
    }

    /// The run does not start: the turn is given back now.
    pub async fn give_back(mut self) {
        self.armed = false;
        self.conversations
            .release(&self.key, &self.run_id, self.created)
            .await;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.armed
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let (conversations, key, run_id) = (
                self.conversations.clone(),
                self.key.clone(),
                self.run_id.clone(),
            );
            let created = self.created;
            handle.spawn(async move { conversations.release(&key, &run_id, created).await });
        }
    }
}

/// `NOT_FOUND` for conversation `id`.
pub fn not_found(id: &str) -> Error {
    Error::NotFound {
        field: "conversation_id",
        message: format!("no conversation {id:?}"),
    }
}

/// Checks a conversation id: `[A-Za-z0-9._:-]{1,128}`.
pub fn check_id(field: &'static str, id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("{id:?} is not a conversation id ([A-Za-z0-9._:-]{{1,128}})"),
        ))
    }
}

/// A stored message as the model reads it.
pub fn to_chat(m: &pb::ConversationMessage) -> Option<ChatMessage> {
    let msg = m.message.as_ref()?;
    let role = match pb::Role::try_from(msg.role).ok()? {
        pb::Role::User => Role::User,
        pb::Role::Assistant => Role::Assistant,
        pb::Role::Tool => Role::Tool,
        // Instructions are the agent's, never kept.
        _ => return None,
    };
    Some(ChatMessage {
        role,
        content: msg.content.clone(),
        tool_calls: msg
            .tool_calls
            .iter()
            .map(|c| ToolCallRequest {
                id: c.call_id.clone(),
                name: c.tool.clone(),
                arguments: serde_json::from_str(&c.arguments_json)
                    .unwrap_or(serde_json::Value::Null),
            })
            .collect(),
        tool_call_id: (!msg.tool_call_id.is_empty()).then(|| msg.tool_call_id.clone()),
    })
}

/// A run's message as the conversation keeps it.
pub fn from_chat(
    m: &ChatMessage,
    run_id: &str,
    agent: &str,
    interrupted: bool,
) -> Option<pb::ConversationMessage> {
    let role = match m.role {
        Role::User => pb::Role::User,
        Role::Assistant => pb::Role::Assistant,
        Role::Tool => pb::Role::Tool,
        Role::System => return None,
    };
    Some(pb::ConversationMessage {
        message: Some(pb::Message {
            role: role as i32,
            content: m.content.clone(),
            tool_calls: m
                .tool_calls
                .iter()
                .map(|c| pb::ToolCall {
                    call_id: c.id.clone(),
                    tool: c.name.clone(),
                    arguments_json: c.arguments.to_string(),
                })
                .collect(),
            tool_call_id: m.tool_call_id.clone().unwrap_or_default(),
        }),
        run_id: run_id.to_owned(),
        agent: if role == pb::Role::Assistant {
            agent.to_owned()
        } else {
            String::new()
        },
        interrupted,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests;
