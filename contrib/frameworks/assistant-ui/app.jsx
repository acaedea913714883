// assistant-ui (@assistant-ui/react 0.15.22 + @assistant-ui/react-ag-ui 0.0.58) against
// iac-code-agui: a thread with streamed text, reasoning and tool calls, one card for every
// interrupt (permission, pipeline question, candidate selection), Stop, and re-attach on load.
//
// Configuration (query string): adapter (the adapter's origin; default: this page's origin),
// cwd (the workspace), user (the userId the thread is bound to), thread (a thread id to open;
// default: a new one, kept in the URL so that a reload finds the conversation again),
// mode=pipeline&pipeline=selling (a pipeline run instead of a normal turn).
import React, { useEffect, useMemo, useState } from "react";
import { createRoot } from "react-dom/client";
import {
  AssistantRuntimeProvider, ComposerPrimitive, ErrorPrimitive, MessagePrimitive, ThreadPrimitive, useAui,
} from "@assistant-ui/react";
import {
  useAgUiInterrupts, useAgUiRuntime, useAgUiSubmitInterruptResponses,
} from "@assistant-ui/react-ag-ui";
import { IacAgent } from "./iac-agent.js";

const params = new URLSearchParams(location.search);
const reopened = params.has("thread");
const threadId = params.get("thread") || crypto.randomUUID();
if (!reopened) {
  params.set("thread", threadId);
  history.replaceState(null, "", `?${params}`);
}
const agent = new IacAgent({
  adapterUrl: params.get("adapter") || location.origin,
  cwd: params.get("cwd"),
  userId: params.get("user") || undefined,
  threadId,
  iacCode: params.get("mode") === "pipeline"
    ? { runMode: "pipeline", pipelineName: params.get("pipeline") || "selling" } : {},
});
window.iacAgent = agent; // for the tests

const Text = ({ text }) => <div className="text">{text}</div>;
const Reasoning = ({ text }) => <details className="reasoning" open><summary>Reasoning</summary>{text}</details>;
const Tool = ({ toolName, argsText, result }) => (
  <div className="tool" data-tool={toolName}>
    <b>{toolName}</b> <code>{argsText}</code>
    {result !== undefined && <div className="result">{typeof result === "string" ? result : JSON.stringify(result)}</div>}
  </div>
);
const parts = { Text, Reasoning, tools: { Fallback: Tool } };

const UserMessage = () => (
  <MessagePrimitive.Root className="msg user"><MessagePrimitive.Parts components={parts} /></MessagePrimitive.Root>
);
const AssistantMessage = () => (
  <MessagePrimitive.Root className="msg assistant">
    <MessagePrimitive.Parts components={parts} />
    <MessagePrimitive.Error><ErrorPrimitive.Root className="error"><ErrorPrimitive.Message /></ErrorPrimitive.Root></MessagePrimitive.Error>
  </MessagePrimitive.Root>
);

// The choices an interrupt offers, from its responseSchema (the spec: render from responseSchema
// and metadata, not from reason): a permission's decision enum, a selection's selectedId consts,
// else free text.
function choicesOf(it) {
  const s = it.responseSchema || {};
  const labels = Object.fromEntries((it.metadata?.options || []).map((o) => [o.id, o.label || o.title || o.id]));
  const decision = s.properties?.decision?.enum;
  if (decision) return decision.map((id) => ({ id, label: labels[id] || id, payload: { decision: id } }));
  const alts = (s.oneOf || s.anyOf || []).filter((a) => a.properties?.selectedId?.const !== undefined);
  return alts.map((a) => {
    const id = a.properties.selectedId.const;
    return { id, label: labels[id] || id, payload: { selectedId: id } };
  });
}
const takesFreeText = (it) => {
  const s = it.responseSchema || {};
  return !!(s.properties?.freeText || (s.oneOf || s.anyOf || []).some((a) => a.properties?.freeText));
};

function Interrupts() {
  const pending = useAgUiInterrupts();
  const submit = useAgUiSubmitInterruptResponses();
  const [answers, setAnswers] = useState({});
  const [text, setText] = useState("");
  useEffect(() => setAnswers({}), [pending]);
  if (!pending.length) return null;
  const answer = (it, payload) => {
    const next = { ...answers, [it.id]: payload };
    setAnswers(next);
    if (pending.every((p) => p.id in next)) {
      submit(pending.map((p) => ({ interruptId: p.id, status: "resolved", payload: next[p.id] })))
        .catch((e) => console.error("resume failed", e));
    }
  };
  return (
    <div className="interrupts">
      {pending.map((it) => (
        <div className="interrupt" key={it.id} data-interrupt={it.id} data-kind={it.metadata?.kind}>
          <div className="title">{it.metadata?.title || it.reason}</div>
          <div className="message">{it.message}</div>
          {it.metadata?.safeSummary && <code className="summary">{it.metadata.safeSummary}</code>}
          <div className="choices">
            {choicesOf(it).map((c) => (
              <button key={c.id} data-choice={c.id} disabled={it.id in answers}
                onClick={() => answer(it, c.payload)}>{c.label}</button>
            ))}
          </div>
          {takesFreeText(it) && (
            <div className="free">
              <input value={text} onChange={(e) => setText(e.target.value)} placeholder="Your answer" />
              <button data-choice="free-text" disabled={!text || it.id in answers}
                onClick={() => answer(it, { freeText: text })}>Answer</button>
            </div>
          )}
        </div>
      ))}
    </div>
  );
}

// On load: if the thread has a running or waiting execution, re-attach to it (thread route, then
// the observe route) as a run of its own, which brings back the whole conversation and the approval
// card; a thread whose turns have ended is not re-attached.
function Rejoin() {
  const aui = useAui();
  const [note, setNote] = useState("");
  useEffect(() => {
    if (!reopened) return;
    agent.lookup().then((t) => {
      if (t && (t.state === "running" || t.state === "waiting")) {
        agent.joinNext(t);
        aui.thread().resumeRun({ parentId: null });
        setNote(`re-attached to a ${t.state} execution`);
      } else setNote(t ? `thread ${t.state}` : "");
    }).catch((e) => setNote(`lookup failed: ${e.message}`));
  }, []);
  return note ? <div className="rejoin">{note}</div> : null;
}

function App() {
  const runtime = useAgUiRuntime({ agent, showThinking: true, onError: (e) => console.error("run error", e) });
  return (
    <AssistantRuntimeProvider runtime={runtime}>
      <ThreadPrimitive.Root className="thread">
        <Rejoin />
        <ThreadPrimitive.Viewport className="viewport">
          <ThreadPrimitive.Messages components={{ UserMessage, AssistantMessage }} />
          <Interrupts />
        </ThreadPrimitive.Viewport>
        <ComposerPrimitive.Root className="composer">
          <ComposerPrimitive.Input placeholder="Ask iac-code" className="input" />
          <ThreadPrimitive.If running={false}><ComposerPrimitive.Send className="send">Send</ComposerPrimitive.Send></ThreadPrimitive.If>
          <ThreadPrimitive.If running><ComposerPrimitive.Cancel className="stop">Stop</ComposerPrimitive.Cancel></ThreadPrimitive.If>
        </ComposerPrimitive.Root>
      </ThreadPrimitive.Root>
    </AssistantRuntimeProvider>
  );
}

createRoot(document.getElementById("root")).render(<App />);
