// A small web console for iac-code-agui, built on the official @ag-ui/client (vendor/, bundled
// from npm; see README.md). No framework, no local storage: the thread id lives in the URL hash,
// and everything else comes from the adapter: the user's threads (the thread list, in the
// sidebar), the whole conversation (a join through connectAgent(), whose MESSAGES_SNAPSHOT holds
// the kept conversation; older pages from the history route), and the turns other tabs run on
// the thread (the thread's live feed).
//
// Query parameters (all optional):
//   adapter  base URL of the adapter (default: this page's origin, i.e. behind the same proxy)
//   cwd      workspace path sent as forwardedProps.iacCode.cwd (default /tmp)
//   user     userId the thread is bound to; also how a reload finds the thread (default console-user)
//   token    bearer token, when the adapter has IAC_CODE_AGUI_AUTH_TOKEN (demo only: a real console
//            gets its token from its own login, never from the URL)
//   page     messages per page of the conversation (default 50): the join asks for the newest
//            page, "Earlier messages" pages back
import { HttpAgent, runHttpRequest } from "./vendor/agui-client.js";

const params = new URLSearchParams(location.search);
const BASE = (params.get("adapter") || location.origin).replace(/\/+$/, "");
const CWD = params.get("cwd") || "/tmp";
const USER = params.get("user") || "console-user";
const TOKEN = params.get("token") || "";
const PAGE = Math.min(Math.max(Number(params.get("page")) || 50, 1), 500);
const EXT = `${BASE}/extensions/iac-code/v1`;

const $ = (id) => document.getElementById(id);
// Every request names its user, and a request about one thread the thread: a balancer in front
// of several adapter pairs routes all of a user's requests to one pair by X-AGUI-User-Id, so the
// user's threads all live there and the thread list is complete (contrib/deploy/README.md). The
// adapter checks both headers against the body's threadId and userId.
const headers = () => ({ ...(TOKEN ? { Authorization: `Bearer ${TOKEN}` } : {}), "X-AGUI-User-Id": USER });
const threadHeaders = () => ({ ...headers(), "X-AGUI-Thread-Id": threadId });
const userQuery = `userId=${encodeURIComponent(USER)}`;

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
let messages = []; // the newest part of the conversation, as @ag-ui/client keeps it
let older = []; // older pages, fetched from the history route ("Earlier messages")
let olderCursor = null; // the history route's cursor of the next older page; null: none
let joined = false; // a join's MESSAGES_SNAPSHOT gave the conversation
const seenRuns = new Set(); // runs this tab ran or joined: the feed's copy of them is not reduced
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

/** What the page shows: the older pages, then the newest part (each message once, by id). */
function conversation() {
  const newest = new Set(messages.map((m) => m.id));
  return [...older.filter((m) => !newest.has(m.id)), ...messages];
}

function render({ keepScroll = false } = {}) {
  const box = $("messages");
  const fromBottom = box.scrollHeight - box.scrollTop;
  box.textContent = "";
  if (olderCursor) {
    const earlier = document.createElement("button");
    earlier.id = "earlier";
    earlier.textContent = "Earlier messages";
    earlier.onclick = loadEarlier;
    box.append(earlier);
  }
  const all = conversation();
  for (const m of all) {
    if (m.role === "user" || m.role === "assistant" || m.role === "reasoning") {
      const text = typeof m.content === "string" ? m.content : textOf(m.content);
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
      const result = all.find((r) => r.role === "tool" && r.toolCallId === call.id);
      if (result) {
        const res = document.createElement("div");
        res.className = "result";
        res.textContent = `→ ${result.content}`;
        div.append(res);
      }
      box.append(div);
    }
    const answered = answeredInterrupt(m);
    if (answered) box.append(answered);
  }
  box.scrollTop = keepScroll ? box.scrollHeight - fromBottom : box.scrollHeight;
}

/** An interrupt the conversation keeps (an `iac-code.interrupt` activity message: the interrupt
 *  as announced and the answer it got, null until one was taken), drawn as a line: "Allowed",
 *  "Denied", the option chosen… An interrupt still waiting is the approval card instead. */
