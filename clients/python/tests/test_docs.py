"""docs/first-agent.md followed as written: its tool server (saved as a file
and run with python), its agents files under `baton up`, and `baton run`,
whose output must be what the page shows."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time

from conftest import BIN, REPO, free_port

DOC = REPO / "docs" / "first-agent.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), re.S)


def wait_for_line(stream, needle: str, what: str, deadline_s: float = 60) -> str:
    seen = []
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return line
    raise AssertionError(f"{what} never printed {needle!r}; it printed: {''.join(seen)!r}")


def in_terminal(args: list[str], env: dict) -> subprocess.CompletedProcess:
    """Runs `baton` in a pseudo-terminal (util-linux `script`), as the page
    shows it: the live view draws for a terminal."""
    command = " ".join(shlex.quote(a) for a in [BIN, *args])
    return subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True,
                          text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)


def shown_matches(shown: str, actual: str) -> None:
    """Every line the page shows is in the terminal's output, in order; `…`
    in a shown line stands for anything (a trace id)."""
    plain = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", actual)
    lines = [s.strip() for l in plain.split("\n") for s in l.split("\r") if s.strip()]
    at = 0
    for want in (l.strip() for l in shown.splitlines() if l.strip()):
        pattern = ".*".join(re.escape(part) for part in want.split("…"))
        while at < len(lines) and not re.fullmatch(pattern, lines[at]):
            at += 1
        assert at < len(lines), f"the page shows {want!r}; the run printed:\n{actual}"
        at += 1


def test_the_first_agent_guide_runs_as_written(tmp_path):
    tool_port, orch_port, store_port = free_port(), free_port(), free_port()
    here = "127.0.0.1:50061"
    [tool_py] = blocks("python")
    agents_files = blocks("yaml")
    assert len(agents_files) == 3, "the page's agents files: scripted, real model, approval"
    script = tmp_path / "weather.py"
    script.write_text(tool_py.replace(here, f"127.0.0.1:{tool_port}"))
    agents = tmp_path / "my-agents.yaml"
    env = {**os.environ, "NO_COLOR": "1", "BATON_ENDPOINT": f"http://127.0.0.1:{orch_port}"}

    tools = subprocess.Popen([sys.executable, str(script)], stderr=subprocess.PIPE, text=True)
    up = None
    try:
        wait_for_line(tools.stderr, f"serving get_weather on 127.0.0.1:{tool_port}", "weather.py")

        def start(agents_yaml: str):
            agents.write_text(agents_yaml.replace(here, f"127.0.0.1:{tool_port}"))
            proc = subprocess.Popen(
                [BIN, "up", "--agents", str(agents), "--listen", f"127.0.0.1:{orch_port}",
                 "--store-listen", f"127.0.0.1:{store_port}"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
            wait_for_line(proc.stdout, "Baton is up", "baton up")
            return proc

        def stop(proc):
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 0

        # Step 3: the scripted agent, and the output the page shows.
        up = start(agents_files[0])
        ran = in_terminal(["run", "forecaster", "Lisbon"], env)
        assert ran.returncode == 0, ran.stdout
        shown = re.search(r"## 3\. Run it.*?```\n(▶.*?)```", DOC.read_text(), re.S).group(1)
        shown_matches(shown, ran.stdout)
        stop(up)

        # Step 5: the approval, answered from a flag.
        up = start(agents_files[2])
        denied = subprocess.run([BIN, "run", "forecaster", "Lisbon"], capture_output=True,
                                text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
        assert denied.returncode != 0 and "--approve" in denied.stderr, denied.stderr
        approved = subprocess.run([BIN, "run", "forecaster", "Lisbon", "--approve"],
                                  capture_output=True, text=True, env=env, timeout=60)
        assert approved.returncode == 0, approved.stderr
        assert "The forecast: sunny, 21 °C in Lisbon" in approved.stdout, approved.stdout
        stop(up)
        up = None
    finally:
        if up is not None:
            up.kill()
        tools.send_signal(signal.SIGTERM)
        assert tools.wait(timeout=10) == 0


def test_the_readme_quick_start_prints_what_it_shows(tmp_path):
    """clients/python/README.md's quick start, saved as a file and run with
    python against `baton up` on the example agents, prints the lines the
    README shows: the researcher's run three deep within its max_depth."""
    readme = (REPO / "clients" / "python" / "README.md").read_text()
    start = readme.index("## Quick start")
    [code] = re.findall(r"```python\n(.*?)```", readme[start:readme.index("## The API")], re.S)
    shown = re.search(r"It prints .*?\n\n```text\n(.*?)```", readme[start:], re.S).group(1)
    orch_port, store_port = free_port(), free_port()
    script = tmp_path / "quickstart.py"
    script.write_text(code.replace("127.0.0.1:50051", f"127.0.0.1:{orch_port}"))
    up = subprocess.Popen(
        [BIN, "up", "--listen", f"127.0.0.1:{orch_port}", "--store-listen", f"127.0.0.1:{store_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    try:
        wait_for_line(up.stdout, "Baton is up", "baton up")
        ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout == shown, f"the README shows:\n{shown}\nit printed:\n{ran.stdout}"
        assert "over max_depth" not in ran.stdout
    finally:
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=30) == 0


def test_the_readme_conversation_prints_what_it_shows(tmp_path):
    """clients/python/README.md's conversation example, saved as a file and
    run with python against `baton up` on the example agents, prints the
    lines the README shows: `chat` remembers what it was told."""
    readme = (REPO / "clients" / "python" / "README.md").read_text()
    section = readme[readme.index("## Conversations"):readme.index("## Serving tools")]
    [code] = re.findall(r"```python\n(.*?)```", section, re.S)
    shown = re.search(r"It prints:\n\n```text\n(.*?)```", section, re.S).group(1)
    orch_port, store_port = free_port(), free_port()
    script = tmp_path / "conversation.py"
    script.write_text(code.replace("127.0.0.1:50051", f"127.0.0.1:{orch_port}"))
    up = subprocess.Popen(
        [BIN, "up", "--listen", f"127.0.0.1:{orch_port}", "--store-listen", f"127.0.0.1:{store_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    try:
        wait_for_line(up.stdout, "Baton is up", "baton up")
        ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout == shown, f"the README shows:\n{shown}\nit printed:\n{ran.stdout}"
    finally:
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=30) == 0
