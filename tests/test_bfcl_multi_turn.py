"""BFCL-v3 multi turn: simulated APIs, per-turn state and result checks, held-out functions, step limit."""

from __future__ import annotations

import collections
import copy

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.suites.bfcl import MULTI_TURN
from lopd_envs.suites.bfcl.api import Runner, new_instances
from lopd_envs.suites.bfcl.gold import as_text, keyword_call, multi_turn_gold_actions
from lopd_envs.suites.bfcl.multi_turn import missing_results

gym.register_envs(lopd_envs)
pytestmark = pytest.mark.usefixtures("bfcl_data")

# The official gold of all 800 multi-turn entries passes the official multi_turn_checker (run from the
# wheel on each turn's ground truth), except in the harness's runner multi_turn_base_154: its entry has 5
# user turns but 6 ground-truth turns, so every model's result is "force-terminated" (length mismatch).
GOLD_FAILS_OFFICIALLY = {"multi_turn_base_154": "multi_turn:force_terminated"}
PASSING_GOLD = {"multi_turn_base": 199, "multi_turn_miss_func": 200, "multi_turn_miss_param": 200,
                "multi_turn_long_context": 200}


def make(category: str = "multi_turn_base", **kwargs):
    return gym.make("lopd/BFCLv3-v0", category=category, **kwargs).unwrapped


def play(env, task_id: str, actions: list) -> tuple[float, dict]:
    env.reset(options={"task_id": task_id})
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return reward, info
    raise AssertionError("episode did not end")


def turn_actions(item, turns: list[list]) -> list:
    """Text actions: each turn's calls in one step, then a message that ends the turn."""
    out = []
    for calls in turns:
        if calls:
            out.append(as_text(calls))
        out.append("Done.")
    return out


def keyword_turns(item) -> list[list]:
    return [[keyword_call(c, item.entry["involved_classes"]) for c in turn] for turn in item.answer]


@pytest.mark.parametrize("category", MULTI_TURN)
@pytest.mark.parametrize("form", ["structured", "text"])
def test_gold_replay_scores_one_when_the_official_gold_passes(category, form):
    env = make(category)
    counts, failures = collections.Counter(), {}
    for task in env.tasks:
        reward, info = play(env, task.task_id, multi_turn_gold_actions(task.data.entry, task.data.answer, form))
        counts[reward] += 1
        if reward != 1.0:
            failures[task.task_id] = info["score"]["error_type"]
    assert counts[1.0] == PASSING_GOLD[category]
    assert failures == {k: v for k, v in GOLD_FAILS_OFFICIALLY.items() if k.startswith(category + "_")}


def test_gold_replay_total_is_799_of_800():
    assert sum(PASSING_GOLD.values()) == 799


def test_positional_arguments_in_text_are_dropped_as_by_the_harness():
    env = make()
    item = env.tasks[env._index["multi_turn_base_0"]].data
    positional = ["[" + ", ".join(turn) + "]" if turn else "" for turn in item.answer]  # sort('final_report.pdf')
    actions = [a for p in positional for a in ([p] if p else []) + ["Done."]]
    reward, info = play(env, "multi_turn_base_0", actions)
    assert reward == 0.0 and info["score"]["turn"] == 2


def test_tool_results_come_back_as_tool_messages():
    env = make()
    env.reset(options={"task_id": "multi_turn_base_0"})
    obs, reward, terminated, _, _ = env.step("[cd(folder='document'), ls()]")
    assert [m["role"] for m in obs] == ["tool", "tool"] and [m["name"] for m in obs] == ["cd", "ls"]
    assert "final_report.pdf" in obs[1]["content"] and reward == 0.0 and not terminated


def test_a_message_without_calls_ends_the_turn_and_the_next_user_turn_follows():
    env = make()
    env.reset(options={"task_id": "multi_turn_base_0"})
    obs, *_ = env.step("Sure, let me think.")
    assert obs[-1]["role"] == "user" and "grep" in obs[-1]["content"]


@pytest.mark.parametrize("call,message", [
    ("[no_such_function(a=1)]", "Error during execution: name 'no_such_function' is not defined"),
    ("[exit()]", "Error during execution: Function call exit is not allowed."),
    ("[cd(directory='x')]", "unexpected keyword argument 'directory'"),
    ("[print(x='hi')]", "Error during execution: name 'print' is not defined"),
])
def test_bad_calls_give_the_harness_error_results(call, message):
    env = make()
    env.reset(options={"task_id": "multi_turn_base_0"})
    obs, *_ = env.step(call)
    assert message in obs[0]["content"]


