"""The env contract of docs/design.md section 3 as reusable tests.

A suite's test module subclasses :class:`Conformance`, sets ``env_id`` and ``kwargs`` (and optionally
``good_action``), and pytest runs every check below against it:

    class TestSimple(Conformance):
        env_id = "lopd/BFCLv3-v0"
        kwargs = {"category": "simple"}
"""

from __future__ import annotations

import copy
import threading
from typing import Any, ClassVar

import gymnasium as gym
from gymnasium.utils.env_checker import check_env

import lopd_envs
from lopd_envs.spaces import ChatMessages
from lopd_envs.trace import Trace

gym.register_envs(lopd_envs)


def adversarial_actions(tool_name: str) -> list[Any]:
    """Malformed, unknown-tool and bad-argument actions every env must survive."""
    return [
        "",
        "<tool_call>{not json</tool_call>",
        '<tool_call>{"name": 5, "arguments": {}}</tool_call>',
        '{"name": "no_such_tool_xyz", "arguments": {}}',
        '[{"name": "no_such_tool_xyz"}]',
        f"[{tool_name}(x=open('/etc/passwd').read())]",
        f"[{tool_name}(1, 2, 3)]",
        "[f(x=",
        "[" * 5000 + "]" * 5000,
        "A" * 300_000,
        f'<tool_call>{{"name": "{tool_name}", "arguments": {{"__bogus__": [1, {{"x": null}}]}}}}</tool_call>',
        {"role": "assistant", "content": "", "tool_calls": [{"name": tool_name, "arguments": "{broken"}]},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "no_such_tool_xyz", "arguments": {}}]},
        {"role": "assistant", "content": None, "tool_calls": "not a list"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": tool_name, "arguments": [1, 2]}]},
    ]


def has_error(observation: list[dict[str, Any]]) -> bool:
    return any("error" in str(m.get("content", "")).lower() for m in observation)


class Conformance:
    env_id: ClassVar[str]
    kwargs: ClassVar[dict[str, Any]] = {}

    def make(self, **extra: Any) -> gym.Env:
        return gym.make(self.env_id, **{**self.kwargs, **extra})

    def first_tool(self, info: dict[str, Any]) -> str:
        tools = info.get("tools") or []
        return tools[0]["function"]["name"] if tools else "some_tool"

    def text_action(self, info: dict[str, Any]) -> Any:
        """A well-formed action in text; suites override with something meaningful."""
        return "I have finished."

    def structured_action(self, info: dict[str, Any]) -> Any:
        return {"role": "assistant", "content": "", "tool_calls": [{"name": self.first_tool(info), "arguments": {}}]}

    # -- the checks ------------------------------------------------------------------------------
    def test_check_env(self):
        env = self.make()
        check_env(env.unwrapped)
        env.close()

    def test_reset_contract(self):
        env = self.make()
        obs, info = env.reset(seed=0)
        assert ChatMessages().contains(obs) and obs, obs
        assert obs[-1]["role"] == "user" or any(m["role"] == "user" for m in obs)
        assert {"task_id", "tools", "category"} <= set(info)
        for tool in info["tools"]:
            assert tool["type"] == "function" and "name" in tool["function"]
        again, info2 = env.reset(options={"task_id": info["task_id"]})
        assert info2["task_id"] == info["task_id"] and again == obs

    def test_unknown_task_id_is_a_clear_error(self):
        env = self.make()
        try:
            env.reset(options={"task_id": "no-such-task-999"})
        except ValueError as exc:
            assert "no-such-task-999" in str(exc)
        else:
            raise AssertionError("unknown task_id must raise ValueError")

    def test_seed_determinism(self):
        env = self.make()
        a = [env.reset(seed=s)[1]["task_id"] for s in (1, 2, 3)]
        b = [env.reset(seed=s)[1]["task_id"] for s in (1, 2, 3)]
        assert a == b

    def test_text_and_structured_actions(self):
        env = self.make()
        for action_fn in (self.text_action, self.structured_action):
            _, info = env.reset(seed=5)
            obs, reward, terminated, truncated, step_info = env.step(action_fn(info))
            assert ChatMessages().contains(obs)
            assert 0.0 <= float(reward) <= 1.0
            assert isinstance(step_info["trace"], Trace) and step_info["trace"].steps
            if terminated or truncated:
                assert "score" in step_info

    def test_adversarial_actions_never_raise(self):
        env = self.make()
        _, info = env.reset(seed=7)
        for action in adversarial_actions(self.first_tool(info)):
            env.reset(options={"task_id": info["task_id"]})
            obs, reward, terminated, truncated, step_info = env.step(action)
            assert ChatMessages().contains(obs)
            assert 0.0 <= float(reward) <= 1.0
            assert terminated or truncated or has_error(obs) or obs, (action if isinstance(action, dict) else action[:80])
            if terminated or truncated:
                assert "score" in step_info

    def test_episode_runs_to_the_end_and_trace_round_trips(self):
        env = self.make()
        _, info = env.reset(seed=11)
        for _ in range(env.unwrapped.max_turns + 1):
            _, _, terminated, truncated, step_info = env.step(self.text_action(info))
            if terminated or truncated:
                break
        assert terminated or truncated
        trace = step_info["trace"]
        assert Trace.from_json(trace.to_json()) == trace
        assert trace.task_id == info["task_id"] and trace.env_id == self.env_id
        assert all(len(s.result) <= 240 for s in trace.steps)

    def test_no_state_leaks_between_episodes(self):
        fresh, used = self.make(), self.make()
        _, info = used.reset(seed=3)
        task = {"task_id": info["task_id"]}
        for action in adversarial_actions(self.first_tool(info))[:6]:
            used.reset(options=task)
            used.step(action)
            used.step(self.structured_action(info)) if not used.unwrapped._done else None
        a = used.reset(options=task)[0]
        b = fresh.reset(options=task)[0]
        assert a == b
        ra = used.step(self.structured_action(info))
        rb = fresh.step(self.structured_action(info))
        assert ra[0] == rb[0] and ra[1] == rb[1] and ra[2] == rb[2]

    def test_threads(self):
        """Vectorised use: independent envs stepped from threads give the same results as sequentially."""
        def episode(out: list, seed: int) -> None:
            env = self.make()
            _, info = env.reset(seed=seed)
            result = env.step(self.structured_action(info))
            out.append((seed, info["task_id"], copy.deepcopy(result[0]), result[1]))

        sequential: list = []
        for s in range(4):
            episode(sequential, s)
        threaded: list = []
        threads = [threading.Thread(target=episode, args=(threaded, s)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(threaded, key=lambda r: r[0]) == sequential
