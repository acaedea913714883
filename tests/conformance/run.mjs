#!/usr/bin/env node
// AG-UI conformance suite for iac-code-agui, driven by the official @ag-ui/client 1.0.0 HttpAgent.
//
// Usually started by run.sh, which builds and starts the fake A2A kernel and the adapter:
//
//   AGUI_URL=http://127.0.0.1:PORT AGUI_CWD=/allowed/workspace node run.mjs [name-filter ...]
//
// Every run goes through HttpAgent.runAgent, i.e. through the client's own pipeline
// (enforceEvents -> transformChunks -> verifyEvents -> apply). On top of that the harness
//   * tees the very HTTP response the client parses and validates every raw SSE `data:` frame with
//     @ag-ui/core's zod EventSchemas (before the client strips anything),
//   * counts `: heartbeat` comments on that same connection,
//   * fails on any rejection of runAgent, any onRunFailed, any "[ag-ui]" deviation warning the
//     client prints (it strips unknown material or translates retired shapes with a warning
//     instead of failing), any event the client dropped, a stream that does not start with
//     RUN_STARTED / end with exactly one RUN_FINISHED or RUN_ERROR (verifyEvents does not check the
//     end of a stream), and a run that takes more than 20 s.
// One line per scenario (PASS / FAIL / SKIP + reason); exit 1 on any failure.

import http from "node:http";
import { randomUUID } from "node:crypto";
import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";
import { EventType } from "@ag-ui/core";
import { EventSchemas } from "@ag-ui/core/schemas";

const BASE = (process.env.AGUI_URL || "").replace(/\/+$/, "");
const CWD = process.env.AGUI_CWD || "";
const HEARTBEAT_INTERVAL_S = Number(process.env.AGUI_HEARTBEAT_INTERVAL || "0.2");
const RUN_TIMEOUT_MS = 20_000;
const SUITE_TIMEOUT_MS = 115_000;
const FILTERS = process.argv.slice(2);

if (!BASE || !CWD) {
  console.error("usage: AGUI_URL=http://127.0.0.1:PORT AGUI_CWD=/workspace node run.mjs  (or bash run.sh)");
  process.exit(2);
}

const suiteTimer = setTimeout(() => {
  console.log(`FAIL  suite: did not finish within ${SUITE_TIMEOUT_MS / 1000} s`);
  process.exit(1);
}, SUITE_TIMEOUT_MS);

// ---- console capture ------------------------------------------------------------------------
// The client reports deviations (stripped unknown fields, dropped unknown events, translated
// retired shapes, newer protocol versions) with console.warn and failed runs with console.error.
// While a run is active they are recorded on it instead of being printed.
let sink = null;
const origWarn = console.warn.bind(console);
const origError = console.error.bind(console);
const fmt = (args) => args.map((a) => (a instanceof Error ? a.message : typeof a === "string" ? a : safeJson(a))).join(" ");
console.warn = (...args) => (sink ? sink.warnings.push(fmt(args)) : origWarn(...args));
console.error = (...args) => (sink ? sink.consoleErrors.push(fmt(args)) : origError(...args));

function safeJson(v) {
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
}

const short = (s, n = 300) => {
  const flat = String(s).replace(/\s+/g, " ");
  return flat.length > n ? flat.slice(0, n) + "…" : flat;
};

// ---- raw SSE reader (the tee'd copy of the response the client parses) ----------------------

function newRawState(rec) {
  return { rec, buf: "", data: [], fields: [] };
}

function feedLines(st, text, final) {
  st.buf += text;
  // SSE line terminators: CRLF, LF, CR. Hold back a trailing CR (its LF may follow).
  const parts = st.buf.split(/\r\n|\n|\r(?!$)/);
  st.buf = parts.pop();
  if (final && st.buf) {
    parts.push(st.buf.replace(/\r$/, ""));
    st.buf = "";
  }
  for (const line of parts) onLine(st, line);
  if (final && st.data.length) st.rec.frameErrors.push("stream ended inside an unterminated SSE frame");
}

function onLine(st, line) {
  const rec = st.rec;
  if (line === "") {
    if (st.data.length) {
      const payload = st.data.join("\n");
      st.data = [];
      let ev;
      try {
        ev = JSON.parse(payload);
      } catch (e) {
        rec.frameErrors.push(`data frame is not JSON: ${short(payload, 120)}`);
        return;
      }
      rec.raw.push(ev);
      rec.rawTimes.push(Date.now());
      // Every data frame carries its cursor (resumable streams), never twice in a stream.
      rec.ids ??= new Set();
      if (!st.id) rec.frameErrors.push(`data frame without an id: ${ev?.type}`);
      else if (rec.ids.has(st.id)) rec.frameErrors.push(`id repeated: ${st.id}`);
      else rec.ids.add(st.id);
    }
    st.id = null;
    return;
  }
  if (line.startsWith(":")) {
    const comment = line.slice(1).trim();
    rec.comments.push(comment);
    if (comment === "heartbeat") {
      rec.heartbeats += 1;
      rec.heartbeatAfter.push(rec.raw.length);
    }
    return;
  }
  const i = line.indexOf(":");
  const field = i < 0 ? line : line.slice(0, i);
  let value = i < 0 ? "" : line.slice(i + 1);
  if (value.startsWith(" ")) value = value.slice(1);
  if (field === "data") st.data.push(value);
  else if (field === "id") st.id = value;
  else rec.otherFields.push(field);
}

async function consumeRaw(stream, rec) {
  const st = newRawState(rec);
  const decoder = new TextDecoder("utf-8");
  const reader = stream.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      feedLines(st, decoder.decode(value, { stream: true }), false);
    }
    feedLines(st, decoder.decode(), true);
  } catch (e) {
    if (!rec.timedOut) rec.rawReadError = e?.message || String(e);
  }
}

/** A fetch for HttpAgent that hands the client one branch of the body and reads the other. */
function teeFetch(rec) {
  return async (url, init) => {
    rec.request = JSON.parse(init.body);
    const resp = await fetch(url, init);
    rec.httpStatus = resp.status;
    rec.contentType = resp.headers.get("content-type") || "";
    if (!resp.body) {
      rec.rawDone = Promise.resolve();
      return resp;
    }
    const [mine, theirs] = resp.body.tee();
    rec.rawDone = consumeRaw(mine, rec);
    return new Response(theirs, { status: resp.status, statusText: resp.statusText, headers: resp.headers });
  };
}

// ---- one run through HttpAgent.runAgent --------------------------------------------------------

function newAgent(threadId, url = BASE + "/") {
  return new HttpAgent({ url, threadId });
}

function addUser(agent, text) {
  agent.addMessage({ id: `user-${randomUUID()}`, role: "user", content: text });
}

function forwardedProps(rosInvocationId, extra = {}) {
  return { iacCode: { schemaVersion: 1, rosInvocationId, cwd: CWD, ...extra } };
}

/** What is recorded of one raw SSE stream: frames, their times, heartbeats and anything odd. */
const rawRecord = () => ({
  raw: [],
  rawTimes: [],
  heartbeats: 0,
  heartbeatAfter: [],
  comments: [],
  otherFields: [],
  frameErrors: [],
});

/**
 * Runs the agent once and returns a record of everything observed. `rec.problems` lists every
 * protocol problem found (empty = the run was conformant); scenario checks add to it.
 */
