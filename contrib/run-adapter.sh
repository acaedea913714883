#!/usr/bin/env bash
# One command from a fresh machine to a running adapter with a managed iac-code kernel:
# installs the kernel into a venv (once), builds the release binary, and runs it.
#   bash contrib/run-adapter.sh [adapter flags...]       e.g. --port 41243
# Put the LLM settings in the environment first (IAC_CODE_PROVIDER, IAC_CODE_MODEL,
# IAC_CODE_BASE_URL, IAC_CODE_API_KEY). With --a2a-url, no kernel is installed or started.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${IAC_CODE_VENV:-$PWD/target/iac-code-venv}"
if [[ " $* " != *" --a2a-url"* ]] && ! command -v iac-code >/dev/null; then
  if [ ! -x "$venv/bin/iac-code" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "iac-code[a2a]==0.16.0" "a2a-sdk[http-server,signing]==1.1.5"
  fi
  export PATH="$venv/bin:$PATH"
fi
cargo build --release --quiet
exec target/release/iac-code-agui "$@"
