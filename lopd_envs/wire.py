"""The OpenAI chat-completions wire format, in one place: what every piece that talks to an OpenAI-compatible
model (the agent loop, ``lopd-eval``'s openai backend, the framework adapters) sends and reads.

Three jobs:

* tools out: :func:`openai_tools`, our function descriptions (``info["tools"]``) as the API's ``tools=`` list;
* a reply in: :func:`read_message`, an assistant message off the wire (``tool_calls`` with ids, arguments as
  JSON text, ``content`` as text or content parts) as our action (:attr:`WireReply.action`, or a parsed
  :class:`~lopd_envs.actions.AssistantTurn`). Malformed or enormous input never raises: it comes back as
  :attr:`WireReply.error`, and the best-effort action beside it still goes to the env, which answers what it
  cannot read with its error observation (docs/design.md section 3), so nothing raises out of a step;
* pairing: :func:`answered_calls` and :func:`link_tool_results` give each tool result the ``tool_call_id``
  of the call it answers, and :func:`openai_messages` writes a whole transcript of ours in the wire format.

It sits low in ``lopd_envs``: it stands on :mod:`.actions` and :mod:`.tools` and nothing above, so the envs'
own loop and the trainer's adapters can both use it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lopd_envs.actions import AssistantTurn
from lopd_envs.tools import openai_tool, parse_action

#: JSON nested deeper than this stays text (chat-completions messages nest about 6 levels; arguments of real
#: calls a few more).
MAX_DEPTH = 64
#: A message whose text (content and arguments together) is longer than this is an error: no real turn is near
#: it, and reading it further would only cost time. The env's own limit on what it accepts is smaller.
MAX_CHARS = 4 << 20

Message = dict[str, Any]


def function_of(item: dict[str, Any]) -> dict[str, Any]:
    """The function inside a tool schema or a tool call: ``item["function"]`` in the wire shape, else the
    item itself (our shapes: ``name``, ``description``, ``parameters``; ``name``, ``arguments``)."""
    fn = item.get("function")
    return fn if isinstance(fn, dict) else item


def openai_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our tool schemas in the ``tools=`` shape of the chat-completions API, with JSON Schema types (the
    benchmarks write Python type names such as ``"dict"``); schemas already in that shape are copied as they
    are."""
    out = []
    for t in tools:
        if t.get("type") == "function" and "function" in t:
            out.append(copy.deepcopy(t))
        else:
            out.append(copy.deepcopy(openai_tool({**t, "name": t.get("name", "")})))
    return out