async function run(agent, params, label = "") {
  const rec = {
    label,
    runId: params.runId || `run-${randomUUID()}`,
    ...rawRecord(),
    warnings: [],
    consoleErrors: [],
    events: [],
    runErrorEvents: [],
    finished: null,
    runFailed: null,
    thrown: null,
    timedOut: false,
    text: "",
    problems: [],
    rawDone: Promise.resolve(),
  };
  const controller = new AbortController();
  const timer = setTimeout(() => {
    rec.timedOut = true;
    controller.abort();
  }, RUN_TIMEOUT_MS);
  const oldFetch = agent.fetch;
  agent.fetch = teeFetch(rec);
  const subscriber = {
    onEvent: ({ event }) => {
      rec.events.push(event);
    },
    onRunFailed: ({ error }) => {
      rec.runFailed = error;
    },
    onRunErrorEvent: ({ event }) => {
      rec.runErrorEvents.push(event);
    },
    onRunFinishedEvent: (p) => {
      rec.finished = { outcome: p.outcome, interrupts: p.interrupts, pendingToolCallIds: p.pendingToolCallIds };
    },
    onTextMessageContentEvent: ({ event }) => {
      rec.text += event.delta;
    },
  };
  sink = rec;
  const started = Date.now();
  try {
    rec.result = await agent.runAgent({ ...params, runId: rec.runId, abortController: controller }, subscriber);
  } catch (e) {
    rec.thrown = e;
  } finally {
    clearTimeout(timer);
    await Promise.race([rec.rawDone, sleep(2000)]);
    sink = null;
    agent.fetch = oldFetch;
  }
  rec.ms = Date.now() - started;
  protocolChecks(rec, agent);
  return rec;
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/** An error as one line; zod errors as `path: message` pairs. */
const errMsg = (e) => {
  if (Array.isArray(e?.issues)) return "schema: " + e.issues.map((x) => `${(x.path || []).join(".") || "(root)"}: ${x.message}`).join("; ");
  return e instanceof Error ? e.message : String(e);
};

/** What every run must satisfy, whatever its scenario. */
function protocolChecks(rec, agent) {
  const p = rec.problems;
  if (rec.timedOut) p.push(`run did not end within ${RUN_TIMEOUT_MS / 1000} s`);
  if (rec.thrown) p.push(`runAgent rejected: ${short(errMsg(rec.thrown))}`);
  if (rec.runFailed && (!rec.thrown || errMsg(rec.runFailed) !== errMsg(rec.thrown)))
    p.push(`onRunFailed: ${short(errMsg(rec.runFailed))}`);
  if (rec.httpStatus !== undefined && rec.httpStatus !== 200) p.push(`HTTP ${rec.httpStatus}`);
  if (rec.httpStatus === 200 && !rec.contentType.startsWith("text/event-stream"))
    p.push(`content-type is '${rec.contentType}', not text/event-stream`);
  if (rec.rawReadError) p.push(`reading the stream failed: ${rec.rawReadError}`);
  for (const f of rec.frameErrors) p.push(`SSE framing: ${f}`);
  if (rec.otherFields.length) p.push(`unexpected SSE fields: ${[...new Set(rec.otherFields)].join(", ")}`);
  for (const c of rec.comments) if (c !== "heartbeat") p.push(`unexpected SSE comment ': ${short(c, 60)}'`);
  for (const w of rec.warnings) if (w.startsWith("[ag-ui]")) p.push(`client deviation warning: ${short(w)}`);

  // Every raw frame against the official zod schemas.
  rec.raw.forEach((ev, i) => {
    const r = EventSchemas.safeParse(ev);
    if (!r.success) {
      const issues = r.error.issues.map((x) => `${x.path.join(".") || "(root)"}: ${x.message}`).join("; ");
      p.push(`event #${i} ${ev?.type ?? "?"} fails EventSchemas: ${short(issues, 200)}`);
    }
  });

  if (!rec.timedOut && !rec.thrown && rec.httpStatus === 200) {
    // The client must have delivered every frame (nothing dropped by enforcement).
    const rawTypes = rec.raw.map((e) => e.type).join(",");
    const gotTypes = rec.events.map((e) => e.type).join(",");
    if (rawTypes !== gotTypes) p.push(`client delivered [${short(gotTypes, 150)}] for wire [${short(rawTypes, 150)}]`);
  }

  // Run framing: RUN_STARTED first, exactly one terminal event, and it is last.
  if (rec.httpStatus === 200 && !rec.timedOut) {
    const types = rec.raw.map((e) => e.type);
    const first = rec.raw[0];
    if (!first) p.push("no events");
    else if (first.type !== EventType.RUN_STARTED) p.push(`first event is ${first.type}, not RUN_STARTED`);
    else {
      if (first.threadId !== agent.threadId) p.push(`RUN_STARTED.threadId ${first.threadId} != ${agent.threadId}`);
      if (first.runId !== rec.runId) p.push(`RUN_STARTED.runId ${first.runId} != ${rec.runId}`);
    }
    const terminals = types.filter((t) => t === EventType.RUN_FINISHED || t === EventType.RUN_ERROR);
    if (terminals.length !== 1) p.push(`${terminals.length} terminal events (want exactly 1)`);
    const last = rec.raw[rec.raw.length - 1];
    if (last && last.type !== EventType.RUN_FINISHED && last.type !== EventType.RUN_ERROR)
      p.push(`stream ended after ${last.type} without RUN_FINISHED/RUN_ERROR`);
    if (last?.type === EventType.RUN_FINISHED && (last.threadId !== agent.threadId || last.runId !== rec.runId))
      p.push(`RUN_FINISHED ids ${last.threadId}/${last.runId} do not match the run`);
    const afterEnd = rec.heartbeatAfter.filter((n) => n > 0 && n >= rec.raw.length && terminals.length);
    if (afterEnd.length) p.push(`${afterEnd.length} heartbeat(s) after the terminal event`);
  }
  return rec;
}

// ---- assertions used by scenarios ----------------------------------------------------------

const last = (rec) => rec.raw[rec.raw.length - 1];
const ofType = (rec, t) => rec.raw.filter((e) => e.type === t);
const customs = (rec, name) => rec.raw.filter((e) => e.type === EventType.CUSTOM && e.name === name);

function expect(rec, cond, message) {
  if (!cond) rec.problems.push(message);
  return cond;
}

function expectOutcome(rec, type) {
  const l = last(rec);
  expect(
    rec,
    l?.type === EventType.RUN_FINISHED && l.outcome?.type === type,
    `want RUN_FINISHED outcome ${type}, got ${l ? short(safeJson(stripTs(l)), 250) : "nothing"}`,
  );
  expect(rec, rec.finished?.outcome === type, `client saw outcome ${rec.finished?.outcome ?? "none"}, want ${type}`);
}

function expectSuccess(rec) {
  expectOutcome(rec, "success");
  expect(rec, rec.runErrorEvents.length === 0, `unexpected RUN_ERROR: ${safeJson(rec.runErrorEvents.map(stripTs))}`);
}

const expectInterrupt = (rec) => expectOutcome(rec, "interrupt");

function expectRunError(rec, code) {
  const l = last(rec);
  expect(
    rec,
    l?.type === EventType.RUN_ERROR && l.code === code,
    `want RUN_ERROR code ${code}, got ${l ? short(safeJson(stripTs(l)), 250) : "nothing"}`,
  );
  expect(rec, typeof l?.message === "string" && l.message.length > 0, "RUN_ERROR without a message");
  expect(
    rec,
    rec.runErrorEvents.length === 1 && rec.runErrorEvents[0].code === code,
    `client onRunErrorEvent saw ${safeJson(rec.runErrorEvents.map((e) => e.code))}, want ["${code}"]`,
  );
}

function stripTs(e) {
  const { timestamp, ...rest } = e || {};
  return rest;
}

function expectTypes(rec, types) {
  const seen = new Set(rec.raw.map((e) => e.type));
  const missing = types.filter((t) => !seen.has(t));
  expect(rec, missing.length === 0, `missing events: ${missing.join(", ")}`);
}

function expectSessionEvent(rec) {
  const s = customs(rec, "iac-code.session.v1")[0];
  expect(
    rec,
    s && typeof s.value?.executionId === "string" && s.value.threadId !== undefined,
    "no CUSTOM iac-code.session.v1 with an executionId",
  );
}

function noHeartbeatLeak(rec) {
  // Heartbeats are SSE comments: they must never reach the client's event model.
  expect(rec, rec.events.every((e) => e.type !== "heartbeat" && e.name !== "heartbeat"), "a heartbeat reached the event model");
}

// ---- scenario bodies -----------------------------------------------------------------------

const EXPECTED_NORMAL_TEXT = "Here is a VPC template outline: one VPC, two vSwitches. ";

/** A scenario gets a context and returns the runs it made (all must be problem-free) and notes. */
async function scNormal() {
  const agent = newAgent(`conf-normal-${randomUUID()}`);
  addUser(agent, "Create a VPC template");
  const r = await run(agent, { forwardedProps: forwardedProps("inv-normal-1") });
  expectSuccess(r);
  expectTypes(r, [EventType.TEXT_MESSAGE_START, EventType.TEXT_MESSAGE_CONTENT, EventType.TEXT_MESSAGE_END]);
  expect(r, r.text === EXPECTED_NORMAL_TEXT, `text ${JSON.stringify(r.text)} != ${JSON.stringify(EXPECTED_NORMAL_TEXT)}`);
  const assistant = agent.messages.filter((m) => m.role === "assistant").pop();
  expect(r, assistant?.content === EXPECTED_NORMAL_TEXT, "client state has no assistant message with the text");
  expectSessionEvent(r);
  expect(r, agent.pendingInterrupts.length === 0, "pendingInterrupts not empty after a success");
  return { runs: [r], notes: `${r.raw.length} events` };
}

async function scNormalSecondTurn() {
  // The client resends the whole conversation (user, assistant, user) on the next turn.
  const agent = newAgent(`conf-normal2-${randomUUID()}`);
  addUser(agent, "Create a VPC template");
  const r1 = await run(agent, { forwardedProps: forwardedProps("inv-normal2-1") });
  expectSuccess(r1);
  addUser(agent, "Add a security group");
  const r2 = await run(agent, { forwardedProps: forwardedProps("inv-normal2-2") });
  expectSuccess(r2);
  expect(r2, r2.text === EXPECTED_NORMAL_TEXT, `second-turn text ${JSON.stringify(r2.text)}`);
  const roles = r2.request?.messages?.map((m) => m.role).join(",");
  return { runs: [r1, r2], notes: `second request carried messages [${roles}]` };
}

/**
 * A fresh thread as real chat UIs start it: `agent.state = null`. HttpAgent 1.0 leaves null
 * optional fields out of the request, so the adapter sees no `state` at all (and must not refuse).
 */
async function scNullState() {
  const agent = newAgent(`conf-nullstate-${randomUUID()}`);
  agent.state = null;
  addUser(agent, "Create a VPC template");
  const r = await run(agent, { forwardedProps: forwardedProps("inv-nullstate-1") });
  expect(r, r.request && !("state" in r.request), `the client sent state=${safeJson(r.request?.state)}`);
  expect(r, r.request && Array.isArray(r.request.tools) && Array.isArray(r.request.context), "tools/context not sent as arrays");
  expectSuccess(r);
  expect(r, r.text === EXPECTED_NORMAL_TEXT, `text ${JSON.stringify(r.text)}`);
  return { runs: [r], notes: `request keys [${Object.keys(r.request || {}).join(",")}]` };
}

/** Runs `scenario:<name>` up to its interrupt and returns [agent, run, interrupt]. */
async function toInterrupt(name, inv) {
  const agent = newAgent(`conf-${name}-${randomUUID()}`);
  addUser(agent, `scenario:${name}`);
  const r = await run(agent, { forwardedProps: forwardedProps(inv) });
  expectInterrupt(r);
  expect(r, agent.pendingInterrupts.length === 1, `agent.pendingInterrupts has ${agent.pendingInterrupts.length} entries, want 1`);
  const i = agent.pendingInterrupts[0];
  if (i) {
    const wire = last(r)?.outcome?.interrupts?.[0];
    expect(r, wire && wire.id === i.id, "pendingInterrupts[0] is not the wire interrupt");
    expect(r, typeof i.id === "string" && i.id.length > 0, "interrupt without id");
    expect(r, i.responseSchema && typeof i.responseSchema === "object", "interrupt without responseSchema");
    expect(r, typeof i.message === "string" && i.message.length > 0, "interrupt without message");
    if (i.expiresAt !== undefined)
      expect(r, !Number.isNaN(Date.parse(i.expiresAt)) && Date.parse(i.expiresAt) > Date.now(), `bad expiresAt ${i.expiresAt}`);
  }
  return [agent, r, i];
}

async function scPermission() {
  const inv = "inv-perm-1";
  const [agent, r1, i] = await toInterrupt("permission", inv);
  if (!i) return { runs: [r1] };
  expect(r1, i.reason === "tool_call", `reason ${i.reason}, want tool_call`);
  const dec = i.responseSchema?.properties?.decision;
  expect(
    r1,
    Array.isArray(dec?.enum) && dec.enum.includes("allow_once") && dec.enum.includes("deny"),
    `responseSchema has no decision enum [allow_once, deny]: ${short(safeJson(i.responseSchema), 200)}`,
  );
  const started = ofType(r1, EventType.TOOL_CALL_START).map((e) => e.toolCallId);
  expect(r1, i.toolCallId && started.includes(i.toolCallId), `toolCallId ${i.toolCallId} not among TOOL_CALL_START ${started}`);
  const r2 = await run(agent, {
    forwardedProps: forwardedProps(inv),
    resume: [{ interruptId: i.id, status: "resolved", payload: { decision: "allow_once" } }],
  });
  expectSuccess(r2);
  const results = ofType(r2, EventType.TOOL_CALL_RESULT);
  expect(r2, results.some((e) => e.toolCallId === i.toolCallId), `no TOOL_CALL_RESULT for ${i.toolCallId}`);
  expect(r2, agent.pendingInterrupts.length === 0, "pendingInterrupts not cleared by the successful resume");
  return { runs: [r1, r2], notes: `interrupt ${i.id} (${i.reason}) → allow_once → ${results.length} TOOL_CALL_RESULT` };
}

async function scQuestion() {
  const inv = "inv-q-1";
  const [agent, r1, i] = await toInterrupt("question", inv);
  if (!i) return { runs: [r1] };
  const r2 = await run(agent, {
    forwardedProps: forwardedProps(inv),
    resume: [{ interruptId: i.id, status: "resolved", payload: { selectedId: "cn-beijing" } }],
  });
  expectSuccess(r2);
  expect(r2, r2.text.includes("Beijing"), `text ${JSON.stringify(r2.text)} does not contain "Beijing"`);
  return { runs: [r1, r2], notes: `reason ${i.reason}; resumed text ${JSON.stringify(r2.text)}` };
}

async function scSelection() {
  const inv = "inv-sel-1";
  const [agent, r1, i] = await toInterrupt("selection", inv);
  if (!i) return { runs: [r1] };
  const branches = i.responseSchema?.oneOf || [];
  expect(
    r1,
    branches.some((b) => b.properties?.selectedId?.const === "1"),
    `responseSchema does not offer selectedId "1": ${short(safeJson(i.responseSchema), 200)}`,
  );
  const r2 = await run(agent, {
    forwardedProps: forwardedProps(inv),
    resume: [{ interruptId: i.id, status: "resolved", payload: { selectedId: "1" } }],
  });
  expectSuccess(r2);
  expect(r2, r2.text.startsWith("Selected"), `text ${JSON.stringify(r2.text)}`);
  return { runs: [r1, r2], notes: `reason ${i.reason}; resumed text ${JSON.stringify(r2.text)}` };
}

async function scQuestionBadPayload() {
  // A payload outside the responseSchema: RUN_ERROR RESUME_PAYLOAD_INVALID, and the interrupt stays
  // answerable, so the client (which keeps pendingInterrupts after a RUN_ERROR) can retry.
  const inv = "inv-q-bad-1";
  const [agent, r1, i] = await toInterrupt("question", inv);
  if (!i) return { runs: [r1] };
  const r2 = await run(agent, {
    forwardedProps: forwardedProps(inv),
    resume: [{ interruptId: i.id, status: "resolved", payload: { selectedId: "mars-north-1" } }],
  });
  expectRunError(r2, "RESUME_PAYLOAD_INVALID");
  expect(r2, agent.pendingInterrupts.length === 1, "client dropped the pending interrupt after the RUN_ERROR");
  const r3 = await run(agent, {
    forwardedProps: forwardedProps(inv),
    resume: [{ interruptId: i.id, status: "resolved", payload: { selectedId: "cn-hangzhou" } }],
  });
  expectSuccess(r3);
  expect(r3, r3.text.includes("Hangzhou"), `retry text ${JSON.stringify(r3.text)}`);
  return { runs: [r1, r2, r3], notes: `bad payload → ${last(r2)?.code}; retry → ${JSON.stringify(r3.text)}` };
}

async function scPermissionCancelled() {
  const inv = "inv-perm-c-1";
  const [agent, r1, i] = await toInterrupt("permission", inv);
  if (!i) return { runs: [r1] };
  const r2 = await run(agent, { forwardedProps: forwardedProps(inv), resume: [{ interruptId: i.id, status: "cancelled" }] });
  expectSuccess(r2);
  expect(r2, r2.text.includes("OK, I did not write the file."), `text ${JSON.stringify(r2.text)}`);
  return { runs: [r1, r2], notes: `cancelled → deny → ${JSON.stringify(r2.text)}` };
}

async function scQuestionCancelled() {
  const inv = "inv-q-c-1";
  const [agent, r1, i] = await toInterrupt("question", inv);
  if (!i) return { runs: [r1] };
  const r2 = await run(agent, { forwardedProps: forwardedProps(inv), resume: [{ interruptId: i.id, status: "cancelled" }] });
  expectRunError(r2, "CANCELLED");
  const how = r2.thrown
    ? `runAgent threw (${errMsg(r2.thrown)})`
    : `runAgent resolved; surfaced only via onRunErrorEvent (code ${r2.runErrorEvents[0]?.code})`;
  return { runs: [r1, r2], notes: how };
}

async function scFail() {
  const agent = newAgent(`conf-fail-${randomUUID()}`);
  addUser(agent, "scenario:fail");
  const r = await run(agent, { forwardedProps: forwardedProps("inv-fail-1") });
  expectRunError(r, "A2A_EXECUTION_FAILED");
  const how = r.thrown ? "runAgent threw" : "runAgent resolved, onRunErrorEvent fired, no protocol error";
  return { runs: [r], notes: `${how}: ${JSON.stringify(last(r)?.message ?? "")}` };
}

async function scSilent() {
  const agent = newAgent(`conf-silent-${randomUUID()}`);
  addUser(agent, "scenario:silent");
  const r = await run(agent, { forwardedProps: forwardedProps("inv-silent-1") });
  expectSuccess(r);
  expect(r, r.text === "Thinking done.", `text ${JSON.stringify(r.text)}`);
  noHeartbeatLeak(r);
  // The kernel is silent for 700 ms (--heartbeat-interval 0.2): heartbeats must arrive on the very
  // connection the client parsed, and none of them may become an event.
  const min = HEARTBEAT_INTERVAL_S < 0.7 ? 1 : 0;
  expect(r, r.heartbeats >= min, `${r.heartbeats} heartbeats on the client's connection, want >= ${min}`);

  // And once more with a plain fetch, outside the client, counting ': heartbeat' comments.
  const raw = await rawRun(`conf-silent-raw-${randomUUID()}`, "scenario:silent", "inv-silent-raw-1");
  expect(r, raw.heartbeats >= min, `raw fetch saw ${raw.heartbeats} heartbeats, want >= ${min}`);
  for (const p of raw.problems) r.problems.push(`raw fetch: ${p}`);
  return {
    runs: [r],
    notes: `${r.heartbeats} heartbeats on the client's connection, ${raw.heartbeats} on a raw fetch; client saw ${r.events.length} events`,
  };
}

/** A POST / with fetch only: the same kind of request the client sends, read as raw SSE. */
async function rawRun(threadId, text, inv) {
  const rec = { ...rawRecord(), problems: [] };
  const body = {
    threadId,
    runId: `run-${randomUUID()}`,
    state: {},
    messages: [{ id: `user-${randomUUID()}`, role: "user", content: text }],
    tools: [],
    context: [],
    forwardedProps: forwardedProps(inv),
  };
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), RUN_TIMEOUT_MS);
  try {
    const resp = await fetch(BASE + "/", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (resp.status !== 200) rec.problems.push(`HTTP ${resp.status}: ${short(await resp.text(), 200)}`);
    else await consumeRaw(resp.body, rec);
  } catch (e) {
    rec.problems.push(`fetch failed: ${errMsg(e)}`);
  } finally {
    clearTimeout(timer);
  }
  for (const f of rec.frameErrors) rec.problems.push(f);
  rec.raw.forEach((ev, i) => {
    if (!EventSchemas.safeParse(ev).success) rec.problems.push(`event #${i} ${ev?.type} fails EventSchemas`);
  });
  const l = rec.raw[rec.raw.length - 1];
  if (!(l?.type === EventType.RUN_FINISHED && l.outcome?.type === "success")) rec.problems.push(`raw run ended with ${l?.type}`);
  return rec;
}

