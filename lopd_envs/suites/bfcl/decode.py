"""Reading a model's answer the way the BFCL harness reads it, without ever calling ``eval``.

The official harness has two decoders. Prompting models answer in text, ``[f(a=1), g(b="x")]``, which it
reads with Python's :mod:`ast` (``default_decode_ast_prompting``); Java and JavaScript answers go through
tree-sitter. Function-calling (FC) models return structured calls whose JSON arguments are taken as they are.
Both give the checker's input format, a list of ``{function_name: {param: value}}``.

The text decoder is reproduced rule by rule, quirks included; the value rules it shares with ACEBench
(bare identifiers become strings, a unary operator negates whatever it is, literal arithmetic only where
the harness calls ``eval``) live in :mod:`lopd_envs.callast`. ``strict`` mode reads ``+``, ``-``, ``~``
and ``not`` as Python does.

Java and JavaScript answers are read by a small scanner instead of tree-sitter (a dependency whose pins
conflict with ours). It yields the same values: each keyword argument's source text, with the quotes of a
top-level string literal removed (escapes kept, as tree-sitter keeps them), Java expressions re-spaced as
tree-sitter's traversal prints them, and it rejects the malformed arguments models write (bare words with
spaces, URLs, ``a:b``). Checked against tree-sitter on 477 call texts (every Java/JavaScript ground truth,
quoted and unquoted, and edge cases): 467 agree; the rest are tree-sitter error-recovery artefacts (a short
Java call without ``;`` such as ``foo(a=1)`` is rejected by it, ``foo(a=1, b=2)`` is not) and JavaScript
regular-expression literals (``/var/log/db.log``), which the scanner rejects.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any, cast

from lopd_envs.callast import DecodeError, literal_arithmetic, parse_expression, resolve_call

__all__ = ["DecodeError", "decode_call_text", "decode_python", "decode_text", "literal_arithmetic"]

Decoded = list[dict[str, dict[Any, Any]]]


# ------------------------------------------------------------------------------ Python text


def _wrap(text: str) -> str:
    """The harness strips backticks, newlines and spaces, then makes sure of the outer brackets."""
    text = text.strip("`\n ")
    if not text.startswith("["):
        text = "[" + text
    if not text.endswith("]"):
        text = text + "]"
    return text


def decode_python(text: str, strict: bool = False) -> Decoded:
    """``default_decode_ast_prompting`` for Python: text → ``[{name: {param: value}}]`` or DecodeError."""
    body = parse_expression(_wrap(text).strip("[]'"))
    if isinstance(body, ast.Call):
        nodes = [body]
    elif isinstance(body, (ast.List, ast.Tuple, ast.Set)):
        nodes = cast("list[ast.Call]", body.elts)  # checked on the next line
        if not all(isinstance(n, ast.Call) for n in nodes):
            raise DecodeError("every element of the list must be a function call")
    else:
        raise DecodeError(f"expected function calls, got a {type(body).__name__} expression")
    try:
        return [resolve_call(n, python_unary=strict) for n in nodes]
    except (RecursionError, MemoryError) as exc:
        raise DecodeError(f"answer too deeply nested: {type(exc).__name__}") from None


# ------------------------------------------------------------------------------ Java / JavaScript text

_CALLEE = re.compile(r"\s*([A-Za-z_$][\w$]*(?:\s*\.\s*[A-Za-z_$][\w$]*)*)\s*\(")
_ASSIGN = re.compile(r"^\s*([A-Za-z_$][\w$]*)\s*=(?!=)\s*(.*)$", re.DOTALL)
_OPEN, _CLOSE = "([{", ")]}"
# A ``<`` opens type arguments (``List<String, ? extends T>``) when it is followed by type-argument items
# and then by a ``>`` reachable through type-argument characters. The items were one regex with a lookahead,
# ``<\s*(?:[A-Z?][\w$.?]*(?:\s*(?:extends|super)\s*[\w$.]+)?\s*(?:,\s*)?)*(?=[\w\s,<>?.]*>)``: its item loop
# could split a run of letters in exponentially many ways (``<`` and 30 letters took minutes) and its
# lookahead rescanned the text from every ``<`` (quadratic). Here every item is atomic and the loop
# possessive (the same positions are reachable: items never pass a ``<`` or ``>``, and a ``>`` reachable from
# an earlier position is reachable from a later one), and the lookahead is one precomputed right-to-left
# pass (:func:`_closing_reachable`).
_GENERIC_ITEMS = re.compile(r"<\s*(?>[A-Z?][\w$.?]*(?:\s*(?:extends|super)\s*[\w$.]+)?\s*(?:,\s*)?)*+")


def _closing_reachable(text: str) -> list[bool]:
    """For each position, whether a ``>`` is reached from it through type-argument characters only (word
    characters, whitespace, ``<?.,``: what the old lookahead asked), for all positions in one pass."""
    reach = [False] * (len(text) + 1)
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        reach[i] = ch == ">" or (reach[i + 1] and (ch in "<?.,_" or ch.isalnum() or ch.isspace()))  # \w \s
    return reach


def _code_chars(text: str, start: int = 0) -> Iterator[tuple[int, str]]:
    """``(index, char)`` for each character outside string literals (escapes skipped): the one scan
    that both bracket matching and top-level splitting need. DecodeError on an unterminated string."""
    quote, i = "", start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "\"'`":
            quote = ch
        else:
            yield i, ch
        i += 1
    if quote:
        raise DecodeError("unterminated string")


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets and string literals; DecodeError on unbalanced input."""
    parts, depth, start = [], [], 0
    reach: list[bool] | None = None
    for i, ch in _code_chars(text):
        if ch in _OPEN:
            depth.append(ch)
        elif ch in _CLOSE:
            if not depth or depth[-1] == "<" or _OPEN.index(depth.pop()) != _CLOSE.index(ch):
                raise DecodeError("unbalanced brackets")
        elif ch == "<":
            reach = _closing_reachable(text) if reach is None else reach
            if reach[cast(re.Match, _GENERIC_ITEMS.match(text, i)).end()]:  # it matches at a "<"
                depth.append("<")
        elif ch == ">" and depth and depth[-1] == "<":
            depth.pop()
        elif ch == "," and not depth:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise DecodeError("unterminated bracket")
    parts.append(text[start:])
    return parts


