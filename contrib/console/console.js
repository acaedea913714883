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

// ---- the agent: HttpAgent with streams that survive a dropped connection -------------------
// Every SSE frame of the adapter carries an `id:` (a cursor). @ag-ui/client's parser drops those
// lines, so this page reads the SSE itself: it keeps the newest cursor and, when the connection
// drops before the run's end, re-attaches to the execution with `Last-Event-ID` (capped backoff).
// The adapter answers `X-AGUI-Resume: exact` (the events after the cursor: the same run goes on)
// or `join` (a run of its own: the turn so far, then the live rest). A join cannot continue the
// run already in progress, so the page ends it and re-attaches afresh (connectAgent). After the
// user's own Stop, or the page's abort, it never reconnects.
const RECONNECT_ATTEMPTS = 12;
const backoff = (n) => Math.min(250 * 2 ** n, 5000);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// rxjs' Observable as the client bundles it (runHttpRequest returns one; nothing is fetched
// until it is subscribed).
const Observable = runHttpRequest(() => Promise.reject(new Error("unused"))).constructor;

class Rejoin extends Error {}

/** Reads SSE frames from a fetch response: `onFrame(id, event)` for each `data:` frame. */
async function readFrames(resp, onFrame) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let id = null;
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line === "") {
        if (data.length) onFrame(id, JSON.parse(data.join("\n")));
        id = null;
        data = [];
      } else if (line.startsWith("id:")) id = line.slice(3).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
  }
}

class ConsoleAgent extends HttpAgent {
  /** A turn or a resume (POST /), continued through drops. */
  run(input) {
    const init = () => ({ ...this.requestInit(input), signal: this.abortController.signal });
    return this.resilient(() => this.fetch(this.url, init()));
  }

  /** Re-attach (connectAgent): the observe route, continued through drops the same way. */
  connect() {
    return this.resilient(null);
  }

  /** The execution's observe stream, from `cursor` when there is one. The execution is the
   *  one this stream announced (its session event); before that, the thread lookup's. */
  async subscribe(cursor, known) {
    if (!known) {
      const t = await lookup();
      if (!t || t.state === "idle" || !t.runId) {
        // It ended between the page's lookup and this one: nothing to follow, not a failure.
        throw Object.assign(new Error("The run is no longer running."), { final: true, ended: true });
      }
      current = { executionId: t.executionId, rosInvocationId: t.rosInvocationId, runId: t.runId };
    }
    const t = current;
    const h = { ...this.headers, "Content-Type": "application/json", Accept: "text/event-stream" };
    if (cursor) h["Last-Event-ID"] = cursor;
    return this.fetch(`${EXT}/executions/${encodeURIComponent(t.executionId)}/subscribe`, {
      method: "POST",
      headers: h,
      body: JSON.stringify({ threadId, runId: t.runId, rosInvocationId: t.rosInvocationId }),
      signal: this.abortController.signal,
    });
  }

  resilient(first) {
    return new Observable((sub) => {
      let cursor = null;
      let started = false;
      let known = false; // the session event named the execution
      let ended = false;
      const signal = this.abortController.signal;
      (async () => {
        for (let attempt = 0; !ended; attempt++) {
          try {
            const resp = await (attempt === 0 && first ? first() : this.subscribe(cursor, known));
            if (!resp.ok) {
              const body = await resp.json().catch(() => ({}));
              const err = new Error(body?.error?.message || `HTTP ${resp.status}`);
              err.payload = body;
              throw Object.assign(err, { status: resp.status, final: true });
            }
            if (started && resp.headers.get("X-AGUI-Resume") === "join") throw new Rejoin("rejoin");
            await readFrames(resp, (id, ev) => {
              if (id) cursor = id;
              if (ev.type === "RUN_STARTED") started = true;
              if (ev.type === "CUSTOM" && ev.name === "iac-code.session.v1") known = true;
              if (ev.type === "RUN_FINISHED" || ev.type === "RUN_ERROR") ended = true;
              attempt = 0;
              sub.next(ev);
            });
            if (ended) return sub.complete();
          } catch (e) {
            // Nothing started (refused, unreachable, another origin not allowed): no retry.
            if (!started || e instanceof Rejoin || e.final || signal.aborted) return sub.error(e);
          }
          // The connection dropped before the run's end.
          if (stopRequested || signal.aborted) return sub.error(new Error("stopped"));
          if (attempt >= RECONNECT_ATTEMPTS) return sub.error(new Error("The connection was lost."));
          setStatus("reconnecting", "reconnecting…");
          await sleep(backoff(attempt));
          setStatus("running");
        }
      })();
    });
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
  let rejoin = false;
  try {
    await start(agent, subscriber);
  } catch (e) {
    rejoin = e instanceof Rejoin || e?.cause instanceof Rejoin;
    if (e?.message === "stopped") setStatus("stopped");
    else if (e?.ended || e?.cause?.ended) setStatus("idle");
    else if (!rejoin) {
      setStatus("error", "error");
      notice(describe(e));
    }
  } finally {
    streams--;
    stopRequested = false;
    updateButtons();
    if (outcome === null && $("status").dataset.state === "running") setStatus("idle");
  }
  // The adapter could not continue the stream exactly (say it restarted): join the turn afresh.
  if (rejoin) await recover();
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

/** The thread as the adapter sees it (`null` for a new thread). */
async function lookup() {
  const resp = await fetch(`${EXT}/threads/${encodeURIComponent(threadId)}?userId=${encodeURIComponent(USER)}`, { headers: headers() });
  if (resp.status === 404) return null; // a new thread
  if (!resp.ok) throw new Error(`Thread lookup failed: HTTP ${resp.status}`);
  return resp.json();
}

/** After a (re)load: find the thread's execution and re-attach to it when it runs or waits. */
async function recover() {
  let t;
  try {
    t = await lookup();
  } catch (e) {
    setStatus("error", "error");
    notice(`Adapter unreachable: ${e.message}`);
    return;
  }
  if (!t || t.state === "idle" || !t.runId) return;
  current = { executionId: t.executionId, rosInvocationId: t.rosInvocationId, runId: t.runId };
  await drive(newAgent(), (a, s) => a.connectAgent({}, s));
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
