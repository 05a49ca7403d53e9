"""Scoring of ACEBench's normal categories: the decoded calls must match one gold alternative.

``official`` follows ``model_eval/checker.py`` (``normal_checker`` → ``simple_function_checker`` and the
type/string/list/dict checkers) step by step, quirks included:

* whitespace is deleted from the answer before decoding, so it must be exactly a bracketed call list;
* gold names lose a ``_<digits>`` suffix (parallel calls of one function are keyed ``f_1``, ``f_2``) and the
  function description is the first whose name is a *substring* of the gold name;
* a parameter whose gold value has another Python type than the declared type (``number`` maps to ``int``,
  ``enum`` to ``enumerate``) is a "variable": only its type is checked, never its value;
* integers, floats and booleans are never compared by value, only by type;
* a string passes when the standardised gold string (``[ ,./-_*^]`` removed, lower case, ``'``→``"``) is a
  *substring* of the standardised answer;
* nested dict values pass when ``str(gold)`` is a substring of ``str(answer)`` (``5`` matches ``50``);
* an empty gold list or dict fails even against an equal answer (the nested type check finds no element);
* a description without ``parameters`` or an unknown type makes the official script crash; here the
  answer simply fails with ``error_type="checker_crash"``.

``strict`` fixes those value checks (see :func:`strict_check`): whitespace is kept, every value is compared
(numbers numerically, booleans exactly, strings by equality after the same standardisation, lists in order,
dicts key for key), empty containers match, and descriptions are found by exact name.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, cast

from lopd_envs.suites.acebench.decode import Call, DecodeError, decode_answer
from lopd_envs.suites.acebench.verdict import PASS, Verdict, fail
from lopd_envs.tools import parse_tool_calls

TYPE_MAP: dict[str, type] = {
    "string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list, "dict": dict,
    "any": str, "list": list, "object": dict, "objectArray": list, "list(string)": list, "list(enum)": list,
    "int": int, "enum": enumerate, "number": int,
}
NESTED_TYPES = ("array", "tuple", "list(string)", "list(enum)", "object", "objectArray")
_SUFFIX = re.compile(r"_\d+$")
_STANDARDIZE = re.compile(r"[ \,\.\/\-\_\*\^]")


class _Crash(Exception):
    """Where the official script would raise (and abort the whole evaluation)."""


def standardize(text: str) -> str:
    """ACEBench's ``standardize_string``: drop `` ,./-_*^``, lower-case, single → double quotes."""
    return _STANDARDIZE.sub("", text).lower().replace("'", '"')


def parameters_of(function: dict[str, Any]) -> dict[str, Any] | None:
    return function.get("parameters")


# ------------------------------------------------------------------------------------------- official

def _type_check(value: Any, gold: Any, declared: type, nested: type | None) -> tuple[bool, bool]:
    """``type_checker``: returns (valid, is_variable). ``is_variable`` means "skip the value check"."""
    gold_type = type(gold) if gold != "" else None
    is_variable = gold_type is not None and gold_type != declared
    if value == "true":
        value = True
    if value == "false":
        value = False
    if type(value) == declared:  # noqa: E721 - the harness compares exact types (bool is not int)
        if nested is None:
            return True, is_variable
        for item in gold:  # iterates the gold value; only list elements are checked further
            ok = True
            if type(item) == list:  # noqa: E721
                for value_item in value:
                    if not _type_check(value_item, item, nested, None)[0]:
                        ok = False
                        break
            if ok:
                return True, is_variable
        # nested check failed: the harness marks it invalid and falls through to the code below,
        # which can only return that invalid result
        return False, is_variable
    if gold_type is not None and (type(value) == gold_type or gold == value):  # noqa: E721
        return True, True
    return False, is_variable


def _dict_check(value: Any, gold: dict) -> bool:
    """``dict_checker``: same key count, known keys, and ``str(gold) in str(answer)`` per value."""
    if not isinstance(value, dict) or len(value) != len(gold):
        return False
    for key, item in value.items():
        if item == "true":
            item = True
        if item == "false":
            item = False
        if key not in gold:
            return False
        expected = gold[key]
        if isinstance(expected, dict):
            if not _dict_check(item, expected):
                return False
            continue
        std_value = standardize(item) if type(item) == str else item  # noqa: E721
        std_gold = standardize(expected) if type(expected) == str else expected  # noqa: E721
        if str(std_gold) not in str(std_value):
            return False
    return True


def _list_check(value: list, gold: list) -> bool:
    std_value = [standardize(v) if type(v) == str else v for v in value]  # noqa: E721
    std_gold = [standardize(v) if type(v) == str else v for v in gold]  # noqa: E721
    return std_value == std_gold


