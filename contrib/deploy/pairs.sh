#!/usr/bin/env bash
# Runs N iac-code-agui pairs (adapter + its own managed `iac-code a2a` kernel) on one host, each
# with its own port, config dir (the kernel's sessions and A2A state), state dir (the adapter's
# threads) and log, all under one root. Every adapter runs with --pair-mode.
#
#   contrib/deploy/pairs.sh start  N      start pairs 1..N (those not running)
#   contrib/deploy/pairs.sh stop   N      SIGTERM pairs 1..N (runs end cleanly, kernels stop)
#   contrib/deploy/pairs.sh status N      one line per pair: running / stopped, port, /health
#   contrib/deploy/pairs.sh start-one I / stop-one I / kill-one I (SIGKILL, for drills)
#
# Environment:
#   PAIRS_ROOT   root of the pairs' directories (default /var/lib/iac-code-pairs); pair I uses
#                $PAIRS_ROOT/pair-I/{config,agui,adapter.log,adapter.pid}
#   BASE_PORT    pair I listens on BASE_PORT+I (default 41300: 41301, 41302, …)
#   PAIR_PORT    instead: every pair listens on this port (one pair per host, as in a StatefulSet)
#   PAIR_HOST    the address pairs bind (default 127.0.0.1; the host's own address when HAProxy
#                runs on another host, as in tests/pairs/hostloss.sh)
#   AGUI_BIN     the adapter binary (default: iac-code-agui on PATH)
#   A2A_COMMAND  the kernel command (default "iac-code a2a"); --host/--port are appended
#   A2A_URLS     instead of managed kernels: one loopback kernel URL per pair, space-separated
#   AGUI_ARGS    more adapter flags for every pair (e.g. "--allowed-host agui.example.com")
# The kernel's LLM settings (IAC_CODE_PROVIDER, …) and IAC_CODE_AGUI_ALLOWED_CWDS are inherited.
set -euo pipefail

ROOT="${PAIRS_ROOT:-/var/lib/iac-code-pairs}"
BASE="${BASE_PORT:-41300}"
BIN="${AGUI_BIN:-iac-code-agui}"
HOST="${PAIR_HOST:-127.0.0.1}"
port_of() { echo "${PAIR_PORT:-$((BASE + $1))}"; }

dir_of() { echo "$ROOT/pair-$1"; }
pid_of() { cat "$(dir_of "$1")/adapter.pid" 2>/dev/null || true; }
running() { local p; p="$(pid_of "$1")"; [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

start_one() {
  local i="$1" d port url
  d="$(dir_of "$i")"
  port="$(port_of "$i")"
  if running "$i"; then echo "pair $i: already running (pid $(pid_of "$i"))"; return 0; fi
  mkdir -p "$d/config" "$d/agui"
  chmod 700 "$d" "$d/config" "$d/agui"
  local args=(--host "$HOST" --port "$port" --state-dir "$d/agui" --pair-mode)
  url="$(echo "${A2A_URLS:-}" | awk -v i="$i" '{print $i}')"
  if [ -n "$url" ]; then
    args+=(--a2a-url "$url")
  else
    args+=(--a2a-command "${A2A_COMMAND:-iac-code a2a}")
  fi
  # shellcheck disable=SC2206 # AGUI_ARGS is a list of flags on purpose
  args+=(${AGUI_ARGS:-})
  # The kernel's config dir is the pair's own: its sessions and A2A state never mix with another's.
  IAC_CODE_CONFIG_DIR="$d/config" nohup "$BIN" "${args[@]}" >>"$d/adapter.log" 2>&1 &
  echo $! >"$d/adapter.pid"
  for _ in $(seq 1 600); do
    if curl -fsS "http://$HOST:$port/health" >/dev/null 2>&1; then
      echo "pair $i: started on $HOST:$port (pid $(pid_of "$i"))"
      return 0
    fi
    running "$i" || break
    sleep 0.1
  done
  echo "pair $i: did not come up; see $d/adapter.log" >&2
  return 1
}

signal_one() {
  local i="$1" sig="$2" p
  p="$(pid_of "$i")"
  if ! running "$i"; then echo "pair $i: not running"; return 0; fi
  kill -"$sig" "$p"
  for _ in $(seq 1 300); do
    kill -0 "$p" 2>/dev/null || { echo "pair $i: stopped ($sig)"; rm -f "$(dir_of "$i")/adapter.pid"; return 0; }
    sleep 0.1
  done
  echo "pair $i: still running 30 s after $sig" >&2
  return 1
}

status_one() {
  local i="$1" port health="no answer"
  port="$(port_of "$i")"
  if curl -fsS "http://$HOST:$port/health" >/dev/null 2>&1; then health="healthy"; fi
  if running "$i"; then
    echo "pair $i: running pid $(pid_of "$i") port $port /health $health"
  else
    echo "pair $i: stopped port $port"
  fi
}

cmd="${1:-}"
n="${2:-}"
case "$cmd" in
  start|stop|status)
    [ -n "$n" ] || { echo "usage: $0 $cmd N" >&2; exit 2; }
    rc=0
    for i in $(seq 1 "$n"); do
      case "$cmd" in
        start) start_one "$i" || rc=1 ;;
        stop) signal_one "$i" TERM || rc=1 ;;
        status) status_one "$i" ;;
      esac
    done
    exit "$rc" ;;
  start-one) start_one "$n" ;;
  stop-one) signal_one "$n" TERM ;;
  kill-one) signal_one "$n" KILL ;;
  *) sed -n '2,22p' "$0" >&2; exit 2 ;;
esac
