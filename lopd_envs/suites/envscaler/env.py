"""``lopd/EnvScaler-v0``: EnvScaler's synthesized stateful tool environments as a gymnasium env."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from lopd_envs.options import check_choice
from lopd_envs.provenance import Provenance
from lopd_envs.sandbox import Sandbox
from lopd_envs.suites.envscaler import data
from lopd_envs.suites.envscaler.episode import EnvScalerEpisode, ScenarioHost
from lopd_envs.suites.envscaler.isolation import CALL_TIMEOUT, CHECK_TIMEOUT, EnvWorker, resolve_sandbox
from lopd_envs.suites.envscaler.users import UserSimulator, make_user
from lopd_envs.tasks import Task, select

CATEGORIES = ("non_conversation", "conversation")
MAX_STEPS = {"non_conversation": 30, "conversation": 40}  # the runner's max_steps_map
CONVERSATION_SUFFIX = ":conv"


def task_ids(scenarios: Sequence[data.Scenario]) -> list[str]:
    """Official ``task_id``s (timestamps upstream, so not always unique): a repeat gets ``#2``, ``#3`` …"""
    seen: Counter[str] = Counter()
    out = []
    for sc in scenarios:
        seen[sc.task_id] += 1
        out.append(sc.task_id if seen[sc.task_id] == 1 else f"{sc.task_id}#{seen[sc.task_id]}")
    return out


def function_schemas(environment: data.Environment) -> list[dict[str, Any]]:
    """The environment's OpenAI tool schemas as lopd's function descriptions (``name``, ``description``,
    ``parameters``); :meth:`AgentEnv.tool_schemas` wraps them back."""
    return [dict(t.get("function", t)) for t in environment.tools]


class EnvScalerEnv(ScenarioHost):
    """EnvScaler as a gymnasium env.

    ``category``: ``"non_conversation"`` (task shown, the agent's message ends the episode, 30 steps),
    ``"conversation"`` (a simulated user reveals the task, ``###STOP###`` ends it, 40 steps), or ``"all"``
    (each scenario in both modes; conversational task ids end in ``:conv``). ``split``: ``rl`` (default),
    ``eval``, ``train``, ``sft`` (ungraded). ``source``: ``official`` (default; missing files are an error
    that says how to get them) or ``ours`` (lopd's own environments, by name only; see
    :mod:`lopd_envs.suites.envscaler.data`). ``envs``: environment ids (``env_1`` …) to keep. ``user``: the
    simulated user (a :class:`~lopd_envs.suites.acebench.users.UserSimulator`, or a list of lines for a
    scripted one); default: state the task, then stop. ``sandbox``: the backend for the environment workers
    (a name, an instance, or None: ``LOPD_SANDBOX``, else bubblewrap), resolved as every suite's is
    (:func:`lopd_envs.sandbox.resolve_sandbox`): ``sandbox="process"``, ``LOPD_SANDBOX=process`` or
    ``allow_unisolated=True`` runs the environment code unisolated in a plain process; Docker cannot host
    the long-lived worker. ``call_timeout`` /
    ``check_timeout``: seconds per tool call / per check, enforced from the host. ``max_turns`` overrides
    the per-mode step limits. ``prestart``: keep one spare worker booting for the next reset.
    """

    env_id = "lopd/EnvScaler-v0"
    default_max_turns = 40

    def __init__(self, category: str | Sequence[str] = "all", split: str = "rl", source: str = "official",
                 envs: Sequence[str] | None = None, user: UserSimulator | Sequence[str] | None = None,
                 sandbox: str | Sandbox | None = None, allow_unisolated: bool = False,
                 call_timeout: float = CALL_TIMEOUT, check_timeout: float = CHECK_TIMEOUT,
                 max_turns: int | None = None, prestart: bool = True, **kwargs: Any):
        check_choice("split", split, data.SPLITS)
        check_choice("source", source, data.SOURCES)
        self.split, self.source, self.env_filter = split, source, envs
        self.user = list(user) if isinstance(user, (list, tuple)) else user
        self.call_timeout, self.check_timeout = call_timeout, check_timeout
        self.sandbox = resolve_sandbox(sandbox, allow_unisolated)
        # the resolver is the opt-in gate: a plain process it handed out was asked for (by name or flag)
        self.allow_unisolated = allow_unisolated or not self.sandbox.isolating
        self._max_turns_option = max_turns
        self.prestart, self._spare = prestart, None
        super().__init__(category=category, max_turns=max_turns, **kwargs)

    def load_tasks(self, category: str | Sequence[str], data_dir: str | None) -> list[Task]:
        modes = select(category, CATEGORIES)
        dataset = data.load_dataset(self.source, self.split, data_dir)
        self.origin = dataset.origin
        self.provenance = Provenance(
            "EnvScaler", dataset.origin,
            ", ".join(data.HUB_DATASETS[k] for k in ("env", "sft" if self.split == "sft" else "rl"))
            if dataset.origin == "official" else "lopd ours", str(dataset.files[0].parent), dataset.files)
        scenarios = data.select_scenarios(dataset, self.split, self.env_filter)
        tasks = []
        for mode in modes:
            for sc, tid in zip(scenarios, task_ids(scenarios)):
                environment = dataset.environments[sc.env_id]
                conversational = mode == "conversation"
                tasks.append(Task(tid + (CONVERSATION_SUFFIX if conversational else ""), mode, sc.task,
                                  function_schemas(environment),
                                  {"scenario": sc, "environment": environment, "conversational": conversational}))
        return tasks

    def reference_answer(self, task: Task) -> str | None:
        """The scripted solution's calls, one per line as ``<tool_call>`` JSON, for teachers that read a
        reference (OPSD). Only lopd's own environments have one (``ours/lopd_ours_solutions.json``); the
        official scenarios ship checks, not solutions, so theirs is ``None``."""
        if self.origin != "ours":
            return None
        solution = data.ours_solutions().get(task.data["scenario"].task_id)
        if not solution:
            return None
        return "\n".join("<tool_call>" + json.dumps(c, ensure_ascii=False) + "</tool_call>" for c in solution["calls"])

    def new_episode(self, task: Task) -> EnvScalerEpisode:
        if self._episode is not None:
            self._episode.close()  # type: ignore[attr-defined]
        self.max_turns = self._max_turns_option or MAX_STEPS[task.category]
        return EnvScalerEpisode(self, task)

    def start_worker(self) -> EnvWorker:
        """A fresh worker for a new episode. One spare is kept booting in the background (a sandboxed
        interpreter that has run no environment code yet), so a reset does not wait for the boot."""
        spare, self._spare = self._spare, None
        worker = spare if spare is not None and spare.alive else self._boot()
        if spare is not None and worker is not spare:
            spare.close()
        if self.prestart:
            self._spare = self._boot()
        return worker

    def _boot(self) -> EnvWorker:
        return EnvWorker(self.sandbox, self.allow_unisolated, self.call_timeout, self.check_timeout)

    def close(self) -> None:
        if self._episode is not None:
            self._episode.close()  # type: ignore[attr-defined]
        if self._spare is not None:
            self._spare.close()
            self._spare = None
        super().close()


__all__ = ["CATEGORIES", "MAX_STEPS", "EnvScalerEnv", "make_user"]
