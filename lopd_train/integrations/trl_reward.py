"""Single-turn lopd envs as plain TRL ``reward_funcs`` (checked against trl 1.16.0).

TRL's plainest route: ``GRPOTrainer`` samples the completions itself and calls each reward function as
``f(prompts=..., completions=..., completion_ids=..., **columns)``, where ``columns`` holds every other column
of the dataset row (one list entry per completion) plus ``trainer_state``, ``log_metric`` and ``log_extra``,
and wants one float per completion back. :func:`lopd_reward` makes such a function for a lopd env: each
completion is played as a one-turn episode of the task its row names (column ``task_id``): the env is reset to
that task, stepped once with the completion as the action, and the env's own score is the reward.

That fits the envs whose episode is one answer: HumanEval+, MBPP+, LiveCodeBench, BFCL-v3's single-turn
categories (``simple``, ``multiple``, ``parallel``, ``parallel_multiple``, ``irrelevance``, the ``live_*`` ones),
ACEBench ``normal``. A task that one answer does not finish (a multi-turn one) scores 0 and is named once in the
log: play those through ``environment_factory`` (:mod:`lopd_train.integrations.trl_env`) or ``rollout_func``
(:mod:`lopd_train.integrations.trl`). :func:`lopd_prompts` builds the dataset: one row per task, ``prompt``
(the env's opening messages, the task's functions listed in lopd's text protocol where the env's own prompt does
not list them) and ``task_id``.

Usage (examples/trl_reward_funcs.py)::

    from trl import GRPOConfig, GRPOTrainer
    from lopd_train.integrations.trl_reward import lopd_prompts, lopd_reward

    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=GRPOConfig(...),
                          train_dataset=lopd_prompts("lopd/HumanEvalPlus-v0"),
                          reward_funcs=lopd_reward("lopd/HumanEvalPlus-v0"))
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any, cast

import gymnasium as gym

import lopd_envs
from lopd_envs.chat import TextTools, clean_message

log = logging.getLogger(__name__)

TASK_COLUMN = "task_id"


def make_env(env_id: str, **env_kwargs: Any) -> gym.Env:
    """One lopd env (``gym.make``; the ids of :mod:`lopd_envs.registration`, or ``"module:id"``)."""
    gym.register_envs(lopd_envs)
    return gym.make(env_id, **env_kwargs)


def task_openings(env: gym.Env, tasks: Sequence[str] | None = None
                  ) -> Iterator[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]]:
    """``(task id, opening messages, the task's tool schemas)`` for each task (default: all the env serves)."""
    lopd_env = cast(lopd_envs.AgentEnv, env.unwrapped)
    ids = list(tasks) if tasks is not None else [t.task_id for t in lopd_env.tasks]
    if not ids:
        raise ValueError(f"{lopd_env.env_id} serves no tasks: pass tasks=[...]")
    for task_id in ids:
        obs, info = env.reset(options={"task_id": task_id})
        yield info.get("task_id", task_id), obs, info.get("tools") or []


def plain(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Messages as ``{"role", "content"}`` strings only: one Arrow type for every row of the dataset."""
    return [{"role": m["role"], "content": m["content"]} for m in (clean_message(m) for m in messages)]


def lopd_prompts(env_id: str, tasks: Sequence[str] | None = None, tool_syntax: str = "hermes",
                 **env_kwargs: Any):
    """A ``datasets.Dataset`` with one row per task: ``prompt`` (the env's opening messages; a task whose
    functions the env's prompt does not list gets them in the system prompt, in lopd's text protocol with
    ``tool_syntax`` "hermes" or "python": the env reads every syntax) and ``task_id``."""
    from datasets import Dataset

    env = make_env(env_id, **env_kwargs)
    rows: dict[str, list] = {"prompt": [], TASK_COLUMN: []}
    try:
        for task_id, obs, tools in task_openings(env, tasks):
            rows["prompt"].append(plain(TextTools(tool_syntax).apply(obs, tools)))
            rows[TASK_COLUMN].append(task_id)
    finally:
        env.close()
    return Dataset.from_dict(rows)


def first_answer(completion: Any) -> Any:
    """A TRL completion as the env's action: the text of a standard-format completion, or the first assistant
    message of a conversational one (its ``tool_calls``, when TRL parsed any, in OpenAI's wire format, which
    lopd reads). Anything else goes to the env as it is, which answers it with a parse error."""
    if isinstance(completion, list):
        for message in completion:
            if isinstance(message, dict) and message.get("role") == "assistant":
                return {k: message[k] for k in ("role", "content", "tool_calls") if k in message}
        return ""
    return completion


class LopdReward:
    """A TRL reward function: the lopd env's score of each completion, played as a one-turn episode of the
    task named in the row's ``task_column``. One env, made on first use and reset per completion."""

    def __init__(self, env_id: str, task_column: str = TASK_COLUMN, name: str = "lopd_reward",
                 **env_kwargs: Any):
        self.env_id, self.task_column, self.env_kwargs = env_id, task_column, env_kwargs
        self.__name__ = name  # TRL logs the reward as rewards/<name>/mean
        self.env: gym.Env | None = None
        self.unfinished: set[str] = set()

    def __call__(self, prompts: list | None = None, completions: list | None = None, **columns: Any) -> list[float]:
        tasks = columns.get(self.task_column)
        if tasks is None:
            raise ValueError(f"{self.__name__}: the dataset has no {self.task_column!r} column (build it with "
                             f"lopd_prompts(), or pass task_column=)")
        completions = list(completions or [])
        if len(tasks) != len(completions):
            raise ValueError(f"{self.__name__}: {len(completions)} completions for {len(tasks)} task ids")
        played = [self.play(str(t), c) for t, c in zip(tasks, completions)]
        log_metric = columns.get("log_metric")
        if callable(log_metric) and played:  # TRL's hook: shown beside the reward in the logs
            log_metric(f"{self.__name__}/unfinished", sum(not done for _, done in played) / len(played))
        return [reward for reward, _ in played]

    def score(self, task_id: str, completion: Any) -> float:
        """The env's reward for ``completion`` as the one action of an episode of ``task_id``."""
        return self.play(task_id, completion)[0]

    def play(self, task_id: str, completion: Any) -> tuple[float, bool]:
        """``(reward, whether the one action ended the episode)``; an unfinished episode scores 0."""
        if self.env is None:
            self.env = make_env(self.env_id, **self.env_kwargs)
        self.env.reset(options={"task_id": task_id})  # an unknown id is the dataset's mistake: it raises
        _, reward, terminated, truncated, _ = self.env.step(first_answer(completion))  # never raises
        if terminated or truncated:
            return float(reward), True
        if task_id not in self.unfinished:
            self.unfinished.add(task_id)
            log.warning("%s: one answer does not finish task %s of %s (a multi-turn task): it scores 0; train it "
                        "through environment_factory (lopd_train.integrations.trl_env) or rollout_func",
                        self.__name__, task_id, self.env_id)
        return 0.0, False

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None


def lopd_reward(env_id: str, task_column: str = TASK_COLUMN, **env_kwargs: Any) -> LopdReward:
    """A TRL reward function that scores each completion with ``env_id`` (``env_kwargs`` go to ``gym.make``,
    e.g. ``category="simple"``), as a one-turn episode of the task in the row's ``task_column``."""
    return LopdReward(env_id, task_column=task_column, **env_kwargs)

