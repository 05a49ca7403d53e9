"""An OpenAI-compatible ``/v1/chat/completions`` stand-in on a local port that reads the request's messages
as strictly as llama.cpp's server does and answers HTTP 500 to what it refuses (llama.cpp parses every
message field into a typed value, and a null where it expects a string is a server error there):

- ``tool_calls``, when present, must be a non-empty list of ``{"type": "function", "function": {"name",
  "arguments"}}`` (``"tool_calls": null`` is what verifiers writes into every assistant message, few-shot
  examples included; llama.cpp answers 500 to it, OpenAI refuses an empty list);
- ``reasoning_content``, ``name`` and ``tool_call_id``, when present, must be strings (null is a 500);
- ``content`` must be a string, a list of text parts or null, and a message needs content or tool calls;
- a ``tool`` message needs its ``tool_call_id``.

Each request is kept in ``requests`` (its body) and each refusal's reasons in ``rejected``. The answer is
``reply(body)`` (a message dict), by default the same as ``tests/fake_openai.py``'s: the first offered tool
called natively when ``tools`` are sent, a code block otherwise; streamed as server-sent events when the
request asks for ``stream`` (verifiers.v1's model proxy does)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from tests.fake_openai import LoopbackServer, QuietJSONHandler, completion

ROLES = ("system", "developer", "user", "assistant", "tool")
STRING_FIELDS = ("reasoning_content", "name", "tool_call_id")


def message_errors(messages: Any) -> list[str]:
    """Why a strict server refuses these chat messages (empty when it accepts them)."""
    if not isinstance(messages, list) or not messages:
        return ["'messages' must be a non-empty array"]
    errors = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            errors.append(f"{where} is not an object")
            continue
        if m.get("role") not in ROLES:
            errors.append(f"{where}: role {m.get('role')!r}")
        content = m.get("content")
        if "content" in m and not (content is None or isinstance(content, str) or (
                isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                                  and isinstance(p.get("text"), str) for p in content))):
            errors.append(f"{where}: content must be a string, text parts or null")
        if "tool_calls" in m:
            calls = m["tool_calls"]
            if not isinstance(calls, list) or not calls:
                errors.append(f"{where}: tool_calls must be a non-empty array, got {json.dumps(calls)}")
            else:
                for j, call in enumerate(calls):
                    fn = call.get("function") if isinstance(call, dict) else None
                    if not (isinstance(fn, dict) and call.get("type") == "function"
                            and isinstance(fn.get("name"), str) and isinstance(fn.get("arguments"), str)
                            and isinstance(call.get("id", ""), str)):
                        errors.append(f"{where}.tool_calls[{j}]: {json.dumps(call)}")
        elif content is None:
            errors.append(f"{where}: needs 'content' or 'tool_calls'")
        for key in STRING_FIELDS:
            if key in m and not isinstance(m[key], str):
                errors.append(f"{where}: {key} must be a string, got {json.dumps(m[key])}")
        if m.get("role") == "tool" and not isinstance(m.get("tool_call_id"), str):
            errors.append(f"{where}: a tool message needs its tool_call_id")
    return errors


def default_reply(body: dict[str, Any]) -> dict[str, Any]:
    if body.get("tools"):
        fn = body["tools"][0]["function"]["name"]
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": fn, "arguments": "{}"}}]}
    return {"role": "assistant", "content": "```python\nprint(1)\n```"}


# BFCL-v3 questions and their gold answers in the text protocol (simple_1's), for tests that need one right and
# one wrong episode
GOLD = {"Calculate the factorial of 5 using math functions.": "[math.factorial(number=5)]"}


def gold_reply(body: dict[str, Any]) -> dict[str, Any]:
    """The gold answer (text) to a question in :data:`GOLD` (the last user turn ends with it), a refusal to any
    other."""
    question = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    answer = next((a for q, a in GOLD.items() if isinstance(question, str) and question.endswith(q)),
                  "I cannot help.")
    return {"role": "assistant", "content": answer}


class StrictServer(LoopbackServer):
    def __init__(self, reply: Callable[[dict[str, Any]], dict[str, Any]] = default_reply):
        self.requests: list[dict[str, Any]] = []
        self.rejected: list[list[str]] = []
        self.reply = reply
        self._lock = threading.Lock()
        server = self

        class Handler(QuietJSONHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                errors = message_errors(body.get("messages"))
                with server._lock:
                    server.requests.append(body)
                    if errors:
                        server.rejected.append(errors)
                if errors:
                    return self._send(500, {"error": {"code": 500, "type": "server_error",
                                                      "message": "Failed to parse messages: " + "; ".join(errors)}})
                message = server.reply(body)
                if body.get("stream"):
                    return self._stream(message, (body.get("stream_options") or {}).get("include_usage"))
                self._send(200, completion(message))

            def _stream(self, message, usage):
                """The reply as server-sent events, as OpenAI streams it: the content (or the tool calls) in
                one delta, the finish reason, the usage when asked for, then ``[DONE]``."""
                chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
                delta = {"role": "assistant"}
                if message.get("content") is not None:
                    delta["content"] = message["content"]
                if message.get("tool_calls"):
                    delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                events = [{**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                          {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}]
                if usage:
                    events.append({**chunk, "choices": [], "usage": completion(message)["usage"]})
                data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.serve(Handler)
