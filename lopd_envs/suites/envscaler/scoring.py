"""EnvScaler's reward, as pure functions of the check verdicts.

Official (``EnvScalerBaseEnv.calculate_reward``): ``round(sum(results) / len(checklist), 4)``, where a check
that raised, was missing ``check_func``, or returned anything but a ``bool`` has no result and adds nothing
while staying in the denominator (``run_check_function`` tests ``isinstance(result, bool)``: a truthy
non-bool such as ``1`` or ``"yes"`` counts as failed). An empty checklist divides by zero upstream; here it
scores 0.0. Strict additionally scores only the checks that did not already hold at reset, so a
do-nothing agent no longer collects the ~15% of checks that start true.
"""

from __future__ import annotations

from collections.abc import Sequence


def official_reward(passed: Sequence[bool]) -> float:
    if not passed:
        return 0.0
    return round(sum(1 for p in passed if p is True) / len(passed), 4)


def reward_over_initially_false(passed: Sequence[bool], at_reset: Sequence[bool]) -> float | None:
    """The official formula over the checks that were false at reset; ``None`` when every check held."""
    if len(passed) != len(at_reset):
        raise ValueError("one reset verdict per check is needed")
    kept = [p for p, start in zip(passed, at_reset) if start is not True]
    return official_reward(kept) if kept else None
