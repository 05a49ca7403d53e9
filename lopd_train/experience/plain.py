"""Trajectories and bank experiences as plain data (dicts of numbers, text, lists, tensors) and back.

Why: an algorithm's checkpoint state may hold them (LOPD's probes: banked successes with their retrieved
experiences), and a checkpoint holds only plain data (:mod:`lopd_train.statefile`), never a pickled
object. The round trip is exact: a resumed run scores the very same token sequences.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def trajectory_to_plain(t: Any) -> dict[str, Any]:
    """Every field of a :class:`~lopd_train.rollout.engine.Trajectory`, its trace as ``Trace.to_json`` text."""
    out = {f.name: getattr(t, f.name) for f in dataclasses.fields(t)}
    out["trace"] = t.trace.to_json() if t.trace is not None else None
    return out


def trajectory_from_plain(data: dict[str, Any]) -> Any:
    from lopd_envs.trace import Trace
    from lopd_train.rollout.engine import Trajectory

    names = {f.name for f in dataclasses.fields(Trajectory)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"a saved trajectory has unknown fields {sorted(unknown)}")
    trace = data.get("trace")
    return Trajectory(**{**data, "trace": Trace.from_json(trace) if trace is not None else None})


def experience_to_plain(e: Any) -> dict[str, Any]:
    return dataclasses.asdict(e)


def experience_from_plain(data: dict[str, Any]) -> Any:
    from lopd_train.experience.bank import Experience

    return Experience(**data)


def probes_to_plain(probes: list[tuple[Any, list[Any]]]) -> list[dict[str, Any]]:
    """LOPD's probes, ``(trajectory, its retrieved experiences)`` pairs, as plain data."""
    return [{"trajectory": trajectory_to_plain(t), "experiences": [experience_to_plain(e) for e in exps]}
            for t, exps in probes]


def probes_from_plain(rows: list[dict[str, Any]]) -> list[tuple[Any, list[Any]]]:
    return [(trajectory_from_plain(r["trajectory"]), [experience_from_plain(e) for e in r["experiences"]])
            for r in rows]
