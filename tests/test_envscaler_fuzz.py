"""Hypothesis fuzz of ``lopd/EnvScaler-v0``: random actions (tool calls with random names and arguments,
reasoning blocks, structured messages, garbage) never raise out of ``step`` and always give a valid
observation and a reward in [0, 1]. The slow run plays at least 10,000 actions; the default run a few hundred."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lopd_envs
from lopd_envs.spaces import ChatMessages

gym.register_envs(lopd_envs)
TOOL_NAMES = ["get_account", "transfer", "deposit", "book_slot", "fulfill_order", "write_file", "create_event",
              "checkout_book", "purchase_tickets", "set_thermostat", "chat_with_user", "__init__", "__class__",
              "accounts", "_used", "no_such_tool"]
json_values = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False)
                           | st.text(max_size=20), lambda kids: st.lists(kids, max_size=3)
                           | st.dictionaries(st.text(max_size=8), kids, max_size=3), max_leaves=8)
arguments = st.dictionaries(st.sampled_from(["account_id", "amount", "sku", "path", "content", "slot_id", "x", ""])
                            | st.text(max_size=6), json_values, max_size=4)


@st.composite
def actions(draw):
    call = {"name": draw(st.sampled_from(TOOL_NAMES) | st.text(max_size=12)), "arguments": draw(arguments)}
    kind = draw(st.sampled_from(["hermes", "hermes", "hermes", "structured", "think", "bare", "text", "junk", "two"]))
    if kind == "hermes":
        return f"<tool_call>{json.dumps(call)}</tool_call>"
    if kind == "structured":
        return {"role": "assistant", "content": draw(st.text(max_size=10)), "tool_calls": [call]}
    if kind == "think":
        return f"<think>{draw(st.text(max_size=30))}</think>" + draw(st.sampled_from(["", f"<tool_call>{json.dumps(call)}</tool_call>"]))
    if kind == "bare":
        return json.dumps(call)
    if kind == "two":
        return f"<tool_call>{json.dumps(call)}</tool_call><tool_call>{json.dumps(call)}"
    if kind == "junk":
        return draw(st.text(max_size=200) | st.sampled_from(["<tool_call>{", "<think>", "[f(x=", "{}", "null", ""]))
    return draw(st.text(max_size=60))


def fuzz(n_examples: int, per_example: int, scoring: str) -> int:
    env = gym.make("lopd/EnvScaler-v0", source="ours", category="all", scoring=scoring, call_timeout=3.0)
    played = [0]

    @settings(max_examples=n_examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 10**6), batch=st.lists(actions(), min_size=per_example, max_size=per_example))
    def episode(seed, batch):
        env.reset(seed=seed)
        for action in batch:
            obs, reward, terminated, truncated, info = env.step(action)
            played[0] += 1
            assert ChatMessages().contains(obs)
            assert 0.0 <= reward <= 1.0
            if terminated or truncated:
                assert "score" in info
                env.reset(seed=seed)

    episode()
    env.close()
    return played[0]


def test_fuzz_small():
    assert fuzz(6, 40, "official") == 240


@pytest.mark.slow
@pytest.mark.parametrize("scoring", ["official", "strict"])
def test_fuzz_ten_thousand_actions(scoring):
    assert fuzz(200, 50, scoring) >= 10_000
