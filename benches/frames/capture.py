#!/usr/bin/env python3
"""Captures the real kernel's upstream A2A traffic for the bench frame sets (issue 13, item 1).

Starts the real kernel (`iac-code a2a --thinking-exposure all`, from the real-kernel venv) with the
scripted LLM of the real-kernel suite (`tests/real_kernel/fake_llm.py`) on 127.0.0.1, sends it
A2A 1.0 JSON-RPC `SendStreamingMessage` calls directly (header `A2A-Version: 1.0`, the message and
`metadata.iac_code` as `src/a2a.rs` builds them) and writes each raw SSE response body, as the
kernel sent it, to `benches/frames/captured/<name>.a2a.sse`:

  reasoning.a2a.sse       a normal-mode turn whose prompt says "think": the scripted LLM streams
                          `reasoning_content` deltas, then the answer (fake_llm.py's THINKING and
                          TEXT_REPLY); the turn ends in TASK_STATE_INPUT_REQUIRED without an input
  pipeline-run1.a2a.sse   a pipeline-mode turn (`run_mode "pipeline"`, `pipeline_name "selling"`,
                          the prompt of the suite's scenario p): up to intent parsing's question
  pipeline-run2.a2a.sse   the answer to that question (the first option's label as text, on the
                          waiting task, as `src/interrupts.rs` answers a question): intent parsing
                          completes, then the whole architecture planning step; the stream is read
                          up to that step's `step_completed` and then closed (what follows, the
                          candidates' sub-pipelines up to a sideband permission, would add ~90 kB)

In pipeline mode the scripted LLM gets one addition here (see `scripted_llm`): the suite's script
answers every pipeline step with its tool call alone, so no step would stream text or reasoning;
for the capture each of those answers is preceded by a reasoning sentence and a text sentence,
streamed word by word the way the script already streams scenario r's "think, then write" answer.
Normal mode (the reasoning turn) is the suite's script unchanged.

The only change made to what the kernel sent (CRLF line ends included): the temporary workspace
path is replaced by `/workspace/session-1` (as in /work/shared/captures; neither path has a
character JSON escapes, so only string contents change). Ids, timestamps, sequences and key order
are the kernel's; re-running the script gives new ones (the key order of the kernel's JSON changes
from one kernel process to the next).

    python3 benches/frames/capture.py [--venv target/real-kernel-venv] [--out benches/frames/captured]

Then `python3 benches/frames/make.py` cuts the `reasoning` and `pipeline` frame sets from them.
"""
import argparse
import hashlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WS_REWRITE = "/workspace/session-1"
PIPELINE_PROMPT = "部署一个网站"   # tests/real_kernel: intent parsing must ask a question first
THINK_PROMPT = "Think first, then describe a VPC template."


# What the scripted LLM adds in pipeline mode for the capture only (the suite's script answers a
# pipeline step with its tool call alone, so no step would stream text or reasoning): before each
# step's tool call it streams this reasoning and this sentence, word by word, as it does for
# scenario r's "think ... write" turn (fake_llm.py `_stream`: `reasoning` and `text` of a tool reply).
PIPELINE_THINKING = "The step needs its conclusion; the requirements are known, so complete it now."
PIPELINE_TEXT = "Planning the step: one VPC, two vSwitches in two zones, then the conclusion."


