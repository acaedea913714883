#!/usr/bin/env node
// contrib/deploy/nginx-pairs.conf in Debian's nginx (started by this script on 127.0.0.1, in WORK),
// in front of three stand-in pairs that answer their own number: routing only (the adapters'
// part is drive.mjs's, behind HAProxy). Every request of a user (X-AGUI-User-Id) reaches one
// pair: its thread list (with the header, or only the userId query), runs, history and live feed
// of its threads; a thread without a user: its run (X-AGUI-Thread-Id), lookup, history and feed
// (by the path) reach one pair; a request naming nothing is refused (400). Exits 1 on a failure.

import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import { ROOT, WORK, log, check, runChecks } from "./common.mjs";

const E = "/extensions/iac-code/v1";
const NGINX = fs.existsSync("/usr/sbin/nginx") ? "/usr/sbin/nginx" : "nginx";

async function freePort() {
  const s = net.createServer();
  await new Promise((r) => s.listen(0, "127.0.0.1", r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

async function main() {
  const pairs = await Promise.all(
    [1, 2, 3].map(
      (i) =>
        new Promise((resolve) => {
          const s = http.createServer((_, res) => res.end(String(i))).listen(0, "127.0.0.1", () => resolve(s));
        }),
    ),
  );
  const front = await freePort();
  const dir = path.join(WORK, "nginx");
  fs.mkdirSync(dir, { recursive: true });
  let n = 0;
  const site = fs
    .readFileSync(path.join(ROOT, "contrib/deploy/nginx-pairs.conf"), "utf8")
    .replace("listen 127.0.0.1:41300;", `listen 127.0.0.1:${front};`)
    .replace(/server 127\.0\.0\.1:4130[1-3]/g, () => `server 127.0.0.1:${pairs[n++].address().port}`);
  fs.writeFileSync(path.join(dir, "site.conf"), site);
  const user = process.getuid?.() === 0 ? "user root;" : "";
  fs.writeFileSync(
    path.join(dir, "nginx.conf"),
    `${user}\nworker_processes 1;\npid ${dir}/nginx.pid;\nerror_log ${dir}/error.log warn;\nevents { worker_connections 64; }\n` +
      `http {\n  access_log ${dir}/access.log;\n` +
      ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"].map((t) => `  ${t}_temp_path ${dir}/${t};\n`).join("") +
      `  include ${dir}/site.conf;\n}\n`,
  );
  execFileSync(NGINX, ["-t", "-q", "-c", `${dir}/nginx.conf`, "-p", dir], { stdio: "inherit" });
  spawn(NGINX, ["-c", `${dir}/nginx.conf`, "-p", dir], { stdio: "inherit" });
  const ask = async (route, headers = {}) => {
    const res = await fetch(`http://127.0.0.1:${front}${route}`, { headers });
    return res.status === 200 ? await res.text() : `HTTP ${res.status}`;
  };
  for (let i = 0; i < 100; i++) {
    try {
      if ((await ask("/health", { "X-AGUI-Thread-Id": "h" })) !== "") break;
    } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
  try {
    log(`nginx-pairs.conf on 127.0.0.1:${front}`);
    const homes = new Set();
    let together = 0;
    for (let u = 0; u < 12; u++) {
      const id = `user-${u}`;
      const seen = [await ask(`${E}/threads?userId=${id}`), await ask(`${E}/threads?userId=${id}`, { "X-AGUI-User-Id": id })];
      for (let k = 0; k < 5; k++) {
        const t = `${id}-thread-${k}`;
        const h = { "X-AGUI-User-Id": id };
        seen.push(await ask("/", { ...h, "X-AGUI-Thread-Id": t }));
        seen.push(await ask(`${E}/threads/${t}/messages?userId=${id}`, h));
        seen.push(await ask(`${E}/threads/${t}/events?userId=${id}`, h));
      }
      if (new Set(seen).size === 1 && /^[123]$/.test(seen[0])) together++;
      homes.add(seen[0]);
    }
    check(together === 12 && homes.size >= 2, `nginx: each of 12 users' list, runs, histories and feeds reach one pair (${together}; users on ${homes.size} pairs)`);
    const lone = new Set();
    let one = 0;
    for (let k = 0; k < 20; k++) {
      const t = `lone-${k}`;
      const seen = [
        await ask("/", { "X-AGUI-Thread-Id": t }),
        await ask(`${E}/threads/${t}?rosInvocationId=x`),
        await ask(`${E}/threads/${t}/messages?rosInvocationId=x`),
        await ask(`${E}/threads/${t}/events?rosInvocationId=x`),
      ];
      if (new Set(seen).size === 1 && /^[123]$/.test(seen[0])) one++;
      lone.add(seen[0]);
    }
    check(one === 20 && lone.size >= 2, `nginx: each of 20 threads without a user: run, lookup, history, feed on one pair (${one}; on ${lone.size} pairs)`);
    check((await ask("/")) === "HTTP 400", "nginx: a request naming no thread and no user is refused (400)");
  } finally {
    try {
      process.kill(Number(fs.readFileSync(`${dir}/nginx.pid`, "utf8")));
    } catch {}
    pairs.forEach((s) => s.close());
  }
}

runChecks(main);