async function scReasoning() {
  const agent = newAgent(`conf-reasoning-${randomUUID()}`);
  addUser(agent, "scenario:reasoning");
  const r = await run(agent, { forwardedProps: forwardedProps("inv-reasoning-1") });
  expectSuccess(r);
  expectTypes(r, [
    EventType.REASONING_START,
    EventType.REASONING_MESSAGE_START,
    EventType.REASONING_MESSAGE_CONTENT,
    EventType.REASONING_MESSAGE_END,
    EventType.REASONING_END,
  ]);
  const thinking = ofType(r, EventType.REASONING_MESSAGE_CONTENT).map((e) => e.delta).join("");
  expect(r, thinking === "Let me think. Done.", `reasoning text ${JSON.stringify(thinking)}`);
  expect(r, r.text === "Answer.", `text ${JSON.stringify(r.text)}`);
  const usage = last(r)?.usage;
  expect(r, Array.isArray(usage) && usage.some((u) => u.totalTokens === 5), `RUN_FINISHED.usage ${safeJson(usage)}`);
  return { runs: [r], notes: `${r.raw.length} events, usage ${safeJson(usage)}` };
}

async function scTools() {
  const agent = newAgent(`conf-tools-${randomUUID()}`);
  addUser(agent, "scenario:tools-artifact");
  const r = await run(agent, { forwardedProps: forwardedProps("inv-tools-1") });
  expectSuccess(r);
  expectTypes(r, [EventType.TOOL_CALL_START, EventType.TOOL_CALL_ARGS, EventType.TOOL_CALL_END, EventType.TOOL_CALL_RESULT]);
  const start = ofType(r, EventType.TOOL_CALL_START).find((e) => e.toolCallId === "call_9");
  expect(r, start?.toolCallName === "write_file", `TOOL_CALL_START for call_9: ${safeJson(start)}`);
  const args = ofType(r, EventType.TOOL_CALL_ARGS).filter((e) => e.toolCallId === "call_9").map((e) => e.delta).join("");
  let parsed;
  try {
    parsed = JSON.parse(args);
  } catch {
    parsed = undefined;
  }
  expect(r, parsed?.path === "/w/a.txt", `tool args ${JSON.stringify(args)}`);
  expect(r, ofType(r, EventType.TOOL_CALL_RESULT).some((e) => e.toolCallId === "call_9"), "no TOOL_CALL_RESULT for call_9");
  expect(r, customs(r, "iac-code.artifact.v1").length >= 1, "no CUSTOM iac-code.artifact.v1");
  expect(r, r.text.includes("Writing.") && r.text.includes("Done."), `text ${JSON.stringify(r.text)}`);
  expect(
    r,
    (r.finished?.pendingToolCallIds ?? []).length === 0,
    `client thinks tool calls are left for the app: ${safeJson(r.finished?.pendingToolCallIds)}`,
  );
  const names = [...new Set(ofType(r, EventType.CUSTOM).map((e) => e.name))];
  return { runs: [r], notes: `customs ${names.join(", ")}` };
}

