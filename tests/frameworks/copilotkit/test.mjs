// CopilotKit (contrib/frameworks/copilotkit) in Debian's chromium against iac-code-agui and the real
// kernel. Started by run.sh, which provides (env): CHROMIUM, SHOTS, CAPTURE (the recording proxy's
// JSONL: every request the runtime sent the adapter), RUNTIME_URL (the runtime serving the page),
// ADAPTER_URL (the adapter, direct), AGUI_CWD (the runtime's workspace), CK_DIR, WORK.
// One line per scenario (PASS / FAIL + reason), a screenshot per step; exit 1 on any failure.
import puppeteer from "puppeteer-core";
import { createRequire } from "node:module";
import { randomUUID } from "node:crypto";
import { existsSync, readFileSync, rmSync, appendFileSync, writeFileSync } from "node:fs";

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`missing env ${k}`);
  return v;
};
const CHROMIUM = env("CHROMIUM");
const SHOTS = env("SHOTS");
const CAPTURE = env("CAPTURE");
const RUNTIME_URL = env("RUNTIME_URL");
const MISCONFIGURED_URL = env("MISCONFIGURED_URL");
const ADAPTER_URL = env("ADAPTER_URL");
const CWD = env("AGUI_CWD");
const WORK = env("WORK");
const BROWSER_LOG = CAPTURE.replace(/\.jsonl$/, "-browser.jsonl");
const WAIT_MS = 60_000; // the real kernel on a busy 2-core machine
const FILTERS = process.argv.slice(2);
const T0 = Date.now();
const LLM_TEXT = "Here is a VPC template outline: one VPC, two vSwitches.";
const LLM_THINKING = "The user wants a VPC; two vSwitches in two zones is the usual layout.";
const LLM_AFTER_TOOL = "Done: the file has been handled.";

const log = (msg) => console.log(`[${((Date.now() - T0) / 1000).toFixed(1).padStart(6)}s] ${msg}`);
function check(cond, message) {
  if (!cond) throw new Error(message);
}

