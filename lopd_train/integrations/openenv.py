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

Hostile or careless clients: a WebSocket that sends nothing for ``idle_timeout`` seconds is closed and
its session freed (at most ``max_sessions`` at once, so idle clients cannot lock the others out); a
client's mistake (an unknown ``reset`` argument or task id, a step before reset or after the end, HTTP
``/step``) is a 4xx answer, or a WebSocket error message, saying what was wrong, never a 500. HTTP
``/reset`` builds a fresh env per request, so an episode lives in a WebSocket session (``/ws``, what
``GenericEnvClient`` uses); HTTP ``/step`` says so.

Limits: the env's tools are described to the model, not exposed as MCP tools (a lopd env parses and
executes the calls itself, per task, as the benchmark does); OpenEnv's web UI (``/web``) is not built
(``create_fastapi_app``, the API only).
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import sys
from typing import Any, cast
from uuid import uuid4

import gymnasium as gym
from fastapi import Request
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

import lopd_envs
from lopd_envs import provenance

#: The arguments ``reset`` takes; anything else is refused (a misspelt ``taskid`` must not play another task).
RESET_ARGS = ("seed", "episode_id", "task_id")
#: Seconds a WebSocket may stay silent before its session is closed, by default.
IDLE_TIMEOUT = 300.0
#: What HTTP ``/step`` answers: an episode needs a session, and HTTP requests have none.
NO_HTTP_STEP = ("HTTP /step has no episode to step: each HTTP request gets a fresh env. Play an episode in a "
                "WebSocket session: connect to /ws (openenv's GenericEnvClient(base_url=...) does), send reset, "
                "then step")


class LopdRequestError(ValueError):
    """A client's mistake: answered 400 over HTTP and as an error message over the WebSocket."""


def _nearest(name: str, valid: list[str]) -> str:
    near = difflib.get_close_matches(str(name)[:200], valid, n=3, cutoff=0.5)
    return f"; did you mean {' or '.join(repr(v) for v in near)}?" if near else ""


