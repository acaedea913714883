#!/usr/bin/env node
// Figures for several pairs behind HAProxy (issue 17, item 5), reported and never asserted.
// Started by benches/pairs.sh, which starts three fake kernels, three release adapters
// (contrib/deploy/pairs.sh, --pair-mode) and HAProxy with contrib/deploy/haproxy.cfg on 127.0.0.1.
// Plain fetch, no client library: the same client code reads the direct and the proxied streams.
//
//  1. events/s of one run (`scenario:flood-N`), direct to pair 1 and through HAProxy, alternated,
//     best of 3 each; the ratio.
//  2. added latency per event: `scenario:clock-N` (text = the fake kernel's clock, µs, at emit
//     time; ~5 ms apart), a direct and a proxied stream at the same time; p50/p99 of each and the
//     ratio. Then time to the first event of a short run, direct and proxied, alternated.
//  4. memory of an idle pair: adapter + fake kernel (VmRSS), after start and idle after the
//     traffic; adapter + the real `iac-code a2a` 0.16.0 kernel when its venv exists.
//  3. held runs three pairs carry: `scenario:hang` runs through HAProxy, opened in steps up to
//     HELD_MAX (3,000) or to the first error; each must get its first event and stay open.
// Writes the report to OUT (target/bench-pairs.md) and prints it.

import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { randomUUID } from "node:crypto";

const BASE = Number(process.env.BASE_PORT);
const WORK = process.env.WORK;
const CWD = process.env.CWD;
const OUT = process.env.OUT;
const VENV = process.env.REAL_KERNEL_VENV || "";
const FLOOD = Number(process.env.FLOOD || "200000");
const CLOCK = Number(process.env.CLOCK || "2000");
const HELD_MAX = Number(process.env.HELD_MAX || "3000");
const PROXY = `http://127.0.0.1:${BASE}/`;
const DIRECT = `http://127.0.0.1:${BASE + 1}/`;
const t0 = Date.now();
const log = (s) => console.error(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${s}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const report = [];
const md = (s = "") => report.push(s);

// ---- helpers -------------------------------------------------------------------------------------

const body = (thread, text) =>
  JSON.stringify({
    threadId: thread,
    runId: `run-${randomUUID()}`,
    messages: [{ id: `u-${randomUUID()}`, role: "user", content: text }],
    tools: [],
    context: [],
    state: {},
    forwardedProps: { iacCode: { schemaVersion: 1, rosInvocationId: `inv-${thread}`, cwd: CWD } },
  });

/** POSTs one run and hands every SSE `data:` line to `onLine`; resolves at the end of the stream. */
async function run(url, text, { onLine, onChunk, signal } = {}) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    body: body(`b-${randomUUID()}`, text),
    signal,
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`);
  let rest = "";
  const dec = new TextDecoder();
  for await (const chunk of res.body) {
    if (onChunk) onChunk(chunk);
    if (!onLine) continue;
    const lines = (rest + dec.decode(chunk, { stream: true })).split("\n");
    rest = lines.pop();
    for (const l of lines) if (l.startsWith("data: ")) onLine(l.slice(6));
  }
}

const MARK = Buffer.from('"TEXT_MESSAGE_CONTENT"');
/** Text events of one flood run per second of wall time (request to end of stream). */
async function floodRate(url) {
  let n = 0;
  let tail = Buffer.alloc(0);
  const start = performance.now();
  await run(url, `scenario:flood-${FLOOD}`, {
    onChunk: (c) => {
      const b = Buffer.concat([tail, c]);
      for (let i = b.indexOf(MARK); i >= 0; i = b.indexOf(MARK, i + MARK.length)) n++;
      tail = b.subarray(Math.max(0, b.length - MARK.length + 1));
    },
  });
  const s = (performance.now() - start) / 1000;
  return { n, rate: n / s };
}

const nowUs = () => (performance.timeOrigin + performance.now()) * 1000;
/** now − (the kernel's emit time) for every text event of a clock run, in µs. */
async function clockLatencies(url) {
  const out = [];
  await run(url, `scenario:clock-${CLOCK}`, {
    onLine: (d) => {
      if (!d.includes('"TEXT_MESSAGE_CONTENT"')) return;
      const t = Number(JSON.parse(d).delta);
      if (t > 0) out.push(nowUs() - t);
    },
  });
  return out;
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};
const ms = (us) => (us / 1000).toFixed(2);
const loadavg = () => fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");

/** VmRSS of a process and all its descendants, in KiB. */
function rssTree(pid) {
  let kib = 0;
  try {
    kib = Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] || 0);
    for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
      const kids = fs.readFileSync(`/proc/${pid}/task/${t}/children`, "utf8").trim();
      for (const k of kids ? kids.split(" ") : []) kib += rssTree(Number(k));
    }
  } catch {}
  return kib;
}
const mib = (kib) => (kib / 1024).toFixed(1);
const adapterPid = (i) => Number(fs.readFileSync(path.join(WORK, "pairs", `pair-${i}`, "adapter.pid"), "utf8"));
const kernelPid = (i) => Number(fs.readFileSync(path.join(WORK, `kernel-${i}.pid`), "utf8"));
const haproxyPid = () => Number(fs.readFileSync(path.join(WORK, "haproxy.pid"), "utf8"));
const pairRss = (i) => ({ adapter: rssTree(adapterPid(i)), kernel: rssTree(kernelPid(i)) });
const threads = (pid) => Number(/Threads:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] || 0);
const adapterThreads = () => [1, 2, 3].map((i) => threads(adapterPid(i)));

// ---- 1. events/s ------------------------------------------------------------------------------------

async function eventsPerSecond() {
  log(`events/s: flood-${FLOOD}, direct and through HAProxy, alternated, best of 3`);
  md(`## 1. Events/s of one run (\`scenario:flood-${FLOOD}\`), best of 3, alternated — load ${loadavg()}`);
  md();
  const d = [];
  const p = [];
  for (let k = 0; k < 3; k++) {
    d.push(await floodRate(DIRECT));
    p.push(await floodRate(PROXY));
  }
  const best = (xs) => Math.max(...xs.map((x) => x.rate));
  const [bd, bp] = [best(d), best(p)];
  md("| path | events/s (best) | all three | events counted |");
  md("|---|---|---|---|");
  md(`| direct to pair 1 | ${bd.toFixed(0)} | ${d.map((x) => x.rate.toFixed(0)).join(", ")} | ${d[0].n} |`);
  md(`| through HAProxy | ${bp.toFixed(0)} | ${p.map((x) => x.rate.toFixed(0)).join(", ")} | ${p[0].n} |`);
  md();
  md(`**Ratio HAProxy / direct: ${(bp / bd).toFixed(3)}**`);
  md();
}

