#!/usr/bin/env bash
# A host lost for good, behind HAProxy (issue 26 part 3): three pairs, each on its own "host" — a
# Linux network namespace with its own 10.x address on a private bridge — found by HAProxy through
# DNS names (contrib/deploy/haproxy-dns.sh, a tiny resolver: tests/pairs/dns.mjs), as a
# StatefulSet's pods are. One host is lost (every process in it SIGKILLed, the namespace and its
# address deleted, its local HOME and TMPDIR removed, its DNS name gone); its pair's volume (the
# same config dir and state dir, at the same path) is started on a new host with a new address,
# and the name points there. hostloss.mjs (see its header) checks and measures.
#
#   bash tests/pairs/hostloss.sh                      fake kernels (managed, kept on the pair's
#                                                     volume: fake-kernel --persist), 60 threads
#   PAIRS_REAL_KERNEL=1 bash tests/pairs/hostloss.sh  the real kernel (iac-code a2a 0.16.0, the
#                                                     LLM scripted by tests/real_kernel/fake_llm.py
#                                                     on each host's loopback), 6 threads
#
# KEEP_WORK=1 keeps the pairs' volumes (under $TMPDIR) after a passing run, for inspection.
# Needs root (network namespaces, a bridge): without it, it prints one `skipped …` line and passes,
# except under CI=true, where it must run. Everything listens on 127.0.0.1 (HAProxy, the
# resolver, HAProxy's stats) or on the namespaces' own 10.x addresses (the pairs); the bridge
# has no route out. Every namespace, the bridge and every process are removed on exit.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"
START=$(date +%s)
export PATH="$PATH:/usr/sbin:/sbin"
# As the other tests that need root (README): skipped without it, except under CI=true.
if [ "$(id -u)" != 0 ]; then
  if [ "${CI:-}" = true ]; then echo "FAIL  tests/pairs/hostloss.sh needs root: its hosts are network namespaces" >&2; exit 1; fi
  echo "skipped tests/pairs/hostloss.sh: it needs root (its hosts are network namespaces)"
  exit 0
fi
command -v haproxy >/dev/null && command -v ip >/dev/null || { echo "haproxy and ip (iproute2) are needed" >&2; exit 1; }

REAL="${PAIRS_REAL_KERNEL:-}"
VENV="${REAL_KERNEL_VENV:-$ROOT/target/real-kernel-venv}"
if [ -n "$REAL" ] && [ ! -x "$VENV/bin/iac-code" ]; then
  echo "no real kernel in $VENV (bash tests/real_kernel/setup.sh installs it)" >&2; exit 1
fi
# The configuration statefulset.yaml tells to generate (its pods' names in the cluster's DNS) is
# valid as such; the test runs the same script with its own names.
PAIRS=3 PAIR_NAME=agui-%d.agui.default.svc.cluster.local BIND=0.0.0.0:41300 bash contrib/deploy/haproxy-dns.sh \
  | haproxy -c -q -f /dev/stdin 2>/dev/null \
  || { echo "FAIL  haproxy -c on contrib/deploy/haproxy-dns.sh's configuration for statefulset.yaml" >&2; exit 1; }
echo "PASS  haproxy -c on contrib/deploy/haproxy-dns.sh's configuration for statefulset.yaml"
cargo build --quiet --examples --bins
if [ ! -d "$HERE/node_modules/@ag-ui/client" ]; then
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error)
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/agui-hostloss.XXXXXX")"
mkdir -p "$WORK/workspace" "$WORK/hosts"
RC=1
# Short names (interface names are at most 15 bytes), unique per run.
TAG="hl$(( $$ % 100000 ))"
BR="${TAG}br"
# A /24 of 10.0.0.0/8 no interface of this machine is on.
for _ in $(seq 1 50); do
  SUB="10.$(( 100 + RANDOM % 100 )).$(( RANDOM % 250 ))"
  ip -4 addr | grep -q " $SUB\." || break
done

cleanup() {
  set +e
  [ -f "$WORK/haproxy.pid" ] && kill "$(cat "$WORK/haproxy.pid")" 2>/dev/null
  for ns in $(ip netns list | awk '{print $1}' | grep "^$TAG-"); do
    for p in $(ip netns pids "$ns"); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$ns"
  done
  ip link del "$BR" 2>/dev/null
  wait 2>/dev/null
  if [ "$RC" -eq 0 ] && [ -z "${KEEP_WORK:-}" ]; then
    rm -rf "$WORK"
  else
    for f in "$WORK"/pairs/pair-*/adapter.log "$WORK/haproxy.log"; do
      echo "--- $f (tail) ---" >&2; tail -n 15 "$f" >&2 2>/dev/null
    done
    echo "--- logs kept in $WORK ---" >&2
  fi
  echo "tests/pairs/hostloss.sh: $(( $(date +%s) - START )) s, exit $RC"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The "network": a bridge in this namespace, 10.x.y.1, which HAProxy reaches the hosts through.
ip link add "$BR" type bridge
ip addr add "$SUB.1/24" dev "$BR"
ip link set "$BR" up

# HAProxy on BASE, its stats on BASE+99, the resolver on BASE+53 (UDP), all on 127.0.0.1.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for _ in $(seq 1 50); do
  BASE=$(( 20000 + RANDOM % 12000 ))
  port_free "$BASE" && port_free $((BASE + 99)) && break
done

export PAIRS_ROOT="$WORK/pairs" AGUI_BIN="$ROOT/target/debug/iac-code-agui"
export IAC_CODE_AGUI_ALLOWED_CWDS="$WORK/workspace"
export AGUI_ARGS="--heartbeat-interval 1"
if [ -n "$REAL" ]; then
  # Each host runs the scripted LLM on its own loopback (hostloss.mjs starts it with the host):
  # the kernels' settings name no host.
  export IAC_CODE_PROVIDER="OpenAI Compatible" IAC_CODE_MODEL=fake-model \
    IAC_CODE_BASE_URL="http://127.0.0.1:41290/v1" IAC_CODE_API_KEY=sk-fake-local-test \
    DISABLE_TELEMETRY=1 IAC_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 NO_PROXY=127.0.0.1,localhost \
    no_proxy=127.0.0.1,localhost PYTHONUNBUFFERED=1 A2A_COMMAND="$VENV/bin/iac-code a2a"
  THREADS="${PAIRS_THREADS:-6}"
else
  # The fake kernel keeps its sessions and waiting tasks on the pair's volume, as the real one
  # keeps its A2A state under its config dir.
  printf '#!/bin/sh\nexec %s --persist "$IAC_CODE_CONFIG_DIR/fake-kernel.json" "$@"\n' \
    "$ROOT/target/debug/examples/fake-kernel" >"$WORK/fake-a2a"
  chmod +x "$WORK/fake-a2a"
  export A2A_COMMAND="$WORK/fake-a2a"
  THREADS="${PAIRS_THREADS:-60}"
fi
unset A2A_URLS

set +e
WORK="$WORK" ROOT="$ROOT" BASE_PORT="$BASE" HL_TAG="$TAG" HL_SUB="$SUB" HL_BRIDGE="$BR" \
  HL_REAL="$REAL" CWD="$WORK/workspace" PAIRS_THREADS="$THREADS" \
  timeout 300 node "$HERE/hostloss.mjs"
RC=$?
set -e
exit "$RC"
