//! The agents file, read again when it changes (`agents_reload`): an edit
//! in a developer's editor, a Kubernetes ConfigMap update (the kubelet
//! swaps the mounted file's symlink). Every `agents_reload` the file's
//! contents are compared with what was loaded; a changed file is parsed
//! and checked — the catalog, its models and tool servers, and that every
//! agent the config exposes over A2A or MCP is still there — and only then
//! taken: runs started from then on use it, runs in flight keep the
//! catalog they started with, and the A2A cards and MCP tool lists follow
//! (`tools/list_changed`). A file that does not pass keeps the running
//! catalog and says why: a warning in the log, `baton_agents_reloads_total
//! {result="refused"}`, and `GET /v1/agents/reload` (the last reload's
//! result).

use std::{path::PathBuf, sync::Arc};

use tokio_util::sync::CancellationToken;

use crate::{
    app::{Orchestrator, ReloadState},
    catalog::Catalog,
    config::Config,
};

/// Watches `config.agents_file` every `config.agents_reload` until
/// `stop`, loading it into `core` when it changed (see the module docs;
/// provider keys read through `env`). `loaded` is the text the core's
/// catalog was loaded from.
pub async fn watch(
    core: Orchestrator,
    config: Config,
    loaded: String,
    env: fn(&str) -> Option<String>,
    stop: CancellationToken,
) {
    let every = config.agents_reload;
    if every.is_zero() || config.agents_file.as_os_str().is_empty() {
        return;
    }
    let path: PathBuf = config.agents_file.clone();
    core.set_reload_state(ReloadState {
        file: path.display().to_string(),
        ..ReloadState::default()
    });
    let mut last = loaded;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        // A file being replaced may be missing for a moment: next round.
        let Ok(text) = tokio::fs::read_to_string(&path).await else {
            continue;
        };
        if text == last {
            continue;
        }
        last.clone_from(&text);
        match check(&config, &text).and_then(|catalog| core.reload(catalog, &env)) {
            Ok(()) => {
                let catalog = core.catalog();
                tracing::info!(
                    file = %path.display(),
                    agents = catalog.agents.len(),
                    groups = catalog.groups.len(),
                    "agents file reloaded: new runs use it, runs in flight keep theirs"
                );
                core.metrics().agents_reloaded(true);
                // Its schedules: added, changed or deleted.
                tokio::spawn(crate::app::schedules::declare_from_file(core.clone()));
                core.update_reload_state(|s| {
                    s.reloads += 1;
                    s.error.clear();
                });
            }
            Err(error) => {
                tracing::warn!(file = %path.display(), %error, "agents file not reloaded; the running agents stay");
                core.metrics().agents_reloaded(false);
                core.update_reload_state(|s| {
                    s.refused += 1;
                    s.error = error.clone();
                });
            }
        }
    }
}

/// The catalog of `text`, if it is one this server can take with
/// `config`: it parses, and every agent the config exposes over A2A or MCP
/// is in it.
fn check(config: &Config, text: &str) -> Result<Arc<Catalog>, String> {
    let dir = config
        .agents_file
        .parent()
        .unwrap_or(std::path::Path::new("."));
    let catalog = Catalog::from_yaml_in(text, dir).map_err(|e| e.to_string())?;
    crate::a2a::face::exposed(&catalog, &config.a2a).map_err(|e| e.to_string())?;
    crate::mcp::face::exposed(&catalog, &config.mcp).map_err(|e| e.to_string())?;
    crate::schedule::file::declared(&catalog)?;
    Ok(Arc::new(catalog))
}