def _matching_paren(text: str, open_at: int) -> int:
    depth = 0
    for i, ch in _code_chars(text, open_at):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth == 0:
                return i
    raise DecodeError("unbalanced parentheses")


def _is_quoted(value: str, quotes: str) -> bool:
    return len(value) >= 2 and value[0] in quotes and value[-1] == value[0]


_TOKEN = re.compile(r"""
    (?P<str>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`(?:\\.|[^`\\])*`)
  | (?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?[a-zA-Z_$]*)
  | (?P<id>[A-Za-z_$][\w$]*)
  | (?P<comment>//|/\*)
  | (?P<op>\+\+|--|::|[-+*/%=<>!&|^~?:.,;()\[\]{}])
  | (?P<space>\s+)
  | (?P<bad>.)""", re.VERBOSE | re.DOTALL)
_PREFIX_WORDS = {"new", "typeof", "instanceof", "void", "delete", "in", "of", "await", "return"}
_OPERAND_END = {"str", "num", "id"}


def _tokens(text: str) -> list[tuple[str, str]]:
    # every alternative of _TOKEN is a named group, so lastgroup is a name
    return [(cast(str, m.lastgroup), m.group()) for m in _TOKEN.finditer(text) if m.lastgroup != "space"]


def _valid_expression(text: str, language: str) -> bool:
    """Would tree-sitter read ``text`` as one expression without an ERROR node? An approximation that
    rejects what models actually write wrongly: bare words with spaces (``LED TV``), URLs and paths
    (``//`` starts a comment, a leading ``/``), ``@``/``#``, ``a:b`` outside an object or ``?:``, and
    numbers with letters (``3.5f`` is Java only, ``12n`` JavaScript only)."""
    tokens = _tokens(text)
    if not tokens:
        return False
    previous: tuple[str, str] | None = None
    depth_braces, ternaries = 0, 0
    for kind, value in tokens:
        if kind in ("bad", "comment"):
            return False
        if kind == "str" and language == "Java" and value[0] == "`":
            return False
        if kind == "num":
            suffix = re.sub(r"^[\d.]+(?:[eE][+-]?\d+)?", "", value)
            allowed = ("", "f", "F", "d", "D", "l", "L") if language == "Java" else ("", "n")
            if suffix not in allowed:
                return False
        binary_only = kind == "op" and value in "*/%=&|^?:.,;>)]}"
        if binary_only and (previous is None or previous[1] in ("(", "[", "{", ",")) and value not in ")]}":
            return False
        if previous is not None:
            p_kind, p_value = previous
            ends = p_kind in _OPERAND_END or p_value in (")", "]")
            starts = kind in _OPERAND_END
            if ends and starts and p_value not in _PREFIX_WORDS and value not in _PREFIX_WORDS:
                return False
        if value == "{":
            depth_braces += 1
        elif value == "}":
            depth_braces -= 1
        elif value == "?":
            ternaries += 1
        elif value == "::" and language != "Java":
            return False
        elif value == ":":
            if ternaries:
                ternaries -= 1
            elif depth_braces <= 0:
                return False
        previous = (kind, value)
    previous = cast("tuple[str, str]", previous)  # tokens is not empty
    return not (previous[0] == "op" and previous[1] not in (")", "]", "}", "++", "--"))