def test_failures_are_explained_in_the_official_terms():
    env = make()
    item = env.tasks[env._index["multi_turn_base_0"]].data
    turns = keyword_turns(item)
    reward, info = play(env, "multi_turn_base_0", turn_actions(item, [[], *turns[1:]]))
    assert reward == 0.0 and info["score"]["error_type"] == "multi_turn:empty_turn_model_response"
    changed = copy.deepcopy(turns)
    changed[0][-1].arguments["destination"] = "elsewhere"
    reward, info = play(env, "multi_turn_base_0", turn_actions(item, changed))
    assert info["score"]["error_type"] == "multi_turn:instance_state_mismatch"
    assert "differences" in info["score"]["details"]
    dropped = copy.deepcopy(turns)
    dropped[1] = dropped[1][:1]  # cd without the grep: same state, the grep result is missing
    reward, info = play(env, "multi_turn_base_0", turn_actions(item, dropped))
    assert info["score"]["error_type"] == "multi_turn:execution_response_mismatch"
    assert info["score"]["details"]["missing_items"]


def test_results_may_come_from_earlier_turns():
    assert missing_results(["a", "b"], ["b", "x", "a"]) == []
    assert missing_results(["a", "a"], ["a"]) == ["a"]


def test_held_out_functions_arrive_on_the_empty_user_turn():
    env = make("multi_turn_miss_func")
    item = env.tasks[env._index["multi_turn_miss_func_0"]].data
    _, info = env.reset(options={"task_id": "multi_turn_miss_func_0"})
    assert "sort" not in [t["function"]["name"] for t in info["tools"]] and list(item.holdout) == [3]
    for turn in keyword_turns(item)[:3]:
        if turn:
            env.step(as_text(turn))
        obs, *_ = env.step("Done.")
    revealed = obs[-1]
    assert revealed["role"] == "user" and "I have updated some more functions" in revealed["content"]
    assert [t["function"]["name"] for t in revealed["tools"]] == ["sort"]


def test_long_context_loads_the_long_scenario():
    env = make("multi_turn_long_context")
    env.reset(options={"task_id": "multi_turn_long_context_0"})
    long_ls = env.step("[cd(folder='document'), ls()]")[0][1]["content"]
    env = make("multi_turn_base")
    env.reset(options={"task_id": "multi_turn_base_0"})
    short_ls = env.step("[cd(folder='document'), ls()]")[0][1]["content"]
    assert len(long_ls) > len(short_ls)


def test_more_than_20_steps_in_a_turn_force_terminates():
    env = make()
    env.reset(options={"task_id": "multi_turn_base_0"})
    for step in range(21):
        _, reward, terminated, _, info = env.step("[pwd()]")
        assert terminated == (step == 20)
    assert reward == 0.0 and info["score"]["error_type"] == "multi_turn:force_terminated"


def test_calls_on_an_empty_gold_turn_pass_officially_and_fail_in_strict_mode():
    task_id = "multi_turn_miss_param_0"
    results = {}
    for scoring in ("official", "strict"):
        env = make("multi_turn_miss_param", scoring=scoring)
        item = env.tasks[env._index[task_id]].data
        turns = keyword_turns(item)
        empty = turns.index([])
        turns[empty] = [keyword_call("pwd()", item.entry["involved_classes"])]
        results[scoring] = play(env, task_id, turn_actions(item, turns))
    assert results["official"][0] == 1.0
    assert results["strict"][1]["score"]["error_type"] == "multi_turn:irrelevance_error:decoder_success"


def test_official_mode_rewrites_call_like_text_inside_strings_and_strict_does_not():
    env = make()
    item = env.tasks[env._index["multi_turn_base_0"]].data
    config, classes = item.entry["initial_config"], item.entry["involved_classes"]
    official = Runner(new_instances(classes, config, False), "m", strict=False)
    strict = Runner(new_instances(classes, config, False), "m", strict=True)
    for runner in (official, strict):
        runner.run("touch(file_name='note.txt')")
        runner.run("echo(content='then ls(a=True)', file_name='note.txt')")
    assert "m_gorillafilesystem_instance.ls(" in official.run("cat(file_name='note.txt')")
    assert strict.run("cat(file_name='note.txt')") == '{"file_content": "then ls(a=True)"}'


def test_resource_guards_refuse_runaway_math():
    runner = Runner(new_instances(["MathAPI"], {}, False), "m")
    assert "exponent too large" in runner.run("power(base=10, exponent=10**9)")
    assert "precision" in runner.run("square_root(number=2, precision=10**8)")
    assert runner.run("power(base=2, exponent=10)") == '{"result": 1024}'


def test_force_termination_on_the_last_turn_is_checked_officially_and_fails_in_strict_mode():
    """multi_turn_long_context_46 has one turn of 34 calls: made one per step, the 21st step ends it."""
    verdicts = {}
    for scoring in ("official", "strict"):
        env = make("multi_turn_long_context", scoring=scoring)
        item = env.tasks[env._index["multi_turn_long_context_46"]].data
        one_per_step = [as_text([c]) for c in keyword_turns(item)[0]]
        verdicts[scoring] = play(env, "multi_turn_long_context_46", one_per_step)[1]["score"]["error_type"]
    assert verdicts == {"official": "multi_turn:instance_state_mismatch", "strict": "multi_turn:force_terminated"}
