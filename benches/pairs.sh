#!/usr/bin/env bash
# Figures for several pairs behind Debian's HAProxy (issue 17, item 5): events/s and added latency
# through HAProxy against direct to one pair (same run, as ratios), memory of an idle pair (with the
# real kernel when target/real-kernel-venv exists), how many held runs three pairs carry.
# Reported, never asserted. Everything binds 127.0.0.1.
#
#   benches/pairs.sh          -> target/bench-pairs.md   (about 2-3 minutes on 2 cores)
#   FLOOD=200000 CLOCK=2000 HELD_MAX=3000 REAL_KERNEL_VENV=DIR benches/pairs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
START=$(date +%s)
command -v haproxy >/dev/null || { echo "haproxy not installed (apt-get install -y haproxy)" >&2; exit 1; }
cargo build --release --bin iac-code-agui --example fake-kernel

if [ -z "${REAL_KERNEL_VENV:-}" ]; then
  for v in "$ROOT/target/real-kernel-venv" /work/main/target/real-kernel-venv; do
    [ -x "$v/bin/iac-code" ] && { REAL_KERNEL_VENV="$v"; break; }
  done
fi
export REAL_KERNEL_VENV="${REAL_KERNEL_VENV:-}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/agui-bench-pairs.XXXXXX")"
mkdir -p "$WORK/workspace"
export PAIRS_ROOT="$WORK/pairs" AGUI_BIN="$ROOT/target/release/iac-code-agui"
export IAC_CODE_AGUI_ALLOWED_CWDS="$WORK" AGUI_ARGS=""
cleanup() {
  set +e
  [ -f "$WORK/haproxy.pid" ] && kill "$(cat "$WORK/haproxy.pid")" 2>/dev/null
  for i in 1 2 3; do
    p="$(cat "$PAIRS_ROOT/pair-$i/adapter.pid" 2>/dev/null)"; [ -n "$p" ] && kill "$p" 2>/dev/null
    k="$(cat "$WORK/kernel-$i.pid" 2>/dev/null)"; [ -n "$k" ] && kill "$k" 2>/dev/null
  done
  wait 2>/dev/null
  rm -rf "$WORK"
  echo "benches/pairs.sh: $(( $(date +%s) - START )) s" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Free ports below the ephemeral range: HAProxy on BASE, pair I on BASE+I, the real pair on BASE+50.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for _ in $(seq 1 50); do
  BASE=$(( 20000 + RANDOM % 12000 )); ok=1
  for o in 0 1 2 3 50 99; do port_free $((BASE + o)) || ok=0; done
  [ "$ok" = 1 ] && break
done
export BASE_PORT="$BASE"

URLS=""
for i in 1 2 3; do
  target/release/examples/fake-kernel --port 0 >"$WORK/kernel-$i.log" 2>&1 &
  echo $! >"$WORK/kernel-$i.pid"
  url=""
  for _ in $(seq 1 200); do
    url="$(sed -n 's/^listening on \(http:\/\/127\.0\.0\.1:[0-9]*\).*/\1/p' "$WORK/kernel-$i.log" | head -n1)"
    [ -n "$url" ] && break; sleep 0.05
  done
  [ -n "$url" ] || { echo "fake kernel $i did not start" >&2; exit 1; }
  URLS="$URLS $url"
done
export A2A_URLS="${URLS# }"
bash contrib/deploy/pairs.sh start 3 >&2

# contrib/deploy/haproxy.cfg as shipped, ports and map path rewritten, maxconn within ulimit -n.
MAXCONN=$(( $(ulimit -n) / 2 - 100 ))
python3 - "$BASE" "$WORK" "$MAXCONN" <<'PY'
import re, sys
base, work, maxconn = int(sys.argv[1]), sys.argv[2], sys.argv[3]
cfg = open("contrib/deploy/haproxy.cfg").read()
cfg = cfg.replace("/etc/haproxy/agui-threads.map", f"{work}/threads.map")
cfg = re.sub(r"maxconn \d+", f"maxconn {maxconn}", cfg)
cfg = re.sub(r"127\.0\.0\.1:413(\d\d)", lambda m: f"127.0.0.1:{base + int(m.group(1))}", cfg)
open(f"{work}/haproxy.cfg", "w").write(cfg)
PY
: >"$WORK/threads.map"
haproxy -db -f "$WORK/haproxy.cfg" >"$WORK/haproxy.log" 2>&1 &
echo $! >"$WORK/haproxy.pid"
for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$BASE/health" >/dev/null 2>&1 && break; sleep 0.05; done

mkdir -p target
WORK="$WORK" CWD="$WORK/workspace" OUT="$ROOT/target/bench-pairs.md" timeout 900 node benches/pairs.mjs
echo "== report: target/bench-pairs.md" >&2
