"""Tool schemas, tool-call parsing from model text, and tool rendering for prompts.

Models emit tool calls in several syntaxes and the benchmarks ask for different ones, so every env
accepts all of them and decides afterwards what a call means for scoring:

* ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes, Qwen, SmolLM chat templates);
* a bare JSON object or list of objects (``"arguments"`` or ``"parameters"``), optionally fenced;
* the Python-call syntax ``[f(a=1, b="x"), g()]`` that BFCL and ACEBench prompts request. It is read with
  :mod:`ast` and only literal values are accepted: model text is never evaluated.

A structured assistant message (``{"role": "assistant", "content", "tool_calls"}``) is taken as it is.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

MAX_ACTION_CHARS = 200_000


class ToolCallError(ValueError):
    """The action looked like a tool call but could not be read as one."""


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass
class AssistantTurn:
    """An agent action after parsing: the raw text, the calls read from it, and why reading failed."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    parse_error: str | None = None
    syntax: str = "text"  # text | hermes | json | python | structured

    @property
    def message(self) -> dict[str, Any]:
        """The turn as an OpenAI-style assistant message for the conversation history."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            msg["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        return msg


# --------------------------------------------------------------------------- names

_SAFE_NAME = re.compile(r"[^a-zA-Z0-9_-]")


def sanitize_name(name: str) -> str:
    """Function-calling APIs accept only ``[a-zA-Z0-9_-]``; dots (``math.factorial``) become ``_``."""
    return _SAFE_NAME.sub("_", name)


class ToolNames:
    """Maps the names an agent may use (dataset spelling or sanitised) back to the dataset spelling."""

    def __init__(self, names: Iterable[str]):
        self.canonical: dict[str, str] = {}
        for name in names:
            self.canonical[name] = name
            self.canonical.setdefault(sanitize_name(name), name)

    def resolve(self, name: str) -> str:
        """The dataset spelling of ``name``, or ``name`` itself when it is no known tool."""
        return self.canonical.get(name, name)

    def __contains__(self, name: str) -> bool:
        return name in self.canonical


# --------------------------------------------------------------------------- schemas

_JSON_TYPES = {
    "dict": "object", "object": "object", "float": "number", "number": "number", "integer": "integer",
    "int": "integer", "string": "string", "str": "string", "boolean": "boolean", "bool": "boolean",
    "array": "array", "list": "array", "tuple": "array", "null": "null",
}


def _to_json_schema(schema: Any) -> Any:
    """Benchmark parameter schemas use Python type names ("dict", "float", "tuple", Java types);
    function-calling APIs want JSON Schema. Unknown types become strings described by their name."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    typ = schema.get("type")
    if isinstance(typ, str):
        mapped = _JSON_TYPES.get(typ.lower())
        if mapped is None:
            out["type"] = "string"
            out["description"] = f"{schema.get('description', '')} (type: {typ})".strip()
        else:
            out["type"] = mapped
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: _to_json_schema(v) for k, v in schema["properties"].items()}
    if isinstance(schema.get("items"), dict):
        out["items"] = _to_json_schema(schema["items"])
    return out


def openai_tool(function: dict[str, Any], sanitize: bool = False) -> dict[str, Any]:
    """A benchmark function description as an OpenAI tool schema."""
    params = _to_json_schema(function.get("parameters") or {"type": "object", "properties": {}})
    name = sanitize_name(function["name"]) if sanitize else function["name"]
    return {"type": "function",
            "function": {"name": name, "description": function.get("description", ""), "parameters": params}}


def render_tool_prompt(tools: list[dict[str, Any]], syntax: str = "hermes") -> str:
    """Tools as system-prompt text, for models whose chat template ignores ``tools=`` (SmolLM2's does).

    ``syntax="python"`` asks for ``[func(a=1)]`` as BFCL and ACEBench prompts do; ``"hermes"`` asks for
    ``<tool_call>`` JSON blocks. Either way the env parses every syntax.
    """
    listing = "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools)
    if syntax == "python":
        how = ("To call functions, reply with only a list in the form "
               "[func_name1(param1=value1, param2=value2), func_name2(param=value)] and nothing else.")
    else:
        how = ('To call a function, reply with <tool_call>{"name": <function-name>, "arguments": '
               "<args-json-object>}</tool_call>, one block per call.")
    return f"You may call the following functions:\n{listing}\n\n{how}"