// 8. Pipeline flow (the fake kernel's `scenario:pipeline`, a selling-style pipeline whose deploy
// step needs permission). It started as a placeholder while that scenario was being written; set
// AGUI_CONFORMANCE_PIPELINE=0 to skip it against a kernel without one.
function pipelineEnabled() {
  return process.env.AGUI_CONFORMANCE_PIPELINE !== "0";
}

/** A payload a responseSchema admits: allow_once for permissions, else the first option. */
function autoPayload(interrupt) {
  return payloadFor(interrupt.responseSchema || {}, interrupt.metadata?.options || []);
}

function payloadFor(schema, options) {
  const branches = schema.oneOf || schema.anyOf;
  if (Array.isArray(branches) && branches.length) return payloadFor(branches[0], options);
  const payload = {};
  for (const [key, s] of Object.entries(schema.properties || {})) {
    if (!(schema.required || []).includes(key)) continue;
    if (s.const !== undefined) payload[key] = s.const;
    else if (Array.isArray(s.enum) && s.enum.length) payload[key] = s.enum.includes("allow_once") ? "allow_once" : s.enum[0];
    else if (options.length && (s.type === "string" || !s.type)) payload[key] = String(options[0].id);
    else if (s.type === "boolean") payload[key] = true;
    else if (s.type === "integer" || s.type === "number") payload[key] = 0;
    else if (s.type === "array") payload[key] = options.length ? [String(options[0].id)] : [];
    else payload[key] = "yes";
  }
  return payload;
}

