//! A run's tie to its conversation ([`Link`]): which conversation, what
//! the run began with, and the compaction it applies when it ends. Kept
//! with the run (its record; in Redis its hash's `cv` field), so a replica
//! that resumes the run appends exactly what the first would have.

use std::sync::Arc;

use baton_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use super::{
    Conversations, from_chat,
    store::{Finish, Key},
    transcript::Added,
};

/// A durable run's append to its conversation, in two phases (see
/// `run::durable::sequencer`): `encoded` is written with its terminal
/// event (fenced by its epoch), then `apply` appends it.
pub struct PendingEnd {
    /// The append, encoded (`store::Finish::encode`).
    pub encoded: Vec<u8>,
    /// Applies it to the conversation; whether it was applied.
    pub apply: futures::future::BoxFuture<'static, crate::error::Result<bool>>,
}

/// A run's conversation (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// The conversation.
    pub id: String,
    /// How many of its oldest messages the run's end folds away.
    #[serde(default)]
    pub fold: u32,
    /// What replaces them (`summarize`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Messages the conversation held when the run began.
    pub base_count: u32,
    /// Their bytes.
    pub base_bytes: u64,
    /// Bytes of the folded messages.
    #[serde(default)]
    pub folded_bytes: u64,
    /// The group member that answers first ("" the target's root).
    #[serde(default)]
    pub agent: String,
    /// How long the conversation is kept after the run.
    pub ttl_ms: i64,
    /// What the compaction did, for its event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacted: Option<Compacted>,
}

/// A compaction, as its `HistoryCompacted` event says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compacted {
    /// `window` or `summarize`.
    pub mode: String,
    /// The bound that triggered it.
    pub reason: String,
    /// Messages kept.
    pub kept: u32,
    /// Estimated tokens before.
    pub tokens_before: u64,
    /// Estimated tokens after.
    pub tokens_after: u64,
}

impl Link {
    /// As the run store keeps it.
    pub fn to_field(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// From the run store's field; `None` when it does not read.
    pub fn from_field(field: &str) -> Option<Self> {
        serde_json::from_str(field).ok()
    }

    /// The event of its compaction, if any.
    pub fn event(&self) -> Option<pb::HistoryCompacted> {
        let c = self.compacted.as_ref()?;
        Some(pb::HistoryCompacted {
            mode: c.mode.clone(),
            folded: self.fold,
            kept: c.kept,
            summary: self.summary.clone().unwrap_or_default(),
            reason: c.reason.clone(),
            tokens_before: c.tokens_before,
            tokens_after: c.tokens_after,
        })
    }

    /// Gives the conversation's turn back with what run `run_id` of
    /// `tenant` added (`added`), as it ended (`status`); whether it was
    /// applied (not: applied before, by this run ended once already, or
    /// the conversation was deleted).
    pub async fn finish(
        &self,
        conversations: &Arc<Conversations>,
        tenant: &str,
        run_id: &str,
        added: Added,
        status: pb::RunStatus,
    ) -> crate::error::Result<bool> {
        let (key, finish) = self.ending(tenant, run_id, added, status);
        conversations.finish(&key, &finish).await
    }

    /// What run `run_id` of `tenant` appends, ending with `status` having
    /// added `added`: the conversation and the append.
    pub fn ending(
        &self,
        tenant: &str,
        run_id: &str,
        added: Added,
        status: pb::RunStatus,
    ) -> (Key, Finish) {
        let interrupted = status != pb::RunStatus::Completed;
        let messages: Vec<pb::ConversationMessage> = added
            .messages
            .iter()
            .filter_map(|m| from_chat(m, run_id, &added.agent, interrupted))
            .collect();
        let summary = self
            .summary
            .as_deref()
            .map(|s| super::compact::summary_message(s, run_id));
        let kept = self.base_count.saturating_sub(self.fold);
        let count = kept + u32::from(summary.is_some()) + messages.len() as u32;
        let bytes = self.base_bytes.saturating_sub(self.folded_bytes)
            + summary.as_ref().map_or(0, super::store::size)
            + messages.iter().map(super::store::size).sum::<u64>();
        let finish = Finish {
            run_id: run_id.to_owned(),
            fold: self.fold,
            summary,
            run: pb::ConversationRun {
                run_id: run_id.to_owned(),
                status: status as i32,
                messages: messages.len() as u32,
                ended_at: Some(std::time::SystemTime::now().into()),
            },
            messages,
            agent: added.agent,
            count,
            bytes,
            ttl_ms: self.ttl_ms,
        };
        let key = Key {
            tenant: tenant.to_owned(),
            id: self.id.clone(),
        };
        (key, finish)
    }
}
