#!/usr/bin/env python3
"""Checks deploy/compose/compose.yaml without a Docker engine.

Every service's:
  image    pinned to a version tag; a `build` names an existing context,
           Dockerfile and stage (`FROM ... AS <target>`);
  ports    each published container port is one the service listens on
           (Baton services: their *_LISTEN variables, which the Dockerfile
           stage must EXPOSE; third-party images: the table below), host ports
           unique;
  env      Baton services: the real binary loads and validates its config
           from exactly this environment (`--print-config`; configs refuse
           unknown fields, so a misspelt variable fails), and every URL in it
           names a service of this file and a port that service listens on;
  volumes  bind sources exist, targets are absolute, named volumes are
           declared and every declared one is used; files the config names
           (agents file) are mounted or copied into the image;
  depends  `depends_on` names services; `service_healthy` needs a
           healthcheck, whose command exists in the image.

usage: check_compose.py [--bin-dir target/debug] [--self-test] [compose.yaml]
Exit 0 when every check passes; otherwise each problem on one line, exit 1.
"""

import argparse
import copy
import os
import re
import subprocess
import sys

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_FILE = os.path.join(ROOT, "deploy", "compose", "compose.yaml")

# What third-party images listen on, and the programs their health checks may
# run. Adding an image here is a statement about that image: check its docs.
KNOWN_IMAGES = {
    "redis": {"ports": {6379}, "programs": {"redis-cli", "redis-server"}},
    "jaegertracing/jaeger": {"ports": {4317, 4318, 5778, 9411, 16686}, "programs": set()},
}

# Baton's binaries: the environment prefix of their config and the variables
# of the listen addresses.
BATON_BINARIES = {
    "baton-orchestrator": {"prefix": "BATON_ORCH_", "listen": ["BATON_ORCH_LISTEN", "BATON_ORCH_TELEMETRY__METRICS_LISTEN"], "defaults": [50051, 9464]},
    "baton-context-store": {"prefix": "BATON_STORE_", "listen": ["BATON_STORE_LISTEN", "BATON_STORE_TELEMETRY__METRICS_LISTEN"], "defaults": [50052, 9465]},
}

SERVICE_KEYS = {
    "image", "build", "command", "entrypoint", "environment", "env_file", "ports", "expose",
    "volumes", "tmpfs", "depends_on", "healthcheck", "restart", "read_only", "cap_drop",
    "cap_add", "security_opt", "user", "networks", "labels", "deploy", "working_dir",
    "stop_grace_period", "stop_signal", "init", "ulimits", "logging", "profiles",
    "container_name", "hostname", "extra_hosts", "mem_limit", "cpus", "pids_limit",
}
TOP_KEYS = {"name", "services", "volumes", "networks", "configs", "secrets"}

URL = re.compile(r"^(?:[a-z][a-z0-9+.-]*)://(?:[^@/]*@)?\[?([A-Za-z0-9_.:-]+?)\]?:(\d+)")
DNS_URL = re.compile(r"^dns:///([A-Za-z0-9_.-]+):(\d+)")
INTERP = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


class Stage:
    def __init__(self):
        self.expose = set()
        self.copies = {}  # destination -> source
        self.env = {}


def dockerfile_stages(path):
    """Stages by name: EXPOSEd ports, COPY destinations, ENV."""
    stages, current = {}, None
    text = open(path).read().replace("\\\n", " ")
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            m = re.search(r"\s+AS\s+([A-Za-z0-9_.-]+)\s*$", rest, re.I)
            current = Stage()
            if m:
                stages[m.group(1)] = current
        elif current is None:
            continue
        elif word == "EXPOSE":
            current.expose |= {int(p.split("/")[0]) for p in rest.split()}
        elif word == "COPY":
            parts = [p for p in rest.split() if not p.startswith("--")]
            if len(parts) >= 2:
                current.copies[parts[-1]] = parts[0]
        elif word == "ENV":
            for k, v in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=(\S+)", rest):
                current.env[k] = v
    return stages


def interpolate(value):
    return INTERP.sub(lambda m: os.environ.get(m.group(1), m.group(2) or ""), str(value))


def env_of(service):
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: interpolate(v) for k, v in env.items()}


