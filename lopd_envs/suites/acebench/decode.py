"""Reading model text into calls the way ACEBench's harness does, without ever evaluating it.

ACEBench decodes answers with ``ast`` (``model_inference/utils.py:ast_parse`` for the normal categories,
``decode_function_list`` in the agent execution roles). Its value resolution has quirks that change verdicts,
so they are reproduced here: a bare name becomes its own string (``unit=celsius`` → ``"celsius"``), a unary
operator always negates a constant (``+5`` → ``-5``, ``not True`` → ``-1``), positional arguments are
dropped, a call used as a value becomes ``{name: {kwargs}}``, a subscript becomes its source text, and
lambdas, f-strings, sets, comparisons and attributes fail. Where the harness calls ``eval`` (binary
operations such as ``3*60``) we compute the result from literal operands only, with size limits; anything
else that ``eval`` could run is rejected instead (a documented difference that cannot change a correct
answer's verdict).

The normal categories first delete every whitespace character of the answer (``"".join(text.split())``),
which turns ``'New York'`` into ``'NewYork'``; the scorer applies that step, not this module.
"""

from __future__ import annotations

import ast
import operator
from typing import Any

Call = dict[str, dict[str, Any]]  # {"func_name": {"param": value}}, the harness's decoded form


class DecodeError(ValueError):
    """The harness would fail to decode this text (it raises, and the answer counts as wrong format)."""


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_MAX_SEQUENCE = 10_000
_MAX_INT_BITS = 100_000


def _arith(node: ast.AST) -> Any:
    """Evaluate a literal arithmetic expression (what ``eval(ast.unparse(binop))`` does on literals)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_arith(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
        value = _arith(node.operand)
        return -value if isinstance(node.op, ast.USub) else (+value if isinstance(node.op, ast.UAdd) else not value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _arith(node.left), _arith(node.right)
        if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and (
                abs(right) > 64 or (isinstance(left, int) and abs(left).bit_length() * abs(right) > _MAX_INT_BITS)):
            raise DecodeError("exponent too large to evaluate")
        if isinstance(node.op, ast.Mult) and any(isinstance(v, (str, list, tuple)) for v in (left, right)):
            count = right if isinstance(left, (str, list, tuple)) else left
            seq = left if isinstance(left, (str, list, tuple)) else right
            if isinstance(count, int) and count * len(seq) > _MAX_SEQUENCE:
                raise DecodeError("sequence repetition too large to evaluate")
        try:
            result = _BINOPS[type(node.op)](left, right)
        except Exception as exc:  # ZeroDivisionError, TypeError: eval would raise too
            raise DecodeError(f"{type(exc).__name__}: {exc}") from None
        if isinstance(result, int) and result.bit_length() > _MAX_INT_BITS:
            raise DecodeError("integer too large to evaluate")
        return result
    raise DecodeError(f"cannot evaluate {type(node).__name__} in a binary operation")


def dotted_name(func: ast.AST) -> str:
    """The harness's name for a called expression: attribute parts joined by dots, its base name first."""
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def resolve_value(node: ast.AST, call_as_text: bool = False) -> Any:
    """One argument value, as the harness resolves it. ``call_as_text``: the agent roles turn a call
    without keyword arguments into its source text instead of ``{name: {}}``."""
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.operand, ast.Constant):
            raise DecodeError(f"unsupported unary operand {type(node.operand).__name__}")
        try:
            return -node.operand.value
        except TypeError as exc:
            raise DecodeError(str(exc)) from None
    if isinstance(node, ast.List):
        return [resolve_value(v, call_as_text) for v in node.elts]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise DecodeError("Unsupported AST type: dict unpacking")
        try:
            return {resolve_value(k, call_as_text): resolve_value(v, call_as_text) for k, v in zip(node.keys, node.values)}
        except TypeError as exc:  # unhashable key
            raise DecodeError(str(exc)) from None
    if isinstance(node, ast.BinOp):
        return _arith(node)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        if not node.keywords:
            return ast.unparse(node) if call_as_text else {dotted_name(node.func): {}}
        return resolve_call(node, call_as_text)
    if isinstance(node, ast.Tuple):
        return tuple(resolve_value(v, call_as_text) for v in node.elts)
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) + "[" + ast.unparse(node.slice) + "]"
    raise DecodeError(f"Unsupported AST type: {type(node)}")


def resolve_call(node: ast.Call, call_as_text: bool = False) -> Call:
    """``f(a=1, b=x)`` → ``{"f": {"a": 1, "b": "x"}}``; positional arguments are ignored, as upstream."""
    return {dotted_name(node.func): {kw.arg: resolve_value(kw.value, call_as_text) for kw in node.keywords}}


def _parse(source: str) -> ast.expr:
    try:
        return ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise DecodeError(f"invalid syntax: {exc}") from None


def decode_answer(text: str) -> list[Call]:
    """The normal categories' decoder (``ast_parse``): the text must be a list (or tuple) of calls."""
    body = _parse(text)
    if not isinstance(body, (ast.List, ast.Tuple, ast.Set)):
        raise DecodeError(f"'{type(body).__name__}' object has no attribute 'elts'")
    calls = []
    for elem in body.elts:
        if not isinstance(elem, ast.Call):
            raise DecodeError("every element must be a function call")
        try:
            calls.append(resolve_call(elem))
        except RecursionError:
            raise DecodeError("expression nested too deeply") from None
    return calls


def decode_agent_message(text: str, non_calls: str = "skip") -> list[Call]:
    """The agent roles' decoder (``decode_function_list``): brackets are added when missing, then
    ``[]'`` characters are stripped from both ends and the rest parsed as one call or a list of calls.

    ``non_calls`` says what a list element that is not a call does: ``"skip"`` (the multi-turn execution
    role), ``"error"`` (the multi-step execution role and the multi-turn agent's routing check).
    """
    if not text:
        raise DecodeError("empty message")
    if text[0] == " ":
        text = text[1:]
    if not text.startswith("["):
        text = "[" + text
    if not text.endswith("]"):
        text = text + "]"
    body = _parse(text.strip("[]'"))
    try:
        if isinstance(body, ast.Call):
            return [resolve_call(body, call_as_text=True)]
        if isinstance(body, (ast.Tuple, ast.List)):
            calls = []
            for elem in body.elts:
                if isinstance(elem, ast.Call):
                    calls.append(resolve_call(elem, call_as_text=True))
                elif non_calls == "error":
                    raise DecodeError("Element is not a function call")
            return calls
    except RecursionError:
        raise DecodeError("expression nested too deeply") from None
    return []
