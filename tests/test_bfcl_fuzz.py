"""Property test: malformed and adversarial actions never escape ``step`` on BFCL envs.

Broken JSON, wrong nesting, huge strings, unknown tools, wrong argument types and Python-call syntax with
non-literals, as text and as structured messages, on single- and multi-turn tasks. Every action gets an
error observation, a next observation, or a score; no suite-internal error is ever reported. The default
run drives 1,000 actions; ``--runslow`` drives 10,000.
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lopd_envs
from lopd_envs.spaces import ChatMessages

gym.register_envs(lopd_envs)
pytestmark = pytest.mark.usefixtures("bfcl_data")

SINGLE = ["simple", "multiple", "parallel_multiple", "java", "javascript", "live_multiple", "irrelevance",
          "live_relevance"]
MULTI = ["multi_turn_base", "multi_turn_miss_func", "multi_turn_long_context"]
TOOL_NAMES = ["cd", "ls", "mkdir", "echo", "cat", "sort", "post_tweet", "send_message", "power",
              "square_root", "logarithm", "get_stock_info", "book_flight", "startEngine",
              "calculate_triangle_area", "math.factorial", "math_factorial", "exit", "kill", "_load_scenario",
              "__import__", "eval", "no_such_tool"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**30, max_value=10**30) | st.floats(allow_nan=True)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
names = st.sampled_from(TOOL_NAMES) | st.text(max_size=20)
arguments = st.dictionaries(st.sampled_from(["a", "folder", "file_name", "base", "exponent", "precision",
                                             "number", "content", "x", ""]) | st.text(max_size=10),
                            json_values, max_size=4)

NON_LITERALS = ["open('/etc/passwd').read()", "__import__('os').system('echo hi')", "lambda: 1", "[i for i in range(10)]",
                "(x := 5)", "a.b.c", "f'{1}'", "*args", "{**d}", "1 if True else 2", "not x", "-x", "2 ** 10 ** 10",
                "'a' * 10 ** 9", "x[0]", "{1, 2}", "await f()", "yield", "...", "b'bytes'", "1e999", "10**5000"]


@st.composite
def python_call_text(draw: Any) -> str:
    calls = []
    for _ in range(draw(st.integers(1, 3))):
        args = []
        for _ in range(draw(st.integers(0, 3))):
            key = draw(st.sampled_from(["a", "folder", "file_name", "base", "exponent", "precision", "x"]))
            value = draw(st.sampled_from(NON_LITERALS) | json_values.map(repr))
            args.append(f"{key}={value}")
        if draw(st.booleans()):
            args.insert(0, draw(st.sampled_from(NON_LITERALS)))
        calls.append(f"{draw(names)}({', '.join(args)})")
    text = "[" + ", ".join(calls) + "]"
    cut = draw(st.integers(0, len(text)))
    return text if draw(st.booleans()) else text[:cut]


@st.composite
def json_text(draw: Any) -> str:
    call = {draw(st.sampled_from(["name", "function", "nme"])): draw(names | json_values),
            draw(st.sampled_from(["arguments", "parameters", "args"])): draw(arguments | json_values)}
    body = json.dumps(draw(st.sampled_from([call, [call], {"function": call}, [[call]]])))
    body = body[: draw(st.integers(0, len(body)))] if draw(st.booleans()) else body
    return draw(st.sampled_from(["{}", "<tool_call>{}</tool_call>", "<tool_call>{}", "```json\n{}\n```"])).format(body) \
        if "{}" not in body else f"<tool_call>{body}</tool_call>"


huge = st.builds(lambda ch, n, wrap: wrap.format(ch * n), st.sampled_from(["A", "[", "(", "{", "中", "\\", "'"]),
                 st.integers(1000, 250_000), st.sampled_from(["{}", "[f(a='{}')]", "<tool_call>{}</tool_call>"]))

structured = st.fixed_dictionaries({
    "role": st.just("assistant"),
    "content": st.none() | st.text(max_size=30) | st.integers(),
    "tool_calls": st.none() | st.text(max_size=10) | st.lists(
        st.fixed_dictionaries({"name": names | json_values, "arguments": arguments | json_values | st.text(max_size=20)})
        | json_values, max_size=3),
})

actions = st.one_of(st.text(max_size=200), python_call_text(), json_text(), huge, structured, json_values)

COUNT = {"actions": 0}


def _check(env: gym.Env, action: Any) -> bool:
    obs, reward, terminated, truncated, info = env.step(action)
    COUNT["actions"] += 1
    assert ChatMessages().contains(obs)
    assert 0.0 <= float(reward) <= 1.0
    assert "internal" not in str(info.get("error", ""))
    if terminated or truncated:
        assert "score" in info and "scorer failed" not in str(info["score"].get("error", ""))
        return True
    assert obs or info.get("error")
    return False


def _drive(category_pool: list[str], examples: int, min_actions: int, max_actions: int) -> None:
    envs = {c: gym.make("lopd/BFCLv3-v0", category=c).unwrapped for c in category_pool}

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(category=st.sampled_from(category_pool), pick=st.integers(0, 10**6),
           batch=st.lists(actions, min_size=min_actions, max_size=max_actions))
    def run(category: str, pick: int, batch: list[Any]) -> None:
        env = envs[category]
        env.reset(options={"task_id": env.tasks[pick % len(env.tasks)].task_id})
        for action in batch:
            if _check(env, action):
                break

    run()


def _run(total: int) -> None:
    COUNT["actions"] = 0
    _drive(SINGLE, total // 2, 1, 1)
    single = COUNT["actions"]
    _drive(MULTI, total // 4, 2, 6)
    assert single >= total // 2 and COUNT["actions"] >= total, COUNT


def test_adversarial_actions_never_escape_step():
    _run(1_000)


@pytest.mark.slow
def test_ten_thousand_adversarial_actions_never_escape_step():
    _run(10_000)
