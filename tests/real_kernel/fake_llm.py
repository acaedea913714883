#!/usr/bin/env python3
"""A scripted OpenAI-compatible chat-completions server for the real-kernel end-to-end test.

Standard library only. Serves on 127.0.0.1:PORT:

  GET  /v1/models              -> one model ("fake-model")
  POST /v1/chat/completions    -> streaming (SSE, ``stream: true``) or a plain JSON completion

The reply is decided from the conversation, the way iac-code 0.16.0 (provider
"OpenAI Compatible", ``iac_code.providers.openai_provider.OpenAIProvider``) sends it:

* if a ``tool`` message follows the last user message (the tool result of our own
  ``write_file`` call, or the denial of it), answer with a short sentence;
* else, if the last user message contains "write", answer with one ``write_file`` tool call,
  arguments ``{"path": "<cwd>/hello.txt", "file_path": "<cwd>/hello.txt", "content": "hello\\n"}``
  (iac-code's ``WriteFileTool`` takes ``path`` and ``content``; it maps ``file_path`` to ``path``
  when ``path`` is missing). ``<cwd>`` comes from a ``[[cwd=/abs/path]]`` marker in that user
  message, else from the "working directory" line of iac-code's system prompt;
* else answer with a short sentence; when that user message contains "think", the answer is
  preceded by reasoning, streamed as ``reasoning_content`` deltas (what iac-code's
  ``OpenAIProvider._extract_reasoning_text`` reads and turns into thinking, which the kernel
  exposes with ``--thinking-exposure all``).

A user message carrying ``[[script=NAME]]`` is answered by the script NAME instead (the
normal-mode scenarios n1-n6 of run.py: two write_file calls in one answer, a bash command, an
edit_file call, a write to be cancelled, a multi-turn conversation, a long answer); see SCRIPTS.

Every request is appended (as one JSON line) to ``--log FILE`` when given, for debugging.

Usage: fake_llm.py --port PORT [--log FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fake-model"
TEXT_REPLY = "Here is a VPC template outline: one VPC, two vSwitches."
AFTER_TOOL_REPLY = "Done: the file has been handled."
THINKING = "The user wants a VPC; two vSwitches in two zones is the usual layout."
CWD_MARKER = re.compile(r"\[\[cwd=([^\]]+)\]\]")
# iac-code's system prompt names the working directory; used only if no marker is present.
CWD_IN_SYSTEM = re.compile(r"(?:working directory|cwd)[^/\n]*?(/[^\s`'\"<>]+)", re.IGNORECASE)

_log_lock = threading.Lock()
_log_path: str | None = None
_counter = 0
_counter_lock = threading.Lock()


def _text_of(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    out.append(part["text"])
            elif isinstance(part, str):
                out.append(part)
        return "\n".join(out)
    return str(content)


# --- the `selling` pipeline script (iac_code/pipeline/selling/pipeline.yaml) -------------------
# Each step's system prompt starts with its prompt file's title (prompts/<step>.md); the script
# answers each step with what its `complete_step` needs (complete_step_tool.py: the conclusion is
# checked against the step's conclusion_schema and completion_guards only).
PIPELINE_PROMPT = "部署一个网站"   # matches intent_parsing's first guard: ask_user_question required
STEP_TITLES = (("# 步骤：意图解析", "intent_parsing"), ("# 步骤：架构规划", "architecture_planning"),
               ("# 步骤：模板生成", "template_generating"), ("# 步骤：成本预估", "cost_estimating"),
               ("# 步骤：方案确认与选择", "confirm_and_select"), ("# 步骤：部署", "deploying"))
CANDIDATES = ("plan-a-single-ecs", "plan-b-ha-slb")
TEMPLATE = "ROSTemplateFormatVersion: '2015-09-01'\nResources: {}\n"


def _fill(schema, depth: int = 0):
    """A value that satisfies `schema`'s required fields (types, const, enum, minItems)."""
    if not isinstance(schema, dict) or depth > 8:
        return "x"
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: _fill(props.get(k), depth + 1) for k in schema.get("required") or []}
    if kind == "array":
        n = schema.get("minItems") or 0
        return [_fill(schema.get("items"), depth + 1) for _ in range(n)]
    if kind == "boolean":
        return True
    if kind in ("integer", "number"):
        return 0
    return "x"


