"""The ``AgentEnv`` contract every lopd benchmark env follows (docs/design.md section 3).

An env is a task list plus an episode factory. The env owns what all benchmarks share (task choice from
the seed or ``options["task_id"]``, turn limits, action parsing, error observations, the trace, the final
score); the episode owns one task's state and rules. A fresh :class:`Episode` per reset means nothing
leaks between episodes, and a suite only writes what differs, in these hooks:

* ``AgentEnv.load_tasks(category, data_dir)``: once, in ``__init__``; returns the selected tasks.
* ``AgentEnv.new_episode(task)``: at every ``reset``; returns a fresh :class:`Episode` for ``task``.
* ``Episode.opening()``, ``Episode.act(turn)``, ``Episode.score()``: see :class:`Episode`.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, cast

import gymnasium as gym

from lopd_envs.actions import AssistantTurn, Reaction
from lopd_envs.options import check_choice, check_turn_limit, unknown_options
from lopd_envs.provenance import Provenance
from lopd_envs.reset_options import chosen_task
from lopd_envs.spaces import AgentAction, ChatMessages
from lopd_envs.tasks import Score, Task
from lopd_envs.tools import ToolNames, openai_tool, parse_action
from lopd_envs.trace import Trace

log = logging.getLogger(__name__)

SCORING_MODES = ("official", "strict")


def error_message(text: str, tool: str | None = None) -> dict[str, Any]:
    """An error observation: a tool result when it concerns a call, otherwise a user-side notice."""
    notice = {"role": "user", "content": f"[environment] Error: {text}"}
    return notice if tool is None else {"role": "tool", "name": tool, "content": f"Error: {text}"}


class Episode:
    """One task's live state. Subclasses implement the three hooks; ``self.env`` gives the options."""

    def __init__(self, env: AgentEnv, task: Task):
        self.env, self.task = env, task

    def opening(self) -> list[dict[str, Any]]:
        """Called once, by ``reset``. Returns the first observation (system prompt, the user's request).
        Never reads or changes another episode's state."""
        raise NotImplementedError

    def act(self, turn: AssistantTurn) -> Reaction:
        """Called by ``step`` with each parsed action (``turn.parse_error`` set when it did not parse),
        until a reaction says ``done`` or the turn limit is reached. Returns a :class:`Reaction`. Never
        raises for bad input (answer with :func:`error_message`); a raise is reported as a suite bug."""
        raise NotImplementedError

    def score(self) -> Score:
        """Called once, when the episode ends (done or truncated). Returns the benchmark's verdict on the
        episode so far. Never changes the episode's state, and never credits what it could not check."""
        raise NotImplementedError


