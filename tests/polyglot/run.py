"""The polyglot conformance scenario: one scenario (scenario.json, agents.yaml),
three clients, the real binaries.

Starts a redis-server, the context store and the orchestrator binaries (the
orchestrator on the store service on Redis), a Python tool server (in this
process) and a TypeScript tool server (node), then has the Rust
(`baton-scenario`), Python (below) and TypeScript (`scenario_main.js`)
clients each run the scenario. Every client must see, for every run, the
same events — per context, the same sequence of (event kind, context id,
depth), contexts appearing in the same order — as expected.json, the same
outputs, and the same typed errors. (Per context rather than one global
order because a pipeline step's ContextWritten is written behind and may
interleave with the next step's events.)

    python tests/polyglot/run.py [--record]

`--record` writes expected.json from the Rust client's run (review it!).
Prints a closing `N passed, M failed in Xs` line, which tests/run tallies.
Uses BATON_TARGET_DIR (default target/debug) for the binaries.

Security is on as in production: both servers speak TLS only with
certificates of a CA made here (openssl); the store requires client
certificates (the orchestrator's is its service credential) and API keys;
the orchestrator requires API keys, and every client reaches it over
``https://`` with the CA and a key.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

from baton_client import BatonError, Orchestrator, Store, ToolContext, ToolServer, kind

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python" / "tests"))
from conftest import Pki, make_pki  # noqa: E402  (the Python client tests' test CA)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TARGET = Path(os.environ.get("BATON_TARGET_DIR", ROOT / "target" / "debug"))
STORE_KEY = "polyglot-client-key-0123456789"
ORCH_KEY = "polyglot-orchestrator-key-0123456789"
TS_DIST = ROOT / "clients" / "typescript" / "dist" / "test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def python_tools() -> ToolServer:
    tools = ToolServer()

    @tools.tool
    async def py_lookup(ctx: ToolContext, query: str) -> str:
        """Looks facts up (Python)."""
        await ctx.progress(50, "looking")
        await ctx.progress(100, "found")
        return f"facts about {query}"

    return tools


async def python_client(endpoint: str, scenario: dict, pki: Pki) -> dict:
    """The Python client's runner: the same output shape as the others."""
    async with Orchestrator(endpoint, api_key=ORCH_KEY, ca_file=pki.ca) as baton:
        runs = {}
        for spec in scenario["runs"]:
            if "pipeline" in spec:
                p = spec["pipeline"]
                stream = baton.run_pipeline(
                    p["steps"], name=p.get("name", ""), mode=p.get("mode", "sequential"),
                    max_concurrency=p.get("max_concurrency"),
                )
            else:
                stream = baton.run_agent(spec["agent"], spec["input"], max_depth=spec.get("max_depth"))
            events, output = [], None
            async for e in stream:
                events.append([kind(e), e.context_id, e.depth])
                if kind(e) == "approval_requested":
                    await baton.resolve_approval(e.run_id, e.approval_requested.approval_id, True)
                if kind(e) == "run_completed":
                    output = e.run_completed.output
            runs[spec["name"]] = {"events": events, "output": output}
        bad = scenario["errors"]["unknown_agent"]
        try:
            await baton.run_agent(bad["agent"], bad["input"]).collect()
            unknown = {"code": "OK"}
        except BatonError as e:
            unknown = {"code": e.code.name, "field": e.field}
        slow = scenario["errors"]["disconnect"]
        stream = baton.run_agent(slow["agent"], slow["input"])
        first = await stream.__anext__()
        stream.cancel()
        from baton.v1 import orchestrator_pb2 as pb

        status = pb.RUN_STATUS_RUNNING
        for _ in range(100):
            status = (await baton.get_run(first.run_id)).status
            if status != pb.RUN_STATUS_RUNNING:
                break
            await asyncio.sleep(0.05)
        errors = {"unknown_agent": unknown, "disconnect": {"status": pb.RunStatus.Name(status)}}
    return {"client": "python", "runs": runs, "errors": errors}


def by_context(events: list) -> tuple[list, dict]:
    order, seqs = [], {}
    for k, ctx, depth in events:
        if ctx not in seqs:
            order.append(ctx)
            seqs[ctx] = []
        seqs[ctx].append([k, depth])
    return order, seqs


async def start(*cmd: str, env: dict | None = None, ready: bytes | None = None) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        *cmd, env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE if ready else asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    if ready:
        assert proc.stdout is not None
        while True:
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            if not line:
                raise RuntimeError(f"{cmd[0]} exited before it was ready")
            if ready in line:
                proc.ready_line = line.decode()  # type: ignore[attr-defined]
                break
    return proc


