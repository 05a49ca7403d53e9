"""Python-call answers read the way the BFCL and ACEBench harnesses read them, without ever evaluating.

Both harnesses (ACEBench's decoder descends from BFCL's) parse ``[f(a=1), g(b=x)]`` with :mod:`ast` and turn
each keyword value into data with the same rules, quirks included: a bare identifier becomes its own
string (``unit=celsius`` → ``"celsius"``), ``...`` becomes ``"..."``, a unary operator negates a constant
whatever the operator (``+5`` → ``-5``), tuples stay tuples, a subscript becomes its source text, a call
with keywords becomes a nested ``{name: {kwargs}}``, and positional arguments are dropped. Where the
harnesses call ``eval`` (binary operations such as ``3*60``) we compute literal arithmetic only, with size
limits; anything else that ``eval`` could run is refused instead. The benchmark-specific wrapping of the
text (which brackets are added or stripped) stays in each suite's decoder.
"""

from __future__ import annotations

import ast
import operator
from typing import Any

Call = dict[str, dict[Any, Any]]  # {"func_name": {"param": value}}: the harnesses' decoded form


class DecodeError(ValueError):
    """The harness would fail to decode this text (its "Failed to decode AST"): the answer is malformed."""


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert, ast.Not: operator.not_}
_MAX_BITS = 4096
_MAX_LEN = 100_000


def source(node: ast.AST, limit: int = 120) -> str:
    return ast.unparse(node)[:limit]


def parse_expression(text: str) -> ast.expr:
    try:
        return ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        raise DecodeError(f"invalid Python syntax: {exc}") from None


def call_name(func: ast.AST) -> str:
    """The harness's name for a called expression: attribute parts joined by dots."""
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def resolve_call(node: ast.Call, python_unary: bool = False, bare_call_as_text: bool = True) -> Call:
    """``f(a=1, b=x)`` → ``{"f": {"a": 1, "b": "x"}}``."""
    args = {kw.arg: resolve_value(kw.value, python_unary, bare_call_as_text) for kw in node.keywords}
    return {call_name(node.func): args}


def resolve_value(node: ast.AST, python_unary: bool = False, bare_call_as_text: bool = True) -> Any:
    """One argument value as the harness resolves it.

    ``python_unary`` reads ``+ - ~ not`` as Python does (a strict-mode fix of the always-negate quirk).
    ``bare_call_as_text``: a call without keywords becomes its source text (BFCL, ACEBench's agent roles)
    rather than ``{name: {}}`` (ACEBench's normal decoder).
    """
    recurse = lambda child: resolve_value(child, python_unary, bare_call_as_text)  # noqa: E731
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else _constant(node)
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.operand, ast.Constant) or node.operand.value is Ellipsis:
            raise DecodeError(f"unsupported operand in {source(node)}")
        op = _UNARY[type(node.op)] if python_unary else operator.neg
        return _apply(op, node.operand.value)
    if isinstance(node, ast.List):
        return [recurse(v) for v in node.elts]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise DecodeError("dict unpacking is not supported")
        try:
            return {recurse(k): recurse(v) for k, v in zip(node.keys, node.values)}
        except TypeError as exc:
            raise DecodeError(f"unhashable dict key: {exc}") from None
    if isinstance(node, ast.BinOp):
        return literal_arithmetic(node)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        if not node.keywords:
            return ast.unparse(node) if bare_call_as_text else {call_name(node.func): {}}
        return resolve_call(node, python_unary, bare_call_as_text)
    if isinstance(node, ast.Tuple):
        return tuple(recurse(v) for v in node.elts)
    if isinstance(node, ast.Subscript):
        return f"{ast.unparse(node.value)}[{ast.unparse(node.slice)}]"
    raise DecodeError(f"unsupported AST type: {type(node).__name__}")


def literal_arithmetic(node: ast.AST) -> Any:
    """Evaluate ``1 + 2``, ``2 ** 10``, ``"ab" * 3`` over literals only, refusing results that would take
    unbounded time or memory (where the harness's ``eval`` would simply run)."""
    if isinstance(node, ast.Constant) and node.value is not Ellipsis:
        return _constant(node)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _apply(_UNARY[type(node.op)], literal_arithmetic(node.operand))
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [literal_arithmetic(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = literal_arithmetic(node.left), literal_arithmetic(node.right)
        if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > 64 \
                and isinstance(left, (int, float)) and abs(left) > 1:
            raise DecodeError(f"refusing to evaluate a huge power: {source(node)}")
        if isinstance(node.op, ast.Mult) and any(isinstance(x, (str, bytes, list, tuple)) for x in (left, right)):
            n = right if isinstance(right, int) else left
            seq = left if isinstance(right, int) else right
            if isinstance(n, int) and isinstance(seq, (str, bytes, list, tuple)) and len(seq) * max(n, 0) > _MAX_LEN:
                raise DecodeError(f"refusing to build a huge sequence: {source(node)}")
        return _apply(_BINOPS[type(node.op)], left, right)
    raise DecodeError(f"cannot evaluate {source(node)!r}: only literal arithmetic is evaluated")


def _constant(node: ast.Constant) -> Any:
    """A literal's value; integer literals are held to the size arithmetic results are (``0x`` literals have
    no length limit, and a huge one breaks every later ``repr``, such as the execution strings)."""
    if isinstance(node.value, int) and node.value.bit_length() > _MAX_BITS:
        raise DecodeError("integer literal too large")
    return node.value


def _apply(op: Any, *values: Any) -> Any:
    try:
        result = op(*values)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        raise DecodeError(f"{type(exc).__name__}: {exc}") from None
    if isinstance(result, int) and result.bit_length() > _MAX_BITS:
        raise DecodeError("integer result too large")
    return result
