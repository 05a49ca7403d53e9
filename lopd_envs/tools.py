"""Tool schemas, tool-call parsing from model text, and tool rendering for prompts.

Models emit tool calls in several syntaxes and the benchmarks ask for different ones, so every env
accepts all of them and decides afterwards what a call means for scoring:

* ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes, Qwen, SmolLM chat templates);
* a bare JSON object or list of objects (``"arguments"`` or ``"parameters"``), optionally fenced;
* the Python-call syntax ``[f(a=1, b="x"), g()]`` that BFCL and ACEBench prompts request. It is read with
  :mod:`ast` and only literal values are accepted: model text is never evaluated.

A structured assistant message (``{"role": "assistant", "content", "tool_calls"}``) is taken as it is.

Whatever the syntax, a call's arguments are normalised when the action is parsed, by the one rule of
:func:`lopd_envs.jsonvalue.json_value`: plain JSON data (tuples become lists), bounded in depth, size and
integer width; anything else (bytes, sets, objects, NaN, non-string keys, 10**5000) makes the action a
parse error, which the env answers with an error observation. So suites, the conversation history and the
trace only ever see values that survive a JSON round trip, and nothing recursive meets unbounded input.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from collections.abc import Iterable
from typing import Any, cast

from lopd_envs.actions import AssistantTurn, ToolCall
from lopd_envs.jsonvalue import NotJSON, json_value

log = logging.getLogger(__name__)

MAX_ACTION_CHARS = 200_000


class ToolCallError(ValueError):
    """The action looked like a tool call but could not be read as one."""


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

_FENCE_LANGUAGE = re.compile(r"[a-zA-Z0-9_-]*")
_PY_CALL_START = re.compile(r"^\[?\s*[A-Za-z_][\w.]*\s*\(")
HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"

# Model-written text is scanned with ``str.find`` rather than the lazy regexes these functions replace
# (``<tool_call>\s*(.*?)\s*(?:</tool_call>|$)`` and ``^```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?```\s*$``): a lazy group
# followed by ``\s*`` backtracks quadratically over a long whitespace run (200,000 characters took minutes).
# Both return exactly what the regexes' groups returned, stripped.


def hermes_blocks(text: str) -> list[str]:
    """The stripped contents of every ``<tool_call>`` block, each ending at its first ``</tool_call>`` (an
    unclosed last block runs to the end of the text)."""
    blocks, at = [], 0
    while (start := text.find(HERMES_OPEN, at)) >= 0:
        start += len(HERMES_OPEN)
        end = text.find(HERMES_CLOSE, start)
        blocks.append(text[start:end if end >= 0 else len(text)].strip())
        if end < 0:
            break
        at = end + len(HERMES_CLOSE)
    return blocks


def _strip_fence(text: str) -> str:
    """The body of ``text`` when it is one fenced block (a language tag after the opening fence is dropped),
    else ``text``; stripped either way."""
    text = text.strip()
    if len(text) < 6 or not (text.startswith("```") and text.endswith("```")):
        return text
    return text[cast(re.Match, _FENCE_LANGUAGE.match(text, 3)).end():len(text) - 3].strip()  # it matches ""


def _source(node: ast.AST, limit: int = 200) -> str:
    """A node's source for an error message; ``ast.unparse`` itself fails on integers beyond Python's
    int-string limit and on very deep trees."""
    try:
        return ast.unparse(node)[:limit]
    except (ValueError, RecursionError, MemoryError):
        return f"<{type(node).__name__} expression>"


def _arguments(value: Any, name: str) -> dict[str, Any]:
    """A call's arguments as JSON data (:func:`json_value`), or the :class:`ToolCallError` saying why not."""
    try:
        value = json_value(value, max_chars=MAX_ACTION_CHARS)
    except NotJSON as exc:
        raise ToolCallError(f"arguments of {name!r}: {exc}") from None
    if not isinstance(value, dict):
        raise ToolCallError(f"arguments of {name!r} must be an object, got {type(value).__name__}")
    return value


