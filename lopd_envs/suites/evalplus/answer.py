"""The program evalplus judges for a chat model's answer: evalplus's own ``sanitize`` (``evalplus.sanitize``,
0.3.1, a base dependency), called rather than copied, so the official extraction is evalplus's by construction.

Two guards, where calling it as is would break lopd's contract (an answer never raises, never costs minutes);
both go to lopd's bounded copy of the same rules (:func:`lopd_envs.codeexec.extract.sanitize`, which the
tests keep equal to evalplus's wherever evalplus returns):

* an answer over ``MAX_SCAN_LINES`` lines: evalplus's scan parses every pair of lines (cubic: 1.5 s at 250
  lines on a loaded core, minutes at thousands); lopd's copy tries such an answer whole (the suite's
  documented deviation);
* an answer that makes evalplus raise instead of returning (its ``syntax_check`` catches ``SyntaxError`` and
  ``MemoryError`` only: deep nesting is a ``RecursionError``, a lone surrogate a ``UnicodeEncodeError`` in
  tree-sitter's encoding).
"""

from __future__ import annotations

from lopd_envs.codeexec.extract import MAX_SCAN_LINES
from lopd_envs.codeexec.extract import sanitize as bounded_sanitize


def official_solution(text: str, entry_point: str) -> str:
    """evalplus's ``sanitize(text, entry_point)`` of the answer alone (its chat-model pipeline, ``codegen.py``),
    within the guards above."""
    if not isinstance(text, str):
        return ""
    if text.count("\n") >= MAX_SCAN_LINES:
        return bounded_sanitize(text, entry_point)
    from evalplus.sanitize import sanitize

    try:
        return sanitize(text, entry_point)
    except (ValueError, RecursionError, UnicodeError):
        return bounded_sanitize(text, entry_point)