// ---- the capture (what the runtime sent the adapter) -----------------------------------------
function captured() {
  if (!existsSync(CAPTURE)) return [];
  return readFileSync(CAPTURE, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
}
const runs = (threadId) => captured().filter((r) => r.method === "POST" && r.path === "/" && r.body?.threadId === threadId);
const interruptsOf = (rec) => (rec.events || []).filter((e) => e.type === "RUN_FINISHED" && e.outcome?.type === "interrupt").flatMap((e) => e.outcome.interrupts || []);
const terminal = (rec) => (rec.events || []).filter((e) => e.type === "RUN_FINISHED" || e.type === "RUN_ERROR").pop();

async function until(what, fn, ms = WAIT_MS) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${what}${last instanceof Error ? `: ${last.message}` : ""}`);
}

// ---- the browser -----------------------------------------------------------------------------
let browser;
let shotNo = 0;
async function shot(page, name) {
  shotNo++;
  await page.screenshot({ path: `${SHOTS}/${String(shotNo).padStart(2, "0")}-${name}.png` });
}

async function openPage(query = "", base = RUNTIME_URL, lang = null) {
  const threadId = `ck-${randomUUID()}`;
  const page = await browser.newPage();
  if (lang) await page.evaluateOnNewDocument((l) => Object.defineProperty(navigator, "language", { get: () => l }), lang);
  await page.setViewport({ width: 1100, height: 900 });
  page.consoleLines = [];
  page.on("console", (m) => page.consoleLines.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => page.consoleLines.push(`pageerror: ${e.message}`));
  page.on("request", (req) => {
    if (!req.url().includes("/api/copilotkit")) return;
    appendFileSync(BROWSER_LOG, JSON.stringify({ at: Date.now(), method: req.method(), url: req.url().replace(RUNTIME_URL, ""),
      headers: req.headers(), body: req.postData() ? safeJson(req.postData()) : null }) + "\n");
  });
  // what the browser received from the runtime: the CUSTOM events among them
  page.on("response", async (resp) => {
    if (!/\/agent\/default\/(run|connect)$/.test(resp.url())) return;
    const text = await resp.text().catch(() => "");
    const events = text.split("\n").filter((l) => l.startsWith("data:")).map((l) => safeJson(l.slice(5).trim()));
    appendFileSync(BROWSER_LOG, JSON.stringify({ at: Date.now(), response: resp.url().replace(RUNTIME_URL, ""), status: resp.status(),
      types: events.map((e) => (e?.type === "CUSTOM" ? `CUSTOM:${e.name}` : e?.type)) }) + "\n");
  });
  await load(page, () => page.goto(`${base}/${query}#thread=${threadId}`, { waitUntil: "load" }));
  return { page, threadId };
}
function safeJson(s) {
  try {
    return JSON.parse(s);
  } catch {
    return s;
  }
}
/** (Re)loads the page and waits until CopilotKit has connected the thread (POST …/connect answered). */
async function load(page, go) {
  const connected = page.waitForResponse((r) => /\/agent\/default\/connect$/.test(r.url()), { timeout: WAIT_MS });
  await go();
  await connected;
  await page.waitForSelector('[data-testid="copilot-chat-textarea"]', { timeout: WAIT_MS });
}
async function send(page, text) {
  const area = '[data-testid="copilot-chat-textarea"]';
  await page.click(area);
  await page.keyboard.sendCharacter(text);
  await page.keyboard.press("Enter");
  await until("the message to be sent (the input emptied)", () => page.$eval(area, (t) => t.value === ""), 10_000);
}
const assistantText = (page) => page.$$eval('[data-testid="copilot-assistant-message"]', (els) => els.map((e) => e.textContent).join("\n"));
async function waitAssistant(page, text) {
  try {
    await page.waitForFunction((t) => [...document.querySelectorAll('[data-testid="copilot-assistant-message"]')].some((e) => e.textContent.includes(t)),
      { timeout: WAIT_MS, polling: 100 }, text);
  } catch {
    throw new Error(`the page never showed ${JSON.stringify(text)} (assistant text: ${JSON.stringify((await assistantText(page)).slice(0, 300))})`);
  }
}
async function waitCard(page, kind) {
  try {
    await page.waitForSelector(`.iac-interrupt[data-kind="${kind}"] button:not([disabled])`, { timeout: WAIT_MS });
  } catch {
    const kinds = await page.$$eval(".iac-interrupt", (els) => els.map((e) => e.dataset.kind));
    throw new Error(`no ${kind} card through useInterrupt (cards: ${JSON.stringify(kinds)}; assistant: ${JSON.stringify((await assistantText(page)).slice(-200))})`);
  }
}
const running = (page) => page.$eval('[data-testid="copilot-send-button"]', (b) => !!b.querySelector("svg.lucide-square, svg[class*=square]")).catch(() => false);
/** Clicks an answer on an interrupt card, as a user does: scrolled to the middle of the chat first
 *  (CopilotChat's input box floats over the bottom of the message list). */
async function choose(page, kind, choice) {
  const sel = `.iac-interrupt[data-kind="${kind}"] button[data-choice="${choice}"]`;
  await page.$eval(sel, (b) => b.scrollIntoView({ block: "center" }));
  await page.click(sel);
}
async function showCard(page, kind) {
  await page.$eval(`.iac-interrupt[data-kind="${kind}"]`, (c) => c.scrollIntoView({ block: "center" }));
}
async function waitIdle(page) {
  await until("the run's end on the page (the send button no longer a stop button)", async () => !(await running(page)));
}

// ---- scenarios -------------------------------------------------------------------------------
const SCENARIOS = [];
const scenario = (name, fn) => SCENARIOS.push({ name, fn });
const FINDINGS = [];
const note = (s) => FINDINGS.push(s);

