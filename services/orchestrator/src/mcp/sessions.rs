//! Sessions (2025-11-25, 2025-06-18) that outlive their replica: with
//! durable runs, what each session's `initialize` said is kept in the run
//! store, and a replica that gets a request of a session it does not hold
//! replays that handshake (`rmcp`'s session restore) and serves it: a
//! rolling restart does not end sessions. The balancer must still be
//! sticky: a call in progress is not moved (its response stream is its
//! replica's, what a client then sees: docs/mcp.md), and the answer to its
//! elicitation request or its cancellation must reach that replica (another
//! takes it for its own copy of the session, where nothing waits). A
//! `DELETE` ends the session on the replica it reaches and in the store.

use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::store::{
    SessionState, SessionStore, SessionStoreError,
};

use crate::shared_state::SharedState;

/// The shared state, as `rmcp`'s session store.
pub struct StoredSessions(pub Arc<SharedState>);

#[async_trait::async_trait]
impl SessionStore for StoredSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some(json) = self.0.session(session_id).await? else {
            return Ok(None);
        };
        Ok(Some(serde_json::from_str(&json)?))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let json = serde_json::to_string(state)?;
        Ok(self.0.put_session(session_id, &json).await?)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        Ok(self.0.delete_session(session_id).await?)
    }
}