def _conclusion(tools: list, overlay: dict) -> dict:
    """The step's conclusion: its complete_step schema's required fields, then `overlay`."""
    schema = {}
    for t in tools or []:
        f = t.get("function") or t
        if f.get("name") == "complete_step":
            schema = ((f.get("parameters") or {}).get("properties") or {}).get("conclusion") or {}
    out = _fill(schema) if schema else {}
    props = schema.get("properties")
    for k, v in overlay.items():
        if props is None or k in props or schema.get("additionalProperties") is not False:
            out[k] = v
    return out


def _complete(tools: list, overlay: dict) -> dict:
    return _tool("complete_step", {"conclusion": _conclusion(tools, overlay)})


def _tool(name: str, args: dict) -> dict:
    return {"kind": "tool", "name": name, "arguments": json.dumps(args, ensure_ascii=False)}


def _step_of(messages: list):
    for msg in messages:
        if msg.get("role") == "system":
            text = _text_of(msg.get("content"))
            for title, step in STEP_TITLES:
                if title in text:
                    return step, text
    return None, ""


def _tool_calls_since_user(messages: list) -> list:
    """Names of the assistant tool calls answered after the last user message, in order."""
    names = []
    for msg in reversed(messages or []):
        if msg.get("role") == "user":
            break
        for call in msg.get("tool_calls") or []:
            names.append((call.get("function") or {}).get("name"))
    return list(reversed(names))


def decide_pipeline(messages: list, tools: list):
    step, system = _step_of(messages)
    if step is None:
        return None
    reply = _decide_step(step, system, messages, tools)
    if reply is not None and step in ("template_generating", "cost_estimating"):
        reply["candidate"] = True
    return reply


def _decide_step(step: str, system: str, messages: list, tools: list):
    done = _tool_calls_since_user(messages)
    all_calls = [(c.get("function") or {}).get("name") for m in messages
                 for c in (m.get("tool_calls") or [])]
    if "complete_step" in done:
        return {"kind": "text", "text": f"{step} done."}
    if step == "intent_parsing":
        if "ask_user_question" not in all_calls:
            return _tool("ask_user_question", {
                "question": "Which region?", "allow_free_text": True,
                "options": [{"id": "cn-hangzhou", "label": "Hangzhou"},
                            {"id": "cn-beijing", "label": "Beijing"}]})
        return _complete(tools, {
            "is_infra_intent": True, "confidence": "high", "cloud_platform": "aliyun",
            "business_type": "website", "core_requirements": ["a small website"],
            "hard_constraints": [], "resource_intents": [{"product": "ECS", "action": "create"}],
            "non_functional": {"region_preference": "cn-hangzhou"},
            "user_message_summary": "deploy a website", "clarification_choice": "cn-hangzhou"})
    if step == "architecture_planning":
        return _complete(tools, {"candidates": [
            {"name": name, "output_path": f"{name}.yaml", "products": products,
             "resource_intents": [{"product": p, "action": "create"} for p in products],
             "hard_constraints": [], "topology": summary, "monthly_estimate": "100 CNY",
             "pros": ["simple"], "cons": ["none"]}
            for name, products, summary in (
                (CANDIDATES[0], ["VPC", "VSwitch", "ECS"], "one ECS instance"),
                (CANDIDATES[1], ["VPC", "VSwitch", "ECS", "SLB"], "two ECS behind an SLB"))]})
    if step == "template_generating":
        which = "a" if CANDIDATES[0] in system else "b"
        cwd = None
        m = CWD_IN_SYSTEM.search(system)
        if m:
            cwd = m.group(1).rstrip(".,;:`")
        path = f"{(cwd or '/tmp').rstrip('/')}/template-{which}.yaml"
        if which == "a" and "write_file" not in done:
            return _tool("write_file", {"path": path, "content": TEMPLATE})
        return _complete(tools, {"template": TEMPLATE, "file_path": path, "region": "cn-hangzhou",
                                 "description": f"template of candidate {which}"})
    if step == "cost_estimating":
        return _complete(tools, {
            "monthly_estimate": "100", "currency": "CNY",
            "resources": [{"type": "ALIYUN::ECS::Instance", "cost": "100"}],
            "template_fixed": False, "deployment_parameters": {}, "hard_constraint_checks": [],
            "preview_validation": {"succeeded": False, "template_url": "template.yaml",
                                   "error": "scripted test: no cloud account"}})
    if step == "confirm_and_select":
        options = [{"name": n, "summary": n, "candidate_index": i} for i, n in enumerate(CANDIDATES)]
        if "complete_step" not in all_calls:
            return _complete(tools, {"user_prompt": "Choose a plan:", "options": options})
        return _complete(tools, {
            "user_prompt": "Choose a plan:", "options": options, "user_input": "plan 0",
            "selected_candidate_name": CANDIDATES[0], "selected_candidate_index": 0,
            "selected_evaluated_candidate_index": 0})
    if step == "deploying":
        # no cloud account here: `failed` with its error is the one honest conclusion
        # (skills/iac-aliyun-deploying: status success needs a ros_deploy CREATE_COMPLETE)
        return _complete(tools, {"status": "failed", "error": "scripted test: no cloud account"})
    return None