def _java_value(value: str) -> str:
    """The text tree-sitter's traversal gives for a Java argument: a top-level string literal without
    quotes; identifiers, method invocations and field names as written; an object creation as
    ``new Type(args)`` (its anonymous class body dropped); other expressions as their tokens joined
    without spaces (array initialisers included)."""
    value = value.strip()
    if _is_quoted(value, "\"'"):
        return value[1:-1]
    if re.fullmatch(r"[\w$.]+(\s*\(.*\))?", value, re.DOTALL) and not value.startswith("new"):
        return value
    creation = re.match(r"new\s+([\w$.]+(?:\s*<[^()]*>)?)\s*\((.*?)\)\s*(\{.*\})?$", value, re.DOTALL)
    if creation and "[" not in creation.group(1):
        args = [_java_value_nested(a) for a in _split_top_level(creation.group(2))] if creation.group(2).strip() else []
        return f"new {_squash(creation.group(1))}({', '.join(args)})"
    array = re.match(r"new\s+([\w$.<>]+)\s*\[\s*\]\s*(\{.*\})$", value, re.DOTALL)
    if array:
        inner = array.group(2)[1:-1]
        items = [_java_value_nested(e) for e in _split_top_level(inner)] if inner.strip() else []
        return f"new {array.group(1)}[]{{{','.join(items)}}}"
    return _squash(value)


def _java_value_nested(value: str) -> str:
    value = value.strip()
    return value if _is_quoted(value, "\"'") else _java_value(value)


def _squash(text: str) -> str:
    """Tokens joined without whitespace, except after ``new`` (string literals kept whole)."""
    out = []
    for _kind, token in _tokens(text):
        out.append(token + " " if token == "new" else token)
    return "".join(out)