class AgentEnv(gym.Env):
    """Base of all lopd envs: set ``env_id``, implement :meth:`load_tasks` and :meth:`new_episode`."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}
    env_id: ClassVar[str] = ""
    default_max_turns: ClassVar[int] = 64
    #: which data ``load_tasks`` read (set there; :mod:`lopd_envs.provenance`)
    provenance: Provenance | None = None

    def __new__(cls, *args: Any, **kwargs: Any):
        # before any suite's __init__ (sandbox probes, data): a misspelt option fails at once, never a default
        unknown_options(cls, kwargs, stop=AgentEnv)
        return super().__new__(cls)

    def __init__(self, category: str | Sequence[str] = "all", data_dir: str | None = None,
                 max_turns: int | None = None, scoring: str = "official", sanitize_tool_names: bool = False,
                 render_mode: str | None = None, **options: Any):
        unknown_options(type(self), options, stop=AgentEnv)  # reachable only by calling __init__ directly
        check_choice("scoring", scoring, SCORING_MODES)
        check_turn_limit(max_turns)
        check_choice("render_mode", render_mode, (None, *self.metadata["render_modes"]))
        self.scoring, self.data_dir, self.max_turns = scoring, data_dir, max_turns or self.default_max_turns
        self.sanitize_tool_names, self.render_mode = sanitize_tool_names, render_mode
        self.tasks: list[Task] = list(self.load_tasks(category, data_dir))
        if not self.tasks:
            raise ValueError(f"{self.env_id}: no tasks for category={category!r}")
        self._index = {t.task_id: i for i, t in enumerate(self.tasks)}
        self.observation_space = ChatMessages()
        self.action_space = AgentAction()
        self._episode: Episode | None = None
        self._trace: Trace | None = None
        self._done, self._turns = True, 0
        self.messages: list[dict[str, Any]] = []

    # -- what a suite provides -------------------------------------------------------------------
    def load_tasks(self, category: str | Sequence[str], data_dir: str | None) -> Iterable[Task]:
        """Called once, by ``__init__`` (after the base options are set). Returns the tasks of the selected
        categories (:func:`lopd_envs.tasks.select`) and sets ``self.provenance`` to the files it read. Raises a
        clear error for unknown categories or missing data (never substitutes other data unasked)."""
        raise NotImplementedError

    def new_episode(self, task: Task) -> Episode:
        """Called by every ``reset``. Returns a fresh :class:`Episode` for ``task`` (a suite may pick the
        class per task). Never reuses or shares an episode's mutable state."""
        raise NotImplementedError

    # -- gymnasium API -----------------------------------------------------------------------------
    @property
    def task(self) -> Task | None:
        return self._episode.task if self._episode else None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        chosen = chosen_task(self, options)  # checked before the seed is applied: a bad call changes nothing
        super().reset(seed=seed)
        task = chosen if chosen is not None else self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self._episode = self.new_episode(task)
        self._trace = Trace(env_id=self.env_id, task_id=task.task_id, task=task.instruction,
                            category=task.category)
        self._done, self._turns = False, 0
        observation = self._episode.opening()
        self.messages = copy.deepcopy(observation)
        info = {"task_id": task.task_id, "category": task.category, "tools": self.tool_schemas(task)}
        return copy.deepcopy(observation), info

    def step(self, action: Any):
        if self._episode is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        episode, trace = self._episode, cast(Trace, self._trace)  # reset() sets both
        task = episode.task
        if self._done:
            obs = [error_message("the episode has ended; call reset()")]
            return obs, 0.0, True, False, self._info(task, error="episode already ended")
        turn = parse_action(action)
        self._turns += 1
        try:
            reaction = episode.act(turn)
        except Exception as exc:  # a suite bug must not take the caller's process down
            log.exception("%s: episode %s failed on an action", self.env_id, task.task_id)
            reaction = Reaction([error_message(f"internal environment error: {type(exc).__name__}: {exc}")],
                                done=True, error=f"internal: {exc!r}")
        trace.record(turn, reaction)
        self.messages.append(turn.message)
        self.messages.extend(copy.deepcopy(reaction.observation))
        terminated = bool(reaction.done)
        truncated = not terminated and self._turns >= self.max_turns
        reward, info = 0.0, self._info(task, error=reaction.error or turn.parse_error)
        if terminated or truncated:
            self._done = True
            score = self._final_score(episode)
            reward = float(score.reward)
            trace.reward, trace.success = reward, score.succeeded
            info["score"] = score.details
            info["trace"].reward, info["trace"].success = reward, score.succeeded  # already a copy
        return copy.deepcopy(reaction.observation), reward, terminated, truncated, info

    def render(self) -> str | None:
        return None if self.render_mode != "ansi" else "\n".join(
            f"[{m['role']}{':' + m['name'] if m.get('name') else ''}] {m['content']}" for m in self.messages)

    # -- helpers -------------------------------------------------------------------------------------
    def tool_schemas(self, task: Task) -> list[dict[str, Any]]:
        return [openai_tool(f, sanitize=self.sanitize_tool_names) for f in task.tools]

    def tool_names(self, task: Task) -> ToolNames:
        return ToolNames(f["name"] for f in task.tools)

    def _final_score(self, episode: Episode) -> Score:
        try:
            return episode.score()
        except Exception as exc:
            log.exception("%s: scoring %s failed", self.env_id, episode.task.task_id)
            return Score(0.0, {"valid": False, "error": f"scorer failed: {type(exc).__name__}: {exc}"})

    def _info(self, task: Task, error: str | None = None) -> dict[str, Any]:
        return {"task_id": task.task_id, "category": task.category, "turn": self._turns,
                "trace": copy.deepcopy(self._trace), **({"error": error} if error else {})}
