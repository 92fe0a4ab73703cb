//! Watch on Redis: scripts `PUBLISH` each change on the trace's channel
//! inside the same atomic step as the change; one RESP3 connection per
//! store multiplexes every subscription ([`WatchHub`]), and watchers of one
//! trace share a Redis subscription. If that connection drops, watchers
//! cannot know what they missed, so their streams end with `UNAVAILABLE`
//! and they watch again.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use futures::StreamExt;
use redis::{
    PushKind, Value,
    aio::{ConnectionManager, ConnectionManagerConfig},
};
use tokio::sync::broadcast;
use tokio_stream::wrappers::{BroadcastStream, errors::BroadcastStreamRecvError};

use crate::{
    change::{Change, ChangeKind, ChangeStream},
    error::{Error, Result},
};

/// Changes a watcher may fall behind before its stream ends with `ABORTED`.
const WATCH_BUFFER: usize = 1024;

/// What the hub hands its watchers.
#[derive(Debug, Clone)]
enum Signal {
    Change(Change),
    Broken(String),
}

struct Channel {
    tx: broadcast::Sender<Signal>,
    watchers: usize,
}

type Channels = Arc<Mutex<HashMap<String, Channel>>>;

/// Multiplexes every Watch over one RESP3 pub/sub connection.
pub(super) struct WatchHub {
    /// Serialises (un)subscribing so a channel's Redis subscription always
    /// matches whether it has watchers.
    conn: tokio::sync::Mutex<ConnectionManager>,
    channels: Channels,
    /// Bound on a new watch's wait for its subscription (its turn at the
    /// lock included), so watches fail fast while Redis hangs.
    timeout: Duration,
}

impl WatchHub {
    /// A hub on its own pub/sub connection to the node of `client`,
    /// made lazily with `config`; a new watch waits at most `timeout`.
    pub(super) fn new(
        client: redis::Client,
        config: ConnectionManagerConfig,
        timeout: Duration,
    ) -> Result<Arc<Self>> {
        let channels: Channels = Arc::default();
        let dispatch = channels.clone();
        let config = config
            .set_push_sender(move |push: redis::PushInfo| {
                dispatch_push(&dispatch, push);
                Ok::<(), std::convert::Infallible>(())
            })
            .set_automatic_resubscription();
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| Error::Internal(format!("redis pub/sub config: {e}")))?;
        Ok(Arc::new(Self {
            conn: tokio::sync::Mutex::new(conn),
            channels,
            timeout,
        }))
    }

    /// Subscribes (or joins the subscription of) `channel` within the
    /// hub's timeout: `UNAVAILABLE` when Redis does not answer in time.
    pub(super) async fn watch(
        self: &Arc<Self>,
        channel: String,
        prefix: String,
    ) -> Result<ChangeStream> {
        match tokio::time::timeout(self.timeout, self.join(&channel)).await {
            Ok(Ok(rx)) => Ok(self.stream(channel, prefix, rx)),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                // The SUBSCRIBE may still reach Redis later: undo it then
                // unless somebody watches the channel by that time.
                let hub = self.clone();
                let stale = channel.clone();
                tokio::spawn(async move { hub.unsubscribe_if_unwatched(stale).await });
                Err(Error::Unavailable(format!(
                    "Redis did not confirm the subscription within redis.timeout ({:?})",
                    self.timeout
                )))
            }
        }
    }

    /// Subscribes the channel in Redis unless it has watchers already. A
    /// subscription on a connection that died with a Redis restart fails
    /// once while the connection manager reconnects: it is tried once more.
    async fn join(&self, channel: &str) -> Result<broadcast::Receiver<Signal>> {
        let mut conn = self.conn.lock().await;
        let existing = {
            let mut channels = lock(&self.channels);
            channels.get_mut(channel).map(|c| {
                c.watchers += 1;
                c.tx.subscribe()
            })
        };
        if let Some(rx) = existing {
            return Ok(rx);
        }
        let (tx, rx) = broadcast::channel(WATCH_BUFFER);
        lock(&self.channels).insert(channel.to_owned(), Channel { tx, watchers: 1 });
        // Until Redis confirms, the entry is this call's alone (the lock is
        // held): if the call is dropped (timed out), the entry goes too, so
        // no later watcher joins a subscription that was never made.
        struct Unconfirmed<'a>(&'a Channels, Option<&'a str>);
        impl Drop for Unconfirmed<'_> {
            fn drop(&mut self) {
                if let Some(channel) = self.1 {
                    lock(self.0).remove(channel);
                }
            }
        }
        let mut unconfirmed = Unconfirmed(&self.channels, Some(channel));
        let mut subscribed = conn.subscribe(channel).await;
        if let Err(e) = &subscribed
            && (e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error())
        {
            subscribed = conn.subscribe(channel).await;
        }
        subscribed?;
        unconfirmed.1 = None;
        Ok(rx)
    }

    async fn unsubscribe_if_unwatched(&self, channel: String) {
        let mut conn = self.conn.lock().await;
        let unwatched = !lock(&self.channels).contains_key(&channel);
        if unwatched {
            let _ = tokio::time::timeout(self.timeout, conn.unsubscribe(&channel)).await;
        }
    }

    fn stream(
        self: &Arc<Self>,
        channel: String,
        prefix: String,
        rx: broadcast::Receiver<Signal>,
    ) -> ChangeStream {
        let guard = WatchGuard {
            hub: Arc::downgrade(self),
            channel: Some(channel),
        };
        let stream = BroadcastStream::new(rx)
            .filter_map(move |item| {
                let out = match item {
                    Ok(Signal::Change(c)) if c.matches(&prefix) => Some(Ok(c)),
                    Ok(Signal::Change(_)) => None,
                    Ok(Signal::Broken(why)) => Some(Err(Error::Unavailable(why))),
                    Err(BroadcastStreamRecvError::Lagged(missed)) => {
                        Some(Err(Error::WatchLagged { missed }))
                    }
                };
                futures::future::ready(out)
            })
            .scan((false, guard), |(ended, _guard), item| {
                if *ended {
                    return futures::future::ready(None);
                }
                *ended = item.is_err();
                futures::future::ready(Some(item))
            });
        Box::pin(stream)
    }

    async fn release(&self, channel: String) {
        let mut conn = self.conn.lock().await;
        let last = {
            let mut channels = lock(&self.channels);
            match channels.get_mut(&channel) {
                Some(c) if c.watchers > 1 => {
                    c.watchers -= 1;
                    false
                }
                Some(_) => {
                    channels.remove(&channel);
                    true
                }
                None => false,
            }
        };
        if last && let Err(e) = conn.unsubscribe(&channel).await {
            // The connection is gone; with it the subscription.
            tracing::debug!(error = %e, channel, "unsubscribe failed");
        }
    }
}

