"""Scoring of ACEBench's special categories: fixed phrases the answer must contain (``special_eval`` in
``eval_main.py``). The phrases are English in both languages, because the Chinese system prompt asks for
the same English answer templates.

* ``special_incomplete``: gold ``{api: [missing params]}``; the answer must contain
  ``"Missing necessary parameters"``, the api name and every missing parameter name;
* ``special_error_param``: gold ``{param: [wrong values]}``; the answer must contain
  ``"There is incorrect value"`` and every wrong value;
* ``special_irrelevant``: the answer must contain ``"the limitations of the function"``.

Checks are plain substring tests on the raw answer (no whitespace removal). Some gold values carry
stray spaces (``"propertyDetails "``, ``" rentalManagement "``) that the official check then demands;
``strict`` strips them.
"""

from __future__ import annotations

from typing import Any

from lopd_envs.suites.acebench.verdict import PASS, Verdict, fail

INCOMPLETE_PHRASE = "Missing necessary parameters"
ERROR_PARAM_PHRASE = "There is incorrect value"
IRRELEVANT_PHRASE = "the limitations of the function"
# The official reasons, word for word (and naming the values the official check names: a missing parameter's
# correction the last one missing, an incorrect value's all of them).
INCOMPLETE_FAULT = ("The user's instruction is missing necessary parameters ({}) for the ({}), but the model failed "
                    "to correctly point it out")
ERROR_PARAM_FAULT = ("The user's instruction contains incorrect values ({}) of the parameters ({}), but the model "
                     "failed to correctly point it out")


def _value(value: Any, mode: str) -> str:
    text = value if isinstance(value, str) else str(value)
    return text.strip() if mode == "strict" else text


def _absent(values: list[Any], text: str, mode: str) -> list[Any]:
    """The gold values the answer does not contain, in their order."""
    return [value for value in values if _value(value, mode) not in text]


def score_special(text: str, gold: Any, category: str, mode: str = "official") -> Verdict:
    """One answer of a special category; ``category`` is the official name (``special_incomplete`` ...)."""
    verdict = PASS
    if "incomplete" in category:
        for name, values in gold.items():
            missing = _absent(values, text, mode)
            if INCOMPLETE_PHRASE not in text:
                verdict = fail("error_detection", INCOMPLETE_FAULT.format(values, name))
            elif name not in text:
                verdict = fail("error_correction", INCOMPLETE_FAULT.format(values, name))
            elif missing:
                verdict = fail("error_correction", INCOMPLETE_FAULT.format(missing[-1], name))
    elif "error" in category:
        for name, values in gold.items():
            if ERROR_PARAM_PHRASE not in text:
                verdict = fail("error_detection", ERROR_PARAM_FAULT.format(values, name))
            elif _absent(values, text, mode):
                verdict = fail("error_correction", ERROR_PARAM_FAULT.format(values, name))
    elif "irrelevant" in category:
        if IRRELEVANT_PHRASE not in text:
            verdict = fail("error_detection", "The model cannot solve this problem, due to the limitations of the function")
    else:
        raise ValueError(f"not a special category: {category!r}")
    return verdict


def expected_answer(gold: Any, category: str) -> str:
    """An answer in the form ACEBench's special prompt asks for, built from the gold (for tests and
    examples). Gold values are joined verbatim so their stray spaces survive."""
    if "incomplete" in category:
        return "; ".join(f'["{INCOMPLETE_PHRASE} ({",".join(values)}) for the api ({name})"]'
                         for name, values in gold.items())
    if "error" in category:
        return "; ".join(f'["{ERROR_PARAM_PHRASE} ({",".join(map(str, values))}) for the parameters ({name}) '
                         f'in the conversation history."]' for name, values in gold.items())
    return '["Due to the limitations of the function, I cannot solve this problem."]'
