#!/usr/bin/env node
// Three iac-code-agui pairs behind HAProxy, driven by the official @ag-ui/client (started by run.sh,
// which starts the fake kernels and the pairs; this script runs HAProxy itself).
//
//  1. PAIRS_THREADS threads (300) x 3 turns through HAProxy; on every 10th thread turn 2 is a
//     permission interrupt answered by a resume, on another 10th a long run cancelled through the
//     cancel extension. Every thread must be held by exactly one pair (the pairs' state dirs), every
//     kernel must only have seen contexts of its own pair's threads, every run must succeed: so the
//     resumes and cancels reached the owner. One stream direct and one through HAProxy carry the
//     same event types (the proxy changes nothing).
//     The history and the live feed of threads without a user (no header) reach their pair by
//     the thread id in the path.
//  1b. Routing by user (X-AGUI-User-Id on every request): USERS users start 3 threads each through
//     HAProxy; every user's threads live on one pair (state dirs), the users spread over the pairs;
//     one list request through HAProxy (GET …/threads?userId=U) lists exactly the user's threads;
//     each thread's history (…/threads/{id}/messages) and live feed (…/threads/{id}/events, a turn
//     run through HAProxy while it is open) are answered through HAProxy by the pair that holds it
//     (another pair answers 404); a header that disagrees with the body's userId is a 400.
//  2. Some threads of every pair are left on a pending permission interrupt; pair 2 is killed
//     (adapter SIGKILL, its kernel frozen: the fake kernel keeps tasks in memory only, where the
//     real one keeps them on disk). Pair 2's threads get 503 STATE_UNAVAILABLE (a new turn and a
//     resume alike); no other pair or kernel creates anything for them; the others go on.
//  3. Pair 2 restarts in place: its threads continue, its pending interrupts are resumed.
//  4. A fourth pair is added to HAProxy: the threads that now hash to it are refused by it with
//     503 STATE_UNAVAILABLE and it creates nothing; contrib/deploy/thread-map.sh pins the threads
//     to their pairs (and, with --users, the users), HAProxy is restarted with the maps, every old
//     thread goes on where it was and new threads also land on pair 4; every user of 1b keeps its
//     pair (a new thread lands there, its list stays complete); a user whose threads were created
//     before routing by user (no header: spread by thread) keeps them all working through the
//     pins, its new threads land on its pinned pair, and its list there holds that pair's threads.
// Prints one line per check and exits 1 on any failure.

import { randomUUID } from "node:crypto";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { HttpAgent } from "@ag-ui/client";
import { WORK, ROOT, BASE, PROXY, log, check, warnings, runChecks, sleep, pairsSh, contextId, held, startHaproxy as startWith, turn as turnWith, userAgent, getJson, openFeed } from "./common.mjs";

const CWD = process.env.CWD;
const N = Number(process.env.PAIRS_THREADS || "300");
const POOL = 24;
const KERNELS = process.env.A2A_URLS.split(" ");
const USERS = Number(process.env.PAIRS_USERS || "12");

const sample = (results, bad) => {
  const b = results.filter(bad);
  return b.length ? ` — ${b.length} bad, e.g. ${JSON.stringify(b.slice(0, 2).map(({ types, ...r }) => ({ ...r, last: types?.slice(-3) })))}` : "";
};
// ---- the pairs, HAProxy ----------------------------------------------------------------------

const kernelPid = (i) => Number(fs.readFileSync(path.join(WORK, `kernel-${i}.pid`), "utf8"));

/** The contexts kernel `i` was asked to run a message in. */
async function kernelContexts(i) {
  const all = await (await fetch(`${KERNELS[i - 1]}/__control/requests`)).json();
  return new Set(all.filter((r) => r.body?.method === "SendStreamingMessage").map((r) => r.body.params?.message?.contextId));
}

