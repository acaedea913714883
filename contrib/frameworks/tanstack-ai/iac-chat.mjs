// TanStack AI's ChatClient (@tanstack/ai-client 0.33.2) against iac-code-agui: the minimal setup.
//
//   import { createIacChat } from "./iac-chat.mjs";
//   const iac = createIacChat({ adapterUrl: "http://127.0.0.1:41243", cwd: "/srv/work/project-1" });
//   await iac.send("Describe a VPC template");      // a turn (new rosInvocationId)
//   await iac.answer({ [iac.chat.getInterrupts()[0].id]: { decision: "allow_once" } });  // an approval
//   await iac.stop();                                // Stop: the adapter's cancel extension
//
// What it sets, and why:
// - forwardedProps.iacCode comes from the connection's `body` (a function, read per request), so a
//   new turn gets a new rosInvocationId and its resumes keep it (the spec's rule).
// - No `tools` on the ChatClient: the adapter refuses a non-empty `tools` (client-defined tools
//   are not supported), and TanStack sends every client tool it was given.
// - `Accept: text/event-stream` (TanStack sends only Content-Type and its own X-Run-Id).
// - Answering an interrupt: TanStack 0.33.2 lists our interrupts (chat.getInterrupts(), each with
//   id, message, responseSchema, metadata) but marks them `kind: "unbound"`, `canResolve: false`: its
//   bound API (resolveInterrupt/resolveInterrupts) answers only interrupts that carry its own
//   `metadata["tanstack:interruptBinding"]`. `answer()` below sends the standard resume through its
//   documented escape hatch, `chat.resumeInterruptsUnsafe(resume)` (a new run: new runId,
//   parentRunId = the interrupted run, the same rosInvocationId). TanStack validates nothing
//   against a JSON `responseSchema`; the adapter does (a payload that does not fit is a RUN_ERROR
//   and the interrupt stays answerable).
// - The session event (CUSTOM iac-code.session.v1) arrives through `onCustomEvent`; it holds the
//   executionId that Stop needs.
import { ChatClient, fetchServerSentEvents } from "@tanstack/ai-client";

const SESSION_EVENT = "iac-code.session.v1";

export function createIacChat({ adapterUrl, cwd, threadId = crypto.randomUUID(), token,
  iacCode = {}, fetchClient, onCustomEvent, ...chatOptions }) {
  const base = adapterUrl.replace(/\/+$/, "");
  const headers = { Accept: "text/event-stream", ...(token ? { Authorization: `Bearer ${token}` } : {}) };
  let rosInvocationId = null;
  let session = null; // the newest iac-code.session.v1 value: executionId, rosInvocationId, ...

  const connection = fetchServerSentEvents(`${base}/`, () => ({
    headers,
    ...(fetchClient ? { fetchClient } : {}),
    body: { iacCode: { schemaVersion: 1, rosInvocationId, cwd, ...iacCode } },
  }));

  const chat = new ChatClient({
    ...chatOptions,
    connection,
    threadId,
    onCustomEvent(name, value, context) {
      if (name === SESSION_EVENT && value && typeof value === "object") session = value;
      onCustomEvent?.(name, value, context);
    },
  });

  return {
    chat,
    threadId,
    get session() { return session; },
    /** A new turn: a new rosInvocationId (kept by the interrupt resumes that follow). */
    send(text) {
      rosInvocationId = `inv-${crypto.randomUUID()}`;
      return chat.sendMessage(text);
    },
    /** Answers every pending interrupt: `responses` maps interrupt id -> payload (in the shape its
     *  responseSchema asks, e.g. {decision: "allow_once"}); an id left out is answered cancelled
     *  (a cancelled permission is a deny). Resolves when the resume run has ended. */
    answer(responses) {
      const pending = chat.getInterrupts();
      if (!pending.length) throw new Error("no pending interrupt");
      const resume = pending.map((it) => (it.id in responses
        ? { interruptId: it.id, status: "resolved", payload: responses[it.id] }
        : { interruptId: it.id, status: "cancelled" }));
      return chat.resumeInterruptsUnsafe(resume);
    },
    /** Stop: cancels the running (or waiting) execution; the stream then ends with RUN_ERROR
     *  code CANCELLED, which a page shows as stopped. Returns the extension's JSON answer. */
    async stop() {
      if (!session) throw new Error("no execution to stop yet (the session event has not arrived)");
      const res = await (fetchClient ?? fetch)(
        `${base}/extensions/iac-code/v1/executions/${encodeURIComponent(session.executionId)}/cancel`,
        {
          method: "POST",
          headers: { "Content-Type": "application/json", ...headers, Accept: "application/json" },
          body: JSON.stringify({ threadId, rosInvocationId: session.rosInvocationId }),
        });
      const answer = await res.json();
      if (!res.ok) throw new Error(`cancel: ${res.status} ${JSON.stringify(answer)}`);
      return answer;
    },
  };
}