def decide(messages: list, tools: list = None) -> dict:
    """Returns {"kind": "text", "text": ...[, "reasoning": ...]} or {"kind": "tool", "name", "arguments"}."""
    scripted = decide_pipeline(messages, tools)
    if scripted is None:  # the n* scenarios' scripts, keyed by [[script=...]]
        scripted = normal_script(messages or [])
    if scripted is not None:
        return scripted
    saw_tool = False
    last_user = None
    for msg in reversed(messages or []):
        role = msg.get("role")
        if role == "tool":
            saw_tool = True
        if role == "user":
            last_user = _text_of(msg.get("content"))
            break
    if saw_tool:
        return {"kind": "text", "text": AFTER_TOOL_REPLY}
    if last_user is not None and "write" in last_user.lower():
        cwd = None
        m = CWD_MARKER.search(last_user)
        if m:
            cwd = m.group(1).strip()
        else:
            for msg in messages:
                if msg.get("role") == "system":
                    m = CWD_IN_SYSTEM.search(_text_of(msg.get("content")))
                    if m:
                        cwd = m.group(1).rstrip(".,;:")
                        break
        cwd = (cwd or "/tmp").rstrip("/") or "/"
        target = f"{cwd}/hello.txt"
        args = {"path": target, "file_path": target, "content": "hello\n"}
        reply = {"kind": "tool", "name": "write_file", "arguments": json.dumps(args)}
        if "think" in last_user.lower():   # reasoning and a sentence before the call (scenario r)
            reply.update({"reasoning": THINKING, "text": TEXT_REPLY})
        return reply
    if last_user is not None and "think" in last_user.lower():
        return {"kind": "text", "text": TEXT_REPLY, "reasoning": THINKING}
    return {"kind": "text", "text": TEXT_REPLY}