def _loads(text: str) -> Any:
    """``json.loads`` with every way it fails on model text as a :class:`ToolCallError` (it raises
    ``ValueError`` for integers beyond Python's int-string limit and ``RecursionError`` for deep nesting)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ToolCallError(f"invalid JSON: {str(exc)[:200]}") from None


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
            args = _loads(args) if args.strip() else {}
        except ToolCallError as exc:
            raise ToolCallError(f"arguments of {name!r} are not valid JSON: {exc}") from None
    return ToolCall(str.__str__(name), _arguments({} if args is None else args, name))


def _calls_from_json_text(text: str) -> list[ToolCall]:
    data = _loads(text)
    items = data if isinstance(data, list) else [data]
    return [_call_from_json(item) for item in items]


def _dotted_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted_name(node.value)}.{node.attr}"
    raise ToolCallError(f"function name must be a dotted identifier, got {_source(node)!r}")


def literal_value(node: ast.AST, names_as_strings: bool = False) -> Any:
    """The value of a literal expression. ``names_as_strings`` reads a bare identifier as its own
    name, which is what BFCL's decoder does for ``unit=celsius``; anything else non-literal fails."""
    if names_as_strings and isinstance(node, ast.Name) and node.id not in ("True", "False", "None"):
        return node.id
    if names_as_strings and isinstance(node, (ast.List, ast.Tuple)):
        return [literal_value(e, True) for e in node.elts]
    if names_as_strings and isinstance(node, ast.Dict) and None not in node.keys:
        try:
            return {literal_value(cast(ast.expr, k), True): literal_value(v, True)  # no ** entry (a None key)
                    for k, v in zip(node.keys, node.values)}
        except TypeError:
            raise ToolCallError(f"unhashable dictionary key in {_source(node)!r}") from None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ToolCallError(f"argument value is not a literal: {_source(node)!r}") from None


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
            raise ToolCallError(f"expected a function call, got {_source(node)!r}")
        if node.args:
            raise ToolCallError(f"positional arguments are not allowed in {_source(node)!r}")
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise ToolCallError("**kwargs unpacking is not allowed in a tool call")
            kwargs[kw.arg] = literal_value(kw.value, names_as_strings)
        name = _dotted_name(node.func)
        calls.append(ToolCall(name, _arguments(kwargs, name)))
    return calls


def parse_tool_calls(text: str) -> AssistantTurn:
    """Read tool calls from model text in any supported syntax. Never raises.

    Text that does not look like a tool call is a plain message (no calls, no error); text that looks
    like one but is malformed gets ``parse_error`` so the env can answer with an error observation.
    """
    if not isinstance(text, str):
        return AssistantTurn(_preview(text), parse_error=f"action must be text or a message, got {type(text).__name__}")
    text = str.__str__(text)
    if len(text) > MAX_ACTION_CHARS:
        return AssistantTurn(text[:MAX_ACTION_CHARS], parse_error=f"action longer than {MAX_ACTION_CHARS} characters")
    body = _strip_fence(text)
    if "<tool_call>" in text:
        syntax, read = "hermes", lambda: [c for block in hermes_blocks(text)
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


def _preview(value: Any, limit: int = 1000) -> str:
    """Bounded text for an action that is not one: its JSON when it has one (checked by the iterative
    :func:`json_value` first, so ``repr``/``str`` never recurse through hostile nesting), else its type."""
    try:
        return json.dumps(json_value(value, max_chars=MAX_ACTION_CHARS), ensure_ascii=False)[:limit]
    except NotJSON:
        return f"<{type(value).__name__}>"


def _parse_message(action: dict[Any, Any]) -> AssistantTurn:
    """A structured assistant message. Its fields are untrusted objects: they are type-checked before
    any comparison or truth test, since ``==``/``bool`` on a foreign object (a NumPy array, a proxy)
    may raise or answer with an array."""
    role = action.get("role", "assistant")
    if (not isinstance(role, str) or role != "assistant"
            or ("content" not in action and "tool_calls" not in action)):
        return AssistantTurn(_preview(action), parse_error="a message action must be an assistant message with "
                                                           "'content' and/or 'tool_calls'")
    content = action.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        return AssistantTurn(_preview(content), parse_error="message 'content' must be a string")
    content = str.__str__(content)
    if len(content) > MAX_ACTION_CHARS:
        return AssistantTurn(content[:MAX_ACTION_CHARS], parse_error=f"content longer than {MAX_ACTION_CHARS} characters",
                             syntax="structured")
    raw_calls = action.get("tool_calls")
    if raw_calls is None:
        raw_calls = []
    if not isinstance(raw_calls, list):
        return AssistantTurn(content, parse_error="'tool_calls' must be a list", syntax="structured")
    try:
        calls = [_call_from_json(c) for c in json_value(raw_calls, max_chars=MAX_ACTION_CHARS)]
    except NotJSON as exc:
        return AssistantTurn(content, parse_error=f"'tool_calls': {exc}", syntax="structured")
    except ToolCallError as exc:
        return AssistantTurn(content, parse_error=str(exc), syntax="structured")
    if not calls:
        return parse_tool_calls(content)
    return AssistantTurn(content, calls, syntax="structured")


def parse_action(action: Any) -> AssistantTurn:
    """Either raw model text or a structured assistant message; never raises. Every failure a model's
    action can cause is handled where it arises; the last ``except`` only keeps the contract should a
    parser bug remain (the fuzz suite fails on its message)."""
    try:
        if isinstance(action, str):
            return parse_tool_calls(action)
        if isinstance(action, dict):
            return _parse_message(action)
        return AssistantTurn(_preview(action), parse_error=f"action must be text or a message, got {type(action).__name__}")
    except Exception as exc:  # the contract: nothing raises out of step
        log.exception("tool-call parser failed on an action")
        return AssistantTurn("", parse_error=f"internal parser error: {type(exc).__name__}")


def render_python_calls(calls: list[ToolCall]) -> str:
    """Calls in the ``[f(a=1)]`` syntax that BFCL and ACEBench answers use."""
    parts = []
    for call in calls:
        args = ", ".join(f"{k}={v!r}" for k, v in call.arguments.items())
        parts.append(f"{call.name}({args})")
    return f"[{', '.join(parts)}]"
