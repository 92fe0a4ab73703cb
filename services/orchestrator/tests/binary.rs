//! The real `baton-orchestrator` binary refuses to start on a bad config,
//! naming what is wrong, before it listens.

use std::{path::PathBuf, process::Command};

fn start_with(vars: &[(&str, &str)]) -> (bool, String) {
    let agents = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/config/agents.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_baton-orchestrator"))
        .env("BATON_ORCH_LISTEN", "127.0.0.1:0")
        .env("BATON_ORCH_TELEMETRY__METRICS_LISTEN", "")
        .env("BATON_ORCH_STORE__MODE", "memory")
        .env("BATON_ORCH_AGENTS_FILE", agents)
        .envs(vars.iter().copied())
        .env_remove("RUST_LOG")
        .output()
        .expect("run baton-orchestrator");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_bad_api_keys_file_stops_the_start_naming_the_line() {
    let dir = std::env::temp_dir().join(format!("baton-orch-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join("api-keys");
    std::fs::write(&file, "acme acme-key-0123456789\nacme short\n").expect("write");
    let (ok, err) = start_with(&[(
        "BATON_ORCH_AUTH__API_KEYS_FILE",
        file.to_str().expect("utf-8"),
    )]);
    assert!(!ok);
    assert!(err.contains("line 2") && err.contains("16 to 256"), "{err}");

    let (ok, err) = start_with(&[("BATON_ORCH_AUTH__API_KEYS_FILE", "/nonexistent/keys")]);
    assert!(!ok);
    assert!(
        err.contains("auth.api_keys_file /nonexistent/keys"),
        "{err}"
    );
}

#[test]
fn bad_peers_and_store_endpoints_are_named() {
    let (ok, err) = start_with(&[("BATON_ORCH_PEERS__ENDPOINTS", r#"["dns:///orchestrator"]"#)]);
    assert!(!ok);
    assert!(err.contains("peers.endpoints[0]"), "{err}");
    let (ok, err) = start_with(&[
        ("BATON_ORCH_STORE__MODE", "remote"),
        ("BATON_ORCH_STORE__ENDPOINT", "dns:///store"),
    ]);
    assert!(!ok);
    assert!(
        err.contains("store.endpoint") && err.contains("needs a port"),
        "{err}"
    );
}

#[test]
fn zero_deadlines_are_refused_by_name() {
    for (var, field) in [
        ("BATON_ORCH_STORE__TIMEOUT", "store.timeout"),
        ("BATON_ORCH_PEERS__TIMEOUT", "peers.timeout"),
        ("BATON_ORCH_AUTH__RELOAD", "auth.reload"),
    ] {
        let (ok, err) = start_with(&[(var, "0s")]);
        assert!(!ok, "{var}=0s was accepted");
        assert!(err.contains(field), "{var}: {err}");
    }
}
