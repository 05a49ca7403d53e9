"""The single-turn AST checker of BFCL-v3, rebuilt from its rules.

Input: the function descriptions, a decoded answer (``[{name: {param: value}}]``) and the possible answer
(``[{name: {param: [allowed values]}}]``, where ``""`` among the allowed values means "may be omitted").
Output: the official result dict, ``{"valid": bool, "error": [...], "error_type": "..."}``, with the
official error types (``simple_function_checker:wrong_func_name``, ``type_error:simple``,
``value_error:string``, ``parallel_function_checker_no_order:cannot_find_match``, ...).

The official rules, quirks included (``official`` mode; ``strict`` changes none of them here):
- categories with "parallel" in the name match calls to answers in any order; "multiple" checks the
  single expected call; others require exactly one call;
- required parameters must be present; every given parameter must be both declared and in the answer;
- Python types are exact (``bool`` is not ``int``) except that an int is accepted for a float; a value
  of the answer's own type is accepted as a "variable" when the answer's type differs from the declared
  one; nested list items are checked one level deep, and that check passes whenever an allowed value
  is not itself a list;
- strings compare after removing spaces and ``,./-_*^``, lower-casing and turning ``'`` into ``"``;
  lists and dict values are compared element-wise the same way; lists of dicts in order;
- Java/JavaScript values must be strings and are converted (see :mod:`.convert`) before the same checks.
"""

from __future__ import annotations

import re
from typing import Any, cast

from lopd_envs.suites.bfcl.convert import JAVA_TYPES, JS_TYPES, java_value, js_value

PYTHON_TYPES: dict[str, type] = {
    "string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list,
    "dict": dict, "any": str,
}
_PYTHON_NESTED = ("array", "tuple")
_CONVERTED_NESTED = ("Array", "ArrayList", "array")

Result = dict[str, Any]


def ok() -> Result:
    return {"valid": True, "error": []}


def fail(error_type: str, *errors: Any) -> Result:
    return {"valid": False, "error": list(errors), "error_type": error_type}


# ------------------------------------------------------------------------------ entry point


def ast_check(functions: list[dict], decoded: list[dict], answer: list[dict], language: str,
              category: str) -> Result:
    """Dispatch on the category name exactly as the official ``ast_checker`` does."""
    if "parallel" in category:
        return parallel_no_order(functions, decoded, answer, language)
    if "multiple" in category:
        if len(decoded) != len(answer):
            return fail("multiple_function_checker:wrong_count", "Wrong number of functions.")
        expected = next(iter(answer[0]))
        return check_call(cast(dict, find_description(functions, expected)), decoded[0], answer[0], language)
    if len(decoded) != 1:
        return fail("simple_function_checker:wrong_count", "Wrong number of functions.")
    return check_call(functions[0], decoded[0], answer[0], language)


def find_description(functions: list[dict], name: str) -> dict | None:
    """The function named ``name``, or None (then :func:`check_call` raises, as the official checker does)."""
    return next((f for f in functions if f["name"] == name), None)


def parallel_no_order(functions: list[dict], decoded: list[dict], answer: list[dict], language: str) -> Result:
    """Each expected call (in the answer's order) takes the first unmatched model call that passes."""
    if len(decoded) != len(answer):
        return fail("parallel_function_checker_no_order:wrong_count", "Wrong number of functions.")
    matched: set[int] = set()
    for i, expected in enumerate(answer):
        description = cast(dict, find_description(functions, next(iter(expected))))
        errors: list[Any] = []
        result: Result = fail("parallel_function_checker_no_order:cannot_find_match")
        for index, call in enumerate(decoded):
            if index in matched:
                continue
            result = check_call(description, call, expected, language)
            if result["valid"]:
                matched.add(index)
                break
            errors.append({f"Model Result Index {index}": {
                "sub_error": result["error"], "sub_error_type": result["error_type"],
                "model_output_item": call, "possible_answer_item": expected}})
        if not result["valid"]:
            remaining = [j for j in range(len(decoded)) if j not in matched]
            return fail("parallel_function_checker_no_order:cannot_find_match",
                        f"Could not find a matching function among index {remaining} of model output "
                        f"for index {i} of possible answers.", *errors)
    return ok()


# ------------------------------------------------------------------------------ one call


def check_call(description: dict, call: dict, expected: dict, language: str) -> Result:
    """``simple_function_checker``: one model call against one expected call."""
    allowed_by_param = next(iter(expected.values()))
    name = description["name"]
    properties = description["parameters"]["properties"]
    if name not in call:
        return fail("simple_function_checker:wrong_func_name", f"Function name {name!r} not found in model output.")
    given = call[name]
    for param in description["parameters"].get("required", []):
        if param not in given:
            return fail("simple_function_checker:missing_required", f"Missing required parameter: {param!r}.")
    for param, value in given.items():
        if param not in properties or param not in allowed_by_param:
            return fail("simple_function_checker:unexpected_param", f"Unexpected parameter: {param!r}.")
        result = check_param(param, value, properties[param], allowed_by_param[param], language)
        if not result["valid"]:
            return result
    for param, allowed in allowed_by_param.items():
        if param not in given and "" not in allowed:
            return fail("simple_function_checker:missing_optional",
                        f"Optional parameter {param!r} not provided and not marked as optional.")
    return {"valid": True, "error": [], "error_type": "simple_function_checker:unclear"}


