#!/usr/bin/env bash
# MSRV check: fails when any package of the resolved dependency graph (Cargo.lock, every
# platform) declares a `rust-version` newer than ours (Cargo.toml's `rust-version`).
#   bash tests/msrv.sh        (from anywhere; needs cargo and python3, no build, no network)
# Std APIs newer than the MSRV are caught by clippy's `incompatible_msrv` lint (on by default,
# reads the same `rust-version`). The lock stays MSRV-aware through .cargo/config.toml
# (`incompatible-rust-versions = "fallback"`), so a plain `cargo update` keeps this check green.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo metadata --format-version 1 --locked --quiet | python3 -c '
import json, sys
m = json.load(sys.stdin)
def key(v):
    return tuple(int(x) for x in (v.split(".") + ["0", "0"])[:3])
resolved = {n["id"] for n in m["resolve"]["nodes"]}
members = set(m["workspace_members"])
ours = [p for p in m["packages"] if p["id"] in members and p["name"] == "iac-code-agui"]
msrv = ours[0].get("rust_version")
if not msrv:
    sys.exit("msrv.sh: Cargo.toml has no rust-version")
bad, unknown, n = [], 0, 0
for p in m["packages"]:
    if p["id"] not in resolved or p["id"] in members:
        continue
    n += 1
    rv = p.get("rust_version")
    if rv is None:
        unknown += 1
    elif key(rv) > key(msrv):
        bad.append((rv, p["name"], p["version"]))
if bad:
    for rv, name, ver in sorted(bad, key=lambda b: key(b[0]), reverse=True):
        print(f"msrv.sh: {name} {ver} needs Rust {rv} > rust-version {msrv}", file=sys.stderr)
    print("msrv.sh: run `cargo update` (the fallback resolver in .cargo/config.toml picks "
          "compatible releases) or raise rust-version in Cargo.toml and README", file=sys.stderr)
    sys.exit(1)
print(f"msrv.sh: all {n} locked packages build with Rust {msrv} "
      f"({n - unknown} declare a rust-version, {unknown} do not)")
'
