//! A tool call's sink: its events go into the run's stream in the calling
//! agent's context, and the questions it asks while it runs (an MCP
//! server's elicitation) are the call's questions, asked through
//! [`people::input_as`] like the input a tool asks for when it ends.

use std::sync::{
    Arc,
    atomic::{AtomicU32, Ordering},
};

use baton_proto::v1::run_event::Payload;

use super::{frame::FrameView, people};
use crate::{
    model::ToolCallRequest,
    run::state::Run,
    tools::{Question, ToolEvents},
};

/// Where a tool call's events and questions go.
pub(super) struct CallSink<'a> {
    pub(super) rt: &'a Arc<Run>,
    pub(super) view: &'a FrameView,
    pub(super) call: &'a ToolCallRequest,
    /// The call's questions so far: the `n` of `input:{call id}:{n}`.
    asked: AtomicU32,
}

impl<'a> CallSink<'a> {
    pub(super) fn new(rt: &'a Arc<Run>, view: &'a FrameView, call: &'a ToolCallRequest) -> Self {
        Self {
            rt,
            view,
            call,
            asked: AtomicU32::new(0),
        }
    }

    /// The number of the call's next question. Questions are numbered in
    /// the order they are asked, so a resumed run, calling the tool again,
    /// finds each answer it had received under the same id (and does not
    /// ask again).
    pub(super) fn next_question(&self) -> u32 {
        self.asked.fetch_add(1, Ordering::SeqCst) + 1
    }
}

#[async_trait::async_trait]
impl ToolEvents for CallSink<'_> {
    async fn emit(&self, payload: Payload) {
        self.rt
            .emit(&self.view.ctx, &self.view.agent_name, payload)
            .await;
    }

    async fn ask(&self, question: Question) -> Result<String, String> {
        let input_id = format!("input:{}:{}", self.call.id, self.next_question());
        people::input_as(
            self.rt,
            self.view,
            self.call,
            input_id,
            question.prompt,
            question.options,
            question.schema_json,
        )
        .await
    }
}