def check_param(param: str, value: Any, schema: dict, allowed: list, language: str) -> Result:
    declared = schema["type"]
    nested_type: type | None = None
    if language == "Java" or language == "JavaScript":
        table, convert = (JAVA_TYPES, java_value) if language == "Java" else (JS_TYPES, js_value)
        expected_type = table[declared]
        tag = "java" if language == "Java" else "js"
        if type(value) is not str:
            return fail(f"type_error:{tag}", f"Incorrect type for parameter {param!r}. Expected type String, "
                                             f"got {type(value).__name__}. Parameter value: {value!r}.")
        if declared in _CONVERTED_NESTED:
            inner = schema["items"]["type"]
            nested_type = table[inner]
            value = convert(value, declared, inner)
        else:
            value = convert(value, declared)
    else:
        expected_type = PYTHON_TYPES[declared]
        if declared in _PYTHON_NESTED:
            nested_type = PYTHON_TYPES[schema["items"]["type"]]
    if declared == "tuple" and type(value) is tuple:
        value = list(value)
    if language == "Python" and declared == "float" and type(value) is int:
        value = float(value)

    typed = type_check(param, value, allowed, declared, expected_type, nested_type)
    if not typed["valid"]:
        return typed
    if not typed["is_variable"]:
        if expected_type is dict:
            return dict_check(param, value, allowed)
        if expected_type is list and nested_type is dict:
            return list_of_dicts_check(param, value, allowed)
        if expected_type is str:
            return string_check(param, value, allowed)
        if expected_type is list:
            return list_check(param, value, allowed)
    if value not in allowed:
        return fail("value_error:others", f"Invalid value for parameter {param!r}: {value!r}. Expected one of {allowed}.")
    return ok()


def answer_type(allowed: list) -> type | None:
    """The type of the first non-optional allowed value (the official "possible answer type")."""
    return next((type(a) for a in allowed if a != ""), None)


def type_check(param: str, value: Any, allowed: list, declared: str, expected_type: type,
               nested_type: type | None) -> Result:
    result: Result = {"valid": True, "error": [], "is_variable": False, "error_type": "type_error:simple"}
    allowed_type = answer_type(allowed)
    is_variable = allowed_type is not None and allowed_type is not expected_type
    if type(value) is expected_type:
        if nested_type is None:
            result["is_variable"] = is_variable
            return result
        for option in allowed:
            items_ok = True
            if type(option) is list:
                items_ok = all(type_check(param, item, option, str(nested_type), nested_type, None)["valid"]
                               for item in value)
            if items_ok:
                return {"valid": True, "error": [], "is_variable": is_variable}
        result["valid"] = False
        result["error"] = [f"Nested type checking failed for parameter {param!r}. Expected outer type {declared} "
                           f"with inner type {nested_type}. Parameter value: {value!r}."]
        result["error_type"] = "type_error:nested"
    if allowed_type is not None and type(value) is allowed_type:
        result["is_variable"] = True
        return result
    result["valid"] = False
    result["error"].append(f"Incorrect type for parameter {param!r}. Expected type {declared}, "
                           f"got {type(value).__name__}. Parameter value: {value!r}.")
    result["error_type"] = "type_error:simple"
    return result


# ------------------------------------------------------------------------------ value comparisons

_PUNCTUATION = re.compile(r"[ \,\.\/\-\_\*\^]")


def standardize(text: str) -> str:
    """Strings compare without spaces and ``,./-_*^``, case-insensitively, with ``'`` read as ``"``."""
    return _PUNCTUATION.sub("", text).lower().replace("'", '"')


def _std(value: Any) -> Any:
    return standardize(value) if type(value) is str else value


def string_check(param: str, value: str, allowed: list) -> Result:
    if standardize(value) not in [standardize(a) for a in allowed if type(a) is str]:
        return fail("value_error:string", f"Invalid value for parameter {param!r}: {value!r}. "
                                          f"Expected one of {allowed}. Case insensitive.")
    return ok()


def list_check(param: str, value: list, allowed: list) -> Result:
    given = [_std(v) for v in value]
    if given not in [[_std(x) for x in option] for option in allowed]:
        return fail("value_error:list/tuple", f"Invalid value for parameter {param!r}: {value!r}. Expected one of {allowed}.")
    return ok()


def dict_check(param: str, value: dict, allowed: list) -> Result:
    """A dict matches an allowed dict when every given key is allowed with an allowed value and every key
    not given may be omitted. Only one level deep, as in the official checker."""
    result: Result = fail("dict_checker:unclear")
    for option in allowed:
        if option == "":
            continue
        result = fail("dict_checker:unclear")
        matched = True
        for key, item in value.items():
            if key not in option:
                result = fail("value_error:dict_key", f"Unexpected dict key parameter: '{key}'.")
                matched = False
                break
            choices = [_std(c) for c in option[key]]
            if _std(item) not in choices:
                result = fail("value_error:dict_value", f"Invalid value for parameter {key!r}: {item!r}. "
                                                        f"Expected one of {choices}.")
                matched = False
                break
        for key, choices in option.items():
            if key not in value and "" not in choices:
                result = fail("value_error:dict_key", f"Missing dict key parameter: '{key}'.")
                matched = False
                break
        if matched:
            return ok()
    return result


def list_of_dicts_check(param: str, value: list, allowed: list) -> Result:
    result: Result = fail("list_dict_checker:unclear")
    for option in allowed:
        if len(value) != len(option):
            result = fail("value_error:list_dict_count", "Wrong number of dictionaries in the list.")
            continue
        matched = True
        for item, expected in zip(value, option):
            result = dict_check(param, item, [expected])
            if not result["valid"]:
                matched = False
                break
        if matched:
            return ok()
    return result