def check_reset_args(seed: Any, task_id: Any, extra: dict[str, Any], task_ids: list[str]) -> None:
    """Refuse what ``reset`` cannot honour exactly, naming the accepted arguments or the nearest task ids."""
    if extra:
        first = min(extra)
        raise LopdRequestError(f"reset: unknown argument(s) {', '.join(repr(k)[:80] for k in sorted(extra))}; "
                               f"accepted: {', '.join(RESET_ARGS)}{_nearest(first, list(RESET_ARGS))}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise LopdRequestError(f"reset: seed must be a non-negative integer, not {seed!r:.80}")
    if task_id is not None:
        if not isinstance(task_id, str):
            raise LopdRequestError(f"reset: task_id must be a string, not {type(task_id).__name__}")
        if task_id not in set(task_ids):
            raise LopdRequestError(f"reset: unknown task_id {task_id!r:.200} ({len(task_ids)} tasks, e.g. "
                                   f"{task_ids[0]!r}){_nearest(task_id, task_ids)}")


class LopdAction(Action):
    """One assistant turn: raw ``text`` (the env parses tool calls out of it), or structured ``tool_calls``."""

    text: str = Field(default="", description="the model's raw reply")
    tool_calls: list[dict[str, Any]] | None = Field(
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

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              task_id: str | None = None, **kwargs: Any) -> LopdObservation:
        served = cast(lopd_envs.AgentEnv, self.env.unwrapped).tasks
        # **kwargs only so that openenv passes unknown arguments on (it drops what a signature lacks): refused
        check_reset_args(seed, task_id, kwargs, [t.task_id for t in served])
        obs, info = self.env.reset(seed=seed, options={"task_id": task_id} if task_id is not None else None)
        self._state = LopdState(episode_id=episode_id or str(uuid4()), step_count=0, env_id=self.env_id,
                                task_id=info["task_id"])
        return LopdObservation(messages=obs, tools=info.get("tools") or [], task_id=info["task_id"],
                               category=info.get("category", ""), done=False, reward=0.0,
                               metadata={"provenance": provenance.of(self.env, hashes=False)})

    def step(self, action: LopdAction, timeout_s: float | None = None, **kwargs: Any) -> LopdObservation:
        if not self._state.task_id:
            raise LopdRequestError("step before reset: send a reset first")
        if self._state.done:
            raise LopdRequestError("the episode has ended: send a reset to play another")
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


class IdleTimeout:
    """ASGI middleware: a WebSocket whose client sends nothing for ``seconds`` is closed, so its session and
    env are freed (the server's WebSocket handler then sees a disconnect). Time the server spends on a step
    is not idle time: only the wait for the client's next message is."""

    def __init__(self, app: Any, seconds: float):
        self.app, self.seconds = app, seconds

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        closed = False

        async def timed_receive() -> dict:
            nonlocal closed
            if closed:
                return {"type": "websocket.disconnect", "code": 1001}
            try:
                async with asyncio.timeout(self.seconds):
                    return await receive()
            except TimeoutError:
                closed = True
                await send({"type": "websocket.close", "code": 1001,
                            "reason": f"idle for {self.seconds:g} s: session closed"})
                return {"type": "websocket.disconnect", "code": 1001}

        async def guarded_send(message: dict) -> None:
            if not closed:  # after our close, the handler's own goodbye has nowhere to go
                await send(message)

        await self.app(scope, timed_receive, guarded_send)


async def _client_error(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(status_code=400, content={"detail": str(exc)})


async def _no_http_step(request: Request) -> JSONResponse:
    return JSONResponse(status_code=409, content={"detail": NO_HTTP_STEP})


def create_app(env_id: str, max_concurrent_envs: int = 4, idle_timeout: float = IDLE_TIMEOUT, **env_kwargs: Any):
    """The FastAPI app serving ``env_id`` (one env per session, built with ``env_kwargs``; at most
    ``max_concurrent_envs`` sessions; a WebSocket silent for ``idle_timeout`` seconds is closed). The env is
    made once here first, so a bad id, keyword or missing data fails at start-up, not at the first reset."""
    if not (isinstance(max_concurrent_envs, int) and max_concurrent_envs >= 1):
        raise ValueError(f"max_concurrent_envs must be an integer of at least 1, not {max_concurrent_envs!r}")
    if not (isinstance(idle_timeout, (int, float)) and 0 < idle_timeout < float("inf")):
        raise ValueError(f"idle_timeout must be a positive number of seconds, not {idle_timeout!r}")
    LopdEnvironment(env_id, **env_kwargs).close()
    app = create_fastapi_app(lambda: LopdEnvironment(env_id, **env_kwargs), LopdAction, LopdObservation,
                             max_concurrent_envs=max_concurrent_envs)
    app.add_exception_handler(LopdRequestError, _client_error)
    # openenv's HTTP /step steps a fresh, never-reset env (a 500 for a lopd env): replaced by an answer that
    # says where episodes live
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) != "/step"]
    app.add_api_route("/step", _no_http_step, methods=["POST"], status_code=409,
                      summary="Not available over HTTP: step in a WebSocket session (/ws)")
    app.add_middleware(IdleTimeout, seconds=float(idle_timeout))
    return app


def _refuse(message: str) -> None:
    """A command-line mistake: one line on stderr, exit status 2."""
    print(f"python -m lopd_train.integrations.openenv: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lopd_train.integrations.openenv",
                                     description="Serve a lopd env as an OpenEnv environment.")
    parser.add_argument("env_id", help="a lopd id, e.g. lopd/BFCLv3-v0")
    parser.add_argument("--env-kwargs", default="{}", help="gym.make keyword arguments, as a JSON object")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-sessions", "--max-concurrent-envs", dest="max_sessions", type=int, default=4,
                        help="WebSocket sessions at once (each holds its own env; default 4)")
    parser.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT,
                        help=f"seconds a WebSocket may send nothing before its session is closed (default "
                             f"{IDLE_TIMEOUT:g})")
    args = parser.parse_args(argv)
    try:
        env_kwargs = json.loads(args.env_kwargs)
    except ValueError as exc:
        _refuse(f"--env-kwargs is not JSON ({exc})")
    if not isinstance(env_kwargs, dict):
        _refuse("--env-kwargs must be a JSON object of gym.make keyword arguments")
    if args.max_sessions < 1:
        _refuse(f"--max-sessions must be at least 1, not {args.max_sessions}")
    if not 0 < args.idle_timeout < float("inf"):
        _refuse(f"--idle-timeout must be a positive number of seconds, not {args.idle_timeout}")
    import uvicorn

    try:
        app = create_app(args.env_id, args.max_sessions, args.idle_timeout, **env_kwargs)
    except (gym.error.Error, TypeError, ValueError, FileNotFoundError) as exc:  # id, keyword, category, data
        _refuse(f"{args.env_id}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
