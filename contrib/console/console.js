// A small web console for iac-code-agui, built on the official @ag-ui/client (vendor/, bundled
// from npm; see README.md). No framework, no local storage: the thread id lives in the URL hash,
// so a reload re-attaches through the adapter's thread lookup and observe routes.
//
// Query parameters (all optional):
//   adapter  base URL of the adapter (default: this page's origin, i.e. behind the same proxy)
//   cwd      workspace path sent as forwardedProps.iacCode.cwd (default /tmp)
//   user     userId the thread is bound to; also how a reload finds the thread (default console-user)
//   token    bearer token, when the adapter has IAC_CODE_AGUI_AUTH_TOKEN (demo only: a real console
//            gets its token from its own login, never from the URL)
import { HttpAgent, runHttpRequest, transformHttpEventStream } from "./vendor/agui-client.js";

const params = new URLSearchParams(location.search);
const BASE = (params.get("adapter") || location.origin).replace(/\/+$/, "");
const CWD = params.get("cwd") || "/tmp";
const USER = params.get("user") || "console-user";
const TOKEN = params.get("token") || "";
const EXT = `${BASE}/extensions/iac-code/v1`;

const $ = (id) => document.getElementById(id);
const headers = () => (TOKEN ? { Authorization: `Bearer ${TOKEN}` } : {});

// ---- the thread id in the URL hash -------------------------------------------------------------
function threadFromHash() {
  const h = new URLSearchParams(location.hash.slice(1));
  return h.get("thread");
}
let threadId = threadFromHash();
if (!threadId) {
  threadId = `console-${crypto.randomUUID()}`;
  history.replaceState(null, "", `#thread=${encodeURIComponent(threadId)}`);
}
$("thread").textContent = threadId;

// ---- what the page shows ------------------------------------------------------------------------
let messages = []; // the transcript, as @ag-ui/client keeps it
let current = null; // {executionId, rosInvocationId, runId} of the thread's current execution
let pending = []; // interrupts waiting for an answer
let answers = new Map(); // interruptId -> resume entry
let streams = 0; // open runs / observers in this tab
let stopRequested = false;

function setStatus(state, text = state) {
  const s = $("status");
  s.dataset.state = state;
  s.textContent = text;
}

function notice(text) {
  $("notice").textContent = text || "";
}

function render() {
  const box = $("messages");
  box.textContent = "";
  for (const m of messages) {
    if (m.role === "user" || m.role === "assistant" || m.role === "reasoning") {
      const text = typeof m.content === "string" ? m.content : "";
      if (text) {
        const div = document.createElement("div");
        div.className = `msg ${m.role}`;
        div.dataset.id = m.id;
        div.textContent = text;
        box.append(div);
      }
    }
    for (const call of m.toolCalls || []) {
      const div = document.createElement("div");
      div.className = "tool";
      div.dataset.toolCallId = call.id;
      const title = document.createElement("b");
      title.textContent = `Tool call: ${call.function.name}`;
      div.append(title, `\n${call.function.arguments || ""}`);
      const result = messages.find((r) => r.role === "tool" && r.toolCallId === call.id);
      if (result) {
        const res = document.createElement("div");
        res.className = "result";
        res.textContent = `→ ${result.content}`;
        div.append(res);
      }
      box.append(div);
    }
  }
  box.scrollTop = box.scrollHeight;
}

function renderApproval() {
  const card = $("approval");
  card.textContent = "";
  card.classList.toggle("shown", pending.length > 0);
  for (const it of pending) {
    const md = it.metadata || {};
    const h = document.createElement("h2");
    h.textContent = md.title || "Approval needed";
    const msg = document.createElement("div");
    msg.textContent = it.message || "";
    const summary = document.createElement("div");
    summary.className = "summary";
    summary.textContent = md.safeSummary || md.purpose || "";
    card.append(h, msg, summary);
    const choices =
      md.kind === "permission"
        ? [
            { label: "Allow", cls: "allow", id: "allow", payload: { decision: "allow_once" } },
            { label: "Deny", cls: "deny", id: "deny", payload: { decision: "deny" } },
          ]
        : (md.standardOptions || []).map((o) => ({ label: o.title, cls: "", id: `opt-${o.id}`, payload: { selectedId: o.id } }));
    for (const c of choices) {
      const b = document.createElement("button");
      b.textContent = c.label;
      b.className = c.cls;
      b.dataset.choice = c.id;
      b.onclick = () => answer(it, { interruptId: it.id, status: "resolved", payload: c.payload });
      card.append(b);
    }
  }
}

function updateButtons() {
  // Stop also ends an execution that waits for an approval (the cancel extension takes both).
  $("stop").disabled = !(current && (streams > 0 || pending.length > 0));
}

// ---- the agent: HttpAgent plus connect() for the observe route -------------------------------
class ConsoleAgent extends HttpAgent {
  // connectAgent() runs this stream through the client's own pipeline (verifyEvents, apply).
  connect() {
    const body = JSON.stringify({ threadId, runId: this.observe.runId, rosInvocationId: this.observe.rosInvocationId });
    const url = `${EXT}/executions/${encodeURIComponent(this.observe.executionId)}/subscribe`;
    const init = {
      method: "POST",
      headers: { ...this.headers, "Content-Type": "application/json", Accept: "text/event-stream" },
      body,
      signal: this.abortController.signal,
    };
    return transformHttpEventStream(runHttpRequest(() => this.fetch(url, init)));
  }
}

