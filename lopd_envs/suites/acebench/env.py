"""``lopd/ACEBench-v0``: the gymnasium env over all ACEBench categories, in English or Chinese."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from lopd_envs.actions import ToolCall
from lopd_envs.core import AgentEnv, Episode, Task
from lopd_envs.options import check_choice
from lopd_envs.provenance import Provenance
from lopd_envs.suites.acebench.data import ACEBENCH_COMMIT, LANGUAGES, data_files, load_tasks
from lopd_envs.suites.acebench.episodes import AgentEpisode, episode_for
from lopd_envs.suites.acebench.users import ScriptedUser, UserSimulator
from lopd_envs.tools import render_python_calls


class ACEBenchEnv(AgentEnv):
    """ACEBench as a gymnasium env.

    ``category``: an official category (``normal_atom_bool`` ... ``agent_multi_turn``), a group
    (``normal``, ``special``, ``agent``, ``atom``, ``multi_turn``), a list of these, or ``"all"``.
    ``language``: ``"en"`` or ``"zh"``. ``user``: the simulated user of ``agent_multi_turn`` (a callable
    ``conversation -> message``, or a list of lines for a scripted user); the default states the task's
    instruction and then finishes. ``max_dialog_turns``: the agent loops' message budget (official: 40).
    ``scoring``: ``"official"`` or ``"strict"`` (see :mod:`lopd_envs.suites.acebench`).
    """

    env_id = "lopd/ACEBench-v0"
    default_max_turns = 40

    def __init__(self, category: str | Sequence[str] = "all", language: str = "en",
                 user: UserSimulator | list[str] | tuple[str, ...] | None = None, max_dialog_turns: int = 40, **kwargs: Any):
        check_choice("language", language, LANGUAGES)
        self.language = language
        self.user: Callable[[list[dict[str, str]]], str] | None = (
            ScriptedUser(user) if isinstance(user, (list, tuple)) else user)
        self.max_dialog_turns = max_dialog_turns
        super().__init__(category=category, **kwargs)

    def load_tasks(self, category: str | Sequence[str], data_dir: str | None) -> list[Task]:
        tasks = load_tasks(category, self.language, data_dir)
        files = data_files(category, self.language, data_dir)
        self.provenance = Provenance("ACEBench", "official", f"ACEBench@{ACEBENCH_COMMIT[:7]} data_{self.language}",
                                     str(files[0].parent), files)
        return tasks

    def new_episode(self, task: Task) -> Episode:
        """Single-turn, multi-step or multi-turn, by the task's category."""
        return episode_for(self, task)

    def reference_answer(self, task: Task) -> str | None:
        """The ground truth as text, for teachers that read a reference (OPSD): normal tasks' gold calls in
        the ``[f(a=1)]`` syntax; special tasks' expected reply (which parameters are missing or wrong, or the
        refusal); agent tasks' milestones (``None`` where a task has none)."""
        gold, kind = task.data.gold, task.category
        if kind.startswith("agent"):
            steps = task.data.milestones
            return "Expected actions, in order:\n" + "\n".join(map(str, steps)) if steps else None
        if kind == "special_irrelevant":
            return str(gold)
        if kind == "special_incomplete":
            return "; ".join(f"Do not call {name} yet: ask the user for the missing "
                             f"{', '.join(p.strip() for p in params)}." for name, params in gold.items())
        if kind == "special_error_param":
            return "; ".join(f"Do not call a function: tell the user that {name} = {', '.join(map(str, values))} "
                             "is wrong." for name, values in gold.items())
        if isinstance(gold, list):  # alternatives: any one of them passes
            gold = gold[0]
        known = {f["name"] for f in task.tools}
        calls = [ToolCall(name if name in known else re.sub(r"_\d+$", "", name), dict(args))
                 for name, args in gold.items()]
        return render_python_calls(calls)

    def official_prompt(self) -> tuple[str, str] | None:
        """For agent episodes: the (system, user) text ACEBench's own loop would send the agent now."""
        episode = self._episode
        return episode.official_prompt() if isinstance(episode, AgentEpisode) else None
