"""Any lopd env through TRL's ``environment_factory`` (checked against trl 1.16.0 and transformers 5.25).

What TRL 1.16 does with an environment (``GRPOTrainer.__init__`` and ``_generate_and_score_completions``):

* ``environment_factory`` is a zero-argument callable; TRL calls it once to probe the class and then once per
  concurrent rollout, and pools the instances across batches (``reset`` between rollouts);
* every public method of the instance's *class*, except ``reset`` and ``get_reward``, is a tool: the chat
  template renders its name, type hints and Google docstring, TRL parses the model's tool calls with the
  tokenizer's response template and calls the method with the call's arguments; what it returns goes back to
  the model as the tool message (an exception becomes ``{"error": ...}``). Generation goes on while the model
  calls tools; a message without a call ends the rollout;
* ``reset(**row)`` starts each rollout with the dataset row as keywords; a string it returns is appended to the
  last user message (no dataset: TRL feeds empty prompts and the environment supplies the task);
* the reward: an optional ``get_reward()`` (no arguments) and/or ``reward_funcs``, which TRL calls with
  ``environments=`` (each completion's instance) besides ``prompts`` and ``completions`` (the rollout's
  messages: assistant turns, tool results, the final answer);
* the chat template must render tool calls (``trl.chat_template_utils.supports_tool_calling``) and be one whose
  calls TRL can parse (``add_response_schema``: Qwen2.5/3, Llama 3.1/3.2, GLM-4, gpt-oss, ...).
  :func:`tool_chat_template` gives any other tokenizer TRL's own Qwen2.5 template (ChatML with tools).

How a lopd env maps onto it (:class:`LopdEnvironment`, :class:`LopdToolEnvironment`):

* one lopd env per instance. ``reset`` resets it to the row's ``task_id`` (the dataset of
  :func:`lopd_environment_dataset` already holds the opening) or, without one, to a task drawn by the env's
  own seeded sampler, whose opening it returns;
* a lopd task brings its own functions (each BFCL or ACEBench task), while TRL fixes one tool set per class
  when the trainer is built. So the task's functions are listed in the prompt and two fixed tools reach them:
  ``call_function(name, arguments)`` steps the env with that one call and returns the env's answer (the
  result, or its error), and ``reply(message)`` steps it with a plain message, which ends the user's turn in
  a multi-turn task (the next user turn comes back as the result). Envs without tools (HumanEval+, MBPP+,
  LiveCodeBench) get neither: the answer is one message;
* the reward is :func:`lopd_env_reward`: the rollout's last message, when it calls no tool, is the episode's
  last action, then the score is the env's own; an episode that has not ended scores 0 (as in ``rollout_func``);
* a model's output never raises out of the env: a bad call is the env's error observation, as in ``lopd-eval``;
* one-answer tasks (BFCL single-turn, ACEBench normal) are scored on the first message as a whole, all its calls
  together (BFCL ``parallel`` wants several), while TRL runs calls one at a time: when the first of several
  calls ended such an episode, :func:`lopd_env_reward` replays the whole first message in a fresh episode of
  the task. A first message that reached the env through no tool (text such as ``[f(a=1)]``, or a call by the
  function's own name, which TRL answers with "Tool f not found") is played in the same way;
* TRL drops a tool result that would overrun ``max_completion_length``, after the call has run: the env has
  then taken a step the completion does not show (give multi-turn tasks room).

Usage (examples/trl_environment_factory.py)::

    from trl import GRPOConfig, GRPOTrainer
    from lopd_train.integrations.trl_env import lopd_environment_inputs, tool_chat_template

    inputs = lopd_environment_inputs("lopd/BFCLv3-v0", category="multi_turn_base")
    trainer = GRPOTrainer(model=model, processing_class=tool_chat_template(tokenizer), args=GRPOConfig(...),
                          **inputs)   # train_dataset, environment_factory, reward_funcs
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from lopd_envs.chat import tools_already_listed
from lopd_envs.wire import function_of
from lopd_train.integrations.trl_reward import TASK_COLUMN, make_env, plain, task_openings

if TYPE_CHECKING:
    from lopd_envs import AgentEnv

log = logging.getLogger(__name__)

GATEWAY, REPLY = "call_function", "reply"
HINT = (f"Call the functions listed above through the tool `{GATEWAY}` (name: the function's name; arguments: its "
        f"arguments as an object), one function per call. To say something to the user and hear their answer, use "
        f"the tool `{REPLY}`. Your last message, without any tool call, ends the task.")
ENDED = "[environment] The episode is over: end with your final message, without tool calls."


def tool_chat_template(tokenizer):
    """``tokenizer`` ready for ``environment_factory``: kept when TRL can render and parse its tool calls, else
    given TRL's own Qwen2.5 chat template (ChatML with tools; ``<|im_end|>`` closes a turn)."""
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template, supports_tool_calling

    if supports_tool_calling(tokenizer):
        if getattr(tokenizer, "response_template", None) or getattr(tokenizer, "response_schema", None):
            return tokenizer
        try:
            return add_response_schema(tokenizer)
        except ValueError:  # a template TRL cannot parse tool calls of
            pass
    tokenizer.chat_template = qwen2_5_chat_template
    return add_response_schema(tokenizer)


