//! The agent catalog: agents, groups and scripted models, loaded from the
//! agents file (YAML, `deploy/config/agents.yaml` is the commented example)
//! and validated once at start, so a run never meets a dangling reference.
//!
//! The bottom of the crate's layers: it uses nothing of the crate but the
//! client TLS settings; models, tools, runs, agents and pipelines read it.
//! Its leaves hold what the file declares: [`names`] (names, model references,
//! durations), [`builtin`] (built-in tools), [`settings`], [`policy`] (tool-output
//! policies), [`models`] (providers, scripts), [`compaction`] (a conversation's),
//! [`error`] (why a file is refused, naming the YAML path).

pub mod budget;
pub mod builtin;
pub mod compaction;
pub mod error;
pub mod models;
pub mod names;
pub mod policy;
pub mod prices;
pub mod remote;
pub mod schedules;
pub mod scoring;
mod servers;
pub mod settings;

pub use error::CatalogError;
pub use models::DEFAULT_MAX_OUTPUT_TOKENS;
pub use names::{parse_model_ref, valid_mcp_tool_name, valid_name};
pub use servers::{McpServerSpec, ToolServerSpec};

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use serde::Deserialize;

use models::{ProviderSpec, ScriptTurn};
use policy::{Policy, PolicySpec};
use settings::Settings;

/// Names of the built-in tools every agent may list.
pub use builtin::TOOLS as BUILTIN_TOOLS;

/// When a tool call needs a person's approval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalPolicy {
    /// Never.
    #[default]
    Never,
    /// Always.
    Always,
    /// Only when called from depth 1 or deeper (by a delegated agent).
    Nested,
}

/// One agent as the agents file declares it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSpec {
    /// What it does (shown by ListAgents, and to other agents calling it).
    pub description: String,
    /// The system prompt.
    pub instructions: String,
    /// Its model, `provider:model`; empty means the request's or server's
    /// default.
    pub model: String,
    /// Tools it may call: built-ins, other agents, agent groups.
    pub tools: Vec<String>,
    /// Agents it may hand off to (each becomes a `transfer_to_<agent>` tool).
    pub handoffs: Vec<String>,
    /// Approval policy per tool name; tools not listed need none.
    pub approvals: BTreeMap<String, ApprovalPolicy>,
    /// Tool-output policies of this agent, by name, applied after the
    /// run-scoped ones.
    pub policies: Vec<String>,
    /// Generation settings over its provider's (a request's override them).
    pub settings: Settings,
    /// Whether it is served as an A2A agent (see the config's `a2a`).
    pub a2a: bool,
    /// What it reads and writes over A2A.
    pub a2a_io: A2aIo,
    /// Whether it is served as an MCP tool (see the config's `mcp`).
    pub mcp: bool,
    /// Models tried in order when its model fails with a rate limit, a
    /// server error, a timeout or a connection failure (see
    /// [`budget`]).
    pub fallbacks: Vec<String>,
    /// Models tried in order when its model's context window is too small
    /// for the request.
    pub context_window_fallbacks: Vec<String>,
    /// Its budget, and what it does when one runs out.
    pub budget: Option<budget::BudgetSpec>,
    /// How a long conversation is compacted before it answers.
    pub conversation: compaction::ConversationSpec,
    /// Its live scoring: a share of its runs scored as they end
    /// (docs/evaluations.md).
    pub scoring: Option<scoring::LiveScoring>,
}

/// What an agent served over A2A reads and writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum A2aIo {
    /// Text: the input is the message's text (a file part becomes a line
    /// saying what was attached); the output is the text artifact `output`.
    #[default]
    Text,
    /// A2A messages: the input (and every answer to a question) is the
    /// caller's whole A2A `Message` as proto3 JSON, ids, file parts and
    /// metadata included; a final output that is a JSON object with
    /// `artifacts` (A2A `Artifact`s) or `message` (an A2A `Message`) is
    /// answered as those artifacts or as that direct message.
    Message,
}

