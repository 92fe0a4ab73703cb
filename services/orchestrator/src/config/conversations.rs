//! The `conversations` section of the config: how long conversations are
//! kept, how big they may grow, how long a message waits for the run
//! before it (see `crate::conversation`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The `conversations` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConversationConfig {
    /// How long a conversation is kept after its last use (a run's start
    /// or end); a request's `conversation_ttl` overrides it.
    #[serde(with = "baton_common::config::duration")]
    pub ttl: Duration,
    /// The longest `conversation_ttl` a request may ask for.
    #[serde(with = "baton_common::config::duration")]
    pub max_ttl: Duration,
    /// Most messages a conversation holds; a run that would begin past it
    /// is refused, or its agent's compaction folds older messages.
    pub max_messages: u32,
    /// Most bytes of text a conversation holds (the same).
    pub max_bytes: u64,
    /// How long a message waits for the conversation's running run before
    /// it is refused with `ABORTED`.
    #[serde(with = "baton_common::config::duration")]
    pub max_wait: Duration,
    /// Memory mode: most conversations kept in the process; past it the
    /// least recently used (not running) is dropped.
    pub max_kept: usize,
}

impl Default for ConversationConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(30 * 24 * 3600),
            max_ttl: Duration::from_secs(365 * 24 * 3600),
            max_messages: 1000,
            max_bytes: 1 << 20,
            max_wait: Duration::from_secs(60),
            max_kept: 10_000,
        }
    }
}

/// Why the `conversations` section is refused.
#[derive(Debug, thiserror::Error)]
#[error("conversations.{field} {message}")]
pub struct ConversationConfigError {
    field: &'static str,
    message: &'static str,
}

impl ConversationConfig {
    /// Checks the section; the first problem names its field.
    pub fn validate(&self) -> Result<(), ConversationConfigError> {
        let bad = |field, message| Err(ConversationConfigError { field, message });
        if self.ttl.is_zero() {
            return bad("ttl", "must be positive");
        }
        if self.ttl > self.max_ttl {
            return bad("ttl", "must be at most conversations.max_ttl");
        }
        if self.max_messages < 2 {
            return bad("max_messages", "must be at least 2");
        }
        if self.max_bytes == 0 {
            return bad("max_bytes", "must be positive");
        }
        if self.max_wait.is_zero() {
            return bad("max_wait", "must be positive");
        }
        if self.max_kept == 0 {
            return bad("max_kept", "must be positive");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_is_checked_and_named() {
        assert!(ConversationConfig::default().validate().is_ok());
        let cases = [
            (
                ConversationConfig {
                    ttl: Duration::ZERO,
                    ..Default::default()
                },
                "conversations.ttl",
            ),
            (
                ConversationConfig {
                    ttl: Duration::from_secs(10),
                    max_ttl: Duration::from_secs(9),
                    ..Default::default()
                },
                "conversations.ttl",
            ),
            (
                ConversationConfig {
                    max_messages: 1,
                    ..Default::default()
                },
                "conversations.max_messages",
            ),
            (
                ConversationConfig {
                    max_bytes: 0,
                    ..Default::default()
                },
                "conversations.max_bytes",
            ),
            (
                ConversationConfig {
                    max_wait: Duration::ZERO,
                    ..Default::default()
                },
                "conversations.max_wait",
            ),
            (
                ConversationConfig {
                    max_kept: 0,
                    ..Default::default()
                },
                "conversations.max_kept",
            ),
        ];
        for (config, field) in cases {
            let e = config.validate().expect_err(field).to_string();
            assert!(e.starts_with(field), "{e}");
        }
        let at = ConversationConfig {
            max_messages: 2,
            ttl: Duration::from_secs(9),
            max_ttl: Duration::from_secs(9),
            ..Default::default()
        };
        assert!(at.validate().is_ok());
    }
}
