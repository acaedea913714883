// NOT the contrib setup: the example's agent (contrib/frameworks/assistant-ui/iac-agent.js) under a
// page that also uses assistant-ui features the adapter does not take: a frontend tool
// (useAssistantTool -> RunAgentInput.tools), instructions (useAssistantInstructions -> context) and
// model call settings (a model context provider's callSettings -> forwardedProps). The test records
// what is sent and what the page shows.
import React from "react";
import { createRoot } from "react-dom/client";
import {
  AssistantRuntimeProvider, ComposerPrimitive, ErrorPrimitive, MessagePrimitive, ThreadPrimitive,
  useAssistantInstructions, useAssistantTool, useAui,
} from "@assistant-ui/react";
import { useAgUiRuntime } from "@assistant-ui/react-ag-ui";
import { IacAgent } from "../../../contrib/frameworks/assistant-ui/iac-agent.js";

const params = new URLSearchParams(location.search);
const agent = new IacAgent({ adapterUrl: params.get("adapter"), cwd: params.get("cwd"), threadId: crypto.randomUUID() });
const errors = [];
const useTool = params.get("tool") === "1";

function Extras() {
  const aui = useAui();
  useAssistantInstructions("Answer in one sentence.");
  useAssistantTool({ toolName: "show_map", description: "Shows a map in the page",
    parameters: { type: "object", properties: { region: { type: "string" } } },
    execute: async () => "shown", disabled: !useTool });
  React.useEffect(() => aui.modelContext?.()?.register?.({ getModelContext: () => ({ callSettings: { temperature: 0.1 } }) }), []);
  return null;
}
const Text = ({ text }) => <div className="text">{text}</div>;
const Assistant = () => (
  <MessagePrimitive.Root className="msg assistant">
    <MessagePrimitive.Parts components={{ Text }} />
    <MessagePrimitive.Error><ErrorPrimitive.Root className="error"><ErrorPrimitive.Message /></ErrorPrimitive.Root></MessagePrimitive.Error>
  </MessagePrimitive.Root>
);
function App() {
  const runtime = useAgUiRuntime({ agent, onError: (e) => { errors.push(String(e?.message ?? e)); window.runErrors = errors; } });
  return (
    <AssistantRuntimeProvider runtime={runtime}>
      <Extras />
      <ThreadPrimitive.Root>
        <ThreadPrimitive.Messages components={{ UserMessage: () => null, AssistantMessage: Assistant }} />
        <ComposerPrimitive.Root>
          <ComposerPrimitive.Input className="input" />
          <ComposerPrimitive.Send className="send">Send</ComposerPrimitive.Send>
        </ComposerPrimitive.Root>
      </ThreadPrimitive.Root>
    </AssistantRuntimeProvider>
  );
}
createRoot(document.getElementById("root")).render(<App />);
