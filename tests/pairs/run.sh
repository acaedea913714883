#!/usr/bin/env bash
# Several adapter + kernel pairs behind Debian's HAProxy, driven by the official @ag-ui/client.
#
#   bash tests/pairs/run.sh            (SKIP_PAIRS=1 skips it; PAIRS_THREADS=300, PAIRS_USERS=12
#                                      (routed by X-AGUI-User-Id, 3 threads each) by default)
#   PAIRS_REAL_KERNEL=1 bash tests/pairs/run.sh
#                                      the one pass with the real kernel (PAIRS_THREADS=6 by
#                                      default; REAL_KERNEL_VENV, default target/real-kernel-venv,
#                                      from tests/real_kernel/setup.sh)
#
# First, `haproxy -c` on the shipped contrib/deploy/haproxy.cfg as a fresh host has it (no maps).
# Starts on 127.0.0.1: four fake kernels, pairs 1-3 through contrib/deploy/pairs.sh (--pair-mode,
# each its own port, config dir and state dir), and HAProxy with contrib/deploy/haproxy.cfg (ports
# rewritten). nginx.mjs checks contrib/deploy/nginx-pairs.conf's routing in Debian's nginx first;
# then drive.mjs runs the scenario (see its header) and exits non-zero on any failure.
# With PAIRS_REAL_KERNEL=1: tests/real_kernel/fake_llm.py and three pairs whose adapters supervise
# their own `iac-code a2a` (pairs.sh's managed kernels), driven by drive-real.mjs.
# Then tests/pairs/hostloss.sh (a pair's host lost for good, its volume started on another host;
# needs root), with the same kernel kind.
# Everything it started is stopped on exit; logs of a failed run are kept under $TMPDIR.
set -euo pipefail

if [ -n "${SKIP_PAIRS:-}" ]; then echo "SKIP tests/pairs (SKIP_PAIRS set)"; exit 0; fi
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"
START=$(date +%s)
# The real kernels get a HOME of their own below; hostloss.sh (cargo, its own hosts) gets this one.
CALLER_HOME="$HOME"
# Debian installs haproxy in /usr/sbin, outside a normal user's PATH (common.mjs spawns it by name).
export PATH="$PATH:/usr/sbin:/sbin"
command -v haproxy >/dev/null || { echo "haproxy not installed (apt-get install -y haproxy)" >&2; exit 1; }
# The shipped config as a fresh host has it (no thread map, no AGUI_THREAD_MAP) must be valid.
env -u AGUI_THREAD_MAP haproxy -c -q -f contrib/deploy/haproxy.cfg \
  || { echo "FAIL  haproxy -c on contrib/deploy/haproxy.cfg (a fresh host)" >&2; exit 1; }
echo "PASS  haproxy -c on the shipped contrib/deploy/haproxy.cfg (no thread map)"

REAL="${PAIRS_REAL_KERNEL:-}"
VENV="${REAL_KERNEL_VENV:-$ROOT/target/real-kernel-venv}"
if [ -n "$REAL" ] && [ ! -x "$VENV/bin/iac-code" ]; then
  echo "no real kernel in $VENV (bash tests/real_kernel/setup.sh installs it; or set REAL_KERNEL_VENV)" >&2
  exit 1
fi
cargo build --quiet --examples --bins
if [ ! -d "$HERE/node_modules/@ag-ui/client" ]; then
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error)
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/agui-pairs.XXXXXX")"
mkdir -p "$WORK/workspace"
RC=1
export PAIRS_ROOT="$WORK/pairs" AGUI_BIN="$ROOT/target/debug/iac-code-agui"
export IAC_CODE_AGUI_ALLOWED_CWDS="$WORK"
export AGUI_ARGS="--heartbeat-interval 1"

