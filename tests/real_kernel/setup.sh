#!/usr/bin/env bash
# Creates the Python environment for the real-kernel end-to-end test (idempotent).
#
#   VENV    where to create it (default: <repo>/target/real-kernel-venv, the same venv
#           contrib/run-adapter.sh and benches/run.sh use)
#   PYTHON  interpreter for the venv (default: python3; iac-code 0.16.0 needs >= 3.10)
#
# Installs, with exact pins:
#   contrib/kernel/requirements.lock  iac-code[a2a]==0.16.0 + a2a-sdk[http-server,signing]==1.1.5
#                               (+ the frozen transitive set), through contrib/kernel/install.sh,
#                               the one installer of the kernel
#   requirements-reference.txt  iac-code[agui]==0.16.0, the Python reference adapter (optional:
#                               a failure is reported and the comparison scenario is skipped)
#   requirements-validator.txt  ag-ui-protocol==1.0.0 into $VENV/ag-ui-protocol-1.0.0 (--target),
#                               because iac-code[agui] pins ag-ui-protocol==0.1.20 in the venv
# A stamp file ($VENV/.real-kernel-stamp) holding the digest of these files and the installers makes
# a second run a no-op; delete the venv (or change a requirements file) to reinstall.
# Each long step prints one line saying what it does and about how long it takes.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
export VENV="${VENV:-$ROOT/target/real-kernel-venv}"
export PYTHON="${PYTHON:-python3}"
LOCK="$ROOT/contrib/kernel/requirements.lock"
INSTALL="$ROOT/contrib/kernel/install.sh"
VALIDATOR_DIR="$VENV/ag-ui-protocol-1.0.0"
STAMP="$VENV/.real-kernel-stamp"

digest="$(cat "$LOCK" "$INSTALL" "$HERE/requirements-reference.txt" \
  "$HERE/requirements-validator.txt" "$HERE/setup.sh" | sha256sum | cut -d' ' -f1)"

if [[ -f "$STAMP" && "$(head -n1 "$STAMP")" == "$digest" && -x "$VENV/bin/iac-code" ]] \
  && "$VENV/bin/python" -c 'import iac_code, a2a' >/dev/null 2>&1 \
  && [[ -d "$VALIDATOR_DIR/ag_ui" ]]; then
  echo "setup.sh: $VENV is ready ($(sed -n 2p "$STAMP"))"
  exit 0
fi

echo "setup.sh: preparing $VENV (the kernel, the reference adapter, the AG-UI models)"
bash "$INSTALL"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --no-input)
export PIP_DEFAULT_TIMEOUT="${PIP_DEFAULT_TIMEOUT:-60}"

reference="absent"
echo "setup.sh: installing the reference adapter iac-code[agui]==0.16.0 (about 30 s, once)..."
# the lock as constraints (pip refuses extras in a constraints file)
sed -e 's/\[[^]]*\]//' "$LOCK" > "$VENV/real-kernel-constraints.txt"
if "${PIP[@]}" install -q -c "$VENV/real-kernel-constraints.txt" -r "$HERE/requirements-reference.txt"; then
  if "$VENV/bin/python" -c 'import iac_code.agui.app' >/dev/null 2>&1; then
    reference="installed"
  else
    echo "setup.sh: warning: iac-code[agui] installed but iac_code.agui does not import" >&2
  fi
else
  echo "setup.sh: warning: iac-code[agui]==0.16.0 did not install; the reference comparison will be skipped" >&2
fi

echo "setup.sh: installing ag-ui-protocol 1.0.0 for validation (a few seconds)..."
rm -rf "$VALIDATOR_DIR"
"${PIP[@]}" install -q --no-deps --target "$VALIDATOR_DIR" -r "$HERE/requirements-validator.txt"
PYTHONPATH="$VALIDATOR_DIR" "$VENV/bin/python" -c \
  'import ag_ui.core, importlib.metadata as m; assert m.version("ag-ui-protocol")' >/dev/null

printf '%s\nreference adapter %s\n' "$digest" "$reference" > "$STAMP"
echo "setup.sh: done (reference adapter $reference)"