scenario("turn: text and reasoning stream", async () => {
  const { page, threadId } = await openPage();
  await send(page, `Think first, then describe a VPC template. [[pace=0.15]] [[cwd=${CWD}]]`);
  // streaming: the answer is seen growing, not only whole
  const lengths = new Set();
  await until("the answer to stream", async () => {
    const t = await assistantText(page);
    if (t.length) lengths.add(t.length);
    return t.includes(LLM_TEXT.slice(-12));
  });
  check(lengths.size >= 3, `the answer did not stream: lengths seen ${[...lengths]}`);
  await waitIdle(page);
  await shot(page, "turn-text-and-reasoning");
  const reasoning = await page.$$eval("[data-message-id]", (els) => els.map((e) => e.textContent).filter((t) => /Thought/.test(t)));
  check(reasoning.length >= 1, "no reasoning block on the page");
  // open the reasoning block: its text is the LLM's reasoning
  await page.evaluate(() => [...document.querySelectorAll("[data-message-id] button")].find((b) => /Thought/.test(b.textContent))?.click());
  await page.waitForSelector('[data-message-id] button[aria-expanded="true"]', { timeout: 5000 }).catch(() => {});
  await new Promise((r) => setTimeout(r, 600)); // the block's 200 ms opening transition
  await shot(page, "turn-reasoning-open");
  const shown = await page.evaluate((t) => [...document.querySelectorAll("[data-message-id] p, [data-message-id] div")]
    .some((e) => e.textContent.trim().startsWith(t) && e.getBoundingClientRect().height > 0 && e.closest(".cpk\\:overflow-hidden")?.getBoundingClientRect().height > 0), LLM_THINKING.slice(0, 30));
  check(shown, "the reasoning text is not shown on the page after opening its block");
  const r = runs(threadId);
  check(r.length === 1, `the adapter saw ${r.length} runs for the thread, expected 1`);
  const types = new Set(r[0].events.map((e) => e.type));
  for (const t of ["REASONING_START", "REASONING_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT", "RUN_FINISHED"]) check(types.has(t), `no ${t} in the adapter's stream`);
  check(terminal(r[0])?.outcome?.type === "success", `run outcome ${JSON.stringify(terminal(r[0]))}`);
  await page.close();
});

async function writeTurn(decision, label) {
  const target = `${CWD}/hello.txt`;
  rmSync(target, { force: true });
  const { page, threadId } = await openPage();
  await send(page, `Please write hello.txt in the workspace. [[cwd=${CWD}]]`);
  await waitCard(page, "permission");
  const tool = await page.$$eval('[data-testid="copilot-tool-render"]', (els) => els.map((e) => e.dataset.toolName));
  check(tool.includes("write_file"), `the tool call is not shown (tool renders: ${JSON.stringify(tool)})`);
  await showCard(page, "permission");
  await shot(page, `${label}-card`);
  check(!existsSync(target), "hello.txt exists before the answer");
  await choose(page, "permission", decision);
  await waitAssistant(page, LLM_AFTER_TOOL);
  await waitIdle(page);
  await shot(page, `${label}-answered`);
  const cards = await page.$$(".iac-interrupt button:not([disabled])");
  check(cards.length === 0, "the card is still open after the answer");
  const r = runs(threadId);
  check(r.length === 2, `the adapter saw ${r.length} runs, expected the turn and its resume`);
  const [first, resume] = r;
  const it = interruptsOf(first)[0];
  check(it?.metadata?.kind === "permission", `run 1 interrupt ${JSON.stringify(it)?.slice(0, 200)}`);
  check(resume.status === 200, `resume answered HTTP ${resume.status} ${JSON.stringify(resume.response)}`);
  check(resume.body.runId !== first.body.runId, "the resume reused the interrupted run's runId on the wire");
  check(JSON.stringify(resume.body.resume) === JSON.stringify([{ interruptId: it.id, status: "resolved", payload: { decision } }]),
    `resume entries ${JSON.stringify(resume.body.resume)}`);
  check(resume.body.forwardedProps.iacCode.rosInvocationId === first.body.forwardedProps.iacCode.rosInvocationId, "the resume changed rosInvocationId");
  check(terminal(resume)?.outcome?.type === "success", `resume outcome ${JSON.stringify(terminal(resume))}`);
  const results = resume.events.filter((e) => e.type === "TOOL_CALL_RESULT");
  check(results.length === 1, `expected one TOOL_CALL_RESULT, got ${results.length}`);
  await page.close();
  return { target, first, resume };
}

