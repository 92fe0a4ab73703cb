"""A webhook receiver for Baton's tests that checks every delivery's
signature with the PyPI `standardwebhooks` package (a Standard Webhooks
implementation nobody here wrote).

It listens on 127.0.0.1 on a free port and prints `listening PORT` first.
Each path is an endpoint the test configures with
`POST /_config {"path": "/x", "secrets": ["whsec_…"], "mode": "ok"}`:

- `ok`: answers 200;
- `fail:N`: answers 500 to the first N deliveries, then 200;
- `hang`: never answers (holds the connection until the sender gives up);
- `hang-once`: holds the first delivery (for minutes), answers the rest 200;
- `retry-after:S`: answers 503 with `Retry-After: S` to the first delivery,
  then 200.

`GET /_log` answers every delivery received, in order: path, webhook-id,
timestamp, type and run id of the body, which of the endpoint's secrets
verified it (`verified`, one bool a secret), what was answered, and the
headers' `authorization`.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook

lock = threading.Lock()
endpoints = {}
log = []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/_log":
            with lock:
                body = json.dumps(log).encode()
            self.answer(200, body, [("Content-Type", "application/json")])
        else:
            self.answer(404)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.path == "/_config":
            c = json.loads(body)
            with lock:
                endpoints[c["path"]] = {
                    "secrets": c.get("secrets", []),
                    "mode": c.get("mode", "ok"),
                    "seen": 0,
                }
            self.answer(200)
            return
        with lock:
            e = endpoints.get(self.path)
            if e is None:
                e = endpoints[self.path] = {"secrets": [], "mode": "ok", "seen": 0}
            e["seen"] += 1
            seen, mode, secrets = e["seen"], e["mode"], list(e["secrets"])
        headers = {k.lower(): v for k, v in self.headers.items()}
        verified = []
        for s in secrets:
            try:
                Webhook(s).verify(body, headers)
                verified.append(True)
            except Exception:
                verified.append(False)
        try:
            payload = json.loads(body)
        except ValueError:
            payload = {}
        data = payload.get("data") or {}
        if mode == "ok":
            status = 200
        elif mode.startswith("fail:"):
            status = 500 if seen <= int(mode[5:]) else 200
        elif mode.startswith("retry-after:"):
            status = 503 if seen == 1 else 200
        elif mode == "hang" or (mode == "hang-once" and seen == 1):
            status = 0
        else:
            status = 200
        entry = {
            "path": self.path,
            "id": headers.get("webhook-id", ""),
            "timestamp": headers.get("webhook-timestamp", ""),
            "signature": headers.get("webhook-signature", ""),
            "authorization": headers.get("authorization", ""),
            "type": payload.get("type", ""),
            "run_id": data.get("runId", ""),
            "verified": verified,
            "status": status,
            "at": time.time(),
            "body": payload,
        }
        with lock:
            log.append(entry)
        if status == 0:
            time.sleep(600)
            return
        if status == 503:
            self.answer(503, b"busy", [("Retry-After", mode.split(":")[1])])
        elif status == 500:
            self.answer(500, b"broken on purpose")
        else:
            self.answer(200, b"ok")


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