// ---- 2. latency ----------------------------------------------------------------------------------------

async function latency() {
  log(`latency: clock-${CLOCK}, direct and proxied at the same time`);
  md(`## 2. Added latency — load ${loadavg()}`);
  md();
  md(`Per event: \`scenario:clock-${CLOCK}\` (text = the fake kernel's clock at emit time), one direct and one proxied stream at the same time; now − t at the client.`);
  md();
  const [d, p] = await Promise.all([clockLatencies(DIRECT), clockLatencies(PROXY)]);
  md("| path | events | p50 ms | p99 ms | max ms |");
  md("|---|---|---|---|---|");
  md(`| direct to pair 1 | ${d.length} | ${ms(pct(d, 50))} | ${ms(pct(d, 99))} | ${ms(pct(d, 100))} |`);
  md(`| through HAProxy | ${p.length} | ${ms(pct(p, 50))} | ${ms(pct(p, 99))} | ${ms(pct(p, 100))} |`);
  md();
  md(`**p99 added by HAProxy: ${ms(pct(p, 99) - pct(d, 99))} ms (ratio ${(pct(p, 99) / pct(d, 99)).toFixed(2)}); p50 added: ${ms(pct(p, 50) - pct(d, 50))} ms**`);
  md();
  // Per request: HAProxy reads the body, hashes, opens a server connection (http-server-close).
  const N = 200;
  const first = { d: [], p: [] };
  for (let k = 0; k < N; k++) {
    for (const [key, url] of [["d", DIRECT], ["p", PROXY]]) {
      const start = performance.now();
      let seen = false;
      await run(url, "scenario:numbered", {
        onLine: (l) => {
          if (!seen && l.includes('"RUN_STARTED"')) {
            seen = true;
            first[key].push((performance.now() - start) * 1000);
          }
        },
      });
    }
  }
  md(`Per request: time from the POST to \`RUN_STARTED\` of a short run (\`scenario:numbered\`), ${N} each, alternated.`);
  md();
  md("| path | p50 ms | p99 ms |");
  md("|---|---|---|");
  md(`| direct to pair 1 | ${ms(pct(first.d, 50))} | ${ms(pct(first.d, 99))} |`);
  md(`| through HAProxy | ${ms(pct(first.p, 50))} | ${ms(pct(first.p, 99))} |`);
  md();
  md(`**p99 added per request: ${ms(pct(first.p, 99) - pct(first.d, 99))} ms (ratio ${(pct(first.p, 99) / pct(first.d, 99)).toFixed(2)})**`);
  md();
}

