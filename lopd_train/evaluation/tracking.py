"""``lopd-eval --report-to``: an evaluation's numbers in the same trackers ``lopd-train`` reports to.

Why: a user who follows training runs in TensorBoard, trackio, wandb or another of accelerate's trackers wants
the evaluation beside them. The trackers are lopd-train's (:class:`lopd_train.tracking.Tracker`, accelerate's,
same ``--report-to`` values); what goes to them is what ``results.md`` shows: every row with a value as
``eval/<benchmark>/<metric>`` (rows never run are left out, not sent as 0), and one table of the episodes (task,
the end of the prompt, the last reply, the reward). The default is ``none``: accelerate needs torch, which
``lopd[eval]`` has not (``lopd[tracking]`` brings it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lopd_train.evaluation import leaderboards, report


def scalars(results: dict[str, Any]) -> dict[str, float]:
    """``{"eval/<benchmark>/<metric>": value}`` for every row of ``results.md`` that has a value."""
    return {f"eval/{leaderboards.benchmark_name(env)}/{metric}": float(value)
            for env, metric, value, _, _ in report.rows(results) if value is not None}


def episode_rows(records: Sequence[dict[str, Any]], tail_chars: int = 400) -> list:
    """One tracker table row per record: the task's last user message (its end) and the model's last reply."""
    from lopd_train.tracking import RolloutRow

    def text(message: dict[str, Any]) -> str:
        content = message.get("content")
        if message.get("tool_calls"):
            content = f"{content or ''}{json.dumps(message['tool_calls'], default=str)}"
        return content if isinstance(content, str) else json.dumps(content, default=str)

    rows = []
    for r in records:
        messages = r.get("messages") or []
        users = [m for m in messages if m.get("role") == "user"]
        replies = [m for m in messages if m.get("role") == "assistant"]
        name = f"{leaderboards.benchmark_name(r['env'])}:{r['task_id']}#{r.get('sample', 0)}"
        rows.append(RolloutRow(task_id=name,
                               prompt_tail=text(users[-1])[-tail_chars:] if users else "",
                               completion=text(replies[-1]) if replies else "", reward=float(r["reward"])))
    return rows


def send(report_to: str | Sequence[str] | None, results: dict[str, Any], records: Sequence[dict[str, Any]],
         out: Path, settings: dict[str, Any]) -> list[str]:
    """Log ``results`` and a table of ``records`` to each tracker of ``report_to``; returns those used (``all``
    expanded)."""
    from lopd_train.tracking import Tracker, parse_report_to

    chosen = parse_report_to(report_to)
    if not chosen:
        return []
    tracker = Tracker(chosen, out, project="lopd-eval", run_name=Path(out).name, config=settings)
    try:
        tracker.log_scalars(scalars(results), 0)
        tracker.log_rollouts(episode_rows(records), 0)
    finally:
        tracker.close()
    return tracker.names
