//! Conversations in the core: a run entering its conversation before it
//! starts ([`Orchestrator::enter_conversation`]: the turn taken, the
//! history read and compacted, the run's request rewritten to hold it),
//! and the conversation operations (get, list, update, delete).

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use baton_proto::v1 as pb;
use prost::Message as _;

use super::{
    orchestrator::{Caller, Orchestrator, audit},
    start::Body,
};
use crate::{
    catalog::compaction::Compaction,
    conversation::{
        Holder, Turn, check_id,
        compact::{self, Bounds},
        link::{Compacted, Link},
        not_found,
        store::{Begin, Key},
        to_chat,
    },
    error::{Error, Result},
    model::ChatMessage,
    request::{ConversationAsk, StoredRequest},
    run::{launch::Prepared, shared::Shared},
};

/// Most messages of a GetConversation page.
const MAX_PAGE: u32 = 1000;
/// Messages of a page when the request says 0.
const DEFAULT_PAGE: u32 = 100;

impl Orchestrator {
    /// Takes the conversation's turn for the prepared run, reads its
    /// messages, compacts them when they are past the bounds, and makes
    /// them the run's history (its stored request's too, so a resumed,
    /// forked or replayed run begins with the same). The conversation's
    /// key and whether it was made for this run, to give the turn back (or
    /// delete it) if the run does not start.
    pub(super) async fn enter_conversation(
        &self,
        services: &Arc<Shared>,
        prepared: &Prepared,
        body: &mut Body,
        stored: &mut StoredRequest,
        ask: ConversationAsk,
    ) -> Result<Turn> {
        let Body::Agent {
            target,
            history,
            input,
            ..
        } = body
        else {
            return Err(Error::Internal("a pipeline run in a conversation".into()));
        };
        let conversations = &services.conversations;
        let config = &conversations.config;
        let record = &prepared.record;
        let key = Key {
            tenant: record.tenant.clone(),
            id: if ask.id.is_empty() {
                format!("conv-{}", uuid::Uuid::now_v7())
            } else {
                ask.id.clone()
            },
        };
        let ttl = ask.ttl.unwrap_or(config.ttl);
        // While the run enters (a summary may be asked for) it holds the
        // turn for as long as that can take: a replica stopped meanwhile
        // leaves a turn that frees itself soon. Once it is in, for its
        // run_timeout.
        let run_hold = prepared.run.limits.run_timeout + Duration::from_secs(60);
        let entering_hold =
            (services.defaults.model_timeout * 2 + Duration::from_secs(30)).min(run_hold);
        let begin = Begin {
            run_id: record.run_id.clone(),
            open: ask.open,
            hold_ms: entering_hold.as_millis() as i64,
            ttl_ms: ttl.as_millis() as i64,
            base: Vec::new(),
            branched_from: String::new(),
        };
        let this = self.clone();
        let holder = move |run: String| -> futures::future::BoxFuture<'static, Holder> {
            let this = this.clone();
            Box::pin(async move { this.holder(&run).await })
        };
        let taken = conversations
            .take_turn(&key, &begin, ask.busy, &holder)
            .await?;
        let created = taken.created;
        // From here the turn is given back however the start ends.
        let turn = Turn::new(conversations.clone(), key.clone(), &record.run_id, created);
        let entered = async {
            // The member of a group that answered last answers now.
            if target.group_members.is_some() && !taken.meta.agent.is_empty() {
                let members = target.group_members.clone().unwrap_or_default();
                if members.contains(&taken.meta.agent)
                    && let Ok(mut member) = crate::run::target::resolve(
                        &services.catalog,
                        &services.models,
                        &prepared.run.default_model,
                        &taken.meta.agent,
                    )
                {
                    member.target = target.target.clone();
                    member.group_members = Some(members);
                    *target = member;
                }
            }
            let spec = target.agent.spec.conversation.clone();
            let messages = taken.messages;
            let bounds = Bounds {
                max_messages: spec
                    .max_messages
                    .map_or(config.max_messages, |m| m.min(config.max_messages))
                    as usize,
                max_bytes: config.max_bytes,
                max_tokens: spec.max_tokens,
            };
            let input_bytes = input.len() as u64;
            let mut link = Link {
                id: key.id.clone(),
                fold: 0,
                summary: None,
                base_count: messages.len() as u32,
                base_bytes: messages.iter().map(crate::conversation::store::size).sum(),
                folded_bytes: 0,
                agent: target.agent.name.clone(),
                ttl_ms: ttl.as_millis() as i64,
                compacted: None,
            };
            let mut kept: &[pb::ConversationMessage] = &messages;
            if let Some(reason) = compact::over(&messages, input_bytes, &bounds) {
                let mode = spec.compaction;
                let cut = match mode {
                    Compaction::Keep => None,
                    _ => compact::plan(&messages, input_bytes, &bounds, spec.keep()),
                };
                let Some(cut) = cut else {
                    return Err(over_bound(
                        &key.id,
                        &target.agent.name,
                        reason,
                        &bounds,
                        config,
                    ));
                };
                let (folded, rest) = messages.split_at(cut);
                let summary = match mode {
                    Compaction::Summarize => Some(
                        super::summary::summarize(services, prepared, &spec.summary_model, folded)
                            .await?,
                    ),
                    _ => None,
                };
                let summary_msg = summary
                    .as_deref()
                    .map(|s| compact::summary_message(s, &record.run_id));
                let mut after: Vec<pb::ConversationMessage> = summary_msg.into_iter().collect();
                after.extend_from_slice(rest);
                if let Some(still) = compact::over(&after, input_bytes, &bounds) {
                    return Err(over_bound(
                        &key.id,
                        &target.agent.name,
                        still,
                        &bounds,
                        config,
                    ));
                }
                link.fold = cut as u32;
                link.folded_bytes = folded.iter().map(crate::conversation::store::size).sum();
                link.compacted = Some(Compacted {
                    mode: match mode {
                        Compaction::Summarize => "summarize",
                        _ => "window",
                    }
                    .into(),
                    reason: reason.into(),
                    kept: rest.len() as u32,
                    tokens_before: compact::tokens(&messages, input_bytes),
                    tokens_after: compact::tokens(&after, input_bytes),
                });
                link.summary = summary;
                kept = rest;
            }
            let mut begun: Vec<ChatMessage> = Vec::with_capacity(kept.len() + 1);
            if let Some(s) = &link.summary {
                begun.extend(to_chat(&compact::summary_message(s, &record.run_id)));
            }
            begun.extend(kept.iter().filter_map(to_chat));
            // The run's request as the run store keeps it: the history in
            // it, the conversation in the run's record.
            let mut request = pb::RunAgentRequest::decode(stored.0.as_slice())
                .map_err(|e| Error::Internal(format!("the run's own request: {e}")))?;
            request.history = begun.iter().map(to_pb_message).collect();
            request.conversation_id.clear();
            request.new_conversation = false;
            request.conversation_busy = 0;
            request.conversation_ttl = None;
            request.agent.clone_from(&target.target);
            *stored = StoredRequest(request.encode_to_vec());
            *history = begun;
            let _ = record.conversation.set(Arc::new(link));
            Ok(())
        }
        .await;
        let entered = match entered {
            // Still its turn (not: the conversation was deleted meanwhile).
            Ok(()) => match conversations
                .store
                .hold(&key, &record.run_id, run_hold.as_millis() as i64)
                .await
            {
                Ok(true) => Ok(()),
                Ok(false) => Err(not_found(&key.id)),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        match entered {
            Ok(()) => Ok(turn),
            Err(e) => {
                turn.give_back().await;
                Err(e)
            }
        }
    }

    /// The conversation link of run `run_id` (a fork's or replay's
    /// origin): its conversation and the group member it began with.
    pub(super) async fn origin_link(&self, run_id: &str) -> Result<Option<Link>> {
        if let Ok(record) = self.runs.get(run_id)
            && let Some(link) = record.conversation.get()
        {
            return Ok(Some((**link).clone()));
        }
        Ok(match &self.services().durable {
            Some(durable) => durable.meta(run_id).await?.and_then(|m| m.conversation),
            None => None,
        })
    }

    /// A fork of a run in a conversation starts a branch: a new
    /// conversation whose messages are those the original run began with
    /// (its history, compaction applied), to which the fork appends its
    /// own; the original conversation is left as it is. The branch's key.
    pub(super) async fn branch_conversation(
        &self,
        services: &Arc<Shared>,
        prepared: &Prepared,
        body: &Body,
        origin_run: &str,
        origin: &Link,
    ) -> Result<Key> {
        let Body::Agent { history, .. } = body else {
            return Err(Error::Internal("a pipeline run in a conversation".into()));
        };
        let record = &prepared.record;
        let base: Vec<pb::ConversationMessage> = history
            .iter()
            .filter_map(|m| crate::conversation::from_chat(m, origin_run, "", false))
            .collect();
        let key = Key {
            tenant: record.tenant.clone(),
            id: format!("conv-{}", uuid::Uuid::now_v7()),
        };
        let begin = Begin {
            run_id: record.run_id.clone(),
            open: crate::conversation::store::Open::New,
            hold_ms: (prepared.run.limits.run_timeout + Duration::from_secs(60)).as_millis() as i64,
            ttl_ms: origin.ttl_ms,
            branched_from: origin.id.clone(),
            base,
        };
        // A new branch: nobody else holds its turn.
        let never = |_: String| -> futures::future::BoxFuture<'static, Holder> {
            Box::pin(async { Holder::Running })
        };
        let taken = services
            .conversations
            .take_turn(&key, &begin, crate::conversation::Busy::Refuse, &never)
            .await?;
        let _ = record.conversation.set(Arc::new(Link {
            id: key.id.clone(),
            fold: 0,
            summary: None,
            base_count: taken.meta.count,
            base_bytes: taken.meta.bytes,
            folded_bytes: 0,
            agent: origin.agent.clone(),
            ttl_ms: origin.ttl_ms,
            compacted: None,
        }));
        Ok(key)
    }