/** HAProxy for pairs 1..`pairs` (3 or 4) with the thread map `map`. */
function startHaproxy(pairs, map = "", userMap = null) {
  const withPair4 = (cfg) => {
    if (pairs !== 4) return cfg;
    // pair4 joins the hashing and health backends, and gets a backend of its own like pair3's.
    const four = (line) => line.replace(/server pair3 127\.0\.0\.1:(\d+)/g, (_, p) => `server pair4 127.0.0.1:${Number(p) + 1}`);
    return cfg
      .split(/\n(?=\S)/)
      .map((sec) => {
        if (sec.startsWith("backend pair3")) return `${sec}\n${four(sec).replace("backend pair3", "backend pair4")}`;
        return sec.replace(/( *)server pair3 .*\n/, (line) => `${line}${four(line)}`);
      })
      .join("\n");
  };
  return startWith({ map, userMap, maxconn: Math.floor(fdLimit() / 2) - 100, edit: withPair4 });
}

/** This process's file-descriptor limit (HAProxy inherits it). */
const fdLimit = () => Number(execFileSync("bash", ["-c", "ulimit -n"]).toString().trim()) || 1024;


// ---- runs through @ag-ui/client --------------------------------------------------------------

const turn = (agent, opts = {}) => turnWith(agent, { cwd: CWD, ...opts });

/** Runs `f` over `items`, POOL at a time; returns the results in order. */
async function pool(items, f) {
  const out = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: POOL }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await f(items[i], i);
      }
    }),
  );
  return out;
}

const kind = (i) => (i % 10 === 3 ? "permission" : i % 10 === 7 ? "cancel" : "normal");

/** Turn 2 of a permission thread: the interrupt, then a resume allow_once. */
async function permissionTurn(agent) {
  const r1 = await turn(agent, { text: "scenario:permission" });
  const interrupt = agent.pendingInterrupts?.[0];
  if (!r1.ok || r1.outcome !== "interrupt" || !interrupt) return { ...r1, ok: false, why: "no interrupt" };
  const resume = [{ interruptId: interrupt.id, status: "resolved", payload: { decision: "allow_once" } }];
  const r2 = await turn(agent, { resume });
  return { ...r2, ok: r2.ok && r2.outcome === "success", why: "resume" };
}

/** Turn 2 of a cancel thread: a run that hangs until the cancel extension, through HAProxy. */
async function cancelTurn(agent) {
  let cancelled = null;
  const r = await turn(agent, {
    text: "scenario:hang",
    onSession: (id) => {
      cancelled = fetch(`${PROXY}/extensions/iac-code/v1/executions/${id}/cancel`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ threadId: agent.threadId, rosInvocationId: `inv-${agent.threadId}` }),
      }).then(async (res) => [res.status, await res.json()]);
    },
  });
  const [status, body] = cancelled ? await cancelled : [0, {}];
  return { ...r, ok: r.code === "CANCELLED" && status === 200 && body.status === "cancelled", why: `cancel ${status} ${body.status}` };
}

// ---- the scenario ------------------------------------------------------------------------------

async function phaseTraffic(agents) {
  for (let k = 1; k <= 3; k++) {
    const results = await pool(agents, (a, i) =>
      k === 2 && kind(i) === "permission" ? permissionTurn(a) : k === 2 && kind(i) === "cancel" ? cancelTurn(a) : turn(a, { text: `hello, turn ${k}` }),
    );
    const bad = results.filter((r) => !r.ok);
    check(bad.length === 0, `turn ${k} of ${agents.length} threads through HAProxy${bad.length ? `: ${bad.length} failed, e.g. ${JSON.stringify(bad[0])}` : ""}`);
  }
  const owners = agents.map((a) => [1, 2, 3].filter((p) => held(p).has(a.threadId)));
  check(owners.every((o) => o.length === 1), "every thread is held by exactly one pair (state dirs)");
  const counts = [1, 2, 3].map((p) => owners.filter((o) => o[0] === p).length);
  log(`      threads per pair: ${counts.join(" / ")}`);
  check(counts.every((c) => c > agents.length / 6), "the threads are spread over the three pairs");
  for (const p of [1, 2, 3]) {
    const mine = new Set([...held(p)].map(contextId));
    const seen = await kernelContexts(p);
    check([...seen].every((c) => mine.has(c)), `kernel ${p} only ran messages in its own pair's threads (${seen.size} contexts)`);
  }
  await threadRoutesByThread(agents.slice(0, 30));
  return new Map(agents.map((a, i) => [a.threadId, owners[i][0]]));
}

