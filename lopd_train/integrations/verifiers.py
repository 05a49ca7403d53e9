"""Any lopd env as a verifiers environment (the ``load_environment`` convention of verifiers' classic API,
``vf.MultiTurnEnv``; verifiers 0.1.9 to 0.3.x), so verifiers' own rollout loop, ``vf-eval`` and the trainers
built on it (prime-rl, verifiers' GRPO) can use it:

    import verifiers as vf
    env = vf.load_environment("lopd_train.integrations.verifiers", env="lopd/BFCLv3-v0", category="simple")
    results = env.evaluate_sync(client=vf.ClientConfig(api_base_url="http://127.0.0.1:8000/v1",
                                                       api_key_var="MY_KEY"), model="my-model", num_examples=8)

What maps to what: one dataset row per task of the lopd env (``prompt``: the env's opening messages;
``info``: the lopd id, the task id and, for native tool calling, the task's own ``tool_defs``, since every
BFCL or ACEBench task brings its own functions); per rollout a fresh lopd env is reset to that task, each
model reply is the env's action (native ``tool_calls`` as the structured action, or text, which the env
parses), and the env's answer comes back as tool messages (paired with the call ids) or a user message.
When the lopd env ends the episode, ``final_env_response`` ends the rollout, and the reward is the env's own
outcome score (reward function ``lopd_reward``; metric ``lopd_success``). ``tool_mode="text"`` sends no
``tool_defs`` and lists the tools in the system prompt instead (lopd's text protocol), for servers without
native tool calling.

``vf-eval`` runs it as is, with its env server on (its default): the environment records how to make it
again (``env_id``: this module, ``env_args``: every argument), which is what the server's worker processes
load. Every request is sent without null fields (:func:`strict_chat_messages`), which strict servers such as
llama.cpp's refuse. One installable package per benchmark (``environments/lopd_<name>/``, verifiers'
Environments Hub layout: ``vf-install lopd-bfcl -p environments``) wraps this module
(:func:`benchmark_environment`).

Limits: verifiers 0.4 has only its new ``verifiers.v1`` API (tasksets, envs and harness programs):
``lopd_train.integrations.verifiers_v1`` serves it, text protocol only. And a resolver cannot install a
recent verifiers beside lopd's evalplus pin: verifiers 0.3.1 and 0.4.0 depend on ``prime-sandboxes`` versions
that need ``protobuf>=6.31.1`` while evalplus 0.3.1 depends on ``google-generativeai`` (``protobuf<6``), which
lopd never imports (uv, unforced, falls back to verifiers 0.1.10); install with uv and an override
(``uv pip install -e . "verifiers>=0.1.9,<0.4" --override <(echo "protobuf>=6.31.1")``).
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

import gymnasium as gym

# an optional extra, absent where types are checked: pyright then takes this very module for it (it looks for an
# import it cannot find beside the importing file), so each use of verifiers' names carries an ignore
import verifiers as vf
from datasets import Dataset

import lopd_envs
from lopd_envs.chat import TextTools
from lopd_envs.wire import answered_calls, function_of, read_message
from lopd_train import textforms

TOOL_MODES = ("native", "text")


def _tool_def(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function schema as verifiers' provider-agnostic tool definition."""
    fn = function_of(schema)
    return {"name": fn["name"], "description": fn.get("description") or "",
            "parameters": fn.get("parameters") or {"type": "object", "properties": {}}}


def task_rows(env_id: str, env_kwargs: dict[str, Any], tasks: Sequence[str] | None, tool_mode: str,
              tool_syntax: str) -> Dataset:
    """One row per task: the opening messages as ``prompt``, the ids (and native tool definitions) in
    ``info`` (JSON text: tool schemas differ per task, which a typed Arrow column cannot hold)."""
    env = gym.make(env_id, **env_kwargs)
    try:
        lopd_env = cast(lopd_envs.AgentEnv, env.unwrapped)
        ids = list(tasks) if tasks is not None else [t.task_id for t in lopd_env.tasks]
        rows: dict[str, list] = {"prompt": [], "answer": [], "info": []}
        for task_id in ids:
            obs, info = env.reset(options={"task_id": task_id})
            tools = info.get("tools") or []
            native = tool_mode == "native" and tools
            prompt = TextTools(tool_syntax, "never" if native else "auto").apply(obs, tools)
            rows["prompt"].append([{"role": m["role"], "content": m["content"]} for m in prompt])
            rows["answer"].append("")
            extra = {"tool_defs": [_tool_def(t) for t in tools]} if native else {}
            rows["info"].append(json.dumps({"lopd_env": env_id, "task_id": info["task_id"], **extra}))
    finally:
        env.close()
    return Dataset.from_dict(rows)


