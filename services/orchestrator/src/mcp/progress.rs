//! A run's events as the lines of MCP progress notifications: text as it
//! arrives, tool progress, sub-agents starting and ending. Each line is a
//! notification whose `progress` is a running counter (a run has no known
//! total).

use baton_proto::v1::{RunEvent, run_event::Payload};
use rmcp::{
    Peer, RoleServer,
    model::{ProgressNotificationParam, ProgressToken},
};

/// The progress line an event makes, if it makes one.
pub fn line(event: &RunEvent) -> Option<String> {
    let nested = event.depth > 0;
    match event.payload.as_ref()? {
        Payload::TextDelta(d) if d.text.is_empty() => None,
        Payload::TextDelta(d) if nested => Some(format!("{}: {}", event.agent, d.text)),
        Payload::TextDelta(d) => Some(d.text.clone()),
        Payload::ToolProgress(p) => {
            let mut line = format!("{}: {}%", p.tool, p.percent);
            if !p.message.is_empty() {
                line.push(' ');
                line.push_str(&p.message);
            }
            Some(line)
        }
        Payload::AgentStarted(a) if nested => {
            Some(format!("▶ {} started in {}", a.agent, event.context_id))
        }
        Payload::AgentCompleted(_) if nested => {
            Some(format!("■ {} done in {}", event.agent, event.context_id))
        }
        _ => None,
    }
}

/// Progress notifications of one call: to the client's progress token,
/// counting up.
pub struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    sent: u32,
}

impl Progress {
    /// Notifications on `token` (the call's), if the client sent one.
    pub fn new(peer: Peer<RoleServer>, token: Option<ProgressToken>) -> Option<Self> {
        Some(Self {
            peer,
            token: token?,
            sent: 0,
        })
    }

    /// Notifies the line `event` makes, if any. A notification that cannot
    /// be sent (the client left) is dropped: the call's end says the rest.
    pub async fn event(&mut self, event: &RunEvent) {
        if let Some(line) = line(event) {
            self.line(line).await;
        }
    }

    /// Notifies `line`.
    pub async fn line(&mut self, line: String) {
        self.sent += 1;
        let param = ProgressNotificationParam::new(self.token.clone(), f64::from(self.sent))
            .with_message(line);
        if let Err(e) = self.peer.notify_progress(param).await {
            tracing::debug!(error = %e, "mcp progress notification not sent");
        }
    }
}

#[cfg(test)]
mod tests {
    use baton_proto::v1 as pb;

    use super::*;

    fn event(depth: u32, agent: &str, payload: Payload) -> RunEvent {
        RunEvent {
            depth,
            agent: agent.into(),
            context_id: if depth == 0 {
                "root".into()
            } else {
                format!("root.{agent}.1")
            },
            payload: Some(payload),
            ..Default::default()
        }
    }

    #[test]
    fn text_tool_progress_and_sub_agents_make_short_lines_and_the_rest_none() {
        let text = |t: &str| Payload::TextDelta(pb::TextDelta { text: t.into() });
        assert_eq!(line(&event(0, "a", text("Hi"))).as_deref(), Some("Hi"));
        assert_eq!(line(&event(1, "s", text("Hi"))).as_deref(), Some("s: Hi"));
        assert_eq!(line(&event(0, "a", text(""))), None);
        let progress = Payload::ToolProgress(pb::ToolProgress {
            tool: "sleep".into(),
            percent: 50,
            message: "2/4".into(),
            ..Default::default()
        });
        assert_eq!(
            line(&event(0, "r", progress)).as_deref(),
            Some("sleep: 50% 2/4")
        );
        let started = Payload::AgentStarted(pb::AgentStarted {
            agent: "summarizer".into(),
            model: "scripted:summarizer".into(),
        });
        assert_eq!(
            line(&event(1, "summarizer", started.clone())).as_deref(),
            Some("▶ summarizer started in root.summarizer.1")
        );
        assert_eq!(line(&event(0, "summarizer", started)), None);
        let done = Payload::AgentCompleted(pb::AgentCompleted::default());
        assert_eq!(
            line(&event(1, "summarizer", done)).as_deref(),
            Some("■ summarizer done in root.summarizer.1")
        );
        let started = Payload::RunStarted(pb::RunStarted::default());
        assert_eq!(line(&event(0, "a", started)), None);
    }
}
