"""The records a suite builds, and category selection: :class:`Task` (one benchmark item, from
``load_tasks``), :class:`Score` (an episode's verdict, from ``Episode.score``), and :func:`select`, how every
env reads its ``category`` option (a name, a group, ``"all"`` or a list), so that all envs accept the same
forms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Task:
    """One benchmark item. ``tools`` are the benchmark's own function descriptions; ``data`` is the raw row
    (and answer) for the suite's episode and scorer."""

    task_id: str
    category: str
    instruction: str
    tools: list[dict[str, Any]] = field(default_factory=list)
    data: Any = None


@dataclass
class Score:
    """An episode's verdict: ``reward`` (the benchmark's score), ``details`` (the official result record)
    and ``success`` (default: ``reward == 1``)."""

    reward: float
    details: dict[str, Any] = field(default_factory=dict)
    success: bool | None = None

    @property
    def succeeded(self) -> bool:
        return self.success if self.success is not None else self.reward >= 1.0 - 1e-9


def select(requested: str | Sequence[str], available: Sequence[str],
           groups: Mapping[str, Sequence[str]] | None = None, what: str = "category") -> list[str]:
    """Expand ``"all"``, a group name, a name or a list of these into known names, in the order given."""
    groups = dict(groups or {})
    groups.setdefault("all", list(available))
    items = [requested] if isinstance(requested, str) else list(requested)
    out: list[str] = []
    for item in items:
        names = groups.get(item, [item])
        for name in names:
            if name not in available:
                choices = ", ".join(list(groups) + list(available))
                raise ValueError(f"unknown {what} {name!r}; choose from: {choices}")
            if name not in out:
                out.append(name)
    if not out:
        raise ValueError(f"no {what} selected")
    return out