function answeredInterrupt(m) {
  if (m.role !== "activity" || m.activityType !== "iac-code.interrupt") return null;
  const { interrupt = {}, answer = null } = m.content || {};
  if (!answer && pending.some((p) => p.id === interrupt.id)) return null;
  const md = interrupt.metadata || {};
  const what = md.title || interrupt.message || "Approval";
  const payload = answer?.payload || {};
  let status = "open";
  let verdict = "not answered";
  if (answer?.status === "cancelled") [status, verdict] = ["cancelled", "Cancelled"];
  else if (answer && payload.decision) {
    const deny = payload.decision === "deny";
    [status, verdict] = [deny ? "denied" : "allowed", deny ? "Denied" : `Allowed (${payload.decision.replaceAll("_", " ")})`];
  } else if (answer) {
    const option = (md.standardOptions || []).find((o) => o.id === payload.selectedId);
    [status, verdict] = ["answered", `Answered: ${option?.title || payload.text || payload.value || JSON.stringify(payload)}`];
  }
  const div = document.createElement("div");
  div.className = "answered";
  div.dataset.interruptId = interrupt.id || "";
  div.dataset.status = status;
  const b = document.createElement("b");
  b.textContent = what;
  div.append(b, ` — ${verdict}`);
  return div;
}

/** The text parts of a multimodal user message. */
function textOf(content) {
  return Array.isArray(content) ? content.filter((p) => p.type === "text").map((p) => p.text).join("\n") : "";
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
   *  one this stream announced (its session event); before that, the thread lookup's (an ended
   *  one too: its join is the whole kept conversation). Without a cursor it asks for the newest
   *  page of the conversation only (`historyLimit`); older pages come from the history route. */
  async subscribe(cursor, known) {
    if (!known) {
      const t = await lookup();
      if (!t || !t.executionId || !t.runId) {
        // Nothing was ever run on it: nothing to join, not a failure.
        throw Object.assign(new Error("Nothing to join."), { final: true, ended: true });
      }
      current = { executionId: t.executionId, rosInvocationId: t.rosInvocationId, runId: t.runId };
    }
    const t = current;
    const h = { ...this.headers, "Content-Type": "application/json", Accept: "text/event-stream" };
    if (cursor) h["Last-Event-ID"] = cursor;
    const q = cursor ? "" : `?historyLimit=${PAGE}`;
    return this.fetch(`${EXT}/executions/${encodeURIComponent(t.executionId)}/subscribe${q}`, {
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
  const agent = new ConsoleAgent({ url: `${BASE}/`, threadId, headers: threadHeaders(), initialMessages: messages });
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

// A join of an execution that has ended carries only these: the conversation, nothing live.
const QUIET = new Set(["RUN_STARTED", "RUN_FINISHED", "MESSAGES_SNAPSHOT", "CUSTOM", "STATE_SNAPSHOT"]);

/** A subscriber that reflects one run on the page: its messages (through `show`, when it may
 *  show them), the execution it names, how it ends. `ending.outcome` is set at its end. */
function reflect(ending, show = () => true) {
  return {
    onEvent: ({ event }) => {
      if (!QUIET.has(event.type)) ending.live = true;
    },
    onMessagesChanged: ({ messages: m }) => {
      if (!show()) return;
      messages = m;
      render();
    },
    onRunStartedEvent: ({ event }) => {
      seenRuns.add(event.runId);
    },
    onMessagesSnapshotEvent: () => {
      joined = true;
    },
    onCustomEvent: ({ event }) => {
      if (event.name === "iac-code.session.v1") {
        const v = event.value;
        current = { executionId: v.executionId, rosInvocationId: v.rosInvocationId, runId: v.aguiRunId };
        updateButtons();
        openFeed(); // the thread exists now
        loadThreads(); // and is running
      }
    },
    onRunFinishedEvent: ({ outcome: kind, interrupts }) => {
      ending.outcome = kind;
      if (kind === "interrupt") {
        pending = interrupts || [];
        answers = new Map();
        renderApproval();
        updateButtons();
        setStatus("waiting", "waiting for approval");
      } else {
        pending = [];
        renderApproval();
        setStatus("done");
      }
    },
    onRunErrorEvent: ({ event }) => {
      ending.outcome = "error";
      pending = [];
      renderApproval();
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
      ending.outcome = "error";
      setStatus("error", "error");
      notice(describe(error));
    },
  };
}

/** Runs one stream of this tab (a run, or a join) and reflects it on the page. A join that
 *  carried nothing live (an ended execution: its whole conversation, then at once its end)
 *  leaves the status idle. */
async function drive(agent, start, { join: joining = false, idle = false } = {}) {
  streams++;
  notice("");
  setStatus("running");
  const ending = { outcome: null, live: false };
  let rejoin = false;
  try {
    await start(agent, reflect(ending));
  } catch (e) {
    rejoin = e instanceof Rejoin || e?.cause instanceof Rejoin;
    if (e?.message === "stopped") setStatus("stopped");
    else if (e?.ended || e?.cause?.ended) setStatus("idle");
    // An adapter without kept conversations has no join for an idle thread: nothing to show.
    else if (idle && (e?.status ?? e?.cause?.status) === 404) setStatus("idle");
    else if (!rejoin) {
      setStatus("error", "error");
      notice(describe(e));
    }
  } finally {
    streams--;
    stopRequested = false;
    updateButtons();
    if (ending.outcome === null && $("status").dataset.state === "running") setStatus("idle");
    if (joining && ending.outcome === "success" && !ending.live) setStatus("idle");
    loadThreads();
  }
  // The adapter could not continue the stream exactly (say it restarted): join the turn afresh.
  if (rejoin) return join();
  // The kept conversation is the reference (an answered approval shows as answered).
  await resync();
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
  const runId = `run-${crypto.randomUUID()}`;
  seenRuns.add(runId);
  await drive(agent, (a, s) => a.runAgent({ runId, forwardedProps: forwardedProps(inv) }, s));
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
  const runId = `run-${crypto.randomUUID()}`;
  seenRuns.add(runId);
  await drive(agent, (a, s) => a.runAgent({ runId, forwardedProps: forwardedProps(current.rosInvocationId), resume }, s));
}

async function stop() {
  if (!current) return;
  stopRequested = true;
  const resp = await fetch(`${EXT}/executions/${encodeURIComponent(current.executionId)}/cancel`, {
    method: "POST",
    headers: { ...threadHeaders(), "Content-Type": "application/json" },
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
  const resp = await fetch(`${EXT}/threads/${encodeURIComponent(threadId)}?${userQuery}`, { headers: headers() });
  if (resp.status === 404) return null; // a new thread
  if (!resp.ok) throw new Error(`Thread lookup failed: HTTP ${resp.status}`);
  return resp.json();
}

// ---- the conversation: join, then page back ---------------------------------------------------

/** A page of the kept conversation, newest first (`before`: the cursor of an older page). */
async function historyPage(before) {
  const q = `${userQuery}&limit=${PAGE}${before ? `&before=${encodeURIComponent(before)}` : ""}`;
  const resp = await fetch(`${EXT}/threads/${encodeURIComponent(threadId)}/messages?${q}`, { headers: headers() });
  if (!resp.ok) return null;
  return resp.json();
}

/** The newest page again, after a turn the feed showed: it also holds what the feed cannot
 *  carry (the other tab's own user message). `messages` keeps what precedes the page. */
async function resync() {
  const page = await historyPage(null).catch(() => null);
  if (!page || streams > 0) return;
  const ids = new Set(page.messages.map((m) => m.id));
  const first = messages.findIndex((m) => ids.has(m.id));
  const before = (first >= 0 ? messages.slice(0, first) : messages).filter((m) => !ids.has(m.id));
  messages = [...before, ...page.messages];
  render();
}

async function loadEarlier() {
  if (!olderCursor) return;
  const page = await historyPage(olderCursor).catch(() => null);
  if (!page) {
    notice("Earlier messages could not be loaded.");
    return;
  }
  const known = new Set(conversation().map((m) => m.id));
  older = [...page.messages.filter((m) => !known.has(m.id)), ...older];
  olderCursor = page.nextCursor;
  render({ keepScroll: true });
}

/** After a (re)load: the thread's whole conversation (the newest page of it) through a join,
 *  which for a running or waiting execution goes on with the live rest; meanwhile the history
 *  route gives the cursor of the older pages. */
async function join() {
  let t;
  try {
    t = await lookup();
  } catch (e) {
    setStatus("error", "error");
    notice(`Adapter unreachable: ${e.message}`);
    return;
  }
  if (!t) return; // a new thread: nothing yet
  openFeed();
  const first = historyPage(null)
    .then((page) => {
      if (!page) return;
      olderCursor = page.nextCursor;
      if (!joined && streams === 0 && messages.length === 0) messages = page.messages;
      render();
    })
    .catch(() => {});
  if (!t.executionId || !t.runId) return first;
  current = { executionId: t.executionId, rosInvocationId: t.rosInvocationId, runId: t.runId };
  await drive(newAgent(), (a, s) => a.connectAgent({}, s), { join: true, idle: t.state === "idle" });
  await first;
}

// ---- the thread's live feed: turns run by other tabs or clients -------------------------------
// GET …/threads/{threadId}/events stays open across runs and carries every run on the thread, as
// the run's own stream does, with `id:` cursors (a dropped feed resumes with Last-Event-ID). Each
// run it carries is reduced into the page's messages by @ag-ui/client itself (connectAgent on an
// agent whose connect() is that run's events), unless this tab runs or joined that run itself.
let feed = null;
let feedRun = null; // the feed's run in progress: {push, end} or {ignored: true}

function openFeed() {
  if (feed || !threadId) return;
  feed = { cursor: null };
  (async () => {
    for (let attempt = 0; attempt < 100; attempt++) {
      try {
        const h = { ...headers(), Accept: "text/event-stream" };
        if (feed.cursor) h["Last-Event-ID"] = feed.cursor;
        const resp = await fetch(`${EXT}/threads/${encodeURIComponent(threadId)}/events?${userQuery}`, { headers: h });
        if (resp.status === 404) {
          feed = null; // not a thread (yet): opened again once a run names it
          return;
        }
        if (resp.ok) {
          await readFrames(resp, (id, ev) => {
            if (id) feed.cursor = id;
            attempt = 0;
            onFeedEvent(ev);
          });
        }
      } catch {}
      // Dropped (or refused for now): the events after the cursor come on the next connection.
      if (feedRun && !feedRun.ignored) feedRun.end();
      feedRun = null;
      await sleep(backoff(attempt));
    }
  })();
}

function onFeedEvent(ev) {
  if (ev.type === "RUN_STARTED") {
    feedRun = streams > 0 || seenRuns.has(ev.runId) ? { ignored: true } : feedRunOf(ev);
    return;
  }
  if (!feedRun) return; // the rest of a run this page did not see start
  if (!feedRun.ignored) feedRun.push(ev);
  if (ev.type === "RUN_FINISHED" || ev.type === "RUN_ERROR") {
    if (!feedRun.ignored) feedRun.end();
    feedRun = null;
  }
}

/** A run seen on the feed, reduced by the client into the page's messages. */
function feedRunOf(started) {
  const queue = [started];
  let sink = null;
  let ended = false;
  const agent = newAgent();
  agent.connect = () =>
    new Observable((sub) => {
      sink = sub;
      queue.splice(0).forEach((e) => sub.next(e));
      if (ended) sub.complete();
    });
  seenRuns.add(started.runId);
  const ending = { outcome: null };
  setStatus("running", "running (another tab)");
  const done = agent
    .connectAgent({ runId: started.runId }, reflect(ending, () => streams === 0))
    .catch(() => {})
    .then(() => {
      updateButtons();
      loadThreads();
      return resync();
    });
  return {
    push: (e) => (sink ? sink.next(e) : queue.push(e)),
    end: () => {
      ended = true;
      sink?.complete();
      return done;
    },
  };
}

// ---- the user's threads (sidebar) ---------------------------------------------------------------

let threadsCursor = null;

/** The first page of the user's threads (most recently active first), or the next one. */
async function loadThreads(more = false) {
  const q = `${userQuery}&limit=20${more && threadsCursor ? `&cursor=${encodeURIComponent(threadsCursor)}` : ""}`;
  let page;
  try {
    const resp = await fetch(`${EXT}/threads?${q}`, { headers: headers() });
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    page = await resp.json();
  } catch (e) {
    $("thread-list-error").textContent = `Threads could not be listed: ${e.message}`;
    return;
  }
  $("thread-list-error").textContent = "";
  const list = $("threads");
  if (!more) list.textContent = "";
  for (const t of page.threads) {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.href = `#thread=${encodeURIComponent(t.threadId)}`;
    a.className = "thread";
    a.dataset.threadId = t.threadId;
    if (t.threadId === threadId) a.setAttribute("aria-current", "page");
    const title = document.createElement("span");
    title.className = "title";
    title.textContent = t.title || t.threadId;
    const meta = document.createElement("span");
    meta.className = "meta";
    meta.dataset.state = t.state;
    const when = new Date(t.updatedAt);
    const waiting = t.pendingInterrupts ? ` · ${t.pendingInterrupts} waiting` : "";
    meta.textContent = `${t.state}${waiting} · ${when.toLocaleString()}`;
    a.append(title, meta);
    li.append(a);
    list.append(li);
  }
  threadsCursor = page.nextCursor;
  $("more-threads").hidden = !threadsCursor;
}

$("send").onclick = send;
$("stop").onclick = stop;
$("new-thread").onclick = () => {
  location.hash = `#thread=${encodeURIComponent(`console-${crypto.randomUUID()}`)}`;
};
$("more-threads").onclick = () => loadThreads(true);
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    send();
  }
});
window.addEventListener("hashchange", () => location.reload());
// Other tabs and clients change the list too (titles, states): refreshed now and then.
setInterval(() => loadThreads(), 10_000);
loadThreads();
join();
