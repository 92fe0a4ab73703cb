//! Shell completion, dynamic: the script `baton completion SHELL` prints
//! asks the binary for candidates (`COMPLETE=bash baton -- baton run res`,
//! clap_complete's protocol), so `baton run res<TAB>` offers the agents and
//! groups the orchestrator at `--endpoint` / `BATON_ENDPOINT` serves (the
//! completer of `run`'s agent is `run::agent_names`).

use clap_complete::env::Shells;

/// The environment variable the registration script sets to ask for
/// candidates.
pub(crate) const VAR: &str = "COMPLETE";

/// Answers a completion request and exits, if this run is one.
pub(crate) fn answer_if_asked(command: fn() -> clap::Command) {
    clap_complete::CompleteEnv::with_factory(command)
        .var(VAR)
        .complete();
}

/// Prints the registration script of `shell`.
pub(crate) fn registration(shell: clap_complete::Shell) -> anyhow::Result<()> {
    use std::io::Write as _;
    let name = shell.to_string();
    let shells = Shells::builtins();
    let completer = shells
        .completer(&name)
        .ok_or_else(|| anyhow::anyhow!("no dynamic completion for {name}"))?;
    // The binary as it was invoked (`baton` from PATH, or its path made
    // absolute), as clap_complete's own registration does.
    let mut exe = std::path::PathBuf::from(std::env::args_os().next().unwrap_or_default());
    if exe.components().count() > 1
        && let Ok(dir) = std::env::current_dir()
    {
        exe = dir.join(exe);
    }
    let mut script = Vec::new();
    completer.write_registration(VAR, "baton", "baton", &exe.to_string_lossy(), &mut script)?;
    std::io::stdout().lock().write_all(&script)?;
    Ok(())
}