async def until(check, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            await check()
            return
        except Exception as e:  # not up yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not come up: {e}") from e
            await asyncio.sleep(0.1)


async def main(record: bool) -> int:
    began = time.monotonic()
    scenario = json.loads((HERE / "scenario.json").read_text())
    procs: list[asyncio.subprocess.Process] = []
    refusals: list[str] = []
    py_tools = python_tools()
    try:
        redis_port = free_port()
        procs.append(await start(
            "redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        ))
        # The store authenticates every call, as in production: the
        # orchestrator with the service token (stating each run's tenant),
        # this script with a client API key.
        secrets = Path(tempfile.mkdtemp())
        pki = make_pki(secrets)
        (secrets / "token").write_text("polyglot-service-token-0123\n")
        (secrets / "keys").write_text(f"polyglot {STORE_KEY}\n")
        (secrets / "orchestrator-keys").write_text(f"polyglot {ORCH_KEY}\n")
        store_port = free_port()
        procs.append(await start(str(TARGET / "baton-context-store"), env={
            "BATON_STORE_LISTEN": f"127.0.0.1:{store_port}",
            "BATON_STORE_REDIS__URL": f"redis://127.0.0.1:{redis_port}",
            "BATON_STORE_TELEMETRY__METRICS_LISTEN": "",
            "BATON_STORE_AUTH__SERVICE_TOKEN_FILE": str(secrets / "token"),
            "BATON_STORE_AUTH__API_KEYS_FILE": str(secrets / "keys"),
            "BATON_STORE_TLS__CERT_FILE": str(pki.server_cert),
            "BATON_STORE_TLS__KEY_FILE": str(pki.server_key),
            "BATON_STORE_TLS__CLIENT_CA_FILE": str(pki.ca),
        }))
        mtls = {"ca_file": pki.ca, "cert_file": pki.client_cert, "key_file": pki.client_key}
        async with Store(f"https://localhost:{store_port}", api_key=STORE_KEY, **mtls) as store:
            await until(lambda: store.list("00000000000000000000000000000001"), "the context store on Redis")
        py_port = await py_tools.start("127.0.0.1:0")
        ts = await start("node", str(TS_DIST / "toolhost_main.js"), ready=b"listening")
        procs.append(ts)
        ts_port = int(ts.ready_line.split()[1])  # type: ignore[attr-defined]
        agents = (HERE / "agents.yaml").read_text().replace("PY_PORT", str(py_port)).replace("TS_PORT", str(ts_port))
        agents_file = Path(tempfile.mkdtemp()) / "agents.yaml"
        agents_file.write_text(agents)
        orch_port = free_port()
        procs.append(await start(str(TARGET / "baton-orchestrator"), env={
            "BATON_ORCH_LISTEN": f"127.0.0.1:{orch_port}",
            "BATON_ORCH_AGENTS_FILE": str(agents_file),
            "BATON_ORCH_STORE__MODE": "remote",
            "BATON_ORCH_STORE__ENDPOINT": f"https://localhost:{store_port}",
            "BATON_ORCH_STORE__TOKEN_FILE": str(secrets / "token"),
            "BATON_ORCH_STORE__TLS__CA_FILE": str(pki.ca),
            "BATON_ORCH_STORE__TLS__CERT_FILE": str(pki.client_cert),
            "BATON_ORCH_STORE__TLS__KEY_FILE": str(pki.client_key),
            "BATON_ORCH_TLS__CERT_FILE": str(pki.server_cert),
            "BATON_ORCH_TLS__KEY_FILE": str(pki.server_key),
            "BATON_ORCH_AUTH__API_KEYS_FILE": str(secrets / "orchestrator-keys"),
            "BATON_ORCH_TELEMETRY__METRICS_LISTEN": "",
        }))
        endpoint = f"https://localhost:{orch_port}"
        async with Orchestrator(endpoint, api_key=ORCH_KEY, ca_file=pki.ca) as o:
            await until(o.list_agents, "the orchestrator")
        # Nothing in clear, nothing without a key.
        for client in (Orchestrator(f"127.0.0.1:{orch_port}", api_key=ORCH_KEY),
                       Orchestrator(endpoint, ca_file=pki.ca)):
            async with client as o:
                try:
                    await o.list_agents(timeout=5)
                    refusals.append("a call in clear or without a key was answered")
                except BatonError:
                    pass

        async def external(client: str, *cmd: str) -> dict:
            env = {**os.environ, "BATON_CA_FILE": str(pki.ca), "BATON_API_KEY": ORCH_KEY}
            proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE, env=env)
            out, _ = await asyncio.wait_for(proc.communicate(), 120)
            if proc.returncode != 0:
                raise RuntimeError(f"the {client} runner failed ({proc.returncode})")
            return json.loads(out)

        scenario_file = str(HERE / "scenario.json")
        results = [
            await external("rust", str(TARGET / "baton-scenario"), endpoint, scenario_file),
            await python_client(endpoint, scenario, pki),
            await external("typescript", "node", str(TS_DIST / "scenario_main.js"), endpoint, scenario_file),
        ]
    finally:
        for p in procs:
            if p.returncode is None:
                p.terminate()
                await p.wait()
        await py_tools.stop()

    expected_file = HERE / "expected.json"
    if record:
        rust = results[0]["runs"]
        expected_file.write_text(json.dumps({n: r["events"] for n, r in rust.items()}, indent=1) + "\n")
        print(f"recorded {expected_file}")
    expected = json.loads(expected_file.read_text())
    passed = failed = 0

    def check(ok: bool, what: str) -> None:
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
            print(f"FAILED: {what}")

    check(not refusals, f"TLS and API keys hold: {refusals}")
    want_errors = scenario["errors"]
    for r in results:
        c = r["client"]
        for spec in scenario["runs"]:
            name = spec["name"]
            got = r["runs"][name]
            check(got["output"] == scenario["expected_outputs"][name],
                  f"{c} {name}: output {got['output']!r}")
            check(by_context(got["events"]) == by_context(expected[name]),
                  f"{c} {name}: events differ from expected.json")
        nested = r["runs"]["nested"]["events"]
        progress = [e for e in nested if e[0] == "tool_progress"]
        check(len(progress) == 3 and all(e[2] == 2 for e in progress),
              f"{c}: the Python and TypeScript tools' progress reached the client at depth 2: {progress}")
        u = r["errors"]["unknown_agent"]
        check(u == {"code": want_errors["unknown_agent"]["code"], "field": want_errors["unknown_agent"]["field"]},
              f"{c}: bad request gave {u}")
        d = r["errors"]["disconnect"]
        check(d == {"status": want_errors["disconnect"]["status"]}, f"{c}: disconnect left the run {d}")
    print(f"polyglot conformance: rust, python, typescript — {passed} passed, {failed} failed "
          f"in {time.monotonic() - began:.2f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main("--record" in sys.argv)))