function newAgent() {
  const agent = new ConsoleAgent({ url: `${BASE}/`, threadId, headers: headers(), initialMessages: messages });
  agent.state = null; // as chat UIs start a thread: the client then sends no `state` at all
  return agent;
}

function forwardedProps(rosInvocationId) {
  return { iacCode: { schemaVersion: 1, rosInvocationId, cwd: CWD, userId: USER } };
}

function describe(e) {
  const err = e?.payload?.error;
  if (err?.code) return `${err.code}: ${err.message}`;
  return e?.message || String(e);
}

/** Runs one stream (a run or an observer) and reflects it on the page. */
async function drive(agent, start) {
  streams++;
  notice("");
  setStatus("running");
  let outcome = null;
  const subscriber = {
    onMessagesChanged: ({ messages: m }) => {
      messages = m;
      render();
    },
    onCustomEvent: ({ event }) => {
      if (event.name === "iac-code.session.v1") {
        const v = event.value;
        current = { executionId: v.executionId, rosInvocationId: v.rosInvocationId, runId: v.aguiRunId };
        updateButtons();
      }
    },
    onRunFinishedEvent: ({ outcome: kind, interrupts }) => {
      outcome = kind;
      if (kind === "interrupt") {
        pending = interrupts || [];
        answers = new Map();
        renderApproval();
        updateButtons();
        setStatus("waiting", "waiting for approval");
      } else {
        setStatus("done");
      }
    },
    onRunErrorEvent: ({ event }) => {
      outcome = "error";
      if (event.code === "CANCELLED") {
        // A user's Stop (here, or the page that ran it going away) is not a failure.
        setStatus("stopped");
        if (!stopRequested) notice("The run was stopped.");
      } else {
        setStatus("error", "error");
        notice(`${event.code}: ${event.message}`);
      }
    },
    onRunFailed: ({ error }) => {
      outcome = "error";
      setStatus("error", "error");
      notice(describe(error));
    },
  };
  try {
    await start(agent, subscriber);
  } catch (e) {
    setStatus("error", "error");
    notice(describe(e));
  } finally {
    streams--;
    stopRequested = false;
    updateButtons();
    if (outcome === null && $("status").dataset.state === "running") setStatus("idle");
  }
}

async function send() {
  const text = $("input").value.trim();
  if (!text) return;
  $("input").value = "";
  const agent = newAgent();
  agent.addMessage({ id: `user-${crypto.randomUUID()}`, role: "user", content: text });
  messages = agent.messages;
  render();
  const inv = `inv-${crypto.randomUUID()}`;
  await drive(agent, (a, s) => a.runAgent({ forwardedProps: forwardedProps(inv) }, s));
}

async function answer(interrupt, entry) {
  answers.set(interrupt.id, entry);
  if (answers.size < pending.length) return;
  const resume = pending.map((p) => answers.get(p.id));
  const agent = newAgent();
  agent.pendingInterrupts = pending;
  pending = [];
  renderApproval();
  updateButtons();
  await drive(agent, (a, s) => a.runAgent({ forwardedProps: forwardedProps(current.rosInvocationId), resume }, s));
}

async function stop() {
  if (!current) return;
  stopRequested = true;
  const resp = await fetch(`${EXT}/executions/${encodeURIComponent(current.executionId)}/cancel`, {
    method: "POST",
    headers: { ...headers(), "Content-Type": "application/json" },
    body: JSON.stringify({ threadId, rosInvocationId: current.rosInvocationId }),
  }).catch((e) => ({ ok: false, statusText: e.message }));
  if (!resp.ok) {
    notice(`Stop failed: ${resp.status || ""} ${resp.statusText}`);
  } else if (streams === 0) {
    // It was waiting for an approval: no stream reports the end, the answer did.
    pending = [];
    renderApproval();
    setStatus("stopped");
    stopRequested = false;
    updateButtons();
  }
}

/** After a (re)load: find the thread's execution and re-attach to it when it runs or waits. */
async function recover() {
  let resp;
  try {
    resp = await fetch(`${EXT}/threads/${encodeURIComponent(threadId)}?userId=${encodeURIComponent(USER)}`, { headers: headers() });
  } catch (e) {
    setStatus("error", "error");
    notice(`Adapter unreachable: ${e.message}`);
    return;
  }
  if (resp.status === 404) return; // a new thread
  if (!resp.ok) {
    notice(`Thread lookup failed: HTTP ${resp.status}`);
    return;
  }
  const t = await resp.json();
  if (t.state === "idle" || !t.runId) return;
  current = { executionId: t.executionId, rosInvocationId: t.rosInvocationId, runId: t.runId };
  const agent = newAgent();
  agent.observe = current;
  await drive(agent, (a, s) => a.connectAgent({}, s));
}

$("send").onclick = send;
$("stop").onclick = stop;
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    send();
  }
});
window.addEventListener("hashchange", () => location.reload());
recover();
