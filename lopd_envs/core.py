"""The ``AgentEnv`` contract every lopd benchmark env follows (DESIGN.md section 3).

An env is a task list plus an :class:`Episode` class. The env owns what all benchmarks share (task
choice from the seed or ``options["task_id"]``, turn limits, action parsing, error observations, the
trace, the final score); the episode owns one task's state and rules. A fresh ``Episode`` per reset means
nothing leaks between episodes, and a suite only writes what differs: how to open the conversation,
how to react to an action, and how to score.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Sequence

import gymnasium as gym

from lopd_envs.spaces import AgentAction, ChatMessages
from lopd_envs.tools import AssistantTurn, ToolNames, openai_tool, parse_action
from lopd_envs.trace import Trace, compact

log = logging.getLogger(__name__)

SCORING_MODES = ("official", "strict")


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
class Reaction:
    """What the env answers to one action. ``results`` pairs with the action's tool calls (one compact
    result each) so the trace can record action → result; ``done`` ends the episode."""

    observation: list[dict[str, Any]]
    done: bool = False
    results: list[str] | None = None
    error: str | None = None


@dataclass
class Score:
    reward: float
    details: dict[str, Any] = field(default_factory=dict)
    success: bool | None = None  # default: reward == 1

    @property
    def succeeded(self) -> bool:
        return self.success if self.success is not None else self.reward >= 1.0 - 1e-9


def error_message(text: str, tool: str | None = None) -> dict[str, Any]:
    """An error observation: a tool result when it concerns a call, otherwise a user-side notice."""
    if tool is not None:
        return {"role": "tool", "name": tool, "content": f"Error: {text}"}
    return {"role": "user", "content": f"[environment] Error: {text}"}


class Episode:
    """One task's live state. Subclasses implement the three hooks; ``self.env`` gives the options."""

    def __init__(self, env: "AgentEnv", task: Task):
        self.env = env
        self.task = task

    def opening(self) -> list[dict[str, Any]]:
        """The first observation: system prompt and the user's request."""
        raise NotImplementedError

    def act(self, turn: AssistantTurn) -> Reaction:
        """React to one parsed agent action. Must not raise for bad input: answer with an error message."""
        raise NotImplementedError

    def score(self) -> Score:
        """The benchmark's outcome for the episode so far (called once, when it ends)."""
        raise NotImplementedError


def select(requested: str | Sequence[str], available: Sequence[str],
           groups: dict[str, Sequence[str]] | None = None, what: str = "category") -> list[str]:
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


