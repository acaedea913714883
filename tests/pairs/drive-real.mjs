#!/usr/bin/env node
// The one pass with the REAL kernel (PAIRS_REAL_KERNEL=1 bash tests/pairs/run.sh): three pairs, each
// an adapter supervising its own `iac-code a2a` 0.16.0 (contrib/deploy/pairs.sh, --pair-mode), the
// LLM scripted by tests/real_kernel/fake_llm.py, HAProxy with contrib/deploy/haproxy.cfg in front,
// driven by @ag-ui/client.
//
//  1. PAIRS_THREADS (6) threads x 2 turns; turn 2 of one thread is a write_file permission
//     interrupt answered by a resume (allow_once: the file is written). Every thread is held by one
//     pair (state dirs) and has a context in its own kernel's persistence dir (contexts/) only.
//  2. One thread of the pair with the most threads is left on a pending permission interrupt; that
//     pair is killed (adapter and kernel SIGKILL). Its threads get 503 STATE_UNAVAILABLE (a new
//     turn and the resume alike); the other kernels' contexts/ do not change; their threads go on.
//  3. The pair restarts in place (pairs.sh start-one: same config and state dirs): the kernel
//     restores from its own disk, the pending interrupt is resumed (the file is written), every
//     thread continues on its own session (contexts/ unchanged).
//  4. Routing by user (X-AGUI-User-Id): 2 users x 2 threads, one real turn each through HAProxy:
//     each user's threads on one pair; one list request through HAProxy lists them; each thread's
//     history through HAProxy holds, message by message (ids and text), what the client's run
//     reduced; the live feed of one thread carries a second turn, event for event.
// Prints one line per check and exits 1 on any failure.

import { randomUUID } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { HttpAgent } from "@ag-ui/client";
import { BASE, PROXY, log, check, warnings, runChecks, sleep, pairDir, pairsSh, contextId, held, startHaproxy, turn as turnWith, userAgent, getJson, openFeed } from "./common.mjs";

const WS = process.env.CWD;
const N = Number(process.env.PAIRS_THREADS || "6");

/** The kernel's own context records (`<config>/a2a/contexts/<contextId>.json`): contextId -> file text. */
function contexts(i) {
  const dir = path.join(pairDir(i), "config", "a2a", "contexts");
  if (!fs.existsSync(dir)) return new Map();
  return new Map(fs.readdirSync(dir).map((f) => [f.replace(/\.json$/, ""), fs.readFileSync(path.join(dir, f), "utf8")]));
}
const sessionOf = (text) => JSON.parse(text).session_id ?? JSON.parse(text).sessionId ?? text;

/** A process and its descendants, from /proc. */
function tree(pid) {
  const out = [pid];
  try {
    for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
      const kids = fs.readFileSync(`/proc/${pid}/task/${t}/children`, "utf8").trim();
      for (const k of kids ? kids.split(" ") : []) out.push(...tree(Number(k)));
    }
  } catch {}
  return out;
}

/** One run through @ag-ui/client (a real LLM turn may take a while). */
const turn = (agent, opts) => turnWith(agent, { cwd: WS, timeoutMs: 90_000, ...opts });
const allow = (agent) => [{ interruptId: agent.pendingInterrupts[0].id, status: "resolved", payload: { decision: "allow_once" } }];
const text = () => `Describe a VPC template. [[cwd=${WS}]]`;
const write = (dir) => `Please write hello.txt in the workspace. [[cwd=${dir}]]`;
const brief = (r) => JSON.stringify({ ok: r.ok, outcome: r.outcome, status: r.status, code: r.code, message: r.message?.slice(0, 120), cause: r.cause });