def scripted_llm(port, log):
    """tests/real_kernel/fake_llm.py, its pipeline answers preceded by reasoning and text."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "real_kernel"))
    import fake_llm
    decide_pipeline = fake_llm.decide_pipeline

    def narrated(messages, tools):
        reply = decide_pipeline(messages, tools)
        if reply is not None and reply["kind"] == "tool":
            reply.update({"reasoning": PIPELINE_THINKING, "text": PIPELINE_TEXT})
        return reply

    fake_llm.decide_pipeline = narrated
    sys.exit(fake_llm.main(["--port", str(port), "--log", log]))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv, env, log):
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def stop(p):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait(timeout=5)


def wait_http(port, path, proc, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"no 200 on 127.0.0.1:{port}{path} within {timeout}s")


def context_id(thread):
    """An `agui-<40 hex>` context id, the shape the adapter derives from a thread id."""
    return "agui-" + hashlib.sha1(thread.encode()).hexdigest()


def message(text, context, cwd, mode, task=None):
    """A ROLE_USER message as src/a2a.rs `user_message` builds it."""
    meta = {"cwd": cwd, "rosInvocationId": "inv-bench-capture", "preferredLanguage": "en",
            "cleanupOnly": False, "run_mode": mode}
    if mode == "pipeline":
        meta["pipeline_name"] = "selling"
    m = {"messageId": f"msg-{uuid.uuid4()}", "role": "ROLE_USER", "parts": [{"text": text}],
         "contextId": context}
    if task is not None:
        m["taskId"] = task
    m["metadata"] = {"iac_code": meta}
    return m


def rpc(method, msg):
    return json.dumps({"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method,
                       "params": {"message": msg,
                                  "configuration": {"acceptedOutputModes": ["text/plain"]}}}).encode()


def post(port, method, msg, timeout):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/", body=rpc(method, msg),
              headers={"A2A-Version": "1.0", "Content-Type": "application/json",
                       "Accept": "text/event-stream" if method == "SendStreamingMessage"
                       else "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"{method}: HTTP {r.status} {r.read()[:500]!r}")
    return c, r


def stream(port, msg, on_frame=None, timeout=120):
    """The raw SSE body of one SendStreamingMessage (bytes), and its frames as JSON. `on_frame`
    may return True to stop reading (the connection is then closed)."""
    c, r = post(port, "SendStreamingMessage", msg, timeout)
    raw, frames = bytearray(), []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            line = r.readline()
            if not line:
                break
            raw += line
            if line.startswith(b"data: "):
                frame = json.loads(line[6:])
                frames.append(frame)
                if on_frame is not None and on_frame(frame):
                    # the blank line that ends the event
                    raw += r.readline()
                    break
        else:
            raise RuntimeError("stream did not end in time")
    finally:
        c.close()
    return bytes(raw), frames


def iac(frame):
    res = frame.get("result") or {}
    item = res.get("statusUpdate") or res.get("task") or res.get("artifactUpdate") or {}
    return ((item.get("metadata") or {}).get("iac_code")) or {}, item


def last_input(frames):
    for f in reversed(frames):
        meta, item = iac(f)
        if meta.get("input"):
            return meta["input"], item
    raise RuntimeError("the run ended without an input wait")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", default=os.path.join(ROOT, "target", "real-kernel-venv"))
    ap.add_argument("--out", default=os.path.join(ROOT, "benches", "frames", "captured"))
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    ap.add_argument("--llm", nargs=2, metavar=("PORT", "LOG"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.llm:
        scripted_llm(*args.llm)
    kernel_bin = os.path.join(args.venv, "bin", "iac-code")
    if not os.access(kernel_bin, os.X_OK):
        sys.exit(f"capture.py: no {kernel_bin} (run tests/real_kernel/setup.sh)")
    tmp = tempfile.mkdtemp(prefix="agui-frames-capture-")
    ws = os.path.join(tmp, "ws")
    for d in ("ws", "home", "config", "logs"):
        os.makedirs(os.path.join(tmp, d))
    llm_port, kernel_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("IAC_CODE_AGUI_")}
    env.update({
        "HOME": os.path.join(tmp, "home"), "IAC_CODE_CONFIG_DIR": os.path.join(tmp, "config"),
        "IAC_CODE_PROVIDER": "OpenAI Compatible", "IAC_CODE_MODEL": "fake-model",
        "IAC_CODE_BASE_URL": f"http://127.0.0.1:{llm_port}/v1", "IAC_CODE_API_KEY": "sk-fake-local-test",
        "IACCODE_A2A_ALLOWED_CWDS": ws, "DISABLE_TELEMETRY": "1",
        "IAC_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1"})
    procs = []
    captured = {}
    try:
        log = open(os.path.join(tmp, "logs", "fake-llm.log"), "ab")
        procs.append(start([sys.executable, os.path.abspath(__file__), "--llm", str(llm_port),
                            os.path.join(tmp, "logs", "llm-requests.jsonl")], env, log))
        wait_http(llm_port, "/v1/models", procs[-1], 10)
        log = open(os.path.join(tmp, "logs", "kernel.log"), "ab")
        procs.append(start([kernel_bin, "a2a", "--host", "127.0.0.1", "--port", str(kernel_port),
                            "--thinking-exposure", "all"], env, log))
        wait_http(kernel_port, "/health", procs[-1], 90)

        # (a) a normal turn with reasoning
        cwd = os.path.join(ws, "reasoning")
        os.makedirs(cwd)
        raw, _ = stream(kernel_port, message(f"{THINK_PROMPT} [[cwd={cwd}]]",
                                             context_id("bench-capture-reasoning"), cwd, "normal"))
        captured["reasoning"] = (raw, cwd)

        # (b) the selling pipeline: run 1 up to the question, run 2 (its answer) up to the
        # candidate's sideband permission
        cwd = os.path.join(ws, "pipeline")
        os.makedirs(cwd)
        context = context_id("bench-capture-pipeline")
        raw, frames = stream(kernel_port, message(PIPELINE_PROMPT, context, cwd, "pipeline"))
        captured["pipeline-run1"] = (raw, cwd)
        question, _ = last_input(frames)
        options = question.get("options") or []
        answer = (options[0].get("label") or options[0].get("id")) if options else "cn-hangzhou"

        def planned(frame):
            env = iac(frame)[0].get("pipeline") or {}
            return (env.get("eventType") == "step_completed"
                    and (env.get("step") or {}).get("id") == "architecture_planning")

        raw, frames = stream(kernel_port, message(answer, context, cwd, "pipeline",
                                                  task=question["requestTaskId"]),
                             on_frame=planned, timeout=240)
        captured["pipeline-run2"] = (raw, cwd)
    finally:
        for p in reversed(procs):
            stop(p)
        if args.keep:
            print("capture.py: kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(args.out, exist_ok=True)
    for name, (raw, cwd) in captured.items():
        text = raw.decode("utf-8").replace(cwd, WS_REWRITE)
        assert ws not in text, f"{name}: a workspace path is left"
        path = os.path.join(args.out, f"{name}.a2a.sse")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        print(f"{path}: {text.count('data: ')} frames, {len(text)} bytes")


if __name__ == "__main__":
    main()