def image_base(image):
    name = image.rsplit("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name, tag = name.rsplit(":", 1)
    else:
        tag = None
    return name, tag


def port_of(addr):
    return int(str(addr).rsplit(":", 1)[-1])


def check(doc, compose_path, bin_dir):
    problems = []
    base = os.path.dirname(os.path.abspath(compose_path))
    say = problems.append

    for key in doc:
        if key not in TOP_KEYS and not key.startswith("x-"):
            say(f"top level: unknown key {key!r}")
    services = doc.get("services") or {}
    if not services:
        say("services: none")
    declared_volumes = set((doc.get("volumes") or {}).keys())
    used_volumes = set()
    listens = {}   # service -> ports it listens on
    programs = {}  # service -> programs its image has
    files = {}     # service -> files in its image (COPY destinations)
    binaries = {}  # service -> Baton binary name

    # Pass 1: images, what each service listens on.
    for name, svc in services.items():
        where = f"services.{name}"
        for key in svc:
            if key not in SERVICE_KEYS and not key.startswith("x-"):
                say(f"{where}: unknown key {key!r}")
        image = svc.get("image")
        build = svc.get("build")
        if not image:
            say(f"{where}.image: missing (name the image, even when it is built)")
            continue
        img, tag = image_base(image)
        if not tag and "@" not in image:
            say(f"{where}.image: {image!r} has no tag")
        elif tag == "latest":
            say(f"{where}.image: {image!r} uses latest; pin a version")
        env = env_of(svc)
        if build:
            if isinstance(build, str):
                build = {"context": build}
            context = os.path.normpath(os.path.join(base, build.get("context", ".")))
            if not os.path.isdir(context):
                say(f"{where}.build.context: {build.get('context')!r} is not a directory")
                continue
            dockerfile = os.path.join(context, build.get("dockerfile", "Dockerfile"))
            if not os.path.isfile(dockerfile):
                say(f"{where}.build.dockerfile: {dockerfile} does not exist")
                continue
            stages = dockerfile_stages(dockerfile)
            target = build.get("target")
            if target not in stages:
                say(f"{where}.build.target: {target!r} is not a stage of {os.path.relpath(dockerfile, ROOT)} (stages: {', '.join(sorted(stages))})")
                continue
            stage = stages[target]
            binary = next((b for b in BATON_BINARIES if f"/usr/local/bin/{b}" in stage.copies), None)
            if binary is None:
                say(f"{where}: stage {target!r} copies no Baton service binary")
                continue
            binaries[name] = binary
            spec = BATON_BINARIES[binary]
            ports = set()
            for var, default in zip(spec["listen"], spec["defaults"]):
                value = env.get(var)
                if value == "":
                    continue
                ports.add(port_of(value) if value else default)
            for p in ports:
                if p not in stage.expose:
                    say(f"{where}: listens on {p} but stage {target!r} does not EXPOSE it (EXPOSE {sorted(stage.expose)})")
            listens[name] = ports
            programs[name] = {os.path.basename(d) for d in stage.copies if d.startswith("/usr/local/bin/")}
            files[name] = set(stage.copies) | {os.path.basename(d) for d in stage.copies}
        else:
            known = KNOWN_IMAGES.get(img)
            if known is None:
                say(f"{where}.image: {img!r} is not a Baton image nor one this checker knows (add it to KNOWN_IMAGES with its ports)")
                continue
            listens[name] = set(known["ports"])
            programs[name] = set(known["programs"])
            files[name] = set()

    # Pass 2: ports, environment, volumes, dependencies.
    host_ports = {}
    for name, svc in services.items():
        where = f"services.{name}"
        if name not in listens:
            continue
        for spec in svc.get("ports") or []:
            text = str(spec).split("/")[0]
            parts = text.split(":")
            try:
                container = int(parts[-1])
                host = int(parts[-2]) if len(parts) >= 2 else None
            except ValueError:
                say(f"{where}.ports: {spec!r} is not [ip:]host:container")
                continue
            if container not in listens[name]:
                say(f"{where}.ports: {spec!r} publishes {container}, which the service does not listen on (it listens on {sorted(listens[name])})")
            if host is not None:
                if host in host_ports:
                    say(f"{where}.ports: host port {host} is also published by {host_ports[host]}")
                host_ports[host] = name

        env = env_of(svc)
        mounts = set()
        for vol in svc.get("volumes") or []:
            if isinstance(vol, dict):
                source, target = vol.get("source"), vol.get("target")
            else:
                parts = str(vol).split(":")
                source, target = (parts[0], parts[1]) if len(parts) >= 2 else (None, parts[0])
            if not target or not target.startswith("/"):
                say(f"{where}.volumes: {vol!r}: the target must be an absolute path")
                continue
            mounts.add(target)
            if source and (source.startswith(".") or source.startswith("/")):
                path = os.path.normpath(os.path.join(base, source))
                if not os.path.exists(path):
                    say(f"{where}.volumes: {vol!r}: {source} does not exist")
            elif source:
                used_volumes.add(source)
                if source not in declared_volumes:
                    say(f"{where}.volumes: {vol!r}: named volume {source!r} is not declared under volumes")
        for tmp in svc.get("tmpfs") or []:
            mounts.add(str(tmp).split(":")[0])

        for var, value in env.items():
            m = DNS_URL.match(value) or URL.match(value)
            if not m:
                continue
            host, port = m.group(1), int(m.group(2))
            if host not in services:
                say(f"{where}.environment.{var}: {value!r} names host {host!r}, which is no service of this file")
            elif host in listens and port not in listens[host]:
                say(f"{where}.environment.{var}: {value!r}: {host} does not listen on {port} (it listens on {sorted(listens[host])})")
            elif host == name:
                say(f"{where}.environment.{var}: {value!r} points at the service itself")

        binary = binaries.get(name)
        if binary:
            spec = BATON_BINARIES[binary]
            # Variables ending in _FILE hold paths inside the container.
            for var, value in env.items():
                if var.startswith(spec["prefix"]) and value.startswith("/") and var.endswith("_FILE"):
                    if not any(value == m or value.startswith(m.rstrip("/") + "/") for m in mounts) and value not in files[name]:
                        say(f"{where}.environment.{var}: {value} is neither mounted nor in the image")
            exe = os.path.join(bin_dir, binary)
            if not os.access(exe, os.X_OK):
                say(f"{where}: {exe} is missing; build it first (cargo build --bins)")
            else:
                clean = {k: v for k, v in os.environ.items() if not k.startswith("BATON_") and not k.startswith("OTEL_")}
                clean.update(env)
                run = subprocess.run([exe, "--print-config"], env=clean, capture_output=True, text=True, timeout=60)
                if run.returncode != 0:
                    say(f"{where}.environment: {binary} refuses this environment: {run.stderr.strip() or run.stdout.strip()}")

        for dep, cond in (svc.get("depends_on") or {}).items() if isinstance(svc.get("depends_on"), dict) else ((d, {}) for d in svc.get("depends_on") or []):
            if dep not in services:
                say(f"{where}.depends_on: {dep!r} is no service of this file")
            elif (cond or {}).get("condition") == "service_healthy" and not services[dep].get("healthcheck"):
                say(f"{where}.depends_on.{dep}: service_healthy, but {dep} has no healthcheck")

        hc = svc.get("healthcheck")
        if hc and isinstance(hc.get("test"), list) and hc["test"] and hc["test"][0] == "CMD":
            program = os.path.basename(hc["test"][1]) if len(hc["test"]) > 1 else ""
            if program not in programs.get(name, set()):
                say(f"{where}.healthcheck: runs {program!r}, which the image does not have (it has {sorted(programs.get(name, set()))})")

    for unused in declared_volumes - used_volumes:
        say(f"volumes.{unused}: declared but no service mounts it")
    return problems


def self_test(doc, path, bin_dir):
    """Breaks the file one way at a time; each break must be reported."""
    def broken(mutate, expect):
        d = copy.deepcopy(doc)
        mutate(d)
        found = check(d, path, bin_dir)
        ok = any(expect in p for p in found)
        print(("ok   " if ok else "FAIL ") + f"self-test: {expect!r} reported")
        return ok

    s = lambda d: d["services"]
    cases = [
        (lambda d: s(d)["orchestrator"]["environment"].update({"BATON_ORCH_STORE__ENDPONT": "x"}), "refuses this environment"),
        (lambda d: s(d)["orchestrator"]["environment"].update({"BATON_ORCH_STORE__ENDPOINT": "http://context-store:50099"}), "does not listen on 50099"),
        (lambda d: s(d)["context-store"]["environment"].update({"BATON_STORE_REDIS__URL": "redis://valkey:6379"}), "no service of this file"),
        (lambda d: s(d)["orchestrator"]["ports"].append("127.0.0.1:8080:8080"), "publishes 8080"),
        (lambda d: s(d)["jaeger"]["ports"].append("127.0.0.1:9464:16686"), "host port 9464"),
        (lambda d: s(d)["orchestrator"]["volumes"].append("../config/nope.yaml:/etc/nope.yaml:ro"), "does not exist"),
        (lambda d: s(d)["orchestrator"]["volumes"].append("cache:/cache"), "not declared"),
        (lambda d: d.update({"volumes": {"spare": {}}}), "declared but no service mounts it"),
        (lambda d: s(d)["redis"].update({"image": "redis:latest"}), "uses latest"),
        (lambda d: s(d)["orchestrator"]["build"].update({"target": "orchestrater"}), "is not a stage"),
        (lambda d: s(d)["orchestrator"]["environment"].update({"BATON_ORCH_AGENTS_FILE": "/etc/other/agents.yaml"}), "neither mounted nor in the image"),
        (lambda d: s(d)["context-store"].pop("healthcheck"), "has no healthcheck"),
        (lambda d: s(d)["redis"].update({"healtcheck": {}}), "unknown key"),
    ]
    return all([broken(m, e) for m, e in cases])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=DEFAULT_FILE)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "target", "debug"))
    ap.add_argument("--self-test", action="store_true", help="also check that broken copies of the file are caught")
    args = ap.parse_args()
    with open(args.file) as f:
        doc = yaml.safe_load(f)
    problems = check(doc, args.file, args.bin_dir)
    for p in problems:
        print(f"FAIL {os.path.relpath(args.file, ROOT)}: {p}")
    ok = not problems
    if ok:
        print(f"ok   {os.path.relpath(args.file, ROOT)}: {len(doc['services'])} services: images, ports, environment, volumes, dependencies")
    if args.self_test:
        ok = self_test(doc, args.file, args.bin_dir) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