scenario("permission: allow through useInterrupt (file written)", async () => {
  const { target, resume } = await writeTurn("allow_once", "allow");
  check(existsSync(target) && readFileSync(target, "utf8") === "hello\n", "hello.txt was not written after Allow");
  const tools = (resume.body.messages || []).filter((m) => m.role === "tool");
  note(`resume request (allow): messages ${resume.body.messages.length} (roles ${resume.body.messages.map((m) => m.role).join(",")}); ` +
    `tool messages CopilotKit added: ${JSON.stringify(tools.map((m) => m.content))}`);
});

scenario("permission: deny through useInterrupt (no file)", async () => {
  const { target } = await writeTurn("deny", "deny");
  check(!existsSync(target), "hello.txt exists after Deny");
});

scenario("pipeline: question, permission and candidate selection through useInterrupt", async () => {
  const { page, threadId } = await openPage("?mode=pipeline");
  await send(page, "部署一个网站");
  await waitCard(page, "ask_user_question");
  await showCard(page, "ask_user_question");
  await shot(page, "pipeline-question");
  await choose(page, "ask_user_question", "opt-cn-hangzhou");
  await waitCard(page, "permission");
  await showCard(page, "permission");
  await shot(page, "pipeline-permission");
  await choose(page, "permission", "allow_once");
  await waitCard(page, "candidate_selection");
  await showCard(page, "candidate_selection");
  await shot(page, "pipeline-candidate-selection");
  const first = await page.$eval('.iac-interrupt[data-kind="candidate_selection"] button[data-choice^="opt-"]', (b) => b.dataset.choice);
  await choose(page, "candidate_selection", first);
  await until("the pipeline's last run to end", () => {
    const r = runs(threadId);
    return r.length === 4 && terminal(r[3]);
  }, 120_000);
  await waitAssistant(page, "deploying done.");
  await waitIdle(page);
  await shot(page, "pipeline-done");
  const r = runs(threadId);
  const kinds = r.map((x) => interruptsOf(x).map((i) => i.metadata?.kind));
  check(JSON.stringify(kinds) === JSON.stringify([["ask_user_question"], ["permission"], ["candidate_selection"], []]), `interrupts per run ${JSON.stringify(kinds)}`);
  const payloads = r.slice(1).map((x) => x.body.resume.map((e) => e.payload));
  check(payloads[0][0].selectedId === "cn-hangzhou" && payloads[1][0].decision === "allow_once" && payloads[2][0].selectedId === first.slice(4),
    `resume payloads ${JSON.stringify(payloads)}`);
  for (const x of r.slice(1)) check(x.status === 200, `a resume answered HTTP ${x.status} ${JSON.stringify(x.response)}`);
  check(r.every((x) => x.body.forwardedProps.iacCode.runMode === "pipeline"), "a run left pipeline mode");
  const ends = r[3].events.filter((e) => e.type === "CUSTOM" && e.name === "iac-code.pipeline.v1").map((e) => e.value?.eventType);
  check(ends.at(-1) === "pipeline_completed", `last run's pipeline events ${JSON.stringify(ends)}`);
  check(terminal(r[3])?.outcome?.type === "success", `last run ${JSON.stringify(terminal(r[3]))}`);
  check(existsSync(`${CWD}/template-a.yaml`), "candidate A's template-a.yaml was not written after Allow");
  const open = await page.$$(".iac-interrupt button:not([disabled])");
  check(open.length === 0, "a card is still open at the end");
  await page.close();
});

