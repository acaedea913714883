#!/usr/bin/env bash
# TanStack AI (@tanstack/ai-client 0.33.2, pinned in contrib/frameworks/tanstack-ai/package-lock.json)
# in Node against iac-code-agui behind the real iac-code kernel with the scripted LLM.
#
#   bash tests/frameworks/tanstack-ai/run.sh [scenario-filter ...]
#
# Installs the example's packages (npm ci), the kernel venv (tests/real_kernel/setup.sh), builds the
# adapter; ../launch.py starts the LLM, kernel and adapter and kills them on exit. Bounded by
# FRAMEWORK_TEST_TIMEOUT (default 300 s). Requests sent: target/framework-captures/tanstack-ai/.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
EXAMPLE="$ROOT/contrib/frameworks/tanstack-ai"
export VENV="${VENV:-$ROOT/target/real-kernel-venv}"
rc=0
finish() { echo "tanstack-ai: total ${SECONDS} s (install, build and scenarios), exit $rc"; }
trap finish EXIT
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
timeout --kill-after=10 "${REAL_KERNEL_SETUP_TIMEOUT:-240}" bash "$ROOT/tests/real_kernel/setup.sh"
npm_ci "$EXAMPLE"
(cd "$ROOT" && cargo build --quiet --bin iac-code-agui)
CAPTURES="$ROOT/target/framework-captures/tanstack-ai"
rm -rf "$CAPTURES"
T="${FRAMEWORK_TEST_TIMEOUT:-300}"
CAPTURES="$CAPTURES" timeout --kill-after=10 $((T + 20)) "$VENV/bin/python" "$HERE/../launch.py" \
  --venv "$VENV" --adapter "$ROOT/target/debug/iac-code-agui" --timeout "$T" \
  -- node "$HERE/test.mjs" "$@" || rc=$?
exit "$rc"