def opening(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, str]]:
    """A task's opening for this route: the env's messages, plus (tasks with functions) the functions, where the
    env's prompt does not list them, and how to call them here, in the system prompt."""
    messages = plain(messages)
    if not tools:
        return messages
    extra = HINT if tools_already_listed(messages, tools) else f"The task's functions:\n{describe(tools)}\n\n{HINT}"
    if messages and messages[0]["role"] == "system":
        messages[0] = {"role": "system", "content": messages[0]["content"].rstrip() + "\n\n" + extra}
    else:
        messages.insert(0, {"role": "system", "content": extra})
    return messages


def describe(tools: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(function_of(t), ensure_ascii=False) for t in tools)


def lopd_environment_dataset(env_id: str, tasks: Sequence[str] | None = None, **env_kwargs: Any):
    """A ``datasets.Dataset`` for this route: one row per task, ``prompt`` (:func:`opening`) and ``task_id``."""
    from datasets import Dataset

    env = make_env(env_id, **env_kwargs)
    rows: dict[str, list] = {"prompt": [], TASK_COLUMN: []}
    try:
        for task_id, obs, tools in task_openings(env, tasks):
            rows["prompt"].append(opening(obs, tools))
            rows[TASK_COLUMN].append(task_id)
    finally:
        env.close()
    return Dataset.from_dict(rows)


def render(observation: list[dict[str, Any]], ended: bool) -> str:
    """The env's answer to one action as the text of TRL's tool message."""
    parts = []
    for m in observation:
        content = plain([{"role": str(m.get("role", "")), "content": m.get("content")}])[0]["content"]
        parts.append(content if m.get("role") == "tool" else f"[{m.get('role')}] {content}")
        if m.get("tools"):  # functions that become available with this turn (BFCL's held-out ones)
            parts.append(f"Functions now available:\n{describe(m['tools'])}")
    if ended:
        parts.append(ENDED)
    return "\n".join(p for p in parts if p) or "(no output)"


def as_action(message: dict[str, Any]) -> Any:
    """A TRL assistant message as one lopd action: ``call_function`` calls become the calls they name, ``reply``
    text joins the message's text, calls by any other name stay as they are (lopd resolves the task's names)."""
    content = message.get("content")
    texts, calls = [content if isinstance(content, str) else ""], []
    for call in message.get("tool_calls") or []:
        fn = function_of(call) if isinstance(call, dict) else call  # a wire call's function, or ours
        args = fn.get("arguments") if isinstance(fn, dict) else None
        if isinstance(fn, dict) and fn.get("name") == GATEWAY and isinstance(args, dict):
            calls.append({"name": args.get("name"), "arguments": args.get("arguments")})
        elif isinstance(fn, dict) and fn.get("name") == REPLY and isinstance(args, dict):
            said = args.get("message")
            texts.append(said if isinstance(said, str) else json.dumps(args))
        else:
            calls.append(fn)  # lopd reads it, or answers it with a parse error
    text = "\n".join(t for t in texts if t)
    return {"role": "assistant", "content": text, "tool_calls": calls} if calls else text


class LopdEnvironment:
    """One rollout's lopd env, for ``environment_factory``, for envs whose tasks have no functions: the answer
    is the rollout's message (scored by :func:`lopd_env_reward`). Every helper is private: TRL would offer a
    public method to the model as a tool."""

    def __init__(self, env_id: str, env: Any = None, seed: int | None = None, **env_kwargs: Any):
        self._env = env if env is not None else make_env(env_id, **env_kwargs)
        self._seed = seed
        self._task_id: str | None = None
        self._steps, self._done, self._reward = 0, False, 0.0

    def reset(self, **row: Any) -> str | None:
        """Start a rollout: the row's ``task_id`` (its prompt holds the opening), else a task from the env's own
        sampler (seeded once), whose opening is returned for TRL to append to the (empty) user message."""
        task_id = row.get(TASK_COLUMN)
        if task_id is not None:
            self._start(str(task_id))
            return None
        obs, info = self._env.reset(seed=self._seed)
        self._seed = None  # later draws go on from the seeded sampler
        self._begin(info["task_id"])
        return "\n\n".join(m["content"] for m in opening(obs, info.get("tools") or []))

    def _start(self, task_id: str) -> None:
        self._env.reset(options={"task_id": task_id})  # an unknown id is the dataset's mistake: it raises
        self._begin(task_id)

    def _begin(self, task_id: str) -> None:
        self._task_id, self._steps, self._done, self._reward = task_id, 0, False, 0.0

    def _step(self, action: Any) -> list[dict[str, Any]]:
        """One env step, and its observation (none once the episode has ended: :data:`ENDED` says so)."""
        if self._task_id is None:
            return [{"role": "user", "content": "[environment] Error: no episode has started; call reset()"}]
        if self._done:
            return []
        obs, reward, terminated, truncated, _ = self._env.step(action)
        self._steps += 1
        if terminated or truncated:
            self._done, self._reward = True, float(reward)
        return obs

    def _act(self, action: Any) -> str:
        """A tool's body: one step, its observation as text; never an exception out to TRL or the model."""
        try:
            return render(self._step(action), self._done)
        except Exception as exc:  # lopd's step never raises for a model's action; anything else is a bug
            log.exception("lopd environment: a step failed")
            return f"Error: {type(exc).__name__}: {exc}"

    def _finish(self, completion: Any) -> float:
        """The rollout's score: the last message as the last action (when it calls no tool and the episode is
        still on), the first message replayed as one action where TRL's one-call-at-a-time split it (see the
        module's docstring), then the env's reward; 0 for an episode that has not ended."""
        try:
            if self._task_id is None:
                return 0.0
            if isinstance(completion, str):
                completion = [{"role": "assistant", "content": completion}]
            turns = [m for m in completion or [] if isinstance(m, dict) and m.get("role") == "assistant"]
            if turns:
                first, last = turns[0], turns[-1]
                if self._steps == 0:
                    self._step(as_action(first))
                elif self._steps == 1 and self._done and len(first.get("tool_calls") or []) > 1:
                    self._start(self._task_id)
                    self._step(as_action(first))
                if not self._done and last is not first and not last.get("tool_calls"):
                    self._step(as_action(last))
            return self._reward if self._done else 0.0
        except Exception:  # never credit what could not be checked
            log.exception("lopd environment: scoring a rollout failed")
            return 0.0


