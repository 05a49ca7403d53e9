"""Every one of lopd's own EnvScaler scenarios, played through the sandboxed env: the scripted solution reaches
1.0, doing nothing scores exactly the fraction of checks that hold at reset, and the partial solution scores
exactly the fraction of checks it satisfies (the annotations in ``lopd_ours_solutions.json``, which
``build.py`` verified in-process on the same classes)."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.suites.envscaler import data
from lopd_envs.suites.envscaler.ours import build
from lopd_envs.suites.envscaler.users import STOP

gym.register_envs(lopd_envs)
SOLUTIONS = json.loads((data.OURS_DIR / "lopd_ours_solutions.json").read_text())
ROWS = {r["task_id"]: r for r in json.loads(data.ours_paths()[1].read_text())}
IDS = list(ROWS)


def hermes(call: dict) -> str:
    return f"<think>I will call {call['name']}.</think>\n<tool_call>{json.dumps(call)}</tool_call>"


@pytest.fixture(scope="module")
def env():
    e = gym.make("lopd/EnvScaler-v0", source="ours", category="non_conversation")
    yield e
    e.close()


def play(env, task_id: str, calls: list[dict]) -> tuple[float, dict]:
    env.reset(options={"task_id": task_id})
    for call in calls:
        _, reward, terminated, truncated, _ = env.step(hermes(call))
        assert not (terminated or truncated), f"{task_id}: {call} ended the episode"
        assert reward == 0.0
    _, reward, terminated, _, info = env.step("Task Completed")
    assert terminated and info["score"]["graded"]
    return reward, info["score"]


def expected(task_id: str, passing: list[int]) -> float:
    return round(len(passing) / len(ROWS[task_id]["checklist"]), 4)


def passing(score: dict) -> list[int]:
    return [i for i, c in enumerate(score["checks"]) if c["passed"]]


@pytest.mark.parametrize("task_id", IDS)
def test_scripted_solution_reaches_one(env, task_id):
    reward, score = play(env, task_id, SOLUTIONS[task_id]["calls"])
    assert reward == 1.0, score["checks"]


@pytest.mark.parametrize("task_id", IDS)
def test_doing_nothing_scores_the_checks_true_at_reset(env, task_id):
    reward, score = play(env, task_id, [])
    want = SOLUTIONS[task_id]["true_at_reset"]
    assert passing(score) == want and reward == expected(task_id, want)


@pytest.mark.parametrize("task_id", IDS)
def test_partial_solution_scores_its_fraction(env, task_id):
    reward, score = play(env, task_id, SOLUTIONS[task_id]["partial_calls"])
    want = SOLUTIONS[task_id]["true_after_partial"]
    assert passing(score) == want and reward == expected(task_id, want)
    assert reward < 1.0


def test_scenarios_cover_eight_kinds_of_environment_and_mix_difficulty():
    assert len(IDS) >= 40 and len({r["env_id"] for r in ROWS.values()}) == 8
    lengths = [len(s["calls"]) for s in SOLUTIONS.values()]
    assert sum(n <= 2 for n in lengths) >= 10 and sum(n >= 3 for n in lengths) >= 10
    # constraint rules are exercised: in at least 10 scripted solutions some call is refused by a rule
    envs = json.loads(data.ours_paths()[0].read_text())
    refused = 0
    for task_id, sol in SOLUTIONS.items():
        instance = build._instance(envs[ROWS[task_id]["env_id"]], ROWS[task_id]["init_config"])
        refused += any(getattr(instance, c["name"])(**c["arguments"]).get("success") is False for c in sol["calls"])
    assert refused >= 10
    total = sum(len(r["checklist"]) for r in ROWS.values())
    at_reset = sum(len(s["true_at_reset"]) for s in SOLUTIONS.values())
    assert 0.05 < at_reset / total < 0.35  # like the official data (~15%): a do-nothing agent scores a little


@pytest.mark.parametrize("task_id", IDS)
def test_conversational_scripted_user_and_solution(task_id):
    """The scripted user reveals the task line by line; the agent asks once per line, acts, reports."""
    lines = SOLUTIONS[task_id]["user_lines"]
    env = gym.make("lopd/EnvScaler-v0", source="ours", category="conversation", user=lines)
    obs, info = env.reset(options={"task_id": task_id + ":conv"})
    assert obs[-1] == {"role": "user", "content": lines[0]}
    for expected_line in lines[1:-1]:
        obs, _, terminated, _, _ = env.step("Could you tell me more?")
        assert not terminated and obs[-1]["content"] == expected_line
    for call in SOLUTIONS[task_id]["calls"]:
        assert not env.step({"role": "assistant", "content": "", "tool_calls": [call]})[2]
    obs, reward, terminated, _truncated, info = env.step("All done. Anything else?")
    assert terminated and obs[-1]["content"] == STOP and reward == 1.0
    assert info["score"]["mode"] == "conversation"
    env.close()


@pytest.mark.parametrize("task_id", IDS[::3])
def test_strict_scores_only_checks_false_at_reset(task_id):
    env = gym.make("lopd/EnvScaler-v0", source="ours", category="non_conversation", scoring="strict")
    reward, score = play(env, task_id, [])
    n, k = len(ROWS[task_id]["checklist"]), len(SOLUTIONS[task_id]["true_at_reset"])
    assert reward == (0.0 if k < n else 1.0) and score["official_reward"] == round(k / n, 4)
    assert score["true_at_reset"] == k
    assert [i for i, c in enumerate(score["checks"]) if c["at_reset"]] == SOLUTIONS[task_id]["true_at_reset"]
    reward, _ = play(env, task_id, SOLUTIONS[task_id]["calls"])
    assert reward == 1.0
    env.close()


def test_eval_and_train_splits_of_ours_partition_the_scenarios():
    eval_env = gym.make("lopd/EnvScaler-v0", source="ours", split="eval", category="non_conversation")
    train_env = gym.make("lopd/EnvScaler-v0", source="ours", split="train", category="non_conversation")
    eval_ids = {t.task_id for t in eval_env.unwrapped.tasks}
    train_ids = {t.task_id for t in train_env.unwrapped.tasks}
    assert eval_ids and not eval_ids & train_ids and eval_ids | train_ids == set(IDS)
    assert len({ROWS[t]["env_id"] for t in eval_ids}) == 8


def test_all_category_holds_both_modes_with_their_step_limits():
    env = gym.make("lopd/EnvScaler-v0", source="ours")
    cats = {t.category for t in env.unwrapped.tasks}
    assert cats == {"non_conversation", "conversation"} and len(env.unwrapped.tasks) == 2 * len(IDS)
    env.reset(options={"task_id": IDS[0]})
    assert env.unwrapped.max_turns == 30
    env.reset(options={"task_id": IDS[0] + ":conv"})
    assert env.unwrapped.max_turns == 40
    env.close()
