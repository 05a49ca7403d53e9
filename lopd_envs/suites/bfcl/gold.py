"""Ground-truth answers as agent actions: for replay tests, benchmarks and scripted baselines.

A single-turn possible answer lists allowed values per parameter; the replay takes one allowed value for
each (the first that is not ``""``, omitting the parameter when ``""`` is its only value) and writes it the
way a model must: Python values as they are, Java and JavaScript values as strings in the language's syntax
(``"new int[]{1, 2}"``, ``"[1, 2]"``, ``"50L"``). Multi-turn ground truth is a list of call strings per turn,
some with positional arguments, which the harness's text decoder would drop; the replay names them from the
API method's signature.
"""

from __future__ import annotations

import ast
import inspect
import json
from typing import Any, cast

from lopd_envs.actions import ToolCall
from lopd_envs.suites.bfcl.api import api_class, public_methods
from lopd_envs.tools import render_python_calls

# ------------------------------------------------------------------------------ single turn


def pick(allowed: list) -> tuple[bool, Any]:
    """``(present, value)``: the first allowed value that is not ``""``."""
    for value in allowed:
        if value != "":
            return True, value
    return False, None


def _pick_dict(option: dict) -> dict:
    out = {}
    for key, allowed in option.items():
        present, value = pick(allowed)
        if present:
            out[key] = value
    return out


def java_source(value: Any, declared: str, nested: str | None) -> str:
    """A Python value as the Java source text the converter turns back into it."""
    if declared == "boolean":
        return "true" if value else "false"
    if declared == "long":
        return f"{value}L"
    if declared == "float":
        return f"{value}f"
    if isinstance(value, str):
        return value  # a variable name, or text the converter keeps as text
    if declared in ("Array", "ArrayList"):
        items = value if isinstance(value, list) else [value]
        if declared == "Array":
            inner = ", ".join(str(x) if nested in ("String", "any", "char") or (nested is None and isinstance(x, str))
                              else java_source(x, nested or "any", None) for x in items)
            return f"new {nested or 'Object'}[]{{{inner}}}"
        inner = ", ".join(f'"{x}"' if nested in ("String", "char") else java_source(x, nested or "any", None)
                          for x in items)
        return f"new ArrayList<>(Arrays.asList({inner}))"
    if declared == "HashMap":
        puts = " ".join(f'put("{k}", {_java_literal(v)});' for k, v in value.items())
        return f"new HashMap<String, Object>() {{{{ {puts} }}}}"
    return _plain(value)


def _java_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def js_source(value: Any, declared: str, nested: str | None) -> str:
    """A Python value as the JavaScript source text the converter turns back into it."""
    if declared == "Boolean":
        return "true" if value else "false"
    if declared == "Bigint":
        return f"{value}n"
    if isinstance(value, str):
        return value
    if declared == "array":
        return "[" + ", ".join(_js_literal(x) for x in (value if isinstance(value, list) else [value])) + "]"
    if declared == "dict":
        return "{" + ", ".join(f'"{k}": {_js_literal(v)}' for k, v in value.items()) + "}"
    return _plain(value)


def _js_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_js_literal(x) for x in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f'"{k}": {_js_literal(v)}' for k, v in value.items()) + "}"
    return str(value)


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _doc_name(name: str, functions: list[dict]) -> str:
    """The described function an answer means. A few answers drop a module prefix
    (``find_closest`` for ``restaurant_search.find_closest``); the checker uses the description's name."""
    names = [f["name"] for f in functions]
    if name in names:
        return name
    matches = [n for n in names if n.endswith("." + name)] or names[:1]
    return matches[0]


def single_turn_gold_calls(functions: list[dict], answer: list[dict], language: str) -> list[ToolCall]:
    """The ground truth with one allowed value per parameter, as calls in the task's language."""
    docs = {f["name"]: f for f in functions}
    calls = []
    for expected in answer:
        name, params = next(iter(expected.items()))
        name = _doc_name(name, functions)
        properties = docs[name]["parameters"]["properties"]
        args = {}
        for param, allowed in params.items():
            present, value = pick(allowed)
            if not present or (param not in properties and "" in allowed):
                continue  # a few answers allow an undeclared parameter; only omitting it passes
            schema = properties.get(param, {})
            if isinstance(value, dict) and schema.get("type") in ("dict", "HashMap"):
                value = _pick_dict(value)
            elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                value = [_pick_dict(v) for v in value]
            nested = (schema.get("items") or {}).get("type")
            if language == "Java":
                value = java_source(value, schema.get("type", "String"), nested)
            elif language == "JavaScript":
                value = js_source(value, schema.get("type", "String"), nested)
            args[param] = value
        calls.append(ToolCall(name, args))
    return calls


def as_structured(calls: list[ToolCall]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [c.to_dict() for c in calls]}


def as_text(calls: list[ToolCall], language: str = "Python") -> str | None:
    """The calls in the ``[f(a=1)]`` text the BFCL prompt asks for. Java and JavaScript arguments are
    string literals whose text the harness takes verbatim (escapes included), so a value is quoted with a
    quote character it does not contain; ``None`` when that is impossible (the harness could not read it)."""
    if language == "Python":
        return render_python_calls(calls)
    quotes = '"' if language == "Java" else "\"'"
    parts = []
    for call in calls:
        args = []
        for key, value in call.arguments.items():
            quote = next((q for q in quotes if q not in str(value)), None)
            if quote is None:
                return None
            args.append(f"{key}={quote}{value}{quote}")
        parts.append(f"{call.name}({', '.join(args)})")
    return f"[{', '.join(parts)}]"


# ------------------------------------------------------------------------------ multi turn


def keyword_call(call: str, classes: list[str], data_dir: str | None = None) -> ToolCall:
    """A ground-truth call string (``sort('a.txt')``) as a call with named arguments."""
    node = ast.parse(call.strip(), mode="eval").body
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name), call
    name = node.func.id
    method = None
    for class_name in reversed(classes):  # later classes win, as when the checker binds names
        cls = api_class(class_name, data_dir)
        if name in public_methods(cls):
            method = getattr(cls, name)
            break
    args = [ast.literal_eval(a) for a in node.args]
    kwargs = {cast(str, kw.arg): ast.literal_eval(kw.value) for kw in node.keywords}  # gold calls have no **
    if args and method is not None:
        bound = inspect.signature(method).bind_partial(None, *args, **kwargs)
        kwargs = {k: v for k, v in bound.arguments.items() if k != "self"}
    return ToolCall(name, kwargs)


def multi_turn_gold_actions(entry: dict[str, Any], ground_truth: list[list[str]], form: str = "structured",
                            data_dir: str | None = None) -> list[Any]:
    """Actions replaying the ground truth: per turn, one action with all its calls (none for an empty
    turn), then a plain message that ends the turn."""
    actions: list[Any] = []
    for turn in ground_truth:
        if turn:
            calls = [keyword_call(c, entry["involved_classes"], data_dir) for c in turn]
            actions.append(as_structured(calls) if form == "structured" else as_text(calls))
        actions.append("Done.")
    return actions
