"""Java and JavaScript argument values: from the string a model writes to the value the checker compares.

BFCL asks for Java/JavaScript arguments as strings in the language's own syntax (``"new int[]{1, 2}"``,
``"[1, 2]"``, ``"123L"``) and converts them with regular expressions before type checking. These are the
official rules, quirks kept: a value that does not match its type's pattern stays a string (and then fails
the type check), collections are split on commas without regard for nesting, and Java ``char`` never
matches its pattern. Only the behaviour is reproduced here; the code is ours.
"""

from __future__ import annotations

import re
from typing import Any

JAVA_TYPES: dict[str, type] = {
    "byte": int, "short": int, "integer": int, "float": float, "double": float, "long": int,
    "boolean": bool, "char": str, "Array": list, "ArrayList": list, "Set": set, "HashMap": dict,
    "Hashtable": dict, "Queue": list, "Stack": list, "String": str, "any": str,
}
JS_TYPES: dict[str, type] = {
    "String": str, "integer": int, "float": float, "Bigint": int, "Boolean": bool, "dict": dict,
    "array": list, "any": str,
}

_INT = re.compile(r"^-?\d+$")
_JAVA_FLOAT = re.compile(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?[fF]$")
_JAVA_DOUBLE = re.compile(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?$")
_JAVA_LONG = re.compile(r"^-?\d+[lL]$")
_JAVA_CHAR = re.compile(r"^\'.$\'")  # never matches a real value: the official pattern is malformed


class UnsupportedType(ValueError):
    """A declared type the official converter does not implement (it raises as well)."""


# ------------------------------------------------------------------------------ Java


def java_value(value: str, declared: str, nested: str | None = None) -> Any:
    if declared not in JAVA_TYPES:
        raise UnsupportedType(f"Unsupported type: {declared}")
    if declared in ("byte", "short", "integer"):
        return int(value) if _INT.match(value) else str(value)
    if declared == "float":
        return float(re.sub(r"[fF]$", "", value)) if _JAVA_FLOAT.match(value) else str(value)
    if declared == "double":
        return float(value) if _JAVA_DOUBLE.match(value) else str(value)
    if declared == "long":
        return int(re.sub(r"[lL]$", "", value)) if _JAVA_LONG.match(value) else str(value)
    if declared == "boolean":
        return value == "true" if value in ("true", "false") else str(value)
    if declared == "char":
        return value if _JAVA_CHAR.match(value) else str(value)
    if declared == "ArrayList":
        return _java_arraylist(value, nested)
    if declared == "Array":
        return _java_array(value, nested)
    if declared == "HashMap":
        return _java_hashmap(value)
    if declared in ("String", "any"):
        return str(value)
    raise UnsupportedType(f"{declared} conversion is not implemented")


def _java_element(text: str, nested: str | None) -> Any:
    if nested in ("char", "String"):
        return text[1:-1]  # the surrounding quotes
    return java_value(text, nested) if nested else java_literal(text)


#: The official conversions are backtracking regular expressions; those spanning lines (``re.DOTALL``) are
#: run only on values up to this length (longer ones stay text, and fail their type check). Quadratic in
#: the value, they took seconds from ~30,000 characters (minutes near an action's 200,000); no BFCL value
#: comes near the bound. The others are found in linear time (:func:`_search_to_closer`, :func:`js_2d_end`).
MAX_DOTALL_VALUE = 10_000
_AS_LIST = re.compile(r"new\s+ArrayList<\w*>\(Arrays\.asList\(")
_NEW_ARRAY_OF = re.compile(r"new\s+\w+\[\]\s*\{")


def _search_to_closer(prefix: re.Pattern[str], closer: str, text: str, least: int = 0) -> str | None:
    r"""Group 1 of ``re.search(prefix.pattern + r"(.{least,}?)" + re.escape(closer), text)`` (``.`` not
    matching a newline), found in linear time: searched as one regex, a prefix repeated on a line without
    the closer rescans the line from every repeat (quadratic). A start fails exactly when the closer is not
    on the rest of its line (at least ``least`` characters on), so a line found to lack it is not rescanned
    for the later starts whose group would begin on it."""
    at, bare_from, bare_to = 0, -1, -1  # no closer starts in text[bare_from:bare_to] (one line's tail)
    while (found := prefix.search(text, at)) is not None:
        begin = found.end()
        if not bare_from <= begin + least <= bare_to:
            line_end = text.find("\n", begin)
            line_end = len(text) if line_end < 0 else line_end
            close = text.find(closer, begin + least, line_end)
            if close >= 0 and close + len(closer) <= line_end:
                return text[begin:close]
            bare_from, bare_to = begin + least, line_end
        at = found.start() + 1
    return None


def _java_arraylist(text: str, nested: str | None) -> Any:
    listed = _search_to_closer(_AS_LIST, "))", text, least=1)
    if listed is not None:
        return [_java_element(e.strip(), nested) for e in listed.split(",")]
    if len(text) > MAX_DOTALL_VALUE:
        return text
    adds = re.search(r"new\s+ArrayList<\w*>\(\)\s*\{\{\s*(.+?)\s*\}\}", text, re.DOTALL)
    if adds:
        return [_java_element(m.strip(), nested) for m in re.findall(r"add\((.+?)\)", adds.group(1))]
    if re.search(r"new\s+ArrayList<\w*>\(\)", text):
        return []
    return text


def _java_array(text: str, nested: str | None) -> Any:
    inside = _search_to_closer(_NEW_ARRAY_OF, "}", text)
    if inside is None:
        return text
    items = [x.strip() for x in inside.split(",") if x.strip()]
    return [java_value(x, nested) if nested else java_literal(x) for x in items]


def _java_hashmap(text: str) -> Any:
    if len(text) > MAX_DOTALL_VALUE:
        return text
    match = re.search(r"new\s+HashMap<.*?>\s*\(\)\s*\{\s*\{?\s*(.*?)\s*\}?\s*\}", text, re.DOTALL)
    if match:
        return {k: java_literal(v.strip()) for k, v in re.findall(r"put\(\"(.*?)\",\s*(.*?)\)", match.group(1))}
    if re.search(r"new\s+HashMap<.*?>\s*\(\)", text):
        return {}
    return text


def java_literal(text: str) -> Any:
    """A Java literal without a declared type: boolean, string, long, float, int or double, else text."""
    if text in ("true", "false"):
        return text == "true"
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1]
    if _JAVA_LONG.match(text):
        return int(text[:-1])
    if _JAVA_FLOAT.match(text):
        return float(re.sub(r"[fF]$", "", text))
    return _number_or_text(text)


def _number_or_text(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


# ------------------------------------------------------------------------------ JavaScript


def js_value(value: str, declared: str, nested: str | None = None) -> Any:
    if declared not in JS_TYPES:
        raise UnsupportedType(f"Unsupported type: {declared}")
    if declared == "String":
        return value[1:-1] if _quoted(value) else str(value)
    if declared == "integer":
        return int(value) if _INT.match(value) else str(value)
    if declared == "float":
        return float(value) if re.match(r"^-?\d+(\.\d+)?$", value) else str(value)
    if declared == "Bigint":
        return int(value[:-1]) if re.match(r"^-?\d+n$", value) else str(value)
    if declared == "Boolean":
        return value == "true" if value in ("true", "false") else str(value)
    if declared == "dict":
        return _js_dict(value.strip())
    if declared == "array":
        return _js_array(value.strip(), nested)
    return str(value)


def _quoted(value: str) -> bool:
    return (value.startswith('"') and value.endswith('"')) or (value.startswith("'") and value.endswith("'"))


_JS_1D = re.compile(r"\[(.*?)\]|\bnew\s+Array\((.*?)\)")
_NEW_ARRAY = re.compile(r"new\s+Array\(\s*")


def js_2d_end(code: str) -> int | None:
    r"""Where the official two-dimensional array pattern matched at the start of ``code`` ends, or ``None``:
    ``\[\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\]|\bnew\s+Array\(\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\)``. As a
    backtracking regex it tries every way of splitting the rows at their ``]`` (``[[],`` repeated 25 times
    took minutes); here the same leftmost-first match is found by dynamic programming, right to left, in
    linear time: ``rest[k]`` is where the match ends when the row list continues at ``k``, and ``row[p]``
    the first ``]`` from ``p`` on the same line (``.`` is not a newline) after which the rest matches."""
    n = len(code)
    if n < 2:
        return None
    blank = [n] * (n + 1)  # blank[p]: the first position from p that is not whitespace (greedy \s*)
    for p in range(n - 1, -1, -1):
        blank[p] = blank[p + 1] if code[p].isspace() else p
    ends = []
    if code[0] == "[":
        ends.append((blank[1], "]"))
    array = _NEW_ARRAY.match(code)
    if array is not None:
        ends.append((array.end(), ")"))
    for first, closer in ends:  # the alternatives in order; each needs its own tables (its closing char)
        found = _rows_end(code, blank, first, closer)
        if found is not None:
            return found
    return None


def _rows_end(code: str, blank: list[int], first: int, closer: str) -> int | None:
    r"""``\[.*?\]\s*(,\s*\[.*?\]\s*)*`` then ``closer``, matched at ``first`` (see :func:`js_2d_end`)."""
    n = len(code)
    if first >= n or code[first] != "[":
        return None
    rest: list[int | None] = [None] * (n + 2)  # after a row's "]" and its blanks: the loop, then closer
    row: list[int | None] = [None] * (n + 2)  # the first good "]" at or after p, on p's line
    for p in range(n, -1, -1):
        if p < n and code[p] == "]" and rest[blank[p + 1]] is not None:
            row[p] = p
        elif p < n and code[p] != "\n":
            row[p] = row[p + 1]
        # rest[p]: greedy loop first (",", blanks, "[", a row), else the closing character
        ended = None
        if p < n and code[p] == ",":
            start = blank[p + 1]
            if start < n and code[start] == "[" and start + 1 <= n and (closed := row[start + 1]) is not None:
                ended = rest[blank[closed + 1]]
        if ended is None and p < n and code[p] == closer:
            ended = p + 1
        rest[p] = ended
    j = row[first + 1] if first + 1 <= n else None
    return None if j is None else rest[blank[j + 1]]


def _js_array(code: str, nested: str | None) -> Any:
    try:
        two_d = js_2d_end(code)
        if two_d is not None:
            rows = []
            for index, inner in enumerate(re.findall(r"\[(.*?)\]", code[:two_d])):
                inner = inner.strip()
                if index == 0 and inner.startswith("["):
                    inner = inner[1:]
                rows.append([js_literal(e.strip()) for e in inner.split(",")])
            return rows
        one_d = _JS_1D.match(code)
        if not one_d:
            return code
        inside = one_d.group(1) if one_d.group(1) is not None else one_d.group(2)
        inside = (inside or "").strip()
        items = inside.split(",") if inside else []
        if nested:
            return [js_value(e.strip(), nested, "String") for e in items]
        return [js_literal(e.strip()) for e in items]
    except Exception:  # noqa: BLE001 - the official converter falls back to the text on any error
        return code


def _js_dict(code: str) -> Any:
    if code == "{}":
        return {}
    match = re.match(r"\{(.*?)\}", code)
    if not match:
        return code
    try:
        out: dict[str, Any] = {}
        for key, value in re.findall(r"([^:]+):\s*(.*?)(?:,\s*(?=[^,]+:)|$)", match.group(1)):
            key, value = key.strip().strip("'\""), value.strip()
            if value.startswith("[") and value.endswith("]"):
                out[key] = _js_array(value, None)
            elif value.startswith("{") and value.endswith("}"):
                out[key] = _js_dict(value)
            else:
                out[key] = js_literal(value.strip("'\""))
        return out
    except Exception:  # noqa: BLE001 - the official converter falls back to the text on any error
        return code


def js_literal(text: str) -> Any:
    """A JavaScript literal without a declared type: boolean, quoted string, int or float, else text."""
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    if _quoted(text):
        return text[1:-1]
    return _number_or_text(text)
