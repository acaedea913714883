#!/usr/bin/env python3
"""Builds the bench frame sets (*.a2a.sse) from the real kernel's captured traffic (tests/data,
a copy of /work/shared/captures). Each file is a cycle of frames the bench repeats; `$N` becomes
the cycle number (tool call ids, so each cycle is a new call) and `$SEQ` a running pipeline
sequence (so de-duplication never drops a repeat). Run from the repository root:
    python3 benches/frames/make.py"""
import json

DATA = "tests/data/"
TASK, CTX, SESSION = ("07195cb1-be1b-4aa4-93c0-53feadfa81e7",
                      "agui-58633450475f377504ca56b46b5a293d95591ee7",
                      "9d08fcfb-85c7-4bb8-9ec3-024ec4a1b37d")
N_TASK, N_CTX, N_SESSION = ("88b24f14-1984-4a52-9ab9-b44c1ac2ba2d",
                            "bdd96997-fc99-4760-9d7c-64466b091e18",
                            "44be09b7-2125-4b26-ba40-ae369498f999")


def capture_frames(path):
    if path.endswith(".jsonl"):
        for line in open(path):
            v = json.loads(line)
            if v.get("kind") == "response" and v["line"].startswith("data: "):
                yield v["line"][len("data: "):]
    else:
        for line in open(path):
            if line.startswith("data: "):
                yield line[len("data: "):].rstrip("\n")


def same_ids(frame):
    """The normal turn's ids become the permission flow's: one identity for every set."""
    return frame.replace(N_TASK, TASK).replace(N_CTX, CTX).replace(N_SESSION, SESSION)


def status(iac, message=None):
    """A statusUpdate frame in the kernel's exact key order (as in the captures)."""
    st = {"state": "TASK_STATE_WORKING"}
    if message is not None:
        st["message"] = message
    body = {"taskId": TASK, "contextId": CTX, "status": st,
            "metadata": {"iac_code": dict(iac, iacCodeSessionId=SESSION)}}
    return json.dumps({"result": {"statusUpdate": body},
                       "id": "566f8f0b-68d1-41f2-a87a-4bfaff0b5445", "jsonrpc": "2.0"},
                      separators=(",", ":"))


def text_set():
    return [same_ids(f) for f in capture_frames(DATA + "normal-turn.a2a.sse")
            if '"parts"' in f and '"statusUpdate"' in f and "assistantFinal" not in f]


def tool_set():
    return [f.replace('"call_1"', '"call_$N"') for f in capture_frames(DATA + "permission-flow.a2a.jsonl")
            if '"tool":{' in f and "inputReceived" not in f]


def reasoning_set():
    # The kernel's thinking exposure (`--thinking-exposure all`): metadata.iac_code.thinking on a
    # status without a message, the text a model's reasoning delta.
    words = ["The ", "user ", "wants ", "a ", "VPC ", "with ", "two ", "vSwitches; ", "check ", "zones. "]
    return [status({"thinking": {"type": "raw_thinking", "text": w}}) for w in words]


def envelope(event_type, extra):
    # iac_code/a2a/pipeline_events.py `_envelope` (as tests/fake_kernel's `pipe`): the sequence is
    # a float on the A2A wire.
    env = {"schemaVersion": 1, "eventType": event_type, "eventId": "ev-$SEQ", "sequence": "$SEQF",
           "pipelineRunId": "pr-1", "scope": "pipeline", "status": "working", "data": {}}
    env.update(extra)
    return env


def pipeline_set():
    step = {"scope": "step", "step": {"id": "plan-$N", "runId": "step-plan-$N-1", "attempt": 1}}
    words = ["Collecting ", "requirements: ", "region ", "cn-hangzhou, ", "two ", "zones. "]
    frames = [status({"pipeline": envelope("step_started", step)})]
    frames += [status({"pipeline": envelope("text_delta", dict(step, data={"text": w}))}) for w in words]
    frames.append(status({"pipeline": envelope("step_completed", step)}))
    return [f.replace('"$SEQF"', "$SEQ.0") for f in frames]


for name, frames in [("text", text_set()), ("tool", tool_set()),
                     ("reasoning", reasoning_set()), ("pipeline", pipeline_set())]:
    with open(f"benches/frames/{name}.a2a.sse", "w") as f:
        for fr in frames:
            f.write("data: " + fr + "\n\n")
    print(name, len(frames), "frames,", sum(len(x) for x in frames) // len(frames), "bytes each on average")
