//! An agent or group resolved once, before anything runs ([`resolve`]):
//! the request's validation resolves its target with this, so the run's
//! root frame gets a [`Resolved`] and cannot fail to build; frames started
//! later in a run (agents called as tools, handoffs, steps) resolve theirs
//! through `Run::resolve`.

use std::sync::Arc;

use crate::{
    catalog::{Agent, Catalog},
    model::{Model, Models},
};

/// An agent or group resolved once, before anything runs: the agent that
/// runs first (a group's root), the model it runs on, and a group's members.
#[derive(Clone)]
pub struct Resolved {
    /// The agent or group as the caller named it.
    pub target: String,
    /// The agent that runs first.
    pub agent: Arc<Agent>,
    /// Its model.
    pub model: Arc<dyn Model>,
    /// When `target` is a group: the agents it may hand off among.
    pub group_members: Option<Vec<String>>,
}

/// Why an agent cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unresolved {
    /// No agent or group has the name.
    #[error("unknown agent {0:?}")]
    UnknownAgent(String),
    /// The agent names no model and there is no default.
    #[error("agent {0} has no model, and neither the request nor the server names a default")]
    NoModel(String),
    /// The model reference does not resolve (the models' own message).
    #[error("{0}")]
    Model(crate::model::ResolveError),
}

/// Resolves `target` (an agent or group) and its model, without starting
/// anything.
pub fn resolve(
    catalog: &Catalog,
    models: &Models,
    default_model: &str,
    target: &str,
) -> Result<Resolved, Unresolved> {
    let agent = catalog
        .entry(target)
        .ok_or_else(|| Unresolved::UnknownAgent(target.to_owned()))?;
    let model = model_of(models, default_model, &agent)?;
    Ok(Resolved {
        target: target.to_owned(),
        group_members: catalog.groups.get(target).map(|g| g.members.clone()),
        agent,
        model,
    })
}

pub(super) fn model_of(
    models: &Models,
    default_model: &str,
    agent: &Agent,
) -> Result<Arc<dyn Model>, Unresolved> {
    let reference = if agent.spec.model.is_empty() {
        default_model
    } else {
        &agent.spec.model
    };
    if reference.is_empty() {
        return Err(Unresolved::NoModel(agent.name.clone()));
    }
    models.resolve(reference).map_err(Unresolved::Model)
}
