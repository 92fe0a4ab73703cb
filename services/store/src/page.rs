//! Listings: one [`Page`] of a trace's slots under a prefix at a time
//! ([`Listing`]), continued by the opaque [`PageToken`] of `List`.

use baton_common::ids::TraceId;

use crate::{
    error::{Error, Result},
    slot::SlotMeta,
};

/// A trace's slots under a prefix, and the trace's quota usage.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listing {
    /// Matching live slots, sorted by key.
    pub slots: Vec<SlotMeta>,
    /// Bytes the whole trace uses.
    pub used_bytes: u64,
    /// Live slots of the whole trace.
    pub used_keys: u64,
    /// When more matching slots follow: the last key of this page (the next
    /// page starts after it).
    pub next_after: Option<String>,
}

/// Slots in one page of a listing when the caller asks for none.
pub const DEFAULT_PAGE_SIZE: usize = 1000;
/// Most slots in one page; larger requests are coerced to it (AIP-158). A
/// page of slots with the longest keys and content types stays far below
/// the 4 MiB a gRPC client accepts by default.
pub const MAX_PAGE_SIZE: usize = 1000;

/// Which page of a listing to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Only keys after this one (exclusive); `None` from the first.
    pub after: Option<String>,
    /// At most this many slots (1 to [`MAX_PAGE_SIZE`]).
    pub size: usize,
}

impl Default for Page {
    fn default() -> Self {
        Self {
            after: None,
            size: DEFAULT_PAGE_SIZE,
        }
    }
}

/// The opaque `page_token` of `List`: it names the trace and prefix it was
/// issued for and the last key returned, so a token can only continue the
/// listing it came from. Text form: `v1.<trace>.<hex prefix>.<hex key>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageToken {
    /// The trace listed.
    pub trace_id: String,
    /// The prefix listed.
    pub prefix: String,
    /// The last key of the previous page.
    pub after: String,
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

impl PageToken {
    /// The token's text.
    pub fn encode(&self) -> String {
        format!(
            "v1.{}.{}.{}",
            self.trace_id,
            hex(&self.prefix),
            hex(&self.after)
        )
    }

    /// Reads a token of a listing of `trace_id` under `prefix`; `field`
    /// names the request field in errors.
    pub fn decode(
        field: &'static str,
        token: &str,
        trace_id: &TraceId,
        prefix: &str,
    ) -> Result<Self> {
        let bad = || Error::invalid(field, "is not a page token this service issued");
        let mut parts = token.split('.');
        let (Some("v1"), Some(trace), Some(p), Some(after), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(bad());
        };
        let (prefix_then, after) = (unhex(p).ok_or_else(bad)?, unhex(after).ok_or_else(bad)?);
        if after.is_empty() {
            return Err(bad());
        }
        if trace != trace_id.as_str() || prefix_then != prefix {
            return Err(Error::invalid(
                field,
                "was issued for another trace or prefix; list again from the first page",
            ));
        }
        Ok(Self {
            trace_id: trace.to_owned(),
            prefix: prefix_then,
            after,
        })
    }
}