# --------------------------------------------------------------------------- parsing

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?```\s*$", re.S)
_PY_CALL_START = re.compile(r"^\[?\s*[A-Za-z_][\w.]*\s*\(")


def _strip_fence(text: str) -> str:
    m = _FENCE.match(text.strip())
    return m.group(1).strip() if m else text.strip()


def _call_from_json(obj: Any) -> ToolCall:
    if not isinstance(obj, dict):
        raise ToolCallError(f"a tool call must be a JSON object, got {type(obj).__name__}")
    if isinstance(obj.get("function"), dict):  # OpenAI wire format
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ToolCallError("tool call without a string 'name'")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolCallError(f"arguments of {name!r} are not valid JSON: {exc}") from None
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ToolCallError(f"arguments of {name!r} must be an object, got {type(args).__name__}")
    return ToolCall(name, args)


def _calls_from_json_text(text: str) -> list[ToolCall]:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ToolCallError(f"invalid JSON: {exc}") from None
    items = data if isinstance(data, list) else [data]
    return [_call_from_json(item) for item in items]


def _dotted_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted_name(node.value)}.{node.attr}"
    raise ToolCallError(f"function name must be a dotted identifier, got {ast.unparse(node)!r}")


def literal_value(node: ast.AST, names_as_strings: bool = False) -> Any:
    """The value of a literal expression. ``names_as_strings`` reads a bare identifier as its own
    name, which is what BFCL's decoder does for ``unit=celsius``; anything else non-literal fails."""
    if names_as_strings and isinstance(node, ast.Name) and node.id not in ("True", "False", "None"):
        return node.id
    if names_as_strings and isinstance(node, (ast.List, ast.Tuple)):
        return [literal_value(e, True) for e in node.elts]
    if names_as_strings and isinstance(node, ast.Dict) and None not in node.keys:
        return {literal_value(k, True): literal_value(v, True) for k, v in zip(node.keys, node.values)}
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ToolCallError(f"argument value is not a literal: {ast.unparse(node)[:200]!r}") from None
    return _json_like(value)


def _json_like(value: Any) -> Any:
    """Tuples become lists; sets, bytes, complex and Ellipsis have no JSON form, so they are refused
    (arguments must survive the trace's JSON round trip)."""
    if isinstance(value, (list, tuple)):
        return [_json_like(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, (str, int, float, bool)) or k is None for k in value):
            raise ToolCallError("dictionary keys must be strings or numbers")
        return {k: _json_like(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise ToolCallError(f"argument value of type {type(value).__name__} is not allowed")


def parse_python_calls(text: str, names_as_strings: bool = False) -> list[ToolCall]:
    """Read ``[f(a=1), g(b="x")]`` (brackets optional) into calls; keyword arguments only."""
    source = text.strip()
    if not source.startswith("["):
        source = f"[{source}]"
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ToolCallError(f"invalid Python call syntax: {exc}") from None
    body = tree.body
    elements = body.elts if isinstance(body, (ast.List, ast.Tuple)) else [body]
    calls = []
    for node in elements:
        if not isinstance(node, ast.Call):
            raise ToolCallError(f"expected a function call, got {ast.unparse(node)[:200]!r}")
        if node.args:
            raise ToolCallError(f"positional arguments are not allowed in {ast.unparse(node)[:200]!r}")
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise ToolCallError("**kwargs unpacking is not allowed in a tool call")
            kwargs[kw.arg] = literal_value(kw.value, names_as_strings)
        calls.append(ToolCall(_dotted_name(node.func), kwargs))
    return calls


def parse_tool_calls(text: str) -> AssistantTurn:
    """Read tool calls from model text in any supported syntax. Never raises.

    Text that does not look like a tool call is a plain message (no calls, no error); text that looks
    like one but is malformed gets ``parse_error`` so the env can answer with an error observation.
    """
    if not isinstance(text, str):
        return AssistantTurn(str(text), parse_error=f"action must be text or a message, got {type(text).__name__}")
    if len(text) > MAX_ACTION_CHARS:
        return AssistantTurn(text[:MAX_ACTION_CHARS], parse_error=f"action longer than {MAX_ACTION_CHARS} characters")
    body = _strip_fence(text)
    if "<tool_call>" in text:
        syntax, read = "hermes", lambda: [c for block in _HERMES.findall(text)
                                          for c in _calls_from_json_text(_strip_fence(block))]
    elif body.startswith("{") or re.match(r"^\[\s*[{\]]", body):  # an object, a list of objects, or []
        syntax, read = "json", lambda: _calls_from_json_text(body)
    elif _PY_CALL_START.match(body) or (body.startswith("[") and body.endswith("]")):
        syntax, read = "python", lambda: parse_python_calls(body)
    else:
        return AssistantTurn(text)
    try:
        return AssistantTurn(text, read(), syntax=syntax)
    except ToolCallError as exc:
        return AssistantTurn(text, parse_error=str(exc), syntax=syntax)


def parse_action(action: Any) -> AssistantTurn:
    """Either raw model text or a structured assistant message; never raises."""
    if isinstance(action, str):
        return parse_tool_calls(action)
    if isinstance(action, dict):
        content = action.get("content") or ""
        if not isinstance(content, str):
            return AssistantTurn(str(content)[:1000], parse_error="message 'content' must be a string")
        raw_calls = action.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            return AssistantTurn(content, parse_error="'tool_calls' must be a list", syntax="structured")
        try:
            calls = [_call_from_json(c) for c in raw_calls]
        except ToolCallError as exc:
            return AssistantTurn(content, parse_error=str(exc), syntax="structured")
        if not calls:
            return parse_tool_calls(content)
        return AssistantTurn(content, calls, syntax="structured")
    return AssistantTurn(repr(action)[:1000], parse_error=f"action must be text or a message, got {type(action).__name__}")


def render_python_calls(calls: list[ToolCall]) -> str:
    """Calls in the ``[f(a=1)]`` syntax that BFCL and ACEBench answers use."""
    parts = []
    for call in calls:
        args = ", ".join(f"{k}={v!r}" for k, v in call.arguments.items())
        parts.append(f"{call.name}({args})")
    return f"[{', '.join(parts)}]"
