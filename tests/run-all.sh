#!/usr/bin/env bash
# The whole test suite, as CI runs it. Installs what it needs first: as root the missing Debian
# packages (tests/prereqs.sh; as another user it names them and stops at once), then the Node
# packages and the Python venv.
#   bash tests/run-all.sh
# Parts can be skipped for a quick local loop: SKIP_REAL_KERNEL=1, SKIP_CONFORMANCE=1,
# SKIP_STATIC=1, SKIP_BROWSER=1, SKIP_FRAMEWORKS=1, SKIP_PAIRS=1, SKIP_FUZZ=1; LOAD_SECS sets the load test's duration (default 60),
# SOAK_SECS the chaos soak's (default 60 here; the bench's own default is 1800).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n==> %s\n' "$*"; }
# Debian installs nginx and haproxy in /usr/sbin, outside a normal user's PATH.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

bash tests/prereqs.sh

step "Node packages and the Python venv (pinned by their locks)"
# npm ci again only when the lock is newer than the last install (npm writes
# node_modules/.package-lock.json): a second run costs nothing, a changed lock reinstalls.
npm_ci() {
  [ "$1/node_modules/.package-lock.json" -nt "$1/package-lock.json" ] && return 0
  echo "npm ci in $1..."
  (cd "$1" && npm ci --no-audit --no-fund --loglevel=error)
}
# The conformance packages (@ag-ui/client) also serve the real-kernel step's event check.
if [ -z "${SKIP_CONFORMANCE:-}" ] || [ -z "${SKIP_REAL_KERNEL:-}" ]; then npm_ci tests/conformance; fi
if [ -z "${SKIP_BROWSER:-}" ]; then npm_ci tests/browser; fi
if [ -z "${SKIP_PAIRS:-}" ]; then npm_ci tests/pairs; fi
# The real kernel (contrib/kernel/requirements.lock) and the Python ag-ui-protocol models, in the
# one venv under target/ (the capture validation below uses it even with SKIP_REAL_KERNEL).
bash tests/real_kernel/setup.sh

step "format and lints"
cargo fmt --all -- --check
cargo clippy --all-targets --quiet -- -D warnings

step "minimum Rust version: every locked package builds with our rust-version"
bash tests/msrv.sh

step "no async runtime in the dependency tree"
if cargo tree -e normal --prefix none | grep -Ei '^(tokio|async-std|smol|async-io|futures-executor) '; then
  echo "an async runtime crept into the tree" >&2
  exit 1
fi

step "the vendored tiny_http and its patches (contrib/vendor/tiny_http/PATCHES.md)"
CARGO_TARGET_DIR=target/tiny_http cargo test --quiet --manifest-path contrib/vendor/tiny_http/Cargo.toml

step "unit, integration, hostile-client, reliability and fuzz tests"
cargo build --quiet --examples --bins
captures="$PWD/target/agui-captures"
rm -rf "$captures"
AGUI_CAPTURE_DIR="$captures" cargo test --quiet -- --skip five_hundred_concurrent_runs
step "load: 500 concurrent runs for ${LOAD_SECS:-60} s, every event in order"
cargo test --quiet --test reliability -- --exact five_hundred_concurrent_runs_deliver_every_event_in_order

step "chaos soak, short: 50 clients for ${SOAK_SECS:-60} s with faults injected, every invariant checked (benches/soak)"
# Built first (the bench profile's build is not part of the time bound), then bounded.
cargo bench --quiet --bench soak --no-run
SOAK_SECS="${SOAK_SECS:-60}" timeout "$(( ${SOAK_SECS:-60} + 240 ))" cargo bench --quiet --bench soak

if [ -z "${SKIP_FUZZ:-}" ]; then
  step "coverage-guided fuzzing (libFuzzer): every committed corpus replayed, then ${FUZZ_SECS:-5} s per target"
  bash tests/fuzz_targets/run.sh replay
  bash tests/fuzz_targets/run.sh fuzz "${FUZZ_SECS:-5}"
fi

step "every captured stream validates with the Python ag-ui-protocol models"
bash tests/validate-captures.sh "$captures"

if [ -z "${SKIP_CONFORMANCE:-}" ]; then
  step "conformance: the official @ag-ui/client against the adapter"
  bash tests/conformance/run.sh
fi

if [ -z "${SKIP_BROWSER:-}" ]; then
  step "browser: the example console in chromium behind nginx (screenshots in target/browser-screenshots)"
  bash tests/browser/run.sh
fi

if [ -z "${SKIP_PROXY:-}" ]; then
  step "proxy: a plain nginx proxy_pass in front of the adapter (the Origin refusal names both causes)"
  bash tests/proxy/run.sh
fi

if [ -z "${SKIP_FRAMEWORKS:-}" ]; then
  step "chat frameworks behind the real kernel: CopilotKit and assistant-ui in chromium, TanStack AI in Node (screenshots in target/framework-screenshots)"
  bash tests/frameworks/copilotkit/run.sh
  bash tests/frameworks/tanstack-ai/run.sh
  bash tests/frameworks/assistant-ui/run.sh
fi

if [ -z "${SKIP_REAL_KERNEL:-}" ]; then
  step "end to end: the real iac-code 0.16.0 kernel"
  bash tests/real_kernel/run.sh
fi

if [ -z "${SKIP_PAIRS:-}" ]; then
  step "several pairs behind HAProxy: 300 threads, a pair killed and restarted, a pair added, a host lost"
  bash tests/pairs/run.sh
  if [ -z "${SKIP_REAL_KERNEL:-}" ]; then
    step "several pairs behind HAProxy, once with the real kernel"
    PAIRS_REAL_KERNEL=1 bash tests/pairs/run.sh
  fi
fi

if [ -z "${SKIP_STATIC:-}" ]; then
  step "static single binary"
  RUSTFLAGS="-C target-feature=+crt-static" cargo build --quiet --release --target x86_64-unknown-linux-gnu
  bin=target/x86_64-unknown-linux-gnu/release/iac-code-agui
  file "$bin"
  # glibc's crt-static gives a static PIE: `file` says "static-pie linked"; either way no loader.
  file "$bin" | grep -Eq "statically linked|static-pie linked"
  if ldd "$bin" 2>/dev/null | grep -q "=>"; then echo "$bin loads shared libraries" >&2; exit 1; fi
  "$bin" --version
  ls -l "$bin"
fi

step "all green"
