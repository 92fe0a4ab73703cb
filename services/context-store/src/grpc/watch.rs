//! Watch streams: the bounds on open watches per trace and per client
//! connection ([`WatchCounts`], `watches.*`), and the task that relays a
//! backend's changes to one client.

use std::{collections::HashMap, net::SocketAddr, sync::Arc};

use baton_proto::v1 as pb;
use baton_store::{
    change::ChangeStream,
    error::{Error, Result},
    key::Scope,
};
use futures::StreamExt;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::convert::watch_response;
use crate::config::WatchLimits;

/// Open watches per trace and per client connection, against
/// [`WatchLimits`].
pub(super) struct WatchCounts {
    limits: WatchLimits,
    open: std::sync::Mutex<WatchTally>,
}

#[derive(Default)]
struct WatchTally {
    traces: HashMap<Scope, usize>,
    connections: HashMap<SocketAddr, usize>,
}

/// One open watch, counted until dropped.
pub(super) struct CountedWatch {
    counts: Arc<WatchCounts>,
    scope: Scope,
    connection: Option<SocketAddr>,
}

impl WatchCounts {
    /// No watch open yet, bounded by `limits`.
    pub(super) fn new(limits: WatchLimits) -> Self {
        Self {
            limits,
            open: Default::default(),
        }
    }

    /// Counts a new watch of `trace_id` on `connection`, unless either is
    /// at its limit (`RESOURCE_EXHAUSTED`, nothing counted).
    pub(super) fn open(
        counts: &Arc<Self>,
        scope: &Scope,
        connection: Option<SocketAddr>,
    ) -> Result<CountedWatch> {
        let mut open = counts.open.lock().unwrap_or_else(|p| p.into_inner());
        let on_trace = open.traces.get(scope).copied().unwrap_or(0);
        if on_trace >= counts.limits.per_trace {
            return Err(Error::Exhausted {
                field: "trace_id",
                message: format!(
                    "trace {} already has {on_trace} open watches, the limit (watches.per_trace)",
                    scope.trace_id
                ),
            });
        }
        if let Some(c) = connection {
            let on_connection = open.connections.get(&c).copied().unwrap_or(0);
            if on_connection >= counts.limits.per_connection {
                return Err(Error::Exhausted {
                    field: "trace_id",
                    message: format!(
                        "this connection already has {on_connection} open watches, the limit (watches.per_connection)"
                    ),
                });
            }
            *open.connections.entry(c).or_default() += 1;
        }
        *open.traces.entry(scope.clone()).or_default() += 1;
        Ok(CountedWatch {
            counts: counts.clone(),
            scope: scope.clone(),
            connection,
        })
    }
}

impl Drop for CountedWatch {
    fn drop(&mut self) {
        let mut open = self.counts.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.traces.get_mut(&self.scope) {
            *n -= 1;
            if *n == 0 {
                open.traces.remove(&self.scope);
            }
        }
        if let Some(c) = self.connection
            && let Some(n) = open.connections.get_mut(&c)
        {
            *n -= 1;
            if *n == 0 {
                open.connections.remove(&c);
            }
        }
    }
}

/// Relays `changes` into `tx` until the client leaves (a failed send),
/// the watch breaks (its error is the last message) or `shutdown` (an
/// `UNAVAILABLE` is). `open` is the gauge of open watches, counted down
/// when the relay ends, however it ends; `counted` is released then too.
pub(super) async fn relay(
    mut changes: ChangeStream,
    tx: mpsc::Sender<Result<pb::WatchResponse, Status>>,
    shutdown: CancellationToken,
    open: Gauge,
    counted: CountedWatch,
) {
    struct Open(Gauge);
    impl Drop for Open {
        fn drop(&mut self) {
            self.0.dec();
        }
    }
    open.inc();
    let _open = Open(open);
    let _counted = counted;
    loop {
        let item = tokio::select! {
            _ = shutdown.cancelled() => {
                let _ = tx.send(Err(Error::ShuttingDown.into())).await;
                return;
            }
            _ = tx.closed() => return,
            item = changes.next() => item,
        };
        let Some(item) = item else { return };
        let msg = item.map(watch_response).map_err(Status::from);
        let failed = msg.is_err();
        // A failed send means the client left: stop, which drops the
        // subscription.
        if tx.send(msg).await.is_err() || failed {
            return;
        }
    }
}