/** Threads without a user, asked without the header: their history and live feed are routed by
 * the thread id in the path (…/threads/{threadId}/messages, …/events) to the pair holding them. */
async function threadRoutesByThread(sample) {
  const ros = (a) => `inv-${a.threadId}`;
  const pages = await pool(sample, (a) => getJson(`/threads/${encodeURIComponent(a.threadId)}/messages?rosInvocationId=${encodeURIComponent(ros(a))}`, null));
  const ok = pages.filter(([status, body], i) => status === 200 && body.threadId === sample[i].threadId && body.messages.some((m) => m.content === "hello, turn 3"));
  check(ok.length === sample.length, `the history of ${sample.length} threads without a user, through HAProxy without a header, from their pair (${ok.length})`);
  let fed = 0;
  for (const a of sample.slice(0, 5)) {
    const feed = await openFeed(null, a.threadId, { ros: ros(a) });
    const runId = `run-${randomUUID()}`;
    const r = await turn(a, { text: "while its feed is open", runId });
    const seen = feed.status === 200 ? await feed.until(runId) : null;
    await feed.close();
    if (r.ok && seen?.join() === r.types.join()) fed++;
  }
  check(fed === 5, `the live feed of 5 threads without a user, through HAProxy without a header, carried their turn (${fed})`);
}

async function phaseSameStream() {
  const direct = new HttpAgent({ url: `http://127.0.0.1:${BASE + 1}/`, threadId: `cmp-direct-${randomUUID()}` });
  const proxied = new HttpAgent({ url: `${PROXY}/`, threadId: `cmp-proxy-${randomUUID()}` });
  const [d, p] = [await turn(direct, { text: "hello" }), await turn(proxied, { text: "hello" })];
  check(d.ok && p.ok && d.types.join() === p.types.join(), `the same stream direct and through HAProxy (${p.types.length} events)`);
}

// ---- routing by user -----------------------------------------------------------------------------