cleanup() {
  set +e
  [ -f "$WORK/haproxy.pid" ] && kill "$(cat "$WORK/haproxy.pid")" 2>/dev/null
  [ -f "$WORK/llm.pid" ] && kill "$(cat "$WORK/llm.pid")" 2>/dev/null
  for i in 1 2 3 4; do
    p="$(cat "$PAIRS_ROOT/pair-$i/adapter.pid" 2>/dev/null)"
    # SIGTERM: the adapter stops its managed kernel (which also dies with it on SIGKILL).
    [ -n "$p" ] && kill "$p" 2>/dev/null
    k="$(cat "$WORK/kernel-$i.pid" 2>/dev/null)"
    # A kernel may be frozen (SIGSTOP) by the test: thaw it so it can die.
    [ -n "$k" ] && { kill -CONT "$k"; kill "$k"; } 2>/dev/null
  done
  wait 2>/dev/null
  if [ "$RC" -eq 0 ]; then
    rm -rf "$WORK"
  else
    for f in "$PAIRS_ROOT"/pair-*/adapter.log "$WORK/haproxy.log"; do
      echo "--- $f (tail) ---" >&2; tail -n 15 "$f" >&2 2>/dev/null
    done
    echo "--- logs kept in $WORK ---" >&2
  fi
  echo "tests/pairs: $(( $(date +%s) - START )) s, exit $RC"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Four free consecutive ports above a random base: pair I listens on BASE+I, HAProxy on BASE.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for _ in $(seq 1 50); do
  BASE=$(( 20000 + RANDOM % 12000 ))  # below the ephemeral range (32768-)
  ok=1
  for o in 0 1 2 3 4 98 99; do port_free $((BASE + o)) || ok=0; done
  [ "$ok" = 1 ] && break
done
export BASE_PORT="$BASE"

if [ -n "$REAL" ]; then
  # The real kernels' LLM: scripted (stdlib only), on BASE+98. Their sessions and A2A state go to
  # each pair's config dir (pairs.sh sets IAC_CODE_CONFIG_DIR); HOME is the test's own.
  mkdir -p "$WORK/home"
  python3 tests/real_kernel/fake_llm.py --port $((BASE + 98)) --log "$WORK/llm-requests.jsonl" >"$WORK/llm.log" 2>&1 &
  echo $! >"$WORK/llm.pid"
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$((BASE + 98))/v1/models" >/dev/null 2>&1 && break; sleep 0.1; done
  export HOME="$WORK/home" IAC_CODE_PROVIDER="OpenAI Compatible" IAC_CODE_MODEL=fake-model \
    IAC_CODE_BASE_URL="http://127.0.0.1:$((BASE + 98))/v1" IAC_CODE_API_KEY=sk-fake-local-test \
    DISABLE_TELEMETRY=1 IAC_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 NO_PROXY=127.0.0.1,localhost \
    no_proxy=127.0.0.1,localhost PYTHONUNBUFFERED=1 A2A_COMMAND="$VENV/bin/iac-code a2a"
  unset A2A_URLS
  bash contrib/deploy/pairs.sh start 3
  set +e
  WORK="$WORK" CWD="$WORK/workspace" ROOT="$ROOT" PAIRS_THREADS="${PAIRS_THREADS:-6}" \
    timeout 240 node "$HERE/drive-real.mjs"
  RC=$?
  # A host lost for good, with the real kernel (its own hosts, pairs and HAProxy).
  [ "$RC" -eq 0 ] && { HOME="$CALLER_HOME" bash "$HERE/hostloss.sh"; RC=$?; }
  set -e
  exit "$RC"
fi

URLS=""
for i in 1 2 3 4; do
  target/debug/examples/fake-kernel --port 0 >"$WORK/kernel-$i.log" 2>&1 &
  echo $! >"$WORK/kernel-$i.pid"
  url=""
  for _ in $(seq 1 200); do
    url="$(sed -n 's/^listening on \(http:\/\/127\.0\.0\.1:[0-9]*\).*/\1/p' "$WORK/kernel-$i.log" | head -n1)"
    [ -n "$url" ] && break
    sleep 0.05
  done
  [ -n "$url" ] || { echo "fake kernel $i did not start" >&2; exit 1; }
  URLS="$URLS $url"
done
export A2A_URLS="${URLS# }"

bash contrib/deploy/pairs.sh start 3

set +e
# nginx-pairs.conf's routing (stand-in pairs), then the scenario behind HAProxy.
WORK="$WORK" ROOT="$ROOT" timeout 60 node "$HERE/nginx.mjs" \
  && WORK="$WORK" CWD="$WORK/workspace" ROOT="$ROOT" \
  timeout 600 node "$HERE/drive.mjs"
RC=$?
# A host lost for good (network namespaces as hosts, HAProxy following DNS names): its own script,
# with its own hosts, pairs and HAProxy.
[ "$RC" -eq 0 ] && { bash "$HERE/hostloss.sh"; RC=$?; }
set -e
exit "$RC"
