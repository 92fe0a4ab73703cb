//! What a run in a conversation adds to it, kept as the run goes: the root
//! frame writes its messages here after each turn, so a run that fails or
//! is cancelled halfway still appends what it completed.

use std::sync::Mutex;

use crate::model::ChatMessage;

/// What the root frame of a run in a conversation added, so far.
#[derive(Debug, Default)]
pub struct Transcript {
    inner: Mutex<Added>,
}

/// The messages a run added, the agent that answered last, and whether
/// the run's answer is among them.
#[derive(Debug, Default, Clone)]
pub struct Added {
    /// The user's input, then the turns and tool results.
    pub messages: Vec<ChatMessage>,
    /// The agent active at the last turn (a group's member).
    pub agent: String,
    /// The final answer was given.
    pub answered: bool,
}

impl Transcript {
    /// A transcript of a run on `input` by `agent`.
    pub fn new(input: Option<ChatMessage>, agent: &str) -> Self {
        Self {
            inner: Mutex::new(Added {
                messages: input.into_iter().collect(),
                agent: agent.to_owned(),
                answered: false,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Added> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The frame's messages from the run's input on, after a turn.
    pub fn sync(&self, messages: &[ChatMessage], agent: &str) {
        let mut added = self.lock();
        added.messages = messages.to_vec();
        agent.clone_into(&mut added.agent);
    }

    /// The final answer, by `agent`.
    pub fn answered(&self, messages: &[ChatMessage], text: &str, agent: &str) {
        let mut added = self.lock();
        added.messages = messages.to_vec();
        added.messages.push(ChatMessage::new(
            crate::model::Role::Assistant,
            text.to_owned(),
        ));
        agent.clone_into(&mut added.agent);
        added.answered = true;
    }

    /// The run ended with `output` without a final turn of its root frame
    /// (a tool's output under a `final` policy, at any depth): that is its
    /// answer.
    pub fn ended_with(&self, output: &str) {
        let mut added = self.lock();
        if !added.answered {
            added.messages.push(ChatMessage::new(
                crate::model::Role::Assistant,
                output.to_owned(),
            ));
            added.answered = true;
        }
    }

    /// What was added.
    pub fn added(&self) -> Added {
        self.lock().clone()
    }
}
