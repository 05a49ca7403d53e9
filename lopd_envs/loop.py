"""A plain OpenAI-messages agent loop over any lopd env, for agent frameworks that bring their own model.

The framework supplies one callable, ``agent(messages) -> assistant message`` (or ``agent(messages, tools)``
when it takes the tool schemas too), sync or ``async``. The loop keeps the conversation in the OpenAI chat
format the env speaks (docs/design.md section 3), hands the agent the whole transcript each turn, steps the env
with the agent's answer and stops when the env says the episode is over::

    from lopd_envs.loop import run_episode, run_episodes

    def agent(messages, tools):                 # e.g. a wrapper around an OpenAI-compatible client
        reply = client.chat.completions.create(model=..., messages=messages, tools=openai_tools(tools))
        return reply.choices[0].message.model_dump()

    result = run_episode(gym.make("lopd/BFCLv3-v0", category="simple"), agent, task_id="simple_30")
    results = run_episodes(lambda: gym.make("lopd/BFCLv3-v0"), agent, ["simple_0", "simple_1"], concurrency=8)
    results = await arun_episodes(make_env, async_agent, task_ids, concurrency=32)   # asyncio

The agent may answer with a string (the model's raw text, parsed by the env), with the env's structured
action ``{"role": "assistant", "content", "tool_calls": [{"name", "arguments": {...}}]}``, or with the
OpenAI wire format (``tool_calls: [{"id", "type": "function", "function": {"name", "arguments": "<json>"}}]``),
which is converted; tool results then carry the ``tool_call_id`` of the call they answer, so the transcript
can go straight back to an OpenAI-compatible server (the wire format's rules live in :mod:`lopd_envs.wire`).
An agent that raises ends its episode unscored (``reward`` None, ``error`` set): the loop never invents a
score, and one failing episode never stops the others.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lopd_envs.wire import link_tool_results, read_message
from lopd_envs.wire import openai_tools as openai_tools  # the tools= list for the agent's server, offered here too

Message = dict[str, Any]
AgentReply = str | Message
Agent = Callable[..., AgentReply | Awaitable[AgentReply]]


@dataclass
class EpisodeResult:
    """One finished episode: the whole transcript in OpenAI format and the env's verdict."""

    env_id: str
    task_id: str
    messages: list[Message]
    tools: list[dict[str, Any]]
    reward: float | None  # None: the episode ended without a score (the agent failed)
    turns: int
    terminated: bool
    truncated: bool
    score: Any = None  # info["score"]: the scorer's details
    trace: Any = None  # info["trace"]: the action-result trace
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


def to_action(reply: AgentReply) -> tuple[Any, Message, list[str | None]]:
    """``(action for env.step, assistant message for the transcript, the tool-call ids in order)``.

    The reply is read by :func:`lopd_envs.wire.read_message`: wire-format calls become the env's ``{"name",
    "arguments"}``; what it cannot read (arguments that are not a JSON object, a malformed call) is passed
    on as it is, so the env answers it with its error observation (as the benchmark would)."""
    if isinstance(reply, str):
        return reply, {"role": "assistant", "content": reply}, []
    if not isinstance(reply, dict):  # the env turns anything else into an error observation
        return reply, {"role": "assistant", "content": str(reply)}, []
    message = copy.deepcopy(reply)
    message.setdefault("role", "assistant")
    read = read_message(message)
    return read.action, message, read.ids


def _wants_tools(agent: Agent) -> bool:
    try:
        params = inspect.signature(agent).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params) or any(
        p.name == "tools" for p in params)


