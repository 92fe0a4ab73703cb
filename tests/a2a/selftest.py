"""Checks client.py against remote_agent.py on every binding.

    .tools/a2a-venv/bin/python tests/a2a/selftest.py [-v]

Starts remote_agent.py twice (with gRPC; once without and once with a bearer
key), drives every client.py scenario over JSONRPC, HTTP+JSON and GRPC, and
prints one line per check. Exits 1 if any check fails. -v also prints the
client commands and their output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
VERBOSE = '-v' in sys.argv
BINDINGS = ['JSONRPC', 'HTTP+JSON', 'GRPC']

failures: list[str] = []


def start_agent(*extra: str) -> tuple[subprocess.Popen, int, int]:
    proc = subprocess.Popen(
        [PY, os.path.join(HERE, 'remote_agent.py'), '--grpc-port', '0', *extra],
        stdout=subprocess.PIPE,
        stderr=None if VERBOSE else subprocess.DEVNULL,
        text=True,
    )
    line = proc.stdout.readline().split()  # LISTENING <port> GRPC <port>
    assert line and line[0] == 'LISTENING', f'agent did not start: {line}'
    return proc, int(line[1]), int(line[3])


def client(card_url: str, *args: str, binding: str | None = None,
           key: str | None = None, version: str | None = None,
           background: bool = False):
    cmd = [PY, os.path.join(HERE, 'client.py'), '--card-url', card_url,
           '--timeout', '10']
    if binding:
        cmd += ['--binding', binding]
    if key:
        cmd += ['--key', key]
    if version:
        cmd += ['--version', version]
    cmd += list(args)
    if background:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return finish(cmd, done.returncode, done.stdout, done.stderr)


def finish(cmd, rc, stdout, stderr):
    lines = [json.loads(x) for x in stdout.splitlines() if x.strip()]
    if VERBOSE:
        print('   $', ' '.join(cmd[1:]))
        for x in lines:
            print('    ', json.dumps(x)[:240])
        if stderr.strip():
            print('     stderr:', stderr.strip()[-400:])
    return rc, lines


def check(name: str, ok: bool, detail: object = '') -> None:
    print(('ok   ' if ok else 'FAIL ') + name + ('' if ok else f'  -- {detail}'))
    if not ok:
        failures.append(name)


def kind(event: dict) -> str:
    """Which member of a StreamResponse is set (task, statusUpdate, ...)."""
    return next(iter(event))


def state(event: dict) -> str:
    body = event[kind(event)]
    return body.get('status', {}).get('state', '')


def text_of(parts: list[dict]) -> str:
    return ''.join(p.get('text', '') for p in parts)


def run_binding(card: str, b: str) -> None:
    # Blocking send: one Task, COMPLETED, artifact = the echoed sentence.
    rc, out = client(card, 'send', 'hello there', binding=b)
    task = out[0].get('task', {}) if out else {}
    check(f'{b} send', rc == 0 and state(out[0]) == 'TASK_STATE_COMPLETED'
          and text_of(task['artifacts'][0]['parts']) == 'Remote echo: hello there', out)

    # Streaming: Task, WORKING, 4 artifact chunks, COMPLETED.
    rc, out = client(card, 'stream', 'a b', binding=b)
    kinds = [kind(e) for e in out]
    check(f'{b} stream', rc == 0 and kinds[0] == 'task'
          and kinds.count('artifactUpdate') == 4
          and state(out[-1]) == 'TASK_STATE_COMPLETED', kinds)

    # ask -> INPUT_REQUIRED (the stream closes there) -> answer -> COMPLETED.
    rc, out = client(card, 'stream', 'ask me', binding=b)
    asked = out[-1] if out else {}
    check(f'{b} ask (stream ends at INPUT_REQUIRED)', rc == 0
          and state(asked) == 'TASK_STATE_INPUT_REQUIRED'
          and text_of(asked['statusUpdate']['status']['message']['parts']) == 'Which colour?', out)
    ask_id = out[0]['task']['id'] if rc == 0 else ''
    rc, out = client(card, 'answer', ask_id, 'blue', binding=b)
    done = out[0].get('task', {}) if out else {}
    check(f'{b} answer', rc == 0 and state(out[0]) == 'TASK_STATE_COMPLETED'
          and text_of(done['status']['message']['parts']) == 'You chose blue.', out)

    # ask again, answered over a stream this time.
    rc, out = client(card, 'send', 'ask again', binding=b)
    ask2 = out[0]['task']['id'] if rc == 0 else ''
    rc, out = client(card, 'answer', ask2, 'green', '--stream', binding=b)
    check(f'{b} answer --stream', rc == 0 and kind(out[0]) == 'statusUpdate'
          and state(out[-1]) == 'TASK_STATE_COMPLETED', [kind(e) for e in out])

    # get with history length 1: just the last message.
    rc, out = client(card, 'get', ask_id, '--history', '1', binding=b)
    check(f'{b} get --history 1', rc == 0 and len(out[0].get('history', [])) == 1, out)

    # list by state and by context.
    ctx = done.get('contextId', '')
    rc, out = client(card, 'list', '--status', 'completed', '--context', ctx, binding=b)
    ids = [t['id'] for t in out[0].get('tasks', [])] if rc == 0 else []
    check(f'{b} list --status --context', rc == 0 and ids == [ask_id], out)

    # fail -> FAILED with a message (not a client error).
    rc, out = client(card, 'send', 'fail please', binding=b)
    check(f'{b} fail', rc == 0 and state(out[0]) == 'TASK_STATE_FAILED', out)

    # send-nowait (returnImmediately): answers before the slow task is done.
    rc, out = client(card, 'send-nowait', 'slow nowait', binding=b)
    check(f'{b} send-nowait', rc == 0 and state(out[0]) in
          ('TASK_STATE_SUBMITTED', 'TASK_STATE_WORKING'), out)
    slow_id = out[0]['task']['id'] if rc == 0 else ''

    # subscribe to the slow task (2 s long), cancel it, the subscription
    # ends with CANCELED.
    sub = client(card, 'subscribe', slow_id, binding=b, background=True)
    time.sleep(0.6)
    rc, out = client(card, 'cancel', slow_id, binding=b)
    check(f'{b} cancel', rc == 0 and out[0]['status']['state'] == 'TASK_STATE_CANCELED', out)
    stdout, _ = sub.communicate(timeout=20)
    _, events = finish(['', 'subscribe'], sub.returncode, stdout, '')
    check(f'{b} subscribe sees CANCELED and ends', sub.returncode == 0
          and kind(events[0]) == 'task' and state(events[-1]) == 'TASK_STATE_CANCELED',
          [state(e) for e in events])

    # errors come back as the SDK's typed exceptions.
    rc, out = client(card, 'get', 'no-such-task', binding=b)
    check(f'{b} get unknown -> TaskNotFoundError', rc == 3
          and out[0]['error']['type'] == 'TaskNotFoundError', out)
    rc, out = client(card, 'cancel', ask_id, binding=b)
    check(f'{b} cancel completed -> TaskNotCancelableError', rc == 3
          and out[0]['error']['type'] == 'TaskNotCancelableError', out)
    rc, out = client(card, 'subscribe', ask_id, binding=b)
    check(f'{b} subscribe completed -> UnsupportedOperationError', rc == 3
          and out[0]['error']['type'] == 'UnsupportedOperationError', out)
    if b != 'GRPC':  # the SDK's gRPC server does not check A2A-Version
        rc, out = client(card, 'get', ask_id, binding=b, version='2.0')
        check(f'{b} A2A-Version 2.0 -> VersionNotSupportedError', rc == 3
              and out[0]['error']['type'] == 'VersionNotSupportedError', out)


def main() -> int:
    agent, port, grpc_port = start_agent()
    card = f'http://127.0.0.1:{port}/a2a/remote-echo'
    try:
        rc, out = client(card, 'card')
        names = [i['protocolBinding'] for i in out[0].get('supportedInterfaces', [])]
        check('card', rc == 0 and out[0]['name'] == 'remote-echo'
              and names == BINDINGS, out)
        rc, out = client(f'http://127.0.0.1:{port}/.well-known/agent-card.json', 'card')
        check('card by full URL', rc == 0 and out[0]['name'] == 'remote-echo', out)
        for b in BINDINGS:
            run_binding(card, b)
        rc, out = client('', 'raw', 'POST', card, '--body',
                         '{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}',
                         version='none')
        check('raw JSON-RPC without A2A-Version -> -32009', rc == 0
              and out[1]['body']['error']['code'] == -32009, out)
    finally:
        agent.terminate()
        agent.wait(timeout=10)

    agent, port, grpc_port = start_agent('--key', 'sekret')
    card = f'http://127.0.0.1:{port}/a2a/remote-echo'
    try:
        for b in BINDINGS:
            rc, out = client(card, 'send', 'hi', binding=b, key='sekret')
            check(f'{b} with key', rc == 0 and state(out[0]) == 'TASK_STATE_COMPLETED', out)
            rc, out = client(card, 'send', 'hi', binding=b, key='wrong')
            check(f'{b} wrong key refused', rc == 3, out)
    finally:
        agent.terminate()
        agent.wait(timeout=10)

    print(f'{len(failures)} failed' if failures else 'all passed')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
