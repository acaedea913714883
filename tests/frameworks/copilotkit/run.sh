#!/usr/bin/env bash
# CopilotKit as a user sets it up (contrib/frameworks/copilotkit: its runtime in Node, its page
# bundled with esbuild) in Debian's chromium, against iac-code-agui (target/debug) behind the REAL
# iac-code kernel with the scripted LLM (tests/real_kernel/fake_llm.py). Between the runtime and the
# adapter a recording proxy (capture-proxy.mjs) keeps every request CopilotKit's runtime sent.
#
#   bash tests/frameworks/copilotkit/run.sh [scenario filter...]
#
# Needs: chromium (apt-get install -y chromium), node >= 20, python3 (the kernel's venv is made by
# tests/real_kernel/setup.sh). Installs its npm packages itself (npm ci; ~2 min the first time).
# Everything binds 127.0.0.1 on free ports; every child runs in its own process group and is killed
# on exit; the whole run is bounded (COPILOTKIT_TOTAL_TIMEOUT, default 900 s; the scenarios alone
# COPILOTKIT_TEST_TIMEOUT, default 420 s). Screenshots go to
# target/framework-screenshots/copilotkit/, the capture to target/framework-captures/copilotkit.jsonl.
set -euo pipefail
STARTED=$(date +%s)

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
CK="$ROOT/contrib/frameworks/copilotkit"
cd "$ROOT"

CHROMIUM="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
[ -x "$CHROMIUM" ] || { echo "chromium not found (apt-get install -y chromium)" >&2; exit 1; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/agui-copilotkit.XXXXXX")"
PGIDS=()
RC=1
WATCHDOG=
cleanup() {
  [ -n "$WATCHDOG" ] && kill -- "-$WATCHDOG" 2>/dev/null || true
  for pg in "${PGIDS[@]}"; do kill -TERM -- "-$pg" 2>/dev/null || true; done
  sleep 0.5
  for pg in "${PGIDS[@]}"; do kill -KILL -- "-$pg" 2>/dev/null || true; done
  if [ "$RC" -eq 0 ]; then
    rm -rf "$WORK"
  else
    for f in adapter.log runtime.log kernel.log proxy.log; do
      echo "--- $f (tail) ---" >&2
      tail -n 30 "$WORK/logs/$f" >&2 2>/dev/null || true
    done
    echo "--- logs kept in $WORK ---" >&2
  fi
  echo "copilotkit test: total $(( $(date +%s) - STARTED )) s (install, build and scenarios), exit $RC" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Whatever else happens, the run ends: a watchdog stops the script (its EXIT trap then kills every
# child) after COPILOTKIT_TOTAL_TIMEOUT seconds (default 900: installs included); the scenarios
# alone have COPILOTKIT_TEST_TIMEOUT (default 420).
DEADLINE="${COPILOTKIT_TEST_TIMEOUT:-420}"
# (It ends the script's foreground command, by parent id, so that bash runs the trap at once.)
setsid bash -c 'sleep "$1"; echo "copilotkit test: global timeout ($1 s)" >&2; pkill -TERM -P "$2"; kill -TERM "$2"' \
  watchdog "${COPILOTKIT_TOTAL_TIMEOUT:-900}" "$$" </dev/null &
WATCHDOG=$!

step() { printf '[%4ss] %s\n' "$(( $(date +%s) - STARTED ))" "$*"; }

step "cargo build (the adapter)"
cargo build --quiet --bin iac-code-agui
step "the kernel's venv (tests/real_kernel/setup.sh)"
export VENV="${VENV:-$ROOT/target/real-kernel-venv}"
timeout --kill-after=10 "${REAL_KERNEL_SETUP_TIMEOUT:-240}" bash "$ROOT/tests/real_kernel/setup.sh"

# npm ci when node_modules does not match the committed lock (npm keeps a copy of it there)
npm_ci() { # dir
  if ! cmp -s "$1/package-lock.json" "$1/node_modules/.package-lock.json.ci" 2>/dev/null; then
    step "npm ci in ${1#$ROOT/} (CopilotKit: ~900 packages, about 2 minutes the first time)"
    (cd "$1" && timeout 300 npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.package-lock.json.ci)
  fi
}
npm_ci "$CK"
npm_ci "$HERE"
step "bundle the page (esbuild)"
(cd "$CK" && node build.mjs)

mkdir -p "$WORK/ws/copilotkit" "$WORK/logs" "$WORK/home" "$WORK/config" "$WORK/state"
SHOTS="$ROOT/target/framework-screenshots/copilotkit"
CAPTURE="$ROOT/target/framework-captures/copilotkit.jsonl"
rm -rf "$SHOTS" && mkdir -p "$SHOTS" "$(dirname "$CAPTURE")" && : >"$CAPTURE"

free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close();});'
}
start() { # name argv... (own process group, log in $WORK/logs/name.log)
  local name="$1"
  shift
  setsid "$@" >>"$WORK/logs/$name.log" 2>&1 < /dev/null &
  PGIDS+=($!)
  LAST_PID=$!
}
wait_http() { # url pid seconds
  local end=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -lt "$end" ]; do
    curl -fsS "$1" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

