#!/usr/bin/env node
// A host lost for good (started by tests/pairs/hostloss.sh, which makes the bridge and cleans up).
//
//  1. Hosts 1-3 (network namespaces, 10.x.y.11-13) run pairs 1-3 (contrib/deploy/pairs.sh,
//     --pair-mode, all on port 41243 of their own address, each with its own local HOME and
//     TMPDIR); the resolver names them agui-0/1/2.agui.test; HAProxy runs
//     contrib/deploy/haproxy-dns.sh's configuration (checked with `haproxy -c`). PAIRS_THREADS
//     threads x 2 turns through HAProxy; on turn 2 about a third of each pair's threads are left on
//     a pending permission interrupt.
//  2. The host of the pair with the most threads is lost: every process in it SIGKILLed, the
//     namespace (and its address) deleted, its local disk removed, its name gone (NXDOMAIN).
//     Meanwhile its threads get 503 STATE_UNAVAILABLE (new turns and resumes), new threads that
//     hash to it too (HAProxy keeps the server in the ring: `hold nx`), and nothing of them is
//     created on another pair; the other pairs' threads go on.
//  3. Its volume is started as the same pair on host 4 (a new address), and its name points there.
//     HAProxy follows (its server address is the new one); every thread of the pair continues on
//     its next turn — the same kernel session, its history kept (…/messages), every pending
//     interrupt answered (allow_once: the tool ran) — within 60 s; the threads refused during the
//     outage start there. Nothing in the pair's volume names a host address or a port.
// Prints its figures (time from the new pair's start to the first thread served, threads
// continued, turns failed) and one line per check; exits 1 on any failure.

