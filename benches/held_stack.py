#!/usr/bin/env python3
"""A held run's stack (issue 27, benches/REPORT.md "the run's stack"): N new turns and N resumed
runs held at once against the bench's held kernel, then each run thread's resident stack pages
(/proc/PID/pagemap) and its live frames at the wait (gdb: `$sp` of each frame).

    cargo bench --bench adapter --no-run   # the LTO bench build: the adapter and the kernel
    python3 benches/held_stack.py [N] [ADAPTER_BIN]

N defaults to 100 (of each kind); ADAPTER_BIN to target/release/iac-code-agui. A resumed run:
a turn with the text `hold-interrupt` ends with the held kernel's question (an interrupt), then
a POST with `resume[]` answers it; the kernel holds the answer's stream silent, so the run waits
under `resume`. A new turn waits under `new_turn`. Both with `--heartbeat-interval 1`,
measured 3 s after the last run started (after the transport's idle release, 0.5 s).
"""
import collections
import glob
import http.client
import json
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = 4096
N = int(sys.argv[1]) if len(sys.argv) > 1 else 100
ADAPTER = sys.argv[2] if len(sys.argv) > 2 else f"{ROOT}/target/release/iac-code-agui"
BENCH = max((p for p in glob.glob(f"{ROOT}/target/release/deps/adapter-*") if not p.endswith(".d")),
            key=os.path.getmtime)


