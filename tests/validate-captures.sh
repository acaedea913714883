#!/usr/bin/env bash
# Validates AG-UI events with the Python `ag-ui-protocol` models (pinned in
# tests/real_kernel/requirements-validator.txt), each event by the model of its own type:
# every stream the Rust integration tests read (captured through AGUI_CAPTURE_DIR) plus the
# reference adapter's recorded streams in tests/data/.
#   bash tests/validate-captures.sh <capture-dir>
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:?capture dir}"
venv="${VENV:-$PWD/target/real-kernel-venv}"
models="$venv/ag-ui-protocol-1.0.0"
[ -d "$models/ag_ui" ] || bash tests/real_kernel/setup.sh
all="$dir/all-events.jsonl"
cat "$dir"/[0-9]*.jsonl > "$all"
python3 - "$all" tests/data/*.agui.sse <<'PY'
import json, sys
out, files = sys.argv[1], sys.argv[2:]
with open(out, "a", encoding="utf-8") as fh:
    for f in files:
        n = 0
        for line in open(f, encoding="utf-8"):
            if line.startswith("data: "):
                fh.write(json.dumps({"stream": "capture/" + f.split("/")[-1], "index": n, "raw": line[6:].strip()}) + "\n")
                n += 1
PY
report=$(PYTHONPATH="$models" "$venv/bin/python" tests/real_kernel/run.py --validate-file "$all" | tail -n 1)
python3 - "$report" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
print(f"ag-ui-protocol {r['version']}: {r['checked']} events validated, {len(r['errors'])} invalid, "
      f"{len(r['strict_errors'])} valid only in lax mode")
for e in r["errors"][:20]:
    print(f"  INVALID {e['stream']}#{e['index']}: {e['raw'][:160]}\n    {e['error'][:400]}")
sys.exit(1 if r["errors"] or r["version"] != "1.0.0" or r["checked"] == 0 else 0)
PY
