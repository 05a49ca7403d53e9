"""The env contract (tests/conformance.py) for the three code environments."""

from __future__ import annotations

import pytest

from lopd_envs.sandbox import available_backends
from tests.conformance import Conformance

pytestmark = pytest.mark.skipif(all(v is not None for v in available_backends().values()),
                                reason="no sandbox backend works here")

GOOD_ADD = "```python\ndef add(x: int, y: int):\n    return x + y\n```"


class CodeConformance(Conformance):
    def text_action(self, info):
        return "```python\ndef f():\n    return 0\n```"

    def structured_action(self, info):
        return {"role": "assistant", "content": "```python\nprint('hi')\n```", "tool_calls": []}


class TestHumanEvalPlus(CodeConformance):
    env_id = "lopd/HumanEvalPlus-v0"
    kwargs = {"category": "plus"}


class TestMBPPPlus(CodeConformance):
    env_id = "lopd/MBPPPlus-v0"
    kwargs = {"category": "base"}


class TestLiveCodeBench(CodeConformance):
    env_id = "lopd/LiveCodeBench-v0"
    kwargs = {"source": "samples"}


def test_make_without_prior_import():
    import gymnasium as gym
    env = gym.make("lopd_envs:lopd/HumanEvalPlus-v0")
    obs, info = env.reset(options={"task_id": "HumanEval/53"})
    assert info["task_id"] == "HumanEval/53" and info["tools"] == []
    _, reward, terminated, _, step_info = env.step(GOOD_ADD)
    assert terminated and reward == 1.0 and step_info["score"]["plus_status"] == "pass"
