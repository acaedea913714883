#!/usr/bin/env bash
# The programs README's two commands need, checked before they start: a missing one would
# otherwise stop tests/run-all.sh minutes in, at the step that uses it, and then the next one at
# the next step. As root with apt-get (a fresh Debian machine, CI) the missing Debian packages are
# installed here; otherwise one message lists all of them and the one command that installs them.
#   bash tests/prereqs.sh                tests/run-all.sh's steps (it calls this first; the same
#                                        SKIP_* variables: a skipped step's programs are not needed)
#   bash tests/prereqs.sh build [kernel] contrib/run-adapter.sh: building the adapter, and the
#                                        managed kernel's venv
# Rust and Node are named but never installed: Debian 12 packages neither at the versions needed
# (README's prerequisites table), and a toolchain is the user's choice.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Debian installs nginx and haproxy in /usr/sbin, outside a normal user's PATH.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

parts=" ${*:-suite} "
caller="contrib/run-adapter.sh"
[[ "$parts" == *" suite "* ]] && caller="tests/run-all.sh"
part() { [[ "$parts" == *" $1 "* || "$parts" == *" suite "* ]]; } # the suite needs every part
runs() { [ -z "${!1:-}" ]; } # runs SKIP_X: the step SKIP_X skips runs (run-all.sh's test)
have() { command -v "$1" >/dev/null 2>&1; }
deb() { [[ " ${debs[*]} " == *" $1 "* ]] || debs+=("$1"); } # a missing Debian package, once

# Cargo links with the system C compiler and C library (crt1.o, and libc.a for the static-build
# step) and fetches crates over TLS with the system's CA certificates.
check_build() {
  if have cc; then
    [[ "$(cc -print-file-name=libc.a)" == /* ]] || deb libc6-dev
  else
    deb gcc
    deb libc6-dev
  fi
  [ -s /etc/ssl/certs/ca-certificates.crt ] || deb ca-certificates
  local msrv rv
  msrv="$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml)"
  if ! have cargo || ! have rustc; then
    tools+=("Rust >= $msrv with cargo (https://rustup.rs)")
    return
  fi
  rv="$(rustc --version | awk '{print $2}')"
  if [ "$(printf '%s\n%s\n' "$msrv" "${rv%%-*}" | sort -V | head -n1)" != "$msrv" ]; then
    tools+=("Rust >= $msrv (rustc is $rv: rustup update)")
  fi
}

# Python: the managed kernel's venv, and in the suite tests/msrv.sh and the capture validation
# (always). Debian's python3 makes a venv with pip only with python3-venv (it holds ensurepip);
# a venv made before is enough.
check_kernel() {
  if ! have python3; then
    deb python3
    deb python3-venv
  elif [ ! -x target/real-kernel-venv/bin/python ] && ! python3 -c 'import ensurepip' 2>/dev/null; then
    deb python3-venv
  fi
}

check_suite() {
  if have cargo; then # the first step: cargo fmt and clippy
    cargo fmt --version >/dev/null 2>&1 || tools+=("rustfmt (rustup component add rustfmt)")
    cargo clippy --version >/dev/null 2>&1 || tools+=("clippy (rustup component add clippy)")
  fi
  # The fault-injection tests that need root (README) use chattr and mount; they skip without it.
  if [ "$(id -u)" = 0 ] || [ "${CI:-}" = true ]; then
    have chattr || deb e2fsprogs
    have mount || deb mount
  fi
  if runs SKIP_CONFORMANCE || runs SKIP_BROWSER || runs SKIP_PAIRS; then
    have curl || deb curl # their scripts wait for /health with it
  fi
  if runs SKIP_BROWSER || runs SKIP_FRAMEWORKS; then
    have chromium || have chromium-browser || deb chromium
    # A CJK font, so that the screenshots of a zh page show its text rather than empty boxes.
    [ -e /usr/share/fonts/truetype/wqy/wqy-zenhei.ttc ] || deb fonts-wqy-zenhei
  fi
  if runs SKIP_BROWSER; then
    have nginx || deb nginx
  fi
  if runs SKIP_PAIRS; then
    have haproxy || deb haproxy
    have ip || deb iproute2 # the host-loss test's hosts are network namespaces
  fi
  if runs SKIP_STATIC; then
    have file || deb file
  fi
  if runs SKIP_FUZZ; then
    have c++ || deb g++ # libfuzzer-sys compiles libFuzzer (C++) for the fuzz targets
  fi
  if runs SKIP_CONFORMANCE || runs SKIP_BROWSER || runs SKIP_FRAMEWORKS || runs SKIP_REAL_KERNEL || runs SKIP_PAIRS; then
    if ! have node || ! node -e 'process.exit(parseInt(process.versions.node) < 20 ? 1 : 0)' 2>/dev/null; then
      tools+=("Node >= 20 with npm (node is $(node --version 2>/dev/null || echo missing);" \
        "Debian 12 packages 18: https://nodejs.org or NodeSource)")
    elif ! have npm; then
      tools+=("npm (the one that comes with Node >= 20)")
    fi
  fi
}

# Fills debs (missing Debian packages) and tools (missing toolchain parts, one line each).
check() {
  debs=()
  tools=()
  if part build; then check_build; fi
  if part kernel; then check_kernel; fi
  if part suite; then check_suite; fi
}

check
# apt-get update only when the install fails: the package lists are usually fresh enough, and an
# update takes longer than the install on a machine that has them.
if [ "${#debs[@]}" -gt 0 ] && [ "$(id -u)" = 0 ] && have apt-get; then
  echo "prereqs.sh: installing Debian's ${debs[*]} (about 1-2 minutes)..." >&2
  apt_get() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${debs[@]}" >/dev/null; }
  apt_get || { apt-get update -qq >/dev/null && apt_get; } || true
  check
fi
if [ "${#debs[@]}" -eq 0 ] && [ "${#tools[@]}" -eq 0 ]; then
  exit 0
fi

{
  echo "$caller: missing what it needs; nothing was run."
  if [ "${#debs[@]}" -gt 0 ]; then
    echo "  Debian packages: ${debs[*]}"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo "
    echo "    install them:  ${sudo}apt-get install -y --no-install-recommends ${debs[*]}"
    [ "$(id -u)" = 0 ] || echo "    (as root, $caller installs them itself)"
  fi
  for t in "${tools[@]}"; do echo "  $t"; done
  if [[ "$caller" == tests/run-all.sh ]]; then
    echo "  A step can be skipped instead: SKIP_BROWSER=1, SKIP_FRAMEWORKS=1, SKIP_PAIRS=1," \
      "SKIP_CONFORMANCE=1, SKIP_REAL_KERNEL=1, SKIP_STATIC=1, SKIP_FUZZ=1."
  fi
} >&2
exit 1
