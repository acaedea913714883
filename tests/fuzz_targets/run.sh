#!/usr/bin/env bash
# Builds the coverage-guided fuzz targets (libFuzzer, through libfuzzer-sys) and runs them.
#   bash tests/fuzz_targets/run.sh build                    build every target (about 1 min cold)
#   bash tests/fuzz_targets/run.sh replay                   every committed corpus, once through
#   bash tests/fuzz_targets/run.sh fuzz SECS [TARGET...]    each target (default all) for SECS s,
#                                                           from its corpus (FUZZ_RUNS caps runs)
#   bash tests/fuzz_targets/run.sh merge [TARGET...]        minimise corpus/ + target/fuzz/work into
#                                                           corpus/ (every edge, fewest inputs)
# dict/TARGET.dict holds the keywords of the target's format (field names, states, header names).
# A campaign's finds go to target/fuzz/work/TARGET (the committed corpus/TARGET is its seed, and
# `merge` keeps what adds coverage); a crash, hang (-timeout) or out-of-memory (-rss_limit_mb)
# leaves its input in target/fuzz/artifacts/ and fails the run. The hang limit is 60 s of wall time:
# every input runs in milliseconds, but a campaign under nice on a loaded machine can wait 20 s
# for a CPU (a 10 s limit once reported a 13 ms input as a hang).
#
# Stable Rust: the instrumentation is LLVM's SanitizerCoverage through -Cpasses/-Cllvm-args (stable
# flags), the same cargo-fuzz passes; no sanitizer (-Zsanitizer needs nightly), so the targets check
# Rust's own panics, overflow checks and debug assertions. `cargo fuzz` is not needed.
set -euo pipefail
cd "$(dirname "$0")"
TARGETS=(run_input control_bodies sse a2a_frame a2a_stream cursor accept_language yaml_config http_head)
triple="$(rustc -vV | sed -n 's/^host: //p')"
export CARGO_TARGET_DIR="$PWD/../../target/fuzz"
bin="$CARGO_TARGET_DIR/$triple/release"
work="$CARGO_TARGET_DIR/work"
artifacts="$CARGO_TARGET_DIR/artifacts"

build() {
  # --target keeps the instrumentation off build scripts and proc macros (they run on the host).
  RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks" \
    cargo build --quiet --release --locked --target "$triple" --bins
}

targets() { if [ $# -gt 0 ]; then echo "$@"; else echo "${TARGETS[@]}"; fi; }

case "${1:-}" in
  build) build ;;
  replay)
    build
    mkdir -p "$CARGO_TARGET_DIR"
    for t in "${TARGETS[@]}"; do
      printf '%-16s ' "$t"
      # Files, not the directory: libFuzzer then only runs them (it writes nothing into corpus/).
      "$bin/$t" corpus/"$t"/* >"$work-replay-$t.log" 2>&1 || {
        grep -B2 -A12 'panicked' "$work-replay-$t.log" >&2 || tail -20 "$work-replay-$t.log" >&2
        exit 1
      }
      echo "$(ls "corpus/$t" | wc -l) inputs"
    done
    ;;
  fuzz)
    secs="${2:?seconds per target}"
    shift 2
    build
    mkdir -p "$artifacts"
    for t in $(targets "$@"); do
      mkdir -p "$work/$t"
      echo "== $t: ${secs}s" >&2
      log="$work/$t.log"
      status=0
      dict=()
      [ -f "dict/$t.dict" ] && dict=(-dict="dict/$t.dict")
      "$bin/$t" "${dict[@]}" -max_total_time="$secs" -runs="${FUZZ_RUNS:--1}" -timeout=60 -rss_limit_mb=2048 \
        -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts/$t-" \
        "$work/$t" "corpus/$t" >"$log" 2>&1 || status=$?
      grep -E '^(#[0-9]+ +(INITED|DONE)|stat::|==[0-9]+== ERROR|SUMMARY|Done)' "$log" || true
      if [ "$status" != 0 ]; then
        grep -B2 -A12 'panicked' "$log" >&2 || tail -20 "$log" >&2
        echo "fuzz target $t failed (exit $status): the input is in $artifacts" >&2
        exit 1
      fi
    done
    ;;
  merge)
    shift
    build
    for t in $(targets "$@"); do
      tmp="$(mktemp -d)"
      # Edges only (no hit counts, no comparison operands), the fewest and smallest inputs that
      # cover them: every edge the campaigns reached, in kilobytes rather than megabytes.
      "$bin/$t" -set_cover_merge=1 -use_counters=0 -use_cmp=0 -max_len=65536 "$tmp" \
        "corpus/$t" "$work/$t" 2>&1 | grep -E 'MERGE-OUTER: [0-9]+ new files' || true
      rm -rf "corpus/$t" && mv "$tmp" "corpus/$t"
      echo "$t: $(ls "corpus/$t" | wc -l) files, $(cat "corpus/$t"/* | wc -c) bytes"
    done
    ;;
  *) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
