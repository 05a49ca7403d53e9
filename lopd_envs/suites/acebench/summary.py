"""ACEBench's leaderboard arithmetic (``eval_main.py`` and ``generate_result_csv``), over per-episode
``info["score"]`` dicts, so env results can stand beside the official tables.

* normal categories: share of valid rows, rounded to 3 places; ``normal_multi_turn_*`` instead count a
  conversation (consecutive rows of one dialogue) as passed only if all its rows are, and also report the
  mean per-conversation share as ``process_accuracy``;
* special categories: share of valid rows, unrounded;
* agent categories: share of end-to-end passes (rounded) and mean process accuracy (rounded);
* groups are unweighted means of their categories, and the overall score is
  ``0.2676·special + 0.578·normal + 0.1545·agent`` (rounded to 3 places).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lopd_envs.suites.acebench.data import AGENT, NORMAL, SPECIAL

WEIGHTS = {"special": 0.2676, "normal": 0.578, "agent": 0.1545}


def category_accuracy(category: str, scores: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Official accuracy of one category from its rows' score dicts, in the official row order."""
    scores = list(scores)
    if not scores:
        return {"accuracy": 0.0, "total_count": 0}
    if category in AGENT:
        passed = sum(bool(s.get("end_to_end")) for s in scores)
        process = sum(float(s.get("process_accuracy", 0.0)) for s in scores) / len(scores)
        return {"accuracy": round(passed / len(scores), 3), "process_accuracy": round(process, 3), "total_count": len(scores)}
    if category.startswith("normal_multi_turn"):
        groups: list[list[bool]] = []
        last = None
        for s in scores:
            if s.get("conversation") != last or not groups:
                groups.append([])
                last = s.get("conversation")
            groups[-1].append(bool(s.get("valid")))
        end = sum(all(g) for g in groups) / len(groups)
        process = sum(round(sum(g) / len(g), 3) for g in groups) / len(groups)
        return {"accuracy": round(end, 3), "process_accuracy": round(process, 3), "total_count": len(scores)}
    share = sum(bool(s.get("valid")) for s in scores) / len(scores)
    return {"accuracy": share if category in SPECIAL else round(share, 3), "total_count": len(scores)}


def overall(accuracies: dict[str, float]) -> dict[str, float]:
    """Group means and the weighted summary from per-category accuracies (missing categories count 0)."""
    def mean(names: tuple[str, ...]) -> float:
        return round(sum(accuracies.get(n, 0.0) for n in names) / len(names), 3)

    groups = {"normal": mean(NORMAL), "special": mean(SPECIAL), "agent": mean(AGENT)}
    return {**groups, "summary": round(sum(WEIGHTS[g] * v for g, v in groups.items()), 3)}
