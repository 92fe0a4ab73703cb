//! How a replay (`baton runs replay`) reads in the terminal: the line that
//! names the run replayed, where it diverged, and how many calls matched.

use baton_client::pb::{self, run_event::Payload};

/// The last 8 characters of a run id, as the console shows it.
fn last8(id: &str) -> &str {
    id.get(id.len().saturating_sub(8)..).unwrap_or(id)
}

/// The line a replay's event adds to the tree: under its `RunStarted`, the
/// run it replays; after its terminal event, how many calls matched.
pub fn line(e: &pb::RunEvent) -> Option<String> {
    let stats = match &e.payload {
        Some(Payload::RunStarted(s)) if !s.replay_of.is_empty() => {
            return Some(format!(
                "── a{} replay of run …{} against today's agents ──",
                if s.strict { " strict" } else { "" },
                last8(&s.replay_of)
            ));
        }
        Some(Payload::RunCompleted(c)) => c.replay.as_ref(),
        Some(Payload::RunFailed(f)) => f.replay.as_ref(),
        Some(Payload::RunCancelled(c)) => c.replay.as_ref(),
        _ => None,
    }?;
    Some(format!(
        "── {} of {} calls matched the recording of run …{}{} ──",
        stats.matched_calls,
        stats.calls,
        last8(&stats.run_id),
        if stats.diverged { "; it diverged" } else { "" }
    ))
}

/// Where a replay diverged and what follows: `diverged at model turn 2
/// (live from here)`.
pub fn diverged(d: &pb::Diverged) -> String {
    let at = match d.point.as_str() {
        "model_turn" => format!("model turn {}", d.turn),
        point => format!("{} {}", point.replace('_', " "), d.call_id),
    };
    let then = if d.strict {
        "the strict replay ends here"
    } else {
        "live from here"
    };
    format!("diverged at {at} ({then})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_names_its_run_and_says_how_its_calls_went() {
        let started = pb::RunEvent {
            payload: Some(Payload::RunStarted(pb::RunStarted {
                replay_of: "01a21df5-501b-714c-a532-4af7105ffa66".into(),
                strict: true,
                ..Default::default()
            })),
            ..Default::default()
        };
        assert_eq!(
            line(&started).as_deref(),
            Some("── a strict replay of run …105ffa66 against today's agents ──")
        );
        let failed = pb::RunEvent {
            payload: Some(Payload::RunFailed(pb::RunFailed {
                replay: Some(pb::ReplayStats {
                    run_id: "01a21df5-501b-714c-a532-4af7105ffa66".into(),
                    matched_calls: 2,
                    calls: 3,
                    diverged: true,
                }),
                ..Default::default()
            })),
            ..Default::default()
        };
        assert_eq!(
            line(&failed).as_deref(),
            Some("── 2 of 3 calls matched the recording of run …105ffa66; it diverged ──")
        );
        let plain = pb::RunEvent {
            payload: Some(Payload::RunCompleted(Default::default())),
            ..Default::default()
        };
        assert_eq!(line(&plain), None);
        let d = pb::Diverged {
            point: "tool_call".into(),
            call_id: "root/1/1".into(),
            ..Default::default()
        };
        assert_eq!(
            diverged(&d),
            "diverged at tool call root/1/1 (live from here)"
        );
    }
}
