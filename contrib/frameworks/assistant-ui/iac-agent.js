// The AG-UI agent that assistant-ui's useAgUiRuntime drives, pointed at iac-code-agui.
// @ag-ui/client 0.0.59 (what @assistant-ui/react-ag-ui 0.0.58 depends on).
//
// What it adds to HttpAgent, and why:
// - forwardedProps.iacCode (assistant-ui fills forwardedProps only from the model context's
//   callSettings/config and runConfig.custom; register none of those, the adapter uses only iacCode).
//   A new turn gets a new rosInvocationId; a resume (input.resume) keeps the turn's.
// - The session event (CUSTOM iac-code.session.v1) is kept: Stop needs its executionId.
// - Stop: assistant-ui's cancel calls abortRun(); here it first asks the adapter's cancel extension
//   to cancel the execution (also one that waits at an approval), then drops the stream.
// - Re-attach after a reload (today's join): lookup() asks the thread route; when the thread has a
//   running or waiting execution, joinNext() makes the next run read the observe route instead of
//   POSTing a turn: a valid AG-UI run (RUN_STARTED, session, MESSAGES_SNAPSHOT, the live rest, and
//   RUN_FINISHED with the pending interrupts), so assistant-ui redraws the conversation and the
//   approval card.
import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";

const SESSION_EVENT = "iac-code.session.v1";
const EXT = "/extensions/iac-code/v1";

export class IacAgent extends HttpAgent {
  constructor({ adapterUrl, cwd, userId, token, threadId, iacCode = {} }) {
    const base = adapterUrl.replace(/\/+$/, "");
    super({ url: `${base}/`, threadId, headers: token ? { Authorization: `Bearer ${token}` } : {} });
    this.base = base;
    this.iacCode = { schemaVersion: 1, cwd, ...(userId ? { userId } : {}), ...iacCode };
    this.rosInvocationId = null;
    this.session = null;
    this.join = null;
    this.subscribe({
      onCustomEvent: ({ event }) => {
        if (event.name === SESSION_EVENT) {
          this.session = event.value;
          this.rosInvocationId = event.value.rosInvocationId;
        }
      },
    });
  }

  run(input) {
    if (this.join) {
      const join = this.join;
      this.join = null;
      return this.stoppable(this.observe(join, input));
    }
    if (!input.resume || !this.rosInvocationId) this.rosInvocationId = `inv-${crypto.randomUUID()}`;
    const forwardedProps = {
      ...input.forwardedProps,
      iacCode: { ...this.iacCode, rosInvocationId: this.rosInvocationId },
    };
    return this.stoppable(super.run({ ...input, forwardedProps }));
  }

  // After Stop, the dropped fetch fails in Chromium as "BodyStreamBuffer was aborted", which reaches
  // assistant-ui as a failed run (it then shows the message as failed, not stopped). Raised here
  // as an AbortError instead, which assistant-ui shows as cancelled.
  stoppable(source) {
    this.stopped = false;
    return new source.constructor((sub) => source.subscribe({
      next: (v) => (this.stopped && v?.type === "RUN_ERROR"
        ? sub.error(new DOMException("Stopped by the user", "AbortError")) : sub.next(v)),
      error: (e) => sub.error(this.stopped ? new DOMException("Stopped by the user", "AbortError") : e),
      complete: () => sub.complete(),
    }));
  }

  /** GET the thread route: {threadId, executionId, state: idle|running|waiting, runId,
   *  rosInvocationId, interrupts} or null (no such thread for this user). */
  async lookup() {
    const q = this.iacCode.userId ? `userId=${encodeURIComponent(this.iacCode.userId)}`
      : `rosInvocationId=${encodeURIComponent(this.rosInvocationId ?? "")}`;
    const res = await this.fetch(`${this.base}${EXT}/threads/${encodeURIComponent(this.threadId)}?${q}`,
      { headers: { ...this.headers, Accept: "application/json" } });
    if (res.status === 404) return null;
    if (!res.ok) throw new Error(`thread lookup: HTTP ${res.status}`);
    return res.json();
  }

  /** The next run re-attaches to the thread's execution (from lookup()) instead of POSTing. */
  joinNext(thread) {
    this.join = thread;
    this.rosInvocationId = thread.rosInvocationId;
  }

  observe(thread, input) {
    const url = `${this.base}${EXT}/executions/${encodeURIComponent(thread.executionId)}/subscribe`;
    return transformHttpEventStream(runHttpRequest(() => this.fetch(url, {
      method: "POST",
      headers: { ...this.headers, "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify({ threadId: thread.threadId, runId: thread.runId,
        rosInvocationId: thread.rosInvocationId }),
      signal: this.abortController.signal,
    })), this.debugLogger);
  }

  /** Stop: the cancel extension (a running or a waiting execution), and the stream is dropped at
   *  once: assistant-ui shows the message as cancelled, not failed (waiting for the stream's own
   *  RUN_ERROR CANCELLED would show it as an error). */
  abortRun() {
    const s = this.session;
    this.stopped = true;
    if (s) {
      this.fetch(`${this.base}${EXT}/executions/${encodeURIComponent(s.executionId)}/cancel`, {
        method: "POST",
        keepalive: true,
        headers: { ...this.headers, "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify({ threadId: this.threadId, rosInvocationId: s.rosInvocationId }),
      }).catch(() => {});
    }
    super.abortRun();
  }
}