def _action(message: Any) -> Any:
    """The model's reply as the lopd env's action: its native tool calls as the structured action (read as
    the wire format is, :func:`lopd_envs.wire.read_message`: arguments decoded when they are JSON), else its
    text."""
    content = message.content if isinstance(message.content, str) else json.dumps(message.content or "")
    calls = getattr(message, "tool_calls", None) or []
    if not calls:
        return content or ""
    return read_message({"role": "assistant", "content": content, "tool_calls": [
        {"id": getattr(c, "id", None), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in calls]}).action


def _answer(observation: list[dict[str, Any]], call_ids: list[str]) -> list[dict[str, Any]]:
    """The env's new messages in the wire format: a tool result answers the next call id
    (:func:`lopd_envs.wire.answered_calls`); without one (text mode, or more results than calls) it becomes
    a user message naming the tool."""
    out = []
    for m, k in zip(observation, answered_calls(observation, len(call_ids))):
        content = m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
        if k is not None:
            out.append({"role": "tool", "tool_call_id": call_ids[k], "content": content})
        elif m.get("role") == "tool":
            out.append({"role": "user", "content": f"[{m.get('name') or 'tool'} result] {content}"})
        else:
            out.append({"role": "user", "content": content})
    return _typed(out)


def _typed(messages: list[dict[str, Any]]) -> list[Any]:
    """The messages as verifiers' own message types where it has them (0.3: ``vf.UserMessage``,
    ``vf.ToolMessage``), which it would otherwise re-validate from dicts on every turn."""
    user, tool = getattr(vf, "UserMessage", None), getattr(vf, "ToolMessage", None)
    if user is None or tool is None:
        return messages
    return [tool(**m) if m["role"] == "tool" else user(**m) for m in messages]


def strict_chat_messages(messages: list[Any]) -> list[Any]:
    """Chat messages as strict OpenAI-compatible servers accept them: no key whose value is null (llama.cpp's
    server answers 500 to ``"reasoning_content": null``, ``"name": null`` or ``"tool_call_id": null``, and
    verifiers writes ``"tool_calls": null, "reasoning_content": null`` into every assistant message it sends,
    few-shot examples included), no empty ``tool_calls`` list (OpenAI refuses ``[]``), and a ``content``
    string wherever there are no tool calls (a message needs one or the other). Anything that is not a chat
    message (another client's prompt format) passes unchanged."""
    out = []
    for message in messages:
        if not (isinstance(message, Mapping) and "role" in message):
            out.append(message)
            continue
        clean = {k: v for k, v in message.items() if v is not None and not (k == "tool_calls" and not v)}
        if "tool_calls" in clean:
            clean["tool_calls"] = [{k: v for k, v in call.items() if v is not None}
                                   if isinstance(call, Mapping) else call for call in clean["tool_calls"]]
        elif "content" not in clean:
            clean["content"] = ""
        out.append(clean)
    return out


def strict_chat_client(client: Any) -> Any:
    """verifiers' model client, sending :func:`strict_chat_messages`: a shallow copy (same HTTP client and
    settings) whose ``to_native_prompt`` cleans what verifiers' own serialisation produced."""
    if getattr(client, "_lopd_strict", False) or not callable(getattr(client, "to_native_prompt", None)):
        return client
    native = client.to_native_prompt

    async def to_native_prompt(messages: Any) -> Any:
        prompt, extra = await native(messages)
        return (strict_chat_messages(prompt) if isinstance(prompt, list) else prompt), extra

    strict = copy.copy(client)
    strict.to_native_prompt = to_native_prompt
    strict._lopd_strict = True
    return strict


class LopdVerifiersEnv(vf.MultiTurnEnv):  # pyright: ignore[reportAttributeAccessIssue]
    """Each rollout plays one lopd episode: a fresh env per rollout (lopd envs are cheap to make and keep
    no state between instances), closed when verifiers cleans the rollout up."""

    def __init__(self, lopd_env: str, env_kwargs: dict[str, Any], **kwargs: Any):
        self.lopd_env, self.lopd_kwargs = lopd_env, dict(env_kwargs)
        self._live: dict[str, Any] = {}
        super().__init__(**kwargs)

    async def setup_state(self, state: vf.State) -> vf.State:  # pyright: ignore[reportAttributeAccessIssue]
        info = state["info"] if isinstance(state["info"], dict) else json.loads(state["info"])
        env = await asyncio.to_thread(gym.make, self.lopd_env, **self.lopd_kwargs)
        await asyncio.to_thread(env.reset, options={"task_id": info["task_id"]})
        self._live[state["trajectory_id"]] = env
        if state.get("client") is not None:  # every request of this rollout, few-shot turns included
            state["client"] = strict_chat_client(state["client"])
        state["lopd_reward"], state["lopd_success"], state["lopd_score"] = 0.0, False, None
        return state

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> vf.Messages:  # pyright: ignore[reportAttributeAccessIssue]
        env = self._live[state["trajectory_id"]]
        reply = messages[-1]
        action = _action(reply)
        obs, reward, terminated, truncated, info = await asyncio.to_thread(env.step, action)
        answer = _answer(obs, [c.id for c in (getattr(reply, "tool_calls", None) or [])])
        if terminated or truncated:
            trace = info.get("trace")
            state["lopd_reward"] = float(reward)
            state["lopd_success"] = bool(getattr(trace, "success", False))
            state["lopd_score"] = json.loads(json.dumps(info.get("score"), default=str))
            state["final_env_response"] = answer or _typed([{"role": "user", "content": "[episode over]"}])
        return answer

    @vf.cleanup  # pyright: ignore[reportAttributeAccessIssue]
    async def close_lopd_env(self, state: vf.State) -> None:  # pyright: ignore[reportAttributeAccessIssue]
        env = self._live.pop(state.get("trajectory_id"), None)
        if env is not None:
            await asyncio.to_thread(env.close)


async def lopd_reward(state: vf.State, **kwargs: Any) -> float:  # pyright: ignore[reportAttributeAccessIssue]
    """The lopd env's outcome score of the episode (0 when it did not end)."""
    return float(state.get("lopd_reward") or 0.0)


async def lopd_success(state: vf.State, **kwargs: Any) -> float:  # pyright: ignore[reportAttributeAccessIssue]
    return float(bool(state.get("lopd_success")))


MODULE = __name__  # the id under which verifiers (vf.load_environment, vf-eval, its env server) imports this module


def _task_list(tasks: Sequence[str] | str | None) -> list[str] | None:
    """``tasks`` as a list of task ids: a list, or one comma-separated string (``"simple_0,simple_1"``)."""
    return None if tasks is None else textforms.as_list(tasks)


def load_environment(env: str = "lopd/BFCLv3-v0", tasks: Sequence[str] | str | None = None,
                     tool_mode: str = "native", tool_syntax: str = "hermes", max_turns: int = -1,
                     **env_kwargs: Any) -> vf.Environment:  # pyright: ignore[reportAttributeAccessIssue]
    """A verifiers environment over the lopd env ``env`` (any registered lopd id), made with ``env_kwargs``
    (``category=...``, ``language=...``, ``few_shot=...``; checked strictly by the env); ``tasks``: task ids
    to keep (a list or one comma-separated string; default: all of the selected categories). The parameter
    is ``env``, not ``env_id``: ``vf.load_environment`` takes the module's id as its own first argument.

    The environment records how to make it again: ``env_id`` is this module's import name and ``env_args``
    holds every argument (``env``, ``tasks``, ``tool_mode``, ``tool_syntax``, ``max_turns`` and the env's
    own keywords). verifiers' env server (``vf-eval``'s default) re-creates the environment in its worker
    processes with ``vf.load_environment(env.env_id, **env.env_args)``, so both must load exactly this one."""
    if tool_mode not in TOOL_MODES:
        raise ValueError(f"tool_mode must be one of {TOOL_MODES}, got {tool_mode!r}")
    gym.register_envs(lopd_envs)
    task_ids = _task_list(tasks)
    dataset = task_rows(env, env_kwargs, task_ids, tool_mode, tool_syntax)
    rubric = vf.Rubric(funcs=[lopd_reward], weights=[1.0])  # pyright: ignore[reportAttributeAccessIssue]
    rubric.add_metric(lopd_success)
    env_args = {"env": env, "tasks": task_ids, "tool_mode": tool_mode, "tool_syntax": tool_syntax,
                "max_turns": max_turns, **env_kwargs}
    return LopdVerifiersEnv(env, env_kwargs, dataset=dataset, eval_dataset=dataset, rubric=rubric,
                            max_turns=max_turns, env_id=MODULE, env_args=env_args)


# The per-benchmark packages (environments/lopd_<name>/, verifiers' Environments Hub layout) are thin
# ``load_environment`` functions over this one.
def benchmark_environment(module: str, env: str, **arguments: Any) -> vf.Environment:  # pyright: ignore[reportAttributeAccessIssue]
    """``load_environment`` of a per-benchmark package: :func:`load_environment` with ``env`` fixed, recorded
    as made by the package (``module``: its module's import name; the id is the package's, ``lopd-bfcl``,
    which verifiers imports as ``lopd_bfcl``) with the package's own arguments, so that verifiers' env server
    re-loads it through the package."""
    environment = load_environment(env=env, **arguments)
    environment.env_id = module.replace("_", "-")
    environment.env_args = {k: v for k, v in environment.env_args.items() if k != "env"}
    return environment