    /// What became of run `run_id`, which holds a conversation's turn: a
    /// run ended from outside its body (by a replica that found it
    /// unresumable) gave nothing back, and its turn is free; a durable run
    /// still running (parked, or resumed on another replica after its
    /// hold lapsed) keeps it. A run not found is not known: it may be one
    /// that took its turn and is not registered yet.
    async fn holder(&self, run_id: &str) -> Holder {
        if let Ok(record) = self.runs.get(run_id) {
            let durable = record.epoch.load(std::sync::atomic::Ordering::Relaxed) > 0;
            match record.snapshot().status {
                pb::RunStatus::Running => return Holder::Running,
                // A durable run's record in Redis keeps the append its end
                // may not have applied (below).
                _ if !durable => return Holder::Ended(None),
                _ => {}
            }
        }
        match &self.services().durable {
            Some(durable) => match durable.meta(run_id).await {
                Ok(Some(meta)) if meta.status == pb::RunStatus::Running => Holder::Running,
                Ok(Some(meta)) => Holder::Ended(
                    meta.conversation_end
                        .as_deref()
                        .and_then(crate::conversation::store::Finish::decode)
                        .map(Box::new),
                ),
                Ok(None) => Holder::Unknown,
                // Cannot tell: kept.
                Err(_) => Holder::Running,
            },
            None => Holder::Unknown,
        }
    }

