// The CopilotKit runtime's side of iac-code-agui: an `HttpAgent` pointed at the adapter, and a
// runner whose `connect` (a page's reload) re-attaches through the adapter's thread lookup and
// observe route. Used by server.mjs; see README "Chat frameworks" → "CopilotKit".
//
// What this agent adds to a plain `HttpAgent`, and why:
//  * A resume gets a fresh runId on the wire. CopilotKit 1.74's `useInterrupt` resumes with the
//    interrupted run's own runId; AG-UI makes a resume a new run (new runId), and the adapter
//    refuses a reused runId (409 RUN_ID_CONFLICT). The events it relays keep the runId CopilotKit
//    asked for, so CopilotKit's own bookkeeping is unchanged.
//  * forwardedProps.iacCode.cwd, .userId and .rosInvocationId are set here, not in the browser: the
//    workspace and the user the thread is bound to are the runtime's decision (a page that sets them
//    gets an error). A new turn gets a new rosInvocationId; a resume uses the thread's current one
//    (from the adapter's thread lookup). The rest of forwardedProps (runMode, pipelineName,
//    preferredLanguage, …) goes to the adapter as the page sent it.
//  * Stop: CopilotKit's stop button reaches `abortRun()` here (POST {runtime}/agent/{id}/stop/{thread}
//    → runner.stop → agent.abortRun). It calls the adapter's cancel extension; the run then ends
//    with the adapter's RUN_ERROR CANCELLED. Only if the cancel fails is the stream cut.
import { HttpAgent, randomUUID, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";
import { InMemoryAgentRunner } from "@copilotkit/runtime/v2";
import { from, map, mergeMap, tap } from "rxjs";

const SESSION_EVENT = "iac-code.session.v1";
// What only the runtime decides: the workspace, the user the thread is bound to, the invocation.
const RUNTIME_KEYS = ["cwd", "userId", "rosInvocationId"];

/** GET /extensions/iac-code/v1/threads/{threadId}?userId=…: the thread as the adapter sees it, or null. */
async function lookupThread(base, headers, threadId, userId) {
  const url = `${base}/extensions/iac-code/v1/threads/${encodeURIComponent(threadId)}?userId=${encodeURIComponent(userId)}`;
  const resp = await fetch(url, { headers });
  if (resp.status === 404) return null;
  if (!resp.ok) throw new Error(`iac-code-agui thread lookup: HTTP ${resp.status}`);
  return resp.json();
}

export class IacCodeAgent extends HttpAgent {
  /** @param {{url: string, cwd: string, userId: string, headers?: object}} config */
  constructor(config) {
    super(config);
    this.base = config.url.replace(/\/+$/, "");
    this.cwd = config.cwd;
    this.userId = config.userId;
    this.session = null;
  }

  // The runtime clones the agent for every request (AbstractAgent.clone copies only its own fields).
  clone() {
    const copy = super.clone();
    Object.assign(copy, { base: this.base, cwd: this.cwd, userId: this.userId, session: null });
    return copy;
  }

  run(input) {
    const resuming = Array.isArray(input.resume) && input.resume.length > 0;
    return from(this.wireInput(input, resuming)).pipe(
      mergeMap((wire) => super.run(wire).pipe(
        tap((ev) => {
          if (ev.type === "CUSTOM" && ev.name === SESSION_EVENT) this.session = ev.value;
        }),
        // CopilotKit keeps its own runId for this run; the adapter saw the fresh one.
        map((ev) => (ev.runId === wire.runId && wire.runId !== input.runId ? { ...ev, runId: input.runId } : ev)),
      )),
    );
  }

  async wireInput(input, resuming) {
    const { iacCode: fromPage = {}, ...otherProps } = input.forwardedProps ?? {};
    for (const k of RUNTIME_KEYS) {
      if (fromPage[k] !== undefined) {
        throw new Error(`forwardedProps.iacCode.${k} is set by the CopilotKit runtime (contrib/frameworks/copilotkit/agent.mjs), not by the page: remove it from <CopilotKit properties>.`);
      }
    }
    // Anything else the page sends goes to the adapter as sent: what the adapter does not know it
    // refuses (400 INVALID_INPUT naming the field), rather than this runtime dropping it silently.
    const iacCode = { ...fromPage, schemaVersion: fromPage.schemaVersion ?? 1, cwd: this.cwd, userId: this.userId };
    if (resuming) {
      const t = await lookupThread(this.base, this.headers, input.threadId, this.userId);
      iacCode.rosInvocationId = t?.rosInvocationId ?? `inv-${randomUUID()}`;
    } else {
      iacCode.rosInvocationId = `inv-${randomUUID()}`;
    }
    return {
      ...input,
      runId: resuming ? randomUUID() : input.runId,
      forwardedProps: { ...otherProps, iacCode },
    };
  }

  abortRun() {
    const s = this.session;
    if (!s?.executionId) return super.abortRun();
    const url = `${this.base}/extensions/iac-code/v1/executions/${encodeURIComponent(s.executionId)}/cancel`;
    fetch(url, {
      method: "POST",
      headers: { ...this.headers, "Content-Type": "application/json" },
      body: JSON.stringify({ threadId: this.threadId, rosInvocationId: s.rosInvocationId }),
    })
      .then((resp) => {
        if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
        // The adapter ends the run (RUN_ERROR CANCELLED); cut the stream only if it does not.
        setTimeout(() => super.abortRun(), 20000).unref?.();
      })
      .catch((e) => {
        console.error("iac-code-agui cancel failed, cutting the stream:", e.message);
        super.abortRun();
      });
  }
}

/**
 * The runtime's runner: CopilotKit's in-memory runner, plus a `connect` (what a reloaded page
 * calls) that finds a running or waiting execution through the adapter's thread lookup and
 * re-attaches with its observe route. A thread the adapter has nothing live for is replayed
 * from this runtime's memory (the finished turns it relayed, while this process lives).
 */
export class IacCodeRunner extends InMemoryAgentRunner {
  /** @param {{url: string, userId: string, headers?: object}} config */
  constructor(config) {
    super();
    this.base = config.url.replace(/\/+$/, "");
    this.userId = config.userId;
    this.headers = config.headers ?? {};
  }

  connect(request) {
    return from(lookupThread(this.base, this.headers, request.threadId, this.userId).catch(() => null)).pipe(
      mergeMap((t) => {
        if (!t || t.state === "idle" || !t.runId) return super.connect(request);
        const body = { threadId: request.threadId, runId: t.runId, rosInvocationId: t.rosInvocationId };
        const url = `${this.base}/extensions/iac-code/v1/executions/${encodeURIComponent(t.executionId)}/subscribe`;
        return transformHttpEventStream(runHttpRequest(() => fetch(url, {
          method: "POST",
          headers: { ...this.headers, "Content-Type": "application/json", Accept: "text/event-stream" },
          body: JSON.stringify(body),
        })));
      }),
    );
  }
}

