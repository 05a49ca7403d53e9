"""What ``reset(options=...)`` may ask for (docs/design.md section 3), checked the same way for every env.

``options`` is ``None`` or a mapping whose only key is ``task_id``: a task id string of the env's selected
tasks (``None`` lets the seed pick, as no option does). A silently ignored option would run a different
task than the one asked for, so anything else is refused, naming the bad key or value and what is accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lopd_envs.tasks import Task

#: The keys ``reset(options=...)`` accepts.
RESET_OPTIONS = ("task_id",)


def chosen_task(env: Any, options: Any) -> Task | None:
    """The task ``reset(options=...)`` asks for, or ``None`` to let the seed pick. ``options`` is ``None``
    or a mapping whose only key is ``task_id`` (a task id string; ``None`` also lets the seed pick).
    Anything else is the caller's mistake, refused with the bad key or value and what is accepted: a
    silently ignored option would run a different task than the one asked for."""
    if options is None:
        return None
    if not isinstance(options, Mapping):
        raise TypeError(f"{env.env_id}: reset(options=...) takes None or a dict such as "
                        f"{{'task_id': {env.tasks[0].task_id!r}}}, got {type(options).__name__} {options!r:.80}")
    unknown = [key for key in options if key not in RESET_OPTIONS]
    if unknown:
        raise ValueError(f"{env.env_id}: unknown reset option(s) {', '.join(repr(k)[:80] for k in unknown)}; "
                         f"accepted: {', '.join(RESET_OPTIONS)}")
    task_id = options.get("task_id")
    if task_id is None:
        return None
    if not isinstance(task_id, str):
        raise TypeError(f"{env.env_id}: reset option 'task_id' must be a task id string such as "
                        f"{env.tasks[0].task_id!r}, got {type(task_id).__name__} {task_id!r:.80}")
    if task_id not in env._index:
        raise ValueError(f"{env.env_id}: unknown task_id {task_id!r:.200} in the selected "
                         f"categories ({len(env.tasks)} tasks; e.g. {env.tasks[0].task_id!r})")
    return env.tasks[env._index[task_id]]