/// An agent group: a root agent plus the agents it may hand off to, usable
/// wherever an agent is.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GroupSpec {
    /// What it does.
    pub description: String,
    /// The agent that starts.
    pub root: String,
    /// Every agent of the group (the root included).
    pub members: Vec<String>,
}

/// Model providers by name: `<name>:<model>` references resolve against
/// `providers.<name>` (`scripted` is built in).
pub type Providers = BTreeMap<String, ProviderSpec>;

/// The agents file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentsFile {
    /// The server's default model, `provider:model`.
    pub default_model: String,
    /// Model providers by name.
    pub providers: Providers,
    /// Scripted models by name (`scripted:<name>`): their turns.
    pub scripts: BTreeMap<String, Vec<ScriptTurn>>,
    /// Agents by name.
    pub agents: BTreeMap<String, AgentSpec>,
    /// Agent groups by name.
    pub groups: BTreeMap<String, GroupSpec>,
    /// ToolHost servers by name.
    pub tool_servers: BTreeMap<String, ToolServerSpec>,
    /// MCP servers by name.
    pub mcp_servers: BTreeMap<String, McpServerSpec>,
    /// Remote A2A agents agents may call like their own.
    pub remote_agents: BTreeMap<String, remote::RemoteAgentSpec>,
    /// Tool-output policies by name.
    pub policies: BTreeMap<String, PolicySpec>,
    /// Policies applied to every tool output of a run, before the agent's.
    pub run_policies: Vec<String>,
    /// Model prices by reference, per million tokens (see [`prices`]).
    pub prices: BTreeMap<String, prices::PriceSpec>,
    /// LiteLLM's model price map, relative to the agents file.
    pub prices_file: Option<String>,
    /// A model's output limit when nothing else says (`Model::max_output_tokens`).
    pub default_max_output_tokens: Option<u32>,
    /// Schedules by name (see [`schedules`]).
    pub schedules: BTreeMap<String, schedules::ScheduleSpec>,
}

/// A validated agent.
#[derive(Debug)]
pub struct Agent {
    /// Its name.
    pub name: String,
    /// Its declaration.
    pub spec: AgentSpec,
    /// Its tool-output policies, in order.
    pub policies: Vec<Policy>,
}

/// The validated catalog every run shares.
#[derive(Debug, Default)]
pub struct Catalog {
    /// The server's default model.
    pub default_model: String,
    /// Agents by name.
    pub agents: BTreeMap<String, Arc<Agent>>,
    /// Groups by name.
    pub groups: BTreeMap<String, GroupSpec>,
    /// Scripted models' turns by script name.
    pub scripts: BTreeMap<String, Arc<Vec<ScriptTurn>>>,
    /// ToolHost servers by name.
    pub tool_servers: BTreeMap<String, ToolServerSpec>,
    /// MCP servers by name.
    pub mcp_servers: BTreeMap<String, McpServerSpec>,
    /// Remote A2A agents agents may call like their own.
    pub remote_agents: BTreeMap<String, remote::RemoteAgentSpec>,
    /// Policies applied to every tool output, before the agent's.
    pub run_policies: Vec<Policy>,
    /// Provider settings.
    pub providers: Providers,
    /// Model prices.
    pub prices: prices::Prices,
    /// See [`AgentsFile::default_max_output_tokens`].
    pub default_max_output_tokens: u32,
    /// Schedules by name, as written (`crate::schedule::file` reads them).
    pub schedules: BTreeMap<String, schedules::ScheduleSpec>,
    /// The agents file text's SHA-256 (hex; empty if not read from text).
    pub digest: String,
}

impl Catalog {
    /// Parses and validates an agents file.
    pub fn from_yaml(text: &str) -> Result<Self, CatalogError> {
        Self::from_yaml_in(text, std::path::Path::new("."))
    }

