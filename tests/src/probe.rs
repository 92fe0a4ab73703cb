//! Asking a run or a running service how it is: an awaited event of a run,
//! a condition polled until it holds, health, reflection and metrics.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use crate::events;

/// Reads `stream` until an event matches `want` (10 s at most per event) and
/// returns it; every event read is pushed to `seen`. Panics when the run
/// ends first.
pub async fn wait_for(
    stream: &mut baton_client::Events,
    seen: &mut Vec<baton_client::pb::RunEvent>,
    want: impl Fn(&baton_client::pb::RunEvent) -> bool,
) -> baton_client::pb::RunEvent {
    use futures::StreamExt;
    loop {
        let e = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("event in time")
            .expect("stream open")
            .expect("event");
        seen.push(e.clone());
        if want(&e) {
            return e;
        }
        assert!(
            !events::is_terminal(&e),
            "the run ended before the awaited event: {e:?}"
        );
    }
}

/// Polls `f` every 50 ms until it answers true; panics after 20 s naming
/// `what`.
pub async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The grpc.health.v1 status of `service` at `endpoint` (a
/// `ServingStatus` as i32), or -1 when nothing answers.
pub async fn health(endpoint: &str, service: &str) -> i32 {
    let Ok(channel) = baton_client::channel(endpoint.to_owned()).await else {
        return -1;
    };
    let mut h = tonic_health::pb::health_client::HealthClient::new(channel);
    h.check(tonic_health::pb::HealthCheckRequest {
        service: service.into(),
    })
    .await
    .map(|r| r.into_inner().status)
    .unwrap_or(-1)
}

/// The services `endpoint` lists through server reflection v1, sorted.
pub async fn reflected_services(endpoint: &str) -> Vec<String> {
    use futures::StreamExt;
    use tonic_reflection::pb::v1;
    let channel = baton_client::channel(endpoint.to_owned())
        .await
        .expect("channel");
    let mut client = v1::server_reflection_client::ServerReflectionClient::new(channel);
    let req = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut resp = client
        .server_reflection_info(futures::stream::iter([req]))
        .await
        .expect("v1")
        .into_inner();
    let msg = resp.next().await.expect("a reply").expect("ok");
    let Some(v1::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        msg.message_response
    else {
        panic!("unexpected reflection reply");
    };
    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    names
}

/// The Prometheus text a `/metrics` endpoint at `addr` serves.
pub async fn scrape(addr: SocketAddr) -> String {
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("scrape")
        .text()
        .await
        .expect("body")
}
