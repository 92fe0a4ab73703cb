//! What a command that starts a run detached (`baton run`, `baton
//! pipeline`, `baton runs fork`, `baton runs replay` with `--detach`)
//! prints.

/// The ids of a run just started detached: its first event names it.
pub async fn started(events: &mut baton_client::Events) -> anyhow::Result<(String, String)> {
    use futures::StreamExt as _;
    let first = events
        .next()
        .await
        .ok_or_else(|| anyhow::anyhow!("the stream ended before the run started"))??;
    Ok((first.run_id, first.trace_id))
}

/// What a command that started a run detached prints: `--json`, its ids;
/// into a pipe (`RID=$(baton … --detach)`), the id alone; at a terminal,
/// `sentence`, wrapped.
pub fn detached(
    json: bool,
    value: &serde_json::Value,
    run_id: &str,
    sentence: &str,
) -> anyhow::Result<()> {
    use std::io::IsTerminal as _;
    if json {
        crate::out::outln!("{value}")?;
    } else if !std::io::stdout().is_terminal() {
        crate::out::outln!("{run_id}")?;
    } else {
        crate::out::outln!(
            "{}",
            crate::text::wrap_whole(sentence, crate::text::terminal_columns())
        )?;
    }
    Ok(())
}
