#!/usr/bin/env bash
# Runs the official A2A test kit (a2a-tck, branch 1.0-dev) against Baton by
# hand: the fixture model (tck_model.py), Baton with tests/a2a/tck-agents.yaml
# (in-memory store, no API keys), then the kit's run_tck.py. Not part of any
# automated suite. Test fixture only.
#
#   tests/a2a/run_tck.sh [must|should|may] [extra run_tck.py args...]
#
# Environment:
#   TCK_DIR         the kit's checkout, with its venv in .venv (default /tmp/a2a-tck;
#                   setup: see tests/a2a/README.md)
#   BATON_PORT      Baton's port (default 18930; all three bindings share it)
#   TCK_MODEL_PORT  the fixture model's port (default 18931; tck-agents.yaml names it,
#                   another port is written into a temporary copy of the file)
#   BATON_BIN       the orchestrator binary (default target/debug/baton-orchestrator;
#                   build: CARGO_INCREMENTAL=0 cargo build -p baton-orchestrator)
#   LOG_DIR         where baton.log and tck_model.log go (default a new mktemp dir)
#
# Exit code: the kit's (pytest's). The kit writes its reports to
# $TCK_DIR/reports/. Read the last line ("N failed, N passed, N skipped")
# and compare the skip count: a broken prerequisite shows up as skips.
set -euo pipefail

LEVEL=${1:-must}
shift || true
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TCK_DIR=${TCK_DIR:-/tmp/a2a-tck}
BATON_PORT=${BATON_PORT:-18930}
TCK_MODEL_PORT=${TCK_MODEL_PORT:-18931}
BATON_BIN=${BATON_BIN:-$ROOT/target/debug/baton-orchestrator}
LOG_DIR=${LOG_DIR:-$(mktemp -d /tmp/baton-tck.XXXXXX)}

AGENTS=$ROOT/tests/a2a/tck-agents.yaml
if [ "$TCK_MODEL_PORT" != 18931 ]; then
  AGENTS=$LOG_DIR/tck-agents.yaml
  sed "s#127.0.0.1:18931#127.0.0.1:$TCK_MODEL_PORT#" "$ROOT/tests/a2a/tck-agents.yaml" > "$AGENTS"
fi

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

python3 "$ROOT/tests/a2a/tck_model.py" --port "$TCK_MODEL_PORT" --log \
  > "$LOG_DIR/tck_model.out" 2> "$LOG_DIR/tck_model.log" &
pids+=($!)

# approval_timeout bounds how long a question waits for its answer: the
# kit leaves input-required tasks open for 10-30 s and answers some later.
# shutdown_grace: the kit leaves tasks waiting; no need to wait for them.
# webhooks.allowed_hosts: the kit's push notification receiver listens on
# this machine (loopback is refused unless listed).
"$BATON_BIN" \
  --set store.mode=memory \
  --set listen=127.0.0.1:"$BATON_PORT" \
  --set agents_file="$AGENTS" \
  --set telemetry.metrics_listen= \
  --set runs.approval_timeout=10m \
  --set shutdown_grace=1s \
  --set 'webhooks.allowed_hosts=["*","localhost","127.0.0.1"]' \
  > "$LOG_DIR/baton.log" 2>&1 &
pids+=($!)

card=http://127.0.0.1:$BATON_PORT/.well-known/agent-card.json
for _ in $(seq 1 100); do
  if curl -fsS -o /dev/null "$card" 2>/dev/null && grep -q LISTENING "$LOG_DIR/tck_model.out"; then
    break
  fi
  sleep 0.2
done
curl -fsS -o /dev/null "$card" || { echo "Baton did not come up; see $LOG_DIR/baton.log" >&2; exit 1; }
echo "Baton on 127.0.0.1:$BATON_PORT, fixture model on 127.0.0.1:$TCK_MODEL_PORT, logs in $LOG_DIR" >&2

cd "$TCK_DIR"
set +e
.venv/bin/python run_tck.py --sut-host "http://127.0.0.1:$BATON_PORT" --level "$LEVEL" "$@"
rc=$?
set -e
exit $rc
