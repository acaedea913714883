// assistant-ui (contrib/frameworks/assistant-ui, unchanged, bundled by its build.mjs) in Debian's
// chromium against iac-code-agui and the real kernel with the scripted LLM (../launch.py starts
// them). Env: ADAPTER_URL, PAGE_PORT, AGUI_CWD, CHROMIUM, SHOTS, CAPTURES.
// One line per scenario (PASS / FAIL + reason), a screenshot per step; exit 1 on any failure.
import puppeteer from "puppeteer-core";
import assert from "node:assert/strict";
import { checkEnvelope } from "../envelope.mjs";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";

const env = (k) => { const v = process.env[k]; if (!v) throw new Error(`missing env ${k}`); return v; };
const ADAPTER_URL = env("ADAPTER_URL");
const PAGE_PORT = Number(env("PAGE_PORT"));
const CWD = env("AGUI_CWD");
const SHOTS = env("SHOTS");
const CAPTURES = env("CAPTURES");
const EXAMPLE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../contrib/frameworks/assistant-ui");
const LLM_TEXT = "Here is a VPC template outline: one VPC, two vSwitches.";
const LLM_THINKING = "The user wants a VPC; two vSwitches in two zones is the usual layout.";
const AFTER_TOOL = "Done: the file has been handled.";
const WAIT = 30_000;
const FILTERS = process.argv.slice(2);

// the page's own origin serves the example's files (the adapter allows it as a CORS origin)
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".map": "application/json" };
const HERE = path.dirname(fileURLToPath(import.meta.url));
const MISCONF = path.join(process.env.WORK || "/tmp", "misconfigured");
const server = http.createServer((req, res) => {
  const p = new URL(req.url, "http://x").pathname;
  if (p.startsWith("/misconfigured/")) {
    const f = path.join(MISCONF, p.slice("/misconfigured/".length) || "index.html");
    if (!fs.existsSync(f)) return res.writeHead(404).end();
    res.writeHead(200, { "Content-Type": TYPES[path.extname(f)] || "text/html" });
    return fs.createReadStream(f).pipe(res);
  }
  const file = path.join(EXAMPLE, p === "/" ? "index.html" : p);
  if (!file.startsWith(EXAMPLE) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { "Content-Type": TYPES[path.extname(file)] || "application/octet-stream" });
  fs.createReadStream(file).pipe(res);
});
await new Promise((r) => server.listen(PAGE_PORT, "127.0.0.1", r));
const PAGE = `http://127.0.0.1:${PAGE_PORT}`;

const browser = await puppeteer.launch({
  executablePath: env("CHROMIUM"),
  headless: true,
  userDataDir: fs.mkdtempSync(path.join(process.env.WORK || "/tmp", "chromium-")),
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});

const requests = []; // everything the page sent to the adapter
const consoleErrors = [];
let shotNo = 0;
async function shot(page, name) {
  shotNo++;
  await page.screenshot({ path: `${SHOTS}/${String(shotNo).padStart(2, "0")}-${name}.png`, fullPage: true });
}
async function open(sub, query = {}) {
  const cwd = path.join(CWD, sub);
  fs.mkdirSync(cwd, { recursive: true });
  const page = await browser.newPage();
  await page.setViewport({ width: 1000, height: 800 });
  page.on("request", (r) => {
    if (!r.url().startsWith(ADAPTER_URL) || r.method() === "OPTIONS") return;
    let body;
    try { body = r.postData() ? JSON.parse(r.postData()) : undefined; } catch { body = r.postData(); }
    const entry = { scenario: sub, method: r.method(), url: r.url(), headers: r.headers(), body };
    requests.push(entry);
    r.__entry = entry;
  });
  page.on("response", (r) => { if (r.request().__entry) r.request().__entry.status = r.status(); });
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(`${sub}: ${m.text()}`); });
  const q = new URLSearchParams({ adapter: ADAPTER_URL, cwd, user: `u-${sub}`, ...query });
  await page.goto(`${PAGE}/?${q}`);
  await page.waitForSelector(".input");
  return { page, cwd };
}
const threadOf = (page) => page.evaluate(() => window.iacAgent.threadId);
async function send(page, text) {
  await page.type(".input", text);
  await page.click(".send");
}
const assistantText = (page) => page.$$eval(".msg.assistant .text", (els) => els.map((e) => e.textContent).join(""));
async function waitFor(page, what, fn, arg) {
  try {
    await page.waitForFunction(fn, { timeout: WAIT, polling: 100 }, arg);
  } catch {
    throw new Error(`never saw ${what}; the page shows: ${JSON.stringify((await page.$eval(".thread", (e) => e.innerText)).slice(-600))}`);
  }
}
// The messages the page shows: role, text (a user's) and the tools an assistant's shows.
const transcript = (page) => page.$$eval(".msg", (els) => els.map((e) => ({
  role: e.classList.contains("user") ? "user" : "assistant",
  text: e.classList.contains("user") ? e.textContent : [...e.querySelectorAll(".text")].map((t) => t.textContent).join(""),
  tools: [...e.querySelectorAll(".tool")].map((t) => t.dataset.tool),
})));
const waitText = (page, t) => waitFor(page, JSON.stringify(t),
  (x) => [...document.querySelectorAll(".msg.assistant")].some((e) => e.textContent.includes(x)), t);
