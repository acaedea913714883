#!/usr/bin/env node
// A minimal AG-UI client for iac-code-agui, built on the official @ag-ui/client HttpAgent.
//
//   node contrib/agui-client-example.mjs [--url URL] [--cwd DIR] [--thread ID] "your request"
//
//   --url     adapter base URL (else $AGUI_URL, else http://127.0.0.1:8000)
//   --cwd     absolute workspace path sent as forwardedProps.iacCode.cwd (else $AGUI_CWD, else
//             the current directory); it must be under the adapter's IAC_CODE_AGUI_ALLOWED_CWDS
//   --thread  thread id to continue (else a new one; printed at the end so you can continue it)
//   $IAC_CODE_AGUI_AUTH_TOKEN  sent as `Authorization: Bearer ...` when set
//
// It streams the assistant's text to stdout (reasoning, tool calls and pipeline progress go to
// stderr), and when a run ends with an interrupt it asks on stdin and resumes:
//   * permission (responseSchema has `decision`): answer allow_once / deny (a / d)
//   * a choice (responseSchema.oneOf of `selectedId` consts): answer the listed number or an option id,
//     or free text when the schema has a `freeText` branch
//   * anything else: type the JSON payload
//   An empty answer (or "cancel", or end of input) resumes with status "cancelled".
//
// @ag-ui/client comes from your project's node_modules; inside this repository the copy installed
// for the conformance suite (tests/conformance, `npm ci` there) is used as a fallback.
//
// Protocol notes (see the AG-UI protocol reference):
//   * a turn is one POST / (HttpAgent.runAgent); the response is an SSE stream of AG-UI events;
//   * RUN_FINISHED with outcome.type "interrupt" pauses the run: the client keeps the interrupts
//     in agent.pendingInterrupts and the next runAgent must answer every one of them in `resume`,
//     on the same threadId, with a new runId and the SAME rosInvocationId;
//   * RUN_ERROR ends a run with a failure: the client does not throw for it, it calls
//     onRunErrorEvent; runAgent rejects only on transport or protocol errors.

import readline from "node:readline/promises";
import { randomUUID } from "node:crypto";

async function loadClient() {
  try {
    return await import("@ag-ui/client");
  } catch {
    return await import(new URL("../tests/conformance/node_modules/@ag-ui/client/dist/index.mjs", import.meta.url).href);
  }
}

function parseArgs(argv) {
  const opts = { url: process.env.AGUI_URL || "http://127.0.0.1:8000", cwd: process.env.AGUI_CWD || process.cwd() };
  const words = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--url" || a === "--cwd" || a === "--thread") opts[a.slice(2)] = argv[++i];
    else if (a === "-h" || a === "--help") opts.help = true;
    else words.push(a);
  }
  opts.message = words.join(" ");
  return opts;
}

const dim = (s) => (process.stderr.isTTY ? `\x1b[2m${s}\x1b[0m` : s);

// ---- answering an interrupt ----------------------------------------------------------------

/** Reads one line; resolves "" at end of input. */
function makeAsk() {
  const rl = readline.createInterface({ input: process.stdin, output: process.stderr, terminal: process.stdin.isTTY });
  let closed = false;
  const lines = [];
  let waiter = null;
  rl.on("line", (l) => (waiter ? (waiter(l), (waiter = null)) : lines.push(l)));
  rl.on("close", () => {
    closed = true;
    if (waiter) waiter("");
  });
  const ask = (prompt) => {
    process.stderr.write(prompt);
    if (lines.length) return Promise.resolve(lines.shift());
    if (closed) return Promise.resolve("");
    return new Promise((resolve) => (waiter = resolve));
  };
  return { ask, close: () => rl.close() };
}

