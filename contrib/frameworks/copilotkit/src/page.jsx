// The page: CopilotKit's <CopilotKit> + <CopilotChat> (react-core 1.74.0, its v2 entry), a
// useInterrupt card that answers each interrupt in the shape its responseSchema asks for, and the
// default tool-call renderer. The thread id lives in the URL hash, so a reload finds the thread
// again (the runtime's connect re-attaches through the adapter; see agent.mjs).
//   ?mode=pipeline   runs the kernel's `selling` pipeline (forwardedProps.iacCode.runMode)
import React from "react";
import { createRoot } from "react-dom/client";
import { CopilotKit, CopilotChat, useInterrupt, useDefaultRenderTool } from "@copilotkit/react-core/v2";
import "@copilotkit/react-core/v2/styles.css";

const params = new URLSearchParams(location.search);
let threadId = new URLSearchParams(location.hash.slice(1)).get("thread");
if (!threadId) {
  threadId = `copilotkit-${crypto.randomUUID()}`;
  history.replaceState(null, "", `${location.search}#thread=${encodeURIComponent(threadId)}`);
}
// The page chooses only what the runtime lets through (agent.mjs): the run mode and the language.
const iacCode = params.get("mode") === "pipeline" ? { runMode: "pipeline", pipelineName: "selling" } : {};
iacCode.preferredLanguage = navigator.language;

const LABELS = { allow_once: "Allow", deny: "Deny" };

/** One interrupt: buttons (or a text field) for each answer its responseSchema allows. */
function InterruptCard({ interrupt, resolve }) {
  const [busy, setBusy] = React.useState(false);
  const [text, setText] = React.useState("");
  const answer = (payload) => {
    setBusy(true);
    resolve(payload, interrupt.id).catch((e) => console.error("resume failed", e));
  };
  const schema = interrupt.responseSchema || {};
  const md = interrupt.metadata || {};
  const buttons = [];
  let freeText = null;
  for (const value of schema.properties?.decision?.enum || []) {
    buttons.push({ key: value, label: LABELS[value] || value, payload: { decision: value } });
  }
  for (const branch of schema.oneOf || schema.anyOf || []) {
    const props = branch.properties || {};
    if (props.selectedId?.const !== undefined) {
      const id = props.selectedId.const;
      buttons.push({ key: `opt-${id}`, label: props.selectedId.title || branch.title || id, payload: { selectedId: id } });
    } else if (props.freeText) freeText = "freeText";
    else if (props.value && !freeText) freeText = "value";
  }
  return (
    <div className="iac-interrupt" data-interrupt-id={interrupt.id} data-kind={md.kind || ""}>
      <h3>{md.title || (md.kind === "permission" ? "Permission needed" : "Your answer is needed")}</h3>
      <p className="iac-interrupt-message">{interrupt.message}</p>
      {md.safeSummary || md.purpose ? <p className="iac-interrupt-summary">{md.safeSummary || md.purpose}</p> : null}
      <div className="iac-interrupt-actions">
        {buttons.map((b) => (
          <button key={b.key} data-choice={b.key} disabled={busy} onClick={() => answer(b.payload)}>
            {b.label}
          </button>
        ))}
      </div>
      {freeText ? (
        <form onSubmit={(e) => { e.preventDefault(); if (text.trim()) answer({ [freeText]: text.trim() }); }}>
          <input data-free-text value={text} disabled={busy} onChange={(e) => setText(e.target.value)} placeholder="Or type an answer" />
          <button type="submit" data-choice="free-text" disabled={busy || !text.trim()}>Send</button>
        </form>
      ) : null}
    </div>
  );
}

function IacCode() {
  useDefaultRenderTool();
  useInterrupt({
    render: ({ interrupts, resolve }) => (
      <div className="iac-interrupts">
        {interrupts.map((it) => <InterruptCard key={it.id} interrupt={it} resolve={resolve} />)}
      </div>
    ),
  });
  return null;
}

/** What a failed run or request says, for the page: the adapter's `{"error":{code,message}}` (which
 *  the runtime passes on as "HTTP 409: {…}") or the error's own message. */
function describe(error) {
  const text = String(error?.message ?? error ?? "");
  const json = text.indexOf("{");
  try {
    const e = JSON.parse(text.slice(json)).error;
    if (e?.code) return { code: e.code, message: e.message };
  } catch {
    /* not the adapter's JSON */
  }
  const code = /\b([A-Z]+(?:_[A-Z]+)+)\b/.exec(text)?.[1];
  return { code, message: text };
}

function App() {
  // CopilotKit shows errors in a banner only on localhost (its dev console): the page shows them
  // itself. A user's own Stop ends the run with CANCELLED: shown as stopped, not as a failure.
  const [error, setError] = React.useState(null);
  const onError = React.useCallback(({ error: e }) => setError(describe(e)), []);
  return (
    <CopilotKit runtimeUrl="/api/copilotkit" properties={{ iacCode }} showDevConsole={false}>
      <IacCode />
      <div className="iac-page">
        <header>iac-code · CopilotKit <code data-thread>{threadId}</code></header>
        {error ? (
          <div className={error.code === "CANCELLED" ? "iac-note" : "iac-error"} role="alert" data-code={error.code || ""}>
            {error.code === "CANCELLED" ? "Stopped." : `${error.code ? `${error.code}: ` : ""}${error.message}`}
            <button onClick={() => setError(null)} aria-label="Dismiss">×</button>
          </div>
        ) : null}
        <CopilotChat agentId="default" threadId={threadId} onError={onError} />
      </div>
    </CopilotKit>
  );
}

createRoot(document.getElementById("root")).render(<App />);