import { randomUUID } from "node:crypto";
import { execFile, execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { HttpAgent } from "@ag-ui/client";
import { WORK, ROOT, BASE, PROXY, log, check, warnings, runChecks, sleep, pairDir, contextId, held, turn as turnWith, getJson } from "./common.mjs";
import { startDns } from "./dns.mjs";

const REAL = !!process.env.HL_REAL;
const TAG = process.env.HL_TAG;
const SUB = process.env.HL_SUB;
const WS = process.env.CWD;
const N = Number(process.env.PAIRS_THREADS);
const PORT = 41243;
const LLM_PORT = 41290;
const DNS_PORT = BASE + 53;

// ---- hosts -----------------------------------------------------------------------------------

const ns = (h) => `${TAG}-h${h}`;
const addr = (h) => `${SUB}.${10 + h}`;
const hostDir = (h) => path.join(WORK, "hosts", `h${h}`);
const podName = (i) => `agui-${i - 1}.agui.test`;
const ip = (...args) => execFileSync("ip", args, { stdio: "pipe" }).toString();

/** A new host: a namespace with its own address on the bridge, and its own local disk. */
function hostUp(h) {
  ip("netns", "add", ns(h));
  ip("link", "add", `${TAG}v${h}`, "type", "veth", "peer", "name", "eth0", "netns", ns(h));
  ip("link", "set", `${TAG}v${h}`, "master", process.env.HL_BRIDGE, "up");
  ip("-n", ns(h), "addr", "add", `${addr(h)}/24`, "dev", "eth0");
  ip("-n", ns(h), "link", "set", "eth0", "up");
  ip("-n", ns(h), "link", "set", "lo", "up");
  for (const d of ["home", "tmp"]) fs.mkdirSync(path.join(hostDir(h), d), { recursive: true });
  if (REAL) {
    // The LLM the kernels call, on this host's loopback (the same URL on every host).
    const out = fs.openSync(path.join(WORK, `llm-h${h}.log`), "a");
    const llm = spawn("ip", ["netns", "exec", ns(h), "python3", path.join(ROOT, "tests/real_kernel/fake_llm.py"), "--port", String(LLM_PORT)], { stdio: ["ignore", out, out], detached: true });
    llm.unref();
  }
}

/** The host is lost for good: its processes die, its address and its local disk are gone. */
async function hostLost(h) {
  const pids = ip("netns", "pids", ns(h)).split("\n").filter(Boolean).map(Number);
  for (const pid of pids) process.kill(pid, "SIGKILL");
  for (let i = 0; i < 100 && pids.some((pid) => fs.existsSync(`/proc/${pid}`)); i++) await sleep(50);
  ip("netns", "del", ns(h));
  fs.rmSync(hostDir(h), { recursive: true, force: true });
  return pids.length;
}

/** Pair `i` (its volume: PAIRS_ROOT/pair-i) started on host `h`; resolves once it is healthy.
 * Asynchronous: the resolver runs in this process and must keep answering meanwhile. */
function startPair(i, h) {
  const env = { ...process.env, PAIR_HOST: addr(h), PAIR_PORT: String(PORT), HOME: path.join(hostDir(h), "home"), TMPDIR: path.join(hostDir(h), "tmp") };
  return new Promise((resolve, reject) =>
    execFile("ip", ["netns", "exec", ns(h), "bash", path.join(ROOT, "contrib/deploy/pairs.sh"), "start-one", String(i)], { env }, (e) => (e ? reject(e) : resolve())),
  );
}

async function waitLlm(h) {
  if (!REAL) return;
  for (let i = 0; i < 100; i++) {
    try {
      execFileSync("ip", ["netns", "exec", ns(h), "curl", "-fsS", `http://127.0.0.1:${LLM_PORT}/v1/models`], { stdio: "pipe" });
      return;
    } catch {}
    await sleep(100);
  }
  throw new Error(`the LLM of host ${h} did not start`);
}

// ---- HAProxy (contrib/deploy/haproxy-dns.sh) -------------------------------------------------

async function startHaproxy() {
  const cfg = execFileSync("bash", [path.join(ROOT, "contrib/deploy/haproxy-dns.sh")], {
    env: { ...process.env, PAIRS: "3", PAIR_NAME: "agui-%d.agui.test", PAIR_PORT: String(PORT), NAMESERVER: `127.0.0.1:${DNS_PORT}`, BIND: `127.0.0.1:${BASE}` },
  })
    .toString()
    .replace("log stdout format raw local0 notice", "log stderr format raw local0 info")
    .replace(/maxconn \d+/, "maxconn 1000")
    .replace("bind 127.0.0.1:41399", `bind 127.0.0.1:${BASE + 99}`)
    .replace("global\n", `global\n    stats socket ${path.join(WORK, "haproxy.sock")} mode 600 level admin\n`);
  const file = path.join(WORK, "haproxy.cfg");
  fs.writeFileSync(file, cfg);
  let valid = true;
  try {
    execFileSync("haproxy", ["-c", "-q", "-f", file], { stdio: "pipe" });
  } catch {
    valid = false;
  }
  check(valid, "haproxy -c on contrib/deploy/haproxy-dns.sh's configuration");
  const out = fs.openSync(path.join(WORK, "haproxy.log"), "a");
  const haproxy = spawn("haproxy", ["-db", "-f", file], { stdio: ["ignore", out, out] });
  fs.writeFileSync(path.join(WORK, "haproxy.pid"), String(haproxy.pid));
  for (let i = 0; i < 100; i++) {
    try {
      if ((await fetch(`${PROXY}/health`)).ok) return;
    } catch {}
    await sleep(50);
  }
  throw new Error("HAProxy did not start");
}

/** The address HAProxy's routing backend has for pair `i` (runtime API: `show servers state`). */
async function serverAddr(i) {
  const out = await new Promise((resolve, reject) => {
    const s = net.connect(path.join(WORK, "haproxy.sock"));
    let buf = "";
    s.on("data", (d) => (buf += d));
    s.on("end", () => resolve(buf));
    s.on("error", reject);
    s.write("show servers state pairs\n");
  });
  const line = out.split("\n").find((l) => l.split(" ")[3] === `pair${i}`);
  return line?.split(" ")[4];
}

// ---- turns -------------------------------------------------------------------------------------

const turn = (agent, opts) => turnWith(agent, { cwd: WS, timeoutMs: REAL ? 90_000 : 30_000, ...opts });
const say = () => (REAL ? `Describe a VPC template. [[cwd=${WS}]]` : "hello");
const permissionDir = (a) => path.join(WS, a.threadId);
const askPermission = (a) => (REAL ? `Please write hello.txt in the workspace. [[cwd=${permissionDir(a)}]]` : "scenario:permission");
const allow = (a) => [{ interruptId: a.pendingInterrupts[0].id, status: "resolved", payload: { decision: "allow_once" } }];
// HAProxy's JSON 503, or — for a request on a reused client connection — a close with no
// response: on a connect timeout HAProxy answers only a connection's first request and closes
// the others silently (http_return_srv_error, TX_NOT_FIRST), so the client may resend: nothing
// reached any pair.
const closed = (r) => r.status === undefined && r.message === "fetch failed";
const brief = (r) => JSON.stringify({ ok: r.ok, outcome: r.outcome, status: r.status, code: r.code, message: r.message?.slice(0, 160) });
const firstBad = (rs, good) => (rs.every(good) ? "" : `: ${brief(rs.find((r) => !good(r)))}`);

/** The thread's state file in pair `i`'s volume. */
const threadDoc = (i, t) => {
  const dir = path.join(pairDir(i), "agui", "threads");
  for (const f of fs.readdirSync(dir)) {
    const doc = JSON.parse(fs.readFileSync(path.join(dir, f), "utf8"));
    if (doc.threadId === t) return doc;
  }
  return null;
};

/** The kernel's session for each context, from pair `i`'s volume: contextId -> session. */
function kernelSessions(i) {
  if (!REAL) {
    const f = path.join(pairDir(i), "config", "fake-kernel.json");
    return new Map(fs.existsSync(f) ? Object.entries(JSON.parse(fs.readFileSync(f, "utf8")).sessions) : []);
  }
  const dir = path.join(pairDir(i), "config", "a2a", "contexts");
  if (!fs.existsSync(dir)) return new Map();
  return new Map(fs.readdirSync(dir).map((f) => {
    const c = JSON.parse(fs.readFileSync(path.join(dir, f), "utf8"));
    return [f.replace(/\.json$/, ""), c.session_id ?? c.sessionId];
  }));
}

const history = async (a) => {
  const [status, body] = await getJson(`/threads/${encodeURIComponent(a.threadId)}/messages?rosInvocationId=${encodeURIComponent(`inv-${a.threadId}`)}`, null).catch(() => [0, null]);
  return { status, ids: (body?.messages || []).map((m) => m.id), texts: (body?.messages || []).map((m) => (typeof m.content === "string" ? m.content : "")) };
};

/** Every file of pair `i`'s volume (its logs aside) that names an address or a port. */
function hostNames(i, oldAddr) {
  const found = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (!p.endsWith(".log") && !p.endsWith(".pid")) {
        const text = fs.readFileSync(p, "latin1");
        const m = text.match(new RegExp(`${oldAddr.replaceAll(".", "\\.")}|(?:\\d{1,3}\\.){3}\\d{1,3}:\\d+|localhost:\\d+|:${PORT}\\b`));
        if (m) found.push(`${path.relative(pairDir(i), p)}: ${m[0]}`);
      }
    }
  };
  walk(pairDir(i));
  return found;
}