scenario("stop: CopilotKit's stop button cancels the execution (cancel extension)", async () => {
  const { page, threadId } = await openPage();
  await send(page, `Describe a VPC template. [[script=long]] [[pace=0.25]] [[cwd=${CWD}]]`);
  await waitAssistant(page, "Line 008");
  check(await running(page), "the send button is not a stop button while the run streams");
  await shot(page, "stop-before");
  await page.click('[data-testid="copilot-send-button"]');
  await waitIdle(page);
  const at = (await assistantText(page)).length;
  await new Promise((r) => setTimeout(r, 2000));
  await shot(page, "stop-after");
  const after = (await assistantText(page)).length;
  check(after === at, `the answer kept growing after Stop (${at} -> ${after})`);
  check(!(await assistantText(page)).includes("Line 240"), "the whole answer arrived: nothing was stopped");
  const cancels = captured().filter((x) => x.path.includes("/cancel") && x.body?.threadId === threadId);
  check(cancels.length === 1, `the runtime sent ${cancels.length} cancel requests, expected 1`);
  check(cancels[0].status === 200 && cancels[0].response?.status === "cancelled", `cancel answered ${cancels[0].status} ${JSON.stringify(cancels[0].response)}`);
  const r = await until("the stopped run's record", () => runs(threadId)[0]?.events && runs(threadId)[0]);
  const end = terminal(r);
  check(end?.type === "RUN_ERROR" && end.code === "CANCELLED", `the run ended with ${JSON.stringify(end)}`);
  const stopNote = await page.$eval("[role=alert]", (e) => `${e.className}: ${e.textContent}`).catch(() => "nothing");
  check(!stopNote.startsWith("iac-error"), `the page shows the user's Stop as a failure: ${stopNote}`);
  note(`stop: the page shows ${JSON.stringify(stopNote)}; the page's stop → POST /api/copilotkit/agent/default/stop/{thread} → agent.abortRun() → ` +
    `POST ${cancels[0].path} → ${JSON.stringify(cancels[0].response)}; the stream ended with RUN_ERROR ${end.code}`);
  // the thread takes the next turn
  await send(page, `Describe a VPC template. [[cwd=${CWD}]]`);
  await waitAssistant(page, LLM_TEXT);
  await waitIdle(page);
  await shot(page, "stop-next-turn");
  await page.close();
});

scenario("reload: a reloaded page finds the waiting approval (thread lookup + subscribe) and answers it", async () => {
  const target = `${CWD}/hello.txt`;
  rmSync(target, { force: true });
  const { page, threadId } = await openPage();
  await send(page, `Please write hello.txt in the workspace. [[cwd=${CWD}]]`);
  await waitCard(page, "permission");
  const before = captured().length;
  await load(page, () => page.reload({ waitUntil: "load" }));
  await waitCard(page, "permission");
  await showCard(page, "permission");
  await shot(page, "reload-card-again");
  const after = captured().slice(before);
  const lookup = after.find((x) => x.method === "GET" && x.path.startsWith(`/extensions/iac-code/v1/threads/${threadId}`));
  const sub = after.find((x) => x.path.endsWith("/subscribe"));
  check(lookup?.status === 200 && lookup.response?.state === "waiting", `thread lookup ${JSON.stringify(lookup?.response)}`);
  check(sub?.status === 200, `subscribe answered ${sub?.status}`);
  check(terminal(sub)?.outcome?.type === "interrupt", `the join ended with ${JSON.stringify(terminal(sub))}`);
  await choose(page, "permission", "allow_once");
  await waitAssistant(page, LLM_AFTER_TOOL);
  await waitIdle(page);
  await shot(page, "reload-answered");
  check(existsSync(target), "hello.txt was not written after the reloaded page's Allow");
  // a second reload, the thread idle: the conversation comes from the runtime's memory (its runner)
  await load(page, () => page.reload({ waitUntil: "load" }));
  await waitAssistant(page, LLM_AFTER_TOOL);
  await shot(page, "reload-finished-conversation");
  const r = runs(threadId);
  check(r.length === 2 && r[1].status === 200, `runs after the reload: ${r.map((x) => x.status)}`);
  await page.close();
});

