"""ACEBench data as tasks: every row loads, ids and categories are the official ones, prompts are ACEBench's."""

from __future__ import annotations

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.suites.acebench import official_prompts as P
from lopd_envs.suites.acebench.data import (
    AGENT,
    CATEGORIES,
    GROUPS,
    NORMAL,
    SPECIAL,
    load_rows,
    load_tasks,
    tool_function,
)
from lopd_envs.suites.acebench.prompts import single_turn_messages

gym.register_envs(lopd_envs)

ROWS = {"en": 1023, "zh": 1017}
PER_CATEGORY = {  # rows per category, as in the official data_all/ at commit e6db74b
    "en": {"normal_multi_turn_user_adjust": 123, "normal_multi_turn_user_switch": 100,
           "normal_single_turn_single_function": 100, "normal_single_turn_parallel_function": 100,
           "agent_multi_step": 20, "agent_multi_turn": 30},
    "zh": {"normal_multi_turn_user_adjust": 116, "normal_multi_turn_user_switch": 101,
           "normal_single_turn_single_function": 100, "normal_single_turn_parallel_function": 100,
           "agent_multi_step": 20, "agent_multi_turn": 30},
}


@pytest.mark.parametrize("language", ["en", "zh"])
def test_all_rows_load_with_their_answers(language):
    tasks = load_tasks("all", language)
    assert len(tasks) == ROWS[language]
    assert len({t.task_id for t in tasks}) == ROWS[language]
    counts = {c: sum(t.category == c for t in tasks) for c in CATEGORIES}
    for category, n in PER_CATEGORY[language].items():
        assert counts[category] == n
    for category in CATEGORIES:
        if category not in PER_CATEGORY[language]:
            assert counts[category] == 50, category
    assert all(t.data.answer["id"] == t.task_id for t in tasks)


def test_task_ids_and_categories_are_official():
    tasks = {t.task_id: t for t in load_tasks("all", "en")}
    assert tasks["normal_atom_bool_3"].category == "normal_atom_bool"
    assert tasks["normal_multi_turn_user_adjust_0_1"].category == "normal_multi_turn_user_adjust"
    assert tasks["agent_multi_step_10"].category == "agent_multi_step"
    assert tasks["special_incomplete_0"].instruction.startswith("user: I need to manage a rental property")


def test_groups_lists_and_all_select_categories():
    assert {t.category for t in load_tasks("special", "zh")} == set(SPECIAL)
    assert {t.category for t in load_tasks("agent", "en")} == set(AGENT)
    assert {t.category for t in load_tasks("normal", "en")} == set(NORMAL)
    assert {t.category for t in load_tasks(["atom", "agent_multi_turn"], "en")} == set(GROUPS["atom"]) | {"agent_multi_turn"}


def test_unknown_category_and_language_are_clear_errors():
    with pytest.raises(ValueError, match="normal_atom_bool"):
        gym.make("lopd/ACEBench-v0", category="normal_atom_boolean")
    with pytest.raises(ValueError, match="zh"):
        gym.make("lopd/ACEBench-v0", language="fr")


def test_make_without_prior_import_and_with_kwargs():
    env = gym.make("lopd_envs:lopd/ACEBench-v0", category="special_irrelevant", language="zh")
    _obs, info = env.reset(seed=0)
    assert info["category"] == "special_irrelevant" and info["task_id"].startswith("special_irrelevant_")


def test_normal_prompt_is_acebench_text_with_time_and_function_repr():
    row = next(r for r in load_rows("normal_atom_number", "en") if r.question["time"])
    system, user = single_turn_messages(row.question, "normal_atom_number", "en")
    assert system["content"] == P.SYSTEM_PROMPT_FOR_NORMAL_DATA_EN.format(time=row.question["time"], function=row.question["function"])
    assert row.question["time"] in system["content"] and str(row.question["function"]) in system["content"]
    assert user["content"] == "Conversation history 1..t:\n" + row.question["question"]


def test_preference_prompt_carries_the_profile_and_special_prompt_the_templates():
    row = load_rows("normal_preference", "zh")[0]
    system = single_turn_messages(row.question, "normal_preference", "zh")[0]["content"]
    assert "人物画像" in system and str(row.question["profile"]) in system
    row = load_rows("special_incomplete", "zh")[0]
    system, user = single_turn_messages(row.question, "special_incomplete", "zh")
    assert "Missing necessary parameters" in system["content"] and user["content"].startswith("对话历史1..t:\n")


def test_observation_is_the_official_prompt_pair():
    env = gym.make("lopd/ACEBench-v0", category="normal_similar_api", language="zh")
    obs, info = env.reset(options={"task_id": "normal_similar_api_0"})
    assert [m["role"] for m in obs] == ["system", "user"]
    assert obs[1]["content"].startswith("对话历史1..t:\nuser: 请帮我查一下Jya品牌")
    assert {t["function"]["name"] for t in info["tools"]} == {f["name"] for f in env.unwrapped.task.data.question["function"]}


def test_distractor_functions_with_arguments_become_valid_tool_schemas():
    row = load_rows("normal_atom_bool", "en")[0]
    odd = next(f for f in row.question["function"] if "parameters" not in f)
    assert tool_function(odd)["parameters"] == odd["arguments"]
