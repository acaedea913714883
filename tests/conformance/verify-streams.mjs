// Runs recorded AG-UI streams through @ag-ui/client's own verifyEvents, the check every
// HttpAgent.runAgent applies to what it receives (tests/real_kernel/run.py, scenario f).
//
//   node verify-streams.mjs FILE.json
//
// FILE.json: [{"label": "...", "events": [event, ...]}, ...], one entry per run (each a whole
// stream, RUN_STARTED first). Prints one JSON object: {"checked": N, "errors": [{label, error}]}.
// Exit 0 whether or not a stream failed (the caller decides); 2 on bad usage.

import { readFileSync } from "node:fs";
import { from, lastValueFrom, toArray } from "rxjs";
import { verifyEvents } from "@ag-ui/client";

const file = process.argv[2];
if (!file) {
  console.error("usage: node verify-streams.mjs FILE.json");
  process.exit(2);
}
const streams = JSON.parse(readFileSync(file, "utf8"));
const errors = [];
let checked = 0;
for (const { label, events } of streams) {
  try {
    const passed = await lastValueFrom(from(events).pipe(verifyEvents(false), toArray()));
    checked += passed.length;
  } catch (e) {
    errors.push({ label, error: String(e && e.message ? e.message : e) });
  }
}
console.log(JSON.stringify({ checked, errors }));