// ---- 3. memory of an idle pair -------------------------------------------------------------------------

async function realKernelPair() {
  const iac = path.join(VENV, "bin", "iac-code");
  if (!VENV || !fs.existsSync(iac)) return null;
  const dir = path.join(WORK, "real");
  fs.mkdirSync(path.join(dir, "config"), { recursive: true });
  fs.mkdirSync(path.join(dir, "home"), { recursive: true });
  const port = BASE + 50;
  const env = {
    ...process.env,
    HOME: path.join(dir, "home"),
    IAC_CODE_CONFIG_DIR: path.join(dir, "config"),
    IAC_CODE_PROVIDER: "OpenAI Compatible",
    IAC_CODE_MODEL: "fake-model",
    IAC_CODE_BASE_URL: "http://127.0.0.1:9/v1", // never called: the pair stays idle
    IAC_CODE_API_KEY: "sk-fake-local-test",
    DISABLE_TELEMETRY: "1",
    IAC_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
  };
  const out = fs.openSync(path.join(dir, "adapter.log"), "a");
  const child = spawn(
    process.env.AGUI_BIN,
    ["--port", String(port), "--state-dir", path.join(dir, "agui"), "--pair-mode", "--a2a-command", `${iac} a2a`],
    { env, stdio: ["ignore", out, out] },
  );
  try {
    const start = Date.now();
    while (Date.now() - start < 90_000) {
      try {
        if ((await fetch(`http://127.0.0.1:${port}/health`)).ok) break;
      } catch {}
      await sleep(200);
    }
    const ready = (Date.now() - start) / 1000;
    await sleep(3000);
    const adapter = Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${child.pid}/status`, "utf8"))[1]);
    const total = rssTree(child.pid);
    return { adapter, kernel: total - adapter, ready };
  } finally {
    child.kill("SIGTERM");
    await new Promise((r) => child.once("exit", r));
  }
}

function idleMemory(title, sample) {
  md(`| ${title} | ${[1, 2, 3].map((i) => `${mib(sample[i - 1].adapter)} + ${mib(sample[i - 1].kernel)}`).join(" | ")} |`);
}

// ---- 4. held runs ---------------------------------------------------------------------------------------

async function heldRuns(heldStart) {
  log(`held runs: scenario:hang through HAProxy, in steps up to ${HELD_MAX} or the first error`);
  md(`## 3. Held runs three pairs carry (\`scenario:hang\` through HAProxy; steps up to ${HELD_MAX} or the first error) — load ${loadavg()}`);
  md();
  const runs = [];
  let stopping = false;
  let errors = 0;
  let firstError = "";
  const open = () =>
    new Promise((established) => {
      // One controller per run: fetch sets a signal's listener limit to 1,500 and warns beyond it.
      const r = { up: false, ended: false, controller: new AbortController() };
      runs.push(r);
      run(PROXY, "scenario:hang", {
        signal: r.controller.signal,
        onLine: (l) => {
          if (!r.up && l.includes('"TEXT_MESSAGE_CONTENT"')) {
            r.up = true;
            established();
          }
        },
      })
        .then(() => (r.ended = true))
        .catch((e) => {
          r.ended = true;
          if (!stopping) {
            errors++;
            firstError ||= `${e.message} ${e.cause?.code || ""}`;
          }
        })
        .finally(established);
    });
  md("| held runs | established | ended early | errors | RSS adapters (MiB) | RSS fake kernels (MiB) | RSS HAProxy (MiB) | open time s |");
  md("|---|---|---|---|---|---|---|---|");
  let held = 0;
  for (const target of [250, 500, 1000, 2000, 3000].filter((t) => t <= HELD_MAX)) {
    const start = Date.now();
    const batch = [];
    for (let k = held; k < target; k++) {
      batch.push(open());
      if (batch.length % 100 === 0) await Promise.all(batch.slice(-100));
    }
    await Promise.race([Promise.all(batch), sleep(60_000)]);
    const openS = (Date.now() - start) / 1000;
    held = target;
    await sleep(3000); // held a moment: every stream must still be open
    const up = runs.filter((r) => r.up && !r.ended).length;
    const early = runs.filter((r) => r.ended).length;
    const rss = [1, 2, 3].map(pairRss);
    md(
      `| ${target} | ${up} | ${early} | ${errors} | ${rss.map((x) => mib(x.adapter)).join(" / ")} | ${rss.map((x) => mib(x.kernel)).join(" / ")} | ${mib(rssTree(haproxyPid()))} | ${openS.toFixed(1)} |`,
    );
    log(`      ${target}: ${up} held, ${early} ended, ${errors} errors`);
    if (errors || early || up < target) break;
  }
  const carried = runs.filter((r) => r.up && !r.ended).length;
  const top = [1, 2, 3].map(pairRss);
  const sum = (xs, k) => xs.reduce((a, x) => a + x[k], 0);
  md();
  md(`Adapter memory per held run: ${((sum(top, "adapter") - sum(heldStart, "adapter")) / carried).toFixed(0)} KiB (the three adapters' RSS growth / held runs); ${adapterThreads().join(" / ")} adapter threads.`);
  md(`**Three pairs carried ${carried} held runs at once${errors ? ` (first error: ${firstError})` : ""}${carried >= HELD_MAX ? ` (the bench stops at ${HELD_MAX})` : ""}.**`);
  md();
  stopping = true;
  for (const r of runs) r.controller.abort();
  await sleep(2000);
}

// ---- main -------------------------------------------------------------------------------------------------

async function main() {
  md("# Several pairs behind HAProxy: figures (benches/pairs.sh)");
  md();
  md(`Three pairs (release adapter with \`--pair-mode\` + the fake kernel), Debian's HAProxy ${execFileSync("haproxy", ["-v"]).toString().split("\n")[0].split(" ")[2]} with contrib/deploy/haproxy.cfg, all on 127.0.0.1; ${fs.readFileSync("/proc/cpuinfo", "utf8").match(/^processor/gm).length} cores shared by clients, proxy, adapters and kernels. Node ${process.version} fetch is the client for both paths. Figures are reported, never asserted.`);
  md();
  const idleStart = [1, 2, 3].map(pairRss);
  const adapterThreadsAtStart = adapterThreads();
  await eventsPerSecond();
  await latency();
  await heldRuns([1, 2, 3].map(pairRss));
  // Idle again: wait (<= 30 s) for the held runs' threads to end.
  const idleThreads = adapterThreadsAtStart.map((n) => n + 10);
  for (let k = 0; k < 60 && adapterThreads().some((n, i) => n > idleThreads[i]); k++) await sleep(500);
  const idleAfter = [1, 2, 3].map(pairRss);
  const threadsAfter = adapterThreads();
  log("memory of an idle pair (and the real kernel, if installed)");
  md(`## 4. Memory of an idle pair (VmRSS, MiB: adapter + kernel)`);
  md();
  md("| when | pair 1 | pair 2 | pair 3 |");
  md("|---|---|---|---|");
  idleMemory("after start", idleStart);
  idleMemory(`idle after the benches above (adapter threads ${adapterThreadsAtStart.join("/")} at start, ${threadsAfter.join("/")} now)`, idleAfter);
  md();
  md("After the held runs end, the adapters' threads are gone but their RSS stays near its peak: the memory is not given back to the OS at once (measured here; the cause, most likely glibc's malloc arenas and thread-stack cache, was not investigated). Size a pair for its peak of held runs.");
  md();
  const real = await realKernelPair();
  if (real) {
    md(`With the real kernel (\`${VENV}/bin/iac-code a2a\`, 0.16.0, started and supervised by the adapter, idle 3 s after /health, ready in ${real.ready.toFixed(1)} s): **adapter ${mib(real.adapter)} MiB + kernel ${mib(real.kernel)} MiB = ${mib(real.adapter + real.kernel)} MiB per idle pair.**`);
  } else {
    md("The real kernel's venv was not found (REAL_KERNEL_VENV): no real-kernel figure.");
  }
  md();
  md("The fake kernel is a test double (a few MiB); a real pair's memory is the adapter's plus the real kernel's.");
  fs.writeFileSync(OUT, report.join("\n") + "\n");
  console.log(report.join("\n"));
}

main().catch((e) => {
  console.error(e.stack || e);
  process.exit(1);
});