class _Episode:
    """The bookkeeping both loops share: the transcript, the step, the result."""

    def __init__(self, env, task_id: str | None, seed: int | None):
        options = {"task_id": task_id} if task_id is not None else None
        obs, info = env.reset(seed=seed, options=options)
        self.env = env
        self.info = info
        self.tools = list(info.get("tools") or [])
        self.messages: list[Message] = [dict(m) for m in obs]
        self.turns = 0
        self.done = False
        self.terminated = self.truncated = False
        self.reward: float | None = None
        self.error: str | None = None

    def step(self, reply: AgentReply) -> None:
        action, message, ids = to_action(reply)
        self.messages.append(message)
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.turns += 1
        self.info = info
        self.messages += link_tool_results(obs, ids)
        if terminated or truncated:
            self.done, self.terminated, self.truncated, self.reward = True, terminated, truncated, float(reward)

    def over(self, max_turns: int | None) -> bool:
        """Whether the episode is done; past ``max_turns`` agent turns it ends here, unscored."""
        if not self.done and max_turns is not None and self.turns >= max_turns:
            self.done = self.truncated = True
        return self.done

    def ask(self, agent: Agent, wants_tools: bool):
        messages = copy.deepcopy(self.messages)
        return agent(messages, self.tools) if wants_tools else agent(messages)

    def fail(self, exc: BaseException) -> None:
        self.done, self.error = True, f"{type(exc).__name__}: {exc}"

    def result(self) -> EpisodeResult:
        unwrapped = getattr(self.env, "unwrapped", self.env)
        trace = self.info.get("trace")
        return EpisodeResult(env_id=getattr(unwrapped, "env_id", "") or getattr(trace, "env_id", ""),
                             task_id=self.info.get("task_id") or getattr(trace, "task_id", ""),
                             messages=self.messages, tools=self.tools, reward=self.reward, turns=self.turns,
                             terminated=self.terminated, truncated=self.truncated, score=self.info.get("score"),
                             trace=trace, error=self.error, info=self.info)


def run_episode(env, agent: Agent, task_id: str | None = None, seed: int | None = None,
                max_turns: int | None = None) -> EpisodeResult:
    """One episode of ``env`` driven by a synchronous ``agent``. ``max_turns`` caps the agent's turns on top
    of the benchmark's own limit (the episode then ends unscored, ``truncated``)."""
    ep = _Episode(env, task_id, seed)
    wants_tools = _wants_tools(agent)
    while not ep.over(max_turns):
        try:
            reply = ep.ask(agent, wants_tools)
            if inspect.isawaitable(reply):
                raise TypeError("this agent is async: use arun_episode / arun_episodes")
        except Exception as exc:  # noqa: BLE001 - the agent's failure ends its episode, unscored
            ep.fail(exc)
            break
        ep.step(reply)
    return ep.result()


async def arun_episode(env, agent: Agent, task_id: str | None = None, seed: int | None = None,
                       max_turns: int | None = None) -> EpisodeResult:
    """One episode with an ``async`` (or plain) agent. The env's ``reset``/``step`` run in a worker thread, so
    code envs waiting on their sandbox never block the event loop."""
    ep = await asyncio.to_thread(_Episode, env, task_id, seed)
    wants_tools = _wants_tools(agent)
    while not ep.over(max_turns):
        try:
            reply = ep.ask(agent, wants_tools)
            if inspect.isawaitable(reply):
                reply = await reply
        except Exception as exc:  # noqa: BLE001 - the agent's failure ends its episode, unscored (as above)
            ep.fail(exc)
            break
        await asyncio.to_thread(ep.step, reply)
    return ep.result()


def _tasks_and_seeds(tasks: Sequence[str | None] | int, seeds: Sequence[int | None] | None):
    tasks = [None] * tasks if isinstance(tasks, int) else list(tasks)
    seeds = list(seeds) if seeds is not None else [None] * len(tasks)
    if len(seeds) != len(tasks):
        raise ValueError(f"{len(tasks)} tasks but {len(seeds)} seeds")
    return tasks, seeds


def run_episodes(make_env: Callable[[], Any], agent: Agent, tasks: Sequence[str | None] | int,
                 seeds: Sequence[int | None] | None = None, concurrency: int = 8,
                 max_turns: int | None = None) -> list[EpisodeResult]:
    """Many episodes at once (threads), one fresh env from ``make_env()`` per worker and episode; results in
    the order of ``tasks`` (task ids, or a count of seed-chosen tasks)."""
    tasks, seeds = _tasks_and_seeds(tasks, seeds)

    def one(i: int) -> EpisodeResult:
        env = make_env()
        try:
            return run_episode(env, agent, tasks[i], seeds[i], max_turns)
        finally:
            env.close()
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(one, range(len(tasks))))


async def arun_episodes(make_env: Callable[[], Any], agent: Agent, tasks: Sequence[str | None] | int,
                        seeds: Sequence[int | None] | None = None, concurrency: int = 8,
                        max_turns: int | None = None) -> list[EpisodeResult]:
    """Many episodes concurrently on the running event loop, at most ``concurrency`` at a time."""
    tasks, seeds = _tasks_and_seeds(tasks, seeds)
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(i: int) -> EpisodeResult:
        async with gate:
            env = await asyncio.to_thread(make_env)
            try:
                return await arun_episode(env, agent, tasks[i], seeds[i], max_turns)
            finally:
                env.close()
    return list(await asyncio.gather(*(one(i) for i in range(len(tasks)))))
