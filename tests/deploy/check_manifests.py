#!/usr/bin/env python3
"""Checks what the rendered overlays promise, beyond schemas and checkov.

usage: check_manifests.py BIN_DIR dev.yaml prod.yaml cert-manager.yaml
(BIN_DIR holds the built baton-orchestrator and baton-context-store.)
Prints one `ok`/`FAIL` line per check; exit 1 when any fails.
"""

import os
import subprocess
import sys
import tempfile

import yaml

BIN_DIR = "target/debug"
# Stand-ins for the Secrets' contents, to check that the binaries accept
# every variable the manifests set.
PLACEHOLDERS = {
    "BATON_STORE_REDIS__URL__FILE": "redis://redis.example:6379",
    "BATON_ORCH_RUNS__REDIS__URL__FILE": "redis://redis.example:6379",
}

results = []


def expect(ok, what):
    results.append(bool(ok))
    print(("ok   " if ok else "FAIL ") + what)


def duration_s(text):
    text = str(text)
    for unit, size in (("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600)):
        if text.endswith(unit) and text[: -len(unit)].isdigit():
            return int(text[: -len(unit)]) * size
    return int(text)


def load(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def env(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def ingress_sources(policy):
    """(pod label name or '*', port) pairs a NetworkPolicy admits."""
    out = set()
    for rule in policy["spec"].get("ingress", []):
        ports = [p["port"] for p in rule.get("ports", [])] or ["*"]
        peers = rule.get("from")
        names = ["*"] if not peers else [
            (p.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name", "*")
             if "namespaceSelector" not in p else "namespace:" + str(p["namespaceSelector"].get("matchLabels")))
            for p in peers
        ]
        out |= {(n, port) for n in names for port in ports}
    return out


def common(name, res):
    deployments = {n: d for (k, n), d in res.items() if k == "Deployment"}
    # The orchestrator's drain is its grace plus 5 s for cancelled runs'
    # terminal events to reach their clients (RUN_FLUSH).
    for svc, grace_var, flush in (("baton-orchestrator", "BATON_ORCH_SHUTDOWN_GRACE", 5),
                                  ("baton-context-store", "BATON_STORE_SHUTDOWN_GRACE", 0)):
        d = deployments.get(svc)
        expect(d is not None, f"{name}: Deployment {svc}")
        if d is None:
            continue
        pod = d["spec"]["template"]["spec"]
        c = pod["containers"][0]
        e = env(c)
        sc = c.get("securityContext", {})
        psc = pod.get("securityContext", {})
        expect(sc.get("readOnlyRootFilesystem") is True and sc.get("allowPrivilegeEscalation") is False
               and sc.get("capabilities", {}).get("drop") == ["ALL"] and sc.get("runAsNonRoot") is True
               and psc.get("runAsNonRoot") is True and psc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
               f"{name}: {svc} runs non-root, read-only, no privilege escalation, no capabilities, seccomp RuntimeDefault")
        port = c["ports"][0]["containerPort"]
        prefix = "BATON_ORCH_" if svc == "baton-orchestrator" else "BATON_STORE_"
        if e.get(prefix + "TLS__CERT_FILE"):
            # Kubelet gRPC probes cannot speak TLS: the plaintext health port.
            health = e.get(prefix + "SERVER__HEALTH_LISTEN", "")
            port = int(health.rsplit(":", 1)[1]) if ":" in health else -1
            expect(any(p["containerPort"] == port for p in c["ports"]),
                   f"{name}: {svc} speaks TLS and serves health in plaintext on {port} for the probes")
        expect(c.get("readinessProbe", {}).get("grpc", {}).get("port") == port
               and c.get("livenessProbe", {}).get("grpc", {}) == {"port": port, "service": "liveness"},
               f"{name}: {svc} has native gRPC readiness (overall health) and liveness (\"liveness\") probes on {port}")
        r = c.get("resources", {})
        expect(all(r.get(k, {}).get(x) for k in ("requests", "limits") for x in ("cpu", "memory")),
               f"{name}: {svc} has CPU and memory requests and limits")
        # The drain: preStop sleep + shutdown grace (+ flush) for open calls
        # + as long again for background tasks + 5 s span flush.
        pre = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        grace = duration_s(e.get(grace_var, "30s"))
        drain = pre + 2 * (grace + flush) + 5
        tgp = pod.get("terminationGracePeriodSeconds", 30)
        expect(tgp > drain, f"{name}: {svc} terminationGracePeriodSeconds {tgp} > worst drain {drain:g} s")
        expect(pod.get("automountServiceAccountToken") is False, f"{name}: {svc} mounts no service-account token")
        # The binary itself accepts exactly this environment (its config
        # refuses unknown fields, so a misspelt variable fails here).
        binary = os.path.join(BIN_DIR, svc)
        run_env = {k: v for k, v in os.environ.items() if not k.startswith(("BATON_", "OTEL_"))}
        with tempfile.TemporaryDirectory() as tmp:
            for var, value in e.items():
                if value is None:
                    continue
                if var in PLACEHOLDERS:
                    path = os.path.join(tmp, var)
                    open(path, "w").write(PLACEHOLDERS[var] + "\n")
                    value = path
                run_env[var] = value
            run = subprocess.run([binary, "--print-config"], env=run_env, capture_output=True, text=True, timeout=60)
        expect(run.returncode == 0, f"{name}: {svc} starts with the manifest's environment ({binary} --print-config)"
               + ("" if run.returncode == 0 else ": " + (run.stderr or run.stdout).strip()))
    orch = deployments.get("baton-orchestrator")
    if orch:
        e = env(orch["spec"]["template"]["spec"]["containers"][0])
        expect(e.get("BATON_ORCH_STORE__ENDPOINT", "").startswith("dns:///baton-context-store-headless:"),
               f"{name}: the orchestrator balances over every store pod (dns:/// on the headless Service)")
        expect(e.get("BATON_ORCH_PEERS__ENDPOINTS") == '["dns:///baton-orchestrator-peers:50051"]'
               and res.get(("Service", "baton-orchestrator-peers"), {}).get("spec", {}).get("publishNotReadyAddresses") is True,
               f"{name}: replicas forward run-scoped calls to every orchestrator pod, draining ones included")
        headless = res.get(("Service", "baton-context-store-headless"))
        expect(headless and headless["spec"].get("clusterIP") == "None", f"{name}: baton-context-store-headless is headless")
        vols = {v["name"]: v for v in orch["spec"]["template"]["spec"]["volumes"]}
        agents = vols.get("agents", {}).get("configMap", {}).get("name", "")
        expect(agents.startswith("baton-agents-") and ("ConfigMap", agents) in res
               and "agents.yaml" in res[("ConfigMap", agents)]["data"],
               f"{name}: the orchestrator mounts the agents ConfigMap built from deploy/config/agents.yaml")
        api = vols.get("api-keys", {}).get("secret", {})
        expect(api.get("secretName", "").startswith("baton-api-keys") and not api.get("optional")
               and e.get("BATON_ORCH_AUTH__API_KEYS_FILE") == "/var/run/secrets/baton/api-keys/keys",
               f"{name}: clients authenticate with API keys from the Secret baton-api-keys (required)")
        keys = vols.get("model-keys", {}).get("secret", {})
        expect(keys.get("secretName") == "baton-model-keys" and keys.get("optional") is True,
               f"{name}: model-provider keys come from the Secret baton-model-keys (optional)")
    store = deployments.get("baton-context-store")
    if store:
        vols = {v["name"]: v for v in store["spec"]["template"]["spec"]["volumes"]}
        e = env(store["spec"]["template"]["spec"]["containers"][0])
        expect(vols.get("redis", {}).get("secret", {}).get("secretName", "").startswith("baton-redis")
               and e.get("BATON_STORE_REDIS__URL__FILE") == "/var/run/secrets/baton/redis/url",
               f"{name}: the store reads the Redis URL from the Secret baton-redis, as a file")
        orch_c = orch["spec"]["template"]["spec"]["containers"][0] if orch else {}
        orch_vols = {v["name"]: v for v in orch["spec"]["template"]["spec"]["volumes"]} if orch else {}

        def token_of(c, vols, var):
            # The Secret mounted where `var` points.
            path = env(c).get(var) or ""
            for m in c.get("volumeMounts", []):
                if path.startswith(m["mountPath"].rstrip("/") + "/"):
                    return vols.get(m["name"], {}).get("secret", {}).get("secretName", "")
            return ""
        store_c = store["spec"]["template"]["spec"]["containers"][0]
        store_secret = token_of(store_c, vols, "BATON_STORE_AUTH__SERVICE_TOKEN_FILE")
        orch_secret = token_of(orch_c, orch_vols, "BATON_ORCH_STORE__TOKEN_FILE")
        expect(store_secret.startswith("baton-store-token") and store_secret == orch_secret
               and e.get("BATON_STORE_AUTH__MODE", "keys") == "keys",
               f"{name}: the store authenticates every call; the orchestrator presents the service token of the Secret it checks ({store_secret or 'none'} / {orch_secret or 'none'})")
        api = vols.get("api-keys", {}).get("secret", {})
        expect(api.get("secretName", "").startswith("baton-api-keys")
               and e.get("BATON_STORE_AUTH__API_KEYS_FILE") == "/var/run/secrets/baton/api-keys/keys",
               f"{name}: the store accepts the clients' API keys of the Secret baton-api-keys")
    orch = deployments.get("baton-orchestrator")
    if orch:
        vols = {v["name"]: v for v in orch["spec"]["template"]["spec"]["volumes"]}
        e = env(orch["spec"]["template"]["spec"]["containers"][0])
        expect(e.get("BATON_ORCH_RUNS__STORE") == "redis"
               and vols.get("redis", {}).get("secret", {}).get("secretName", "").startswith("baton-redis")
               and e.get("BATON_ORCH_RUNS__REDIS__URL__FILE") == "/var/run/secrets/baton/redis/url",
               f"{name}: the orchestrator keeps runs durable in the Redis of the Secret baton-redis")
    sp = res.get(("NetworkPolicy", "baton-context-store"))
    expect(sp and {s for s in ingress_sources(sp) if s[1] == 50052} == {("baton-orchestrator", 50052)},
           f"{name}: only the orchestrator reaches the store's gRPC port")
    for svc in ("baton-orchestrator", "baton-context-store"):
        pdb = res.get(("PodDisruptionBudget", svc))
        expect(pdb and pdb["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": svc},
               f"{name}: PodDisruptionBudget for {svc}")
    return deployments


def tls_mounts(deployment, prefix, variables):
    """The Secret each of `variables` (file paths) is read from."""
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    vols = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    e = env(c)
    out = {}
    for var in variables:
        path = e.get(prefix + var) or ""
        out[var] = ""
        for m in c.get("volumeMounts", []):
            if path.startswith(m["mountPath"].rstrip("/") + "/"):
                out[var] = vols.get(m["name"], {}).get("secret", {}).get("secretName", "")
    return e, out


def check_tls(prod, certificates):
    """prod: TLS on both ports, orchestrator → store and → peers; the
    certificates the cert-manager component issues are the Secrets mounted,
    for the names the clients use."""
    orch, store = prod[("Deployment", "baton-orchestrator")], prod[("Deployment", "baton-context-store")]
    oe, om = tls_mounts(orch, "BATON_ORCH_", ["TLS__CERT_FILE", "TLS__KEY_FILE", "STORE__TLS__CA_FILE",
                                              "STORE__TLS__CERT_FILE", "PEERS__TLS__CA_FILE"])
    se, sm = tls_mounts(store, "BATON_STORE_", ["TLS__CERT_FILE", "TLS__KEY_FILE", "TLS__CLIENT_CA_FILE"])
    expect(set(om.values()) == {"baton-orchestrator-tls"} and set(sm.values()) == {"baton-context-store-tls"},
           f"prod: TLS files come from the Secrets baton-orchestrator-tls / baton-context-store-tls ({om}, {sm})")
    expect(oe.get("BATON_ORCH_STORE__TLS__ENABLED") == "true" and oe.get("BATON_ORCH_PEERS__TLS__ENABLED") == "true",
           "prod: the orchestrator reaches the store and its peers over TLS")
    expect(bool(se.get("BATON_STORE_TLS__CLIENT_CA_FILE")),
           "prod: the store requires client certificates (mTLS; the orchestrator presents its own)")
    certs = {d["spec"]["secretName"]: d["spec"] for (k, _), d in certificates.items() if k == "Certificate"}
    o, s_ = certs.get("baton-orchestrator-tls", {}), certs.get("baton-context-store-tls", {})
    expect({"server auth", "client auth"} <= set(o.get("usages", [])) and "server auth" in s_.get("usages", []),
           "cert-manager: the orchestrator's certificate serves and authenticates it as a client; the store's serves")
    expect({"baton-orchestrator", "baton-orchestrator-peers"} <= set(o.get("dnsNames", []))
           and {"baton-context-store", "baton-context-store-headless"} <= set(s_.get("dnsNames", [])),
           "cert-manager: the certificates name the Services clients and replicas use")
    issuers = {n for (k, n) in certificates if k == "Issuer"}
    expect(all(c["issuerRef"]["name"] in issuers for c in certs.values()),
           "cert-manager: every certificate's issuer is in the component")


def main(bin_dir, dev_path, prod_path, cert_manager_path):
    global BIN_DIR
    BIN_DIR = bin_dir
    dev, prod = load(dev_path), load(prod_path)
    check_tls(prod, load(cert_manager_path))
    for svc in ("baton-orchestrator", "baton-context-store"):
        e = env(dev[("Deployment", svc)]["spec"]["template"]["spec"]["containers"][0])
        expect(not any(k.endswith("TLS__CERT_FILE") for k in e),
               f"dev: {svc} needs no PKI (plaintext inside the dev cluster)")
    d = common("dev", dev)
    for svc in ("baton-orchestrator", "baton-context-store", "redis", "jaeger"):
        expect(svc in d and d[svc]["spec"]["replicas"] == 1, f"dev: one replica of {svc}")
    expect(("HorizontalPodAutoscaler", "baton-orchestrator") not in dev, "dev: no autoscaler")
    for svc in ("baton-orchestrator", "baton-context-store"):
        e = env(d[svc]["spec"]["template"]["spec"]["containers"][0])
        expect(e.get("OTEL_EXPORTER_OTLP_ENDPOINT") == "http://jaeger:4317", f"dev: {svc} sends OTLP to Jaeger")
    jaeger_ports = {p["port"] for p in dev[("Service", "jaeger")]["spec"]["ports"]}
    expect({4317, 16686} <= jaeger_ports, "dev: Jaeger serves OTLP/gRPC 4317 and the UI 16686")
    rp = dev.get(("NetworkPolicy", "redis"))
    expect(rp and ingress_sources(rp) == {("baton-context-store", 6379), ("baton-orchestrator", 6379)},
           "dev: only the context store and the orchestrator (durable runs) reach Redis")
    secret = [n for (k, n) in dev if k == "Secret" and n.startswith("baton-redis-")]
    expect(secret, "dev: the Secret baton-redis is generated (redis://redis:6379)")
    api = [d for (k, n), d in dev.items() if k == "Secret" and n.startswith("baton-api-keys-")]
    expect(api and "keys" in api[0]["data"], "dev: the Secret baton-api-keys is generated (tenant dev)")

    p = common("prod", prod)
    for svc in ("baton-orchestrator", "baton-context-store"):
        spec = p[svc]["spec"]
        expect(spec["replicas"] >= 3, f"prod: {svc} runs {spec['replicas']} replicas")
        keys = {c["topologyKey"]: c["whenUnsatisfiable"] for c in spec["template"]["spec"].get("topologySpreadConstraints", [])}
        expect(keys == {"topology.kubernetes.io/zone": "ScheduleAnyway", "kubernetes.io/hostname": "DoNotSchedule"},
               f"prod: {svc} spreads over zones and nodes")
    hpa = prod.get(("HorizontalPodAutoscaler", "baton-orchestrator"))
    expect(hpa and hpa["spec"]["minReplicas"] >= 3 and hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"],
           "prod: the orchestrator autoscales from 3")
    expect("redis" not in p and not any(k == "Secret" for (k, _) in prod),
           "prod: no Redis and no Secret in the manifests (external Redis; Secrets made out of band)")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main(*sys.argv[1:5])
