//! One try of a delivery: a POST with the Standard Webhooks headers (or an
//! A2A push's), bounded by `webhooks.timeout`, the answer read up to
//! `webhooks.max_response_bytes`.

use std::time::{Duration, SystemTime};

use super::{
    delivery::{Auth, Delivery},
    sign::{Secret, signature},
};

/// How a try went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tried {
    /// A 2xx answer.
    Delivered,
    /// Anything else: tried again later (after `retry_after`, when the
    /// receiver said).
    Failed {
        /// What happened.
        error: String,
        /// The receiver's `Retry-After`.
        retry_after: Option<Duration>,
    },
}

/// Makes one try of `d`, signed with `secrets` (a Standard delivery's).
pub async fn attempt(
    client: &reqwest::Client,
    d: &Delivery,
    secrets: &[Secret],
    max_response: usize,
) -> Tried {
    let timestamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |t| t.as_secs() as i64);
    let mut req = client
        .post(&d.url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::USER_AGENT, "Baton-Webhooks/1");
    match &d.auth {
        Auth::Own { .. } | Auth::Tenant => {
            req = req
                .header("webhook-id", &d.id)
                .header("webhook-timestamp", timestamp.to_string())
                .header(
                    "webhook-signature",
                    signature(secrets, &d.id, timestamp, d.body.as_bytes()),
                );
        }
        Auth::Header {
            authorization,
            token,
        } => {
            req = req.header("webhook-id", &d.id);
            if !authorization.is_empty() {
                req = req.header(reqwest::header::AUTHORIZATION, authorization);
            }
            if !token.is_empty() {
                req = req.header("X-A2A-Notification-Token", token);
            }
        }
    }
    let mut resp = match req.body(d.body.clone()).send().await {
        Ok(r) => r,
        Err(e) => {
            return Tried::Failed {
                error: describe(&e),
                retry_after: None,
            };
        }
    };
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    // Read what the receiver says, up to the cap (a 2xx is delivered
    // whatever its body; a failure's first words go into its error).
    let mut body = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let room = max_response.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if chunk.len() > room {
                    break;
                }
            }
            Ok(None) => break,
            Err(e) if status.is_success() => {
                tracing::debug!(url = %super::hosts::redacted(&d.url), error = %e, "a webhook receiver's answer broke off after its status");
                break;
            }
            Err(e) => {
                return Tried::Failed {
                    error: format!("HTTP {status}, then {}", describe(&e)),
                    retry_after,
                };
            }
        }
    }
    if status.is_success() {
        return Tried::Delivered;
    }
    let text = String::from_utf8_lossy(&body);
    let text: String = text.chars().take(200).collect();
    Tried::Failed {
        error: if text.trim().is_empty() {
            format!("HTTP {status}")
        } else {
            format!("HTTP {status}: {}", text.trim())
        },
        retry_after,
    }
}

/// A transport error in words (its chain, without the URL's query).
fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "the receiver did not answer within webhooks.timeout".into();
    }
    let mut out = if e.is_connect() {
        "cannot connect".to_string()
    } else {
        "the request failed".to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// `Retry-After`: seconds, or an HTTP date.
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_in_seconds_or_a_date() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("soon"), None);
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(120));
        let d = parse_retry_after(&later).expect("date");
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );
        let past = httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(120));
        assert_eq!(parse_retry_after(&past), Some(Duration::ZERO));
    }
}