/**
 * `scenario:pipeline` in pipeline run mode, answering every interrupt until the flow ends.
 * `answer` is "resolved" (payload picked from each responseSchema: allow_once for permissions) or
 * "cancelled" (the adapter denies the deploy permission; the pipeline then fails: `pipeline_failed`).
 */
async function pipelineFlow(answer) {
  const agent = newAgent(`conf-pipeline-${answer}-${randomUUID()}`);
  addUser(agent, "scenario:pipeline");
  const props = forwardedProps(`inv-pipeline-${answer}`, { runMode: "pipeline" });
  const runs = [];
  let r = await run(agent, { forwardedProps: props });
  runs.push(r);
  for (let round = 0; round < 6 && agent.pendingInterrupts.length && r.problems.length === 0; round++) {
    const resume = agent.pendingInterrupts.map((i) =>
      answer === "cancelled"
        ? { interruptId: i.id, status: "cancelled" }
        : { interruptId: i.id, status: "resolved", payload: autoPayload(i) },
    );
    r = await run(agent, { forwardedProps: props, resume });
    runs.push(r);
  }
  expect(runs[0], runs.length >= 2, "the pipeline never interrupted (expected a deploy permission)");
  // A run's RUN_FINISHED is not the pipeline's end: the pipeline's own outcome is a CUSTOM event.
  expectSuccess(r);
  const all = runs.flatMap((x) => x.raw);
  const steps = all.filter((e) => e.type === EventType.STEP_STARTED).length;
  const pipelineEvents = all.filter((e) => e.type === EventType.CUSTOM && e.name === "iac-code.pipeline.v1");
  const kinds = pipelineEvents.map((e) => e.value?.eventType);
  expect(r, steps > 0, "no STEP_STARTED in the whole flow");
  expect(r, kinds.includes("pipeline_started"), "no pipeline_started event");
  if (answer === "cancelled") {
    // The kernel ends a failed pipeline with `pipeline_failed` (iac_code/a2a/pipeline_executor.py),
    // which closes every step and is not forwarded as CUSTOM (the spec's list has no such name).
    expect(r, !kinds.includes("pipeline_completed"), "unexpected pipeline_completed");
  } else {
    expect(r, r.raw.some((e) => e.type === EventType.CUSTOM && e.value?.eventType === "pipeline_completed"), "last run has no pipeline_completed");
    expect(r, !kinds.includes("pipeline_error"), "unexpected pipeline_error");
  }
  const replayed = pipelineEvents.map((e) => e.value?.eventId).filter((id, i, a) => id && a.indexOf(id) !== i);
  return {
    runs,
    notes: `${runs.length} runs, ${steps} STEP_STARTED, pipeline events ${[...new Set(kinds)].join(",")}${replayed.length ? `; replayed eventIds ${replayed}` : ""}`,
  };
}

const scPipeline = () => pipelineFlow("resolved");
const scPipelineDenied = () => pipelineFlow("cancelled");

// ---- self-check: the harness must reject a broken stream ------------------------------------

