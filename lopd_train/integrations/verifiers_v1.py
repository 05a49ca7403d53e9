"""Any lopd env for verifiers' ``verifiers.v1`` API (verifiers 0.4, also shipped beside the classic API in
0.3.x): a ``vf.Taskset`` of the env's tasks and a ``vf.Env`` whose ``run`` plays one lopd episode per rollout.

How it maps: each task's opening messages (tools listed in the prompt: lopd's text protocol) are the task's
``system_prompt`` and ``prompt``; the agent is the tool-less ``null`` harness (verifiers' chat loop), so each
model reply is the lopd env's action as text, which the env parses as it does for any text-only model; the
env's answer goes back as the next user turn, until the env ends the episode. The reward is the env's own
outcome score (``lopd_reward``; metric ``lopd_success``).

Each benchmark package (``environments/lopd_<name>/``) exports the pair made by :func:`benchmark_classes`, so
``vf-eval lopd-bfcl --env.taskset.category simple ...`` runs it. Limits: native tool calls are not offered
under v1 (v1 serves tools through MCP tool servers declared per taskset class, while every BFCL or ACEBench
task brings its own functions): the text protocol only.
"""

from __future__ import annotations

import asyncio
import json
import types
from typing import Any, cast

import gymnasium as gym
import verifiers.v1 as vf  # pyright: ignore[reportMissingImports]  # an optional extra

import lopd_envs
from lopd_envs.chat import TextTools


class LopdTasksetConfig(vf.TasksetConfig):
    env: str = "lopd/BFCLv3-v0"
    """The lopd id (each benchmark package fixes its own)."""
    tasks: list[str] | None = None
    """Task ids to keep (default: every task of the selected categories)."""
    tool_syntax: str = "hermes"
    """The text protocol's call syntax, used where the env's prompt does not list the tools itself."""
    category: str | list[str] | None = None
    """The env's categories (its ``category=``); None: the env's default."""
    env_kwargs: dict[str, Any] = {}  # noqa: RUF012 - a pydantic field: each instance gets a copy
    """The env's other keywords (``{"few_shot": "simple_0"}``, ``{"allow_unisolated": true}``, ...)."""

    def lopd_kwargs(self) -> dict[str, Any]:
        return {**({} if self.category is None else {"category": self.category}), **self.env_kwargs}


class LopdTaskData(vf.TaskData):
    lopd_env: str
    task_id: str
    lopd_kwargs: dict[str, Any] = {}  # noqa: RUF012 - a pydantic field: each instance gets a copy


class LopdTask(vf.Task[LopdTaskData]):
    """One lopd task; the env records the episode's outcome on the instance it plays, read when scoring."""

    outcome: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        return f"{self.data.lopd_env}:{self.data.task_id}"

    @vf.reward(weight=1.0)
    async def lopd_reward(self, trace: vf.Trace) -> float:
        return float((self.outcome or {}).get("reward", 0.0))

    @vf.metric
    async def lopd_success(self, trace: vf.Trace) -> float:
        return float(bool((self.outcome or {}).get("success")))


class LopdTaskset(vf.Taskset[LopdTask, LopdTasksetConfig]):
    def load(self):
        gym.register_envs(lopd_envs)
        kwargs = self.config.lopd_kwargs()
        env = gym.make(self.config.env, **kwargs)
        try:
            ids = self.config.tasks or [t.task_id for t in cast(lopd_envs.AgentEnv, env.unwrapped).tasks]
            for task_id in ids:
                obs, info = env.reset(options={"task_id": task_id})
                tools = info.get("tools") or []
                opening = TextTools(self.config.tool_syntax).apply(obs, tools)
                system = "\n\n".join(m["content"] for m in opening if m["role"] == "system") or None
                prompt = [{"role": m["role"], "content": m["content"]} for m in opening if m["role"] != "system"]
                yield LopdTask(LopdTaskData(id=info["task_id"], name=info["task_id"], system_prompt=system,
                                            prompt=prompt, lopd_env=self.config.env, task_id=info["task_id"],
                                            lopd_kwargs=kwargs), self.config.task)
        finally:
            env.close()


def _user_turn(observation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The env's new messages as the next user turn (tool results named, as in lopd's text protocol)."""
    turn = []
    for m in observation:
        content = m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
        if m.get("role") == "tool":
            content = f"[{m.get('name') or 'tool'} result] {content}"
        turn.append({"role": "user", "content": content})
    return turn or [{"role": "user", "content": "[no answer]"}]


class LopdEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"})
    """The policy: verifiers' tool-less chat loop (``null`` harness); lopd parses and runs the calls."""


class LopdEnv(vf.Env[LopdEnvConfig]):
    """One rollout = one lopd episode: a fresh lopd env reset to the task, the model's replies as its actions,
    its answers as the next user turns, until it ends the episode (or the agent's turn limit ends the run)."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        data = task.data
        env = await asyncio.to_thread(gym.make, data.lopd_env, **data.lopd_kwargs)
        try:
            await asyncio.to_thread(env.reset, options={"task_id": data.task_id})
            async with agents.agent.interaction(task) as chat:
                segment = await chat.turn()
                while not segment.terminated:
                    obs, reward, terminated, truncated, info = await asyncio.to_thread(
                        env.step, segment.last_reply)
                    if terminated or truncated:
                        trace = info.get("trace")
                        task.outcome = {"reward": float(reward),
                                        "success": bool(getattr(trace, "success", False))}
                        break
                    segment = await chat.turn(_user_turn(obs))
        finally:
            await asyncio.to_thread(env.close)


def benchmark_classes(lopd_env: str, prefix: str) -> tuple[type, type, type]:
    """The (taskset config, taskset, env) classes of one benchmark package: its taskset's ``env`` fixed to
    ``lopd_env``; ``prefix`` names them (``LopdBfcl`` -> ``LopdBfclTaskset``...)."""
    config = type(f"{prefix}TasksetConfig", (LopdTasksetConfig,),
                  {"__annotations__": {"env": str}, "env": lopd_env, "__module__": __name__})
    taskset = types.new_class(f"{prefix}Taskset", (LopdTaskset, vf.Taskset[LopdTask, config]),
                              exec_body=lambda ns: ns.update({"__module__": __name__}))
    env = type(f"{prefix}Env", (LopdEnv,), {"__module__": __name__})
    return config, taskset, env