fn lock(channels: &Channels) -> std::sync::MutexGuard<'_, HashMap<String, Channel>> {
    channels.lock().unwrap_or_else(|p| p.into_inner())
}

/// Routes one push message from Redis to the watchers of its channel.
fn dispatch_push(channels: &Channels, push: redis::PushInfo) {
    match push.kind {
        PushKind::Message => {
            let (Some(Value::BulkString(channel)), Some(Value::BulkString(payload))) =
                (push.data.first(), push.data.get(1))
            else {
                return;
            };
            let channel = String::from_utf8_lossy(channel);
            let Some(change) = parse_change(payload) else {
                tracing::warn!(channel = %channel, "unparseable change notification");
                return;
            };
            if let Some(c) = lock(channels).get(channel.as_ref()) {
                let _ = c.tx.send(Signal::Change(change));
            }
        }
        PushKind::Disconnection => {
            for c in lock(channels).values() {
                let _ = c.tx.send(Signal::Broken(
                    "lost the pub/sub connection to Redis".into(),
                ));
            }
        }
        _ => {}
    }
}

/// Parses a script's notification: `P|ver|size|exp|key|ct`, `D|ver|key`,
/// `E|ver|key` or `C|ver|count`.
fn parse_change(payload: &[u8]) -> Option<Change> {
    let text = std::str::from_utf8(payload).ok()?;
    let (kind, rest) = text.split_once('|')?;
    let empty = |kind, key: &str, version| Change {
        kind,
        key: key.to_owned(),
        version,
        size_bytes: 0,
        content_type: String::new(),
        expires_at_ms: 0,
    };
    match kind {
        "P" => {
            let mut parts = rest.splitn(5, '|');
            let version = parts.next()?.parse().ok()?;
            let size_bytes = parts.next()?.parse().ok()?;
            let expires_at_ms = parts.next()?.parse().ok()?;
            let key = parts.next()?.to_owned();
            let content_type = parts.next()?.to_owned();
            Some(Change {
                kind: ChangeKind::Put,
                key,
                version,
                size_bytes,
                content_type,
                expires_at_ms,
            })
        }
        "D" | "E" => {
            let (version, key) = rest.split_once('|')?;
            let kind = if kind == "D" {
                ChangeKind::Deleted
            } else {
                ChangeKind::Expired
            };
            Some(empty(kind, key, version.parse().ok()?))
        }
        "C" => {
            let (version, _count) = rest.split_once('|')?;
            Some(empty(ChangeKind::Cleared, "", version.parse().ok()?))
        }
        _ => None,
    }
}

/// Releases a watcher's share of its channel when its stream is dropped.
struct WatchGuard {
    hub: Weak<WatchHub>,
    channel: Option<String>,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let (Some(hub), Some(channel)) = (self.hub.upgrade(), self.channel.take()) else {
            return;
        };
        // Unsubscribing talks to Redis, which Drop cannot wait for.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { hub.release(channel).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_notification() {
        let p = parse_change(b"P|7|5|1700000000000|a/b|text/plain; x=|y").expect("put");
        assert_eq!(p.kind, ChangeKind::Put);
        assert_eq!(
            (p.version, p.size_bytes, p.expires_at_ms),
            (7, 5, 1_700_000_000_000)
        );
        assert_eq!(
            (p.key.as_str(), p.content_type.as_str()),
            ("a/b", "text/plain; x=|y")
        );
        assert_eq!(
            parse_change(b"D|8|k").map(|c| (c.kind, c.version)),
            Some((ChangeKind::Deleted, 8))
        );
        assert_eq!(
            parse_change(b"E|3|k").map(|c| c.kind),
            Some(ChangeKind::Expired)
        );
        assert_eq!(
            parse_change(b"C|9|4").map(|c| (c.kind, c.version)),
            Some((ChangeKind::Cleared, 9))
        );
        assert!(parse_change(b"X|1").is_none());
        assert!(parse_change(b"P|x|1|1|k|c").is_none());
    }
}
