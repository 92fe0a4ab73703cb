#!/usr/bin/env python3
"""A fake OpenAI-compatible model for running the A2A test kit (a2a-tck)
against Baton. Test fixture only: no product behaviour lives here.

The kit tells its system under test what to do through the A2A messageId
prefix (`tck-input-required-...`, `tck-artifact-data-...`, ...). Baton's
agent `tck` (tests/a2a/tck-agents.yaml) runs with `a2a_io: message`, so
its input, and each answer to an `ask_user` question, is the caller's
whole A2A Message as proto3 JSON. This server reads the messageId out of
the latest user message or tool result and answers:

| messageId prefix        | answer                                              |
|-------------------------|-----------------------------------------------------|
| tck-input-required      | a tool call `ask_user {"question": ...}` (again     |
|                         | for every follow-up that carries this prefix)       |
| tck-artifact-text       | the text `Generated text content`                   |
| tck-artifact-file-url   | `{"artifacts": [url part, output.txt, text/plain]}` |
| tck-artifact-file       | `{"artifacts": [raw part, output.txt, text/plain]}` |
| tck-artifact-data       | `{"artifacts": [data {"key":"value","count":42}]}`  |
| tck-message-response    | `{"message": {... "Direct message response"}}`      |
| anything else           | a short text, streamed in a few deltas              |

Only `POST /v1/chat/completions` (and `/chat/completions`) is served,
streamed (`"stream": true`: SSE chunks, a usage chunk when
`stream_options.include_usage`, then `data: [DONE]`) or whole. `GET
/v1/models` lists the one model. Standard library only.

    python3 tests/a2a/tck_model.py --port 0      # prints "LISTENING <port>"

Options: `--host` (default 127.0.0.1), `--port` (0 picks a free one),
`--delay` (seconds between streamed chunks, default 0.02), `--log`
(one line per request on stderr: the route and the messageId).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fixture"

# First match wins: `tck-artifact-file-url` before `tck-artifact-file`.
ROUTES = [
    "tck-input-required",
    "tck-artifact-text",
    "tck-artifact-file-url",
    "tck-artifact-file",
    "tck-artifact-data",
    "tck-message-response",
]

TCK_ID = re.compile(r"tck-[A-Za-z0-9_.:-]+")


def _texts(content) -> str:
    """A chat message's content as one string (plain, or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") if isinstance(p, dict) else str(p) for p in content
        )
    return "" if content is None else str(content)


def message_id_of(content: str) -> str:
    """The A2A messageId in `content`: the Message JSON (possibly encoded
    as a JSON string once more, as a tool result may be), else the first
    `tck-...` token anywhere in it; "" if there is none."""
    value = content
    for _ in range(3):
        if not isinstance(value, str):
            break
        try:
            value = json.loads(value)
        except ValueError:
            break
    if isinstance(value, dict):
        for key in ("messageId", "message_id"):
            if isinstance(value.get(key), str):
                return value[key]
        inner = value.get("message")
        if isinstance(inner, dict) and isinstance(inner.get("messageId"), str):
            return inner["messageId"]
    found = TCK_ID.search(content)
    return found.group(0) if found else ""


def route_of(message_id: str) -> str:
    for prefix in ROUTES:
        if message_id.startswith(prefix):
            return prefix
    return "default"


