"""Starts the real `baton up` binary (orchestrator + in-memory context store)
with a test agents file whose remote tools are served by a Python ToolServer
in the test's own event loop. `BATON_BIN` names the binary (default: the
workspace's target/debug/baton, which `cargo test` builds)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from baton_client import Orchestrator, Store, ToolContext, ToolServer

REPO = Path(__file__).resolve().parents[3]
BIN = os.environ.get("BATON_BIN", str(REPO / "target" / "debug" / "baton"))

AGENTS = """
scripts:
  outer:
    - calls: [{{tool: inner, args: {{task: "find {{{{input}}}}"}}}}]
    - text: "outer: {{{{results}}}}"
  inner:
    - calls: [{{tool: py_search, args: {{query: "{{{{input}}}}", limit: 2}}}}]
    - text: "inner: {{{{results}}}}"
  picker:
    - calls: [{{tool: py_pick, args: {{}}}}]
    - text: "picked {{{{results}}}}"
  payer:
    - calls: [{{tool: write_context, args: {{key: paid, value: "yes"}}}}]
    - text: "paid: {{{{results}}}}"
  slow: [{{delay: 30s, text: never}}]
  echo: [{{text: "{{{{input}}}}"}}]
agents:
  outer: {{model: "scripted:outer", tools: [inner]}}
  inner: {{model: "scripted:inner", tools: [py_search]}}
  picker: {{model: "scripted:picker", tools: [py_pick]}}
  payer: {{model: "scripted:payer", tools: [write_context], approvals: {{write_context: always}}}}
  slow: {{model: "scripted:slow"}}
  echo: {{model: "scripted:echo"}}
tool_servers:
  py:
    endpoint: http://127.0.0.1:{port}
    tools: [py_search, py_pick]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_tools() -> ToolServer:
    tools = ToolServer()

    @tools.tool
    async def py_search(ctx: ToolContext, query: str, limit: int = 3) -> str:
        """Searches (in Python)."""
        for i in range(1, 3):
            await ctx.progress(50 * i, f"step {i}")
        return f"{limit} results for {query} at depth {ctx.depth}"

    @tools.tool
    async def py_pick(ctx: ToolContext) -> str:
        """Asks the person to pick a plan."""
        await ctx.options("Plans on offer", ["basic", "gold"])
        return await ctx.ask("Which plan?", ["basic", "gold"])

    return tools


@dataclass
class Baton:
    orchestrator: Orchestrator
    store: Store
    tools: ToolServer
    orchestrator_target: str = ""


@contextlib.asynccontextmanager
async def running(
    api_keys: str | None = None, api_key: str | None = None, example_agents: bool = False
) -> AsyncIterator[Baton]:
    """`baton up` with the test agents and a Python tool server; with
    ``api_keys`` (the text of a keys file) it requires API keys, and the
    yielded orchestrator client sends ``api_key``. With ``example_agents``
    it serves the repository's example agents (deploy/config/agents.yaml,
    what `baton up` serves in the repository) instead of the test agents."""
    tools = make_tools()
    tool_port = await tools.start("127.0.0.1:0")
    orch, store = free_port(), free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(AGENTS.format(port=tool_port))
        agents = f.name
    extra: list[str] = [] if example_agents else ["--agents", agents]
    keys_file: str | None = None
    if api_keys is not None:
        with tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False) as f:
            f.write(api_keys)
            keys_file = f.name
            extra += ["--api-keys-file", keys_file]
    proc = await asyncio.create_subprocess_exec(
        BIN, "up", "--listen", f"127.0.0.1:{orch}", "--store-listen", f"127.0.0.1:{store}",
        *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        cwd=REPO if example_agents else None,  # in the repository `baton up` serves its example agents
    )
    try:
        assert proc.stdout is not None
        while True:
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line, "baton up exited before it was up"
            if b"Baton is up" in line:
                break
        async with Orchestrator(f"127.0.0.1:{orch}", api_key=api_key) as o, Store(f"127.0.0.1:{store}") as s:
            yield Baton(o, s, tools, f"127.0.0.1:{orch}")
    finally:
        proc.terminate()
        await proc.wait()
        await tools.stop()
        os.unlink(agents)
        if keys_file is not None:
            os.unlink(keys_file)


STORE_BIN = str(Path(BIN).with_name("baton-context-store"))


@dataclass
class Pki:
    """A CA and the certificates it issued (made at test time, with the
    ``openssl`` command): a server certificate for ``localhost`` and
    ``127.0.0.1``, and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_pki(directory: Path) -> Pki:
    import subprocess

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
        "-subj", "/CN=baton-test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for name, usage in (("server", "serverAuth"), ("client", "clientAuth")):
        (directory / f"{name}.ext").write_text(
            "basicConstraints=CA:FALSE\n"
            f"extendedKeyUsage={usage}\n"
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
        )
        run("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-extfile", f"{name}.ext", "-out", f"{name}.pem")
    return Pki(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
    )


@contextlib.asynccontextmanager
async def authenticated_store(
    api_keys: str, token: str, pki: Pki | None = None, mtls: bool = False
) -> AsyncIterator[str]:
    """The real `baton-context-store` binary (memory backend) that
    authenticates every call: clients' ``api_keys`` (the text of a keys
    file) and the service ``token``; with ``pki`` it speaks TLS only (and
    with ``mtls`` requires client certificates of its CA). Yields its
    target."""
    port = free_port()
    secrets = tempfile.mkdtemp()
    keys_file, token_file = Path(secrets) / "keys", Path(secrets) / "token"
    keys_file.write_text(api_keys)
    token_file.write_text(token)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATON_")}
    env.update({
        "BATON_STORE_LISTEN": f"127.0.0.1:{port}",
        "BATON_STORE_BACKEND": "memory",
        "BATON_STORE_TELEMETRY__METRICS_LISTEN": "",
        "BATON_STORE_AUTH__API_KEYS_FILE": str(keys_file),
        "BATON_STORE_AUTH__SERVICE_TOKEN_FILE": str(token_file),
    })
    if pki is not None:
        env["BATON_STORE_TLS__CERT_FILE"] = str(pki.server_cert)
        env["BATON_STORE_TLS__KEY_FILE"] = str(pki.server_key)
        if mtls:
            env["BATON_STORE_TLS__CLIENT_CA_FILE"] = str(pki.ca)
    proc = await asyncio.create_subprocess_exec(
        STORE_BIN, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        while True:
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line, "baton-context-store exited before it listened"
            if b"context store listening" in line:
                break
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        await proc.wait()
        keys_file.unlink()
        token_file.unlink()
        os.rmdir(secrets)