const CANNED = {
  // A correct stream: the positive control. If this fails, the negatives prove nothing.
  "well-formed": (t, r) => [
    { type: "RUN_STARTED", threadId: t, runId: r },
    { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
    { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "hi" },
    { type: "TEXT_MESSAGE_END", messageId: "m1" },
    { type: "RUN_FINISHED", threadId: t, runId: r, outcome: { type: "success" } },
  ],
  "content-without-start": (t, r) => [
    { type: "RUN_STARTED", threadId: t, runId: r },
    { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "orphan" },
    { type: "RUN_FINISHED", threadId: t, runId: r, outcome: { type: "success" } },
  ],
  "missing-end-before-finish": (t, r) => [
    { type: "RUN_STARTED", threadId: t, runId: r },
    { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
    { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "never closed" },
    { type: "RUN_FINISHED", threadId: t, runId: r, outcome: { type: "success" } },
  ],
  "schema-invalid-field": (t, r) => [
    { type: "RUN_STARTED", threadId: t, runId: r },
    { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
    { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: 42 },
    { type: "TEXT_MESSAGE_END", messageId: "m1" },
    { type: "RUN_FINISHED", threadId: t, runId: r, outcome: { type: "success" } },
  ],
  "no-terminal-event": (t, r) => [
    { type: "RUN_STARTED", threadId: t, runId: r },
    { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
    { type: "TEXT_MESSAGE_END", messageId: "m1" },
  ],
  "unknown-field": (t, r) => [
    { type: "RUN_STARTED", threadId: t, runId: r },
    { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant", bogusField: 1 },
    { type: "TEXT_MESSAGE_END", messageId: "m1" },
    { type: "RUN_FINISHED", threadId: t, runId: r, outcome: { type: "success" } },
  ],
  "event-after-finish": (t, r) => [
    { type: "RUN_STARTED", threadId: t, runId: r },
    { type: "RUN_FINISHED", threadId: t, runId: r, outcome: { type: "success" } },
    { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
  ],
};

// Which mechanism must catch each broken stream, and with what message: "client" = runAgent
// rejects (the client's own enforcement or verification); "harness" = the suite's extra checks.
const EXPECT_CAUGHT_BY = {
  "content-without-start": { by: "client", match: /TEXT_MESSAGE_CONTENT.*No active text message/ },
  "missing-end-before-finish": { by: "client", match: /RUN_FINISHED.*text messages are still active/ },
  "schema-invalid-field": { by: "client", match: /delta/ },
  "event-after-finish": { by: "client", match: /already finished/ },
  // The client accepts these two: a stream that just stops resolves runAgent as if all was well,
  // and an unknown field is stripped with a console warning. The suite fails them itself.
  "no-terminal-event": { by: "harness", match: /terminal events/ },
  "unknown-field": { by: "harness", match: /client deviation warning: .*bogusField/ },
};

function startCannedServer() {
  return new Promise((resolve) => {
    const server = http.createServer((req, res) => {
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        const input = JSON.parse(body || "{}");
        const name = decodeURIComponent(req.url.replace(/^\/+/, ""));
        const make = CANNED[name];
        if (!make) {
          res.writeHead(404).end();
          return;
        }
        res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
        res.write(": heartbeat\n\n");
        make(input.threadId, input.runId).forEach((ev, i) => res.write(`id: self.${i}\ndata: ${JSON.stringify(ev)}\n\n`));
        res.end();
      });
    });
    server.listen(0, "127.0.0.1", () => resolve(server));
  });
}

/**
 * A pass-through to the real adapter that deletes every event of type `dropType` from the SSE
 * stream: the adapter's own output, made non-conformant in one known way.
 */
function startDroppingProxy(dropType) {
  return new Promise((resolve) => {
    const server = http.createServer((req, res) => {
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", async () => {
        try {
          const up = await fetch(BASE + "/", {
            method: "POST",
            headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
            body,
          });
          res.writeHead(up.status, { "Content-Type": up.headers.get("content-type") || "text/event-stream" });
          const decoder = new TextDecoder();
          let buf = "";
          const pass = (frame) => {
            const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
            let type;
            try {
              type = data ? JSON.parse(data).type : undefined;
            } catch {
              type = undefined;
            }
            if (type !== dropType) res.write(frame + "\n\n");
          };
          for await (const chunk of up.body) {
            buf += decoder.decode(chunk, { stream: true });
            const frames = buf.split("\n\n");
            buf = frames.pop();
            frames.forEach(pass);
          }
          if (buf) pass(buf);
          res.end();
        } catch (e) {
          res.destroy(e);
        }
      });
    });
    server.listen(0, "127.0.0.1", () => resolve(server));
  });
}

async function scSelfCheck() {
  const server = await startCannedServer();
  const url = `http://127.0.0.1:${server.address().port}`;
  const byClient = [];
  const byHarness = [];
  const detail = [];
  const failures = [];
  let control = "positive control FAILED";
  try {
    for (const name of Object.keys(CANNED)) {
      const agent = newAgent(`selfcheck-${name}`, `${url}/${name}`);
      addUser(agent, "hello");
      const r = await run(agent, { forwardedProps: forwardedProps("inv-selfcheck") });
      const clientRejected = Boolean(r.thrown || r.runFailed);
      if (name === "well-formed") {
        if (r.problems.length) failures.push(`positive control flagged: ${r.problems.join("; ")}`);
        else control = "well-formed control accepted";
        continue;
      }
      const { by, match } = EXPECT_CAUGHT_BY[name];
      const err = r.thrown || r.runFailed;
      if (by === "client" && !clientRejected)
        failures.push(`${name}: the client accepted it (problems: ${r.problems.join("; ") || "none"})`);
      else if (by === "client" && !match.test(errMsg(err)))
        failures.push(`${name}: the client rejected it for another reason: ${short(errMsg(err), 150)}`);
      else if (by === "harness" && !r.problems.some((x) => match.test(x)))
        failures.push(`${name}: not flagged as ${match} (problems: ${r.problems.join("; ") || "none"})`);
      else {
        (by === "client" ? byClient : byHarness).push(name);
        detail.push(`${name}: ${by === "client" ? errMsg(err) : r.problems.find((x) => match.test(x))}`);
      }
    }
    // The real adapter's normal turn with TEXT_MESSAGE_END removed on the way to the client.
    const proxy = await startDroppingProxy(EventType.TEXT_MESSAGE_END);
    try {
      const agent = newAgent(`selfcheck-proxy-${randomUUID()}`, `http://127.0.0.1:${proxy.address().port}/`);
      addUser(agent, "Create a VPC template");
      const r = await run(agent, { forwardedProps: forwardedProps("inv-selfcheck-proxy") });
      const err = r.thrown || r.runFailed;
      if (!err) failures.push(`adapter stream without TEXT_MESSAGE_END: the client accepted it (problems: ${r.problems.join("; ") || "none"})`);
      else if (r.raw.some((e) => e.type === EventType.TEXT_MESSAGE_END)) failures.push("proxy did not drop TEXT_MESSAGE_END");
      else if (!/RUN_FINISHED.*text messages are still active/.test(errMsg(err)))
        failures.push(`adapter stream without TEXT_MESSAGE_END: rejected for another reason: ${short(errMsg(err), 150)}`);
      else {
        byClient.push("adapter-stream-minus-TEXT_MESSAGE_END");
        detail.push(`adapter-stream-minus-TEXT_MESSAGE_END: ${errMsg(err)}`);
      }
    } finally {
      proxy.close();
    }
  } finally {
    server.close();
  }
  if (process.env.AGUI_CONFORMANCE_VERBOSE) for (const d of detail) console.log(`  ${short(d, 300)}`);
  return {
    runs: [],
    problems: failures,
    notes: `${control}; rejected by the client: ${byClient.join(", ")}; by the suite's own checks: ${byHarness.join(", ")}`,
  };
}

/**
 * Re-attach without a cursor (a join) while the run streams on its own connection:
 * `connectAgent()` runs the answer through the client's whole pipeline (verifyEvents among it),
 * and the snapshot, the re-opened message and the live rest make the run's whole text.
 */
async function scJoin() {
  const problems = [];
  const threadId = `conf-join-${randomUUID()}`;
  const gate = `console-slow-conf-${randomUUID().slice(0, 8)}`;
  const inv = "inv-join-1";
  const body = {
    threadId, runId: `run-${randomUUID()}`, state: {}, tools: [], context: [],
    messages: [{ id: `user-${randomUUID()}`, role: "user", content: `scenario:${gate}` }],
    forwardedProps: forwardedProps(inv),
  };
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), RUN_TIMEOUT_MS);
  const resp = await fetch(BASE + "/", {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify(body),
    signal: controller.signal,
  });
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let own = "";
  while (!own.includes("Still working.")) {
    const { value, done } = await reader.read();
    if (done) break;
    own += dec.decode(value, { stream: true });
  }
  const ownRest = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      own += dec.decode(value, { stream: true });
    }
  })().catch(() => {});
  const look = await (await fetch(`${BASE}/extensions/iac-code/v1/threads/${threadId}?rosInvocationId=${inv}`)).json();
  let kind = null;
  class JoinAgent extends HttpAgent {
    connect() {
      const url = `${BASE}/extensions/iac-code/v1/executions/${look.executionId}/subscribe`;
      const init = {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
        body: JSON.stringify({ threadId, runId: look.runId, rosInvocationId: inv }),
      };
      return transformHttpEventStream(
        runHttpRequest(() => fetch(url, init).then((r) => ((kind = r.headers.get("X-AGUI-Resume")), r))),
      );
    }
  }
  const agent = new JoinAgent({ url: BASE + "/", threadId });
  let failure = null;
  let outcome = null;
  const types = [];
  const joined = agent.connectAgent({}, {
    onEvent: ({ event }) => {
      types.push(event.type);
      if (event.type === EventType.MESSAGES_SNAPSHOT) fetch(`${process.env.FAKE_KERNEL_URL}/__control/open?gate=${gate}`, { method: "POST" });
    },
    onRunFailed: ({ error }) => (failure = error),
    onRunFinishedEvent: (p) => (outcome = p.outcome),
  });
  try {
    await joined;
  } catch (e) {
    failure = e;
  }
  await Promise.race([ownRest, sleep(2000)]);
  clearTimeout(timer);
  const text = agent.messages.filter((m) => m.role === "assistant").map((m) => m.content || "").join("");
  const want = "Streaming the first part. Still working. Finished after the wait.";
  if (failure) problems.push(`connectAgent failed: ${errMsg(failure)}`);
  if (kind !== "join") problems.push(`X-AGUI-Resume: ${kind}`);
  if (types[0] !== EventType.RUN_STARTED) problems.push(`first event ${types[0]}`);
  if (outcome !== "success") problems.push(`outcome ${outcome}`);
  if (text !== want) problems.push(`joined text ${JSON.stringify(text)}`);
  if (!own.includes("Finished after the wait.")) problems.push("the run's own stream did not finish");
  return { problems, notes: `joined mid-run: ${types.length} events (${types.slice(0, 5).join(", ")}, …), the whole text` };
}

