"""Serve any lopd env as an OpenEnv environment (``openenv-core``): the HTTP/WebSocket server OpenEnv's
clients (``EnvClient``, ``GenericEnvClient``) and trainers connect to.

    python -m lopd_train.integrations.openenv lopd/BFCLv3-v0 --env-kwargs '{"category": "simple"}' --port 8000

    from openenv.core import GenericEnvClient
    with GenericEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        first = env.reset(task_id="simple_0")           # observation: messages, tools, task_id, category
        result = env.step({"text": "[calculate_triangle_area(base=10, height=5)]"})
        result.reward, result.done, result.observation["info"]["score"]

What maps to what: OpenEnv's ``reset(seed, episode_id, task_id=...)`` is the gymnasium ``reset`` (the
seed picks a task, or ``task_id`` names one); an action is the model's raw ``text`` or structured
``tool_calls`` (``[{"name", "arguments"}]``), exactly the two action forms of a lopd env; an observation
carries the new chat ``messages``, the task's ``tools`` (OpenAI function schemas, on reset), ``done``, and
``reward`` (0 until the episode ends, then the benchmark's score, as in gymnasium). ``info`` holds the
scorer's details and the compact trace once the episode ends. Each WebSocket session gets its own env
instance (``SUPPORTS_CONCURRENT_SESSIONS``): a lopd env keeps no state between instances.

Limits: the env's tools are described to the model, not exposed as MCP tools (a lopd env parses and
executes the calls itself, per task, as the benchmark does); OpenEnv's web UI (``/web``) is not built
(``create_fastapi_app``, the API only).
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Optional
from uuid import uuid4

import gymnasium as gym
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

import lopd_envs
from lopd_envs import provenance


class LopdAction(Action):
    """One assistant turn: raw ``text`` (the env parses tool calls out of it), or structured ``tool_calls``."""

    text: str = Field(default="", description="the model's raw reply")
    tool_calls: Optional[list[dict[str, Any]]] = Field(
        default=None, description='structured calls: [{"name": ..., "arguments": {...}}]')


class LopdObservation(Observation):
    """The env's new chat messages; on reset also the task's tools."""

    messages: list[dict[str, Any]] = Field(default_factory=list, description="new chat messages (OpenAI format)")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI function schemas (on reset)")
    task_id: str = ""
    category: str = ""
    info: dict[str, Any] = Field(default_factory=dict, description="error, score details and trace at the end")


class LopdState(State):
    env_id: str = ""
    task_id: str = ""
    done: bool = False


class LopdEnvironment(Environment[LopdAction, LopdObservation, LopdState]):
    """One lopd env behind OpenEnv's ``Environment`` interface."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str, **env_kwargs: Any):
        super().__init__()
        gym.register_envs(lopd_envs)
        self.env_id = env_id
        self.env = gym.make(env_id, **env_kwargs)
        self._state = LopdState(env_id=env_id)

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
              task_id: Optional[str] = None, **kwargs: Any) -> LopdObservation:
        obs, info = self.env.reset(seed=seed, options={"task_id": task_id} if task_id is not None else None)
        self._state = LopdState(episode_id=episode_id or str(uuid4()), step_count=0, env_id=self.env_id,
                                task_id=info["task_id"])
        return LopdObservation(messages=obs, tools=info.get("tools") or [], task_id=info["task_id"],
                               category=info.get("category", ""), done=False, reward=0.0,
                               metadata={"provenance": provenance.of(self.env, hashes=False)})

    def step(self, action: LopdAction, timeout_s: Optional[float] = None, **kwargs: Any) -> LopdObservation:
        turn: Any = action.text
        if action.tool_calls:
            turn = {"role": "assistant", "content": action.text, "tool_calls": action.tool_calls}
        obs, reward, terminated, truncated, info = self.env.step(turn)
        self._state.step_count += 1
        done = bool(terminated or truncated)
        self._state.done = done
        public = {k: v for k, v in info.items() if k in ("error", "score", "turn")}
        if done and info.get("trace") is not None:
            public["trace"] = info["trace"].to_dict()
            public["truncated"] = bool(truncated and not terminated)
        return LopdObservation(messages=obs, task_id=self._state.task_id, category=info.get("category", ""),
                               done=done, reward=float(reward), info=json.loads(json.dumps(public, default=str)))

    @property
    def state(self) -> LopdState:
        return self._state

    def close(self) -> None:
        self.env.close()


def create_app(env_id: str, max_concurrent_envs: int = 4, **env_kwargs: Any):
    """The FastAPI app serving ``env_id`` (one env per session, built with ``env_kwargs``). The env is made
    once here first, so a bad id, keyword or missing data fails at start-up, not at the first reset."""
    LopdEnvironment(env_id, **env_kwargs).close()
    return create_fastapi_app(lambda: LopdEnvironment(env_id, **env_kwargs), LopdAction, LopdObservation,
                              max_concurrent_envs=max_concurrent_envs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lopd_train.integrations.openenv",
                                     description="Serve a lopd env as an OpenEnv environment.")
    parser.add_argument("env_id", help="a lopd id, e.g. lopd/BFCLv3-v0")
    parser.add_argument("--env-kwargs", default="{}", help="gym.make keyword arguments, as a JSON object")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-concurrent-envs", type=int, default=4, help="WebSocket sessions at once")
    args = parser.parse_args(argv)
    import uvicorn

    app = create_app(args.env_id, args.max_concurrent_envs, **json.loads(args.env_kwargs))
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