async function phaseUsers() {
  const users = Array.from({ length: USERS }, (_, i) => `user-${i}-${randomUUID().slice(0, 8)}`);
  const threads = users.flatMap((u) => [0, 1, 2].map((k) => ({ user: u, agent: userAgent(u, `${u}-t${k}-${randomUUID().slice(0, 8)}`) })));
  const created = await pool(threads, ({ user, agent }) => turn(agent, { text: "hello from a user's console", userId: user }));
  check(created.every((r) => r.ok), `${threads.length} threads of ${USERS} users created through HAProxy with X-AGUI-User-Id${sample(created, (r) => !r.ok)}`);
  const ownerOf = (t) => [1, 2, 3].filter((p) => held(p).has(t));
  const pairOfUser = new Map(users.map((u) => [u, new Set(threads.filter((t) => t.user === u).flatMap((t) => ownerOf(t.agent.threadId)))]));
  check([...pairOfUser.values()].every((s) => s.size === 1), "every user's threads all live on one pair (state dirs)");
  const spread = new Set([...pairOfUser.values()].map((s) => [...s][0]));
  check(spread.size >= 2, `the users are spread over the pairs (${spread.size} pairs hold users)`);
  // One list request per user through HAProxy: complete, newest first. Once with the header,
  // once as a client without it (the userId query routes the list alike).
  for (const [i, u] of users.entries()) {
    const mine = threads.filter((t) => t.user === u).map((t) => t.agent.threadId);
    const [status, body] = await getJson(`/threads?userId=${encodeURIComponent(u)}&limit=100`, i % 2 ? u : null);
    const listed = (body?.threads || []).map((t) => t.threadId);
    if (!check(status === 200 && listed.length === mine.length && mine.every((t) => listed.includes(t)), `the list of ${u} through HAProxy (${i % 2 ? "header" : "query only"}) holds its ${mine.length} threads (got ${status} ${listed.length})`)) break;
  }
  // History and the live feed of every thread, through HAProxy, from its pair.
  let historyOk = 0;
  let feedOk = 0;
  let otherPair404 = 0;
  const bad = [];
  for (const { user, agent } of threads) {
    const id = encodeURIComponent(agent.threadId);
    const q = `userId=${encodeURIComponent(user)}`;
    const [hs, hb] = await getJson(`/threads/${id}/messages?${q}`, user);
    const texts = (hb?.messages || []).map((m) => (typeof m.content === "string" ? m.content : ""));
    if (hs === 200 && hb.threadId === agent.threadId && texts.includes("hello from a user's console")) historyOk++;
    else bad.push(`history ${hs} ${JSON.stringify(hb).slice(0, 200)}`);
    const owner = ownerOf(agent.threadId)[0];
    const other = [1, 2, 3].find((p) => p !== owner);
    const [os] = await getJson(`/threads/${id}/messages?${q}`, null, `http://127.0.0.1:${BASE + other}`);
    if (os === 404) otherPair404++;
    const feed = await openFeed(user, agent.threadId);
    const runId = `run-${randomUUID()}`;
    const r = await turn(agent, { text: "while a feed is open", userId: user, runId });
    const seen = feed.status === 200 ? await feed.until(runId) : null;
    await feed.close();
    if (r.ok && seen && seen[0] === "RUN_STARTED" && seen.join() === r.types.join()) feedOk++;
    else bad.push(`feed ${feed.status} run ${r.ok} saw ${seen?.length} of ${r.types.length}`);
  }
  check(historyOk === threads.length, `history of all ${threads.length} threads answered through HAProxy by their pair (${historyOk})${bad.length ? `, e.g. ${bad[0]}` : ""}`);
  check(otherPair404 === threads.length, `another pair answers each thread's history 404 (${otherPair404})`);
  check(feedOk === threads.length, `the live feed of all ${threads.length} threads, through HAProxy, carried the turn run meanwhile (${feedOk})`);
  // The adapter checks the header a balancer hashes on.
  const liar = userAgent(users[0], `liar-${randomUUID()}`);
  const lie = await turn(liar, { text: "hello", userId: users[1] });
  check(lie.status === 400 && lie.code === "INVALID_INPUT" && /X-AGUI-User-Id/.test(lie.message), `X-AGUI-User-Id disagreeing with the body's userId: ${lie.status} ${lie.code}`);
  const [ls, lb] = await getJson(`/threads?userId=${encodeURIComponent(users[1])}`, users[0]);
  check(ls === 400 && lb?.error?.code === "INVALID_INPUT", `X-AGUI-User-Id disagreeing with the list's userId query: ${ls}`);
  // A user whose threads were started before routing by user: bound to it (body userId), no
  // header, so hashed by thread over the pairs.
  const early = `early-${randomUUID().slice(0, 8)}`;
  const earlyThreads = Array.from({ length: 9 }, (_, k) => new HttpAgent({ url: `${PROXY}/`, threadId: `${early}-t${k}-${randomUUID().slice(0, 8)}` }));
  const earlyRuns = await pool(earlyThreads, (a) => turn(a, { text: "before the switch", userId: early }));
  const earlyPairs = new Set(earlyThreads.flatMap((a) => ownerOf(a.threadId)));
  check(earlyRuns.every((r) => r.ok) && earlyPairs.size >= 2, `9 threads of a user started without the header are spread over ${earlyPairs.size} pairs`);
  return { users, threads, pairOfUser: new Map([...pairOfUser].map(([u, s]) => [u, [...s][0]])), early, earlyThreads };
}