scenario("misconfigured runtime: a resume with CopilotKit's own runId is refused, and the page says so in the user's language", async () => {
  const { page, threadId } = await openPage("", MISCONFIGURED_URL, "zh-CN");
  await send(page, `Please write hello.txt in the workspace. [[cwd=${CWD}]]`);
  await waitCard(page, "permission");
  await choose(page, "permission", "allow_once");
  const r = await until("the refused resume", () => runs(threadId).length === 2 && runs(threadId)[1].status && runs(threadId));
  check(r[1].status === 409 && r[1].response?.error?.code === "RUN_ID_CONFLICT", `the reused runId answered ${r[1].status} ${JSON.stringify(r[1].response)}`);
  check(r[1].body.runId === r[0].body.runId, "the misconfigured runtime did not reuse the runId");
  const shown = await until("the page's error", () => page.$eval('.iac-error[data-code="RUN_ID_CONFLICT"]', (e) => e.textContent).catch(() => null));
  await shot(page, "misconfigured-refused");
  check(shown.includes(r[1].response.error.message), `the page shows ${JSON.stringify(shown)}, not the adapter's message`);
  check(/[\u4e00-\u9fff]/.test(shown), `the message is not in the page's language (zh-CN): ${JSON.stringify(shown)}`);
  note(`misconfigured runtime (page language zh-CN): resume with the interrupted run's runId → HTTP 409 ${JSON.stringify(r[1].response)}; the page shows ${JSON.stringify(shown)}`);
  await page.close();
});