# ---- normal-mode scripts (issue 14 item 7; run.py scenarios n1-n6) --------------------------
# A user message carrying [[script=NAME]] is answered by SCRIPTS[NAME](step, turn, cwd), where
# step = the number of `tool` messages after that user message (0: first LLM call of the turn)
# and turn = the number of user messages in the conversation (1 on the first turn). The kernel
# runs write tools one at a time (iac_code.tools.tool_executor: only read-only calls run
# concurrently), so one answer with two write_file calls asks for permission twice, in sequence.
SCRIPT_MARKER = re.compile(r"\[\[script=([a-z0-9-]+)\]\]")
LONG_LINE = ("Line {n:03d}: the stack keeps one VPC, two vSwitches and a NAT gateway; "
             "出口带宽 {n} Mbps, tags env=test owner=agui \u2713.")


def _call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": json.dumps(arguments)}


def _script_two_writes(step, turn, cwd):
    if step == 0:
        return {"kind": "tool", "calls": [
            _call("write_file", path=f"{cwd}/one.txt", content="one\n"),
            _call("write_file", path=f"{cwd}/two.txt", content="two\n")]}
    return {"kind": "text", "text": "Both files are written."}


def _script_bash(step, turn, cwd):
    # `touch` is not in iac-code's read-only list (tools/bash/readonly_commands.py), so the
    # kernel asks; the relative path stays inside the cwd (no path-constraint refusal)
    if step == 0:
        return {"kind": "tool", "calls": [_call("bash", command="touch made-by-bash.txt")]}
    return {"kind": "text", "text": "The command ran."}


def _script_edit(step, turn, cwd):
    if step == 0:
        return {"kind": "tool", "calls": [_call("edit_file", path=f"{cwd}/notes.txt",
                                                old_string="colour: red", new_string="colour: blue")]}
    return {"kind": "text", "text": "The edit was not made."}


def _script_cancelled(step, turn, cwd):
    if step == 0:
        return {"kind": "tool", "calls": [_call("write_file", path=f"{cwd}/cancelled.txt",
                                                content="never\n")]}
    return {"kind": "text", "text": "Nothing was written."}


def _script_multi_turn(step, turn, cwd):
    # the turn number counts the user messages the kernel sends: it proves the session history
    return {"kind": "text", "text": f"Turn {turn}: noted, {turn} message(s) so far."}


def _script_long(step, turn, cwd):
    # four lines per chunk (not one word per chunk): 60 chunks of about 440 bytes, so that the
    # turn stays short on a busy machine (the kernel's cost is per chunk, not per byte)
    text = "\n".join(LONG_LINE.format(n=n) for n in range(1, 241))
    lines = text.splitlines(keepends=True)
    return {"kind": "text", "text": text,
            "chunks": ["".join(lines[i:i + 4]) for i in range(0, len(lines), 4)]}


SCRIPTS = {"two-writes": _script_two_writes, "bash-once": _script_bash, "edit-deny": _script_edit,
           "cancelled": _script_cancelled, "multi-turn": _script_multi_turn, "long": _script_long}


def normal_script(messages: list):
    last_user, step = None, 0
    for msg in reversed(messages):
        if msg.get("role") == "tool":
            step += 1
        if msg.get("role") == "user":
            last_user = _text_of(msg.get("content"))
            break
    m = SCRIPT_MARKER.search(last_user or "")
    if m is None or m.group(1) not in SCRIPTS:
        return None
    cwd_m = CWD_MARKER.search(last_user)
    cwd = (cwd_m.group(1).strip() if cwd_m else "/tmp").rstrip("/") or "/"
    turn = sum(1 for msg in messages if msg.get("role") == "user")
    return SCRIPTS[m.group(1)](step, turn, cwd)
# ---- end of the normal-mode scripts ---------------------------------------------------------


PACE_MARKER = re.compile(r"\[\[pace=([0-9.]+)\]\]")


def _pace(messages: list) -> float:
    """Seconds between streamed chunks: a `[[pace=0.1]]` marker in any user message of the
    conversation (scenario r streams a delta every 0.1 s), else 0."""
    for msg in messages:
        if msg.get("role") == "user":
            m = PACE_MARKER.search(_text_of(msg.get("content")))
            if m:
                return min(float(m.group(1)), 2.0)
    return 0.0