/**
 * Join of an idle thread (connectAgent on its ended execution): ten past runs (a tool call, an
 * answered approval and a pipeline run among them) come back as one MESSAGES_SNAPSHOT that the
 * client's verifyEvents accepts, and the messages equal, one by one, those the runs' own client
 * built (the kept interrupts, activities of type `iac-code.interrupt`, aside).
 */
/** JSON with object keys sorted: the same message whatever order its fields were set in. */
function canon(v) {
  if (Array.isArray(v)) return `[${v.map(canon).join(",")}]`;
  if (v && typeof v === "object") return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canon(v[k])}`).join(",")}}`;
  return JSON.stringify(v);
}

async function scIdleJoin() {
  const problems = [];
  const threadId = `conf-idle-${randomUUID()}`;
  const inv = "inv-idle-1";
  const agent = newAgent(threadId);
  const runs = [];
  const answerAll = async (props) => {
    for (let round = 0; round < 6 && agent.pendingInterrupts.length; round++) {
      const resume = agent.pendingInterrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload: autoPayload(i) }));
      runs.push(await run(agent, { forwardedProps: props, resume }));
    }
  };
  const turn = async (text, extra = {}) => {
    addUser(agent, text);
    const props = forwardedProps(inv, extra);
    runs.push(await run(agent, { forwardedProps: props }));
    await answerAll(props);
  };
  await turn("scenario:tools-artifact");
  await turn("scenario:permission");
  await turn("scenario:pipeline", { runMode: "pipeline" });
  await turn("scenario:reasoning");
  while (runs.length < 10) await turn("hello");
  const { look, fresh, types } = await connectJoin(threadId, inv, problems);
  if (look.state !== "idle") problems.push(`lookup state ${look.state}`);
  const want = ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"];
  if (types.join() !== want.join()) problems.push(`join events ${types.join(", ")}`);
  const kept = fresh.messages.filter((m) => !(m.role === "activity" && m.activityType === "iac-code.interrupt"));
  const answered = fresh.messages.filter((m) => m.activityType === "iac-code.interrupt" && m.content?.answer);
  const seen = agent.messages;
  if (kept.length !== seen.length) problems.push(`${kept.length} messages kept, ${seen.length} seen by the runs' client`);
  for (let i = 0; i < Math.min(kept.length, seen.length); i++) {
    if (canon(kept[i]) !== canon(seen[i])) {
      problems.push(`message ${i}: kept ${short(safeJson(kept[i]), 200)} vs seen ${short(safeJson(seen[i]), 200)}`);
      break;
    }
  }
  const roles = new Set(kept.map((m) => m.role));
  for (const role of ["user", "assistant", "tool", "reasoning", "activity"]) if (!roles.has(role)) problems.push(`no ${role} message`);
  if (!kept.some((m) => m.toolCalls?.length)) problems.push("no tool call");
  if (answered.length < 2) problems.push(`${answered.length} answered interrupts kept, want the approval and the deploy`);
  return {
    runs,
    problems,
    notes: `${runs.length} runs, joined idle: ${fresh.messages.length} messages (${answered.length} answered interrupts) accepted by verifyEvents`,
  };
}

/** connectAgent() on the thread's newest execution, as a reloaded page does it (the thread
 *  lookup, then the subscribe route): the lookup, the joined client and the event types. */
async function connectJoin(threadId, inv, problems) {
  const look = await (await fetch(`${BASE}/extensions/iac-code/v1/threads/${threadId}?rosInvocationId=${inv}`)).json();
  class JoinAgent extends HttpAgent {
    connect() {
      const url = `${BASE}/extensions/iac-code/v1/executions/${look.executionId}/subscribe`;
      const init = {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
        body: JSON.stringify({ threadId, runId: look.runId, rosInvocationId: inv }),
      };
      return transformHttpEventStream(runHttpRequest(() => fetch(url, init)));
    }
  }
  const fresh = new JoinAgent({ url: BASE + "/", threadId });
  let failure = null;
  const types = [];
  try {
    await fresh.connectAgent({}, {
      onEvent: ({ event }) => types.push(event.type),
      onRunFailed: ({ error }) => (failure = error),
    });
  } catch (e) {
    failure = e;
  }
  if (failure) problems.push(`connectAgent failed: ${errMsg(failure)}`);
  return { look, fresh, types };
}

/**
 * Join of a waiting thread (connectAgent while an approval waits): two past runs, then the
 * permission turn. verifyEvents accepts the join; the client ends with the same messages as the
 * runs' own client (the kept interrupt records aside), in order, and the same pending interrupts;
 * the approval is then answered from the joined client.
 */
async function scWaitingJoin() {
  const problems = [];
  const threadId = `conf-wait-${randomUUID()}`;
  const inv = "inv-wait-1";
  const agent = newAgent(threadId);
  const runs = [];
  for (const text of ["scenario:reasoning", "scenario:tools-artifact", "scenario:permission"]) {
    addUser(agent, text);
    runs.push(await run(agent, { forwardedProps: forwardedProps(inv) }));
  }
  const { look, fresh, types } = await connectJoin(threadId, inv, problems);
  if (look.state !== "waiting") problems.push(`lookup state ${look.state}`);
  if (types.slice(0, 3).join() !== "RUN_STARTED,CUSTOM,MESSAGES_SNAPSHOT" || types.at(-1) !== "RUN_FINISHED") {
    problems.push(`join events ${types.join(", ")}`);
  }
  const kept = fresh.messages.filter((m) => !(m.role === "activity" && m.activityType === "iac-code.interrupt"));
  const seen = agent.messages;
  if (kept.length !== seen.length) problems.push(`${kept.length} messages joined, ${seen.length} seen by the runs' client`);
  for (let i = 0; i < Math.min(kept.length, seen.length); i++) {
    if (canon(kept[i]) !== canon(seen[i])) {
      problems.push(`message ${i}: joined ${short(safeJson(kept[i]), 200)} vs seen ${short(safeJson(seen[i]), 200)}`);
      break;
    }
  }
  if (kept.filter((m) => m.role === "user").length !== 3) problems.push("not the three user messages");
  const ids = (a) => a.pendingInterrupts.map((i) => i.id).join();
  if (!fresh.pendingInterrupts.length || ids(fresh) !== ids(agent)) {
    problems.push(`pending interrupts: joined [${ids(fresh)}], announced [${ids(agent)}]`);
  }
  const resume = fresh.pendingInterrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload: autoPayload(i) }));
  const answered = await run(agent, { forwardedProps: forwardedProps(inv), resume });
  runs.push(answered);
  if (answered.events.at(-1)?.outcome?.type === "interrupt") problems.push("the answer left it waiting");
  return {
    runs,
    problems,
    notes: `joined waiting: ${types.length} events (${types.join(", ")}), ${fresh.messages.length} messages accepted by verifyEvents; answered`,
  };
}

/**
 * The live feed of a thread (`GET …/threads/{threadId}/events`): a feed opened after turn 1, then a
 * permission turn, its resume (client A) and a third turn from another client (B). The feed, split
 * into runs, goes run by run through a client of its own (an HttpAgent whose fetch answers with the
 * feed's run: the client's whole pipeline, verifyEvents included, and its reducer); it must end
 * with the same messages as B, which holds the whole conversation as the senders built it.
 */
