// Runs AG-UI events (a JSON array in the file named by argv[2]) through @ag-ui/client's own
// verifyEvents, as connectAgent() does, and prints "ok N" or "error <message>" (exit 0 / 1).
// Packages are resolved from the node_modules directory named by argv[3] (tests/conformance's).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const require = createRequire(pathToFileURL(process.argv[3] + "/"));
const { verifyEvents } = await import(pathToFileURL(require.resolve("@ag-ui/client")).href);
const { from, lastValueFrom, toArray } = await import(pathToFileURL(require.resolve("rxjs")).href);

const events = JSON.parse(readFileSync(process.argv[2], "utf8"));
try {
  const out = await lastValueFrom(from(events).pipe(verifyEvents(false), toArray()));
  console.log(`ok ${out.length}`);
} catch (e) {
  console.log(`error ${e && e.message ? e.message : e}`);
  process.exit(1);
}