class LopdToolEnvironment(LopdEnvironment):
    """A :class:`LopdEnvironment` for envs whose tasks bring functions: two tools reach them."""

    def call_function(self, name: str, arguments: dict) -> str:
        """Call one of the functions this task lists, and get its result.

        Args:
            name: The function's name, exactly as the task lists it.
            arguments: The function's arguments, as a JSON object of parameter names and values.

        Returns:
            The function's result, or an error.
        """
        return self._act({"role": "assistant", "content": "", "tool_calls": [{"name": name, "arguments": arguments}]})

    def reply(self, message: str) -> str:
        """Send the user a message (an answer, or a question) and get what comes next in the task.

        Args:
            message: The text for the user.

        Returns:
            The user's next request or answer, or the environment's notice.
        """
        return self._act(message if isinstance(message, str) else json.dumps(message, default=str))


class LopdEnvironmentFactory:
    """TRL's ``environment_factory`` for one lopd id: each call gives a fresh :class:`LopdEnvironment` (its own
    lopd env; ``env_kwargs`` go to ``gym.make``), with the two tools when the env's tasks bring functions."""

    def __init__(self, env_id: str, seed: int = 0, **env_kwargs: Any):
        self.env_id, self.seed, self.env_kwargs = env_id, seed, env_kwargs
        probe = make_env(env_id, **env_kwargs)
        self.has_tools = any(t.tools for t in cast("AgentEnv", probe.unwrapped).tasks)
        self.cls = LopdToolEnvironment if self.has_tools else LopdEnvironment
        self._spare = [probe]  # the first instance TRL makes takes it
        self.made: list[LopdEnvironment] = []

    def __call__(self) -> LopdEnvironment:
        env = self._spare.pop() if self._spare else make_env(self.env_id, **self.env_kwargs)
        instance = self.cls(self.env_id, env=env, seed=self.seed + len(self.made))
        self.made.append(instance)
        return instance

    def close(self) -> None:
        for instance in self.made:
            instance._env.close()
        for env in self._spare:
            env.close()
        self.made, self._spare = [], []


def lopd_env_reward(completions: list, environments: list | None = None, **kwargs: Any) -> list[float | None]:
    """TRL reward function for this route: each rollout's lopd score (:meth:`LopdEnvironment._finish`)."""
    if environments is None:
        raise ValueError("lopd_env_reward scores the rollouts of environment_factory=LopdEnvironmentFactory(...): "
                         "TRL passed no environments")
    rewards = [env._finish(c) if isinstance(env, LopdEnvironment) else None  # None: not this route's rollout
               for env, c in zip(environments, completions)]
    log_metric = kwargs.get("log_metric")
    ended = [env._done for env in environments if isinstance(env, LopdEnvironment)]
    if callable(log_metric) and ended:
        log_metric("lopd_env_reward/unfinished", sum(not e for e in ended) / len(ended))
    return rewards


def lopd_environment_inputs(env_id: str, tasks: Sequence[str] | None = None, seed: int = 0,
                            **env_kwargs: Any) -> dict[str, Any]:
    """The keyword arguments that make ``GRPOTrainer`` train on ``env_id`` through ``environment_factory``:
    ``train_dataset`` (one row per task), ``environment_factory`` and ``reward_funcs``."""
    return {"train_dataset": lopd_environment_dataset(env_id, tasks, **env_kwargs),
            "environment_factory": LopdEnvironmentFactory(env_id, seed=seed, **env_kwargs),
            "reward_funcs": [lopd_env_reward]}