async function scFeed() {
  const problems = [];
  const threadId = `conf-feed-${randomUUID()}`;
  const inv = "inv-feed-1";
  const a = newAgent(threadId);
  addUser(a, "Create a VPC template");
  const r1 = await run(a, { forwardedProps: forwardedProps(inv) });
  expectSuccess(r1);
  const before = structuredClone(a.messages);
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), RUN_TIMEOUT_MS * 2);
  const resp = await fetch(`${BASE}/extensions/iac-code/v1/threads/${threadId}/events?rosInvocationId=${inv}`, {
    headers: { Accept: "text/event-stream" },
    signal: controller.signal,
  });
  if (resp.status !== 200) return { runs: [r1], problems: [`feed answered ${resp.status}`] };
  const fed = [];
  let ended = 0;
  let wake = () => {};
  const reading = (async () => {
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += dec.decode(value, { stream: true });
      const lines = buf.split("\n");
      buf = lines.pop();
      for (const line of lines) {
        if (!line.startsWith("data: ")) continue;
        const e = JSON.parse(line.slice(6));
        fed.push(e);
        if (e.type === EventType.RUN_FINISHED || e.type === EventType.RUN_ERROR) ended++;
        wake();
      }
    }
  })().catch(() => {});
  addUser(a, "scenario:permission");
  const r2 = await run(a, { forwardedProps: forwardedProps(inv) });
  expectInterrupt(r2);
  const interrupt = a.pendingInterrupts[0];
  const resume = [{ interruptId: interrupt?.id, status: "resolved", payload: { decision: "allow_once" } }];
  const r3 = await run(a, { forwardedProps: forwardedProps(inv), resume });
  expectSuccess(r3);
  const b = new HttpAgent({ url: BASE + "/", threadId, initialMessages: a.messages });
  addUser(b, "Add a security group");
  const r4 = await run(b, { forwardedProps: forwardedProps(inv) });
  expectSuccess(r4);
  const deadline = Date.now() + 10_000;
  while (ended < 3 && Date.now() < deadline) await new Promise((r) => ((wake = r), setTimeout(r, 200)));
  controller.abort();
  clearTimeout(timer);
  await reading;
  if (ended !== 3) problems.push(`the feed gave ${ended} runs, want 3`);
  const runs = [];
  for (const e of fed) {
    if (e.type === EventType.RUN_STARTED) runs.push([]);
    runs.at(-1)?.push(e);
  }
  // The follower's client gets each run of the feed as an SSE response of its own.
  let feedRun = [];
  const sse = () => feedRun.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("");
  const fetchRun = async () => new Response(sse(), { status: 200, headers: { "Content-Type": "text/event-stream" } });
  const follower = new HttpAgent({ url: "http://feed.invalid/", threadId, initialMessages: before, fetch: fetchRun });
  for (const [k, events] of runs.entries()) {
    feedRun = events;
    const pending = follower.pendingInterrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload: { decision: "allow_once" } }));
    try {
      await follower.runAgent({ runId: events[0].runId, ...(pending.length ? { resume: pending } : {}) });
    } catch (e) {
      problems.push(`feed run ${k + 1} rejected by the client (verifyEvents): ${errMsg(e)}`);
    }
  }
  const canon = (v) => JSON.stringify(v, (_, x) => (x && typeof x === "object" && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort()) : x));
  if (canon(follower.messages) !== canon(b.messages))
    problems.push(`the feed's messages differ from the senders': ${short(canon(follower.messages), 600)} vs ${short(canon(b.messages), 600)}`);
  const users = follower.messages.filter((m) => m.role === "user").length;
  return { runs: [r1, r2, r3, r4], problems, notes: `${fed.length} events in ${runs.length} runs, each through verifyEvents; ${follower.messages.length} messages (${users} user) equal to the senders'` };
}

// ---- driver --------------------------------------------------------------------------------

const SCENARIOS = [
  { name: "1 normal turn", fn: scNormal },
  { name: "1b normal second turn on the same thread", fn: scNormalSecondTurn },
  { name: "1c fresh thread with agent.state = null (no state on the wire)", fn: scNullState },
  { name: "2 permission interrupt + resume allow_once", fn: scPermission },
  { name: "3 question interrupt + resume selectedId", fn: scQuestion },
  { name: "3b selection interrupt + resume selectedId", fn: scSelection },
  { name: "3c question resume with an invalid payload, then a valid retry", fn: scQuestionBadPayload },
  { name: "4 permission interrupt cancelled (= deny)", fn: scPermissionCancelled },
  { name: "5 question interrupt cancelled -> RUN_ERROR CANCELLED", fn: scQuestionCancelled },
  { name: "6 upstream failure -> RUN_ERROR A2A_EXECUTION_FAILED", fn: scFail },
  { name: "7 heartbeat-only stretch", fn: scSilent },
  { name: "8 pipeline flow, deploy allowed", fn: scPipeline, enabled: pipelineEnabled, skip: "AGUI_CONFORMANCE_PIPELINE=0" },
  { name: "8b pipeline flow, deploy permission cancelled", fn: scPipelineDenied, enabled: pipelineEnabled, skip: "AGUI_CONFORMANCE_PIPELINE=0" },
  { name: "9a reasoning events", fn: scReasoning },
  { name: "9b tool-call and artifact events", fn: scTools },
  { name: "10 join mid-run with connectAgent() (no cursor)", fn: scJoin },
  { name: "11 join of an idle thread: ten past runs in one snapshot", fn: scIdleJoin, enabled: pipelineEnabled, skip: "AGUI_CONFORMANCE_PIPELINE=0" },
  { name: "11b join of a waiting thread: past runs, then the approval", fn: scWaitingJoin },
  { name: "12 live feed of a thread: runs of two clients, verifyEvents and the same messages", fn: scFeed },
  { name: "self-check: broken stream is rejected", fn: scSelfCheck },
];

async function main() {
  const t0 = Date.now();
  let failed = 0;
  let passed = 0;
  let skipped = 0;
  for (const sc of SCENARIOS) {
    if (FILTERS.length && !FILTERS.some((f) => sc.name.includes(f))) continue;
    if (sc.enabled && !sc.enabled()) {
      skipped++;
      console.log(`SKIP  ${sc.name} — ${sc.skip}`);
      continue;
    }
    const started = Date.now();
    let outcome;
    try {
      outcome = await sc.fn();
    } catch (e) {
      outcome = { runs: [], problems: [`harness exception: ${e?.stack || e}`] };
    }
    const problems = [...(outcome.problems || [])];
    (outcome.runs || []).forEach((r, i) => {
      for (const p of r.problems) problems.push(outcome.runs.length > 1 ? `run ${i + 1}: ${p}` : p);
    });
    const ms = Date.now() - started;
    if (problems.length) {
      failed++;
      console.log(`FAIL  ${sc.name} (${ms} ms) — ${problems.join(" | ")}`);
      if (process.env.AGUI_CONFORMANCE_VERBOSE) dumpRuns(outcome.runs);
    } else {
      passed++;
      console.log(`PASS  ${sc.name} (${ms} ms)${outcome.notes ? " — " + outcome.notes : ""}`);
      if (process.env.AGUI_CONFORMANCE_VERBOSE === "all") dumpRuns(outcome.runs);
    }
  }
  const secs = ((Date.now() - t0) / 1000).toFixed(1);
  console.log(`${passed} passed, ${failed} failed, ${skipped} skipped in ${secs} s`);
  clearTimeout(suiteTimer);
  process.exit(failed ? 1 : 0);
}

function dumpRuns(runs = []) {
  for (const r of runs) {
    console.log(`  --- run ${r.runId} (${r.ms} ms), HTTP ${r.httpStatus}, ${r.heartbeats} heartbeats`);
    for (const e of r.raw) console.log(`    ${short(safeJson(stripTs(e)), 400)}`);
    for (const w of r.warnings) console.log(`    warn: ${short(w, 400)}`);
    for (const w of r.consoleErrors) console.log(`    error: ${short(w, 400)}`);
  }
}

main();