// What a misconfigured page makes CopilotKit send, posted to the runtime as CopilotKit's client
// posts it: the error the page then gets (RUN_ERROR through the runtime) names what to change.
scenario("misconfigured page: frontend tools and a page-chosen cwd and another forwardedProps key are refused by name", async () => {
  const post = async (patch) => {
    const threadId = `ck-page-${randomUUID()}`;
    const body = { threadId, runId: randomUUID(), state: {}, context: [], tools: [],
      messages: [{ id: randomUUID(), role: "user", content: "Describe a VPC template." }],
      forwardedProps: { iacCode: { preferredLanguage: "en" } }, ...patch };
    const resp = await fetch(`${RUNTIME_URL}/api/copilotkit/agent/default/run`, {
      method: "POST", headers: { "Content-Type": "application/json", Accept: "text/event-stream" }, body: JSON.stringify(body) });
    const text = await resp.text();
    const events = text.split("\n").filter((l) => l.startsWith("data:")).map((l) => safeJson(l.slice(5).trim()));
    return { status: resp.status, error: events.find((e) => e?.type === "RUN_ERROR"), adapter: runs(threadId)[0] };
  };
  const tool = { name: "confirm", description: "a frontend tool", parameters: { type: "object", properties: {} } };
  const cases = [
    ["tools", { tools: [tool] }, /tools/],
    ["iacCode.cwd", { forwardedProps: { iacCode: { cwd: "/etc" } } }, /forwardedProps\.iacCode\.cwd is set by the CopilotKit runtime/],
    // Only iacCode (the reference's rule): the adapter names the key and where frameworks put it.
    ["another forwardedProps key", { forwardedProps: { iacCode: { preferredLanguage: "en" }, other: 1 } }, /forwardedProps` may hold only `iacCode`; got `other`.*CopilotKit/],
  ];
  for (const [what, patch, expect] of cases) {
    const r = await post(patch);
    check(r.error, `${what}: no RUN_ERROR (HTTP ${r.status})`);
    check(expect.test(r.error.message), `${what}: the error does not name it: ${JSON.stringify(r.error.message)}`);
    note(`misconfigured page, ${what}: runtime → adapter ${r.adapter ? `HTTP ${r.adapter.status} ${JSON.stringify(r.adapter.response)}` : "(not sent)"}; ` +
      `the page gets RUN_ERROR ${JSON.stringify(r.error.message).slice(0, 300)}`);
  }
});

// AG-UI's rule and CopilotKit's deviation, reproduced without a browser: what CopilotKit's
// useInterrupt makes a runtime with a plain HttpAgent send (the interrupted run's runId again).
scenario("repro: a resume that reuses the interrupted run's runId is refused (409 RUN_ID_CONFLICT)", async () => {
  const require = createRequire(`${env("CK_DIR")}/package.json`);
  const { HttpAgent } = require("@ag-ui/client");
  const threadId = `ck-repro-${randomUUID()}`;
  const iacCode = { schemaVersion: 1, rosInvocationId: `inv-${randomUUID()}`, cwd: CWD, userId: "copilotkit-test-user" };
  const agent = new HttpAgent({ url: `${ADAPTER_URL}/`, threadId });
  agent.messages = [{ id: randomUUID(), role: "user", content: `Please write hello.txt [[cwd=${CWD}]]` }];
  const runId = randomUUID();
  await agent.runAgent({ runId, forwardedProps: { iacCode } });
  const it = agent.pendingInterrupts[0];
  check(it, "no interrupt");
  const resume = [{ interruptId: it.id, status: "resolved", payload: { decision: "deny" } }];
  const out = {};
  for (const lang of ["en", "zh-CN"]) {
    const resp = await fetch(`${ADAPTER_URL}/`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream", "Accept-Language": lang },
      body: JSON.stringify({ threadId, runId, state: {}, messages: agent.messages, tools: [], context: [], forwardedProps: { iacCode }, resume }),
    });
    out[lang] = { status: resp.status, body: await resp.json() };
  }
  check(out.en.status === 409 && out.en.body.error?.code === "RUN_ID_CONFLICT", `reused runId answered ${JSON.stringify(out.en)}`);
  note(`repro: resume with the interrupted run's runId → HTTP 409 ${JSON.stringify(out.en.body)}; zh: ${JSON.stringify(out["zh-CN"].body)}`);
  // the same answer with a fresh runId (what the shipped runtime sends) goes through
  await agent.runAgent({ forwardedProps: { iacCode }, resume });
  check(agent.pendingInterrupts.length === 0, "the resume with a fresh runId did not end the wait");
});

// ---- findings: what CopilotKit sent -------------------------------------------------------------
function findings() {
  const all = captured();
  const posts = all.filter((x) => x.method === "POST" && x.path === "/");
  const keys = new Set(posts.flatMap((x) => Object.keys(x.body?.forwardedProps || {})));
  const iacKeys = new Set(posts.flatMap((x) => Object.keys(x.body?.forwardedProps?.iacCode || {})));
  const tools = new Set(posts.map((x) => JSON.stringify(x.body?.tools)));
  const context = new Set(posts.map((x) => JSON.stringify(x.body?.context)));
  const std = new Set(["host", "content-type", "accept", "content-length", "connection", "user-agent", "accept-encoding", "accept-language", "sec-fetch-mode"]);
  const headers = new Set(posts.flatMap((x) => Object.keys(x.headers).filter((h) => !std.has(h))));
  const ua = new Set(posts.map((x) => x.headers["user-agent"]));
  const top = new Set(posts.flatMap((x) => Object.keys(x.body || {})));
  note(`runtime → adapter, ${posts.length} POST /: body keys ${[...top]}; forwardedProps keys ${[...keys]}; iacCode keys ${[...iacKeys]}; ` +
    `tools ${[...tools]}; context ${[...context]}; extra headers ${[...headers]}; user-agent ${[...ua]}`);
  const other = all.filter((x) => !(x.method === "POST" && x.path === "/")).map((x) => `${x.method} ${x.path.replace(/[0-9a-f-]{36}/g, "{id}")}`);
  note(`runtime → adapter, other routes: ${[...new Set(other)]}`);
  if (existsSync(BROWSER_LOG)) {
    const b = readFileSync(BROWSER_LOG, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
    const reqs = b.filter((x) => x.method);
    const routes = new Set(reqs.map((x) => `${x.method} ${x.url.replace(/\?.*/, "").replace(/ck-[0-9a-f-]{36}/g, "{thread}")}`));
    note(`browser → runtime routes: ${[...routes]}`);
    const runBodies = reqs.filter((x) => x.url.endsWith("/run") && x.body);
    const fp = new Set(runBodies.flatMap((x) => Object.keys(x.body.forwardedProps || {})));
    const bkeys = new Set(runBodies.flatMap((x) => Object.keys(x.body)));
    const bheaders = new Set(runBodies.flatMap((x) => Object.keys(x.headers)));
    note(`browser → runtime run bodies: keys ${[...bkeys]}; forwardedProps keys ${[...fp]}; tools ${[...new Set(runBodies.map((x) => JSON.stringify(x.body.tools)))]}; headers ${[...bheaders]}`);
    // each resume's runId against the request before it on the same thread (a run, or the connect of a reloaded page)
    const sent = reqs.filter((x) => /\/(run|connect)$/.test(x.url) && x.body?.threadId);
    const same = { run: 0, connect: 0, other: 0 };
    sent.forEach((x, i) => {
      if (!x.body.resume) return;
      const prev = sent.slice(0, i).filter((y) => y.body.threadId === x.body.threadId).pop();
      if (prev?.body.runId === x.body.runId) same[prev.url.endsWith("/run") ? "run" : "connect"]++;
      else same.other++;
    });
    note(`browser → runtime resumes: runId = the interrupted run's in ${same.run}, = the reloaded page's connect request's in ${same.connect}, ` +
      `another in ${same.other}; messages of a resume: ${sent.find((x) => x.body.resume)?.body.messages.map((m) => m.role)}`);
    const got = new Set(b.filter((x) => x.types).flatMap((x) => x.types.filter((t) => String(t).startsWith("CUSTOM:"))));
    note(`CUSTOM events the browser received from the runtime: ${[...got]}`);
    const connects = b.filter((x) => x.url?.endsWith("/connect"));
    if (connects.length) note(`browser → runtime connect (${connects.length}): body keys ${Object.keys(connects[0].body || {})}`);
  }
  const customNames = new Set(posts.flatMap((x) => (x.events || []).filter((e) => e.type === "CUSTOM").map((e) => e.name)));
  note(`CUSTOM events the adapter sent through CopilotKit: ${[...customNames]}`);
}

// ---- main --------------------------------------------------------------------------------------
let failed = 0;
writeFileSync(BROWSER_LOG, "");
browser = await puppeteer.launch({
  executablePath: CHROMIUM,
  headless: true,
  userDataDir: `${WORK}/chromium-profile`,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
try {
  for (const s of SCENARIOS) {
    if (FILTERS.length && !FILTERS.some((f) => s.name.includes(f))) continue;
    const started = Date.now();
    try {
      await s.fn();
      log(`PASS ${s.name} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
    } catch (e) {
      failed++;
      log(`FAIL ${s.name}: ${e.message}`);
      for (const p of await browser.pages()) {
        if (p.consoleLines?.length) console.log(p.consoleLines.slice(-15).map((l) => `    | ${l}`).join("\n"));
        await p.screenshot({ path: `${SHOTS}/failed-${s.name.split(":")[0]}.png` }).catch(() => {});
        await p.close().catch(() => {});
      }
    }
  }
  findings();
  console.log("findings:");
  for (const f of FINDINGS) console.log(`  - ${f}`);
} finally {
  await browser.close().catch(() => {});
}
log(`${failed ? `${failed} FAILED` : "all passed"}; scenarios took ${((Date.now() - T0) / 1000).toFixed(1)} s`);
process.exit(failed ? 1 : 0);