class AgentEnv(gym.Env):
    """Base of all lopd envs. Subclasses set ``env_id`` and ``episode_class`` and implement
    :meth:`load_tasks`."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}
    env_id: ClassVar[str] = ""
    episode_class: ClassVar[type[Episode]] = Episode
    default_max_turns: ClassVar[int] = 64

    def __init__(self, category: str | Sequence[str] = "all", data_dir: str | None = None,
                 max_turns: int | None = None, scoring: str = "official", sanitize_tool_names: bool = False,
                 render_mode: str | None = None, **options: Any):
        if scoring not in SCORING_MODES:
            raise ValueError(f"scoring must be one of {SCORING_MODES}, got {scoring!r}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.scoring = scoring
        self.data_dir = data_dir
        self.max_turns = max_turns or self.default_max_turns
        self.sanitize_tool_names = sanitize_tool_names
        self.render_mode = render_mode
        self.options = options
        self.tasks: list[Task] = list(self.load_tasks(category, data_dir))
        if not self.tasks:
            raise ValueError(f"{self.env_id}: no tasks for category={category!r}")
        self._index = {t.task_id: i for i, t in enumerate(self.tasks)}
        self.observation_space = ChatMessages()
        self.action_space = AgentAction()
        self._episode: Episode | None = None
        self._trace: Trace | None = None
        self._done = True
        self._turns = 0
        self.messages: list[dict[str, Any]] = []

    # -- what a suite provides -------------------------------------------------------------------
    def load_tasks(self, category: str | Sequence[str], data_dir: str | None) -> Iterable[Task]:
        raise NotImplementedError

    # -- gymnasium API -----------------------------------------------------------------------------
    @property
    def task(self) -> Task | None:
        return self._episode.task if self._episode else None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "task_id" in options:
            if options["task_id"] not in self._index:
                raise ValueError(f"{self.env_id}: unknown task_id {options['task_id']!r} in the selected "
                                 f"categories ({len(self.tasks)} tasks; e.g. {self.tasks[0].task_id!r})")
            task = self.tasks[self._index[options["task_id"]]]
        else:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self._episode = self.episode_class(self, task)
        self._trace = Trace(env_id=self.env_id, task_id=task.task_id, task=task.instruction,
                            category=task.category)
        self._done = False
        self._turns = 0
        observation = self._episode.opening()
        self.messages = copy.deepcopy(observation)
        info = {"task_id": task.task_id, "category": task.category, "tools": self.tool_schemas(task)}
        return copy.deepcopy(observation), info

    def step(self, action: Any):
        if self._episode is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        task = self._episode.task
        if self._done:
            obs = [error_message("the episode has ended; call reset()")]
            return obs, 0.0, True, False, self._info(task, error="episode already ended")
        turn = parse_action(action)
        self._turns += 1
        try:
            reaction = self._episode.act(turn)
        except Exception as exc:  # a suite bug must not take the caller's process down
            log.exception("%s: episode %s failed on an action", self.env_id, task.task_id)
            reaction = Reaction([error_message(f"internal environment error: {type(exc).__name__}: {exc}")],
                                done=True, error=f"internal: {exc!r}")
        self._record(turn, reaction)
        self.messages.append(turn.message)
        self.messages.extend(copy.deepcopy(reaction.observation))
        terminated = bool(reaction.done)
        truncated = not terminated and self._turns >= self.max_turns
        reward, info = 0.0, self._info(task, error=reaction.error or turn.parse_error)
        if terminated or truncated:
            self._done = True
            score = self._final_score(task)
            reward = float(score.reward)
            self._trace.reward, self._trace.success = reward, score.succeeded
            info["score"] = score.details
            info["trace"].reward, info["trace"].success = reward, score.succeeded  # already a copy
        return copy.deepcopy(reaction.observation), reward, terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{m['role']}{':' + m['name'] if m.get('name') else ''}] {m['content']}"
                         for m in self.messages)

    # -- helpers -------------------------------------------------------------------------------------
    def tool_schemas(self, task: Task) -> list[dict[str, Any]]:
        return [openai_tool(f, sanitize=self.sanitize_tool_names) for f in task.tools]

    def tool_names(self, task: Task) -> ToolNames:
        return ToolNames(f["name"] for f in task.tools)

    def _final_score(self, task: Task) -> Score:
        try:
            return self._episode.score()
        except Exception as exc:
            log.exception("%s: scoring %s failed", self.env_id, task.task_id)
            return Score(0.0, {"valid": False, "error": f"scorer failed: {type(exc).__name__}: {exc}"})

    def _info(self, task: Task, error: str | None = None) -> dict[str, Any]:
        info: dict[str, Any] = {"task_id": task.task_id, "category": task.category, "turn": self._turns,
                                "trace": copy.deepcopy(self._trace)}
        if error:
            info["error"] = error
        return info

    def _record(self, turn: AssistantTurn, reaction: Reaction) -> None:
        """Add the action and its compact result to the trace: one step per tool call when results pair
        with calls, otherwise the text (or the parse failure) with the observation as its result."""
        results = reaction.results
        if turn.tool_calls and results is not None and len(results) == len(turn.tool_calls):
            for call, result in zip(turn.tool_calls, results):
                self._trace.add(call.to_dict(), result, error=str(result).startswith("Error"))
            return
        summary = " | ".join(m.get("content", "") for m in reaction.observation)
        if turn.tool_calls:
            for call in turn.tool_calls:
                self._trace.add(call.to_dict())
            if summary:
                self._trace.steps[-1].result = compact(summary)
            return
        self._trace.add({"text": turn.text}, summary, error=bool(turn.parse_error or reaction.error))
