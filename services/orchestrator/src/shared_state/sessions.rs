//! The MCP face's sessions in the run store, so that a session opened on
//! one replica goes on on any other (`mcp::sessions`): one string key per
//! session, `{prefix}:mcp-session:<id>`, holding what its `initialize`
//! said (JSON), for `runs.retention` from its start or its last move to
//! another replica.

use super::{SharedState, redis_error};
use crate::error::Error;

impl SharedState {
    fn session_key(&self, id: &str) -> String {
        self.plain_key(&format!("mcp-session:{id}"))
    }

    /// Keeps session `id`'s `state`.
    pub async fn put_session(&self, id: &str, state: &str) -> Result<(), Error> {
        let mut c = self.conn().await?;
        redis::cmd("SET")
            .arg(self.session_key(id))
            .arg(state)
            .arg("PX")
            .arg(self.retention().as_millis().max(1) as u64)
            .query_async::<()>(&mut c)
            .await
            .map_err(redis_error)
    }

    /// Session `id`'s state, its time to live started again; `None` when
    /// it ended or expired.
    pub async fn session(&self, id: &str) -> Result<Option<String>, Error> {
        let mut c = self.conn().await?;
        redis::cmd("GETEX")
            .arg(self.session_key(id))
            .arg("PX")
            .arg(self.retention().as_millis().max(1) as u64)
            .query_async(&mut c)
            .await
            .map_err(redis_error)
    }

    /// Ends session `id`.
    pub async fn delete_session(&self, id: &str) -> Result<(), Error> {
        let mut c = self.conn().await?;
        redis::cmd("DEL")
            .arg(self.session_key(id))
            .query_async::<()>(&mut c)
            .await
            .map_err(redis_error)
    }
}
