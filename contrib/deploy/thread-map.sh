#!/usr/bin/env bash
# Writes an HAProxy map "threadId pairI" of every thread each pair holds, from the pairs' own state
# dirs, so that the threads keep their pair when pairs are added (contrib/deploy/README.md).
#
#   contrib/deploy/thread-map.sh N > /etc/haproxy/agui-threads.map   # then reload HAProxy
#
# PAIRS_ROOT as for pairs.sh. Thread ids with whitespace cannot be map keys: they are reported on
# stderr (such a thread would be hashed like a new one).
set -euo pipefail
ROOT="${PAIRS_ROOT:-/var/lib/iac-code-pairs}"
n="${1:?usage: $0 N}"
for i in $(seq 1 "$n"); do
  python3 - "$ROOT/pair-$i/agui/threads" "pair$i" <<'PY'
import json, os, sys
threads, backend = sys.argv[1], sys.argv[2]
for name in sorted(os.listdir(threads)) if os.path.isdir(threads) else []:
    if not name.endswith(".json"):
        continue
    try:
        with open(os.path.join(threads, name), encoding="utf-8") as f:
            tid = json.load(f)["threadId"]
    except (OSError, ValueError, KeyError) as e:
        print(f"skipped {name}: {e}", file=sys.stderr)
        continue
    if not tid or any(c.isspace() for c in tid):
        print(f"thread id with whitespace cannot be pinned: {tid!r}", file=sys.stderr)
        continue
    print(f"{tid} {backend}")
PY
done