// ---- the scenario ------------------------------------------------------------------------------

async function main() {
  const dns = await startDns(DNS_PORT);
  for (const h of [1, 2, 3]) {
    hostUp(h);
    dns.set(podName(h), addr(h));
  }
  for (const h of [1, 2, 3]) await waitLlm(h);
  await Promise.all([1, 2, 3].map((h) => startPair(h, h)));
  await startHaproxy();
  log(`HAProxy on ${PROXY} (DNS on 127.0.0.1:${DNS_PORT}), pairs 1-3 on ${addr(1)}-${addr(3)}:${PORT}, ${N} threads, ${REAL ? "real" : "fake"} kernels`);

  // 1. traffic, then pending interrupts
  const agents = Array.from({ length: N }, (_, i) => new HttpAgent({ url: `${PROXY}/`, threadId: `hl${i}-${randomUUID()}` }));
  const t1 = await Promise.all(agents.map((a) => turn(a, { text: say() })));
  check(t1.every((r) => r.ok), `turn 1 of ${N} threads through HAProxy (pairs found by DNS)${firstBad(t1, (r) => r.ok)}`);
  const owner = new Map(agents.map((a) => [a.threadId, [1, 2, 3].filter((p) => held(p).has(a.threadId))]));
  check([...owner.values()].every((o) => o.length === 1), "every thread is held by exactly one pair");
  const ownerOf = (a) => owner.get(a.threadId)[0];
  const counts = [1, 2, 3].map((p) => agents.filter((a) => ownerOf(a) === p).length);
  log(`      threads per pair: ${counts.join(" / ")}`);
  const victim = [1, 2, 3].reduce((a, b) => (counts[b - 1] > counts[a - 1] ? b : a));
  const parked = new Set([1, 2, 3].flatMap((p) => {
    const mine = agents.filter((a) => ownerOf(a) === p);
    return mine.slice(0, Math.max(1, Math.ceil(mine.length / 3)));
  }));
  for (const a of parked) fs.mkdirSync(permissionDir(a), { recursive: true });
  const t2 = await Promise.all(agents.map((a) => turn(a, { text: parked.has(a) ? askPermission(a) : say() })));
  check(t2.every((r, k) => r.ok && r.outcome === (parked.has(agents[k]) ? "interrupt" : "success")), `turn 2: ${parked.size} threads left on a pending permission interrupt, the others answered${firstBad(t2, (r) => r.ok)}`);

  const mine = agents.filter((a) => ownerOf(a) === victim);
  const others = agents.filter((a) => ownerOf(a) !== victim);
  const before = new Map();
  for (const a of mine) before.set(a.threadId, { history: await history(a), session: threadDoc(victim, a.threadId)?.iacCodeSessionId, kernel: kernelSessions(victim).get(contextId(a.threadId)) });
  check(mine.every((a) => before.get(a.threadId).history.status === 200 && before.get(a.threadId).kernel), `the ${mine.length} threads of pair ${victim} have a history and a kernel session`);
  const otherKernels = [1, 2, 3].filter((p) => p !== victim).map(kernelSessions);

  // 2. the host is lost
  const killed = await hostLost(victim);
  dns.set(podName(victim), null);
  log(`      host ${victim} lost: ${killed} processes SIGKILLed, ${addr(victim)} and its namespace deleted, its name gone`);
  await sleep(2500); // HAProxy has asked for the name (NXDOMAIN) at least twice
  // A refused turn is taken back (turn() does for a status; here also for a close with no
  // response), as a client retrying the same turn would: its next try carries the same history.
  const step = async (a) => {
    const n = a.messages.length;
    const r = await (a.pendingInterrupts?.length ? turn(a, { resume: allow(a) }) : turn(a, { text: say() }));
    if (closed(r)) a.messages.splice(n);
    return r;
  };
  const refused = (r) => (r.status === 503 && r.code === "STATE_UNAVAILABLE") || closed(r);
  // New threads, a batch at a time until one hashes to the lost pair (a third of them do).
  const newcomers = [];
  const fresh = [];
  const firstComers = async () => {
    for (let b = 0; b < 4 && !fresh.some(refused); b++) {
      const batch = Array.from({ length: REAL ? 3 : 12 }, () => new HttpAgent({ url: `${PROXY}/`, threadId: `hl-new${newcomers.length}-${randomUUID()}` }));
      newcomers.push(...batch);
      fresh.push(...(await Promise.all(batch.map(step))));
    }
  };
  const [dead, live] = await Promise.all([Promise.all(mine.map(step)), Promise.all(others.map(step)), firstComers()]);
  check(dead.every(refused), `meanwhile the ${dead.length} threads of pair ${victim} are refused, resumes included (${dead.filter((r) => r.status === 503).length} with HAProxy's JSON 503, ${dead.filter(closed).length} closed unanswered on a reused connection)${firstBad(dead, refused)}`);
  check(live.every((r) => r.ok && r.outcome === "success"), `meanwhile the ${live.length} threads of the other pairs go on (new turns and resumes)${firstBad(live, (r) => r.ok)}`);
  const waiting = newcomers.filter((_, k) => !fresh[k].ok);
  check(waiting.length > 0 && fresh.every((r) => r.ok || refused(r)) && newcomers.every((a, k) => fresh[k].ok === [1, 2, 3].some((p) => p !== victim && held(p).has(a.threadId))), `new threads during the outage: ${newcomers.length - waiting.length} start on the other pairs, ${waiting.length} that hash to pair ${victim} are refused (its server stays in HAProxy's ring)`);
  const elsewhere = [1, 2, 3].filter((p) => p !== victim).some((p) => mine.some((a) => held(p).has(a.threadId)));
  const kernelsNow = [1, 2, 3].filter((p) => p !== victim).map(kernelSessions);
  const sessionsElsewhere = kernelsNow.some((m, k) => mine.some((a) => m.has(contextId(a.threadId)) && !otherKernels[k].has(contextId(a.threadId))));
  check(!elsewhere && !sessionsElsewhere, `no other pair or kernel created anything for pair ${victim}'s threads`);

  // 3. the same volume on a new host
  hostUp(4);
  await waitLlm(4);
  const t0 = Date.now();
  dns.set(podName(victim), addr(4));
  let tUp = null;
  const started = startPair(victim, 4).then(() => (tUp = Date.now()));
  // When HAProxy's routing backend has the new address (its runtime API, every 50 ms), while
  // the pair starts.
  let tFollowed = null;
  for (let k = 0; k < 1200 && tFollowed === null; k++) {
    if ((await serverAddr(victim)) === addr(4)) tFollowed = Date.now();
    else await sleep(50);
  }
  check(tFollowed !== null, `HAProxy follows the name to the new host (${await serverAddr(victim)})`);
  await started;
  let tFirst = null;
  const back = await Promise.all(mine.map(async (a) => {
    const r = await step(a);
    if (r.ok && tFirst === null) tFirst = Date.now();
    return r;
  }));
  const tAll = Date.now();
  const sec = (t) => (t === null ? "never" : `${((t - t0) / 1000).toFixed(2)} s`);
  const failed = back.filter((r) => !(r.ok && r.outcome === "success")).length;
  const pendingMine = mine.filter((a) => parked.has(a)).length;
  const resumed = back.filter((r, k) => parked.has(mine[k]) && r.ok && r.types.includes("TOOL_CALL_RESULT") && (!REAL || fs.existsSync(path.join(permissionDir(mine[k]), "hello.txt")))).length;
  log(`FIGURES new pair started (health) ${sec(tUp)}, HAProxy on its new address ${sec(tFollowed)}, first thread served ${sec(tFirst)}, all ${back.length} served ${sec(tAll)}; threads continued ${back.length - failed}/${back.length}; turns failed ${failed}; pending approvals answered ${resumed}/${pendingMine}`);
  check(failed === 0 && tFirst !== null && tFirst - t0 < 60_000, `every thread of pair ${victim} continues on the new host within 60 s${firstBad(back, (r) => r.ok)}`);
  check(resumed === pendingMine && pendingMine > 0, `its ${pendingMine} pending permission interrupts are answered after the move (the tool ran)`);
  const sameSessions = mine.filter((a) => {
    const b = before.get(a.threadId);
    return threadDoc(victim, a.threadId)?.iacCodeSessionId === b.session && kernelSessions(victim).get(contextId(a.threadId)) === b.kernel;
  }).length;
  check(sameSessions === mine.length, `each thread kept its kernel session (the thread's state and the kernel's own record: ${sameSessions}/${mine.length})`);
  let kept = 0;
  for (const a of mine) {
    const h = await history(a);
    const old = before.get(a.threadId).history.ids;
    // In order, each in its place (a resumed tool's result joins before its interrupt), and more.
    let at = 0;
    for (const id of h.ids) if (id === old[at]) at++;
    if (h.status === 200 && at === old.length && h.ids.length > old.length) kept++;
  }
  check(kept === mine.length, `each thread's history through HAProxy holds what it held, in order, and the new turn (${kept}/${mine.length})`);
  const late = await Promise.all(waiting.map((a) => turn(a, { text: say() })));
  check(late.every((r) => r.ok) && waiting.every((a) => held(victim).has(a.threadId)), `the ${waiting.length} new threads refused during the outage start on pair ${victim}${firstBad(late, (r) => r.ok)}`);
  check(![1, 2, 3].filter((p) => p !== victim).some((p) => mine.some((a) => held(p).has(a.threadId))), "no thread of the pair was ever held by another pair");
  const named = hostNames(victim, addr(victim));
  check(named.length === 0, `nothing in pair ${victim}'s volume (config dir, state dir) names an address or a port${named.length ? `: ${named.slice(0, 5).join("; ")}` : ""}`);
  check(warnings.length === 0, `@ag-ui/client printed no warning${warnings.length ? `: ${warnings[0]}` : ""}`);
  dns.close();
}

runChecks(main);