def decode_call_text(text: str, language: str) -> Decoded | None:
    """The Java/JavaScript branch of the harness's decoder: the first call's keyword arguments as source
    text (top-level string quotes removed). ``None`` (or ``[]``) when no call is found, which the harness
    then rejects as "wrong output format"; DecodeError for text it cannot parse."""
    body = _wrap(text)[1:-1].strip()
    if not body:
        return None if language == "JavaScript" else []
    match = _CALLEE.match(body)
    if not match:
        if language == "JavaScript":
            return None
        raise DecodeError(f"no {language} method invocation found")
    open_at = match.end() - 1
    close_at = _matching_paren(body, open_at)
    rest = body[close_at + 1:].strip().rstrip(";").strip()
    if rest:
        if language == "JavaScript":
            return None  # a sequence of expressions: not a single call statement
        raise DecodeError("text after the method invocation")
    name = re.sub(r"\s+", "", match.group(1))
    inner = body[open_at + 1:close_at]
    args: dict[Any, Any] = {}
    for part in _split_top_level(inner) if inner.strip() else []:
        assign = _ASSIGN.match(part)
        if not _valid_expression(assign.group(2) if assign else part, language):
            raise DecodeError(f"not a valid {language} expression: {part.strip()[:80]!r}")
        if assign:
            key, raw = assign.group(1), assign.group(2).strip()
            value = _java_value(raw) if language == "Java" else (raw[1:-1] if _is_quoted(raw, "\"'") else raw)
        elif re.fullmatch(r"\s*[A-Za-z_$][\w$]*\s*", part):
            key, value = None, part.strip()
        else:
            continue  # the harness ignores other unnamed arguments
        if key in args:
            raise DecodeError("multiple arguments with the same name are not supported")
        args[key] = value
    return [{name: args}]


# ------------------------------------------------------------------------------ dispatch and format checks


def decode_text(text: str, language: str = "Python", strict: bool = False) -> Any:
    """The harness's prompting decoder for ``language``."""
    if language == "Python":
        return decode_python(text, strict)
    return decode_call_text(text, language)


def decode_structured(calls: list[tuple[str, dict[str, Any]]]) -> Decoded:
    """An FC model's calls: names and JSON arguments as they are."""
    return [{name: dict(arguments)} for name, arguments in calls]


def is_call_format(decoded: Any) -> bool:
    """The harness's ``is_function_calling_format_output``: a list of one-key dicts of dicts."""
    return isinstance(decoded, list) and all(
        type(item) is dict and len(item) == 1 and type(next(iter(item.values()))) is dict for item in decoded)


def is_empty_output(decoded: Any) -> bool:
    """No function call: wrong format, ``[]`` or ``[{}]`` (relevance and irrelevance checks)."""
    return not is_call_format(decoded) or not decoded or (len(decoded) == 1 and not decoded[0])


# ------------------------------------------------------------------------------ multi-turn call strings


def nested_value_source(value: Any) -> str:
    """``parse_nested_value``: a dict whose values are all dicts is written as a call of its first key;
    another dict as a dict literal with quoted keys; anything else as ``repr``."""
    if isinstance(value, dict):
        if all(isinstance(v, dict) for v in value.values()):
            if not value:
                raise DecodeError("an empty dict argument cannot be rendered as a call")
            name, args = next(iter(value.items()))
            inner = ", ".join(f"{k}={nested_value_source(v)}" for k, v in args.items())
            return f"{name}({inner})"
        return "{" + ", ".join(f"'{k}': {nested_value_source(v)}" for k, v in value.items()) + "}"
    return repr(value)


def execution_strings(decoded: Decoded) -> list[str]:
    """``decoded_output_to_execution_list``: decoded text calls as the call strings the checker runs."""
    out = []
    for call in decoded:
        for name, args in call.items():
            out.append(f"{name}({', '.join(f'{k}={nested_value_source(v)}' for k, v in args.items())})")
    return out


def fc_execution_strings(calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """``convert_to_function_call``: an FC model's calls as call strings (values by ``repr``)."""
    return [f"{name}({','.join(f'{k}={v!r}' for k, v in args.items())})" for name, args in calls]