    /// Parses and validates an agents file whose directory is `dir` (its
    /// `prices_file` is read from there).
    pub fn from_yaml_in(text: &str, dir: &std::path::Path) -> Result<Self, CatalogError> {
        let file: AgentsFile = serde_norway::from_str(text).map_err(CatalogError::Yaml)?;
        let mut catalog = Self::from_file_in(file, dir)?;
        catalog.digest = {
            use sha2::Digest as _;
            sha2::Sha256::digest(text.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        Ok(catalog)
    }

    /// Validates an agents file (its `prices_file` read from the working
    /// directory).
    pub fn from_file(file: AgentsFile) -> Result<Self, CatalogError> {
        Self::from_file_in(file, std::path::Path::new("."))
    }

    /// Validates an agents file whose directory is `dir`.
    pub fn from_file_in(file: AgentsFile, dir: &std::path::Path) -> Result<Self, CatalogError> {
        let prices = prices::Prices::new(&file.prices, file.prices_file.as_deref(), dir)
            .map_err(CatalogError::Prices)?;
        if file.default_max_output_tokens == Some(0) {
            return Err(CatalogError::Budget(
                "default_max_output_tokens: must be at least 1".into(),
            ));
        }
        for (name, turns) in &file.scripts {
            for (i, t) in turns.iter().enumerate() {
                t.validate().map_err(|source| CatalogError::Script {
                    script: name.clone(),
                    turn: i,
                    source,
                })?;
            }
        }
        let check_model = |field: String, m: &str| -> Result<(), CatalogError> {
            if m.is_empty() {
                return Ok(());
            }
            let (provider, model) = match parse_model_ref(m) {
                Ok(parsed) => parsed,
                Err(source) => return Err(CatalogError::ModelRef { field, source }),
            };
            if models::scripted(&file.providers, provider) && !file.scripts.contains_key(model) {
                return Err(CatalogError::NoScript {
                    field,
                    script: model.to_owned(),
                });
            }
            if provider != "scripted" && !file.providers.contains_key(provider) {
                return Err(CatalogError::UnknownProvider {
                    field,
                    reference: m.to_owned(),
                    provider: provider.to_owned(),
                    known: names::known_providers(file.providers.keys().map(String::as_str)),
                });
            }
            Ok(())
        };
        for (name, spec) in &file.providers {
            spec.validate(name)?;
        }
        check_model("default_model".into(), &file.default_model)?;

        for name in file.agents.keys().chain(file.groups.keys()) {
            if !valid_name(name) {
                return Err(CatalogError::AgentName(name.clone()));
            }
            if BUILTIN_TOOLS.contains(&name.as_str()) {
                return Err(CatalogError::BuiltinName(name.clone()));
            }
        }
        if let Some(both) = file.agents.keys().find(|n| file.groups.contains_key(*n)) {
            return Err(CatalogError::AgentAndGroup(both.clone()));
        }
        let mut remote = BTreeSet::new();
        for (server, spec) in &file.tool_servers {
            if !valid_name(server) {
                return Err(CatalogError::ServerName {
                    section: "tool_servers",
                    server: server.clone(),
                });
            }
            // Parsed as every Baton client parses targets: one endpoint,
            // or `dns:///` to spread calls over every replica.
            let endpoint = &spec.endpoint;
            if !["http://", "https://", baton_client::balance::DNS_SCHEME]
                .iter()
                .any(|scheme| endpoint.starts_with(scheme))
            {
                return Err(CatalogError::ToolServerScheme {
                    server: server.clone(),
                    endpoint: endpoint.clone(),
                });
            }
            baton_client::balance::check_target(endpoint).map_err(|source| {
                CatalogError::ToolServerEndpoint {
                    server: server.clone(),
                    source,
                }
            })?;
            for t in &spec.tools {
                let taken = BUILTIN_TOOLS.contains(&t.as_str())
                    || file.agents.contains_key(t)
                    || file.groups.contains_key(t)
                    || t.starts_with("transfer_to_");
                if !valid_name(t) || taken || !remote.insert(t.clone()) {
                    return Err(CatalogError::ToolServerTool {
                        server: server.clone(),
                        tool: t.clone(),
                    });
                }
            }
        }
        for (server, spec) in &file.mcp_servers {
            if !valid_name(server) {
                return Err(CatalogError::ServerName {
                    section: "mcp_servers",
                    server: server.clone(),
                });
            }
            match (spec.command.is_empty(), spec.url.is_empty()) {
                (true, true) | (false, false) => {
                    return Err(CatalogError::McpCommandOrUrl(server.clone()));
                }
                (true, false) => {
                    let ok = (spec.url.starts_with("http://") || spec.url.starts_with("https://"))
                        && reqwest::Url::parse(&spec.url).is_ok();
                    if !ok {
                        return Err(CatalogError::McpUrl {
                            server: server.clone(),
                            url: spec.url.clone(),
                        });
                    }
                }
                (false, true) => {
                    if !spec.headers.is_empty() || !spec.bearer_token_env.is_empty() {
                        return Err(CatalogError::McpHeaders(server.clone()));
                    }
                }
            }
            if spec.tools.is_empty() {
                return Err(CatalogError::McpNoTools(server.clone()));
            }
            for t in &spec.tools {
                let taken = BUILTIN_TOOLS.contains(&t.as_str())
                    || file.agents.contains_key(t)
                    || file.groups.contains_key(t)
                    || t.starts_with("transfer_to_");
                if !valid_mcp_tool_name(t) || taken || !remote.insert(t.clone()) {
                    return Err(CatalogError::McpTool {
                        server: server.clone(),
                        tool: t.clone(),
                    });
                }
            }
        }
        for (name, spec) in &file.remote_agents {
            spec.validate(name)?;
            let taken = BUILTIN_TOOLS.contains(&name.as_str())
                || file.agents.contains_key(name)
                || file.groups.contains_key(name)
                || name.starts_with("transfer_to_");
            if taken || !remote.insert(name.clone()) {
                return Err(CatalogError::RemoteAgent {
                    agent: name.clone(),
                    problem: "the name is taken by an agent, group, built-in or server tool".into(),
                });
            }
        }
        let known_model = |r: &str| -> Result<(), String> {
            match parse_model_ref(r) {
                Ok((provider, script))
                    if models::scripted(&file.providers, provider)
                        && !file.scripts.contains_key(script) =>
                {
                    Err(format!("{r:?}: no script named {script:?}"))
                }
                Ok((provider, _))
                    if provider != "scripted" && !file.providers.contains_key(provider) =>
                {
                    Err(format!(
                        "{r:?}: unknown provider {provider:?} (known: {})",
                        names::known_providers(file.providers.keys().map(String::as_str))
                    ))
                }
                Ok(_) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        };
        for (name, a) in &file.agents {
            if let Some(s) = &a.scoring {
                let known_tool = |tool: &str| {
                    file.tool_servers
                        .values()
                        .any(|t| t.tools.iter().any(|x| x == tool))
                        || file
                            .mcp_servers
                            .values()
                            .any(|m| m.tools.iter().any(|x| x == tool))
                };
                scoring::check(name, s, &known_model, &known_tool)?;
            }
            check_model(format!("agents.{name}.model"), &a.model)?;
            budget::check_fallbacks(
                name,
                &a.model,
                [
                    ("fallbacks", &a.fallbacks),
                    ("context_window_fallbacks", &a.context_window_fallbacks),
                ],
                &known_model,
            )?;
            if let Some(b) = &a.budget {
                b.validate(name)?;
            }
            a.conversation.validate(name, &known_model)?;
            a.settings.validate(&format!("agents.{name}.settings"))?;
            for t in &a.tools {
                if !(BUILTIN_TOOLS.contains(&t.as_str())
                    || file.agents.contains_key(t)
                    || file.groups.contains_key(t)
                    || remote.contains(t))
                {
                    return Err(CatalogError::UnknownTool {
                        field: format!("agents.{name}.tools"),
                        tool: t.clone(),
                    });
                }
            }
            for h in &a.handoffs {
                if !file.agents.contains_key(h) {
                    return Err(CatalogError::UnknownAgent {
                        field: format!("agents.{name}.handoffs"),
                        agent: h.clone(),
                    });
                }
                if h == name {
                    return Err(CatalogError::SelfHandoff(name.clone()));
                }
            }
            let callable: BTreeSet<String> = a
                .tools
                .iter()
                .cloned()
                .chain(a.handoffs.iter().map(|h| format!("transfer_to_{h}")))
                .collect();
            for tool in a.approvals.keys() {
                if !callable.contains(tool) {
                    return Err(CatalogError::ApprovalOfNoTool {
                        agent: name.clone(),
                        tool: tool.clone(),
                    });
                }
            }
        }
        let mut policies = BTreeMap::new();
        for (name, spec) in &file.policies {
            let p = Policy::new(name, spec)?;
            for t in p.tools() {
                let known = BUILTIN_TOOLS.contains(&t.as_str())
                    || remote.contains(t)
                    || file.agents.contains_key(t)
                    || file.groups.contains_key(t)
                    || t.starts_with("transfer_to_");
                if !known {
                    return Err(CatalogError::UnknownTool {
                        field: format!("policies.{name}.tools"),
                        tool: t.clone(),
                    });
                }
            }
            policies.insert(name.clone(), p);
        }
        let resolve = |field: String, names: &[String]| -> Result<Vec<Policy>, CatalogError> {
            names
                .iter()
                .map(|n| {
                    policies
                        .get(n)
                        .cloned()
                        .ok_or_else(|| CatalogError::UnknownPolicy {
                            field: field.clone(),
                            policy: n.clone(),
                        })
                })
                .collect()
        };
        let run_policies = resolve("run_policies".into(), &file.run_policies)?;

        let mut agent_policies = BTreeMap::new();
        for (name, a) in &file.agents {
            agent_policies.insert(
                name.clone(),
                resolve(format!("agents.{name}.policies"), &a.policies)?,
            );
        }
        for (name, g) in &file.groups {
            if !g.members.contains(&g.root) {
                return Err(CatalogError::RootNotMember {
                    group: name.clone(),
                    root: g.root.clone(),
                });
            }
            for m in &g.members {
                if !file.agents.contains_key(m) {
                    return Err(CatalogError::UnknownAgent {
                        field: format!("groups.{name}.members"),
                        agent: m.clone(),
                    });
                }
            }
        }
        Ok(Self {
            default_model: file.default_model,
            agents: file
                .agents
                .into_iter()
                .map(|(name, mut spec)| {
                    let policies = agent_policies.remove(&name).unwrap_or_default();
                    // Checked above: each compiles.
                    if let Some(s) = &mut spec.scoring {
                        s.compiled = s
                            .scorers
                            .iter()
                            .filter_map(|x| {
                                crate::eval::score::Scorer::compile(x).ok().map(Arc::new)
                            })
                            .collect();
                    }
                    (
                        name.clone(),
                        Arc::new(Agent {
                            name,
                            spec,
                            policies,
                        }),
                    )
                })
                .collect(),
            groups: file.groups,
            scripts: file
                .scripts
                .into_iter()
                .map(|(k, v)| (k, Arc::new(v)))
                .collect(),
            tool_servers: file.tool_servers,
            mcp_servers: file.mcp_servers,
            remote_agents: file.remote_agents,
            run_policies,
            providers: file.providers,
            prices,
            default_max_output_tokens: file
                .default_max_output_tokens
                .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
            digest: String::new(),
            schedules: file.schedules,
        })
    }

    /// The providers a model reference may name, for messages.
    pub fn known_providers(&self) -> String {
        names::known_providers(self.providers.keys().map(String::as_str))
    }

    /// The agent a RunAgent target or an agent-as-tool name starts with:
    /// the agent itself, or a group's root.
    pub fn entry(&self, name: &str) -> Option<Arc<Agent>> {
        match self.groups.get(name) {
            Some(g) => self.agents.get(&g.root).cloned(),
            None => self.agents.get(name).cloned(),
        }
    }

    /// Whether `name` is an agent or a group.
    pub fn is_callable(&self, name: &str) -> bool {
        self.agents.contains_key(name) || self.groups.contains_key(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scripted_failure_status_is_an_error_status_with_a_failure() {
        let file = |turn: &str| {
            format!("scripts:\n  s:\n    - {turn}\nagents:\n  a: {{model: \"scripted:s\"}}\n")
        };
        for ok in [400, 429, 599] {
            Catalog::from_yaml(&file(&format!("{{fail: down, fail_status: {ok}}}")))
                .expect("an error status");
        }
        for bad in [399, 600] {
            let e = Catalog::from_yaml(&file(&format!("{{fail: down, fail_status: {bad}}}")))
                .expect_err("not an error status")
                .to_string();
            assert_eq!(
                e,
                format!("scripts.s[0]: fail_status: {bad} is not an error status (400 to 599)")
            );
        }
        let e = Catalog::from_yaml(&file("{text: hi, fail_status: 429}"))
            .expect_err("no failure")
            .to_string();
        assert_eq!(
            e,
            "scripts.s[0]: fail_status: set fail, the message it fails with"
        );
        // A provider of kind scripted names scripts; an unknown one is refused.
        let e = Catalog::from_yaml(
            "providers:\n  demo: {kind: scripted}\nscripts:\n  s: [{text: hi}]\nagents:\n  a: {model: \"demo:nope\"}\n",
        )
        .expect_err("no such script")
        .to_string();
        assert!(e.contains("nope"), "{e}");
    }

    #[test]
    fn rejects_dangling_references_with_their_path() {
        let err = |yaml: &str| Catalog::from_yaml(yaml).expect_err("invalid").to_string();
        assert!(err("agents: {a: {tools: [nope]}}").contains("agents.a.tools"));
        assert!(err("agents: {a: {handoffs: [b]}}").contains("agents.a.handoffs"));
        assert!(err("agents: {a: {model: 'scripted:x'}}").contains("no script named"));
        assert!(err("agents: {a: {model: 'acme:x'}}").contains("unknown provider"));
        assert!(err("agents: {Bad: {}}").contains("[a-z0-9_-]"));
        assert!(err("groups: {g: {root: a, members: [a]}}").contains("unknown agent"));
        assert!(
            err("agents: {a: {}}\ngroups: {g: {root: a, members: []}}").contains("groups.g.root")
        );
        assert!(err("agents: {a: {approvals: {sleep: always}}}").contains("approvals"));
        assert!(err("agents: {a: {unknown_field: 1}}").contains("unknown_field"));
        // The messages as the docs quote them.
        assert_eq!(
            err("agents: {a: {tools: [nope]}}"),
            r#"agents.a.tools: unknown tool "nope""#
        );
        assert_eq!(
            err("agents: {a: {model: 'acme:x'}}"),
            r#"agents.a.model: "acme:x": unknown provider "acme" (known: scripted)"#
        );
        assert_eq!(
            err("default_model: nope"),
            r#"default_model: "nope" is not provider:model"#
        );
    }

    #[test]
    fn tool_server_endpoints_are_targets_as_clients_take_them() {
        let with = |endpoint: &str| {
            Catalog::from_yaml(&format!(
                "tool_servers: {{t: {{endpoint: \"{endpoint}\", tools: [remote]}}}}\nagents: {{a: {{tools: [remote]}}}}"
            ))
        };
        for ok in [
            "http://tools:50061",
            "https://tools:443",
            "dns:///tools-headless:50061",
        ] {
            assert!(with(ok).is_ok(), "{ok}: {:?}", with(ok).err());
        }
        for (bad, why) in [
            (
                "tools:50061",
                "is not http(s)://host:port or dns:///host:port",
            ),
            ("dns:///tools", "needs a port"),
            ("dns:///tools:http", "is not a port"),
            ("http://", "tool_servers.t.endpoint"),
        ] {
            let err = with(bad).expect_err(bad).to_string();
            assert!(
                err.starts_with("tool_servers.t.endpoint: ") && err.contains(why),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn groups_enter_at_their_root() {
        let c = Catalog::from_yaml(
            "agents: {a: {handoffs: [b]}, b: {}}\ngroups: {g: {root: a, members: [a, b]}}",
        )
        .expect("valid");
        assert_eq!(c.entry("g").expect("group").name, "a");
        assert_eq!(c.entry("b").expect("agent").name, "b");
        assert!(c.entry("zzz").is_none());
    }
}
