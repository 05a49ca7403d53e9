"""The one rule for what an action's arguments and a trace may hold: plain JSON data, bounded.

Model-written tool calls arrive with any Python value a parser can build (tuples, sets, bytes, NaN, integers of
thousands of digits, nesting thousands deep). :func:`json_value` turns a value into a fresh copy made only of
JSON types, or raises :class:`NotJSON` saying why it cannot; the parsers (:mod:`lopd_envs.tools`), the trace
(:mod:`lopd_envs.trace`) and every suite rely on it, so nothing recursive ever meets unbounded input. The bottom
of the contract: it imports nothing of lopd.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DEPTH = 32          # nesting levels of lists and dicts; real tool arguments use a handful
MAX_NODES = 20_000      # values in one action
MAX_CHARS = 1_000_000   # characters of all strings (keys included) in one recorded action
MAX_INT_BITS = 4096     # |n| < 2**4096 (1,234 digits): far below Python's int-string limit (4,300 digits)


class NotJSON(ValueError):
    """A value that a trace cannot hold losslessly (see :func:`json_value`)."""


def json_value(value: Any, max_chars: int = MAX_CHARS) -> Any:
    """The one rule for what a trace (and so an action's arguments) may hold: a fresh copy of ``value`` as
    plain JSON data, or :class:`NotJSON` saying why it has none.

    JSON data is ``None``, ``bool``, ``int`` (within ``MAX_INT_BITS``), finite ``float``, ``str``, lists
    and dicts with string keys. Tuples become lists (JSON has one sequence type, and a model's Python-call
    ``(1, 2)`` means a list). Everything else is refused rather than converted, because a conversion (bytes
    to text, ``1`` as the key ``"1"``, NaN) would not come back as it went in, and every trace must
    round-trip exactly through :meth:`Trace.to_json`. Subclasses of the JSON types are copied as the base
    type. The walk is iterative and bounded (``MAX_DEPTH``, ``MAX_NODES``, ``max_chars``) *before* anything
    recursive (``repr``, ``json.dumps``, ``deepcopy``) can meet the value, so no input can exhaust the stack,
    and a self-referencing structure ends at the depth bound.
    """
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any, int]] = [(value, root, 0, 0)]
    nodes, chars = 0, 0
    while stack:
        item, parent, slot, depth = stack.pop()
        nodes += 1
        if isinstance(item, (list, tuple, dict)):
            if depth >= MAX_DEPTH:
                raise NotJSON(f"nested deeper than {MAX_DEPTH} levels")
            if nodes + len(stack) + len(item) > MAX_NODES:
                raise NotJSON(f"more than {MAX_NODES} values")
            if isinstance(item, dict):
                out: Any = {}
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise NotJSON(f"dict keys must be strings, got {type(key).__name__}")
                    key = str.__str__(key)
                    chars += len(key)
                    out[key] = None
                    stack.append((child, out, key, depth + 1))
            else:
                out = [None] * len(item)
                stack.extend((child, out, i, depth + 1) for i, child in enumerate(item))
        elif item is None or isinstance(item, bool):
            out = item
        elif isinstance(item, int):
            out = int.__int__(item)
            if out.bit_length() > MAX_INT_BITS:
                raise NotJSON(f"integer beyond {MAX_INT_BITS} bits")
        elif isinstance(item, float):
            out = float.__float__(item)
            if not math.isfinite(out):
                raise NotJSON(f"{out} is not a JSON number")
        elif isinstance(item, str):
            out = str.__str__(item)
            chars += len(out)
        else:
            raise NotJSON(f"a value of type {type(item).__name__} has no JSON form")
        if chars > max_chars:
            raise NotJSON(f"more than {max_chars} characters")
        parent[slot] = out
    return root[0]
