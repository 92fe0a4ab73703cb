//! Wire messages into domain values and back: every request field is
//! checked here, and a missing or bad one becomes `INVALID_ARGUMENT`
//! naming it (`ttl`, `entries[3].key`). The handlers and the fuzz targets
//! call the same functions.

use std::time::Duration;

use baton_common::auth::{Tenant, tenant_of};
use baton_proto::v1 as pb;
use baton_store::{
    batch::{MAX_BATCH, Selection},
    change::{Change, ChangeKind},
    error::{Error, Result},
    key::{Key, Scope, parse_trace_id},
    limits::Limits,
    page::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, Page, PageToken},
    slot::{Put, SlotMeta},
};

/// The tenant's trace a call names: the tenant its credential gave it
/// (`""` when authentication is off), the trace its `trace_id` field.
pub(super) fn scope_of(extensions: &tonic::Extensions, trace_id: &str) -> Result<Scope> {
    Ok(Scope::new(
        Tenant(tenant_of(extensions).to_owned()),
        parse_trace_id(trace_id)?,
    ))
}

/// A time in Unix milliseconds as a protobuf timestamp.
pub(super) fn timestamp(ms: u64) -> baton_proto::wkt::Timestamp {
    baton_proto::wkt::Timestamp {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

/// A request's TTL: `None` when unset; a negative, malformed or sub-millisecond one names `ttl`.
fn ttl(d: Option<baton_proto::wkt::Duration>) -> Result<Option<Duration>> {
    let Some(d) = d else { return Ok(None) };
    if d.seconds < 0 || d.nanos < 0 {
        return Err(Error::invalid(
            "ttl",
            "must be positive, got a negative duration",
        ));
    }
    if d.nanos >= 1_000_000_000 {
        return Err(Error::invalid("ttl", "nanos must be below 1000000000"));
    }
    let ttl = Duration::new(d.seconds as u64, d.nanos as u32);
    if ttl.as_millis() == 0 && !ttl.is_zero() {
        return Err(Error::invalid("ttl", "must be at least 1ms"));
    }
    Ok(Some(ttl))
}

/// The page a List asks for (AIP-158: 0 is the default size, larger sizes
/// are lowered to the maximum, a token continues the listing it came from).
pub(super) fn page(scope: &Scope, prefix: &str, size: i32, token: &str) -> Result<Page> {
    let size = match size {
        s if s < 0 => return Err(Error::invalid("page_size", "must not be negative")),
        0 => DEFAULT_PAGE_SIZE,
        s => (s as usize).min(MAX_PAGE_SIZE),
    };
    let after = if token.is_empty() {
        None
    } else {
        Some(PageToken::decode("page_token", token, &scope.trace_id, prefix)?.after)
    };
    Ok(Page { after, size })
}

/// Turns a Put request of `tenant` into a write the store's limits allow
/// (nothing is written); every problem names its field. The handler and the
/// fuzz targets call it.
pub fn put_of(r: pb::PutRequest, tenant: Tenant, limits: &Limits) -> Result<Put> {
    let put = Put {
        scope: Scope::new(tenant, parse_trace_id(&r.trace_id)?),
        key: Key::parse("key", &r.key, limits.max_key_len)?,
        value: r.value.into(),
        content_type: r.content_type,
        ttl: ttl(r.ttl)?,
        expected_version: r.expected_version,
    };
    limits.check_put(&put)?;
    Ok(put)
}

/// The puts of a `PutManyRequest`, checked; errors name the entry.
pub fn puts_of(
    r: pb::PutManyRequest,
    tenant: Tenant,
    limits: &Limits,
) -> Result<(Scope, Vec<Put>)> {
    let scope = Scope::new(tenant, parse_trace_id(&r.trace_id)?);
    let puts = r
        .entries
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let in_entry = |err| Error::in_entry(i, &e.key, err);
            Ok(Put {
                scope: scope.clone(),
                key: Key::parse("key", &e.key, limits.max_key_len).map_err(in_entry)?,
                ttl: ttl(e.ttl).map_err(in_entry)?,
                value: e.value.into(),
                content_type: e.content_type,
                expected_version: e.expected_version,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    limits.check_batch(&scope, &puts)?;
    Ok((scope, puts))
}

/// The selection of a `DeleteManyRequest`, checked.
pub fn selection_of(r: pb::DeleteManyRequest, limits: &Limits) -> Result<Selection> {
    let selection = match (r.keys.is_empty(), r.prefix.is_empty()) {
        (false, false) => {
            return Err(Error::invalid(
                "prefix",
                "set either keys or prefix, not both",
            ));
        }
        (true, false) => Selection::Prefix(r.prefix),
        (_, true) => {
            if r.keys.len() > MAX_BATCH {
                return Err(Error::invalid(
                    "keys",
                    format!("{} keys is over the limit of {MAX_BATCH}", r.keys.len()),
                ));
            }
            Selection::Keys(
                r.keys
                    .iter()
                    .map(|k| Key::parse("keys", k, limits.max_key_len))
                    .collect::<Result<_>>()?,
            )
        }
    };
    limits.check_selection(&selection)?;
    Ok(selection)
}

/// A slot's metadata as the wire carries it.
pub(super) fn slot_info(m: SlotMeta) -> pb::SlotInfo {
    pb::SlotInfo {
        key: m.key,
        content_type: m.content_type,
        version: m.version,
        size_bytes: m.size_bytes,
        expires_at: Some(timestamp(m.expires_at_ms)),
    }
}

/// A change as Watch streams it.
pub(super) fn watch_response(c: Change) -> pb::WatchResponse {
    pb::WatchResponse {
        kind: match c.kind {
            ChangeKind::Put => pb::SlotChangeKind::Put,
            ChangeKind::Deleted => pb::SlotChangeKind::Deleted,
            ChangeKind::Expired => pb::SlotChangeKind::Expired,
            ChangeKind::Cleared => pb::SlotChangeKind::Cleared,
        } as i32,
        key: c.key,
        version: c.version,
        size_bytes: c.size_bytes,
        content_type: c.content_type,
        expires_at: (c.expires_at_ms > 0).then(|| timestamp(c.expires_at_ms)),
    }
}