/** Turns the user's answer into one resume entry for `interrupt`. */
async function answerInterrupt(interrupt, ask) {
  const schema = interrupt.responseSchema || {};
  const meta = interrupt.metadata || {};
  process.stderr.write(`\n── ${meta.title || "Input needed"} (${interrupt.reason}) ──\n${interrupt.message || meta.prompt || ""}\n`);
  if (meta.safeSummary) process.stderr.write(dim(`   ${meta.safeSummary}\n`));
  const cancelled = { interruptId: interrupt.id, status: "cancelled" };

  const decision = schema.properties?.decision;
  if (Array.isArray(decision?.enum)) {
    for (;;) {
      const a = (await ask(`${decision.enum.join(" / ")} (a/d, empty = cancel)? `)).trim().toLowerCase();
      if (a === "" || a === "cancel") return cancelled;
      const value = a === "a" ? "allow_once" : a === "d" ? "deny" : a;
      if (decision.enum.includes(value)) return { interruptId: interrupt.id, status: "resolved", payload: { decision: value } };
    }
  }

  const branches = schema.oneOf || schema.anyOf || [];
  const choices = branches
    .map((b) => ({ id: b.properties?.selectedId?.const, title: b.properties?.selectedId?.title ?? b.title }))
    .filter((c) => c.id !== undefined);
  const freeText = branches.some((b) => b.properties?.freeText);
  if (choices.length || freeText) {
    choices.forEach((c, n) => process.stderr.write(`  ${n + 1}) ${c.title ?? c.id}  [${c.id}]\n`));
    for (;;) {
      const a = (await ask(`choice${freeText ? " or free text" : ""} (empty = cancel)? `)).trim();
      if (a === "" || a === "cancel") return cancelled;
      // The number shown in the list first (option ids may be numbers too), then an option id.
      const byNumber = /^\d+$/.test(a) ? choices[Number(a) - 1] : undefined;
      const pick = byNumber || choices.find((c) => c.id === a);
      if (pick) return { interruptId: interrupt.id, status: "resolved", payload: { selectedId: pick.id } };
      if (freeText) return { interruptId: interrupt.id, status: "resolved", payload: { freeText: a } };
    }
  }

  process.stderr.write(dim(`   response schema: ${JSON.stringify(schema)}\n`));
  for (;;) {
    const a = (await ask("JSON payload (empty = cancel)? ")).trim();
    if (a === "" || a === "cancel") return cancelled;
    try {
      return { interruptId: interrupt.id, status: "resolved", payload: JSON.parse(a) };
    } catch (e) {
      process.stderr.write(`not JSON: ${e.message}\n`);
    }
  }
}

// ---- main ----------------------------------------------------------------------------------

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (opts.help || !opts.message) {
    process.stderr.write('usage: node contrib/agui-client-example.mjs [--url URL] [--cwd DIR] [--thread ID] "your request"\n');
    process.exit(opts.help ? 0 : 2);
  }
  const { HttpAgent } = await loadClient();
  const headers = process.env.IAC_CODE_AGUI_AUTH_TOKEN ? { Authorization: `Bearer ${process.env.IAC_CODE_AGUI_AUTH_TOKEN}` } : {};
  const agent = new HttpAgent({ url: opts.url.replace(/\/+$/, "") + "/", headers, threadId: opts.thread || randomUUID() });
  process.on("SIGINT", () => {
    agent.abortRun(); // the adapter cancels the A2A task when an active run's connection drops
    process.exit(130);
  });

  let failed = false;
  let printing = null; // the message whose text is on the current stdout line (pipelines interleave)
  const subscriber = {
    onTextMessageContentEvent: ({ event }) => {
      if (printing !== null && printing !== event.messageId) process.stdout.write("\n");
      printing = event.messageId;
      process.stdout.write(event.delta);
    },
    onTextMessageEndEvent: ({ event }) => {
      if (printing === event.messageId) process.stdout.write("\n");
      if (printing === event.messageId) printing = null;
    },
    onReasoningMessageContentEvent: ({ event }) => void process.stderr.write(dim(event.delta)),
    onReasoningEndEvent: () => void process.stderr.write("\n"),
    onToolCallStartEvent: ({ event }) => void process.stderr.write(dim(`[tool ${event.toolCallName} ${event.toolCallId}]\n`)),
    onToolCallResultEvent: ({ event }) =>
      void process.stderr.write(dim(`[tool result ${event.toolCallId}] ${String(event.content).slice(0, 200)}\n`)),
    onStepStartedEvent: ({ event }) => void process.stderr.write(dim(`[step ${event.stepName}]\n`)),
    onCustomEvent: ({ event }) => {
      if (event.name === "iac-code.pipeline.v1") process.stderr.write(dim(`[pipeline ${event.value?.eventType}]\n`));
    },
    onRunErrorEvent: ({ event }) => {
      failed = true;
      process.stderr.write(`\nrun failed: ${event.code ?? "ERROR"}: ${event.message}\n`);
    },
  };

  // One rosInvocationId per execution: the first run and all of its resumes share it.
  const forwardedProps = { iacCode: { schemaVersion: 1, rosInvocationId: `cli-${randomUUID()}`, cwd: opts.cwd } };
  agent.addMessage({ id: randomUUID(), role: "user", content: opts.message });

  const { ask, close } = makeAsk();
  try {
    await agent.runAgent({ forwardedProps }, subscriber);
    while (!failed && agent.pendingInterrupts.length > 0) {
      const resume = [];
      for (const interrupt of agent.pendingInterrupts) resume.push(await answerInterrupt(interrupt, ask));
      await agent.runAgent({ forwardedProps, resume }, subscriber);
    }
  } catch (e) {
    failed = true;
    process.stderr.write(`\nerror: ${e.message}\n`);
  } finally {
    close();
  }
  process.stderr.write(dim(`thread ${agent.threadId} (continue with --thread ${agent.threadId})\n`));
  process.exit(failed ? 1 : 0);
}

main();
