"""The suites' ``reference_answer(task)`` hooks (what OPSD's teacher reads): given back to the env as the
action, a reference answer passes the official scorer, so the teacher is shown a right answer in the form
the student is asked for."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import lopd_envs

gym.register_envs(lopd_envs)


def make(env_id: str, **kw):
    try:
        return gym.make(env_id, **kw)
    except Exception as exc:  # noqa: BLE001 - data missing on this machine: say so loudly
        pytest.skip(f"{env_id} unavailable here: {type(exc).__name__}: {exc}")


def play(env, task) -> tuple[float, bool]:
    env.reset(options={"task_id": task.task_id})
    _, reward, terminated, truncated, info = env.step(env.unwrapped.reference_answer(task))
    assert terminated or truncated
    return reward, info["trace"].success


@pytest.mark.parametrize("env_id,kw,n", [
    ("lopd/BFCLv3-v0", {"category": "simple"}, 4),
    ("lopd/BFCLv3-v0", {"category": "java"}, 2),
    ("lopd/BFCLv3-v0", {"category": "irrelevance"}, 2),
    ("lopd/ACEBench-v0", {"category": "normal_atom_bool"}, 3),
    ("lopd/ACEBench-v0", {"category": "special_irrelevant"}, 2),
])
def test_a_tool_use_reference_answer_passes_the_official_check(env_id, kw, n):
    env = make(env_id, **kw)
    for task in env.unwrapped.tasks[:n]:
        reward, success = play(env, task)
        assert success and reward == 1.0, (task.task_id, env.unwrapped.reference_answer(task))


@pytest.mark.parametrize("env_id,task_id", [("lopd/HumanEvalPlus-v0", "HumanEval/0"), ("lopd/MBPPPlus-v0", "Mbpp/2")])
def test_the_canonical_solution_is_the_code_reference_and_passes(env_id, task_id):
    env = make(env_id)
    task = next(t for t in env.unwrapped.tasks if t.task_id == task_id)
    assert env.unwrapped.reference_answer(task).startswith("```python\n")
    assert play(env, task) == (1.0, True)


def test_bfcl_multi_turn_reference_lists_the_gold_calls_turn_by_turn():
    env = make("lopd/BFCLv3-v0", category="multi_turn_base")
    task = env.unwrapped.tasks[0]
    text = env.unwrapped.reference_answer(task)
    lines = text.splitlines()
    assert len(lines) == len(task.data.answer) and lines[0].startswith("Turn 1: [")
    for line, gold in zip(lines, task.data.answer):
        for call in gold:
            assert call.split("(")[0] + "(" in line


def test_envscaler_reference_is_the_scripted_solution_of_our_envs_and_none_for_official_ones():
    from lopd_envs.suites.envscaler import data
    from lopd_envs.tools import parse_tool_calls

    env = make("lopd/EnvScaler-v0", source="ours", category="non_conversation")
    try:
        solutions = json.loads((data.OURS_DIR / "lopd_ours_solutions.json").read_text())
        task = env.unwrapped.tasks[0]
        calls = parse_tool_calls(env.unwrapped.reference_answer(task)).tool_calls
        assert [c.to_dict() for c in calls] == solutions[task.data["scenario"].task_id]["calls"]
        env.unwrapped.origin = "official"  # an official scenario ships checks, not a solution
        assert env.unwrapped.reference_answer(task) is None
    finally:
        env.close()


def test_livecodebench_has_no_reference_answer():
    env = make("lopd/LiveCodeBench-v0", source="bundled")
    assert all(env.unwrapped.reference_answer(t) is None for t in env.unwrapped.tasks)
