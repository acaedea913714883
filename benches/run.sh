#!/usr/bin/env bash
# Builds the static release binary, runs the benchmark and keeps its report as benches/REPORT.md.
#   benches/run.sh            (from anywhere; about 3-5 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
# The Python reference (section 5) from the one pinned install (contrib/kernel/requirements.lock,
# target/real-kernel-venv); optional: without it the report says the reference was not run.
bash tests/real_kernel/setup.sh >&2 || echo "the reference adapter is not installed; section 5 will be skipped" >&2

TARGET=x86_64-unknown-linux-gnu
echo "== static release build ($TARGET, +crt-static)" >&2
if rustup target list --installed 2>/dev/null | grep -qx "$TARGET" || [ "$(rustc -vV | sed -n 's/^host: //p')" = "$TARGET" ]; then
    RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --target "$TARGET" --bin iac-code-agui
else
    echo "target $TARGET is not installed; the report will say the static binary was not built" >&2
fi

echo "== cargo bench --bench adapter" >&2
cargo bench --bench adapter

cp target/bench-report.md benches/REPORT.md
# Figure 10's plots (SVG, drawn by the bench).
mkdir -p benches/curve && cp target/bench-curve/*.svg benches/curve/ 2>/dev/null || true
echo "== report: benches/REPORT.md" >&2