def start_kernel():
    k = subprocess.Popen([BENCH], env={**os.environ, "BENCH_ROLE": "held-kernel"},
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    return k, int(k.stdout.readline())


def start_adapter(dir, kport):
    port = free_port()
    os.makedirs(f"{dir}/workspace")
    log = open(f"{dir}/server.log", "w")
    a = subprocess.Popen([ADAPTER, "--port", str(port), "--a2a-url", f"http://127.0.0.1:{kport}",
                          "--state-dir", f"{dir}/state", "--heartbeat-interval", "1"],
                         env={**{k: v for k, v in os.environ.items() if k != "RUST_LOG"},
                              "IAC_CODE_AGUI_ALLOWED_CWDS": dir},
                         cwd=dir, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    for _ in range(200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return a, port
        except OSError:
            time.sleep(0.05)
    sys.exit("the adapter did not answer /health")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def body(thread, run, cwd, text=None, resume=None):
    b = {"threadId": thread, "runId": run, "state": {}, "tools": [], "context": [], "messages": [],
         "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "invocation-1",
                                        "cwd": cwd}}}
    if text is not None:
        b["messages"] = [{"id": f"m-{run}", "role": "user", "content": text}]
    if resume is not None:
        b["resume"] = resume
    return json.dumps(b).encode()


def post(port, data):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Accept: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    return s


def interrupted(port, thread, cwd):
    """The first turn of a resumed run: read to its end, the interrupt's id."""
    s = post(port, body(thread, "r1-" + thread, cwd, text="hold-interrupt"))
    s.settimeout(10)
    got = b""
    while b'"RUN_FINISHED"' not in got and b'"RUN_ERROR"' not in got:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    for line in got.decode(errors="replace").splitlines():
        if line.startswith("data: ") and '"RUN_FINISHED"' in line:
            return json.loads(line[6:])["outcome"]["interrupts"][0]["id"]
    sys.exit(f"no interrupt for {thread}: {got[-600:]!r}")


def hold(port, cwd):
    """N resumed runs (answers held) and N new turns; the open sockets."""
    ids = [interrupted(port, f"stack-resumed-{i}", cwd) for i in range(N)]
    socks = []
    for i, iid in enumerate(ids):
        answer = [{"interruptId": iid, "status": "resolved", "payload": {"selectedId": "cn-beijing"}}]
        socks.append(post(port, body(f"stack-resumed-{i}", f"r2-{i}", cwd, resume=answer)))
    for i in range(N):
        socks.append(post(port, body(f"stack-new-{i}", f"r1-{i}", cwd, text="hold")))
    return socks


def read_streams(socks, secs):
    """Reads every stream for `secs`: (runs started, heartbeats, runs ended)."""
    ep = select.epoll()
    by_fd = {}
    for s in socks:
        s.setblocking(False)
        by_fd[s.fileno()] = s
        ep.register(s.fileno(), select.EPOLLIN)
    started = beats = ended = 0
    end = time.time() + secs
    while time.time() < end:
        for fd, _ in ep.poll(0.2):
            try:
                data = by_fd[fd].recv(65536)
            except BlockingIOError:
                continue
            started += data.count(b'"RUN_STARTED"')
            beats += data.count(b": heartbeat")
            ended += data.count(b'"RUN_FINISHED"') + data.count(b'"RUN_ERROR"')
            if not data:
                ep.unregister(fd)
    return started, beats, ended


def resident_pages(pid):
    """Every resident page (its number) of the anonymous read-write mappings, read before gdb
    attaches (gdb then reads the live frames only, resident already)."""
    present = set()
    with open(f"/proc/{pid}/pagemap", "rb") as pm:
        for line in open(f"/proc/{pid}/maps"):
            parts = line.split()
            if not parts[1].startswith("rw") or len(parts) > 5:
                continue
            lo, hi = (int(x, 16) // PAGE for x in parts[0].split("-"))
            pm.seek(lo * 8)
            raw = pm.read((hi - lo) * 8)
            present.update(lo + i for i in range(hi - lo)
                           if raw[i * 8 + 7] & 0x80)
    return present


def frames(pid):
    """Each thread's stack top (its descriptor's page end) and frames, innermost first:
    [(function, $sp)]."""
    cmd = ["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off",
           "-ex", "thread apply all frame apply all p/x $sp"]
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
    threads, cur, fn = [], None, None
    for line in text.splitlines():
        if m := re.match(r"Thread \d+ \(Thread (0x[0-9a-f]+)", line):
            cur = []
            top = (int(m.group(1), 16) + PAGE - 1) // PAGE * PAGE
            threads.append((top, cur))
        elif m := re.match(r"#\d+\s+(?:0x[0-9a-f]+ in )?(.+?) \(", line):
            fn = m.group(1)
        elif (m := re.match(r"\$\d+ = (0x[0-9a-f]+)", line)) and cur is not None:
            cur.append((fn, int(m.group(1), 16)))
    return threads


def short(fn):
    fn = re.sub(r"<[^<>]*>", "", re.sub(r"<[^<>]*>", "", re.sub(r"<[^<>]*>", "", fn)))
    parts = [p for p in fn.split("::") if not re.fullmatch(r"h[0-9a-f]{16}", p)]
    return "::".join(parts[-2:])


def report(kind, runs):
    """runs: [(frames, stack top, resident pages (offsets from the top))]."""
    pages = collections.Counter(len(r[2]) for r in runs)
    depth = sorted(r[1] - r[0][0][1] for r in runs)
    print(f"\n{kind}: {len(runs)} held runs; resident stack pages {dict(sorted(pages.items()))}; "
          f"from the stack's top to the innermost frame's $sp {depth[0]}–{depth[-1]} bytes "
          f"(median {depth[len(depth) // 2]})")
    sig = collections.Counter(tuple(f[0] for f in r[0]) for r in runs).most_common(1)[0][0]
    fr = next(r[0] for r in runs if tuple(f[0] for f in r[0]) == sig)
    print(f"  frames of the most common stack ({sum(1 for r in runs if tuple(f[0] for f in r[0]) == sig)}"
          f" runs), innermost first, bytes (its caller's $sp minus its own):")
    for i, (fn, sp) in enumerate(fr[:-1]):
        print(f"  {fr[i + 1][1] - sp:6d}  {short(fn)}")
    print(f"  {fr[-1][1] - fr[0][1]:6d}  from the outermost frame's $sp ({short(fr[-1][0])}) to the "
          f"innermost's; {runs[0][1] - fr[-1][1]} above it (glibc's thread descriptor, TLS)")


def main():
    dir = tempfile.mkdtemp(prefix="held-stack-")
    kernel, kport = start_kernel()
    adapter, port = start_adapter(dir, kport)
    try:
        socks = hold(port, f"{dir}/workspace")
        started, beats, ended = read_streams(socks, 3.0)
        print(f"{ADAPTER}: {started}/{2 * N} runs started and held, {ended} ended, {beats} heartbeats")
        present = resident_pages(adapter.pid)
        kinds = {"resumed (resume)": [], "new turn (new_turn)": []}
        for top, th in frames(adapter.pid):
            names = [short(f[0]) for f in th]
            kind = ("resumed (resume)" if "::resume" in names else
                    "new turn (new_turn)" if "Run::new_turn" in names else None)
            if not kind or not th:
                continue
            # The run's stack: RUN_STACK (512 KiB) under its top.
            pages = [i for i in range(512 * 1024 // PAGE) if top // PAGE - 1 - i in present]
            kinds[kind].append((th, top, pages))
        for kind, runs in kinds.items():
            if runs:
                report(kind, runs)
        for s in socks:
            s.close()
    finally:
        adapter.kill()
        kernel.kill()
        adapter.wait()
        kernel.wait()
        subprocess.run(["rm", "-rf", dir])


main()
