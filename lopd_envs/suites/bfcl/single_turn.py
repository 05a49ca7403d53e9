"""Single-turn verdicts, as the official ``ast_file_runner`` and ``relevance_file_runner`` give them.

A pure function of the decoded answer (or the reason decoding failed) and the task's data.
"""

from __future__ import annotations

from typing import Any

from lopd_envs.suites.bfcl.ast_checker import ast_check
from lopd_envs.suites.bfcl.decode import is_call_format, is_empty_output


def score_single_turn(decoded: Any, decode_error: str | None, functions: list[dict], answer: Any,
                      category: str, language: str) -> dict[str, Any]:
    """``{"valid", "error", "error_type"}`` for one answer of one single-turn task."""
    if category in ("irrelevance", "live_irrelevance", "live_relevance"):
        has_call = decode_error is None and not is_empty_output(decoded)
        if "irrelevance" in category:
            if has_call:
                return {"valid": False, "error": ["Valid syntax. Successfully decode AST when it should not."],
                        "error_type": "irrelevance_error:decoder_success"}
            return {"valid": True, "error": []}
        if not has_call:
            return {"valid": False, "error": [f"Invalid syntax. Failed to decode AST when it should have. "
                                              f"{decode_error or ''}".strip()],
                    "error_type": "relevance_error:decoder_failed"}
        return {"valid": True, "error": []}
    if decode_error is not None:
        return {"valid": False, "error": [f"Invalid syntax. Failed to decode AST. {decode_error}"],
                "error_type": "ast_decoder:decoder_failed"}
    if not is_call_format(decoded):
        return {"valid": False, "error": ["Did not output in the specified format."],
                "error_type": "ast_decoder:decoder_wrong_output_format"}
    try:
        return ast_check(functions, decoded, answer, language, category)
    except Exception as exc:  # noqa: BLE001 - the official checker would crash the whole run here
        return {"valid": False, "error": [f"checker could not evaluate this answer: {type(exc).__name__}: {exc}"],
                "error_type": "ast_checker:error"}