def _official_call(description: dict, model_call: Call, gold_call: Call) -> Verdict:
    """``simple_function_checker`` for one decoded call against one gold call."""
    gold = next(iter(gold_call.values()))
    model_params = next(iter(model_call.values()))
    params = description.get("parameters")
    if params is None:
        raise _Crash(f"function {description.get('name')!r} has no 'parameters'")
    if model_params == {} and params == {}:
        return PASS
    if model_params == {} or params == {}:
        return fail("wrong_param", "the call has no parameters")
    if gold == params.get("properties"):
        return PASS
    if gold == {}:
        return fail("wrong_param", "the gold call has no parameters")
    name = description["name"]
    if name not in model_call:
        return fail("wrong_function_name", f"expected {name}, got {next(iter(model_call))}")
    details, required = params["properties"], params.get("required")
    if required is None:
        raise _Crash(f"function {name!r} has no 'required' list")
    for param in required:
        if param not in model_params:
            return fail("lack_args", f"lack required_params: {param}")
    for param, value in model_params.items():
        if param not in details or param not in gold:
            return fail("addition_args", f"addition params: {param}")
        declared_name = details[param].get("type")
        if declared_name not in TYPE_MAP:
            raise _Crash(f"unknown parameter type {declared_name!r}")
        declared = TYPE_MAP[declared_name]
        nested = None
        if declared_name in NESTED_TYPES:
            item_type = (details[param].get("items") or {}).get("type") if isinstance(details[param].get("items"), dict) else None
            if item_type is None:
                item_type = "string" if "string" in declared_name else "enum" if "enum" in declared_name else "dict"
            if item_type not in TYPE_MAP:
                raise _Crash(f"unknown item type {item_type!r}")
            nested = TYPE_MAP[item_type]
        if declared_name == "tuple" and type(value) == tuple:  # noqa: E721
            value = cast(Any, list(value))  # still checked against every declared type below
        if declared_name == "float" and type(value) == int:  # noqa: E721
            value = cast(Any, float(value))
        ok, is_variable = _type_check(value, gold[param], declared, nested)
        if not ok:
            return fail("type_error", f"wrong type for parameter ({param}) of api ({name}): "
                                      f"[expected: {declared_name}, real: {type(value).__name__}]")
        if is_variable:
            continue
        expected = gold[param]
        if declared is dict:
            if not _dict_check(value, expected):
                return fail("value_error", f"wrong value for parameter ({param}) of api ({name}): "
                                           f"[expected: {expected}, real: [{value}]]")
        elif declared is list and nested is dict:
            if len(value) != len(expected) or not all(_dict_check(v, g) for v, g in zip(value, expected)):
                return fail("value_error:list_dict_count" if len(value) != len(expected) else "value_error",
                            f"wrong value for parameter ({param}) of api ({name}): [expected: {expected}, real: [{value}]]")
        elif declared is str:
            if standardize(expected) not in standardize(value):
                return fail("value_error:string", f"wrong value for parameter ({param}) of api ({name}): "
                                                  f"[expected: {expected}, real: [{value}]]")
        elif declared is list:  # noqa: SIM102 - one branch per declared type, as above
            if not _list_check(value, expected):
                return fail("value_error:list/tuple", f"wrong value for parameter ({param}) of api ({name}): "
                                                      f"[expected {expected}, real: [{value!r}]]")
    return PASS


def _find_description(functions: list[dict], gold_name: str) -> dict | None:
    """``find_description``: the first function whose name is contained in the gold name."""
    return next((f for f in functions if f["name"] in gold_name), None)


def official_check(functions: list[dict], calls: list[Call], gold: dict[str, dict]) -> Verdict:
    """``normal_checker``: call count, function-name multiset, then each gold call against the answer's
    calls of that name (any one may match)."""
    if len(calls) != len(gold):
        return fail("wrong functions number", "The number of functions does not match the answer.")
    gold_calls = [{_SUFFIX.sub("", name): params} for name, params in gold.items()]
    produced = Counter(next(iter(c)) for c in calls)
    expected = Counter(next(iter(c)) for c in gold_calls)
    for name in produced:
        if name not in expected:
            return fail("function_mismatch", f"extra function detected: {name} is not in the ground truth")
    for name in expected:
        if name not in produced:
            return fail("function_mismatch", f"extra function detected: {name} is not in the ground truth")
    for name, count in produced.items():
        if count != expected[name]:
            return fail("function_mismatch", f"incorrect count for function {name}: "
                                             f"[expected: {expected[name]}, actual: {count}]")
    result = PASS
    for gold_name, gold_call in zip(gold, gold_calls):
        description = _find_description(functions, gold_name)
        if description is None:
            raise _Crash(f"no function description matches {gold_name!r}")
        for call in calls:
            if next(iter(call)) == next(iter(gold_call)):
                result = _official_call(description, call, gold_call)
                if result.valid:
                    break
            else:
                result = fail("simple_function_checker:unclear", "wrong_function")
        if not result.valid:
            return result
    return result


# --------------------------------------------------------------------------------------------- strict

