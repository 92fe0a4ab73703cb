//! An agent's `conversation` section: how a long conversation is
//! compacted before the agent answers its next message (see
//! `crate::conversation::compact`).
//!
//! ```yaml
//! agents:
//!   assistant:
//!     conversation:
//!       compaction: summarize     # keep (default) | window | summarize
//!       max_messages: 40          # fold once the history holds more
//!       max_tokens: 6000          # ... or is estimated at more tokens
//!       keep_messages: 10         # the newest messages kept as they are
//!       summary_model: openai:gpt-4o-mini
//! ```

use serde::Deserialize;

use super::error::CatalogError;

/// What an agent does with a conversation past its bounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compaction {
    /// Nothing: a conversation past the server's bounds is refused with an
    /// error naming the bound.
    #[default]
    Keep,
    /// The oldest messages are dropped, down to `keep_messages`.
    Window,
    /// The oldest messages are replaced by a summary `summary_model`
    /// writes, down to `keep_messages` (and the summary).
    Summarize,
}

/// An agent's `conversation` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConversationSpec {
    /// What it does past the bounds.
    pub compaction: Compaction,
    /// Fold once the history holds more messages than this (at most the
    /// server's `conversations.max_messages`, which applies anyway).
    pub max_messages: Option<u32>,
    /// Fold once the history is estimated at more tokens than this.
    pub max_tokens: Option<u64>,
    /// The newest messages kept as they are (default: half of
    /// `max_messages`, or 10). The cut is moved to the next user message,
    /// so a tool call is never kept without its result.
    pub keep_messages: Option<u32>,
    /// The model that writes summaries (`summarize`), `provider:model`.
    pub summary_model: String,
}

impl ConversationSpec {
    /// The newest messages kept.
    pub fn keep(&self) -> usize {
        self.keep_messages
            .or(self.max_messages.map(|m| (m / 2).max(1)))
            .unwrap_or(10) as usize
    }

    /// Checks the section of agent `agent`; `known` says whether a model
    /// reference names a configured model.
    pub fn validate(
        &self,
        agent: &str,
        known: &dyn Fn(&str) -> Result<(), String>,
    ) -> Result<(), CatalogError> {
        let field = |f: &str| format!("agents.{agent}.conversation.{f}");
        let bad = |f: &str, m: String| Err(CatalogError::Budget(format!("{}: {m}", field(f))));
        if self.max_messages == Some(0) {
            return bad("max_messages", "must be at least 1".into());
        }
        if self.max_tokens == Some(0) {
            return bad("max_tokens", "must be at least 1".into());
        }
        if self.keep_messages == Some(0) {
            return bad("keep_messages", "must be at least 1".into());
        }
        if let (Some(keep), Some(max)) = (self.keep_messages, self.max_messages)
            && keep > max
        {
            return bad(
                "keep_messages",
                format!("({keep}) must be at most max_messages ({max})"),
            );
        }
        match self.compaction {
            Compaction::Summarize if self.summary_model.is_empty() => bad(
                "summary_model",
                "compaction summarize needs a model to write summaries".into(),
            ),
            Compaction::Summarize => known(&self.summary_model)
                .map_err(|e| CatalogError::Budget(format!("{}: {e}", field("summary_model")))),
            _ if !self.summary_model.is_empty() => bad(
                "summary_model",
                "is only read with compaction summarize".into(),
            ),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(r: &str) -> Result<(), String> {
        if r == "a:x" {
            Ok(())
        } else {
            Err(format!("{r:?}: unknown provider"))
        }
    }

    #[test]
    fn each_field_is_checked_and_named() {
        let ok = ConversationSpec {
            compaction: Compaction::Summarize,
            max_messages: Some(4),
            keep_messages: Some(4),
            summary_model: "a:x".into(),
            ..Default::default()
        };
        assert!(ok.validate("a", &known).is_ok());
        let cases = [
            (
                ConversationSpec {
                    summary_model: "nope:y".into(),
                    ..ok.clone()
                },
                "agents.a.conversation.summary_model: \"nope:y\": unknown provider",
            ),
            (
                ConversationSpec {
                    summary_model: String::new(),
                    ..ok.clone()
                },
                "agents.a.conversation.summary_model: compaction summarize needs",
            ),
            (
                ConversationSpec {
                    keep_messages: Some(5),
                    ..ok.clone()
                },
                "agents.a.conversation.keep_messages: (5) must be at most max_messages (4)",
            ),
            (
                ConversationSpec {
                    max_messages: Some(0),
                    ..ok.clone()
                },
                "agents.a.conversation.max_messages",
            ),
            (
                ConversationSpec {
                    max_tokens: Some(0),
                    ..ok.clone()
                },
                "agents.a.conversation.max_tokens",
            ),
            (
                ConversationSpec {
                    compaction: Compaction::Window,
                    ..ok.clone()
                },
                "agents.a.conversation.summary_model: is only read",
            ),
        ];
        for (spec, says) in cases {
            let e = spec.validate("a", &known).expect_err(says).to_string();
            assert!(e.starts_with(says), "{e}");
        }
        assert_eq!(ok.keep(), 4);
        assert_eq!(ConversationSpec::default().keep(), 10);
        let half = ConversationSpec {
            max_messages: Some(9),
            ..Default::default()
        };
        assert_eq!(half.keep(), 4);
    }
}