    /// GetConversation.
    pub async fn get_conversation(
        &self,
        caller: &Caller,
        r: &pb::GetConversationRequest,
    ) -> Result<pb::Conversation> {
        let got = self.get_conversation_inner(caller, r).await;
        audit("GetConversation", caller, "", "", &got);
        got
    }

    async fn get_conversation_inner(
        &self,
        caller: &Caller,
        r: &pb::GetConversationRequest,
    ) -> Result<pb::Conversation> {
        check_id("conversation_id", &r.conversation_id)?;
        let size = page_size(r.page_size)?;
        let key = key(caller, &r.conversation_id);
        let store = &self.services().conversations.store;
        let from = if r.page_token.is_empty() {
            if r.last > 0 {
                let Some(head) = store.page(&key, 0, 0).await? else {
                    return Err(not_found(&r.conversation_id));
                };
                head.meta.count.saturating_sub(r.last)
            } else {
                0
            }
        } else {
            r.page_token
                .parse::<u32>()
                .map_err(|_| Error::invalid("page_token", "is not a token this server gave"))?
        };
        let Some(page) = store.page(&key, from, size).await? else {
            return Err(not_found(&r.conversation_id));
        };
        let mut out = page.meta.to_pb();
        let next = from + page.messages.len() as u32;
        if next < page.meta.count && !page.messages.is_empty() {
            out.next_page_token = next.to_string();
        }
        out.messages = page
            .messages
            .into_iter()
            .enumerate()
            .map(|(i, mut m)| {
                m.index = from + i as u32;
                m
            })
            .collect();
        out.runs = page.runs;
        if !page.meta.running.is_empty() {
            out.runs.push(pb::ConversationRun {
                run_id: page.meta.running.clone(),
                status: pb::RunStatus::Running as i32,
                ..Default::default()
            });
        }
        Ok(out)
    }

