// What both pair drivers share (drive.mjs with fake kernels, drive-real.mjs with real ones): the
// report, the pairs' state dirs, HAProxy with contrib/deploy/haproxy.cfg, and one run through
// @ag-ui/client. Each driver reads its environment (WORK, ROOT, BASE_PORT) from run.sh.

import { createHash, randomUUID } from "node:crypto";
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { HttpAgent } from "@ag-ui/client";

export const WORK = process.env.WORK;
export const ROOT = process.env.ROOT;
export const BASE = Number(process.env.BASE_PORT);
export const PROXY = `http://127.0.0.1:${BASE}`;

// ---- the report --------------------------------------------------------------------------------

const t0 = Date.now();
let failures = 0;
export const log = (s) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${s}`);
export function check(ok, what) {
  log(`${ok ? "PASS" : "FAIL"}  ${what}`);
  if (!ok) failures++;
  return ok;
}
// The console of @ag-ui/client: warnings about the stream are failures.
export const warnings = [];
console.warn = (...a) => warnings.push(a.join(" "));
// It also prints every failed run (a refused request is an expected outcome here): not shown.
console.error = () => {};

/** Runs `main`, then stops HAProxy and exits 1 if any check failed. */
export function runChecks(main) {
  main()
    .catch((e) => {
      log(`FAIL  ${e.stack || e}`);
      failures++;
    })
    .finally(() => {
      haproxy?.kill();
      log(failures ? `${failures} check(s) failed` : "all checks passed");
      process.exit(failures ? 1 : 0);
    });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- the pairs, HAProxy ------------------------------------------------------------------------

export const pairDir = (i) => path.join(WORK, "pairs", `pair-${i}`);
export const pairsSh = (...args) =>
  execFileSync("bash", [path.join(ROOT, "contrib/deploy/pairs.sh"), ...args], { stdio: "pipe" }).toString().trim();
export const contextId = (thread) => "agui-" + createHash("sha256").update(thread).digest("hex").slice(0, 40);

/** The thread ids pair `i` holds, from its own state dir. */
export function held(i) {
  const dir = path.join(pairDir(i), "agui", "threads");
  if (!fs.existsSync(dir)) return new Set();
  return new Set(
    fs.readdirSync(dir).filter((f) => f.endsWith(".json")).map((f) => JSON.parse(fs.readFileSync(path.join(dir, f), "utf8")).threadId),
  );
}

let haproxy = null;
/** (Re)starts HAProxy with contrib/deploy/haproxy.cfg: ports rewritten to BASE_PORT's, the thread
 * map `map` and the user map `userMap` (named by AGUI_THREAD_MAP and AGUI_USER_MAP, as
 * /etc/default/haproxy would; no user map when null), `maxconn`, and `edit` for
 * whatever else a driver changes. */
export async function startHaproxy({ map = "", userMap = null, maxconn = 1000, edit = (cfg) => cfg } = {}) {
  if (haproxy) {
    haproxy.kill();
    await new Promise((r) => haproxy.once("exit", r));
  }
  const mapFile = path.join(WORK, "threads.map");
  fs.writeFileSync(mapFile, map);
  const userMapFile = path.join(WORK, "users.map");
  if (userMap !== null) fs.writeFileSync(userMapFile, userMap);
  const cfg = fs
    .readFileSync(path.join(ROOT, "contrib/deploy/haproxy.cfg"), "utf8")
    .replace("log stdout format raw local0 notice", "log stderr format raw local0 info")
    .replace(/maxconn \d+/, `maxconn ${maxconn}`)
    .replace(/127\.0\.0\.1:413(\d\d)/g, (_, n) => `127.0.0.1:${BASE + Number(n)}`);
  const file = path.join(WORK, "haproxy.cfg");
  fs.writeFileSync(file, edit(cfg));
  const out = fs.openSync(path.join(WORK, "haproxy.log"), "a");
  haproxy = spawn("haproxy", ["-db", "-f", file], { stdio: ["ignore", out, out], env: { ...process.env, AGUI_THREAD_MAP: mapFile, ...(userMap !== null ? { AGUI_USER_MAP: userMapFile } : {}) } });
  fs.writeFileSync(path.join(WORK, "haproxy.pid"), String(haproxy.pid));
  for (let i = 0; i < 100; i++) {
    try {
      if ((await fetch(`${PROXY}/health`)).ok) return;
    } catch {}
    await sleep(50);
  }
  throw new Error("HAProxy did not start");
}

// ---- one run through @ag-ui/client -------------------------------------------------------------

/** One run: `{ok, outcome, status, code, message, cause, types, executionId}`. Messages added for
 * a run that was refused are taken back, as a client retrying the same turn would. */
export async function turn(agent, { text, resume, cwd, userId, runId = `run-${randomUUID()}`, onSession, timeoutMs = 30_000 }) {
  const before = agent.messages.length;
  if (text) agent.addMessage({ id: `u-${randomUUID()}`, role: "user", content: text });
  const r = { ok: false, types: [], outcome: null };
  const subscriber = {
    onEvent: ({ event }) => {
      r.types.push(event.type);
      if (event.type === "CUSTOM" && event.name === "iac-code.session.v1") {
        r.executionId = event.value?.executionId;
        onSession?.(r.executionId);
      }
    },
    onRunFinishedEvent: (p) => (r.outcome = p.outcome),
    onRunErrorEvent: ({ event }) => ((r.code = event.code), (r.message = event.message)),
  };
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  const forwardedProps = { iacCode: { schemaVersion: 1, rosInvocationId: `inv-${agent.threadId}`, cwd, ...(userId ? { userId } : {}) } };
  try {
    await agent.runAgent({ forwardedProps, resume, runId, abortController: controller }, subscriber);
    r.ok = r.outcome !== null && !r.code;
  } catch (e) {
    r.status = e.status;
    r.code = r.code || e.payload?.error?.code;
    r.message = e.payload?.error?.message || String(e.message);
    // A transport failure (no HTTP status): keep undici's cause and the client port, to find the
    // connection in haproxy.log (kept with the other logs when the run fails).
    if (e.cause) r.cause = { code: e.cause.code, message: e.cause.message, at: new Date().toISOString(), localPort: e.cause.socket?.localPort };
    if (e.status) agent.messages.splice(before);
  } finally {
    clearTimeout(timer);
  }
  return r;
}

// ---- a console's requests: routed by user ------------------------------------------------------

const EXT = "/extensions/iac-code/v1";

/** A console's agent: its user named in X-AGUI-User-Id (and the thread in X-AGUI-Thread-Id). */
export const userAgent = (user, threadId) =>
  new HttpAgent({ url: `${PROXY}/`, threadId, headers: { "X-AGUI-User-Id": user, "X-AGUI-Thread-Id": threadId } });

/** GET through HAProxy (or `base`) as the user's console does: `[status, json]`. */
export async function getJson(route, user, base = PROXY) {
  const res = await fetch(`${base}${EXT}${route}`, { headers: user ? { "X-AGUI-User-Id": user } : {} });
  return [res.status, await res.json().catch(() => null)];
}

/** Opens the thread's live feed through HAProxy (as `user`, or by `ros`); `until(runId)` resolves with the run's event
 * types once its RUN_FINISHED/RUN_ERROR arrived (or null after `ms`). */
export async function openFeed(user, threadId, { ros } = {}) {
  const controller = new AbortController();
  // Without a user: by the thread's rosInvocationId, no header (routed by the thread's path).
  const q = ros ? `rosInvocationId=${encodeURIComponent(ros)}` : `userId=${encodeURIComponent(user)}`;
  const res = await fetch(`${PROXY}${EXT}/threads/${encodeURIComponent(threadId)}/events?${q}`, {
    headers: { ...(ros ? {} : { "X-AGUI-User-Id": user }), Accept: "text/event-stream" },
    signal: controller.signal,
  });
  const events = [];
  const waiters = [];
  const pump = (async () => {
    if (!res.ok || !res.body) return;
    const decoder = new TextDecoder();
    let buf = "";
    try {
      for await (const chunk of res.body) {
        buf += decoder.decode(chunk, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
          if (data) events.push(JSON.parse(data));
          waiters.forEach((w) => w());
        }
      }
    } catch {}
  })();
  const until = (runId, ms = 15_000) =>
    new Promise((resolve) => {
      const done = () => {
        if (events.some((e) => (e.type === "RUN_FINISHED" || e.type === "RUN_ERROR") && e.runId === runId)) resolve(runTypes(runId));
      };
      const runTypes = (id) => {
        const from = events.findIndex((e) => e.type === "RUN_STARTED" && e.runId === id);
        const to = events.findIndex((e, k) => k > from && (e.type === "RUN_FINISHED" || e.type === "RUN_ERROR"));
        return events.slice(from, to + 1).map((e) => e.type);
      };
      waiters.push(done);
      done();
      setTimeout(() => resolve(null), ms);
    });
  return { status: res.status, until, close: () => (controller.abort(), pump) };
}

