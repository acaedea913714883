// The CopilotKit runtime (Node) in front of iac-code-agui, and the page (dist/, built by build.mjs).
//
//   IAC_CODE_AGUI_URL=http://127.0.0.1:41243 IAC_CODE_CWD=/srv/work node server.mjs
//
//   IAC_CODE_AGUI_URL  the adapter (default http://127.0.0.1:41243)
//   IAC_CODE_CWD       the workspace every run works in (forwardedProps.iacCode.cwd; the adapter's
//                      --allowed-cwds must hold it)
//   IAC_CODE_USER_ID   the user threads are bound to (default copilotkit-user). A real console takes
//                      it from its own login, per request.
//   IAC_CODE_AGUI_AUTH_TOKEN  the adapter's bearer token, when it has one
//   HOST, PORT         where this server listens (default 127.0.0.1:3000)
import http from "node:http";
import { readFile } from "node:fs/promises";
import { extname, join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

// Read by the runtime's telemetry client when it is imported: set it before.
process.env.COPILOTKIT_TELEMETRY_DISABLED ??= "true";
const { CopilotRuntime, createCopilotRuntimeHandler } = await import("@copilotkit/runtime/v2");
const { createCopilotNodeHandler } = await import("@copilotkit/runtime/v2/node");
const { IacCodeAgent, IacCodeRunner } = await import("./agent.mjs");

const ADAPTER = (process.env.IAC_CODE_AGUI_URL || "http://127.0.0.1:41243").replace(/\/+$/, "");
const CWD = process.env.IAC_CODE_CWD || process.cwd();
const USER = process.env.IAC_CODE_USER_ID || "copilotkit-user";
const TOKEN = process.env.IAC_CODE_AGUI_AUTH_TOKEN || "";
const headers = TOKEN ? { Authorization: `Bearer ${TOKEN}` } : {};

const runtime = new CopilotRuntime({
  agents: { default: new IacCodeAgent({ url: `${ADAPTER}/`, cwd: CWD, userId: USER, headers }) },
  runner: new IacCodeRunner({ url: ADAPTER, userId: USER, headers }),
});
const copilot = createCopilotNodeHandler(createCopilotRuntimeHandler({ runtime, basePath: "/api/copilotkit" }));

const HERE = dirname(fileURLToPath(import.meta.url));
const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css",
  ".woff2": "font/woff2", ".woff": "font/woff", ".ttf": "font/ttf" };

const server = http.createServer(async (req, res) => {
  try {
    const path = new URL(req.url, "http://x").pathname;
    if (path.startsWith("/api/copilotkit")) return await copilot(req, res);
    const file = path === "/" ? "index.html" : path.slice(1);
    if (file.includes("..") || !(file === "index.html" || file.startsWith("dist/"))) {
      res.writeHead(404).end();
      return;
    }
    const body = await readFile(join(HERE, file)).catch(() => null);
    if (!body) return void res.writeHead(404).end();
    res.writeHead(200, { "Content-Type": TYPES[extname(file)] || "application/octet-stream" }).end(body);
  } catch (e) {
    console.error(e);
    if (!res.headersSent) res.writeHead(500);
    res.end();
  }
});
server.listen(Number(process.env.PORT || 3000), process.env.HOST || "127.0.0.1", () => {
  const { address, port } = server.address();
  console.log(`copilotkit runtime listening on http://${address}:${port} (adapter ${ADAPTER})`);
});
