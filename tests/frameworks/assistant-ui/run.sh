#!/usr/bin/env bash
# assistant-ui (@assistant-ui/react-ag-ui 0.0.58, @assistant-ui/react 0.15.22, pinned in
# contrib/frameworks/assistant-ui/package-lock.json) in Debian's chromium (puppeteer-core, pinned
# here) against iac-code-agui behind the real iac-code kernel with the scripted LLM.
#
#   bash tests/frameworks/assistant-ui/run.sh [scenario-filter ...]   (needs: apt-get install -y chromium)
#
# Installs both package sets (npm ci), the kernel venv (tests/real_kernel/setup.sh), builds the
# adapter and the page (esbuild); ../launch.py starts the LLM, kernel and adapter and kills them on
# exit. Bounded by FRAMEWORK_TEST_TIMEOUT (default 420 s). Screenshots:
# target/framework-screenshots/assistant-ui/; requests sent: target/framework-captures/assistant-ui/.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
EXAMPLE="$ROOT/contrib/frameworks/assistant-ui"
export VENV="${VENV:-$ROOT/target/real-kernel-venv}"
CHROMIUM="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
[ -x "$CHROMIUM" ] || { echo "chromium not found (apt-get install -y chromium)" >&2; exit 1; }
rc=0
finish() { echo "assistant-ui: total ${SECONDS} s (install, build and scenarios), exit $rc"; }
trap finish EXIT
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
timeout --kill-after=10 "${REAL_KERNEL_SETUP_TIMEOUT:-240}" bash "$ROOT/tests/real_kernel/setup.sh"
npm_ci "$EXAMPLE"
(cd "$EXAMPLE" && timeout 60 node build.mjs)
npm_ci "$HERE"
(cd "$ROOT" && cargo build --quiet --bin iac-code-agui)
SHOTS="$ROOT/target/framework-screenshots/assistant-ui"
CAPTURES="$ROOT/target/framework-captures/assistant-ui"
rm -rf "$SHOTS" "$CAPTURES" && mkdir -p "$SHOTS"
T="${FRAMEWORK_TEST_TIMEOUT:-420}"
CHROMIUM="$CHROMIUM" SHOTS="$SHOTS" CAPTURES="$CAPTURES" \
  timeout --kill-after=10 $((T + 20)) "$VENV/bin/python" "$HERE/../launch.py" \
  --venv "$VENV" --adapter "$ROOT/target/debug/iac-code-agui" --timeout "$T" \
  -- node "$HERE/test.mjs" "$@" || rc=$?
exit "$rc"
