#!/usr/bin/env python3
"""Builds the bench frame sets (*.a2a.sse) from the real kernel's captured traffic: `text` and
`tool` from tests/data (a copy of /work/shared/captures), `reasoning` and `pipeline` from
benches/frames/captured (made by benches/frames/capture.py). Each file is a cycle of frames the
bench repeats; `$N` becomes the cycle number (tool call ids, the pipeline step's run id and event
ids, so each cycle is a new call, step attempt and event) and `$SEQ` a running pipeline sequence
(so de-duplication never drops a repeat). Every frame is the kernel's, byte for byte, but for:
the task, context and session ids, which become the permission flow's (one identity for every
set, the ids the bench and the fake kernel replace), and the `$N`/`$SEQ` placeholders above.
Run from the repository root:
    python3 benches/frames/make.py"""
import json
import re

DATA = "tests/data/"
CAPTURED = "benches/frames/captured/"
TASK, CTX, SESSION = ("07195cb1-be1b-4aa4-93c0-53feadfa81e7",
                      "agui-58633450475f377504ca56b46b5a293d95591ee7",
                      "9d08fcfb-85c7-4bb8-9ec3-024ec4a1b37d")
N_TASK, N_CTX, N_SESSION = ("88b24f14-1984-4a52-9ab9-b44c1ac2ba2d",
                            "bdd96997-fc99-4760-9d7c-64466b091e18",
                            "44be09b7-2125-4b26-ba40-ae369498f999")


def capture_frames(path):
    if path.endswith(".jsonl"):
        for line in open(path, encoding="utf-8"):
            v = json.loads(line)
            if v.get("kind") == "response" and v["line"].startswith("data: "):
                yield v["line"][len("data: "):]
    else:
        for line in open(path, encoding="utf-8"):
            if line.startswith("data: "):
                yield line[len("data: "):].rstrip("\n")


def same_ids(frame):
    """The normal turn's ids become the permission flow's: one identity for every set."""
    return frame.replace(N_TASK, TASK).replace(N_CTX, CTX).replace(N_SESSION, SESSION)


def text_set():
    return [same_ids(f) for f in capture_frames(DATA + "normal-turn.a2a.sse")
            if '"parts"' in f and '"statusUpdate"' in f and "assistantFinal" not in f]


def tool_set():
    return [f.replace('"call_1"', '"call_$N"') for f in capture_frames(DATA + "permission-flow.a2a.jsonl")
            if '"tool":{' in f and "inputReceived" not in f]


def iac_code(frame):
    result = json.loads(frame)["result"]
    item = result.get("statusUpdate") or result.get("task") or {}
    return (item.get("metadata") or {}).get("iac_code") or {}


def captured(name):
    """A capture's frames with its task, context and session ids made the common ones."""
    frames = list(capture_frames(CAPTURED + name + ".a2a.sse"))
    first = json.loads(frames[0])["result"]
    task, context = (first["task"]["id"], first["task"]["contextId"]) if "task" in first else \
        (first["statusUpdate"]["taskId"], first["statusUpdate"]["contextId"])
    # on the item's metadata.iac_code, or (pipeline mode) in the envelope only
    session = next(m.group(1) for f in frames
                   for m in [re.search(r'"iacCodeSessionId":"([^"]+)"', f)] if m)
    ids = [(task, TASK), (context, CTX), (session, SESSION)]
    for old, new in ids:
        assert len(old) == len(new), (old, new)   # so every frame keeps its size
    out = []
    for f in frames:
        for old, new in ids:
            f = f.replace(old, new)
        out.append(f)
    return out


def reasoning_set():
    # The normal turn's reasoning (`--thinking-exposure all`, the scripted LLM's
    # `reasoning_content` deltas): metadata.iac_code.thinking {type: raw_thinking, text} on a
    # status without a message, as captured.
    return [f for f in captured("reasoning") if "thinking" in iac_code(f)]


def pipeline_set():
    # One whole pipeline step as streamed: architecture planning, from its step_started to its
    # step_completed (context usage, message started, thinking and text deltas, complete_step's
    # tool_started, usage, tool_result), each frame one `metadata.iac_code.pipeline` envelope.
    frames = captured("pipeline-run2")
    def env(f):
        return iac_code(f).get("pipeline") or {}
    def at(event_type):
        return next(i for i, f in enumerate(frames) if env(f).get("eventType") == event_type
                    and env(f).get("step", {}).get("id") == "architecture_planning")
    step = frames[at("step_started"):at("step_completed") + 1]
    call = next(env(f)["data"]["toolUseId"] for f in step if env(f)["eventType"] == "tool_started")
    out = []
    for f in step:
        f, n = re.subn(r'"sequence":\d+\.0', '"sequence":$SEQ.0', f)
        assert n == 1, f
        f, n = re.subn(r'"eventId":"(evt-[0-9a-f]+)"', r'"eventId":"\1-$N"', f)
        assert n == 1, f
        f = f.replace('"runId":"step-architecture_planning-1"', '"runId":"step-architecture_planning-$N"')
        f = f.replace(f'"toolUseId":"{call}"', '"toolUseId":"call_$N"')
        out.append(f)
    return out


for name, frames in [("text", text_set()), ("tool", tool_set()),
                     ("reasoning", reasoning_set()), ("pipeline", pipeline_set())]:
    with open(f"benches/frames/{name}.a2a.sse", "w", encoding="utf-8") as f:
        for fr in frames:
            f.write("data: " + fr + "\n\n")
    print(name, len(frames), "frames,", sum(len(x) for x in frames) // len(frames), "bytes each on average")