LLM_PORT=$(free_port); KERNEL_PORT=$(free_port); ADAPTER_PORT=$(free_port)
PROXY_PORT=$(free_port); RUNTIME_PORT=$(free_port)
# The kernel's and the adapter's environment, as tests/real_kernel/run.py sets it
unset IAC_CODE_AGUI_AUTH_TOKEN IAC_CODE_AGUI_A2A_TOKEN IAC_CODE_AGUI_A2A_URL IAC_CODE_AGUI_PORT \
  IAC_CODE_AGUI_HOST IAC_CODE_AGUI_STATE_DIR
export HOME="$WORK/home" IAC_CODE_CONFIG_DIR="$WORK/config" IAC_CODE_PROVIDER="OpenAI Compatible" \
  IAC_CODE_MODEL=fake-model IAC_CODE_BASE_URL="http://127.0.0.1:$LLM_PORT/v1" \
  IAC_CODE_API_KEY=sk-fake-local-test IACCODE_A2A_ALLOWED_CWDS="$WORK/ws" \
  IAC_CODE_AGUI_ALLOWED_CWDS="$WORK/ws" DISABLE_TELEMETRY=1 IAC_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
  NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost PYTHONUNBUFFERED=1

step "start: fake LLM, kernel (iac-code a2a), adapter, capture proxy, CopilotKit runtime"
start fake-llm "$VENV/bin/python" "$ROOT/tests/real_kernel/fake_llm.py" --port "$LLM_PORT" --log "$WORK/logs/llm-requests.jsonl"
wait_http "http://127.0.0.1:$LLM_PORT/v1/models" "$LAST_PID" 10 || { echo "fake LLM did not start" >&2; exit 1; }
start kernel "$VENV/bin/iac-code" a2a --host 127.0.0.1 --port "$KERNEL_PORT" --thinking-exposure all
wait_http "http://127.0.0.1:$KERNEL_PORT/health" "$LAST_PID" 60 || { echo "kernel did not start" >&2; exit 1; }
start adapter "$ROOT/target/debug/iac-code-agui" --host 127.0.0.1 --port "$ADAPTER_PORT" \
  --a2a-url "http://127.0.0.1:$KERNEL_PORT" --state-dir "$WORK/state"
wait_http "http://127.0.0.1:$ADAPTER_PORT/health" "$LAST_PID" 20 || { echo "adapter did not start" >&2; exit 1; }
start proxy node "$HERE/capture-proxy.mjs" "$PROXY_PORT" "http://127.0.0.1:$ADAPTER_PORT" "$CAPTURE"
wait_http "http://127.0.0.1:$PROXY_PORT/health" "$LAST_PID" 10 || { echo "capture proxy did not start" >&2; exit 1; }
# The runtime exactly as a user starts it (contrib/frameworks/copilotkit/server.mjs)
start runtime env -C "$CK" IAC_CODE_AGUI_URL="http://127.0.0.1:$PROXY_PORT" \
  IAC_CODE_CWD="$WORK/ws/copilotkit" IAC_CODE_USER_ID=copilotkit-test-user HOST=127.0.0.1 \
  PORT="$RUNTIME_PORT" node server.mjs
wait_http "http://127.0.0.1:$RUNTIME_PORT/" "$LAST_PID" 30 || { echo "runtime did not start" >&2; exit 1; }

# The same page behind a misconfigured runtime (its agent keeps CopilotKit's runId on a resume)
MISCONFIGURED_PORT=$(free_port)
start misconfigured-runtime env IAC_CODE_AGUI_URL="http://127.0.0.1:$PROXY_PORT" \
  IAC_CODE_CWD="$WORK/ws/copilotkit" IAC_CODE_USER_ID=copilotkit-test-user PORT="$MISCONFIGURED_PORT" \
  node "$HERE/misconfigured-runtime.mjs" "$CK"
wait_http "http://127.0.0.1:$MISCONFIGURED_PORT/" "$LAST_PID" 30 || { echo "misconfigured runtime did not start" >&2; exit 1; }

step "scenarios (chromium)"
set +e
CHROMIUM="$CHROMIUM" SHOTS="$SHOTS" CAPTURE="$CAPTURE" WORK="$WORK" \
  RUNTIME_URL="http://127.0.0.1:$RUNTIME_PORT" MISCONFIGURED_URL="http://127.0.0.1:$MISCONFIGURED_PORT" ADAPTER_URL="http://127.0.0.1:$ADAPTER_PORT" \
  AGUI_CWD="$WORK/ws/copilotkit" LLM_LOG="$WORK/logs/llm-requests.jsonl" CK_DIR="$CK" \
  timeout --kill-after=10 "$DEADLINE" node "$HERE/test.mjs" "$@"
RC=$?
set -e
exit "$RC"
