#!/usr/bin/env bash
# One command from a fresh machine to a running adapter with a managed iac-code kernel:
# installs the pinned kernel into a venv (once), builds the release binary, and runs it.
#   bash contrib/run-adapter.sh [adapter flags...]       e.g. --port 41243
# Run it from any directory: the adapter keeps yours as its working directory, so the default
# allowed workspace roots are that directory and the temp directory (IAC_CODE_AGUI_ALLOWED_CWDS,
# `:`-separated, sets others).
# Put the LLM settings in the environment first (IAC_CODE_PROVIDER, IAC_CODE_MODEL,
# IAC_CODE_BASE_URL, IAC_CODE_API_KEY).
#
# Which kernel:
#   --a2a-url / IAC_CODE_AGUI_A2A_URL          none is installed or started (an existing kernel)
#   --a2a-command / IAC_CODE_AGUI_A2A_COMMAND  that command, as given
#   IAC_CODE_BIN=/path/to/iac-code             that iac-code (the adapter warns unless it is 0.16.x)
#   otherwise                                  the pinned iac-code 0.16.0 from
#                                              contrib/kernel/requirements.lock, installed once
#                                              into $VENV (default <repo>/target/real-kernel-venv,
#                                              shared with the tests), preferred over any
#                                              `iac-code` on PATH
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { echo "run-adapter.sh: $*" >&2; }

managed=1
for arg in "$@"; do
  case "$arg" in
    --a2a-url | --a2a-url=* | --a2a-command | --a2a-command=*) managed=0 ;;
  esac
done
[[ -n "${IAC_CODE_AGUI_A2A_URL:-}" || -n "${IAC_CODE_AGUI_A2A_COMMAND:-}" ]] && managed=0

# What the build needs, and Python's venv for the pinned kernel: as root on Debian the missing
# packages are installed, otherwise they are named at once (tests/prereqs.sh).
parts=(build)
[[ "$managed" == 1 && -z "${IAC_CODE_BIN:-}" ]] && parts+=(kernel)
bash "$ROOT/tests/prereqs.sh" "${parts[@]}"

if [[ "$managed" == 1 ]]; then
  if [[ -n "${IAC_CODE_BIN:-}" ]]; then
    [[ -x "$IAC_CODE_BIN" ]] || { say "IAC_CODE_BIN=$IAC_CODE_BIN is not an executable"; exit 1; }
    # the adapter appends the kernel's arguments to the program named iac-code on PATH
    [[ "$(basename "$IAC_CODE_BIN")" == iac-code ]] \
      || { say "IAC_CODE_BIN must name a program called iac-code"; exit 1; }
    bin_dir="$(cd "$(dirname "$IAC_CODE_BIN")" && pwd)"
    say "using the kernel $bin_dir/iac-code (IAC_CODE_BIN)"
  else
    export VENV="${VENV:-${IAC_CODE_VENV:-$ROOT/target/real-kernel-venv}}"
    bash "$ROOT/contrib/kernel/install.sh"
    bin_dir="$VENV/bin"
  fi
  export PATH="$bin_dir:$PATH"
fi

target_dir="${CARGO_TARGET_DIR:-target}"
[[ "$target_dir" == /* ]] || target_dir="$ROOT/$target_dir"
bin="$target_dir/release/iac-code-agui"
if [[ -x "$bin" ]]; then
  say "checking the release binary is up to date (a rebuild after a source change takes about 1 minute)..."
else
  say "building the release binary (about 2–4 minutes on 2 cores, the first time)..."
fi
# In a subshell: the adapter itself keeps the caller's working directory.
(cd "$ROOT" && cargo build --release --locked --quiet --bin iac-code-agui)
exec "$bin" "$@"
