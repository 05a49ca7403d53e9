"""The env contract (tests/conformance.py) for the three code environments."""

from __future__ import annotations

import pytest

from lopd_envs.sandbox import Sandbox, available_backends
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
    _obs, info = env.reset(options={"task_id": "HumanEval/53"})
    assert info["task_id"] == "HumanEval/53" and info["tools"] == []
    _, reward, terminated, _, step_info = env.step(GOOD_ADD)
    assert terminated and reward == 1.0 and step_info["score"]["plus_status"] == "pass", step_info


class BrokenSandbox(Sandbox):
    """A sandbox whose machinery fails (an engine gone, a container that cannot start)."""

    name, isolating = "broken", True

    def _execute(self, *args, **kwargs):
        raise RuntimeError("the engine went away")


@pytest.mark.parametrize("env_id,task_id,kwargs", [("lopd/HumanEvalPlus-v0", "HumanEval/53", {"category": "plus"}),
                                                   ("lopd/LiveCodeBench-v0", None, {"source": "samples"})])
def test_a_broken_sandbox_is_an_error_observation_never_a_verdict(env_id, task_id, kwargs, monkeypatch):
    """Not a 'timeout' or 'fail' pinned on code that never ran (a closed docker sandbox once judged every
    later HumanEval+ answer 'timeout')."""
    import gymnasium as gym

    env = gym.make(env_id, **kwargs)
    _, _info = env.reset(options={"task_id": task_id} if task_id else None)
    if env_id.startswith("lopd/HumanEval"):  # the expected outputs, computed in a working sandbox
        gt = env.unwrapped.groundtruth
        monkeypatch.setattr(type(env.unwrapped), "groundtruth", property(lambda self: gt))
    env.unwrapped._sandbox_choice = BrokenSandbox()
    obs, reward, terminated, _, step_info = env.step(GOOD_ADD)
    assert terminated and reward == 0.0
    assert "not scored: the sandbox failed" in obs[-1]["content"] and "engine went away" in obs[-1]["content"]
    assert step_info["trace"].steps[-1].error and "RuntimeError" in step_info["score"]["sandbox_error"]
    assert "timeout" not in obs[-1]["content"] and step_info["score"].get("plus_status") in (None, "sandbox_error")
    env.close()


def test_expected_outputs_a_broken_sandbox_could_not_compute_leave_the_answer_unscored(tmp_path):
    import gymnasium as gym

    env = gym.make("lopd/HumanEvalPlus-v0", category="plus", sandbox=BrokenSandbox())
    env.reset(options={"task_id": "HumanEval/53"})
    _obs, reward, terminated, _, step_info = env.step(GOOD_ADD)
    assert terminated and reward == 0.0 and step_info["trace"].steps[-1].error
    assert "not scored" in step_info["score"]["error"] and "expected outputs are unavailable" in step_info["score"]["error"]