def depth(value: Any) -> int:
    """Nesting depth of decoded JSON, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, d = stack.pop()
        deepest = max(deepest, d)
        if isinstance(item, dict):
            stack.extend((v, d + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, d + 1) for v in item)
    return deepest


def decode_arguments(raw: Any) -> Any:
    """A call's arguments decoded when they are a JSON string (empty text: no arguments); text that is not
    JSON, too deep or too long stays text, which the env answers with its error observation."""
    if not isinstance(raw, str):
        return raw
    if len(raw) > MAX_CHARS:
        return raw
    try:
        args = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError, MemoryError):  # bad JSON, an int past Python's limit, deep nesting
        return raw
    return args if depth(args) <= MAX_DEPTH else raw


def _snippet(value: Any) -> str:
    try:
        return json.dumps(value, default=str)[:200]
    except (ValueError, RecursionError):
        return f"<{type(value).__name__}>"


def content_text(content: Any) -> tuple[Any, str | None]:
    """``(text, error)`` of a message's ``content``: a string as it is, ``None`` as empty, content parts as
    their text parts joined (other part types, such as a refusal, carry no answer text). Anything else is an
    error, and the content is handed on as it is."""
    if content is None or isinstance(content, str):
        return content or "", None
    if not isinstance(content, list):
        return content, (f"message.content is a {type(content).__name__}, not a string or content parts: "
                         f"{_snippet(content)}")
    texts = []
    for part in content:
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            return content, f"message.content holds a part that is not a typed object: {_snippet(part)}"
        if part["type"] == "text":
            if not isinstance(part.get("text"), str):
                return content, f"message.content has a text part without a string 'text': {_snippet(part)}"
            texts.append(part["text"])
    return "".join(texts), None


def _raw_size(content: Any, calls: list[Any]) -> int:
    """Characters of text in a message: its content and its calls' argument strings, before any decoding."""
    size = len(content) if isinstance(content, str) else 0
    for c in calls:
        fn = c.get("function") if isinstance(c, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else c.get("arguments") if isinstance(c, dict) else None
        size += len(args) if isinstance(args, str) else 0
    return size


def read_call(call: Any, decode: bool = True) -> tuple[Any, str | None, str | None]:
    """``(call, id, error)`` for one entry of ``tool_calls``: a wire call (``{"id", "type", "function":
    {"name", "arguments": "<json>"}}``) as our ``{"name", "arguments"}``, its arguments decoded unless
    ``decode`` is False; a call already in our shape, or anything else, handed on as it is (the env judges
    it)."""
    cid = call.get("id") if isinstance(call, dict) else None
    cid = cid if isinstance(cid, str) else None
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        ours = isinstance(call, dict) and isinstance(call.get("name"), str)
        return call, cid, None if ours else f"a tool call without a function name: {_snippet(call)}"
    name, args = fn.get("name", ""), fn.get("arguments")
    error = None
    if not isinstance(name, str):
        error = f"a tool call without a function name: {_snippet(call)}"
    elif args is not None and not isinstance(args, (str, dict)):
        error = f"tool call arguments are neither a JSON string nor an object: {_snippet(call)}"
    return {"name": name, "arguments": decode_arguments(args) if decode else args}, cid, error


@dataclass(frozen=True)
class WireReply:
    """One assistant message read off the wire. ``content``: its text (content parts joined); ``calls``:
    ``[{"name", "arguments"}]`` in order, ``ids`` their ``tool_call_id``s (None where the call had none);
    ``error``: why the message is not a well-formed assistant message (then ``content`` and ``calls`` are
    the best that could be read, handed on for the env to judge); ``role`` as the message gave it."""

    content: Any = ""
    calls: list[Any] = field(default_factory=list)
    ids: list[str | None] = field(default_factory=list)
    error: str | None = None
    role: Any = "assistant"

    @property
    def action(self) -> Message:
        """The action for ``env.step``: a structured assistant message."""
        action: Message = {"role": self.role, "content": self.content}
        if self.calls:
            action["tool_calls"] = self.calls
        return action

    def turn(self) -> AssistantTurn:
        """The reply as the env reads it: its calls as :class:`~lopd_envs.actions.ToolCall` values, or a turn
        whose ``parse_error`` says what was wrong."""
        if self.error:
            text = self.content if isinstance(self.content, str) else ""
            return AssistantTurn(text, parse_error=f"malformed reply: {self.error}", syntax="structured")
        return parse_action(self.action)

    def with_ids(self) -> list[dict[str, Any]]:
        """The calls as ``[{"name", "arguments", "id"}]``."""
        return [{**c, "id": i} if isinstance(c, dict) else c for c, i in zip(self.calls, self.ids)]


def read_message(message: Any) -> WireReply:
    """An assistant message off the wire (a chat-completions ``choices[i].message``, or an agent's reply in
    that shape) as a :class:`WireReply`. Never raises: what is malformed or too large is the reply's
    ``error``; a message over :data:`MAX_CHARS` is not decoded further."""
    if not isinstance(message, dict):
        return WireReply(message, error=f"message is a {type(message).__name__}, not an object: {_snippet(message)}")
    role = message.get("role", "assistant")
    content, error = content_text(message.get("content"))
    raw_calls = message.get("tool_calls")
    if raw_calls and not isinstance(raw_calls, list):
        return WireReply(content, error=error or f"message.tool_calls is not a list: {_snippet(raw_calls)}", role=role)
    raw_calls = raw_calls or []
    size = _raw_size(content, raw_calls)
    if size > MAX_CHARS:
        error = error or f"a message of {size} characters, over the {MAX_CHARS} character limit"
    calls, ids = [], []
    for raw in raw_calls:
        call, cid, why = read_call(raw, decode=size <= MAX_CHARS)
        calls.append(call)
        ids.append(cid)
        error = error or why
    return WireReply(content, calls, ids, error, role)


def answered_calls(messages: Sequence[Message], calls: int) -> list[int | None]:
    """For each message, the position of the call it answers: tool results answer the ``calls`` calls of the
    turn before them in the order they were made; None for other messages and for results past the last
    call."""
    out: list[int | None] = []
    k = 0
    for m in messages:
        if m.get("role") == "tool" and k < calls:
            out.append(k)
            k += 1
        else:
            out.append(None)
    return out


def link_tool_results(observation: Sequence[Message], ids: Sequence[str | None]) -> list[Message]:
    """The env's new messages with each tool result carrying the ``tool_call_id`` of the call it answers,
    when the env answered every call, one result each (otherwise which result answers which call is a
    guess, and none is linked)."""
    out = [dict(m) for m in observation]
    if ids and sum(m.get("role") == "tool" for m in out) == len(ids):
        for m, k in zip(out, answered_calls(out, len(ids))):
            if k is not None and ids[k] is not None:
                m.setdefault("tool_call_id", ids[k])
    return out


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content)


def openai_messages(messages: Sequence[Message]) -> list[Message]:
    """Our chat messages in the wire format: assistant tool calls with ids (made up where a call has none)
    and JSON-string arguments, each following tool result answering the next id in order (servers that
    check ``tool_call_id`` need it), every content a string."""
    out: list[Message] = []
    pending: list[str] = []
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = []
            for k, c in enumerate(m["tool_calls"]):
                args = c.get("arguments")
                calls.append({"id": c.get("id") or f"call_{len(out)}_{k}", "type": "function", "function": {
                    "name": c["name"], "arguments": args if isinstance(args, str) else json.dumps(args or {})}})
            out.append({"role": "assistant", "content": m.get("content") or "", "tool_calls": calls})
            pending = [c["id"] for c in calls]
        elif m.get("role") == "tool":
            wire = {"role": "tool", "content": _text(m.get("content")), "name": m.get("name", "")}
            if pending:  # the rule of answered_calls, applied as the messages come
                wire["tool_call_id"] = pending.pop(0)
            out.append(wire)
        else:
            out.append({"role": m.get("role", "user"), "content": _text(m.get("content"))})
    return out