def values_equal(value: Any, gold: Any) -> bool:
    """Type-aware equality used by ``strict``: strings after standardisation, numbers numerically (not
    bools), lists in order, dicts key for key. ``"true"``/``"false"`` read as booleans, as upstream."""
    if isinstance(gold, bool):
        return value is gold or (value == "true" and gold) or (value == "false" and not gold)
    if isinstance(gold, (int, float)):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value - gold) <= 1e-9 * max(1.0, abs(gold))
    if isinstance(gold, str):
        return isinstance(value, str) and standardize(value) == standardize(gold)
    if isinstance(gold, (list, tuple)):
        return isinstance(value, (list, tuple)) and len(value) == len(gold) and all(map(values_equal, value, gold))
    if isinstance(gold, dict):
        return (isinstance(value, dict) and set(value) == set(gold)
                and all(values_equal(value[k], gold[k]) for k in gold))
    return value == gold


def _strict_call(description: dict | None, params: dict, gold: dict) -> Verdict:
    schema = (description or {}).get("parameters") or (description or {}).get("arguments") or {}
    for param in schema.get("required") or []:
        if param not in params:
            return fail("lack_args", f"lack required_params: {param}")
    for param, value in params.items():
        if param not in gold:
            return fail("addition_args", f"addition params: {param}")
        if not values_equal(value, gold[param]):
            return fail("value_error", f"wrong value for parameter ({param}): [expected: {gold[param]!r}, real: {value!r}]")
    return PASS


def _gold_name(name: str, known: set[str]) -> str:
    return name if name in known else _SUFFIX.sub("", name)


def strict_check(functions: list[dict], calls: list[Call], gold: dict[str, dict]) -> Verdict:
    """Each gold call must be matched by a distinct answer call of the same function whose values all
    equal the gold values (order-free for parallel calls)."""
    if len(calls) != len(gold):
        return fail("wrong functions number", "The number of functions does not match the answer.")
    by_name = {f["name"]: f for f in functions}
    wanted = [(_gold_name(name, set(by_name)), params) for name, params in gold.items()]
    used: set[int] = set()
    last = PASS
    for name, params in wanted:
        match = None
        for j, call in enumerate(calls):
            if j in used or next(iter(call)) != name:
                continue
            last = _strict_call(by_name.get(name), next(iter(call.values())), params)
            if last.valid:
                match = j
                break
        if match is None:
            return last if not last.valid else fail("function_mismatch", f"no call of {name} in the answer")
        used.add(match)
    return PASS


# --------------------------------------------------------------------------------------------- entry

def decode_for_scoring(text: str, mode: str) -> list[Call]:
    """The answer's calls: official deletes whitespace and needs ``[f(a=1)]``; strict keeps whitespace
    and, failing that syntax, reads any tool-call syntax lopd understands (JSON, ``<tool_call>``)."""
    if mode == "official":
        return decode_answer("".join(text.split()))
    try:
        return decode_answer(text.strip())
    except DecodeError:
        turn = parse_tool_calls(text)
        if turn.parse_error or not turn.tool_calls:
            raise
        return [{c.name: dict(c.arguments)} for c in turn.tool_calls]


def score_normal(text: str, functions: list[dict], gold: dict | list[dict], mode: str = "official") -> Verdict:
    """Score one answer of a normal category against its gold alternatives (the first error is reported
    when none matches, as in ``eval_main.py``)."""
    try:
        calls = decode_for_scoring(text, mode)
    except DecodeError as exc:
        return fail("wrong_output_format", f"Invalid syntax. Failed to decode AST. {exc}")
    check = official_check if mode == "official" else strict_check
    alternatives = gold if isinstance(gold, list) else [gold]
    first: Verdict | None = None
    for alternative in alternatives:
        try:
            verdict = check(functions, calls, alternative)
        except _Crash as exc:
            verdict = fail("checker_crash", f"the official checker raises here: {exc}")
        except Exception as exc:  # noqa: BLE001 - e.g. an answer value of a type the checker indexes wrongly
            verdict = fail("checker_crash", f"the official checker raises here: {type(exc).__name__}: {exc}")
        if verdict.valid:
            return Verdict(True, extra={"calls": calls})
        first = first or verdict
    first = cast(Verdict, first)  # set unless the gold holds no alternative (then this raises, as it always did)
    first.extra["calls"] = calls
    return first


def gold_answer(gold: dict | list[dict], functions: list[dict]) -> str:
    """The first gold alternative written in ACEBench's answer format ``[f(a=1), g(b='x')]``. A gold key
    keeps its name when a function has it (``personalized_learning_2``) and loses the parallel-call
    suffix otherwise (``route_tool_1`` → ``route_tool``)."""
    from lopd_envs.actions import ToolCall
    from lopd_envs.tools import render_python_calls

    alternative = gold[0] if isinstance(gold, list) else gold
    known = {f["name"] for f in functions}
    return render_python_calls([ToolCall(_gold_name(name, known), params) for name, params in alternative.items()])
