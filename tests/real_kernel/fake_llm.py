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


def decide(messages: list) -> dict:
    """Returns {"kind": "text", "text": ...[, "reasoning": ...]} or {"kind": "tool", "name", "arguments"}."""
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
        return {"kind": "tool", "name": "write_file", "arguments": json.dumps(args)}
    if last_user is not None and "think" in last_user.lower():
        return {"kind": "text", "text": TEXT_REPLY, "reasoning": THINKING}
    return {"kind": "text", "text": TEXT_REPLY}


def _next_call_id() -> str:
    global _counter
    with _counter_lock:
        _counter += 1
        return f"call_{_counter}"


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
        reply = decide(req.get("messages") or [])
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
                "id": _next_call_id(), "type": "function",
                "function": {"name": reply["name"], "arguments": reply["arguments"]}}]}
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
            body = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else []}
            if usage is not None:
                body["usage"] = usage
            self.wfile.write(b"data: " + json.dumps(body).encode() + b"\n\n")
            self.wfile.flush()

        try:
            if reply["kind"] == "tool":
                call_id = _next_call_id()
                chunk({"role": "assistant", "content": None, "tool_calls": [{
                    "index": 0, "id": call_id, "type": "function",
                    "function": {"name": reply["name"], "arguments": ""}}]})
                args = reply["arguments"]
                half = len(args) // 2
                for piece in (args[:half], args[half:]):
                    chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
                chunk({}, finish="tool_calls")
            else:
                chunk({"role": "assistant", "content": ""})
                if reply.get("reasoning"):
                    for word in reply["reasoning"].split(" "):
                        chunk({"reasoning_content": word + " "})
                for word in reply["text"].split(" "):
                    chunk({"content": word + " "})
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
