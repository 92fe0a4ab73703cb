//! Run ids as people type them: a whole id, or — like git's short hashes —
//! a unique start or end of one of the caller's runs. The end is the part
//! that tells runs apart: a run id is a UUIDv7, whose start is its time
//! (alike for every run started in the same minute) and whose end is
//! random; the console and `baton runs list` show it (`…9f3a6c21`).

use baton_client::{OrchestratorClient, pb};

/// Fewest characters a short id may have.
const MIN_LEN: usize = 4;

/// Most of the caller's runs (newest first) a short id is looked for in.
const MAX_SEARCHED: usize = 10_000;

/// The whole id of the caller's run that `typed` names (see the module
/// docs); an error saying why when it names none, or several.
pub(super) async fn resolve(client: &OrchestratorClient, typed: &str) -> anyhow::Result<String> {
    let short = typed
        .trim()
        .trim_start_matches('…')
        .trim_start_matches("...")
        .to_ascii_lowercase();
    if short.len() == 36 || short.is_empty() {
        // A whole id (or nothing): the server checks it.
        return Ok(typed.trim().to_owned());
    }
    if short.len() < MIN_LEN || !short.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        anyhow::bail!(
            "run_id {typed:?}: give the whole id, or at least {MIN_LEN} characters of its start or its end (baton runs list shows them)"
        );
    }
    let mut found: Vec<String> = Vec::new();
    let (mut token, mut searched) = (String::new(), 0);
    loop {
        let page = client
            .list_runs(pb::RunStatus::Unspecified, 1000, &token)
            .await?;
        searched += page.runs.len();
        found.extend(
            page.runs
                .into_iter()
                .map(|r| r.run_id)
                .filter(|id| id.starts_with(&short) || id.ends_with(&short)),
        );
        if page.next_page_token.is_empty() || searched >= MAX_SEARCHED || found.len() > 1 {
            break;
        }
        token = page.next_page_token;
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => anyhow::bail!(
            "run_id: no run of yours starts or ends with {short:?} (of the newest {searched}; baton runs list shows them)"
        ),
        several => anyhow::bail!(
            "run_id: {short:?} names several runs ({}): give more characters",
            several.join(", ")
        ),
    }
}
