#!/usr/bin/env bash
# Writes HAProxy maps from the pairs' own state dirs, so that threads and users keep their pair
# when pairs are added or routing by user is switched on (contrib/deploy/README.md):
#
#   contrib/deploy/thread-map.sh N > /etc/haproxy/agui-threads.map          # threadId -> pairI
#   contrib/deploy/thread-map.sh --users N > /etc/haproxy/agui-users.map    # userId -> pairI
#   # then name them in /etc/default/haproxy (AGUI_THREAD_MAP=…, AGUI_USER_MAP=…) and reload HAProxy
#
# A user is pinned to the pair that holds most of its threads (the lowest pair on a tie); with
# routing by user from the start that is the only pair holding any. PAIRS_ROOT as for pairs.sh.
# Ids with whitespace cannot be map keys: they are reported on stderr (such a thread or user would
# be hashed like a new one).
set -euo pipefail
ROOT="${PAIRS_ROOT:-/var/lib/iac-code-pairs}"
what=threads
if [ "${1:-}" = "--users" ]; then what=users; shift; fi
n="${1:?usage: $0 [--users] N}"
python3 - "$ROOT" "$n" "$what" <<'PY'
import collections, json, os, sys
root, n, what = sys.argv[1], int(sys.argv[2]), sys.argv[3]
users = collections.defaultdict(collections.Counter)
for i in range(1, n + 1):
    threads, backend = os.path.join(root, f"pair-{i}", "agui", "threads"), f"pair{i}"
    for name in sorted(os.listdir(threads)) if os.path.isdir(threads) else []:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(threads, name), encoding="utf-8") as f:
                doc = json.load(f)
            tid = doc["threadId"]
        except (OSError, ValueError, KeyError) as e:
            print(f"skipped {name}: {e}", file=sys.stderr)
            continue
        key = tid if what == "threads" else doc.get("userId")
        if not key:
            continue
        if any(c.isspace() for c in key):
            print(f"an id with whitespace cannot be pinned: {key!r}", file=sys.stderr)
            continue
        if what == "threads":
            print(f"{key} {backend}")
        else:
            users[key][i] += 1
for user, pairs in sorted(users.items()):
    best = max(pairs.values())
    print(f"{user} pair{min(p for p, c in pairs.items() if c == best)}")
PY
