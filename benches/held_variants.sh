#!/bin/bash
# Issue 27: build one adapter variant per changed size (each one sed on a clean tree, restored
# after), then hold 1,000 runs on each with figure 10 and print the rows (benches/REPORT.md,
# "where a held run's bytes go"). Needs a committed tree (it runs `git checkout src`) and the
# bench built with the same overrides (`cargo bench --bench adapter --no-run`). ~8 min.
set -u
cd "$(dirname "$0")/.."
export CARGO_PROFILE_BENCH_LTO=false CARGO_PROFILE_BENCH_CODEGEN_UNITS=16 CARGO_PROFILE_BENCH_INCREMENTAL=true
mkdir -p target/variants
build() { # name file sed-expr [file2 sed-expr2]
  name=$1; shift
  while [ $# -gt 0 ]; do sed -i "$2" "$1"; shift 2; done
  nice cargo build --profile bench --bin iac-code-agui 2>&1 | grep -E "^error" -A5
  cp target/release/iac-code-agui target/variants/$name
  git checkout -q src
  echo "built $name $(date -u +%T)"
}
build cur
build in16 src/a2a/client.rs 's/input_buffer_size(32 \* 1024)/input_buffer_size(16 * 1024)/'
build out32 src/a2a/client.rs 's/output_buffer_size(8 \* 1024)/output_buffer_size(32 * 1024)/'
build read16 src/sse.rs 's/^const FIRST_READ: usize = 4 \* 1024;/const FIRST_READ: usize = 16 * 1024;/'
build nostackrel src/run/mod.rs 's/                crate::memory::release_unused_stack();/                \/\/ variant: no release/' src/http/limits.rs 's/on_stream_wait: Some(crate::memory::release_unused_stack)/on_stream_wait: None/'
build ring512 src/feed/ring.rs 's/^const FIRST_BLOCK: usize = 4096;/const FIRST_BLOCK: usize = 512;/'
build frame256 src/stream/writer.rs 's/frame: Vec::with_capacity(4096),/frame: Vec::with_capacity(256),/'
nice cargo build --profile bench --bin iac-code-agui 2>&1 | grep -E "^error"
BENCHBIN=$(ls -t target/release/deps/adapter-* | grep -v "\.d$" | head -1)
for round in 1 2; do
for v in cur in16 out32 read16 nostackrel ring512 frame256 base; do
  # base: the build before (BASE_BIN, a release build of the commit to compare with)
  bin=target/variants/$v; [ $v = base ] && bin=${BASE_BIN:-target/base-iac-code-agui}; [ -x "$bin" ] || continue
  BENCH_ONLY=curve BENCH_ADAPTER_BIN=$PWD/$bin BENCH_CURVE_LEVELS=1000 BENCH_CURVE_INTERVALS=1 BENCH_CURVE_STREAMS= BENCH_CURVE_REFERENCE=0 timeout 200 $BENCHBIN --bench > /dev/null 2>&1
  echo "== $v round $round $(date -u +%T)"; grep "^| iac\|^- iac" target/bench-report.md
done
done
