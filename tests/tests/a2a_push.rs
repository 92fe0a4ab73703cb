//! A2A push notifications: a config given with the message that starts a
//! task is delivered to (a `StreamResponse` of each state change, with
//! `Authorization` and the config's token), through the webhooks'
//! machinery; the four config operations on the JSON-RPC and HTTP+JSON
//! bindings (gRPC: the kit's run, docs/a2a.md), on a task that has ended
//! too; deleting is idempotent and stops deliveries; bad configs are
//! refused naming the field; a config made while a task works is
//! delivered to from then on; the extended card has the tenant's view.

use std::time::Duration;

use baton_e2e::{OrchestratorServer, webhooks::Receiver};
use serde_json::{Value, json};

const AGENTS: &str = r#"
scripts:
  asker:
    - text: "one question"
      calls:
        - tool: ask_user
          args: {question: "Which one?"}
    - text: "Thanks: {{results}}"
agents:
  asker:
    description: Asks one question.
    model: scripted:asker
    tools: [ask_user]
    a2a: true
"#;

async fn jsonrpc(server: &OrchestratorServer, method: &str, params: Value) -> Value {
    reqwest::Client::new()
        .post(format!("{}/a2a/asker", server.endpoint()))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .expect("call")
        .json()
        .await
        .expect("json")
}

