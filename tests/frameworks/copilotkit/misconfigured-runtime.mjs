// A MISCONFIGURED CopilotKit runtime, for the test of what its page then shows: the shipped one
// (contrib/frameworks/copilotkit/server.mjs, same page, same agent) except that its agent sends a
// resume with the runId CopilotKit gives it, as a plain `HttpAgent` does. CopilotKit's useInterrupt
// gives the interrupted run's own runId, which AG-UI forbids; the adapter answers 409 RUN_ID_CONFLICT.
//   IAC_CODE_AGUI_URL=… IAC_CODE_CWD=… IAC_CODE_USER_ID=… PORT=… node misconfigured-runtime.mjs <contrib dir>
import http from "node:http";
import { readFile } from "node:fs/promises";
import { extname, join } from "node:path";
import { pathToFileURL } from "node:url";

const CK = process.argv[2];
process.env.COPILOTKIT_TELEMETRY_DISABLED ??= "true";
const load = (spec) => import(pathToFileURL(join(CK, "node_modules", spec)).href);
const { CopilotRuntime, createCopilotRuntimeHandler } = await load("@copilotkit/runtime/dist/v2/index.mjs");
const { createCopilotNodeHandler } = await load("@copilotkit/runtime/dist/v2/node.mjs");
const { IacCodeAgent, IacCodeRunner } = await import(pathToFileURL(join(CK, "agent.mjs")).href);

class PlainRunIdAgent extends IacCodeAgent {
  async wireInput(input, resuming) {
    return { ...(await super.wireInput(input, resuming)), runId: input.runId };
  }
}

const ADAPTER = process.env.IAC_CODE_AGUI_URL;
const USER = process.env.IAC_CODE_USER_ID;
const runtime = new CopilotRuntime({
  agents: { default: new PlainRunIdAgent({ url: `${ADAPTER}/`, cwd: process.env.IAC_CODE_CWD, userId: USER }) },
  runner: new IacCodeRunner({ url: ADAPTER, userId: USER }),
});
const copilot = createCopilotNodeHandler(createCopilotRuntimeHandler({ runtime, basePath: "/api/copilotkit" }));
const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css" };
const server = http.createServer(async (req, res) => {
  const path = new URL(req.url, "http://x").pathname;
  if (path.startsWith("/api/copilotkit")) return copilot(req, res);
  const file = path === "/" ? "index.html" : path.slice(1);
  const body = file.includes("..") ? null : await readFile(join(CK, file)).catch(() => null);
  if (!body) return void res.writeHead(404).end();
  res.writeHead(200, { "Content-Type": TYPES[extname(file)] || "application/octet-stream" }).end(body);
});
server.listen(Number(process.env.PORT), "127.0.0.1", () => console.log(`misconfigured runtime on ${server.address().port}`));
