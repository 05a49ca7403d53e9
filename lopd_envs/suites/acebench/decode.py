"""Reading model text into calls the way ACEBench's harness does, without ever evaluating it.

ACEBench decodes answers with ``ast`` (``model_inference/utils.py:ast_parse`` for the normal categories,
``decode_function_list`` in the agent execution roles). Its value resolution is BFCL's, quirks included, and
lives in :mod:`lopd_envs.callast`; this module keeps what is ACEBench's own: how the text is wrapped
before parsing, and that the normal decoder reads a bare call used as a value as ``{name: {}}``.

The normal categories first delete every whitespace character of the answer (``"".join(text.split())``),
which turns ``'New York'`` into ``'NewYork'``; the scorer applies that step, not this module.
"""

from __future__ import annotations

import ast

from lopd_envs.callast import Call, DecodeError, parse_expression, resolve_call

__all__ = ["Call", "DecodeError", "decode_agent_message", "decode_answer"]


def decode_answer(text: str) -> list[Call]:
    """The normal categories' decoder (``ast_parse``): the text must be a list (or tuple) of calls."""
    body = parse_expression(text)
    if not isinstance(body, (ast.List, ast.Tuple, ast.Set)):
        raise DecodeError(f"'{type(body).__name__}' object has no attribute 'elts'")
    calls = []
    for elem in body.elts:
        if not isinstance(elem, ast.Call):
            raise DecodeError("every element must be a function call")
        try:
            calls.append(resolve_call(elem, bare_call_as_text=False))
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
    body = parse_expression(text.strip("[]'"))
    try:
        if isinstance(body, ast.Call):
            return [resolve_call(body)]
        if isinstance(body, (ast.Tuple, ast.List)):
            calls = []
            for elem in body.elts:
                if isinstance(elem, ast.Call):
                    calls.append(resolve_call(elem))
                elif non_calls == "error":
                    raise DecodeError("Element is not a function call")
            return calls
    except RecursionError:
        raise DecodeError("expression nested too deeply") from None
    return []
