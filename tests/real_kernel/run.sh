#!/usr/bin/env bash
# End-to-end test of iac-code-agui against the real iac-code 0.16.0 kernel.
#
#   bash tests/real_kernel/run.sh [run.py options: --keep --skip-reference --timeout SECS]
#
#   VENV                 the test venv (default <repo>/target/real-kernel-venv), made by setup.sh
#   AGUI_BIN             the adapter binary (default <repo>/target/debug/iac-code-agui; built
#                        with `cargo build` when missing, or always with REAL_KERNEL_BUILD=1)
#   REAL_KERNEL_TIMEOUT  run.py's global deadline in seconds (default 420)
#   REAL_KERNEL_SETUP_TIMEOUT  deadline of setup.sh in seconds (default 240)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
export VENV="${VENV:-$ROOT/target/real-kernel-venv}"

# pip has no overall deadline of its own: bound the (first-time) install
timeout --kill-after=10 "${REAL_KERNEL_SETUP_TIMEOUT:-240}" bash "$HERE/setup.sh"

# @ag-ui/client for scenario f's verifyEvents check (the conformance suite's pinned packages)
if [[ ! -d "$ROOT/tests/conformance/node_modules/@ag-ui/client" ]]; then
  (cd "$ROOT/tests/conformance" && timeout 120 npm ci --no-audit --no-fund --loglevel=error)
fi

if [[ -z "${AGUI_BIN:-}" ]]; then
  AGUI_BIN="$ROOT/target/debug/iac-code-agui"
  if [[ ! -x "$AGUI_BIN" || "${REAL_KERNEL_BUILD:-0}" == "1" ]]; then
    echo "run.sh: cargo build"
    (cd "$ROOT" && cargo build --bin iac-code-agui)
  fi
fi
export AGUI_BIN

rc=0
timeout --kill-after=10 450 "$VENV/bin/python" "$HERE/run.py" --venv "$VENV" --adapter "$AGUI_BIN" "$@" || rc=$?
echo "run.sh: total ${SECONDS}s (setup, build and scenarios), exit $rc"
exit "$rc"
