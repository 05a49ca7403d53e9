"""BFCL's ``few_shot`` prompt for training studies: worked examples before the question, each question
restating its functions, the examples never served as tasks, and scoring unchanged."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.suites.bfcl.prompts import FEW_SHOT_QUESTION

gym.register_envs(lopd_envs)
pytestmark = pytest.mark.usefixtures("bfcl_data")


def test_examples_come_before_the_question_and_restate_functions():
    plain = gym.make("lopd/BFCLv3-v0", category="simple")
    shots = gym.make("lopd/BFCLv3-v0", category="simple", few_shot="simple_0, simple_1")
    base, _ = plain.reset(options={"task_id": "simple_24"})
    obs, _ = shots.reset(options={"task_id": "simple_24"})
    assert [m["role"] for m in obs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert obs[0] == base[0]  # the official system prompt, untouched
    task = shots.unwrapped.task
    assert obs[-1]["content"] == FEW_SHOT_QUESTION.format(functions=json.dumps(task.data.functions),
                                                          question=base[-1]["content"])
    demo = plain.unwrapped
    demo.reset(options={"task_id": "simple_0"})
    assert obs[2]["content"] == demo.reference_answer(demo.task)
    assert demo.task.instruction in obs[1]["content"] and obs[1]["content"].startswith("Functions: [")


def test_examples_are_not_served_and_scoring_is_unchanged():
    env = gym.make("lopd/BFCLv3-v0", category=["simple", "irrelevance"], few_shot=["simple_0", "simple_1"])
    ids = {t.task_id for t in env.unwrapped.tasks}
    assert "simple_0" not in ids and "simple_1" not in ids and len(ids) == 400 + 240 - 2
    with pytest.raises(ValueError, match="unknown task_id"):
        env.reset(options={"task_id": "simple_1"})
    env.reset(options={"task_id": "simple_24"})
    gold = env.unwrapped.reference_answer(env.unwrapped.task)
    assert env.step(gold)[1] == 1.0
    env.reset(options={"task_id": "simple_24"})
    assert env.step("The answer is 6.")[1] == 0.0


@pytest.mark.parametrize("few_shot, why", [("irrelevance_3", "no gold calls"), ("multi_turn_base_0", "single-turn"),
                                           ("simple_9999", "no task"), ("nonsense", "not a single-turn"),
                                           ("", None)])
def test_bad_examples_are_refused_clearly(few_shot, why):
    if why is None:
        assert gym.make("lopd/BFCLv3-v0", category="simple", few_shot=few_shot).unwrapped.demonstrations == []
        return
    with pytest.raises(ValueError, match=why):
        gym.make("lopd/BFCLv3-v0", category="simple", few_shot=few_shot)


def test_multi_turn_selection_is_refused():
    with pytest.raises(ValueError, match="single-turn categories"):
        gym.make("lopd/BFCLv3-v0", category="multi_turn_base", few_shot="simple_0")
