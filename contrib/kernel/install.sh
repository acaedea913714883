#!/usr/bin/env bash
# Installs the pinned iac-code kernel (contrib/kernel/requirements.lock: iac-code[a2a]==0.16.0,
# a2a-sdk 1.1.5 and the frozen transitive set) into a venv, once. The one installer of the kernel:
# contrib/run-adapter.sh, tests/real_kernel/setup.sh and benches/run.sh all call it, so there is
# one pinned install in one venv.
#
#   bash contrib/kernel/install.sh            (from anywhere)
#
#   VENV    the venv (default: <repo>/target/real-kernel-venv); the kernel is $VENV/bin/iac-code
#   PYTHON  interpreter for a new venv (default: python3; iac-code 0.16.0 needs Python >= 3.10,
#           the lock was frozen with 3.11)
#
# A stamp ($VENV/.kernel-stamp: the digest of the lock and this script) makes a second run a
# no-op; change the lock (or delete the venv) to reinstall. Progress goes to stderr, one line per
# long step; pip itself stays quiet unless it fails.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="${VENV:-$ROOT/target/real-kernel-venv}"
PYTHON="${PYTHON:-python3}"
LOCK="$HERE/requirements.lock"
STAMP="$VENV/.kernel-stamp"
say() { echo "kernel/install.sh: $*" >&2; }

digest="$(cat "$LOCK" "$HERE/install.sh" | sha256sum | cut -d' ' -f1)"
ready() { [[ -f "$STAMP" && "$(cat "$STAMP")" == "$digest" && -x "$VENV/bin/iac-code" ]]; }
if ready; then
  exit 0
fi

mkdir -p "$(dirname "$VENV")"
# One installer at a time per venv (run-adapter.sh and the tests may start together).
exec 9>"$VENV.install-lock"
flock 9
if ready; then
  exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    say "iac-code 0.16.0 needs Python >= 3.10; \`$PYTHON\` is $("$PYTHON" --version 2>&1 || echo missing)." \
      "Set PYTHON=python3.11 (or newer)."
    exit 1
  fi
  if ! "$PYTHON" -m venv "$VENV" >/dev/null; then
    say "\`$PYTHON -m venv\` failed; on Debian/Ubuntu install python3-venv (apt-get install python3-venv)"
    exit 1
  fi
fi

say "installing iac-code 0.16.0 (pinned: contrib/kernel/requirements.lock) into $VENV" \
  "(about 2 minutes, once; pip is quiet)..."
started=$SECONDS
export PIP_DEFAULT_TIMEOUT="${PIP_DEFAULT_TIMEOUT:-60}"
"$VENV/bin/python" -m pip --disable-pip-version-check --no-input install -q -r "$LOCK"
"$VENV/bin/python" -c 'import iac_code.a2a.app' \
  || { say "iac-code a2a does not import in $VENV"; exit 1; }
echo "$digest" > "$STAMP"
say "iac-code $("$VENV/bin/iac-code" --version 2>/dev/null | awk '{print $2}') installed in" \
  "$((SECONDS - started)) s"
