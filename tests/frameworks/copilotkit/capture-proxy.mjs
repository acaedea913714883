// A recording HTTP proxy between the CopilotKit runtime and iac-code-agui: every request (method,
// path, headers, JSON body) and its answer (status, and for an SSE answer the events) is appended
// as one JSON line to CAPTURE_FILE. Streams pass through unbuffered.
//   node capture-proxy.mjs <listen-port> <adapter-url> <capture-file>
import http from "node:http";
import { appendFileSync } from "node:fs";

const [port, target, file] = process.argv.slice(2);
const up = new URL(target);
let seq = 0;

http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const raw = Buffer.concat(chunks);
    const rec = { seq: ++seq, at: Date.now(), method: req.method, path: req.url, headers: req.headers };
    try { rec.body = raw.length ? JSON.parse(raw.toString("utf8")) : null; } catch { rec.body = raw.toString("utf8"); }
    const headers = { ...req.headers, host: up.host };
    const preq = http.request({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers }, (pres) => {
      rec.status = pres.statusCode;
      rec.responseHeaders = pres.headers;
      res.writeHead(pres.statusCode, pres.headers);
      const sse = String(pres.headers["content-type"] || "").includes("text/event-stream");
      let buf = "";
      const events = [];
      const body = [];
      pres.on("data", (c) => {
        res.write(c);
        if (sse) {
          buf += c.toString("utf8");
          let i;
          while ((i = buf.indexOf("\n")) >= 0) {
            const line = buf.slice(0, i).replace(/\r$/, "");
            buf = buf.slice(i + 1);
            if (line.startsWith("data:")) {
              try { events.push(JSON.parse(line.slice(5))); } catch { /* not JSON */ }
            }
          }
        } else body.push(c);
      });
      const done = () => {
        if (sse) rec.events = events;
        else {
          const text = Buffer.concat(body).toString("utf8");
          try { rec.response = JSON.parse(text); } catch { rec.response = text; }
        }
        rec.endedAt = Date.now();
        appendFileSync(file, JSON.stringify(rec) + "\n");
        res.end();
      };
      pres.on("end", done);
      pres.on("error", done);
    });
    preq.on("error", (e) => {
      rec.error = e.message;
      appendFileSync(file, JSON.stringify(rec) + "\n");
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
    // the runtime went away (Stop cut the stream): cut the upstream too, as a direct client would
    res.on("close", () => { if (!res.writableEnded) preq.destroy(); });
    preq.end(raw);
  });
}).listen(Number(port), "127.0.0.1", () => console.log(`capture proxy on 127.0.0.1:${port} -> ${target}`));