    /// ListConversations.
    pub async fn list_conversations(
        &self,
        caller: &Caller,
        r: &pb::ListConversationsRequest,
    ) -> Result<pb::ListConversationsResponse> {
        let listed = async {
            let size = page_size(r.page_size)? as usize;
            let after = if r.page_token.is_empty() {
                None
            } else {
                let bad = || Error::invalid("page_token", "is not a token this server gave");
                let (ms, id) = r.page_token.split_once(':').ok_or_else(bad)?;
                Some((ms.parse::<i64>().map_err(|_| bad())?, id.to_owned()))
            };
            let store = &self.services().conversations.store;
            let mut found = store.list(&caller.tenant, after, size + 1).await?;
            let more = found.len() > size;
            found.truncate(size);
            let next_page_token = match found.last() {
                Some(last) if more => format!("{}:{}", last.updated_ms, last.id),
                _ => String::new(),
            };
            Ok(pb::ListConversationsResponse {
                conversations: found.iter().map(|m| m.to_pb()).collect(),
                next_page_token,
            })
        }
        .await;
        audit("ListConversations", caller, "", "", &listed);
        listed
    }

    /// UpdateConversation.
    pub async fn update_conversation(
        &self,
        caller: &Caller,
        r: pb::UpdateConversationRequest,
    ) -> Result<pb::Conversation> {
        let updated = async {
            check_id("conversation_id", &r.conversation_id)?;
            if r.title.as_ref().is_some_and(|t| t.len() > 256) {
                return Err(Error::invalid("title", "must be at most 256 bytes"));
            }
            if r.labels.len() > 32 {
                return Err(Error::invalid("labels", "at most 32 labels"));
            }
            for (k, v) in &r.labels {
                let key_ok = !k.is_empty()
                    && k.len() <= 63
                    && k.bytes().all(|b| {
                        b.is_ascii_lowercase()
                            || b.is_ascii_digit()
                            || matches!(b, b'_' | b'.' | b'-')
                    });
                if !key_ok {
                    return Err(Error::invalid(
                        "labels",
                        format!("{k:?} is not a label key ([a-z0-9_.-]{{1,63}})"),
                    ));
                }
                if v.len() > 256 {
                    return Err(Error::invalid(
                        "labels",
                        format!("the value of {k:?} is over 256 bytes"),
                    ));
                }
            }
            let labels: BTreeMap<String, String> = r.labels.into_iter().collect();
            let store = &self.services().conversations.store;
            let meta = store
                .update(&key(caller, &r.conversation_id), r.title, &labels)
                .await?
                .ok_or_else(|| not_found(&r.conversation_id))?;
            if meta.labels.len() > 32 {
                // Set anyway (one call cannot be refused after the fact):
                // said, so the caller removes some.
                tracing::warn!(conversation = %meta.id, "a conversation has more than 32 labels");
            }
            Ok(meta.to_pb())
        }
        .await;
        audit("UpdateConversation", caller, "", "", &updated);
        updated
    }
}

pub(super) fn key(caller: &Caller, id: &str) -> Key {
    Key {
        tenant: caller.tenant.clone(),
        id: id.to_owned(),
    }
}

fn page_size(n: i32) -> Result<u32> {
    match n {
        0 => Ok(DEFAULT_PAGE),
        n if n < 0 => Err(Error::invalid("page_size", "must not be negative")),
        n if n as u32 > MAX_PAGE => Err(Error::invalid(
            "page_size",
            format!("must be at most {MAX_PAGE}"),
        )),
        n => Ok(n as u32),
    }
}

/// The refusal of a conversation past a bound its agent does not compact.
fn over_bound(
    id: &str,
    agent: &str,
    bound: &str,
    bounds: &Bounds,
    config: &crate::config::conversations::ConversationConfig,
) -> Error {
    let limit = match bound {
        "max_messages" => format!("{} messages", bounds.max_messages),
        "max_bytes" => format!("conversations.max_bytes ({} bytes)", config.max_bytes),
        _ => format!(
            "agents.{agent}.conversation.max_tokens ({})",
            bounds.max_tokens.unwrap_or_default()
        ),
    };
    Error::Exhausted {
        field: "conversation_id".into(),
        message: format!(
            "conversation {id:?} with this input is over {bound}: {limit}; agent {agent} keeps it whole (conversation.compaction: keep) — delete the conversation, start another, or set window or summarize"
        ),
    }
}

/// A history message as a request carries it.
fn to_pb_message(m: &ChatMessage) -> pb::Message {
    crate::conversation::from_chat(m, "", "", false)
        .and_then(|c| c.message)
        .unwrap_or_default()
}