def answer(messages: list) -> tuple[str, str, list[str] | None, dict | None]:
    """(route, messageId, text pieces, tool call) for a conversation: what
    the model says next. Exactly one of pieces and call is set."""
    latest = None
    for m in reversed(messages):
        if m.get("role") in ("user", "tool"):
            latest = m
            break
    content = _texts(latest.get("content")) if latest else ""
    mid = message_id_of(content)
    route = route_of(mid)
    if route == "tck-input-required":
        asked = sum(1 for m in messages if m.get("role") == "tool")
        question = (
            "Which option should I take?"
            if asked == 0
            else f"Thanks. One more detail, please (question {asked + 1})?"
        )
        call = {
            "id": f"call_{uuid.uuid4().hex[:12]}",
            "name": "ask_user",
            "arguments": json.dumps({"question": question}),
        }
        return route, mid, None, call
    if route == "tck-artifact-text":
        return route, mid, ["Generated ", "text ", "content"], None
    if route == "tck-artifact-file-url":
        out = {"artifacts": [{
            "artifactId": "file-url",
            "name": "output.txt",
            "parts": [{
                "url": "https://example.com/output.txt",
                "filename": "output.txt",
                "mediaType": "text/plain",
            }],
        }]}
        return route, mid, [json.dumps(out)], None
    if route == "tck-artifact-file":
        out = {"artifacts": [{
            "artifactId": "file",
            "name": "output.txt",
            "parts": [{
                # base64 of "Generated file content\n"
                "raw": "R2VuZXJhdGVkIGZpbGUgY29udGVudAo=",
                "filename": "output.txt",
                "mediaType": "text/plain",
            }],
        }]}
        return route, mid, [json.dumps(out)], None
    if route == "tck-artifact-data":
        out = {"artifacts": [{
            "artifactId": "data",
            "name": "data",
            "parts": [{
                "data": {"key": "value", "count": 42},
                "mediaType": "application/json",
            }],
        }]}
        return route, mid, [json.dumps(out)], None
    if route == "tck-message-response":
        out = {"message": {
            "role": "ROLE_AGENT",
            "messageId": f"tck-fixture-{uuid.uuid4().hex[:12]}",
            "parts": [{"text": "Direct message response"}],
        }}
        return route, mid, [json.dumps(out)], None
    if latest is not None and latest.get("role") == "tool":
        return route, mid, ["Thanks, ", "that is ", "all I needed."], None
    return route, mid, ["Hello ", "from the ", "TCK ", "fixture."], None


class Handler(BaseHTTPRequestHandler):
    server_version = "tck-model/1"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet; --log prints its own lines
        pass

    def _json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._json(200, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "owned_by": "tck"}]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self):
        if self.path.split("?")[0].rstrip("/") not in (
            "/v1/chat/completions", "/chat/completions"
        ):
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            messages = body.get("messages") or []
        except (ValueError, AttributeError) as e:
            self._json(400, {"error": {"message": f"bad request: {e}"}})
            return
        route, mid, pieces, call = answer(messages)
        if self.server.log:
            what = f"call {call['name']}" if call else f"{len(pieces)} piece(s)"
            print(f"tck_model: {route} {mid or '-'} -> {what}",
                  file=sys.stderr, flush=True)
        model = body.get("model") or MODEL
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        cid = f"chatcmpl-{uuid.uuid4().hex[:16]}"
        created = int(time.time())
        if body.get("stream"):
            self._stream(cid, created, model, pieces, call,
                         (body.get("stream_options") or {}).get("include_usage"),
                         usage)
            return
        msg: dict = {"role": "assistant", "content": None}
        if call:
            msg["tool_calls"] = [{"id": call["id"], "type": "function", "function": {
                "name": call["name"], "arguments": call["arguments"]}}]
        else:
            msg["content"] = "".join(pieces)
        self._json(200, {
            "id": cid, "object": "chat.completion", "created": created,
            "model": model,
            "choices": [{"index": 0, "message": msg,
                         "finish_reason": "tool_calls" if call else "stop"}],
            "usage": usage,
        })

    def _stream(self, cid, created, model, pieces, call, include_usage, usage):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

        def chunk(delta: dict, finish=None, with_usage=None) -> None:
            c = {"id": cid, "object": "chat.completion.chunk", "created": created,
                 "model": model,
                 "choices": [] if delta is None else [
                     {"index": 0, "delta": delta, "finish_reason": finish}]}
            if with_usage is not None:
                c["usage"] = with_usage
            self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
            self.wfile.flush()

        try:
            chunk({"role": "assistant", "content": ""})
            if call:
                args = call["arguments"]
                half = len(args) // 2
                chunk({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                       "function": {"name": call["name"],
                                                    "arguments": ""}}]})
                for part in (args[:half], args[half:]):
                    time.sleep(self.server.delay)
                    chunk({"tool_calls": [{"index": 0,
                                           "function": {"arguments": part}}]})
                chunk({}, "tool_calls")
            else:
                for piece in pieces:
                    time.sleep(self.server.delay)
                    chunk({"content": piece})
                chunk({}, "stop")
            if include_usage:
                chunk(None, with_usage=usage)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--delay", type=float, default=0.02,
                    help="seconds between streamed chunks")
    ap.add_argument("--log", action="store_true",
                    help="one line per request on stderr")
    args = ap.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.delay = args.delay
    server.log = args.log
    print(f"LISTENING {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
