//! The context-store slots of a trace, for the faces that show them (the
//! web console's slots panel): a page of the trace's slots and a watch of
//! its changes, in the caller's tenant's namespace only — another tenant's
//! trace of the same id is a different set of slots.

use baton_common::{auth::Tenant, ids::TraceId};
use baton_store::{ChangeStream, Listing, Page, Scope};

use super::orchestrator::{Caller, Orchestrator};
use crate::error::{Error, Result};

impl Orchestrator {
    /// The scope of `trace_id` for `caller`.
    fn scope(caller: &Caller, trace_id: &str) -> Result<Scope> {
        let trace =
            TraceId::parse(trace_id).map_err(|e| Error::invalid("trace_id", e.to_string()))?;
        Ok(Scope::new(Tenant(caller.tenant.clone()), trace))
    }

    /// A page of trace `trace_id`'s slots (metadata, not values), after
    /// the key `after`.
    pub async fn slots(
        &self,
        caller: &Caller,
        trace_id: &str,
        after: Option<String>,
        size: usize,
    ) -> Result<Listing> {
        let scope = Self::scope(caller, trace_id)?;
        let page = Page {
            after,
            size: size.clamp(1, baton_store::MAX_PAGE_SIZE),
        };
        Ok(self.services().store.list_page(&scope, "", &page).await?)
    }

    /// The changes of trace `trace_id`'s slots from now on.
    pub async fn watch_slots(&self, caller: &Caller, trace_id: &str) -> Result<ChangeStream> {
        self.check_running()?;
        let scope = Self::scope(caller, trace_id)?;
        Ok(self.services().store.watch(&scope, "").await?)
    }
}