async function main() {
  await startHaproxy();
  log(`HAProxy on ${PROXY}, real-kernel pairs on ${BASE + 1}-${BASE + 3}, ${N} threads x 2 turns`);
  const agents = Array.from({ length: N }, (_, i) => new HttpAgent({ url: `${PROXY}/`, threadId: `real${i}-${randomUUID()}` }));

  // 1. traffic
  const t1 = await Promise.all(agents.map((a) => turn(a, { text: text() })));
  check(t1.every((r) => r.ok && r.outcome === "success"), `turn 1 of ${N} threads through HAProxy${t1.some((r) => !r.ok) ? ": " + brief(t1.find((r) => !r.ok)) : ""}`);
  const owner = new Map(agents.map((a) => [a.threadId, [1, 2, 3].filter((p) => held(p).has(a.threadId))]));
  check([...owner.values()].every((o) => o.length === 1), "every thread is held by exactly one pair (state dirs)");
  const ownerOf = (a) => owner.get(a.threadId)[0];
  const counts = [1, 2, 3].map((p) => agents.filter((a) => ownerOf(a) === p).length);
  log(`      threads per pair: ${counts.join(" / ")}`);
  for (const p of [1, 2, 3]) {
    const mine = new Set(agents.filter((a) => ownerOf(a) === p).map((a) => contextId(a.threadId)));
    const ctx = [...contexts(p).keys()];
    check(ctx.length === mine.size && ctx.every((c) => mine.has(c)), `kernel ${p} has a context for its own pair's ${mine.size} threads only (contexts/: ${ctx.length})`);
  }
  const victim = [1, 2, 3].reduce((a, b) => (counts[b - 1] > counts[a - 1] ? b : a));
  const permThread = agents.find((a) => ownerOf(a) !== victim);
  const t2 = await Promise.all(
    agents.map(async (a) => {
      if (a !== permThread) return turn(a, { text: text() });
      const dir = path.join(WS, "perm");
      fs.mkdirSync(dir, { recursive: true });
      const r1 = await turn(a, { text: write(dir) });
      if (r1.outcome !== "interrupt") return { ...r1, ok: false, why: "no interrupt" };
      const r2 = await turn(a, { resume: allow(a) });
      const written = fs.existsSync(path.join(dir, "hello.txt"));
      return { ...r2, ok: r2.ok && r2.outcome === "success" && r2.types.includes("TOOL_CALL_RESULT") && written };
    }),
  );
  check(t2.every((r) => r.ok), `turn 2 of ${N} threads (one write_file permission interrupt + resume allow_once, file written)${t2.some((r) => !r.ok) ? ": " + brief(t2.find((r) => !r.ok)) : ""}`);

  // 2. kill the pair with the most threads, one of its threads on a pending interrupt
  const mine = agents.filter((a) => ownerOf(a) === victim);
  const others = agents.filter((a) => ownerOf(a) !== victim);
  const parked = mine[0];
  const parkedDir = path.join(WS, "parked");
  fs.mkdirSync(parkedDir, { recursive: true });
  const p1 = await turn(parked, { text: write(parkedDir) });
  check(p1.outcome === "interrupt", `a thread of pair ${victim} waits on a permission interrupt`);
  const pending = allow(parked);
  const before = [1, 2, 3].map(contexts);
  const pids = tree(Number(fs.readFileSync(path.join(pairDir(victim), "adapter.pid"), "utf8")));
  for (const pid of pids) process.kill(pid, "SIGKILL");
  for (let i = 0; i < 100 && pids.some((pid) => fs.existsSync(`/proc/${pid}`)); i++) await sleep(50);
  fs.rmSync(path.join(pairDir(victim), "adapter.pid"), { force: true });
  log(`      pair ${victim} killed: adapter and kernel SIGKILL (pids ${pids.join(", ")})`);
  const step = (a) => (a === parked ? turn(a, { resume: pending }) : turn(a, { text: text() }));
  const dead = await Promise.all(mine.map(step));
  const live = await Promise.all(others.map(step));
  check(
    dead.every((r) => r.status === 503 && r.code === "STATE_UNAVAILABLE"),
    `the ${dead.length} threads of the dead pair get 503 STATE_UNAVAILABLE, the pending resume included (${dead[0]?.message})${dead.some((r) => r.status !== 503) ? ": " + brief(dead.find((r) => r.status !== 503)) : ""}`,
  );
  check(live.every((r) => r.ok && r.outcome === "success"), `the ${live.length} threads of the other pairs go on${live.some((r) => !r.ok) ? ": " + brief(live.find((r) => !r.ok)) : ""}`);
  const after = [1, 2, 3].map(contexts);
  const same = (x, y) => x.size === y.size && [...x.keys()].every((k) => y.has(k) && sessionOf(x.get(k)) === sessionOf(y.get(k)));
  check(
    [1, 2, 3].filter((p) => p !== victim).every((p) => same(before[p - 1], after[p - 1])),
    "no new kernel session on the other pairs (their contexts/ unchanged, same sessions)",
  );
  check(![1, 2, 3].filter((p) => p !== victim).some((p) => mine.some((a) => held(p).has(a.threadId))), "no other pair holds a thread of the dead pair");

  // 3. restart in place
  pairsSh("start-one", String(victim));
  log(`      pair ${victim} restarted in place (same config and state dirs)`);
  const back = await Promise.all(mine.map(step));
  const resumed = back[mine.indexOf(parked)];
  check(
    resumed.ok && resumed.outcome === "success" && resumed.types.includes("TOOL_CALL_RESULT") && fs.existsSync(path.join(parkedDir, "hello.txt")),
    `the pending interrupt of pair ${victim} is resumed after the restart (file written)${resumed.ok ? "" : ": " + brief(resumed)}`,
  );
  check(back.every((r) => r.ok && r.outcome === "success"), `the ${back.length} threads of pair ${victim} continue${back.some((r) => !r.ok) ? ": " + brief(back.find((r) => !r.ok)) : ""}`);
  const restored = contexts(victim);
  check(same(before[victim - 1], restored), `pair ${victim}'s kernel kept its sessions from its own disk (contexts/ unchanged: ${restored.size})`);
  await byUser();
  check(warnings.length === 0, `@ag-ui/client printed no warning${warnings.length ? `: ${warnings[0]}` : ""}`);
}