fn message(id: &str, task: Option<&str>) -> Value {
    let mut m = json!({"role": "ROLE_USER", "messageId": id, "parts": [{"text": "pick"}]});
    if let Some(t) = task {
        m["taskId"] = json!(t);
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_configs_are_delivered_kept_listed_and_deleted_on_every_binding() {
    let receiver = Receiver::start();
    let server = OrchestratorServer::start(AGENTS, None, |c| {
        c.webhooks.allowed_hosts = vec!["*".into(), "127.0.0.1".into()];
        c.webhooks.poll = Duration::from_millis(100);
    })
    .await
    .expect("server");
    let card: Value = reqwest::get(format!(
        "{}/a2a/asker/.well-known/agent-card.json",
        server.endpoint()
    ))
    .await
    .expect("card")
    .json()
    .await
    .expect("json");
    assert_eq!(card["capabilities"]["pushNotifications"], true);

    // A task started with a config: it waits for input, then is answered.
    let config = json!({
        "id": "cfg-1",
        "url": receiver.url("/push"),
        "token": "tok-1",
        "authentication": {"scheme": "Bearer", "credentials": "secret-1"}
    });
    let sent = jsonrpc(
        &server,
        "SendMessage",
        json!({"message": message("m1", None), "configuration": {"taskPushNotificationConfig": config}}),
    )
    .await;
    let task = sent["result"]["task"]["id"]
        .as_str()
        .expect("a task")
        .to_owned();
    assert_eq!(
        sent["result"]["task"]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );
    let answered = jsonrpc(
        &server,
        "SendMessage",
        json!({"message": message("m2", Some(&task))}),
    )
    .await;
    assert!(answered.get("error").is_none(), "{answered}");
    let pushed = receiver
        .wait("/push", Duration::from_secs(15), |l| {
            l.iter()
                .any(|d| d["body"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED")
        })
        .await;
    let states: Vec<String> = pushed
        .iter()
        .map(|d| {
            let b = &d["body"];
            b["statusUpdate"]["status"]["state"]
                .as_str()
                .or(b["task"]["status"]["state"].as_str())
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(
        states,
        [
            "TASK_STATE_WORKING",
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED"
        ],
        "{pushed:#?}"
    );
    for d in &pushed {
        assert_eq!(d["authorization"], "Bearer secret-1");
        let task_of = d["body"]["statusUpdate"]["taskId"]
            .as_str()
            .or(d["body"]["task"]["id"].as_str());
        assert_eq!(task_of, Some(task.as_str()));
    }

    // The config is kept: Get and List show it (without its credentials),
    // after the task ended, on JSON-RPC and HTTP+JSON.
    let got = jsonrpc(
        &server,
        "GetTaskPushNotificationConfig",
        json!({"taskId": task, "id": "cfg-1"}),
    )
    .await;
    assert_eq!(got["result"]["url"], receiver.url("/push"), "{got}");
    assert_eq!(got["result"]["authentication"]["scheme"], "Bearer");
    assert!(
        got["result"]["authentication"]
            .get("credentials")
            .is_none_or(|c| c == ""),
        "{got}"
    );
    let http = reqwest::Client::new();
    let rest = |path: String| {
        format!(
            "{}/a2a/asker/tasks/{task}/pushNotificationConfigs{path}",
            server.endpoint()
        )
    };
    let made: Value = http
        .post(rest(String::new()))
        .header("A2A-Version", "1.0")
        .json(&json!({"id": "cfg-2", "url": "https://hooks.example.com/x"}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("json");
    assert_eq!(
        (made["id"].as_str(), made["taskId"].as_str()),
        (Some("cfg-2"), Some(task.as_str())),
        "{made}"
    );
    let listed: Value = http
        .get(rest(String::new()))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    let ids: Vec<&str> = listed["configs"]
        .as_array()
        .expect("configs")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(ids, ["cfg-1", "cfg-2"]);
    for _ in 0..2 {
        let deleted = http
            .delete(rest("/cfg-2".into()))
            .header("A2A-Version", "1.0")
            .send()
            .await
            .expect("delete");
        assert!(deleted.status().is_success(), "delete is idempotent");
    }
    let gone = jsonrpc(
        &server,
        "GetTaskPushNotificationConfig",
        json!({"taskId": task, "id": "cfg-2"}),
    )
    .await;
    assert_eq!(gone["error"]["code"], -32001, "{gone}");
    let unknown = jsonrpc(
        &server,
        "ListTaskPushNotificationConfigs",
        json!({"taskId": "0193e3a0-0000-7000-8000-000000000000"}),
    )
    .await;
    assert_eq!(unknown["error"]["code"], -32001, "{unknown}");

    // Bad configs name their field and keep nothing.
    for (config, field) in [
        (
            json!({"taskId": task, "id": "b", "url": "http://10.0.0.1/x"}),
            "url",
        ),
        (
            json!({"taskId": task, "id": "b", "url": "https://hooks.example.com/x", "authentication": {"scheme": ""}}),
            "authentication.scheme",
        ),
        (
            json!({"taskId": task, "id": "a/b", "url": "https://hooks.example.com/x"}),
            "id",
        ),
    ] {
        let refused = jsonrpc(&server, "CreateTaskPushNotificationConfig", config).await;
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(field)),
            "{field}: {refused}"
        );
    }
    let refused = jsonrpc(
        &server,
        "SendMessage",
        json!({"message": message("m3", None), "configuration": {"taskPushNotificationConfig": {"url": "http://10.0.0.1/"}}}),
    )
    .await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("configuration.taskPushNotificationConfig.url")),
        "{refused}"
    );
    let listed = jsonrpc(
        &server,
        "ListTaskPushNotificationConfigs",
        json!({"taskId": task}),
    )
    .await;
    assert_eq!(
        listed["result"]["configs"].as_array().map(Vec::len),
        Some(1)
    );

    // A config made while a task (started without one) waits: delivered
    // to from then on.
    let sent = jsonrpc(
        &server,
        "SendMessage",
        json!({"message": message("m4", None)}),
    )
    .await;
    let second = sent["result"]["task"]["id"]
        .as_str()
        .expect("a task")
        .to_owned();
    let made = jsonrpc(
        &server,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": second, "id": "later", "url": receiver.url("/later"), "token": "t2"}),
    )
    .await;
    assert_eq!(made["result"]["id"], "later", "{made}");
    jsonrpc(
        &server,
        "SendMessage",
        json!({"message": message("m5", Some(&second))}),
    )
    .await;
    let later = receiver
        .wait("/later", Duration::from_secs(15), |l| {
            l.iter()
                .any(|d| d["body"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED")
        })
        .await;
    assert!(
        later.iter().all(|d| d["authorization"] == ""),
        "no authentication given"
    );

    // The extended card: the card with the tenant's view.
    let card = jsonrpc(&server, "GetExtendedAgentCard", json!({})).await;
    let extensions = card["result"]["capabilities"]["extensions"]
        .as_array()
        .expect("extensions");
    let tenant = extensions
        .iter()
        .find(|e| e["uri"] == "https://baton.dev/a2a/extensions/tenant/v1")
        .expect("the tenant extension");
    assert_eq!(tenant["params"]["tenant"], "");
    assert_eq!(tenant["params"]["maxPushConfigsPerTask"], 16);
    server.shutdown().await.expect("shutdown");
}
