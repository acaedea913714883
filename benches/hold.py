#!/usr/bin/env python3
"""Hold N AG-UI runs open against an adapter for a while (benches/REPORT.md section 10's
breakdown: the adapter under heaptrack, the held kernel as the upstream).

    python3 benches/hold.py PORT N SECONDS CWD [TEXT]

Each run POSTs on its own threadId; the script reads every stream (epoll) for SECONDS, prints
how many runs started and how many heartbeats arrived, then closes every connection.
"""
import json
import select
import socket
import sys
import time

port, n, secs, cwd = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
text = sys.argv[5] if len(sys.argv) > 5 else "hold"
ep = select.epoll()
socks, started, beats = {}, 0, 0
for i in range(n):
    body = json.dumps({
        "threadId": f"hold-t-{i}", "runId": f"hold-r-{i}", "state": {}, "tools": [], "context": [],
        "messages": [{"id": f"m-{i}", "role": "user", "content": text}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "invocation-1",
                                       "cwd": cwd}}}).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Accept: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    s.setblocking(False)
    socks[s.fileno()] = s
    ep.register(s.fileno(), select.EPOLLIN)
end = time.time() + secs
while time.time() < end:
    for fd, _ in ep.poll(0.2):
        try:
            data = socks[fd].recv(65536)
        except BlockingIOError:
            continue
        started += data.count(b'"RUN_STARTED"')
        beats += data.count(b": heartbeat")
        if not data:
            ep.unregister(fd)
print(f"runs started {started}/{n}, heartbeats {beats}", flush=True)
for s in socks.values():
    s.close()