async function phaseKill(agents, owner) {
  const victim = 2;
  const pendingOf = new Map();
  // A tenth of each pair's threads (at least one) wait on a permission interrupt.
  const parked = [1, 2, 3].flatMap((p) => {
    const mine = agents.filter((a) => owner.get(a.threadId) === p);
    return mine.slice(0, Math.max(1, Math.floor(mine.length / 10)));
  });
  const parkedRuns = await pool(parked, (a) => turn(a, { text: "scenario:permission" }));
  check(parkedRuns.every((r) => r.outcome === "interrupt"), `${parked.length} threads left on a pending permission interrupt`);
  for (const a of parked) pendingOf.set(a.threadId, a.pendingInterrupts[0]);
  const before = [1, 3].map((p) => held(p).size);
  pairsSh("kill-one", String(victim));
  process.kill(kernelPid(victim), "SIGSTOP");
  log(`      pair ${victim} killed (adapter SIGKILL, kernel frozen)`);
  const step = (a) => {
    const pending = pendingOf.get(a.threadId);
    return pending
      ? turn(a, { resume: [{ interruptId: pending.id, status: "resolved", payload: { decision: "allow_once" } }] })
      : turn(a, { text: "after the kill" });
  };
  const results = await pool(agents, step);
  const dead = results.filter((_, i) => owner.get(agents[i].threadId) === victim);
  const live = results.filter((_, i) => owner.get(agents[i].threadId) !== victim);
  check(
    dead.every((r) => r.status === 503 && r.code === "STATE_UNAVAILABLE"),
    `all ${dead.length} threads of the dead pair get 503 STATE_UNAVAILABLE (${dead[0]?.message})`,
  );
  check(live.every((r) => r.ok), `the ${live.length} threads of the other pairs go on (new turns and resumes)${sample(live, (r) => !r.ok)}`);
  const victimThreads = agents.filter((a) => owner.get(a.threadId) === victim).map((a) => a.threadId);
  const elsewhere = [1, 3].some((p) => victimThreads.some((t) => held(p).has(t)));
  const kernelsSaw = await Promise.all([1, 3].map(kernelContexts));
  const sessions = kernelsSaw.some((s) => victimThreads.some((t) => s.has(contextId(t))));
  check(!elsewhere && !sessions, "no other pair or kernel created anything for the dead pair's threads");
  check([1, 3].every((p, i) => held(p).size === before[i]), "the other pairs hold no new thread");
  // Restart in place: the kernel thaws (the real kernel would reload its tasks from its disk), the
  // adapter starts on the same state dir.
  process.kill(kernelPid(victim), "SIGCONT");
  pairsSh("start-one", String(victim));
  const back = await pool(
    agents.filter((a) => owner.get(a.threadId) === victim),
    step,
  );
  const resumed = back.filter((r) => r.types.includes("TOOL_CALL_RESULT")).length;
  const victimPending = parked.filter((a) => owner.get(a.threadId) === victim).length;
  check(back.every((r) => r.ok && r.outcome === "success"), `after the restart the ${back.length} threads of pair ${victim} go on`);
  check(resumed === victimPending && victimPending > 0, `${resumed} pending interrupts of pair ${victim} resumed after its restart`);
}

async function phaseAddPair(agents, owner, byUser) {
  pairsSh("start-one", "4");
  await startHaproxy(4);
  const results = await pool(agents, (a) => turn(a, { text: "with four pairs" }));
  const moved = results.filter((r) => !r.ok);
  check(
    moved.every((r) => r.status === 503 && r.code === "STATE_UNAVAILABLE" && /not held by this adapter pair/.test(r.message)),
    `adding pair 4 without a map: ${moved.length} of ${agents.length} threads now hash to it and are refused by it, loudly${sample(moved, (r) => !(r.status === 503 && /not held/.test(r.message)))}`,
  );
  check(moved.length > 0 && moved.length < agents.length / 2, "about a quarter of the threads moved (consistent hashing)");
  check(held(4).size === 0 && (await kernelContexts(4)).size === 0, "pair 4 created no thread and no kernel session");
  const map = execFileSync("bash", [path.join(ROOT, "contrib/deploy/thread-map.sh"), "3"], { env: { ...process.env, PAIRS_ROOT: path.join(WORK, "pairs") } }).toString();
  check(map.trim().split("\n").length === agents.length + 2 + USERS * 3 + 9, `thread-map.sh pinned ${map.trim().split("\n").length} threads to their pairs`);
  const userMap = execFileSync("bash", [path.join(ROOT, "contrib/deploy/thread-map.sh"), "--users", "3"], { env: { ...process.env, PAIRS_ROOT: path.join(WORK, "pairs") } }).toString();
  const pinned = new Map(userMap.trim().split("\n").map((l) => l.split(" ")));
  check(byUser.users.every((u) => pinned.get(u) === `pair${byUser.pairOfUser.get(u)}`) && pinned.has(byUser.early), `thread-map.sh --users pinned ${pinned.size} users to their pairs`);
  await startHaproxy(4, map, userMap);
  const again = await pool(agents, (a) => turn(a, { text: "pinned" }));
  check(again.every((r) => r.ok), `with the map every existing thread goes on on its own pair${sample(again, (r) => !r.ok)}`);
  const fresh = Array.from({ length: 40 }, () => new HttpAgent({ url: `${PROXY}/`, threadId: `new-${randomUUID()}` }));
  const freshRuns = await pool(fresh, (a) => turn(a, { text: "new thread" }));
  check(freshRuns.every((r) => r.ok) && held(4).size > 0, `new threads are spread over four pairs (${held(4).size} of 40 on pair 4)`);
  check(agents.every((a) => !held(4).has(a.threadId) && owner.has(a.threadId)), "no old thread was started on pair 4");
  await phasePinnedUsers(byUser);
}