const waitIdle = (page) => waitFor(page, "the run to end", () => !!document.querySelector(".send"));
const waitInterrupt = (page, kind) => waitFor(page, `an interrupt card (${kind ?? "any"})`,
  (k) => [...document.querySelectorAll(".interrupt")].some((e) => !k || e.dataset.kind === k), kind);
const posts = (scenario) => requests.filter((r) => r.scenario === scenario && r.method === "POST" && new URL(r.url).pathname === "/");

const scenarios = {
  async turn() {
    const { page, cwd } = await open("turn");
    await send(page, `Think first, then describe a VPC template. [[pace=0.15]] [[cwd=${cwd}]]`);
    await waitFor(page, "text while the run streams", () => !!document.querySelector(".stop")
      && [...document.querySelectorAll(".msg.assistant .text")].some((e) => e.textContent.length > 0));
    await shot(page, "turn-streaming");
    await waitText(page, LLM_TEXT);
    await waitIdle(page);
    const reasoning = await page.$$eval(".reasoning", (els) => els.map((e) => e.textContent).join(""));
    assert.ok(reasoning.includes(LLM_THINKING), `reasoning shown: ${reasoning}`);
    await shot(page, "turn-done");
    await page.close();
    return "text streamed (shown while running), reasoning shown";
  },

  async allow() {
    const { page, cwd } = await open("allow");
    await send(page, `Please write hello.txt in the workspace. [[cwd=${cwd}]]`);
    await waitInterrupt(page, "permission");
    await waitFor(page, "the write_file tool call", () => !!document.querySelector('.tool[data-tool="write_file"]'));
    await shot(page, "allow-card");
    await page.click('.interrupt button[data-choice="allow_once"]');
    await waitText(page, AFTER_TOOL);
    await waitIdle(page);
    await waitFor(page, "the tool result", () => !!document.querySelector(".tool .result"));
    await shot(page, "allow-done");
    assert.equal(fs.readFileSync(path.join(cwd, "hello.txt"), "utf8"), "hello\n");
    const [run1, resume] = posts("allow");
    assert.equal(resume.status, 200);
    assert.notEqual(resume.body.runId, run1.body.runId, "the resume has a new runId");
    assert.equal(resume.body.resume.length, 1);
    assert.deepEqual(resume.body.resume[0].payload, { decision: "allow_once" });
    assert.equal(resume.body.forwardedProps.iacCode.rosInvocationId, run1.body.forwardedProps.iacCode.rosInvocationId);
    await page.close();
    return "tool call card, permission card, allow_once resumed (new runId), hello.txt written, result shown";
  },

  async deny() {
    const { page, cwd } = await open("deny");
    await send(page, `Please write hello.txt in the workspace. [[cwd=${cwd}]]`);
    await waitInterrupt(page, "permission");
    await page.click('.interrupt button[data-choice="deny"]');
    await waitText(page, AFTER_TOOL);
    await waitIdle(page);
    await shot(page, "deny-done");
    assert.ok(!fs.existsSync(path.join(cwd, "hello.txt")), "denied: no file");
    return "denied, no file";
  },

  async pipeline() {
    const { page, cwd } = await open("pipeline", { mode: "pipeline", pipeline: "selling" });
    await send(page, "部署一个网站");
    const kinds = [];
    for (let round = 1; round <= 8; round++) {
      await waitFor(page, "an interrupt or the end", () => !!document.querySelector(".interrupt")
        || (!!document.querySelector(".send") && document.querySelectorAll(".msg.assistant").length > 0));
      const cards = await page.$$eval(".interrupt", (els) => els.map((e) => ({ id: e.dataset.interrupt,
        kind: e.dataset.kind, choices: [...e.querySelectorAll("button[data-choice]")].map((b) => b.dataset.choice) })));
      if (!cards.length) break;
      await shot(page, `pipeline-round${round}`);
      for (const c of cards) {
        kinds.push(c.kind);
        const sel = `.interrupt[data-interrupt="${c.id}"]`;
        if (c.choices.includes("allow_once")) await page.click(`${sel} button[data-choice="allow_once"]`);
        else if (c.choices.length && c.choices[0] !== "free-text") await page.click(`${sel} button[data-choice="${c.choices[0]}"]`);
        else { await page.type(`${sel} input`, "ok"); await page.click(`${sel} button[data-choice="free-text"]`); }
      }
      await waitFor(page, "the card to go", (ids) => !ids.some((id) => document.querySelector(`.interrupt[data-interrupt="${id}"]`)), cards.map((c) => c.id));
    }
    await waitIdle(page);
    await shot(page, "pipeline-done");
    const runs = posts("pipeline");
    const last = runs.at(-1);
    assert.equal(last.status, 200);
    assert.ok(kinds.length >= 3, `interrupts answered: ${kinds}`);
    const errors = await page.$$eval(".error", (els) => els.length);
    assert.equal(errors, 0, "no error shown");
    return `${runs.length} runs; interrupts answered in order: ${kinds.join(", ")}`;
  },

  async stop() {
    const { page, cwd } = await open("stop");
    await send(page, `[[script=long]] [[pace=0.3]] [[cwd=${cwd}]]`);
    await waitFor(page, "streamed text", () => [...document.querySelectorAll(".msg.assistant .text")].some((e) => e.textContent.length > 0));
    await page.click(".stop");
    const t = Date.now();
    await waitIdle(page);
    const idleMs = Date.now() - t;
    const cancel = requests.find((r) => r.scenario === "stop" && r.url.includes("/cancel"));
    assert.ok(cancel, "the cancel extension was called");
    for (let i = 0; i < 100 && cancel.status === undefined; i++) await new Promise((r) => setTimeout(r, 100));
    assert.equal(cancel.status, 200);
    assert.equal(await page.$$eval(".error", (els) => els.map((e) => e.textContent).join("|")), "", "Stop is not shown as an error");
    const len = (await assistantText(page)).length;
    assert.ok(len < 20000, `stopped early (${len} chars)`);
    await shot(page, "stop-stopped");
    await send(page, `Describe a VPC template. [[cwd=${cwd}]]`);
    await waitText(page, LLM_TEXT);
    await waitIdle(page);
    await shot(page, "stop-next-turn");
    return `Stop -> cancel extension ${cancel.status}, page idle after ${idleMs} ms, ${len} chars shown; next turn ok`;
  },

  // An earlier turn, then an approval; the page reloads at the approval: the whole conversation
  // comes back (the join's snapshot, then the message the approval waits on) with the card,
  // which is answered from the reloaded page.
  async reload() {
    const { page, cwd } = await open("reload");
    const first = `Describe a VPC template. [[cwd=${cwd}]]`;
    const second = `Please write hello.txt in the workspace. [[cwd=${cwd}]]`;
    await send(page, first);
    await waitText(page, LLM_TEXT);
    await waitIdle(page);
    await send(page, second);
    await waitInterrupt(page, "permission");
    const before = await transcript(page);
    await page.reload();
    await page.waitForSelector(".input");
    await waitInterrupt(page, "permission");
    await waitFor(page, "the re-attach note", () => document.querySelector(".rejoin")?.textContent.includes("waiting"));
    await waitFor(page, "the write_file tool call", () => !!document.querySelector('.tool[data-tool="write_file"]'));
    const after = await transcript(page);
    await shot(page, "reload-card-back");
    const users = after.filter((m) => m.role === "user").map((m) => m.text);
    assert.deepEqual(users, [first, second], `the user's messages after the reload: ${JSON.stringify(after)}`);
    const at = (pred) => after.findIndex(pred);
    const answer = at((m) => m.role === "assistant" && m.text.includes(LLM_TEXT));
    const call = at((m) => m.role === "assistant" && m.tools.includes("write_file"));
    assert.ok(at((m) => m.text === first) < answer && answer < at((m) => m.text === second)
      && at((m) => m.text === second) < call, `the conversation in order after the reload: ${JSON.stringify(after)}`);
    assert.deepEqual(after.map((m) => m.role), before.map((m) => m.role), `the same messages as before the reload: ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
    await page.click('.interrupt button[data-choice="allow_once"]');
    await waitText(page, AFTER_TOOL);
    await waitIdle(page);
    await shot(page, "reload-answered");
    assert.equal(fs.readFileSync(path.join(cwd, "hello.txt"), "utf8"), "hello\n");
    // an ended turn: no execution to re-attach to
    await page.reload();
    await page.waitForSelector(".input");
    await new Promise((r) => setTimeout(r, 1500));
    const ended = await page.$$eval(".msg", (els) => els.length);
    await shot(page, "reload-after-end");
    const kinds = requests.filter((r) => r.scenario === "reload").map((r) => `${r.method} ${new URL(r.url).pathname.replace(/[0-9a-f-]{36}/g, ":id")} ${r.status}`);
    return `an earlier turn, then the approval; after the reload ${after.length} messages in order ` +
      `(${after.map((m) => m.role).join(", ")}) and the card (thread route, observe route), answered, file written; ` +
      `reload after the turn ended shows ${ended} messages. Requests: ${kinds.join("; ")}`;
  },

  // Not the contrib setup (misconfigured.jsx): what a page that uses assistant-ui's own tools,
  // instructions and call settings sends, and what it shows: each refused by name (400), reported (NOTE); the envelope
  // check below leaves these requests out.
  async misconfigured() {
    const { build } = await import(path.join(EXAMPLE, "node_modules/esbuild/lib/main.js"));
    fs.mkdirSync(MISCONF, { recursive: true });
    await build({ entryPoints: [path.join(HERE, "misconfigured.jsx")], bundle: true, format: "esm", jsx: "automatic",
      outfile: path.join(MISCONF, "app.js"), nodePaths: [path.join(EXAMPLE, "node_modules")],
      define: { "process.env.NODE_ENV": '"production"' }, logLevel: "error" });
    fs.writeFileSync(path.join(MISCONF, "index.html"), '<div id="root"></div><script type="module" src="app.js"></script>');
    const notes = [];
    for (const tool of ["0", "1"]) {
      const sub = `misconfigured-tool${tool}`;
      const cwd = path.join(CWD, sub);
      fs.mkdirSync(cwd, { recursive: true });
      const page = await browser.newPage();
      page.on("request", (r) => {
        if (!r.url().startsWith(ADAPTER_URL) || r.method() !== "POST") return;
        const entry = { scenario: sub, method: "POST", url: r.url(), headers: r.headers(), body: JSON.parse(r.postData()) };
        requests.push(entry);
        r.__entry = entry;
      });
      page.on("response", async (r) => { const e = r.request().__entry; if (e) { e.status = r.status(); if (r.status() >= 400) e.answer = await r.text().catch(() => ""); } });
      await page.goto(`${PAGE}/misconfigured/?${new URLSearchParams({ adapter: ADAPTER_URL, cwd, tool })}`);
      await page.waitForSelector(".input");
      await send(page, `Describe a VPC template. [[cwd=${cwd}]]`);
      await waitFor(page, "the run to end", () => !!document.querySelector(".send") && (document.querySelector(".text") || document.querySelector(".error") || (window.runErrors || []).length));
      await new Promise((r) => setTimeout(r, 500));
      await shot(page, sub);
      const r = posts(sub)[0];
      const shown = await page.$$eval(".error, .text", (els) => els.map((e) => e.textContent).join(" | "));
      notes.push(`${tool === "1" ? "with a frontend tool" : "instructions + callSettings"}: tools [${r.body.tools.map((t) => t.name)}], ` +
        `context ${JSON.stringify(r.body.context)}, forwardedProps keys [${Object.keys(r.body.forwardedProps)}] -> HTTP ${r.status}` +
        `${r.answer ? ` ${r.answer}` : ""}; the page shows "${shown.slice(0, 160)}"`);
      // Each is refused by name: a frontend tool, or a call setting beside iacCode in forwardedProps.
      if (r.status !== 400 || !/may hold only `iacCode`|`tools` must be an empty array/.test(r.answer || "")) {
        throw new Error(`${sub}: expected a 400 naming the setting, got HTTP ${r.status} ${r.answer || ""}`);
      }
      await page.close();
    }
    return `NOTE ${notes.join(" || ")}`;
  },
};

function summarise() {
  const post = requests.filter((r) => r.method === "POST" && new URL(r.url).pathname === "/"
    && !r.scenario.startsWith("misconfigured"));
  const keys = new Set(), fwd = new Set(), headers = new Set();
  let tools = 0, context = 0, state = new Set();
  for (const r of post) {
    Object.keys(r.body).forEach((k) => keys.add(k));
    Object.keys(r.body.forwardedProps ?? {}).forEach((k) => fwd.add(k));
    Object.keys(r.headers).forEach((h) => headers.add(h));
    if ((r.body.tools ?? []).length) tools++;
    if ((r.body.context ?? []).length) context++;
    state.add(JSON.stringify(r.body.state));
  }
  const runIds = post.map((r) => `${r.body.threadId}/${r.body.runId}`);
  return {
    runRequests: post.length, bodyKeys: [...keys].sort(), forwardedPropsKeys: [...fwd].sort(),
    headers: [...headers].sort(), nonEmptyTools: tools, nonEmptyContext: context, stateValues: [...state],
    runIdsReused: runIds.length - new Set(runIds).size,
    resumes: post.filter((r) => r.body.resume).map((r) => r.body.resume.map((x) => ({ status: x.status, payload: x.payload }))),
    otherRequests: requests.filter((r) => !post.includes(r) && !r.scenario.startsWith("misconfigured")).map((r) => `${r.method} ${new URL(r.url).pathname.replace(/[0-9a-f-]{36}/g, ":id")} ${r.status}`),
  };
}

let failed = 0;
try {
  for (const [name, fn] of Object.entries(scenarios)) {
    if (FILTERS.length && !FILTERS.some((f) => name.includes(f))) continue;
    const t = Date.now();
    try {
      const note = await Promise.race([fn(), new Promise((_, rej) => setTimeout(() => rej(new Error("scenario timeout 120 s")), 120_000))]);
      console.log(`PASS ${name} (${((Date.now() - t) / 1000).toFixed(1)} s): ${note}`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${name} (${((Date.now() - t) / 1000).toFixed(1)} s): ${e.message}`);
      for (const p of await browser.pages()) await p.screenshot({ path: `${SHOTS}/fail-${name}-${shotNo++}.png` }).catch(() => {});
    }
  }
  const summary = summarise();
  console.log("what assistant-ui sent:", JSON.stringify(summary, null, 1));
  if (consoleErrors.length) console.log(`browser console errors (${consoleErrors.length}):\n  ${consoleErrors.slice(0, 12).join("\n  ")}`);
  fs.mkdirSync(CAPTURES, { recursive: true });
  fs.writeFileSync(path.join(CAPTURES, "requests.json"), JSON.stringify({ summary, requests }, null, 1));
  try {
    checkEnvelope(summary);
  } catch (e) { failed++; console.log(`FAIL envelope: ${e.message}`); }
} finally {
  await browser.close().catch(() => {});
  server.close();
}
console.log(`assistant-ui: ${failed ? "FAILED" : "all passed"}`);
process.exit(failed ? 1 : 0);