def _next_call_id(reply: dict) -> str:
    """`call_N`; a pipeline candidate step's calls are `call_N_candidate` (run.py tells the
    parallel candidates' tool calls from the pipeline's own by it)."""
    global _counter
    with _counter_lock:
        _counter += 1
        return f"call_{_counter}" + ("_candidate" if reply.get("candidate") else "")


def _calls(reply: dict) -> list:
    """The tool calls of a "tool" reply: `calls`, or the single `name`/`arguments`."""
    return reply.get("calls") or [{"name": reply["name"], "arguments": reply["arguments"]}]


USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-llm/1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def _send_json(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = self.path.split("?")[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            self._send_json(200, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "fake"}]})
        elif path in ("/health", ""):
            self._send_json(200, {"status": "ok"})
        else:
            self._send_json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def do_POST(self):
        path = self.path.split("?")[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            req = json.loads(raw or b"{}")
        except ValueError:
            self._send_json(400, {"error": {"message": "bad json", "type": "invalid_request_error"}})
            return
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._send_json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
            return
        reply = decide(req.get("messages") or [], req.get("tools") or [])
        reply["pace"] = _pace(req.get("messages") or [])
        if _log_path:
            with _log_lock, open(_log_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"time": time.time(), "stream": bool(req.get("stream")),
                                     "reply": reply, "request": req}) + "\n")
        model = req.get("model") or MODEL
        cid = "chatcmpl-" + uuid.uuid4().hex[:20]
        created = int(time.time())
        if req.get("stream"):
            self._stream(reply, model, cid, created)
        else:
            self._complete(reply, model, cid, created)

    def _complete(self, reply, model, cid, created):
        if reply["kind"] == "tool":
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": _next_call_id(reply), "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in _calls(reply)]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": reply["text"]}
            if reply.get("reasoning"):
                message["reasoning_content"] = reply["reasoning"]
            finish = "stop"
        self._send_json(200, {"id": cid, "object": "chat.completion", "created": created, "model": model,
                              "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                              "usage": USAGE})

    def _stream(self, reply, model, cid, created):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

        def chunk(delta, finish=None, usage=None, choices=True):
            if reply.get("pace"):
                time.sleep(reply["pace"])
            body = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else []}
            if usage is not None:
                body["usage"] = usage
            self.wfile.write(b"data: " + json.dumps(body).encode() + b"\n\n")
            self.wfile.flush()

        try:
            if reply["kind"] == "tool":
                if reply.get("reasoning"):
                    chunk({"role": "assistant", "content": ""})
                    for word in reply["reasoning"].split(" "):
                        chunk({"reasoning_content": word + " "})
                    for word in (reply.get("text") or "").split():
                        chunk({"content": word + " "})
                for index, call in enumerate(_calls(reply)):
                    call_id = _next_call_id(reply)
                    chunk({"role": "assistant", "content": None, "tool_calls": [{
                        "index": index, "id": call_id, "type": "function",
                        "function": {"name": call["name"], "arguments": ""}}]})
                    args = call["arguments"]
                    half = len(args) // 2
                    for piece in (args[:half], args[half:]):
                        chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                chunk({}, finish="tool_calls")
            else:
                chunk({"role": "assistant", "content": ""})
                if reply.get("reasoning"):
                    for word in reply["reasoning"].split(" "):
                        chunk({"reasoning_content": word + " "})
                for piece in reply.get("chunks") or [w + " " for w in reply["text"].split(" ")]:
                    chunk({"content": piece})
                chunk({}, finish="stop")
            chunk(None, usage=USAGE, choices=False)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


def main(argv=None) -> int:
    global _log_path
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--log")
    args = ap.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print("fake_llm: refusing to bind a non-loopback address", file=sys.stderr)
        return 2
    _log_path = args.log
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    print(f"fake_llm listening on http://{args.host}:{args.port}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
