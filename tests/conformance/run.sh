#!/usr/bin/env bash
# AG-UI conformance suite: drives the adapter with the official @ag-ui/client HttpAgent.
#
#   bash tests/conformance/run.sh
#
# Builds the adapter and the fake A2A kernel, starts both on free 127.0.0.1 ports with a
# temporary state dir and workspace, runs `node run.mjs`, stops both on exit and exits with
# node's exit code. Logs of a failed run are printed (tail) and kept under $TMPDIR.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"

cargo build --quiet --examples --bins

if [ ! -d "$HERE/node_modules/@ag-ui/client" ] || [ ! -d "$HERE/node_modules/@ag-ui/core" ]; then
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error)
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/agui-conformance.XXXXXX")"
mkdir -p "$WORK/workspace" "$WORK/state"
KERNEL_PID=""
ADAPTER_PID=""
RC=1

cleanup() {
  for pid in "$ADAPTER_PID" "$KERNEL_PID"; do
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  if [ "$RC" -eq 0 ]; then
    rm -rf "$WORK"
  else
    echo "--- adapter log (tail) ---" >&2
    tail -n 40 "$WORK/adapter.log" >&2 2>/dev/null || true
    echo "--- logs kept in $WORK ---" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close();});'
}

# The fake kernel binds its own free port (0) and prints the URL once it listens.
target/debug/examples/fake-kernel --port 0 >"$WORK/kernel.log" 2>&1 &
KERNEL_PID=$!
KERNEL_URL=""
for _ in $(seq 1 200); do
  KERNEL_URL="$(sed -n 's/^listening on \(http:\/\/127\.0\.0\.1:[0-9]*\).*/\1/p' "$WORK/kernel.log" | head -n1)"
  [ -n "$KERNEL_URL" ] && break
  kill -0 "$KERNEL_PID" 2>/dev/null || { echo "fake kernel exited" >&2; cat "$WORK/kernel.log" >&2; exit 1; }
  sleep 0.05
done
[ -n "$KERNEL_URL" ] || { echo "fake kernel did not start" >&2; exit 1; }

ADAPTER_URL=""
for attempt in 1 2 3; do
  PORT="$(free_port)"
  env -u IAC_CODE_AGUI_AUTH_TOKEN IAC_CODE_AGUI_ALLOWED_CWDS="$WORK" \
    target/debug/iac-code-agui \
      --a2a-url "$KERNEL_URL" \
      --state-dir "$WORK/state" \
      --heartbeat-interval 0.2 \
      --port "$PORT" \
      --debug >>"$WORK/adapter.log" 2>&1 &
  ADAPTER_PID=$!
  for _ in $(seq 1 200); do
    if curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
      ADAPTER_URL="http://127.0.0.1:$PORT"
      break
    fi
    kill -0 "$ADAPTER_PID" 2>/dev/null || break
    sleep 0.05
  done
  [ -n "$ADAPTER_URL" ] && break
  kill "$ADAPTER_PID" 2>/dev/null || true
  wait "$ADAPTER_PID" 2>/dev/null || true
  ADAPTER_PID=""
  echo "adapter did not come up on port $PORT (attempt $attempt)" >&2
done
[ -n "$ADAPTER_URL" ] || { echo "adapter did not start" >&2; exit 1; }

set +e
AGUI_URL="$ADAPTER_URL" AGUI_CWD="$WORK/workspace" FAKE_KERNEL_URL="$KERNEL_URL" \
  AGUI_HEARTBEAT_INTERVAL=0.2 \
  timeout 125 node "$HERE/run.mjs" "$@"
RC=$?
set -e
exit "$RC"
