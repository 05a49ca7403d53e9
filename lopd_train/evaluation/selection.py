"""What a ``lopd-eval`` run scores, checked whole before the first generation.

Every env id, every env's category and every ``--tasks`` id is checked up front: an unknown one is
refused with the closest valid names, instead of being dropped (a typo then scores a smaller set than asked
for and still exits 0) or failing only when its env is reached, after the envs before it generated for
minutes. Each env is built once here with its real arguments, so whatever the env itself refuses
(a category, an argument) is refused now too.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any


class SelectionError(ValueError):
    """An env, category or task id that selects nothing: the user's mistake, said in one line."""


def closest(name: str, valid: Iterable[str], n: int = 3) -> list[str]:
    """The valid names nearest to ``name``, best first: difflib's ratio, then the nearest length, then the
    name (so ties come out in a stable, readable order)."""
    name = str(name)[:200]
    scored = []
    for v in dict.fromkeys(valid):
        m = difflib.SequenceMatcher(None, name, v)
        if m.real_quick_ratio() >= 0.5 and m.quick_ratio() >= 0.5 and m.ratio() >= 0.5:
            scored.append((-m.ratio(), abs(len(v) - len(name)), v))
    return [v for *_, v in sorted(scored)[:n]]


def _hint(name: str, valid: Sequence[str]) -> str:
    near = closest(name, valid)
    if near:
        return "did you mean " + " or ".join(repr(v) for v in near) + "?"
    return "e.g. " + ", ".join(repr(v) for v in list(valid)[:3])


def check_env_ids(env_ids: Sequence[str], registered: Iterable[str]) -> None:
    """Every id is a registered env; the first unknown one is refused with the nearest registered ids."""
    known = sorted(registered)
    for env_id in env_ids:
        if env_id not in known:
            lopd = [k for k in known if k.startswith("lopd/")] or known
            raise SelectionError(f"--env {env_id!r:.200}: no such env; {_hint(env_id, lopd)}")


_CHOICES = re.compile(r"unknown (\w+) '([^']*)'; choose from: (.*)$")


def env_refusal(env_id: str, exc: Exception) -> SelectionError:
    """The env's own refusal of its arguments (a category, a keyword), with the closest valid names when the
    env listed its choices."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    found = _CHOICES.search(text)
    if found:
        what, name, choices = found.groups()
        text = f"unknown {what} {name!r}; {_hint(name, [c.strip() for c in choices.split(',')])}"
    return SelectionError(f"--env {env_id}: {text}")


def select_tasks(env_id: str, task_ids: Sequence[str], wanted: Sequence[str] | None,
                 limit: int | None) -> list[str]:
    """The env's ids ``--tasks`` keeps (in the benchmark's order), then the first ``limit``. An env left
    with nothing is refused: a run would report it scored on zero tasks."""
    ids = list(task_ids)
    if not ids:
        raise SelectionError(f"--env {env_id}: no tasks for these settings")
    if wanted:
        keep = set(wanted)
        ids = [t for t in ids if t in keep]
        if not ids:
            raise SelectionError(f"--tasks selects no task of {env_id}: {_hint(str(wanted[0]), task_ids)}")
    return ids[:limit] if limit else ids


def check_task_ids(wanted: Sequence[str] | None, found: Mapping[str, Sequence[str]]) -> None:
    """Every ``--tasks`` id names a task of at least one env; the first that names none is refused."""
    every = [t for ids in found.values() for t in ids]
    known = set(every)
    for task_id in wanted or ():
        if task_id not in known:
            raise SelectionError(f"--tasks {task_id!r:.200}: no such task in {', '.join(found)}; "
                                 f"{_hint(task_id, every)}")


def plan(env_ids: Sequence[str], wanted: Sequence[str] | None, limit: int | None,
         build: Callable[[str], Any], registered: Iterable[str]) -> dict[str, list[str]]:
    """The task ids each env scores, every selection checked before anything is generated. ``build(env_id)``
    makes the env with the run's arguments (closed here)."""
    check_env_ids(env_ids, registered)
    every: dict[str, list[str]] = {}
    for env_id in env_ids:
        try:
            env = build(env_id)
        except (ValueError, TypeError, KeyError) as exc:  # the env refused its arguments
            raise env_refusal(env_id, exc) from None
        try:
            every[env_id] = [t.task_id for t in (getattr(env.unwrapped, "tasks", None) or [])]
        finally:
            env.close()
    check_task_ids(wanted, every)
    return {env_id: select_tasks(env_id, ids, wanted, limit) for env_id, ids in every.items()}