/** With four pairs and the maps: every user keeps its pair; the early user's threads all work. */
async function phasePinnedUsers({ users, threads, pairOfUser, early, earlyThreads }) {
  const fresh = await pool(users, (u) => turn(userAgent(u, `${u}-after-${randomUUID().slice(0, 8)}`), { text: "with four pairs", userId: u }));
  check(fresh.every((r) => r.ok), `a new thread of each of the ${users.length} users, with four pairs${sample(fresh, (r) => !r.ok)}`);
  let complete = 0;
  for (const u of users) {
    const p = pairOfUser.get(u);
    const [status, body] = await getJson(`/threads?userId=${encodeURIComponent(u)}&limit=100`, u);
    const listed = new Set((body?.threads || []).map((t) => t.threadId));
    const mine = [...held(p)].filter((t) => t.startsWith(`${u}-`));
    if (status === 200 && listed.size === 4 && mine.length === 4 && mine.every((t) => listed.has(t))) complete++;
  }
  check(complete === users.length, `every user kept its pair (pinned by user): its new thread is there and one list holds all 4 (${complete} of ${users.length})`);
  const again = await pool(earlyThreads, (a) => turn(userAgent(early, a.threadId), { text: "after the switch", userId: early }));
  check(again.every((r) => r.ok), `the 9 threads started before routing by user go on, now with the header (pinned by thread)${sample(again, (r) => !r.ok)}`);
  const home = [1, 2, 3].map((p) => [...held(p)].filter((t) => t.startsWith(`${early}-t`)).length);
  const pair = home.indexOf(Math.max(...home)) + 1;
  const newer = userAgent(early, `${early}-new-${randomUUID().slice(0, 8)}`);
  const r = await turn(newer, { text: "a new thread after the switch", userId: early });
  check(r.ok && held(pair).has(newer.threadId), `its new thread lands on its pinned pair ${pair} (which held ${home[pair - 1]} of its 9)`);
  const [, body] = await getJson(`/threads?userId=${encodeURIComponent(early)}&limit=100`, early);
  const listed = (body?.threads || []).map((t) => t.threadId).sort();
  const there = [...held(pair)].filter((t) => t.startsWith(`${early}-`)).sort();
  check(JSON.stringify(listed) === JSON.stringify(there), `its list through HAProxy holds the ${there.length} threads on that pair (the others are reached by id, not listed)`);
}

async function main() {
  await startHaproxy(3);
  log(`HAProxy on ${PROXY}, pairs on ${BASE + 1}-${BASE + 3}, ${N} threads`);
  const agents = Array.from({ length: N }, (_, i) => new HttpAgent({ url: `${PROXY}/`, threadId: `t${i}-${randomUUID()}` }));
  const owner = await phaseTraffic(agents);
  await phaseSameStream();
  const byUser = await phaseUsers();
  await phaseKill(agents, owner);
  await phaseAddPair(agents, owner, byUser);
  check(warnings.length === 0, `@ag-ui/client printed no warning${warnings.length ? `: ${warnings[0]}` : ""}`);
}

runChecks(main);