/** 4. Routing by user with real kernels: lists, histories and a feed through HAProxy. */
async function byUser() {
  const users = [`ru-a-${randomUUID().slice(0, 6)}`, `ru-b-${randomUUID().slice(0, 6)}`];
  const threads = users.flatMap((u) => [0, 1].map((k) => ({ user: u, agent: userAgent(u, `${u}-t${k}-${randomUUID().slice(0, 6)}`) })));
  const runs = await Promise.all(threads.map(({ user, agent }) => turn(agent, { text: text(), userId: user })));
  check(runs.every((r) => r.ok && r.outcome === "success"), `${threads.length} threads of 2 users through HAProxy with X-AGUI-User-Id${runs.some((r) => !r.ok) ? ": " + brief(runs.find((r) => !r.ok)) : ""}`);
  for (const u of users) {
    const mine = threads.filter((t) => t.user === u).map((t) => t.agent.threadId);
    const pairs = new Set(mine.flatMap((t) => [1, 2, 3].filter((p) => held(p).has(t))));
    const [status, body] = await getJson(`/threads?userId=${encodeURIComponent(u)}`, u);
    const listed = (body?.threads || []).map((t) => t.threadId);
    check(pairs.size === 1 && status === 200 && listed.length === 2 && mine.every((t) => listed.includes(t)), `${u}: both threads on pair ${[...pairs]}, both in one list through HAProxy (${status}, ${listed.length})`);
  }
  const shape = (m) => JSON.stringify({ id: m.id, role: m.role, content: m.content, toolCalls: m.toolCalls });
  for (const { user, agent } of threads) {
    const [status, body] = await getJson(`/threads/${encodeURIComponent(agent.threadId)}/messages?userId=${encodeURIComponent(user)}`, user);
    const kept = (body?.messages || []).filter((m) => m.role !== "activity" && m.role !== "reasoning").map(shape);
    const seen = agent.messages.filter((m) => m.role !== "activity" && m.role !== "reasoning").map(shape);
    check(status === 200 && JSON.stringify(kept) === JSON.stringify(seen), `the history of ${agent.threadId} through HAProxy equals what the client reduced (${kept.length} messages)${status === 200 && JSON.stringify(kept) === JSON.stringify(seen) ? "" : `: ${status} ${kept.join(" ").slice(0, 300)} vs ${seen.join(" ").slice(0, 300)}`}`);
  }
  const { user, agent } = threads[0];
  const feed = await openFeed(user, agent.threadId);
  const runId = `run-${randomUUID()}`;
  const r = await turn(agent, { text: text(), userId: user, runId });
  const seen = feed.status === 200 ? await feed.until(runId, 60_000) : null;
  await feed.close();
  check(r.ok && seen?.join() === r.types.join(), `the live feed through HAProxy carried a real turn event for event (${feed.status}, ${seen?.length ?? 0} of ${r.types.length})`);
}

runChecks(main);
